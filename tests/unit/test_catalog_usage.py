"""Usage counters: objects and bytes per (bucket, tier) kept by triggers, always equal to a count.

Every step goes through the catalog's public API (or, for the rolling-upgrade case, the SQL an
older version runs); after each one the counters must equal a full count of the objects table.
"""

from __future__ import annotations

import random
import sqlite3
import threading
from pathlib import Path

import pytest

from tiering.backend import StoredData
from tiering.catalog import OBJECT_COLUMNS, OBJECT_PLACEHOLDERS, Catalog
from tiering.errors import PreconditionFailed
from tiering.records import ObjectMeta, ObjectRecord, Segment

TIERS = ("gpu-direct", "hot", "warm", "cold")


def _record(bucket: str, key: str, size: int, tier: str, n: int) -> ObjectRecord:
    return ObjectRecord(
        bucket=bucket,
        key=key,
        size=size,
        etag="e",
        last_modified=1.0,
        tier=tier,
        meta=ObjectMeta(),
        segments=(Segment(StoredData(f"id-{bucket}-{key}-{n}", size, {})),),
    )


def counted(path: Path) -> tuple[dict[str, tuple[int, int]], dict[tuple[str, str], tuple[int, int]]]:
    """What the counters must say: the objects table counted row by row."""
    db = sqlite3.connect(path)
    try:
        per_tier = {
            t: (n, b)
            for t, n, b in db.execute(
                "SELECT tier, COUNT(*), COALESCE(SUM(size), 0) FROM objects GROUP BY tier"
            )
        }
        per_bucket = {
            (k, t): (n, b)
            for k, t, n, b in db.execute(
                "SELECT bucket, tier, COUNT(*), COALESCE(SUM(size), 0) FROM objects GROUP BY bucket, tier"
            )
        }
    finally:
        db.close()
    return per_tier, per_bucket


def assert_counts(catalog: Catalog) -> None:
    assert (catalog.tier_usage(), catalog.bucket_tier_usage()) == counted(catalog.path)


def test_counters_follow_puts_overwrites_moves_and_deletes(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "c.db", durable=False)
    for bucket in ("a", "b"):
        catalog.create_bucket(bucket, "owner", "us-east-1")
    rnd = random.Random(7)
    for n in range(400):
        bucket, key = rnd.choice("ab"), f"k{rnd.randrange(40)}"
        op = rnd.random()
        if op < 0.5:  # a PUT: new object or overwrite, any tier, any size
            catalog.commit_object(_record(bucket, key, rnd.randrange(0, 10_000), rnd.choice(TIERS), n))
        elif op < 0.7:
            catalog.delete_object(bucket, key)
        elif op < 0.85:  # a lifecycle move to another tier
            try:
                current = catalog.get_object(bucket, key)
            except Exception:  # noqa: BLE001 - not there: nothing to move
                continue
            catalog.commit_move(
                bucket,
                key,
                expected_generation=current.generation,
                tier=rnd.choice(TIERS),
                segments=(Segment(StoredData(f"moved-{n}", current.size, {})),),
                storage_class=None,
                now=2.0,
                reason="test",
            )
        else:  # bulk zero-byte objects, some keys already taken
            keys = [f"k{rnd.randrange(40)}" for _ in range(5)]
            catalog.create_empty_objects(bucket, keys, tier=rnd.choice(TIERS), meta=ObjectMeta(), now=3.0)
        assert_counts(catalog)
    assert sum(n for n, _ in catalog.tier_usage().values()) == catalog.count_objects()[0] > 0


def test_a_failed_commit_leaves_the_counters_alone(tmp_path: Path) -> None:
    """Commits combined into one transaction: one whose precondition fails is rolled back alone."""
    catalog = Catalog(tmp_path / "c.db", durable=True)
    catalog.create_bucket("b", "owner", "us-east-1")
    for i in range(0, 32, 2):
        catalog.commit_object(_record("b", f"k{i}", 100, "hot", 0))
    start = threading.Barrier(32)

    def commit(i: int) -> None:
        start.wait()
        with pytest.raises(PreconditionFailed) if i % 2 == 0 else _nothing():
            catalog.commit_object(_record("b", f"k{i}", 7, "warm", 1), if_none_match="*")

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert catalog.tier_usage() == {"hot": (16, 1600), "warm": (16, 112)}
    assert_counts(catalog)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_an_older_version_replacing_rows_keeps_the_counters_right(tmp_path: Path) -> None:
    """During a rolling upgrade an older process overwrites with INSERT OR REPLACE, which fires no
    DELETE trigger: the BEFORE INSERT trigger takes the replaced row's share off."""
    catalog = Catalog(tmp_path / "c.db", durable=False)
    catalog.create_bucket("b", "owner", "us-east-1")
    catalog.commit_object(_record("b", "k", 500, "hot", 0))
    old = sqlite3.connect(tmp_path / "c.db", isolation_level=None)
    row = (
        "b",
        "k",
        2,
        9,
        "e",
        1.0,
        "warm",
        "{}",
        "{}",
        None,
        None,
        "[]",
        0,
        0,
        0,
        0,
        None,
        "null",
        "STANDARD",
    )
    old.execute(
        f"INSERT OR REPLACE INTO objects ({OBJECT_COLUMNS}, storage_class) VALUES ({OBJECT_PLACEHOLDERS}, ?)",
        row,
    )
    old.close()
    assert catalog.tier_usage() == {"warm": (1, 9)}
    assert_counts(catalog)


def test_a_catalog_without_counters_gets_them_counted_on_open(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    catalog = Catalog(path, durable=False)
    catalog.create_bucket("b", "owner", "us-east-1")
    for i in range(50):
        catalog.commit_object(_record("b", f"k{i}", i, TIERS[i % 4], 0))
    catalog.close()
    db = sqlite3.connect(path, isolation_level=None)  # as an older version left it
    for name in ("tier_usage_replaced", "tier_usage_insert", "tier_usage_delete", "tier_usage_update"):
        db.execute(f"DROP TRIGGER {name}")
    db.execute("DROP TABLE tier_usage")
    db.close()
    reopened = Catalog(path, durable=False)
    assert sum(n for n, _ in reopened.tier_usage().values()) == 50
    assert_counts(reopened)
    reopened.commit_object(_record("b", "k0", 1000, "cold", 1))  # the triggers are back too
    assert_counts(reopened)


def test_deleting_a_bucket_drops_its_counters(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "c.db", durable=False)
    catalog.create_bucket("b", "owner", "us-east-1")
    catalog.commit_object(_record("b", "k", 5, "hot", 0))
    catalog.delete_object("b", "k")
    assert catalog.tier_usage() == {} and catalog.bucket_tier_usage() == {}
    catalog.delete_bucket("b")
    rows = sqlite3.connect(tmp_path / "c.db").execute("SELECT COUNT(*) FROM tier_usage").fetchone()
    assert rows == (0,)
