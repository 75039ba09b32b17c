"""A whole small blob read straight into one buffer (erasure/whole_reads.py `_read_packed`).

When every data shard of a blob is a packed record on this host, each record's blocks are
scattered by one preadv to their places in the blob and then verified — header and every block
checksum. The promise: the exact bytes (as a read-only view), or None on any damage, so that
the shard-by-shard path (which rebuilds and queues the heal) takes over. Real packs on disk,
real flipped bytes.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from erasure.checksum import CHECKSUM_SIZE
from erasure.shard_format import HEADER_SIZE
from tests.unit.test_erasure_packs import BLOCK, SMALL, K, blob, make_pool, packs
from tests.unit.test_erasure_pool import get, put
from tests.unit.test_read_at_hand import flip_byte

# Sizes whose data shards are all packed: replicas, one stripe, two stripes with a padded tail.
SIZES = [1, 4096, SMALL - 1, SMALL, K * BLOCK, K * BLOCK + 1, K * BLOCK + 5, K * BLOCK + K * 100 + 3]


@pytest.mark.parametrize("size", SIZES)
def test_a_packed_blob_is_read_into_one_buffer_exactly(tmp_path: Path, size: int) -> None:
    pool = make_pool(tmp_path)
    data = blob(size, size)
    loc = asyncio.run(put(pool, "obj", data))
    for i, domain_id in enumerate(loc["shards"][: loc["k"]]):
        assert packs(pool, domain_id).lookup("obj", i) is not None  # packed, not files
    whole = pool.read_healthy("obj", loc, size)
    assert isinstance(whole, memoryview)  # read scattered, not opened shard by shard and joined
    assert whole.readonly and whole == data
    assert bytes(whole) == data
    if hasattr(os, "RWF_NOWAIT"):
        at_hand = pool.read_at_hand("obj", loc, size)  # just written: in the page cache
        assert isinstance(at_hand, memoryview) and at_hand == data  # scattered at hand too
    assert pool.heal_requests.empty()


@pytest.mark.parametrize("where", ["block", "checksum", "header"])
def test_damage_anywhere_in_a_record_answers_none_and_the_reader_rebuilds(tmp_path: Path, where: str) -> None:
    pool = make_pool(tmp_path)
    size = K * BLOCK + 5  # two stripes: the second shard's record holds two blocks
    data = blob(size, 11)

    async def scenario() -> None:
        loc = await put(pool, "obj", data)
        packset = packs(pool, loc["shards"][1])
        rec = packset.lookup("obj", 1)
        assert rec is not None
        at = {
            "block": rec.offset + HEADER_SIZE + CHECKSUM_SIZE + BLOCK - 1,  # last byte of stripe 0's block
            "checksum": rec.offset + HEADER_SIZE + CHECKSUM_SIZE + BLOCK + 2,  # stripe 1's checksum
            "header": rec.offset + 40,
        }[where]
        flip_byte(packset.dir / rec.pack, at)
        assert await asyncio.to_thread(pool.read_healthy, "obj", loc, size) is None
        if hasattr(os, "RWF_NOWAIT"):
            assert pool.read_at_hand("obj", loc, size) is None
        assert await get(pool, "obj", loc, size) == data  # rebuilt from the other shards
        assert not pool.heal_requests.empty()  # and the damage reported

    asyncio.run(scenario())


def test_a_record_another_process_appended_is_read_shard_by_shard(tmp_path: Path) -> None:
    """This process's pack index does not know the record yet: the scatter declines (it never
    looks for other processes' appends), and `open` finds it."""
    reader = make_pool(tmp_path)
    for domain in reader.topology:
        assert packs(reader, domain.id).lookup("nothing", 0) is None  # every drive's index loaded
    writer = make_pool(tmp_path)  # a second process's view of the same drives
    data = blob(5000, 5)
    loc = asyncio.run(put(writer, "obj", data))
    got = reader.read_healthy("obj", loc, len(data))
    assert isinstance(got, bytes) and got == data
