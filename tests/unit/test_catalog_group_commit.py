"""Group commit: concurrent commits share WAL fsyncs, and every one is visible once it returns."""

from __future__ import annotations

import threading
from pathlib import Path

from tiering.backend import StoredData
from tiering.catalog import Catalog
from tiering.records import ObjectMeta, ObjectRecord, Segment


def _record(key: str) -> ObjectRecord:
    return ObjectRecord(
        bucket="b", key=key, size=1, etag="e", last_modified=1.0, tier="hot", meta=ObjectMeta(),
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
