"""Reads "at hand": a small GET answered on the event loop, without a worker-thread trip.

The promise each piece makes is that it never waits — no disk read, no lock wait — and answers
None (or NotAtHand) whenever it cannot keep that promise or is unsure, so the worker-thread path
(which reads, rebuilds, heals and reports) takes over. Real files, real page-cache eviction
(fsync + POSIX_FADV_DONTNEED), real locks held by another thread.
"""

from __future__ import annotations

import asyncio
import errno
import os
import threading
import time
from pathlib import Path

import pytest

from erasure import ErasurePool
from erasure.pack import PackSet
from tests.unit.test_catalog_generations import _record
from tests.unit.test_erasure_packs import blob, make_pool, packs
from tests.unit.test_erasure_pool import get, put
from tiering.catalog import Catalog
from tiering.catalog.database import NotAtHand
from tiering.catalog.residency import WatchedFile, cached_pages, fully_cached
from tiering.catalog.sqlite import RESIDENCY_CHECK_INTERVAL, SQLiteDatabase
from tiering.records import ObjectRecord

pytestmark = pytest.mark.skipif(not hasattr(os, "RWF_NOWAIT"), reason="preadv2(RWF_NOWAIT) is Linux's")


def evict(path: Path) -> None:
    """Drop a file's pages from the page cache (clean pages only: flushed first). The kernel may
    keep a page still on its way to the LRU lists: ask again until none is left."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        for _ in range(50):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            if not cached_pages(path):
                return
            time.sleep(0.02)
    finally:
        os.close(fd)
    raise AssertionError(f"{path} stays in the page cache")


def flip_byte(path: Path, at: int) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        os.pwrite(fd, bytes([os.pread(fd, 1, at)[0] ^ 0xFF]), at)
    finally:
        os.close(fd)


def pack_files(pool: ErasurePool) -> list[Path]:
    return [p for d in pool.topology for p in packs(pool, d.id).dir.glob("*") if p.name.startswith("pack")]


def test_fully_cached_tells_a_cached_file_from_an_evicted_one(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(os.urandom(1 << 20))
    evict(path)
    assert not fully_cached(path)
    path.read_bytes()
    assert fully_cached(path)
    assert fully_cached(tmp_path / "missing")  # nothing to read, nothing to wait for
    evict(path)
    watched = WatchedFile(path)
    try:
        assert watched.keep_cached(64 << 10)  # reads back what was missing, of the part asked for
        assert fully_cached(path, 64 << 10) and not fully_cached(path)
        assert watched.keep_cached() and fully_cached(path)
    finally:
        watched.close()


@pytest.mark.parametrize("size", [1, 5000, 40_000])  # replicas, replicas, erasure-coded packed shards
def test_a_packed_blob_in_the_page_cache_reads_at_hand_byte_exact(tmp_path: Path, size: int) -> None:
    pool = make_pool(tmp_path)
    data = blob(size, size)
    loc = asyncio.run(put(pool, "obj", data))
    assert pool.read_at_hand("obj", loc, size) == data


def test_at_hand_answers_none_when_the_bytes_are_not_cached_and_the_thread_path_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = make_pool(tmp_path)
    data = blob(5000, 1)
    loc = asyncio.run(put(pool, "obj", data))
    # Real eviction first. RWF_NOWAIT does not wait for the disk, but a buffered read under it may
    # still start readahead, which a fast disk completes before the kernel looks again (CI's does,
    # every time): then the bytes come back. Either answer is allowed; wrong bytes never are.
    for _ in range(5):
        for path in pack_files(pool):
            evict(path)
        assert pool.read_at_hand("obj", loc, len(data)) in (None, data)
    # What the disk does is not ours to decide, so the "would wait" answer is made certain at the
    # system call: the kernel's EAGAIN for a read under RWF_NOWAIT. The at-hand read must ask for
    # the flag (without it a read of evicted pages waits for the disk) and give up on EAGAIN.
    real_preadv, flags_seen = os.preadv, []

    def preadv_as_if_uncached(fd: int, buffers: list[bytearray], offset: int, flags: int = 0) -> int:
        flags_seen.append(flags)
        if flags & os.RWF_NOWAIT:
            raise BlockingIOError(errno.EAGAIN, "would wait for the disk")
        return real_preadv(fd, buffers, offset, flags)

    monkeypatch.setattr(os, "preadv", preadv_as_if_uncached)
    assert pool.read_at_hand("obj", loc, len(data)) is None
    assert flags_seen and all(f & os.RWF_NOWAIT for f in flags_seen)
    monkeypatch.setattr(os, "preadv", real_preadv)
    for path in pack_files(pool):
        evict(path)
    assert pool.read_healthy("obj", loc, len(data)) == data  # reads it into the cache...
    assert pool.read_at_hand("obj", loc, len(data)) == data  # ...and now it is at hand


def test_at_hand_never_waits_for_a_pack_lock_another_thread_holds(tmp_path: Path) -> None:
    pool = make_pool(tmp_path)
    data = blob(5000, 2)
    loc = asyncio.run(put(pool, "obj", data))
    held, release = threading.Event(), threading.Event()

    def hold(packset: PackSet) -> None:
        with packset._lock:  # what an append holds across its fdatasync
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold, args=(packs(pool, loc["shards"][0]),))
    holder.start()
    try:
        assert held.wait(10)
        started = time.monotonic()
        assert pool.read_at_hand("obj", loc, len(data)) == data
        assert time.monotonic() - started < 1.0
    finally:
        release.set()
        holder.join()


@pytest.mark.parametrize("case", ["corrupt", "offline", "new-process", "shard-files"])
def test_at_hand_answers_none_for_anything_unusual_and_the_blob_still_reads(
    tmp_path: Path, case: str
) -> None:
    pool = make_pool(tmp_path)
    size = 200_000 if case == "shard-files" else 5000  # 50 KB shards: over the pack threshold
    data = blob(size, 3)

    async def scenario() -> None:
        loc = await put(pool, "obj", data)
        reader_pool = pool
        if case == "corrupt":
            packset = packs(pool, loc["shards"][0])
            rec = packset.lookup("obj", 0)
            assert rec is not None
            flip_byte(packset.dir / rec.pack, rec.offset + rec.length - 10)  # inside the block
        elif case == "offline":
            pool.topology.set_offline(loc["shards"][0])
        elif case == "new-process":
            reader_pool = make_pool(tmp_path)  # its index is not loaded yet: loading reads the packs
        assert reader_pool.read_at_hand("obj", loc, size) is None
        assert await get(reader_pool, "obj", loc, size) == data

    asyncio.run(scenario())


def _wait_at_hand(catalog: Catalog, key: str) -> ObjectRecord:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = catalog.version_at_hand("b", key, None)
        if found is not None:
            return found
        time.sleep(0.05)
    raise AssertionError("the catalog never answered at hand")


def test_the_catalog_answers_at_hand_only_when_cached_on_its_thread_and_sees_every_commit(
    tmp_path: Path,
) -> None:
    catalog = Catalog(tmp_path / "catalog.db", durable=False)
    try:
        db = catalog._db
        assert isinstance(db, SQLiteDatabase)
        catalog.create_bucket("b", "owner", "us-east-1")
        catalog.commit_object(_record("k", "d1"))
        assert _wait_at_hand(catalog, "k").segments[0].stored.data_id == "d1"
        # A commit is seen by the very next lookup (each statement reads the newest commit).
        catalog.commit_object(_record("k", "d2"))
        found = catalog.version_at_hand("b", "k", None)
        assert found is not None and found.segments[0].stored.data_id == "d2"
        # Only the plain case: a missing key or another version is the thread path's to answer.
        assert catalog.version_at_hand("b", "missing", None) is None
        assert catalog.version_at_hand("b", "k", "some-other-version") is None
        # Another thread never uses the event loop's connection.
        raised: list[BaseException] = []

        def ask() -> None:
            try:
                db.row_at_hand("SELECT 1 FROM objects WHERE key = ?", ("k",))
            except NotAtHand as exc:
                raised.append(exc)

        thread = threading.Thread(target=ask)
        thread.start()
        thread.join()
        assert len(raised) == 1
        # The database's pages evicted (as a machine's own reclaim does): the next check reads
        # them back from its thread, so the event loop's lookups find them cached again.
        path = Path(str(db.path))
        evict(path)
        assert not fully_cached(path)
        time.sleep(RESIDENCY_CHECK_INTERVAL + 0.1)
        catalog.version_at_hand("b", "k", None)  # starts the check
        deadline = time.monotonic() + 10
        while not fully_cached(path) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert fully_cached(path)
        assert _wait_at_hand(catalog, "k").segments[0].stored.data_id == "d2"
    finally:
        catalog.close()
