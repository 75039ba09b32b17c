"""Reads that outlast the retire grace stay safe when the collector runs in another process.

Two ObjectStores on one data directory stand for two `serve --workers` processes (each its own
catalog connection and pins). One opens an object, the other overwrites it and collects garbage
past the grace: the long read's blob must survive until it is released — and, as a control, a
read that was never published is not protected (so the test can fail).
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import pytest

import tiering.store as store_module
from server.app import build_store
from server.config import load_config
from tiering.errors import TieringError
from tiering.records import ObjectMeta
from tiering.store import ObjectStore

# Erasure-coded on hot, shards of 600 KB: above the pack threshold (512 KiB), so shard files of
# their own, opened only when the stream starts. (A packed shard's bytes stay in its pack until the
# writing process compacts it, so the unpinned control below could not fail on packs.)
SIZE = 2_400_000


async def put(store: ObjectStore, key: str, data: bytes) -> None:
    pending = await store.begin_put("b", "STANDARD", size_hint=len(data))
    await pending.write(data)
    await pending.commit_object("b", key, ObjectMeta())


async def read_all(opened: store_module.OpenedObject) -> bytes:
    return b"".join([c async for c in opened.stream(0, opened.record.size)])


def test_a_long_read_in_one_process_survives_the_collector_of_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = random.Random(1).randbytes(SIZE), random.Random(2).randbytes(SIZE)

    async def scenario() -> None:
        config = load_config(None, data_dir=tmp_path / "data")
        reader, collector = build_store(config), build_store(config)
        await reader.start()
        await collector.start()
        try:
            await reader.create_bucket("b", "me", "us-east-1")
            await put(reader, "published", old)
            await put(reader, "unpublished", old)
            long_read = await reader.open_object("b", "published")
            short_read = await reader.open_object("b", "unpublished")

            monkeypatch.setattr(store_module, "PIN_PUBLISH_AFTER", 3600.0)
            await reader.publish_pins()  # nothing is old enough yet: nothing published
            monkeypatch.setattr(store_module, "PIN_PUBLISH_AFTER", 0.0)
            reader._pinned_since[short_read.segments[0].stored.data_id] = time.monotonic() + 3600  # young
            await reader.publish_pins()

            await put(collector, "published", new)
            await put(collector, "unpublished", new)
            collected = await collector.collect_garbage(now=time.time() + 3600)  # far past the grace
            assert collected == 1  # the unpublished read's blob went; the published one stayed

            assert await read_all(long_read) == old
            with pytest.raises(TieringError):
                await read_all(short_read)  # the control: without a published pin the data is gone
            long_read.close()
            short_read.close()

            await reader.publish_pins()  # released: the pin is withdrawn
            assert await collector.collect_garbage(now=time.time() + 3600) == 1
            for key in ("published", "unpublished"):
                opened = await collector.open_object("b", key)
                try:
                    assert await read_all(opened) == new
                finally:
                    opened.close()
        finally:
            await collector.close()
            await reader.close()

    asyncio.run(scenario())
