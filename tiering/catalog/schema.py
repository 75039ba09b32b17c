"""The catalog's schema on both engines, and its versioned migrations.

`SCHEMA_VERSION` is the version this code writes, recorded in the one row of `schema_version`.
Opening a catalog runs the migrations from its version up to this one, in order; a catalog whose
version is newer than this code's (made by a newer tierstore) is refused with `SchemaTooNew`,
never read or written with the wrong idea of its tables.

Version 1 is the schema as it was when versions began. On SQLite its steps are idempotent and
run at every open (as before versions existed): catalogs made before then, with no version row,
are brought up to it whatever they lack (`storage_class`, `counters`, `checksum_type`, the usage
counters). A change to the schema from now on is a new version: append a step to
`SQLITE_MIGRATIONS` and `POSTGRES_MIGRATIONS` and raise `SCHEMA_VERSION`.

PostgreSQL: the SQL is kept within what PostgreSQL 15+ and the PostgreSQL-compatible distributed
databases (CockroachDB, YugabyteDB) accept: plain tables and B-tree indexes, a SEQUENCE, one
PL/pgSQL row trigger; leases are rows with an expiry (leases.py), never advisory locks, and no
correctness depends on LISTEN/NOTIFY. Keys are `TEXT COLLATE "C"`: byte order of UTF-8, which is
S3's listing order (the database's default collation may sort by language rules instead).
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import time
from collections.abc import Callable
from typing import Any

SCHEMA_VERSION = 8


class SchemaTooNew(RuntimeError):
    """The catalog was migrated by a newer tierstore than this one."""

    def __init__(self, found: int, supported: int, where: str) -> None:
        super().__init__(
            f"the catalog at {where} has schema version {found}, newer than this tierstore's ({supported}): "
            "it was upgraded by a newer release; run that release (or newer) against it, this one will not "
            "read or write it"
        )
        self.found = found
        self.supported = supported


SCHEMA = [
    """CREATE TABLE IF NOT EXISTS buckets (
        name TEXT PRIMARY KEY,
        created REAL NOT NULL,
        owner TEXT NOT NULL,
        region TEXT NOT NULL
    )""",
    # One row per visible object. `key` is TEXT compared with the BINARY collation, i.e. by
    # UTF-8 bytes: exactly S3's listing order.
    """CREATE TABLE IF NOT EXISTS objects (
        bucket TEXT NOT NULL,
        key TEXT NOT NULL,
        generation INTEGER NOT NULL,
        size INTEGER NOT NULL,
        etag TEXT NOT NULL,
        last_modified REAL NOT NULL,
        tier TEXT NOT NULL,
        meta TEXT NOT NULL,
        tags TEXT NOT NULL,
        checksum_algorithm TEXT,
        checksum TEXT,
        segments TEXT NOT NULL,
        heat REAL NOT NULL DEFAULT 0,
        heat_at REAL NOT NULL DEFAULT 0,
        last_access REAL NOT NULL DEFAULT 0,
        tier_since REAL NOT NULL DEFAULT 0,
        restore TEXT,
        storage_class TEXT NOT NULL DEFAULT 'STANDARD',  -- copied out of meta: listings read no JSON
        PRIMARY KEY (bucket, key)
    )""",
    # History of tier moves per object, for `tierstore admin object` (append-only, small rows).
    """CREATE TABLE IF NOT EXISTS moves (
        bucket TEXT NOT NULL,
        key TEXT NOT NULL,
        at REAL NOT NULL,
        from_tier TEXT NOT NULL,
        to_tier TEXT NOT NULL,
        size INTEGER NOT NULL,
        reason TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS moves_by_key ON moves (bucket, key, at)",
    # S3 users besides the root credentials of the config (`tierstore admin user ...`).
    """CREATE TABLE IF NOT EXISTS users (
        access_key TEXT PRIMARY KEY,
        secret_key TEXT NOT NULL,
        name TEXT NOT NULL,
        created REAL NOT NULL,
        is_admin INTEGER NOT NULL DEFAULT 0
    )""",
    # Small named values shared by every process on this catalog (e.g. the test clock's offset).
    """CREATE TABLE IF NOT EXISTS settings (
        name TEXT PRIMARY KEY,
        value TEXT NOT NULL
    )""",
    # Catalog-wide counters. `generation`: every change to an object row takes the next value, so
    # a key's generation never repeats — not even after a delete and a new PUT of the same key,
    # which a per-row `generation + 1` restarted at 1, letting a mover that copied the old object
    # compare-and-swap its copy over the new one (an acknowledged write lost). See _next_generation.
    """CREATE TABLE IF NOT EXISTS counters (
        name TEXT PRIMARY KEY,
        value INTEGER NOT NULL
    )""",
    # Which process may run a singleton job (the lifecycle daemon) until when.
    """CREATE TABLE IF NOT EXISTS leases (
        name TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        expires REAL NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS uploads (
        upload_id TEXT PRIMARY KEY,
        bucket TEXT NOT NULL,
        key TEXT NOT NULL,
        initiated REAL NOT NULL,
        tier TEXT NOT NULL,
        meta TEXT NOT NULL,
        tags TEXT NOT NULL,
        checksum_algorithm TEXT,
        owner TEXT NOT NULL,
        checksum_type TEXT  -- COMPOSITE / FULL_OBJECT (added later: see _migrate)
    )""",
    "CREATE INDEX IF NOT EXISTS uploads_by_key ON uploads (bucket, key, upload_id)",
    """CREATE TABLE IF NOT EXISTS parts (
        upload_id TEXT NOT NULL,
        part_number INTEGER NOT NULL,
        size INTEGER NOT NULL,
        etag TEXT NOT NULL,
        last_modified REAL NOT NULL,
        stored TEXT NOT NULL,
        checksum TEXT,
        PRIMARY KEY (upload_id, part_number)
    )""",
    # Uploads completed lately, so that a re-sent CompleteMultipartUpload (a client retrying after a
    # timeout, maybe to another gateway) gets the same answer while the object it made is still the
    # current one. Forgotten after COMPLETED_UPLOAD_MEMORY by `forget_completed_uploads`.
    """CREATE TABLE IF NOT EXISTS completed_uploads (
        upload_id TEXT PRIMARY KEY,
        bucket TEXT NOT NULL,
        key TEXT NOT NULL,
        parts TEXT NOT NULL,
        etag TEXT NOT NULL,
        last_modified REAL NOT NULL,
        completed REAL NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS completed_uploads_by_time ON completed_uploads (completed)",
    # Data that no object refers to any more, deleted by the collector once readers are done.
    """CREATE TABLE IF NOT EXISTS garbage (
        data_id TEXT PRIMARY KEY,
        tier TEXT NOT NULL,
        stored TEXT NOT NULL,
        not_before REAL NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS garbage_due ON garbage (not_before)",
    # Blobs that a process has been reading for a while (`serve --workers N`, a lifecycle
    # process): the collector, which may run in another process, leaves them alone until the
    # pin expires. Short reads never get here; the retire grace covers them.
    """CREATE TABLE IF NOT EXISTS read_pins (
        holder TEXT NOT NULL,
        data_id TEXT NOT NULL,
        expires REAL NOT NULL,
        PRIMARY KEY (holder, data_id)
    )""",
    "CREATE INDEX IF NOT EXISTS read_pins_by_blob ON read_pins (data_id)",
    # Every live blob and who uses it (an object, or a part of an unfinished upload): lets heal
    # record a moved shard, and the orphan sweep ask "is this blob referenced?" with one lookup.
    """CREATE TABLE IF NOT EXISTS blobs (
        data_id TEXT PRIMARY KEY,
        tier TEXT NOT NULL,
        bucket TEXT,
        key TEXT,
        upload_id TEXT
    )""",
    # (Until version 8 also an index by upload_id, which no query used: see version 8.)
    # Failure domains of the erasure-coded tiers: config-declared ones are seeded at start, others
    # added at runtime (`tierstore admin domain add`); status active | draining | removed.
    """CREATE TABLE IF NOT EXISTS domains (
        id TEXT PRIMARY KEY,
        tier TEXT NOT NULL,
        path TEXT NOT NULL,
        node TEXT NOT NULL,
        rack TEXT NOT NULL,
        zone TEXT NOT NULL,
        weight REAL NOT NULL,
        status TEXT NOT NULL,
        changed REAL NOT NULL
    )""",
    # Shard files a rebalance moved away from (or is copying to), deleted after a grace unless the
    # blob's recorded location names them again by then (tiering.rebalance).
    """CREATE TABLE IF NOT EXISTS shard_garbage (
        data_id TEXT NOT NULL,
        tier TEXT NOT NULL,
        domain TEXT NOT NULL,
        shard INTEGER NOT NULL,
        not_before REAL NOT NULL,
        PRIMARY KEY (data_id, domain, shard)
    )""",
    "CREATE INDEX IF NOT EXISTS shard_garbage_due ON shard_garbage (not_before)",
    # IAM-style user policies (`tierstore admin user policy set NAME FILE`), by user name.
    """CREATE TABLE IF NOT EXISTS user_policies (
        name TEXT PRIMARY KEY,
        policy TEXT NOT NULL
    )""",
    # Per-bucket configuration documents (lifecycle, intelligent-tiering, ...), stored as given.
    """CREATE TABLE IF NOT EXISTS bucket_config (
        bucket TEXT NOT NULL,
        name TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (bucket, name)
    )""",
]

# Objects and bytes per (bucket, tier), kept by triggers on `objects` in the same transaction as
# every change, so that usage is a read of a few rows: metrics scrapes, the status page (every 5 s
# per open tab) and `admin status` used to count the whole objects table each time (0.76 s per
# million objects here). Created, and filled from `objects`, by `_add_usage_counters`.
#
# Why a BEFORE INSERT trigger: `INSERT OR REPLACE` (commit_object, and older versions of it during
# a rolling upgrade) deletes the row it replaces without firing DELETE triggers (SQLite fires them
# only with recursive_triggers on, which no connection turns on), so the insert itself takes the
# replaced row's share off first. For the same reason no statement may insert into `objects` with
# ON CONFLICT DO NOTHING / DO UPDATE or OR IGNORE: the BEFORE trigger would fire for a row that
# is then not replaced (create_empty_objects filters existing keys out instead).
USAGE_SCHEMA = [
    """CREATE TABLE tier_usage (
        bucket TEXT NOT NULL,
        tier TEXT NOT NULL,
        objects INTEGER NOT NULL,
        bytes INTEGER NOT NULL,
        PRIMARY KEY (bucket, tier)
    ) WITHOUT ROWID""",
    """CREATE TRIGGER tier_usage_replaced BEFORE INSERT ON objects BEGIN
        UPDATE tier_usage SET objects = objects - 1,
            bytes = bytes - (SELECT size FROM objects WHERE bucket = NEW.bucket AND key = NEW.key)
        WHERE bucket = NEW.bucket
            AND tier = (SELECT tier FROM objects WHERE bucket = NEW.bucket AND key = NEW.key);
    END""",
    """CREATE TRIGGER tier_usage_insert AFTER INSERT ON objects BEGIN
        INSERT INTO tier_usage (bucket, tier, objects, bytes) VALUES (NEW.bucket, NEW.tier, 1, NEW.size)
        ON CONFLICT (bucket, tier) DO UPDATE SET objects = objects + 1, bytes = bytes + excluded.bytes;
    END""",
    """CREATE TRIGGER tier_usage_delete AFTER DELETE ON objects BEGIN
        UPDATE tier_usage SET objects = objects - 1, bytes = bytes - OLD.size
        WHERE bucket = OLD.bucket AND tier = OLD.tier;
    END""",
    """CREATE TRIGGER tier_usage_update AFTER UPDATE OF bucket, tier, size ON objects BEGIN
        UPDATE tier_usage SET objects = objects - 1, bytes = bytes - OLD.size
        WHERE bucket = OLD.bucket AND tier = OLD.tier;
        INSERT INTO tier_usage (bucket, tier, objects, bytes) VALUES (NEW.bucket, NEW.tier, 1, NEW.size)
        ON CONFLICT (bucket, tier) DO UPDATE SET objects = objects + 1, bytes = bytes + excluded.bytes;
    END""",
]


def _postgresql(statement: str) -> str:
    """A SQLite CREATE statement of SCHEMA in PostgreSQL's types: 64-bit integers, doubles, and
    text compared by bytes (COLLATE "C": S3's order, whatever the database's default collation)."""
    statement = re.sub(r"\bREAL\b", "DOUBLE PRECISION", statement)
    statement = re.sub(r"\bINTEGER\b", "BIGINT", statement)
    return re.sub(r"\bTEXT\b", 'TEXT COLLATE "C"', statement)


# PostgreSQL's usage counters: the same numbers as SQLite's, kept by one AFTER trigger (an upsert
# fires it as an UPDATE, so PostgreSQL needs no BEFORE INSERT trick). Each (bucket, tier) has up
# to USAGE_SLOTS rows, chosen by the backend process id: concurrent commits from different
# connections add to different rows instead of queueing on one (under SERIALIZABLE, one row
# updated by every PUT of a bucket would make every concurrent PUT but one fail and retry).
# Readers sum the slots.
USAGE_SLOTS = 16
POSTGRES_USAGE_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS tier_usage (
        bucket TEXT COLLATE "C" NOT NULL,
        tier TEXT COLLATE "C" NOT NULL,
        slot INTEGER NOT NULL,
        objects BIGINT NOT NULL,
        bytes BIGINT NOT NULL,
        PRIMARY KEY (bucket, tier, slot)
    )""",
    f"""CREATE OR REPLACE FUNCTION tier_usage_track() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        s INTEGER := pg_backend_pid() % {USAGE_SLOTS};
    BEGIN
        IF TG_OP = 'UPDATE' OR TG_OP = 'DELETE' THEN
            INSERT INTO tier_usage (bucket, tier, slot, objects, bytes) VALUES (OLD.bucket, OLD.tier, s, -1, -OLD.size)
            ON CONFLICT (bucket, tier, slot) DO UPDATE
                SET objects = tier_usage.objects - 1, bytes = tier_usage.bytes - OLD.size;
        END IF;
        IF TG_OP = 'UPDATE' OR TG_OP = 'INSERT' THEN
            INSERT INTO tier_usage (bucket, tier, slot, objects, bytes) VALUES (NEW.bucket, NEW.tier, s, 1, NEW.size)
            ON CONFLICT (bucket, tier, slot) DO UPDATE
                SET objects = tier_usage.objects + 1, bytes = tier_usage.bytes + NEW.size;
        END IF;
        RETURN NULL;
    END $$""",
    """CREATE TRIGGER tier_usage_track AFTER INSERT OR DELETE OR UPDATE OF bucket, tier, size ON objects
        FOR EACH ROW EXECUTE FUNCTION tier_usage_track()""",
]

# Object generations: a SEQUENCE, not a counter row, so that concurrent commits do not conflict
# on it (nextval never rolls back: a failed commit only leaves a gap, and generations need only
# be new, never dense).
POSTGRES_SCHEMA = [
    *(_postgresql(statement) for statement in SCHEMA),
    "CREATE SEQUENCE IF NOT EXISTS generation_seq",
    *POSTGRES_USAGE_SCHEMA,
]

VERSION_TABLE = "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)"


# --- SQLite -------------------------------------------------------------------------------------


def _sqlite_version_1(db: sqlite3.Connection) -> None:
    """The schema when versions began, and everything older catalogs may lack (idempotent)."""
    for statement in SCHEMA:
        db.execute(statement)
    columns = {row[1] for row in db.execute("PRAGMA table_info(objects)")}
    if "storage_class" not in columns:
        db.execute("ALTER TABLE objects ADD COLUMN storage_class TEXT NOT NULL DEFAULT 'STANDARD'")
        for bucket, key, meta in db.execute("SELECT bucket, key, meta FROM objects").fetchall():
            db.execute(
                "UPDATE objects SET storage_class = ? WHERE bucket = ? AND key = ?",
                (json.loads(meta).get("sc", "STANDARD"), bucket, key),
            )
    # A catalog made before `counters` starts its generation counter past every generation in it.
    # INSERT OR IGNORE: processes opening the catalog together start it once.
    db.execute(
        "INSERT OR IGNORE INTO counters (name, value) "
        "SELECT 'generation', COALESCE(MAX(generation), 0) FROM objects"
    )
    if "checksum_type" not in {row[1] for row in db.execute("PRAGMA table_info(uploads)")}:
        # NULL for an upload begun before: it completes COMPOSITE, as it would have then.
        with contextlib.suppress(sqlite3.OperationalError):  # another process added it just now
            db.execute("ALTER TABLE uploads ADD COLUMN checksum_type TEXT")
    _add_usage_counters(db)


def _add_usage_counters(db: sqlite3.Connection) -> None:
    """Create `tier_usage` and its triggers, counted from `objects`, if this catalog lacks them.

    In one write transaction, so that processes opening the catalog together (workers, the
    lifecycle daemon) create them once, and no object committed meanwhile is missed.
    """
    exists = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'tier_usage'"
    if db.execute(exists).fetchone():
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        if not db.execute(exists).fetchone():
            for statement in USAGE_SCHEMA:
                db.execute(statement)
            db.execute(
                "INSERT INTO tier_usage (bucket, tier, objects, bytes) "
                "SELECT bucket, tier, COUNT(*), COALESCE(SUM(size), 0) FROM objects GROUP BY bucket, tier"
            )
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


# Version 2: the heal queue, shared by every gateway (tiering.maintenance). A blob a reader found
# damaged waits here, not only in the memory of the gateway that read it: any gateway claims it
# (`holder`, `until`: a lease per row), and one that dies mid-heal leaves it to the others.
HEAL_QUEUE = """CREATE TABLE IF NOT EXISTS heal_queue (
    data_id TEXT PRIMARY KEY,
    tier TEXT NOT NULL,
    queued REAL NOT NULL,
    holder TEXT,
    until REAL NOT NULL DEFAULT 0
)"""
HEAL_QUEUE_INDEX = "CREATE INDEX IF NOT EXISTS heal_queue_due ON heal_queue (until, queued)"


def _sqlite_version_2(db: sqlite3.Connection) -> None:
    db.execute(HEAL_QUEUE)
    db.execute(HEAL_QUEUE_INDEX)


# Version 3: object versioning (tiering.catalog.versions). `objects` keeps one row per key, its
# current version, now with its `version_id` ('null' in a bucket never versioned). Noncurrent
# versions and delete markers live in `object_versions`, ordered per key by `seq` (a value of the
# generation counter taken when the row arrived there: newer rows have larger ones), so that
# ListObjects stays the scan it was and ListObjectVersions is an ordered scan of both tables.
# `blobs.version_id` says which noncurrent version owns a blob (NULL: the key's current one), so
# heal, rebalance and the orphan sweep find a noncurrent version's data too.
OBJECT_VERSIONS = """CREATE TABLE IF NOT EXISTS object_versions (
    bucket TEXT NOT NULL,
    key TEXT NOT NULL,
    version_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    marker INTEGER NOT NULL,
    noncurrent_since REAL NOT NULL,
    generation INTEGER NOT NULL,
    size INTEGER NOT NULL,
    etag TEXT NOT NULL,
    last_modified REAL NOT NULL,
    tier TEXT NOT NULL,
    meta TEXT NOT NULL,
    tags TEXT NOT NULL,
    checksum_algorithm TEXT,
    checksum TEXT,
    segments TEXT NOT NULL,
    heat REAL NOT NULL DEFAULT 0,
    heat_at REAL NOT NULL DEFAULT 0,
    last_access REAL NOT NULL DEFAULT 0,
    tier_since REAL NOT NULL DEFAULT 0,
    restore TEXT,
    storage_class TEXT NOT NULL DEFAULT 'STANDARD',
    PRIMARY KEY (bucket, key, version_id)
)"""
OBJECT_VERSIONS_ORDER = (
    "CREATE INDEX IF NOT EXISTS object_versions_order ON object_versions (bucket, key, seq)"
)
# Noncurrent versions count in the usage counters like current ones (they hold bytes on a tier);
# delete markers hold none and are not counted.
VERSIONS_USAGE_SQLITE = [
    """CREATE TRIGGER IF NOT EXISTS version_usage_insert AFTER INSERT ON object_versions WHEN NEW.marker = 0 BEGIN
        INSERT INTO tier_usage (bucket, tier, objects, bytes) VALUES (NEW.bucket, NEW.tier, 1, NEW.size)
        ON CONFLICT (bucket, tier) DO UPDATE SET objects = objects + 1, bytes = bytes + excluded.bytes;
    END""",
    """CREATE TRIGGER IF NOT EXISTS version_usage_delete AFTER DELETE ON object_versions WHEN OLD.marker = 0 BEGIN
        UPDATE tier_usage SET objects = objects - 1, bytes = bytes - OLD.size
        WHERE bucket = OLD.bucket AND tier = OLD.tier;
    END""",
    """CREATE TRIGGER IF NOT EXISTS version_usage_update AFTER UPDATE OF tier, size ON object_versions
    WHEN OLD.marker = 0 BEGIN
        UPDATE tier_usage SET objects = objects - 1, bytes = bytes - OLD.size
        WHERE bucket = OLD.bucket AND tier = OLD.tier;
        INSERT INTO tier_usage (bucket, tier, objects, bytes) VALUES (NEW.bucket, NEW.tier, 1, NEW.size)
        ON CONFLICT (bucket, tier) DO UPDATE SET objects = objects + 1, bytes = bytes + excluded.bytes;
    END""",
]
VERSIONS_USAGE_POSTGRES = [
    """CREATE TRIGGER version_usage_insert AFTER INSERT ON object_versions
        FOR EACH ROW WHEN (NEW.marker = 0) EXECUTE FUNCTION tier_usage_track()""",
    """CREATE TRIGGER version_usage_delete AFTER DELETE ON object_versions
        FOR EACH ROW WHEN (OLD.marker = 0) EXECUTE FUNCTION tier_usage_track()""",
    """CREATE TRIGGER version_usage_update AFTER UPDATE OF tier, size ON object_versions
        FOR EACH ROW WHEN (OLD.marker = 0) EXECUTE FUNCTION tier_usage_track()""",
]


def _sqlite_version_3(db: sqlite3.Connection) -> None:
    db.execute("BEGIN IMMEDIATE")
    try:
        # Another process opening the catalog together may have done it just now.
        if "version_id" not in {row[1] for row in db.execute("PRAGMA table_info(objects)")}:
            db.execute("ALTER TABLE objects ADD COLUMN version_id TEXT NOT NULL DEFAULT 'null'")
            db.execute("ALTER TABLE blobs ADD COLUMN version_id TEXT")
        db.execute(OBJECT_VERSIONS)
        db.execute(OBJECT_VERSIONS_ORDER)
        for statement in VERSIONS_USAGE_SQLITE:
            db.execute(statement)
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


# Version 4: RestoreObject of a noncurrent version (its restore state lives in its own
# `object_versions.restore`, which version 3 already has). The lifecycle daemon finds the versions
# with a restore to make or expire through this partial index, which holds only those rows: its
# cost follows the restores under way, not the number of noncurrent versions. (Partial indexes:
# SQLite 3.8+, PostgreSQL, CockroachDB and YugabyteDB alike.)
RESTORED_VERSIONS_INDEX = (
    "CREATE INDEX IF NOT EXISTS object_versions_restored ON object_versions (bucket, key, version_id) "
    "WHERE restore IS NOT NULL"
)


def _sqlite_version_4(db: sqlite3.Connection) -> None:
    db.execute(RESTORED_VERSIONS_INDEX)  # IF NOT EXISTS: processes opening the catalog together


# Version 5: the live-process table (tiering.catalog.processes, tiering.peers). One row per
# process writing through this catalog, on any host; alive while `expires` is ahead. The orphan
# sweep reclaims only what processes whose row expired wrote. Self-contained (a new table and its
# index, nothing else touched): renumbering it after another migration is moving these lines.
PROCESSES = """CREATE TABLE IF NOT EXISTS processes (
    id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started REAL NOT NULL,
    heartbeat REAL NOT NULL,
    expires REAL NOT NULL
)"""
PROCESSES_EXPIRY = "CREATE INDEX IF NOT EXISTS processes_expires ON processes (expires)"


def _sqlite_version_5(db: sqlite3.Connection) -> None:
    db.execute(PROCESSES)
    db.execute(PROCESSES_EXPIRY)


# Version 6: blobs heal found lost (fewer than k shards left anywhere), shared by every process
# (tiering.maintenance). A read of one answers 410 ObjectDataLost whichever worker or gateway takes
# it, not only the one whose heal found it; status and metrics count them from here.
LOST_BLOBS = """CREATE TABLE IF NOT EXISTS lost_blobs (
    data_id TEXT PRIMARY KEY,
    tier TEXT NOT NULL,
    found REAL NOT NULL
)"""


def _sqlite_version_6(db: sqlite3.Connection) -> None:
    db.execute(LOST_BLOBS)


# Version 7 (SQLite only): a counter of changes to what a listing shows. A listing page read ahead
# (tiering/listing_readahead.py) may be served only if nothing it shows changed since it was read;
# the whole catalog's commit counter changed twice a second on an idle server (lease renewals,
# process heartbeats), so a quarter of the pages read ahead were thrown away. These triggers count
# only what ListObjects shows: objects added or removed, the listed columns of one rewritten, a
# bucket removed. PostgreSQL reads nothing ahead (it cannot tell cheaply): no counter there.
# What a listing shows of a row (LIST_COLUMNS, tiering/catalog/base.py) and where: its bucket. A
# copy, not an import: a shipped migration must not change (tests/unit/test_listing_stamp.py
# checks that it still covers LIST_COLUMNS).
_LISTED = ("bucket", "key", "size", "etag", "last_modified", "storage_class", "checksum_algorithm")
_BUMP = "BEGIN UPDATE listing_changes SET changes = changes + 1 WHERE id = 1; END"
LISTING_CHANGES = [
    """CREATE TABLE IF NOT EXISTS listing_changes (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        changes INTEGER NOT NULL
    )""",
    "INSERT OR IGNORE INTO listing_changes (id, changes) VALUES (1, 0)",
    f"CREATE TRIGGER IF NOT EXISTS listing_changes_insert AFTER INSERT ON objects {_BUMP}",
    f"CREATE TRIGGER IF NOT EXISTS listing_changes_delete AFTER DELETE ON objects {_BUMP}",
    # Only if a listed value differs: a tier move rewrites storage_class with the same value.
    f"""CREATE TRIGGER IF NOT EXISTS listing_changes_update AFTER UPDATE OF {", ".join(_LISTED)} ON objects
        WHEN {" OR ".join(f"OLD.{c} IS NOT NEW.{c}" for c in _LISTED)} {_BUMP}""",
    f"CREATE TRIGGER IF NOT EXISTS listing_changes_bucket AFTER DELETE ON buckets {_BUMP}",
]


def _sqlite_version_7(db: sqlite3.Connection) -> None:
    for statement in LISTING_CHANGES:
        db.execute(statement)


# Version 8: no index of `blobs` by upload. Nothing ever looked a blob up by its upload (a part's
# blob is found by its data id, an upload's parts in `parts`), yet every blob written added an
# entry to it (upload_id NULL for every plain PUT): one WAL page in nine of a small PUT's commit
# (bench/RESULTS.md, "Shared state off the drives"). Version 1 no longer creates it.
BLOBS_BY_UPLOAD_DROPPED = "DROP INDEX IF EXISTS blobs_by_upload"


def _sqlite_version_8(db: sqlite3.Connection) -> None:
    db.execute(BLOBS_BY_UPLOAD_DROPPED)


# Step n brings a catalog from version n - 1 to n (index 0: version 1).
SQLITE_MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [
    _sqlite_version_1,
    _sqlite_version_2,
    _sqlite_version_3,
    _sqlite_version_4,
    _sqlite_version_5,
    _sqlite_version_6,
    _sqlite_version_7,
    _sqlite_version_8,
]


def _check_version(found: int | None, where: str) -> None:
    if found is not None and found > SCHEMA_VERSION:
        raise SchemaTooNew(found, SCHEMA_VERSION, where)


def migrate_sqlite(db: sqlite3.Connection, where: str) -> None:
    """Bring a SQLite catalog (a connection in autocommit mode) up to SCHEMA_VERSION."""
    db.execute(VERSION_TABLE)
    found = db.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
    _check_version(found, where)
    # Version 1's steps run every time (see the module's docstring); later ones once.
    for version in range(1, SCHEMA_VERSION + 1):
        if version == 1 or found is None or version > found:
            SQLITE_MIGRATIONS[version - 1](db)
    if found != SCHEMA_VERSION:
        db.execute("BEGIN IMMEDIATE")
        try:
            again = db.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
            _check_version(again, where)
            db.execute("DELETE FROM schema_version")
            db.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")


# --- PostgreSQL ---------------------------------------------------------------------------------


def _postgres_version_1(db: Any) -> None:
    for statement in POSTGRES_SCHEMA:
        db.execute(statement)


def _postgres_version_2(db: Any) -> None:
    db.execute(_postgresql(HEAL_QUEUE))
    db.execute(HEAL_QUEUE_INDEX)


def _postgres_version_3(db: Any) -> None:
    db.execute(
        """ALTER TABLE objects ADD COLUMN IF NOT EXISTS version_id TEXT COLLATE "C" NOT NULL DEFAULT 'null'"""
    )
    db.execute('ALTER TABLE blobs ADD COLUMN IF NOT EXISTS version_id TEXT COLLATE "C"')
    db.execute(_postgresql(OBJECT_VERSIONS))
    db.execute(OBJECT_VERSIONS_ORDER)
    for statement in VERSIONS_USAGE_POSTGRES:
        db.execute(statement)


def _postgres_version_4(db: Any) -> None:
    db.execute(RESTORED_VERSIONS_INDEX)


def _postgres_version_5(db: Any) -> None:
    db.execute(_postgresql(PROCESSES))
    db.execute(PROCESSES_EXPIRY)


def _postgres_version_6(db: Any) -> None:
    db.execute(_postgresql(LOST_BLOBS))


def _postgres_version_7(db: Any) -> None:
    """SQLite's listing change counter: nothing on PostgreSQL (see LISTING_CHANGES)."""


def _postgres_version_8(db: Any) -> None:
    db.execute(BLOBS_BY_UPLOAD_DROPPED)


POSTGRES_MIGRATIONS: list[Callable[[Any], None]] = [
    _postgres_version_1,
    _postgres_version_2,
    _postgres_version_3,
    _postgres_version_4,
    _postgres_version_5,
    _postgres_version_6,
    _postgres_version_7,
    _postgres_version_8,
]


def migrate_postgres(db: Any, where: str, *, attempts: int = 20) -> None:
    """Bring a PostgreSQL catalog up to SCHEMA_VERSION: each step in one transaction (DDL is
    transactional there). Gateways starting together race on CREATE; the loser's transaction
    fails (duplicate object, serialization failure) and it tries again, finding the work done."""
    import psycopg

    for attempt in range(attempts):
        try:
            with db.transaction():
                db.execute(VERSION_TABLE)
                found = db.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
                _check_version(found, where)
                start = found or 0
                for version in range(start + 1, SCHEMA_VERSION + 1):
                    POSTGRES_MIGRATIONS[version - 1](db)
                if found != SCHEMA_VERSION:
                    db.execute("DELETE FROM schema_version")
                    db.execute("INSERT INTO schema_version (version) VALUES (%s)", (SCHEMA_VERSION,))
            return
        except (
            psycopg.errors.UniqueViolation,
            psycopg.errors.DuplicateObject,
            psycopg.errors.DuplicateTable,
            psycopg.errors.DuplicateFunction,
            psycopg.errors.TransactionRollback,
            psycopg.errors.SerializationFailure,
            psycopg.errors.DeadlockDetected,
        ):
            if attempt == attempts - 1:
                raise
            time.sleep(0.05 * (attempt + 1))
