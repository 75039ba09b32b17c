"""A read fails before its first byte when any part it covers is known unreadable, not midway.

A GET's status goes out with the first chunk of its body. An object of several parts used to be
checked part by part as the body streamed: with the drives of its last part offline (a 5 MiB part
on one set of drives, a 777-byte tail on another), the client got 200, 5 MiB, then a cut
connection (the cluster test's "5 MiB read of 5 MiB + 777 bytes" on CI). Now every part in the
range is checked against the drives known offline first: a 503 the client can retry. A range
inside the readable part still reads. A real store on real drives, drives taken offline as
`tierstore admin domain offline` does.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from server.app import build_store
from server.config import load_config
from tiering.domains import set_domain_state
from tiering.errors import DataUnreadable
from tiering.records import ObjectMeta
from tiering.store import ObjectStore

BIG, TAIL = 5 * 1024 * 1024 + 4321, 777  # hot is 4+2: the big part striped, the tail in 3 replicas
TRIES = 20  # placements are random: try until the tail's drives hold at most 2 of the big part's 6


async def multipart(store: ObjectStore, key: str, parts: list[bytes]) -> None:
    upload = await store.create_upload("b", key, ObjectMeta(), checksum_algorithm=None, owner="me")
    listed = []
    for number, data in enumerate(parts, 1):
        pending = await store.begin_part(upload, size_hint=len(data), checksum_algorithm=None)
        await pending.write(data)
        listed.append((number, (await pending.commit_part(upload, number)).etag))
    await store.complete_upload("b", key, upload.upload_id, listed)


def test_a_read_whose_later_part_is_unreadable_fails_before_its_first_byte(tmp_path: Path) -> None:
    rng = random.Random(7)
    big, tail = rng.randbytes(BIG), rng.randbytes(TAIL)

    async def scenario() -> None:
        store = build_store(load_config(None, data_dir=tmp_path / "data"))
        await store.start()
        try:
            await store.create_bucket("b", "me", "us-east-1")
            for attempt in range(TRIES):
                key = f"two-parts-{attempt}"
                await multipart(store, key, [big, tail])
                record = await store.head_object("b", key)
                first, last = (s.stored.location["shards"] for s in record.segments)
                if len(set(first) & set(last)) <= 2:  # the big part stays readable (4 of 6 left)
                    break
            else:
                pytest.fail(f"no placement in {TRIES} tries left the first part readable")
            for drive in last:
                set_domain_state(store, drive, online=False)

            opened = await store.open_object("b", key)
            streamed: list[int] = []
            with pytest.raises(DataUnreadable):
                async for chunk in opened.stream(0, BIG + TAIL):
                    streamed.append(len(chunk))
            opened.close()
            assert streamed == [], f"{sum(streamed)} bytes went out before the read failed"

            opened = await store.open_object("b", key)  # a range inside the first part still reads
            assert b"".join([c async for c in opened.stream(1000, BIG)]) == big[1000:]
            opened.close()

            for drive in last:
                set_domain_state(store, drive, online=True)
            opened = await store.open_object("b", key)
            assert b"".join([c async for c in opened.stream(0, BIG + TAIL)]) == big + tail
            opened.close()
        finally:
            await store.close()

    asyncio.run(scenario())
