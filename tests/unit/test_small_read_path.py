"""The small-object read path: one worker-thread trip that answers only when the read is plain.

`ErasurePool.read_healthy` must return the exact bytes of a healthy blob, and None — never wrong
bytes, never an error — whenever a shard is offline, missing or corrupt, so the streaming reader
(which rebuilds and queues the heal) takes over. Real directories, real damaged files.
"""

from __future__ import annotations

import asyncio
import random
import re
from pathlib import Path

import pytest

from server.app import RequestIds
from server.signature.dates import parse_amz_date
from server.xml_io import http_date
from tests.unit.test_erasure_pool import BLOCK, SMALL, K, blob, corrupt, make_pool, put, shard_path


@pytest.mark.parametrize("size", [0, 1, SMALL - 1, SMALL, BLOCK + 7, K * BLOCK + 1])
def test_healthy_blob_reads_whole_and_exact(tmp_path: Path, size: int) -> None:
    pool = make_pool(tmp_path)
    data = blob(size, size)
    loc = asyncio.run(put(pool, "obj", data))
    assert pool.read_healthy("obj", loc, size) == data
    assert pool.heal_requests.empty()


@pytest.mark.parametrize("damage", ["offline-data", "offline-parity", "deleted", "corrupt"])
def test_anything_unusual_answers_none_and_the_reader_still_serves(tmp_path: Path, damage: str) -> None:
    pool = make_pool(tmp_path)
    size = 2 * K * BLOCK + 5  # erasure-coded, three stripes
    data = blob(size, 7)

    async def scenario() -> None:
        loc = await put(pool, "obj", data)
        shard = K if damage == "offline-parity" else 1
        if damage.startswith("offline"):
            pool.topology.set_offline(loc["shards"][shard])
        elif damage == "deleted":
            shard_path(pool, "obj", loc, shard).unlink()
        else:
            corrupt(shard_path(pool, "obj", loc, shard), random.Random(3), flips=50)
        assert await asyncio.to_thread(pool.read_healthy, "obj", loc, size) is None
        reader = await pool.open_reader("obj", loc, size)
        try:
            assert b"".join([c async for c in reader.stream(0, size)]) == data
        finally:
            await reader.close()
        assert not pool.heal_requests.empty()  # the streaming reader noticed and asked for a heal

    asyncio.run(scenario())


def test_amz_date_parsing_is_strict() -> None:
    assert parse_amz_date("20130524T000000Z") is not None
    assert parse_amz_date("20130524T235959Z").isoformat() == "2013-05-24T23:59:59+00:00"  # type: ignore[union-attr]
    for bad in [
        "20130524T000000z",
        "2013052T0000000Z",
        "20130524 000000Z",
        "20131324T000000Z",
        "20130524T250000Z",
        "2013O524T000000Z",
        "２０１３0524T000000Z",
        "",
        "20130524T000000ZZ",
    ]:
        assert parse_amz_date(bad) is None, bad


def test_http_date_truncates_to_the_second() -> None:
    assert http_date(0) == "Thu, 01 Jan 1970 00:00:00 GMT"
    assert http_date(1_700_000_000.999) == "Tue, 14 Nov 2023 22:13:20 GMT"
    assert http_date(-0.5) == "Wed, 31 Dec 1969 23:59:59 GMT"


def test_request_ids_are_unique_s3_shaped() -> None:
    a, b = RequestIds(), RequestIds()
    ids = [a.next() for _ in range(1000)] + [b.next() for _ in range(1000)]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"[0-9A-F]{16}", i) for i in ids)
