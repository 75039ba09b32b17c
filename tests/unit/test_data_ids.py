"""Data ids (tiering/data_ids.py): time-ordered on erasure-coded tiers, so that new ones land
together at the right edge of the catalog's indexes; random (as in earlier versions) where a
backend derives a path from the id's first characters — the memory tier's write-through files,
which an earlier version must still find during a rolling upgrade."""

from __future__ import annotations

import asyncio
import os
import re
import sqlite3
import threading
import time
from pathlib import Path

from erasure.shard_store import check_data_id
from server.app import build_store
from server.config import load_config
from tiering import data_ids
from tiering.backends.erasure_coded import ErasureCodedBackend
from tiering.backends.local_files import LocalFilesBackend
from tiering.backends.memory import MemoryBackend
from tiering.backends.s3_remote import S3RemoteBackend
from tiering.data_ids import TIME_ORDERED, new_data_id
from tiering.peers import owner_of
from tiering.records import ObjectMeta


def test_ids_made_later_sort_after_earlier_ones() -> None:
    earlier = [new_data_id(True) for _ in range(500)]
    time.sleep(0.002)
    later = [new_data_id(True) for _ in range(500)]
    assert max(earlier) < min(later)
    assert len(set(earlier + later)) == 1000
    assert all(data_id.startswith(TIME_ORDERED) and check_data_id(data_id) for data_id in earlier)


def test_random_ids_are_what_earlier_versions_made() -> None:
    ids = [new_data_id(False) for _ in range(1000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", data_id) for data_id in ids)
    assert len({data_id[:2] for data_id in ids}) > 200  # spread over the files backend's directories


def test_random_bytes_come_a_page_at_a_time_and_never_twice() -> None:
    """Ids draw on a page of the kernel's random bytes at a time (one system call per page, not per
    id): across many pages no id repeats, and a forked child never hands out its parent's bytes."""
    ids = [new_data_id(False) for _ in range(3000)]  # 16 bytes each: a dozen pages
    tails = [new_data_id(True)[-2 * 9 :] for _ in range(3000)]
    assert len(set(ids)) == 3000 and len(set(tails)) == 3000
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        try:
            os.write(write_end, ",".join(new_data_id(False) for _ in range(8)).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    parents = {new_data_id(False) for _ in range(8)}
    os.waitpid(child, 0)
    with os.fdopen(read_end) as pipe:
        childs = set(pipe.read().split(","))
    assert len(childs) == 8 and not parents & childs


def test_a_fork_while_another_thread_draws_ids_leaves_the_child_able_to_draw() -> None:
    """The pool's lock, held by another thread at the fork, is not the child's to wait for."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with data_ids._pool_lock:
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        child = os.fork()
        if child == 0:  # pragma: no cover - the child
            os._exit(0 if re.fullmatch(r"[0-9a-f]{32}", new_data_id(False)) else 1)
        deadline = time.monotonic() + 10
        while (done := os.waitpid(child, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        if done[0] == 0:
            os.kill(child, 9)
            os.waitpid(child, 0)
        assert done[0] == child and os.waitstatus_to_exitcode(done[1]) == 0, "the child hung or failed"
    finally:
        release.set()
        holder.join()


def test_only_the_erasure_coded_backend_takes_time_ordered_ids() -> None:
    assert ErasureCodedBackend.time_ordered_ids
    assert not LocalFilesBackend.time_ordered_ids  # `<id[:2]>/<id[2:4]>` directories
    assert not MemoryBackend.time_ordered_ids  # write-through files under the files backend
    assert not S3RemoteBackend.time_ordered_ids  # key-prefix partitions of the remote bucket


def test_the_store_picks_each_tiers_kind_of_id(tmp_path: Path) -> None:
    """Default tiers: a STANDARD object (hot, erasure-coded) gets a time-ordered id; a GPU_DIRECT
    one (memory over files) a random id, at the path an earlier version reads it from."""

    async def run() -> tuple[str, str]:
        store = build_store(load_config(None, data_dir=tmp_path / "data"))
        await store.start()
        try:
            await store.create_bucket("b", "me", "us-east-1")
            ids = []
            for key, storage_class in (("hot", "STANDARD"), ("gpu", "GPU_DIRECT")):
                pending = await store.begin_put("b", storage_class, size_hint=5)
                await pending.write(b"hello")
                await pending.end_body()
                record = await pending.commit_object("b", key, ObjectMeta())
                ids.append(record.segments[0].stored.data_id)
            return ids[0], ids[1]
        finally:
            await store.close()

    hot_id, gpu_id = asyncio.run(run())
    assert hot_id.startswith(TIME_ORDERED) and owner_of(hot_id) is not None
    random_part, _, owner = gpu_id.partition("-")
    assert re.fullmatch(r"[0-9a-f]{32}", random_part) and owner_of(gpu_id) == owner
    written_through = list((tmp_path / "data").rglob(gpu_id))
    assert [p.relative_to(p.parents[2]) for p in written_through] == [Path(gpu_id[:2]) / gpu_id[2:4] / gpu_id]


def test_ids_inserted_in_order_share_index_pages(tmp_path: Path) -> None:
    """What time-ordered ids are for: a batch of inserts into a TEXT primary key (the catalog's
    `blobs` table) touches the rightmost leaf pages, not a random leaf per id."""

    def pages_written_by_last_batch(time_ordered: bool, db_path: Path) -> int:
        db = sqlite3.connect(db_path, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE blobs (data_id TEXT PRIMARY KEY, tier TEXT NOT NULL)")
        for _ in range(200):  # 20,000 ids: a few hundred leaf pages
            db.execute("BEGIN")
            rows = [(new_data_id(time_ordered),) for _ in range(100)]
            db.executemany("INSERT INTO blobs VALUES (?, 'hot')", rows)
            db.execute("COMMIT")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.execute("BEGIN")
        db.executemany(
            "INSERT INTO blobs VALUES (?, 'hot')", [(new_data_id(time_ordered),) for _ in range(32)]
        )
        db.execute("COMMIT")
        frames = (os.path.getsize(f"{db_path}-wal") - 32) // (24 + 4096)
        db.close()
        return frames

    ordered = pages_written_by_last_batch(True, tmp_path / "ordered.db")
    random_ids = pages_written_by_last_batch(False, tmp_path / "random.db")
    assert ordered <= 10  # the rightmost leaves of the index and the table, the header page
    assert random_ids >= 24  # a leaf per id
