"""Pack files (opt-in): small shards appended to per-drive packs, through the real pool and drives."""

from __future__ import annotations

import asyncio
import os
import random
import threading
from pathlib import Path
from typing import Any

from erasure import ErasurePool, default_layout
from erasure.errors import CorruptShard
from erasure.pack import PACK_DIR, PackSet
from erasure.shard_store import LocalDrive, packed_local_drive
from tests.unit.test_erasure_pool import get, put

K, M, BLOCK = 4, 2, 16 << 10
SMALL = 16 << 10  # below this: m+1 whole copies
PACK = 32 << 10  # shard files up to this size are packed


def make_pool(tmp_path: Path, nodes: int = 4, drives: int = 2, rotate: int | None = None) -> ErasurePool:
    topology = default_layout(tmp_path, "hot", nodes=nodes, drives_per_node=drives, weight=1.0)
    pool = ErasurePool(
        "hot",
        topology,
        K,
        M,
        block_size=BLOCK,
        small_object_threshold=SMALL,
        drive_factory=packed_local_drive(PACK),
    )
    if rotate is not None:
        for domain in topology:
            packs(pool, domain.id).rotate_bytes = rotate
    return pool


def packs(pool: ErasurePool, domain_id: str) -> PackSet:
    drive = pool.store(domain_id)
    assert isinstance(drive, LocalDrive) and drive.packs is not None
    return drive.packs


def files_under(root: Path) -> list[Path]:
    return [Path(d) / f for d, _, names in os.walk(root) for f in names]


def blob(size: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(size)


def test_small_blobs_go_to_packs_big_ones_to_files(tmp_path: Path) -> None:
    pool = make_pool(tmp_path)
    sizes = [0, 1, 4096, SMALL - 1, SMALL, 3 * K * BLOCK + 5]

    async def scenario() -> None:
        locs = {}
        for n in range(200):
            size = sizes[n % len(sizes)]
            locs[n] = (await put(pool, f"b{n}", blob(size, n)), size)
        for n, (loc, size) in locs.items():
            assert await get(pool, f"b{n}", loc, size) == blob(size, n)
        shard_files = [p for p in files_under(tmp_path) if PACK_DIR not in p.parts]
        pack_files = [p for p in files_under(tmp_path) if PACK_DIR in p.parts]
        # Only the multi-stripe blobs (one in six) make shard files; every small one is packed.
        big = sum(1 for n in locs if sizes[n % len(sizes)] > SMALL)
        assert len(shard_files) == big * (K + M)
        assert len(pack_files) <= 8
        for n, (loc, _size) in locs.items():
            await pool.delete(f"b{n}", loc)
        assert not [p for p in files_under(tmp_path) if PACK_DIR not in p.parts]
        assert all(packs(pool, d.id).stats()["records"] == 0 for d in pool.topology)

    asyncio.run(scenario())


def test_a_new_process_reindexes_packs_and_ignores_a_torn_tail(tmp_path: Path) -> None:
    pool = make_pool(tmp_path)
    sizes = [100, 5000, SMALL + 10]

    async def write() -> dict[int, Any]:
        return {n: await put(pool, f"b{n}", blob(sizes[n % 3], n)) for n in range(60)}

    locs = asyncio.run(write())
    for pack in (tmp_path / "hot").rglob("*.tsp"):  # a crash mid-append: half a record at the end
        with open(pack, "ab") as f:
            f.write(b"TSPR\x01\x05" + os.urandom(40))
    fresh = make_pool(tmp_path)  # a restarted server: nothing in memory

    async def read() -> None:
        for n, loc in locs.items():
            assert await get(fresh, f"b{n}", loc, sizes[n % 3]) == blob(sizes[n % 3], n)
            assert (await fresh.verify(f"b{n}", loc, sizes[n % 3])).clean
        loc = await put(fresh, "after", blob(300, 1))  # appends go to a new pack, past no torn tail
        assert await get(make_pool(tmp_path), "after", loc, 300) == blob(300, 1)

    asyncio.run(read())


def test_a_corrupted_packed_record_is_detected_and_healed(tmp_path: Path) -> None:
    pool = make_pool(tmp_path)
    data = blob(5000, 7)

    async def scenario() -> None:
        loc = await put(pool, "obj", data)
        domain = loc["shards"][0]
        rec = packs(pool, domain).lookup("obj", 0)
        assert rec is not None
        path = packs(pool, domain).dir / rec.pack
        raw = bytearray(path.read_bytes())
        raw[rec.offset + rec.length - 10] ^= 0xFF  # inside the block
        path.write_bytes(bytes(raw))
        assert await get(pool, "obj", loc, len(data)) == data  # read around
        report = await pool.verify("obj", loc, len(data))
        assert not report.clean and report.damaged == [0]
        # A restarted process sees the record's checksum fail when it indexes the pack.
        again = make_pool(tmp_path)
        try:
            again.store(domain).open("obj", 0)  # type: ignore[union-attr]
            raise AssertionError("a corrupt packed record opened")
        except CorruptShard:
            pass
        healed = await again.heal("obj", loc, len(data))
        assert healed.rebuilt == [0]
        assert (await again.verify("obj", loc, len(data))).clean
        assert (await make_pool(tmp_path).verify("obj", loc, len(data))).clean  # the fresh record wins
        assert await get(make_pool(tmp_path), "obj", loc, len(data)) == data

    asyncio.run(scenario())


def test_compaction_reclaims_deleted_space_while_reads_go_on(tmp_path: Path) -> None:
    pool = make_pool(tmp_path, rotate=256 << 10)
    size = 3000

    async def write() -> dict[int, Any]:
        return {n: await put(pool, f"b{n}", blob(size, n)) for n in range(500)}

    locs = asyncio.run(write())
    before = sum(p.stat().st_size for p in (tmp_path / "hot").rglob("*.tsp"))

    async def delete() -> None:
        for n in range(500):
            if n % 5:
                await pool.delete(f"b{n}", locs[n])

    asyncio.run(delete())
    kept = [n for n in range(500) if n % 5 == 0]
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        async def loop() -> None:
            while not stop.is_set():
                for n in kept[:40]:
                    assert await get(pool, f"b{n}", locs[n], size) == blob(size, n)

        try:
            asyncio.run(loop())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        reclaimed = sum(packs(pool, d.id).compact(bytes_per_second=8 << 20) for d in pool.topology)
    finally:
        stop.set()
        thread.join(60)
    assert not errors, errors
    after = sum(p.stat().st_size for p in (tmp_path / "hot").rglob("*.tsp"))
    assert reclaimed > 0 and after < before * 0.4, (before, after, reclaimed)

    async def check(p: ErasurePool) -> None:
        for n in kept:
            assert await get(p, f"b{n}", locs[n], size) == blob(size, n)
            assert (await p.verify(f"b{n}", locs[n], size)).clean

    asyncio.run(check(pool))
    asyncio.run(check(make_pool(tmp_path)))  # and after a restart


def test_heal_moves_packed_shards_off_an_offline_domain(tmp_path: Path) -> None:
    pool = make_pool(tmp_path)
    data = blob(2000, 9)

    async def scenario() -> None:
        loc = await put(pool, "obj", data)
        gone = loc["shards"][0]
        pool.topology.set_offline(gone)
        healed = await pool.heal("obj", loc, len(data))
        assert healed.changed and healed.location["shards"][0] != gone
        new = healed.location["shards"][0]
        assert packs(pool, new).lookup("obj", 0) is not None
        assert await get(pool, "obj", healed.location, len(data)) == data
        entries = {(e.data_id, e.index) for e in pool.store(new).list_shards()}  # type: ignore[union-attr]
        assert ("obj", 0) in entries

    asyncio.run(scenario())


def test_a_damaged_record_header_mid_pack_loses_only_that_record(tmp_path: Path) -> None:
    pool = make_pool(tmp_path, nodes=3, drives=2)  # 6 domains, each replica copy on 3 of them

    async def write() -> dict[int, Any]:
        return {n: await put(pool, f"b{n}", blob(1000 + n, n)) for n in range(30)}

    locs = asyncio.run(write())
    domain = locs[10]["shards"][0]
    rec = packs(pool, domain).lookup("b10", 0)
    assert rec is not None
    path = packs(pool, domain).dir / rec.pack
    raw = bytearray(path.read_bytes())
    raw[rec.offset - 6] ^= 0xFF  # inside b10's record header (its data id)
    path.write_bytes(bytes(raw))
    fresh = make_pool(tmp_path, nodes=3, drives=2)
    store = fresh.store(domain)
    assert store is not None and not store.has("b10", 0)
    for n, loc in locs.items():
        if domain in loc["shards"] and n != 10:
            assert store.has(f"b{n}", loc["shards"].index(domain)), n  # the records after it are found

    async def check() -> None:
        for n, loc in locs.items():
            assert await get(fresh, f"b{n}", loc, 1000 + n) == blob(1000 + n, n)

    asyncio.run(check())


def test_compaction_never_copies_a_damaged_record_and_finishes_after_heal(tmp_path: Path) -> None:
    pool = make_pool(tmp_path, nodes=3, drives=2)
    size = 2000

    async def write() -> dict[int, Any]:
        return {n: await put(pool, f"b{n}", blob(size, n)) for n in range(40)}

    locs = asyncio.run(write())
    domain = locs[0]["shards"][0]
    pack_set = packs(pool, domain)
    rec = pack_set.lookup("b0", 0)
    assert rec is not None
    path = pack_set.dir / rec.pack
    raw = bytearray(path.read_bytes())
    raw[rec.offset + rec.length - 10] ^= 0xFF
    path.write_bytes(bytes(raw))

    async def delete_others() -> None:
        for n in range(1, 40):
            await pool.delete(f"b{n}", locs[n])

    asyncio.run(delete_others())
    assert pack_set.compact() == 0 and path.exists()  # b0's damaged copy waits for heal
    assert asyncio.run(pool.heal("b0", locs[0], size)).rebuilt == [0]
    assert pack_set.compact() > 0 and not path.exists()
    assert asyncio.run(get(make_pool(tmp_path, nodes=3, drives=2), "b0", locs[0], size)) == blob(size, 0)
