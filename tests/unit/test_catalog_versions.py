"""Versioning in the catalog, on SQLite and PostgreSQL: states, versions, delete markers, the
null version, ListObjectVersions paging, blobs kept and retired, moves of noncurrent versions."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import postgres
from tiering.backend import StoredData
from tiering.catalog import Catalog
from tiering.errors import DeleteMarkerCurrent, PreconditionFailed, VersionIsDeleteMarker, VersionNotFound
from tiering.records import ObjectMeta, ObjectRecord, RestoreState, Segment


def _record(key: str, data: str, size: int = 1) -> ObjectRecord:
    return ObjectRecord(
        bucket="b",
        key=key,
        size=size,
        etag=data,
        last_modified=1.0,
        tier="hot",
        meta=ObjectMeta(),
        segments=(Segment(StoredData(data, size, {})),),
    )


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)])
def catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Catalog]:
    if request.param == "sqlite":
        location: str | Path = tmp_path / "catalog.db"
    else:
        if postgres.unavailable():
            pytest.skip(str(postgres.unavailable()))
        location = postgres.session_server().create_database("versions")
    catalog = Catalog(location, durable=False)
    catalog.create_bucket("b", "owner", "us-east-1")
    yield catalog
    catalog.close()


def _garbage(catalog: Catalog) -> set[str]:
    return {stored.data_id for _, stored in catalog.due_garbage(float("inf"), limit=10_000)}


def test_unversioned_overwrite_replaces_the_null_version(catalog: Catalog) -> None:
    assert catalog.versioning("b") == ""
    first = catalog.commit_object(_record("k", "d1"))
    second = catalog.commit_object(_record("k", "d2"))
    assert first.version_id == second.version_id == "null"
    assert "d1" in _garbage(catalog)
    page = catalog.list_versions("b")
    assert [(e.key, e.version_id, e.is_latest) for e in page.entries] == [("k", "null", True)]


def test_enabled_keeps_every_version_and_delete_adds_a_marker(catalog: Catalog) -> None:
    catalog.set_versioning("b", "Enabled")
    v1 = catalog.commit_object(_record("k", "d1"))
    v2 = catalog.commit_object(_record("k", "d2"))
    assert v1.version_id != v2.version_id and "null" not in (v1.version_id, v2.version_id)
    assert catalog.get_version("b", "k", None).etag == "d2"
    assert catalog.get_version("b", "k", v1.version_id).etag == "d1"
    assert catalog.is_referenced("d1") and not _garbage(catalog)
    outcome = catalog.delete_object_version("b", "k")
    assert outcome is not None and outcome.delete_marker and outcome.version_id
    marker = outcome.version_id
    with pytest.raises(DeleteMarkerCurrent) as missing:
        catalog.get_version("b", "k", None)
    assert missing.value.version_id == marker
    with pytest.raises(VersionIsDeleteMarker):
        catalog.get_version("b", "k", marker)
    with pytest.raises(VersionNotFound):
        catalog.get_version("b", "k", "no-such-version")
    entries = catalog.list_versions("b").entries
    assert [(e.version_id, e.is_latest, e.is_marker) for e in entries] == [
        (marker, True, True),
        (v2.version_id, False, False),
        (v1.version_id, False, False),
    ]
    assert catalog.list_objects("b").objects == []
    # Deleting the marker makes the newest version current again.
    catalog.delete_object_version("b", "k", marker)
    assert catalog.get_version("b", "k", None).version_id == v2.version_id
    assert [e.key for e in catalog.list_objects("b").objects] == ["k"]
    # Deleting the current version by id: the previous one becomes current; its data is retired.
    outcome = catalog.delete_object_version("b", "k", v2.version_id)
    assert outcome is not None and not outcome.delete_marker
    assert catalog.get_version("b", "k", None).version_id == v1.version_id
    assert _garbage(catalog) == {"d2"}
    catalog.delete_object_version("b", "k", v1.version_id)
    with pytest.raises(Exception):  # noqa: B017 - ObjectNotFound, not a marker
        catalog.get_version("b", "k", None)
    assert catalog.list_versions("b").entries == []


def test_suspended_writes_and_deletes_the_null_version(catalog: Catalog) -> None:
    catalog.set_versioning("b", "Enabled")
    v1 = catalog.commit_object(_record("k", "d1"))
    catalog.set_versioning("b", "Suspended")
    n1 = catalog.commit_object(_record("k", "d2"))
    assert n1.version_id == "null"
    n2 = catalog.commit_object(_record("k", "d3"))  # replaces the null version
    assert n2.version_id == "null" and "d2" in _garbage(catalog)
    outcome = catalog.delete_object_version("b", "k")  # the null version goes, a null marker comes
    assert outcome is not None and outcome.version_id == "null" and outcome.delete_marker
    assert "d3" in _garbage(catalog)
    entries = catalog.list_versions("b").entries
    assert [(e.version_id, e.is_marker, e.is_latest) for e in entries] == [
        ("null", True, True),
        (v1.version_id, False, False),
    ]


def test_a_bucket_with_versions_or_markers_is_not_empty(catalog: Catalog) -> None:
    catalog.set_versioning("b", "Enabled")
    catalog.commit_object(_record("k", "d1"))
    catalog.delete_object("b", "k")
    from tiering.errors import BucketNotEmpty

    with pytest.raises(BucketNotEmpty):
        catalog.delete_bucket("b")


def test_list_versions_pages_with_markers_prefixes_and_delimiters(catalog: Catalog) -> None:
    catalog.set_versioning("b", "Enabled")
    expected: list[tuple[str, str]] = []
    for key in ["a", "dir/x", "dir/y", "m", "z"]:
        ids = [catalog.commit_object(_record(key, f"{key}{n}")).version_id for n in range(3)]
        expected += [(key, v) for v in reversed(ids)]
    everything = catalog.list_versions("b", max_keys=1000)
    assert [(e.key, e.version_id) for e in everything.entries] == expected
    assert not everything.is_truncated
    # Paging by (KeyMarker, VersionIdMarker), two at a time, gives the same sequence.
    seen: list[tuple[str, str]] = []
    key_marker, version_marker = "", ""
    for _ in range(50):
        page = catalog.list_versions("b", key_marker=key_marker, version_id_marker=version_marker, max_keys=2)
        seen += [(e.key, e.version_id) for e in page.entries]
        if not page.is_truncated:
            break
        key_marker, version_marker = page.next_key_marker or "", page.next_version_id_marker or ""
    assert seen == expected
    latest = [(e.key, e.is_latest) for e in everything.entries if e.is_latest]
    assert [k for k, _ in latest] == ["a", "dir/x", "dir/y", "m", "z"]
    rolled = catalog.list_versions("b", delimiter="/")
    assert rolled.common_prefixes == ["dir/"]
    assert {e.key for e in rolled.entries} == {"a", "m", "z"}
    under = catalog.list_versions("b", prefix="dir/", max_keys=4)
    assert [e.key for e in under.entries] == ["dir/x"] * 3 + ["dir/y"] and under.is_truncated


def test_a_noncurrent_version_moves_tiers_by_compare_and_swap(catalog: Catalog) -> None:
    catalog.set_versioning("b", "Enabled")
    v1 = catalog.commit_object(_record("k", "d1"))
    catalog.commit_object(_record("k", "d2"))
    [noncurrent], cursor = catalog.noncurrent_versions("b", None, 10)
    assert cursor is None
    assert noncurrent.record.version_id == v1.version_id and noncurrent.newer_noncurrent == 0
    moved = catalog.move_version(
        "b",
        "k",
        v1.version_id,
        expected_generation=noncurrent.record.generation,
        tier="warm",
        segments=(Segment(StoredData("d1-warm", 1, {})),),
        storage_class="STANDARD_IA",
        now=5.0,
    )
    assert moved.tier == "warm" and moved.tier_since == 5.0
    assert catalog.get_version("b", "k", v1.version_id).tier == "warm"
    assert catalog.stored_blob("d1-warm") is not None and "d1" in _garbage(catalog)
    with pytest.raises(PreconditionFailed):  # a second mover with the old generation loses
        catalog.move_version(
            "b",
            "k",
            v1.version_id,
            expected_generation=noncurrent.record.generation,
            tier="cold",
            segments=(Segment(StoredData("d1-cold", 1, {})),),
            storage_class="GLACIER",
            now=6.0,
        )
    # Usage counts noncurrent versions on their own tiers.
    assert catalog.tier_usage() == {"hot": (1, 1), "warm": (1, 1)}


def test_a_noncurrent_version_has_its_own_restore(catalog: Catalog) -> None:
    """RestoreObject by versionId: the restore state and the copy's blobs belong to that version
    (compare-and-swap on its generation), the current version is untouched, and the daemon finds
    it through `restored_versions`; the copy goes when the restore is cleared or the version is."""
    catalog.set_versioning("b", "Enabled")
    v1 = catalog.commit_object(dataclasses.replace(_record("k", "d1"), tier="cold"))
    v2 = catalog.commit_object(_record("k", "d2"))
    assert catalog.restored_versions(("", "", ""), 10) == []
    asked = catalog.set_restore(
        "b",
        "k",
        expected_generation=v1.generation,
        restore=RestoreState(ongoing=True, expiry=100.0, days=1),
        now=1.0,
        version_id=v1.version_id,
    )
    [found] = catalog.restored_versions(("", "", ""), 10)
    assert found.version_id == v1.version_id and found.restore is not None and found.restore.ongoing
    assert found.generation == asked.generation != v1.generation
    assert catalog.get_object("b", "k").restore is None and catalog.get_object("b", "k").etag == v2.etag
    copy = RestoreState(
        ongoing=False, expiry=100.0, days=1, tier="warm", segments=(Segment(StoredData("d1-copy", 1, {})),)
    )
    with pytest.raises(PreconditionFailed):  # the generation it had before the request: stale
        catalog.set_restore(
            "b", "k", expected_generation=v1.generation, restore=copy, now=2.0, version_id=v1.version_id
        )
    done = catalog.set_restore(
        "b", "k", expected_generation=found.generation, restore=copy, now=2.0, version_id=v1.version_id
    )
    restored = catalog.get_version("b", "k", v1.version_id).restore
    assert restored is not None and restored.segments[0].stored.data_id == "d1-copy"
    owner = catalog._reader().execute("SELECT version_id FROM blobs WHERE data_id = 'd1-copy'").fetchone()
    assert owner is not None and owner[0] == v1.version_id  # the orphan sweep sees the copy as used
    assert catalog.restored_versions(("b", "k", v1.version_id), 10) == []  # the cursor moves past it
    catalog.set_restore(
        "b", "k", expected_generation=done.generation, restore=None, now=3.0, version_id=v1.version_id
    )
    assert catalog.get_version("b", "k", v1.version_id).restore is None
    assert "d1-copy" in _garbage(catalog) and "d1" not in _garbage(catalog)
    assert catalog.restored_versions(("", "", ""), 10) == []
    # Deleting a restored version retires its copy with its data.
    again = catalog.get_version("b", "k", v1.version_id)
    copy2 = dataclasses.replace(copy, segments=(Segment(StoredData("d1-copy2", 1, {})),))
    catalog.set_restore(
        "b", "k", expected_generation=again.generation, restore=copy2, now=4.0, version_id=v1.version_id
    )
    catalog.delete_object_version("b", "k", v1.version_id)
    assert {"d1", "d1-copy2"} <= _garbage(catalog)


def test_the_noncurrent_cursor_counts_newer_versions_across_batches(catalog: Catalog) -> None:
    catalog.set_versioning("b", "Enabled")
    for n in range(6):
        catalog.commit_object(_record("k", f"d{n}"))
    catalog.delete_object("b", "k")  # a marker among them changes no count
    catalog.commit_object(_record("k", "d6"))
    seen = []
    cursor = None
    for _ in range(20):
        batch, cursor = catalog.noncurrent_versions("b", cursor, 2)
        seen += [(v.record.etag, v.newer_noncurrent) for v in batch]
        if cursor is None:
            break
    assert seen == [("d5", 0), ("d4", 1), ("d3", 2), ("d2", 3), ("d1", 4), ("d0", 5)]


def test_list_versions_reads_by_index_seeks_only(tmp_path: Path) -> None:
    """Every statement ListObjectVersions runs is an index search (no table scan), so a page costs
    the same at any depth of a bucket with many versions (pages/s at scale: bench/bench_versions.py)."""
    catalog = Catalog(tmp_path / "catalog.db", durable=False)
    catalog.create_bucket("b", "owner", "us-east-1")
    catalog.set_versioning("b", "Enabled")
    ids = {}
    for n in range(30):
        key = f"dir{n % 3}/key{n:03d}"
        ids[key] = catalog.commit_object(_record(key, f"d{n}")).version_id
        catalog.commit_object(_record(key, f"e{n}"))
    db = catalog._reader()
    statements: list[str] = []
    db.set_trace_callback(statements.append)
    try:
        catalog.list_versions("b", max_keys=7)
        catalog.list_versions("b", key_marker="dir1/key010", version_id_marker=ids["dir1/key010"], max_keys=5)
        catalog.list_versions("b", prefix="dir2/", delimiter="/", max_keys=5)
        catalog.list_versions("b", delimiter="/", max_keys=5)
    finally:
        db.set_trace_callback(None)
    selects = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    assert len(selects) >= 8
    for statement in selects:
        plan = " | ".join(row[3] for row in db.execute(f"EXPLAIN QUERY PLAN {statement}"))
        for table in ("objects", "object_versions", "buckets"):
            assert f"SCAN {table}" not in plan, (statement, plan)


@pytest.mark.parametrize("dialect", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)])
def test_a_version_2_catalog_is_migrated_with_its_objects(dialect: str, tmp_path: Path) -> None:
    """Schema 2 → 3: existing objects become the "null" version of an unversioned bucket."""
    import sqlite3

    from tiering.catalog import schema

    object_row = (
        "INSERT INTO buckets (name, created, owner, region) VALUES ('b', 1, 'o', 'r');"
        "INSERT INTO objects (bucket, key, generation, size, etag, last_modified, tier, meta, tags, segments) "
        "VALUES ('b', 'k', 1, 1, 'e', 1, 'hot', '{}', '{}', '[{\"id\": \"d1\", \"size\": 1}]');"
        "INSERT INTO blobs (data_id, tier, bucket, key) VALUES ('d1', 'hot', 'b', 'k');"
        "INSERT INTO schema_version (version) VALUES (2)"
    )
    if dialect == "sqlite":
        location: str | Path = tmp_path / "old.db"
        db = sqlite3.connect(location, isolation_level=None)
        db.execute(schema.VERSION_TABLE)
        for step in schema.SQLITE_MIGRATIONS[:2]:
            step(db)
        db.executescript(object_row)
        db.close()
    else:
        if postgres.unavailable():
            pytest.skip(str(postgres.unavailable()))
        import psycopg

        location = postgres.session_server().create_database("old")
        with psycopg.connect(location, autocommit=True) as conn:
            conn.execute(schema.VERSION_TABLE)
            for step in schema.POSTGRES_MIGRATIONS[:2]:
                step(conn)
            for statement in object_row.split(";"):
                conn.execute(statement)
    catalog = Catalog(location, durable=False)
    try:
        assert catalog.get_object("b", "k").version_id == "null"
        catalog.set_versioning("b", "Enabled")
        new = catalog.commit_object(_record("k", "d2"))
        entries = catalog.list_versions("b").entries
        assert [(e.version_id, e.is_latest) for e in entries] == [(new.version_id, True), ("null", False)]
        assert catalog.stored_blob("d1") is not None  # the old null version still owns its data
    finally:
        catalog.close()


@pytest.mark.parametrize("dialect", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)])
def test_a_version_3_catalog_gains_the_restored_versions_index(dialect: str, tmp_path: Path) -> None:
    """Schema 3 → 4 (and on to the newest): the partial index of versions with a restore, which the
    daemon reads."""
    import sqlite3

    from tiering.catalog import schema

    assert schema.SCHEMA_VERSION >= 4
    if dialect == "sqlite":
        location: str | Path = tmp_path / "old.db"
        db = sqlite3.connect(location, isolation_level=None)
        db.execute(schema.VERSION_TABLE)
        for step in schema.SQLITE_MIGRATIONS[:3]:
            step(db)
        db.execute("INSERT INTO schema_version (version) VALUES (3)")
        db.close()
    else:
        if postgres.unavailable():
            pytest.skip(str(postgres.unavailable()))
        import psycopg

        location = postgres.session_server().create_database("old3")
        with psycopg.connect(location, autocommit=True) as conn:
            conn.execute(schema.VERSION_TABLE)
            for step in schema.POSTGRES_MIGRATIONS[:3]:
                step(conn)
            conn.execute("INSERT INTO schema_version (version) VALUES (3)")
    catalog = Catalog(location, durable=False)
    try:
        db = catalog._reader()
        assert db.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] == schema.SCHEMA_VERSION
        if dialect == "sqlite":
            names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
            statements: list[str] = []
            db.set_trace_callback(statements.append)
            try:
                catalog.restored_versions(("b", "k", "v"), 10)
            finally:
                db.set_trace_callback(None)
            [select] = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
            plan = " | ".join(row[3] for row in db.execute(f"EXPLAIN QUERY PLAN {select}"))
            assert "object_versions_restored" in plan, plan
        else:
            names = {
                r[0]
                for r in db.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'object_versions'")
            }
        assert "object_versions_restored" in names
    finally:
        catalog.close()
