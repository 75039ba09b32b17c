"""Group commit: concurrent commits share WAL fsyncs, and every one is visible once it returns."""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tiering.backend import StoredData
from tiering.catalog import Catalog
from tiering.errors import BucketNotFound, PreconditionFailed
from tiering.records import ObjectMeta, ObjectRecord, Segment


def _record(key: str) -> ObjectRecord:
    return ObjectRecord(
        bucket="b",
        key=key,
        size=1,
        etag="e",
        last_modified=1.0,
        tier="hot",
        meta=ObjectMeta(),
        segments=(Segment(StoredData(f"id-{key}", 1, {})),),
    )


def test_concurrent_commits_share_fsyncs(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "c.db", durable=True)
    catalog.create_bucket("b", "owner", "us-east-1")
    before = catalog.fsyncs
    threads = [threading.Thread(target=catalog.commit_object, args=(_record(f"k{i}"),)) for i in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    commits = 64
    used = catalog.fsyncs - before
    assert 1 <= used < commits, used  # grouped: fewer fsyncs than commits
    assert catalog.count_objects("b") == (commits, commits)
    catalog.close()
    reopened = Catalog(tmp_path / "c.db", durable=True)
    assert reopened.count_objects("b") == (commits, commits)


def test_sequential_commits_each_fsync(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "c.db", durable=True)
    catalog.create_bucket("b", "owner", "us-east-1")
    before = catalog.fsyncs
    for i in range(5):
        catalog.commit_object(_record(f"k{i}"))
    assert catalog.fsyncs - before == 5  # nobody to share with: each commit is flushed itself


def test_combined_commits_fail_alone(tmp_path: Path) -> None:
    """Commits from many threads run in shared transactions; one that fails is rolled back alone."""
    catalog = Catalog(tmp_path / "c.db", durable=True)
    catalog.create_bucket("b", "owner", "us-east-1")
    generations = {}
    for i in range(0, 64, 2):  # the even keys exist: If-None-Match fails for them
        generations[f"k{i}"] = catalog.commit_object(_record(f"k{i}")).generation
    start = threading.Barrier(64)
    outcome: dict[str, str] = {}

    def commit(key: str) -> None:
        start.wait()
        try:
            catalog.commit_object(_record(key), if_none_match="*")
            outcome[key] = "ok"
        except PreconditionFailed:
            outcome[key] = "precondition"

    threads = [threading.Thread(target=commit, args=(f"k{i}",)) for i in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcome == {f"k{i}": "precondition" if i % 2 == 0 else "ok" for i in range(64)}
    assert catalog.count_objects("b") == (64, 64)
    for key, generation in generations.items():  # the failed pieces changed nothing
        record = catalog.get_object("b", key)
        assert record.generation == generation, (key, record)
    catalog.close()
    reopened = Catalog(tmp_path / "c.db", durable=True)
    assert reopened.count_objects("b") == (64, 64)


def test_combined_pieces_share_a_transaction_and_roll_back_alone(tmp_path: Path) -> None:
    """Work queued while another batch runs goes into one transaction; a piece that wrote and then
    raised leaves nothing behind, and its caller (only its caller) gets the error."""
    catalog = Catalog(tmp_path / "c.db", durable=True)
    others = 16
    queued = threading.Event()

    def first(db: sqlite3.Connection) -> int:
        # Holds the write lock until every other caller has queued its piece behind it.
        deadline = time.monotonic() + 30
        while len(catalog._queued) < others and time.monotonic() < deadline:
            time.sleep(0.001)
        queued.set()
        return 0

    def piece(n: int) -> Callable[[sqlite3.Connection], int]:
        def run(db: sqlite3.Connection) -> int:
            db.execute(
                "INSERT INTO buckets (name, created, owner, region) VALUES (?, 0, 'o', 'r')", (f"b{n}",)
            )
            if n % 2:
                raise ValueError(f"piece {n} fails after writing")
            return n

        return run

    results: dict[int, object] = {}

    def call(n: int) -> None:
        try:
            results[n] = catalog._write_combined(piece(n))
        except ValueError as exc:
            results[n] = str(exc)

    leader = threading.Thread(target=lambda: catalog._write_combined(first))
    leader.start()
    while not catalog._write_lock.locked():
        time.sleep(0.001)
    before = catalog._committed
    threads = [threading.Thread(target=call, args=(n,)) for n in range(others)]
    for t in threads:
        t.start()
    for t in [leader, *threads]:
        t.join()
    assert queued.is_set()
    assert results == {n: f"piece {n} fails after writing" if n % 2 else n for n in range(others)}
    assert catalog._committed - before == 2, "the leader's transaction, then one for all the queued pieces"
    names = {row[0] for row in catalog._reader().execute("SELECT name FROM buckets")}
    assert names == {f"b{n}" for n in range(0, others, 2)}


def test_commit_objects_share_one_transaction_and_one_fsync_and_fail_alone(tmp_path: Path) -> None:
    """The small PUTs' committer (tiering/small_writes.py) hands the catalog a whole batch: one
    WAL fsync for all, a record whose condition fails (or whose bucket is gone) fails alone."""
    catalog = Catalog(tmp_path / "c.db", durable=True)
    catalog.create_bucket("b", "owner", "us-east-1")
    catalog.commit_object(_record("exists"))
    assert catalog.batches_writes
    before = catalog.fsyncs
    nobucket = dataclasses.replace(_record("x"), bucket="gone")
    items: list[tuple[ObjectRecord, str | None, str | None]] = [
        (_record(f"k{i}"), None, None) for i in range(20)
    ]
    items += [(_record("exists"), None, "*"), (nobucket, None, None), (_record("new"), None, "*")]
    results = catalog.commit_objects(items)
    assert catalog.fsyncs - before == 1
    assert all(isinstance(r, ObjectRecord) for r in results[:20])
    assert isinstance(results[20], PreconditionFailed)
    assert isinstance(results[21], BucketNotFound)
    assert isinstance(results[22], ObjectRecord)
    catalog.close()
    reopened = Catalog(tmp_path / "c.db", durable=True)
    assert reopened.count_objects("b") == (22, 22)  # k0..k19, exists, new
