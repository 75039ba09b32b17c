"""ErasurePool end to end on real directories, with real faults: offline domains, deleted and
corrupted shard files. No mocks of our own storage."""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from erasure import DataLost, DataNotFound, ErasurePool, Topology, WriteQuorumError, default_layout
from erasure.shard_store import TMP_DIR, LocalDrive

T = TypeVar("T")
K, M, BLOCK = 4, 2, 16 << 10
SMALL = 4096


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def make_pool(tmp_path: Path, nodes: int = 3, drives: int = 2, **options: Any) -> ErasurePool:
    topology = default_layout(tmp_path, "hot", nodes=nodes, drives_per_node=drives, weight=1.0)
    options = {"block_size": BLOCK, "small_object_threshold": SMALL, **options}
    return ErasurePool("hot", topology, K, M, **options)


async def put(pool: ErasurePool, data_id: str, data: bytes, chunk: int = 10_000) -> dict[str, Any]:
    writer = await pool.create_writer(data_id, len(data))
    for i in range(0, len(data), chunk):
        await writer.write(data[i : i + chunk])
    return await writer.finish()


async def get(
    pool: ErasurePool, data_id: str, loc: dict[str, Any], size: int, start: int = 0, end: int | None = None
) -> bytes:
    reader = await pool.open_reader(data_id, loc, size)
    try:
        return b"".join([c async for c in reader.stream(start, size if end is None else end)])
    finally:
        await reader.close()


def shard_path(pool: ErasurePool, data_id: str, loc: dict[str, Any], index: int) -> Path:
    store = pool.store(loc["shards"][index])
    assert isinstance(store, LocalDrive)
    return store.path_for(data_id, index)


def corrupt(path: Path, rng: random.Random, flips: int = 3) -> None:
    """Flip random bytes past the header (i.e. inside checksummed blocks)."""
    raw = bytearray(path.read_bytes())
    for _ in range(flips):
        pos = rng.randrange(512, len(raw))
        raw[pos] ^= 0xFF
    path.write_bytes(bytes(raw))


def blob(size: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(size)


@pytest.mark.parametrize("size", [0, 1, BLOCK - 1, BLOCK, K * BLOCK, K * BLOCK + 1, 3 << 20])
def test_write_read_byte_exact(tmp_path: Path, size: int) -> None:
    pool = make_pool(tmp_path)
    data = blob(size, size)

    async def scenario() -> None:
        loc = await put(pool, "obj", data)
        assert loc["layout"] == ("replica" if size < SMALL else "ec") and loc["missing"] == []
        assert await get(pool, "obj", loc, size) == data
        assert await pool.exists("obj", loc)
        assert pool.heal_requests.empty()

    run(scenario())


def test_ranged_reads(tmp_path: Path) -> None:
    pool = make_pool(tmp_path)
    size = 5 * K * BLOCK + 1234
    data = blob(size)
    rng = random.Random(7)

    async def scenario() -> None:
        loc = await put(pool, "obj", data)
        ranges = [(0, 0), (0, 1), (size - 1, size), (BLOCK - 1, BLOCK + 1), (K * BLOCK - 5, K * BLOCK + 5)]
        for _ in range(25):
            a, b = rng.randrange(size + 1), rng.randrange(size + 1)
            ranges.append((min(a, b), max(a, b)))
        for start, end in ranges:
            assert await get(pool, "obj", loc, size, start, end) == data[start:end]

    run(scenario())


@pytest.mark.parametrize("target", ["n2", "hot-n1-d1+hot-n3-d2"])
def test_reads_survive_m_offline_domains(tmp_path: Path, target: str) -> None:
    pool = make_pool(tmp_path)  # 3 nodes x 2 drives: a node is exactly m=2 drives
    size = 7 * K * BLOCK + 99
    data = blob(size)

    async def scenario() -> None:
        loc = await put(pool, "obj", data)
        small = await put(pool, "small", data[:100])
        for name in target.split("+"):
            pool.topology.set_offline(name)
        assert await get(pool, "obj", loc, size) == data
        assert await get(pool, "obj", loc, size, 12345, 3 * BLOCK + 7) == data[12345 : 3 * BLOCK + 7]
        assert await get(pool, "small", small, 100) == data[:100]
        assert pool.heal_requests.qsize() >= 1
        request = pool.heal_requests.get_nowait()
        assert request.data_id in ("obj", "small") and request.location in (loc, small)

    run(scenario())


def test_pool_refuses_a_topology_too_small_for_its_level(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="distinct node"):
        make_pool(tmp_path, nodes=4, drives=2, spread_level="node")


def test_write_while_degraded(tmp_path: Path) -> None:
    pool = make_pool(tmp_path, nodes=4, drives=2)  # 8 drives for 6 shards
    size = 3 * K * BLOCK + 5
    data = blob(size)

    async def scenario() -> None:
        pool.topology.set_offline("n4")
        loc = await put(pool, "wide", data)
        assert loc["missing"] == [] and not any(d.startswith("hot-n4") for d in loc["shards"])
        pool.topology.set_offline("n3")  # 4 drives left: k+1=5 quorum cannot be met
        with pytest.raises(WriteQuorumError):
            await put(pool, "refused", data)
        pool.topology.set_online("hot-n3-d1")  # 5 drives: quorum met, one shard recorded missing
        loc5 = await put(pool, "narrow", data)
        assert len(loc5["missing"]) == 1
        pool.topology.set_offline(next(d for d in loc5["shards"] if d is not None))  # lose one more
        assert await get(pool, "narrow", loc5, size) == data
        for name in ("n3", "n4", "hot-n1-d1", "hot-n1-d2"):
            pool.topology.set_online(name)
        healed = await pool.heal("narrow", loc5, size)
        assert healed.changed and healed.location["missing"] == [] and not healed.lost
        assert (await pool.verify("narrow", healed.location, size)).clean
        assert not [p for d in pool.topology for p in (d.path / TMP_DIR).glob("*")]  # no tmp left behind

    run(scenario())


def test_corruption_is_detected_read_around_and_healed(tmp_path: Path) -> None:
    pool = make_pool(tmp_path)
    size = 6 * K * BLOCK + 777
    data = blob(size, 3)
    rng = random.Random(11)

    async def scenario() -> None:
        loc = await put(pool, "obj", data)
        damaged = rng.sample(range(K + M), M)  # any m shard files damaged
        for index in damaged:
            corrupt(shard_path(pool, "obj", loc, index), rng, flips=4)
        assert await get(pool, "obj", loc, size) == data
        # A healthy read touches only data shards: it notices (and queues a heal for) damage there;
        # damaged parity is the scrubber's to find (verify below).
        assert pool.heal_requests.empty() == all(i >= K for i in damaged)
        report = await pool.verify("obj", loc, size)
        assert report.corrupt_blocks >= 1 and not report.clean and not report.lost
        healed = await pool.heal("obj", loc, size)
        assert healed.rebuilt == report.damaged and not healed.changed  # rebuilt in place
        assert (await pool.verify("obj", loc, size)).clean
        assert await get(pool, "obj", loc, size) == data

    run(scenario())


def test_heal_moves_shards_off_an_offline_domain(tmp_path: Path) -> None:
    pool = make_pool(tmp_path, nodes=4, drives=2)
    size = 2 * K * BLOCK
    data = blob(size, 5)

    async def scenario() -> None:
        loc = await put(pool, "obj", data)
        gone = loc["shards"][0]
        pool.topology.set_offline(gone)
        healed = await pool.heal("obj", loc, size)
        assert healed.changed and healed.rebuilt == [0] and healed.location["shards"][0] != gone
        assert (await pool.verify("obj", healed.location, size)).clean
        assert await get(pool, "obj", healed.location, size) == data

    run(scenario())


def test_heal_rebuilds_a_damaged_shard_of_a_draining_domain_elsewhere(tmp_path: Path) -> None:
    """Rebuilt in place, it would stay on a domain being emptied: the drain would need another run."""
    pool = make_pool(tmp_path, nodes=4, drives=2)
    size = 2 * K * BLOCK
    data = blob(size, 6)

    async def scenario() -> None:
        loc = await put(pool, "obj", data)
        draining = pool.topology[loc["shards"][0]]
        draining.draining = True
        corrupt(shard_path(pool, "obj", loc, 0), random.Random(3), flips=4)
        healed = await pool.heal("obj", loc, size)
        assert healed.changed and healed.rebuilt == [0]
        target = pool.topology[healed.location["shards"][0]]
        assert target.id != draining.id and not target.draining
        assert (await pool.verify("obj", healed.location, size)).clean
        assert await get(pool, "obj", healed.location, size) == data

    run(scenario())


def test_losing_more_than_m_shards_raises_data_lost(tmp_path: Path) -> None:
    pool = make_pool(tmp_path)
    size = 4 * K * BLOCK + 1
    data = blob(size)

    async def scenario() -> None:
        loc = await put(pool, "obj", data)
        for index in range(M + 1):
            shard_path(pool, "obj", loc, index).unlink()
        with pytest.raises(DataLost):
            await get(pool, "obj", loc, size)
        assert not await pool.exists("obj", loc)
        assert (await pool.heal("obj", loc, size)).lost

    run(scenario())


def test_corrupting_more_than_m_blocks_of_one_stripe_never_returns_wrong_bytes(tmp_path: Path) -> None:
    pool = make_pool(tmp_path)
    size = 2 * K * BLOCK
    data = blob(size)

    async def scenario() -> None:
        loc = await put(pool, "obj", data)
        for index in range(M + 1):  # the first block of three shards
            path = shard_path(pool, "obj", loc, index)
            raw = bytearray(path.read_bytes())
            raw[600] ^= 1
            path.write_bytes(bytes(raw))
        with pytest.raises(DataLost, match="stripe 0"):
            await get(pool, "obj", loc, size)
        assert await get(pool, "obj", loc, size, K * BLOCK, size) == data[K * BLOCK :]  # stripe 1 is fine

    run(scenario())


def test_deleted_blob_is_not_found(tmp_path: Path) -> None:
    pool = make_pool(tmp_path)

    async def scenario() -> None:
        loc = await put(pool, "obj", blob(50_000))
        await pool.delete("obj", loc)
        await pool.delete("obj", loc)  # deleting what is gone is fine
        assert not await pool.exists("obj", loc)
        with pytest.raises(DataNotFound):
            await pool.open_reader("obj", loc, 50_000)

    run(scenario())


def test_small_objects_are_replicated_on_m_plus_1_domains(tmp_path: Path) -> None:
    pool = make_pool(tmp_path)
    data = blob(SMALL - 1)

    async def scenario() -> None:
        loc = await put(pool, "tiny", data)
        assert loc["layout"] == "replica" and loc["k"] == 1 and len(loc["shards"]) == M + 1
        files = sorted(p for d in pool.topology for p in d.path.rglob("tiny.*"))
        assert len(files) == M + 1 and len({p.parent.parent.parent for p in files}) == M + 1
        for name in loc["shards"][:M]:
            pool.topology.set_offline(name)
        assert await get(pool, "tiny", loc, len(data)) == data
        pool.topology.set_online(loc["shards"][0])
        corrupt(shard_path(pool, "tiny", loc, 0), random.Random(1))
        assert await get(pool, "tiny", loc, len(data)) == data
        for name in loc["shards"]:
            pool.topology.set_online(name)
        assert (await pool.heal("tiny", loc, len(data))).rebuilt == [0]
        assert (await pool.verify("tiny", loc, len(data))).clean

    run(scenario())


def test_open_reader_survives_concurrent_delete(tmp_path: Path) -> None:
    pool = make_pool(tmp_path)
    size = 5 * K * BLOCK + 3
    data = blob(size)

    async def scenario() -> None:
        loc = await put(pool, "obj", data)
        reader = await pool.open_reader("obj", loc, size)
        chunks = reader.stream(0, size)
        first = await anext(chunks)
        await pool.delete("obj", loc)
        assert not await pool.exists("obj", loc)
        rest = b"".join([c async for c in chunks])
        await reader.close()
        assert bytes(first) + rest == data

    run(scenario())


def test_abort_and_sweep_leave_no_temporary_files(tmp_path: Path) -> None:
    pool = make_pool(tmp_path)

    async def scenario() -> None:
        writer = await pool.create_writer("aborted", None)
        await writer.write(blob(3 * K * BLOCK))
        await writer.abort()
        await writer.abort()
        abandoned = next(iter(pool.topology)).path / TMP_DIR / "crashed.0.abc.tmp"
        abandoned.parent.mkdir(exist_ok=True)
        abandoned.write_bytes(b"x")
        os.utime(abandoned, (0, 0))
        assert await pool.sweep(max_age=60) == 1
        assert not [p for d in pool.topology for p in d.path.rglob("*") if p.is_file()]

    run(scenario())


def test_a_writer_judged_elsewhere_is_not_judged_by_its_pid_here(tmp_path: Path) -> None:
    """A temporary shard whose pid is gone from this host: swept on the pid's word unless its data
    id says its writer is judged elsewhere (a gateway on another host, in the catalog's process
    table); then only the age, or `sweep_tmp_of` for that writer, removes it."""
    pool = make_pool(tmp_path)
    gone = 2**22 + 12345  # above the default pid_max: no such process here
    tmp = next(iter(pool.topology)).path / TMP_DIR
    tmp.mkdir(exist_ok=True)
    mine, theirs = tmp / f"aaaa-host1.0.abc.p{gone}.tmp", tmp / f"bbbb-host2.0.abc.p{gone}.tmp"
    for path in (mine, theirs):
        path.write_bytes(b"x")

    async def scenario() -> None:
        await pool.start(judged_elsewhere=lambda data_id: data_id.endswith("-host2"))
        assert not mine.exists() and theirs.exists()  # its pid meant nothing here
        assert await pool.sweep_tmp_of(lambda data_id: data_id.endswith("-host1")) == 0
        assert await pool.sweep_tmp_of(lambda data_id: data_id.endswith("-host2")) == 1
        assert not theirs.exists()
        await pool.close()

    run(scenario())


def test_status_reports_every_domain(tmp_path: Path) -> None:
    pool = make_pool(tmp_path)

    async def scenario() -> None:
        await pool.start()
        await put(pool, "obj", blob(K * BLOCK))
        pool.topology.set_offline("n1")
        status = pool.status()
        assert len(status["domains"]) == 6 and status["online"] == 4
        assert sum(d["shards"] for d in status["domains"]) == K + M
        assert {d["state"] for d in status["domains"]} == {"online", "offline"}

    run(scenario())


def test_node_level_spread_survives_m_whole_nodes(tmp_path: Path) -> None:
    pool = make_pool(tmp_path, nodes=7, drives=2, spread_level="node")
    size = 3 * K * BLOCK + 17
    data = blob(size, 9)

    async def scenario() -> None:
        loc = await put(pool, "obj", data)
        nodes = [pool.topology[d].node for d in loc["shards"]]
        assert len(set(nodes)) == K + M
        for node in nodes[:M]:
            pool.topology.set_offline(node)
        assert await get(pool, "obj", loc, size) == data
        healed = await pool.heal("obj", loc, size)
        new_nodes = [pool.topology[d].node for d in healed.location["shards"]]
        assert healed.changed and len(set(new_nodes)) == K + M  # still one shard per node
        # Only one spare node was left: one shard moved, the other keeps its (offline) home.
        assert len(healed.rebuilt) == 1 and len(healed.still_missing) == 1
        kept = healed.still_missing[0]
        assert healed.location["shards"][kept] == loc["shards"][kept]
        assert await get(pool, "obj", healed.location, size) == data

    run(scenario())


def test_topology_shared_helpers(tmp_path: Path) -> None:
    topology: Topology = default_layout(tmp_path, "cold", nodes=2, drives_per_node=3)
    assert sorted(topology.groups("node")) == ["region1/zone1/rack1/n1", "region1/zone1/rack1/n2"]
    assert (tmp_path / "cold" / "n2" / "d3").is_dir()


def test_flush_barrier_groups_concurrent_waiters(tmp_path) -> None:
    """Many writers waiting at once share filesystem flushes; each returns only after a flush."""
    import threading

    from erasure.durability import HAVE_SYNCFS, FlushBarrier

    if not HAVE_SYNCFS:
        import pytest

        pytest.skip("syncfs is Linux-only")
    barrier = FlushBarrier(tmp_path)
    threads = [threading.Thread(target=barrier.wait) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert 1 <= barrier.flushes < 32
    before = barrier.flushes
    barrier.wait()
    assert barrier.flushes == before + 1  # alone: a flush of its own


def test_recent_shards_find_blobs_for_the_orphan_sweep(tmp_path: Path) -> None:
    """A crash between the shard writes and the catalog commit leaves shards no row names:
    `recent_shards` finds them by time, with a location that deletes every one of them."""
    import time

    pool = make_pool(tmp_path)
    big, small = blob(3 * K * BLOCK + 5, 8), blob(100, 9)

    async def scenario() -> None:
        before = time.time() - 1
        loc_big = await put(pool, "orphan-big", big)
        loc_small = await put(pool, "orphan-small", small)
        found = await asyncio.to_thread(pool.recent_shards, before, time.time() + 1)
        assert set(found) == {"orphan-big", "orphan-small"}
        for data_id, loc in (("orphan-big", loc_big), ("orphan-small", loc_small)):
            size = found[data_id].pop("size")
            assert size == (len(big) if data_id == "orphan-big" else len(small))
            assert found[data_id]["shards"] == loc["shards"]
            await pool.delete(data_id, found[data_id])
        assert await asyncio.to_thread(pool.recent_shards, before, time.time() + 1) == {}
        assert await asyncio.to_thread(pool.recent_shards, 0, before) == {}

    run(scenario())


def test_a_writer_choosing_its_domains_counts_on_every_domain_until_it_holds(tmp_path: Path) -> None:
    """Between reading the domains' states and holding its choice, a writer may have picked a
    domain that began draining meanwhile: a drain counting then must see it (on every domain of
    the pool), and afterwards only on the domains it holds."""
    pool = make_pool(tmp_path)
    ids = [d.id for d in pool.topology]
    assert pool.writes_placed_on(ids[:1]) == 0
    with pool.placing():
        assert pool.writes_placed_on(ids[:1]) == 1
        assert pool.placements([ids[0], "another-tier-drive"]) == {ids[0]: 1}
        held = pool.hold_placement(ids[1:3])
    assert pool.writes_placed_on(ids[:1]) == 0
    assert pool.placements(ids) == {d: (1 if d in held else 0) for d in ids}
    pool.release_placement(held)
    assert pool.writes_placed_on(ids) == 0


def test_a_waiter_flushes_itself_when_no_flush_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ticket asked for without the flusher thread (the small PUTs' committer, one filesystem):
    the waiter runs the flush itself; writers waiting meanwhile from other threads share flushes
    with it, and every one returns only after a flush that began after its ticket."""
    import threading

    import erasure.durability as durability

    if not durability.HAVE_SYNCFS:
        pytest.skip("syncfs is Linux-only")
    barrier = durability.FlushBarrier(tmp_path)
    ticket = barrier.request(background=False)
    alone = threading.Thread(target=barrier.wait, args=(ticket,), daemon=True)
    alone.start()
    alone.join(10)
    assert not alone.is_alive(), "nobody flushed a ticket asked for without the flusher"
    assert barrier.flushes == 1 and barrier._flusher is None  # no thread started, no hand-off
    covered: list[tuple[int, int]] = []  # (ticket, flushes begun before it was asked for)
    began = [0]
    real = durability._flush

    def counting(fd: int) -> None:
        began[0] += 1
        real(fd)

    def writer(background: bool) -> None:
        for _ in range(20):
            before = began[0]
            ticket = barrier.request(background)
            barrier.wait(ticket)
            covered.append((before, began[0]))

    monkeypatch.setattr(durability, "_flush", counting)
    threads = [threading.Thread(target=writer, args=(n % 2 == 0,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
        assert not t.is_alive()
    assert len(covered) == 160
    assert all(after > before for before, after in covered)  # a flush began after each ticket
