"""One behaviour on both catalog databases: the same calls give the same answers on SQLite and on
PostgreSQL (a real server, tests/postgres.py), and a catalog newer than the code is refused."""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import postgres
from tiering.backend import StoredData
from tiering.catalog import SCHEMA_VERSION, Catalog, SchemaTooNew
from tiering.errors import BucketNotEmpty, BucketNotFound, PreconditionFailed
from tiering.records import ObjectMeta, ObjectRecord, PartRecord, Segment, UploadRecord


def _record(key: str, data: str, size: int = 1, tier: str = "hot") -> ObjectRecord:
    return ObjectRecord(
        bucket="b",
        key=key,
        size=size,
        etag=f"e-{data}",
        last_modified=1.0,
        tier=tier,
        meta=ObjectMeta(),
        segments=(Segment(StoredData(f"id-{key}-{data}", size, {})),),
    )


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str | Path]:
    if request.param == "sqlite":
        yield tmp_path / "catalog.db"
    else:
        if postgres.unavailable():
            pytest.skip(str(postgres.unavailable()))
        yield postgres.session_server().create_database("unit")


def test_the_same_calls_give_the_same_answers(location: str | Path) -> None:
    catalog = Catalog(location, durable=False)
    catalog.create_bucket("b", "owner", "us-east-1")
    keys = ["a", "a/b", "a/c/d", "é", "z", "\u00ff", "\U0001f600", "A"]
    for n, key in enumerate(keys):
        catalog.commit_object(_record(key, "v1", size=n + 1))
    # UTF-8 byte order, as S3 lists (PostgreSQL: COLLATE "C", whatever the database's collation).
    assert [e.key for e in catalog.list_objects("b").objects] == sorted(keys, key=lambda k: k.encode())
    page = catalog.list_objects("b", prefix="a", delimiter="/")
    assert ([e.key for e in page.objects], page.common_prefixes) == (["a"], ["a/"])
    generations = [catalog.commit_object(_record("a", f"v{i}")).generation for i in range(2, 5)]
    assert generations == sorted(set(generations))
    assert catalog.delete_object("b", "a") is not None
    assert catalog.commit_object(_record("a", "again")).generation > generations[-1]  # never reused
    with pytest.raises(PreconditionFailed):
        catalog.commit_object(_record("a", "other"), if_none_match="*")
    assert catalog.tier_usage() == {"hot": (len(keys), sum(range(1, len(keys) + 1)))}
    assert catalog.count_objects("b") == (len(keys), sum(range(1, len(keys) + 1)))
    with pytest.raises(BucketNotEmpty):
        catalog.delete_bucket("b")
    assert catalog.acquire_lease("job", "one", 30, 100.0)
    assert not catalog.acquire_lease("job", "two", 30, 110.0)
    assert catalog.acquire_lease("job", "two", 30, 131.0)  # expired: taken over
    catalog.put_setting("clock_offset_seconds", "86400.0")
    assert (
        Catalog(location, durable=False).get_setting("clock_offset_seconds") == "86400.0"
    )  # another process
    catalog.close()


def test_concurrent_overwrites_keep_the_counters_and_one_winner(location: str | Path) -> None:
    """Many threads overwrite a few keys at once: on PostgreSQL every conflict is retried, never lost."""
    catalog = Catalog(location, durable=False)
    catalog.create_bucket("b", "owner", "us-east-1")
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            for i in range(30):
                catalog.commit_object(_record(f"k{i % 5}", f"{n}-{i}", size=n + 1))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    sizes = [catalog.get_object("b", f"k{i}").size for i in range(5)]
    assert catalog.tier_usage() == {"hot": (5, sum(sizes))}
    catalog.close()


def test_a_catalog_newer_than_the_code_is_refused(location: str | Path) -> None:
    Catalog(location, durable=False).close()
    newer = SCHEMA_VERSION + 1
    if isinstance(location, Path):
        with sqlite3.connect(location) as db:
            db.execute("UPDATE schema_version SET version = ?", (newer,))
    else:
        postgres.session_server().sql(location, "UPDATE schema_version SET version = %s", (newer,))
    with pytest.raises(SchemaTooNew, match=f"schema version {newer}, newer than this tierstore's"):
        Catalog(location, durable=False)


def _blob_indexes(catalog: Catalog, location: str | Path) -> set[str]:
    if isinstance(location, Path):
        rows = catalog._reader().execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'blobs'"
        )
    else:
        rows = catalog._reader().execute("SELECT indexname FROM pg_indexes WHERE tablename = 'blobs'")
    return {row[0] for row in rows}


def test_a_version_7_catalog_loses_the_index_of_blobs_by_upload(location: str | Path) -> None:
    """Schema 7 → 8: the index of `blobs` by upload id, which no query read and every blob written
    updated, is dropped; a new catalog never has it. Blobs of objects and of parts work as before."""
    from tiering.catalog import schema

    old_index = "CREATE INDEX IF NOT EXISTS blobs_by_upload ON blobs (upload_id)"  # as version 7 had it
    if isinstance(location, Path):
        db = sqlite3.connect(location, isolation_level=None)
        db.execute(schema.VERSION_TABLE)
        for step in schema.SQLITE_MIGRATIONS[:7]:
            step(db)
        db.execute(old_index)
        db.execute("INSERT INTO schema_version (version) VALUES (7)")
        db.close()
    else:
        import psycopg

        with psycopg.connect(str(location), autocommit=True) as conn:
            conn.execute(schema.VERSION_TABLE)
            for step in schema.POSTGRES_MIGRATIONS[:7]:
                step(conn)
            conn.execute(old_index)
            conn.execute("INSERT INTO schema_version (version) VALUES (7)")
    catalog = Catalog(location, durable=False)
    try:
        assert catalog._reader().execute("SELECT MAX(version) FROM schema_version").fetchone()[0] == 8
        assert "blobs_by_upload" not in _blob_indexes(catalog, location)
        catalog.create_bucket("b", "owner", "us-east-1")
        catalog.commit_object(_record("k", "d1"))
        assert catalog.stored_blob("id-k-d1") is not None
        catalog.create_upload(UploadRecord("u1", "b", "m", 1.0, "hot", ObjectMeta(), None, "owner"))
        catalog.put_part("u1", PartRecord(1, 1, "e-p1", 1.0, StoredData("part-1", 1, {}), None))
        assert catalog.stored_blob("part-1") is not None  # a part's blob, found by its data id
    finally:
        catalog.close()


def test_the_heal_queue_is_claimed_once_and_again_after_its_claim_runs_out(location: str | Path) -> None:
    catalog = Catalog(location, durable=False)
    catalog.queue_heals([("hot", "blob-1"), ("hot", "blob-2")], now=10.0)
    catalog.queue_heals([("hot", "blob-1")], now=11.0)  # found again by another reader: queued once
    assert catalog.heal_queue_length() == 2 and catalog.heal_due(12.0)
    assert catalog.claim_heals("gateway-a", now=12.0, ttl=60, limit=1) == [("hot", "blob-1")]
    assert catalog.claim_heals("gateway-b", now=13.0, ttl=60) == [("hot", "blob-2")]
    assert catalog.claim_heals("gateway-b", now=14.0, ttl=60) == [] and not catalog.heal_due(14.0)
    catalog.finish_heal("blob-2", "gateway-b")
    # gateway-a died holding blob-1: once its claim runs out, another gateway takes it.
    assert catalog.claim_heals("gateway-b", now=73.0, ttl=60) == [("hot", "blob-1")]
    catalog.finish_heal("blob-1", "gateway-a")  # the dead one's late finish removes nothing
    assert catalog.heal_queue_length() == 1
    catalog.finish_heal("blob-1", "gateway-b")
    assert catalog.heal_queue_length() == 0
    catalog.close()


def test_a_bucket_deleted_while_objects_commit_into_it_leaves_no_object_behind(location: str | Path) -> None:
    """The bucket's delete and PUTs into it race: either the delete sees an object (BucketNotEmpty)
    or the PUTs after it fail (BucketNotFound); never an object in a bucket that is gone."""
    catalog = Catalog(location, durable=False)
    for round_ in range(10):
        bucket = f"b{round_}"
        catalog.create_bucket(bucket, "owner", "us-east-1")
        start = threading.Barrier(5)
        outcome: list[str] = []
        unexpected: list[BaseException] = []  # a thread's exception is otherwise only a warning

        def put(
            n: int,
            bucket: str = bucket,
            start: threading.Barrier = start,
            unexpected: list[BaseException] = unexpected,
        ) -> None:
            start.wait()
            record = _record(f"k{n}", "x")
            try:
                catalog.commit_object(dataclasses.replace(record, bucket=bucket))
            except BucketNotFound:
                pass
            except BaseException as exc:
                unexpected.append(exc)

        def delete(
            bucket: str = bucket, start: threading.Barrier = start, outcome: list[str] = outcome
        ) -> None:
            start.wait()
            try:
                catalog.delete_bucket(bucket)
                outcome.append("deleted")
            except BucketNotEmpty:
                outcome.append("not empty")

        threads = [threading.Thread(target=put, args=(n,)) for n in range(4)] + [
            threading.Thread(target=delete)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert unexpected == []
        if outcome == ["deleted"]:
            assert catalog.count_objects(bucket) == (0, 0), round_
            with pytest.raises(BucketNotFound):
                catalog.get_bucket(bucket)
        else:
            assert catalog.count_objects(bucket)[0] > 0
    catalog.close()
