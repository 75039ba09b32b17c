"""The catalog: every bucket, object, upload and part, in SQLite (WAL) behind a narrow interface.

Why SQLite: one file, crash-safe transactions, an ordered B-tree index that makes listing an index
scan. The SQL is kept portable (no SQLite-only functions in queries) so a PostgreSQL-compatible
database can carry the catalog when several gateways share one namespace.

Threading: SQLite calls block, so the async facade (`tiering.store`) runs them in threads. All
writes go through one connection on one thread (SQLite has one writer anyway, and a single
writer thread makes group commit possible later); reads use one connection per reader thread.

Every method here is synchronous and short; none does I/O on object data.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from tiering.backend import StoredData
from tiering.errors import (
    BucketAlreadyExists,
    BucketNotEmpty,
    BucketNotFound,
    ObjectNotFound,
    PreconditionFailed,
    UploadNotFound,
)
from tiering.heat import DEFAULT_HALF_LIFE, bump, decayed
from tiering.records import (
    BucketRecord,
    ListEntry,
    ListPage,
    MoveRecord,
    ObjectMeta,
    ObjectRecord,
    PartRecord,
    RestoreState,
    Segment,
    UploadRecord,
)

_T = TypeVar("_T")

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
    "CREATE INDEX IF NOT EXISTS blobs_by_upload ON blobs (upload_id)",
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

OBJECT_COLUMNS = (
    "bucket, key, generation, size, etag, last_modified, tier, meta, tags, "
    "checksum_algorithm, checksum, segments, heat, heat_at, last_access, tier_since, restore"
)
OBJECT_PLACEHOLDERS = ",".join("?" * 17)
# What a listing shows of each key: plain columns, no JSON to decode (listing is a hot path).
LIST_COLUMNS = "key, size, etag, last_modified, storage_class, checksum_algorithm"
EMPTY_ETAG = "d41d8cd98f00b204e9800998ecf8427e"  # MD5 of no bytes: the ETag of every zero-byte object

ARCHIVE_STATUS = "x-amz-archive-status"

# How long retired data stays on disk: a GET that looked the object up just before an overwrite
# still opens the old blob within this window (an opened blob survives deletion).
# TIERSTORE_RETIRE_GRACE_SECONDS overrides it (tests that wait for the collector shorten it).
RETIRE_GRACE_SECONDS = float(os.environ.get("TIERSTORE_RETIRE_GRACE_SECONDS", "30"))


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _stored_to_json(stored: StoredData) -> str:
    return _dumps({"id": stored.data_id, "size": stored.size, "loc": stored.location})


def _stored_from_json(raw: str) -> StoredData:
    value = json.loads(raw)
    return StoredData(value["id"], value["size"], value.get("loc") or {})


def _names_domain(location: dict[str, Any], domain_id: str) -> bool:
    """Does an erasure location hold a shard (not a missing one) on `domain_id`?"""
    missing = set(location.get("missing") or ())
    return any(d == domain_id and i not in missing for i, d in enumerate(location.get("shards") or ()))


def key_successor(prefix: str) -> str | None:
    """The smallest string greater than every string that starts with `prefix` (None: no bound).

    Used to skip a whole common prefix with one index seek instead of scanning its keys.
    """
    chars = list(prefix)
    while chars:
        code = ord(chars[-1]) + 1
        if code == 0xD800:  # surrogates cannot appear in UTF-8 keys; jump over them
            code = 0xE000
        if code <= 0x10FFFF:
            chars[-1] = chr(code)
            return "".join(chars)
        chars.pop()
    return None


# A row of LIST_COLUMNS as a ListEntry: tuple.__new__ through partial runs in C, where
# ListEntry._make would run a Python frame per row (a page is a thousand rows).
_list_entry: Callable[[tuple[Any, ...]], ListEntry] = functools.partial(tuple.__new__, ListEntry)


def _listing_rows(
    db: sqlite3.Connection, bucket: str, lower: str, inclusive: bool, upper: str | None, limit: int
) -> sqlite3.Cursor:
    """Up to `limit` listing rows (LIST_COLUMNS) of `bucket` from `lower` on, below `upper`, in key order."""
    sql = f"SELECT {LIST_COLUMNS} FROM objects WHERE bucket = ? AND key {'>=' if inclusive else '>'} ?"
    args: list[Any] = [bucket, lower]
    if upper is not None:
        sql += " AND key < ?"
        args.append(upper)
    return db.execute(sql + " ORDER BY key LIMIT ?", [*args, limit])


class _Combined:
    """One caller's work in a combined write transaction, and what became of it."""

    __slots__ = ("fn", "result", "error", "sequence", "done")

    def __init__(self, fn: Callable[[sqlite3.Connection], Any]) -> None:
        self.fn = fn
        self.result: Any = None
        self.error: BaseException | None = None
        self.sequence = 0
        self.done = False


class Catalog:
    """Synchronous catalog operations. Thread-safe: one writer, per-thread readers."""

    def __init__(self, path: Path, *, durable: bool = True) -> None:
        self.path = path
        self.durable = durable
        path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._write_lock = threading.Lock()
        self._writer = self._connect()
        for statement in SCHEMA:
            self._writer.execute(statement)
        self._migrate()
        self._add_usage_counters()
        self._writer.commit()
        # Group commit: transactions are written to the WAL without an fsync each; a committer
        # then waits until the WAL is fsync'd past its commit, and one fsync serves every
        # commit that arrived meanwhile. Durable on return, like synchronous=FULL, but concurrent
        # small PUTs share the disk flush instead of queueing for one each.
        self._sync = threading.Condition()
        self._committed = 0  # commits written to the WAL by this process
        self._synced = 0  # commits known to be on disk
        self._syncing = False
        self.fsyncs = 0
        self._wal_fd = os.open(f"{path}-wal", os.O_RDONLY) if durable else -1
        self._queue_lock = threading.Lock()
        self._queued: list[_Combined] = []  # work waiting for `_write_combined`'s next batch

    def _migrate(self) -> None:
        """Bring a catalog made by an older version up to this schema (additive changes only)."""
        columns = {row[1] for row in self._writer.execute("PRAGMA table_info(objects)")}
        if "storage_class" not in columns:
            self._writer.execute("ALTER TABLE objects ADD COLUMN storage_class TEXT NOT NULL DEFAULT 'STANDARD'")
            for bucket, key, meta in self._writer.execute("SELECT bucket, key, meta FROM objects").fetchall():
                self._writer.execute(
                    "UPDATE objects SET storage_class = ? WHERE bucket = ? AND key = ?",
                    (json.loads(meta).get("sc", "STANDARD"), bucket, key),
                )
        # A catalog made before `counters` starts its generation counter past every generation in it.
        # INSERT OR IGNORE: processes opening the catalog together start it once.
        self._writer.execute(
            "INSERT OR IGNORE INTO counters (name, value) "
            "SELECT 'generation', COALESCE(MAX(generation), 0) FROM objects"
        )
        if "checksum_type" not in {row[1] for row in self._writer.execute("PRAGMA table_info(uploads)")}:
            # NULL for an upload begun before: it completes COMPOSITE, as it would have then.
            with contextlib.suppress(sqlite3.OperationalError):  # another process added it just now
                self._writer.execute("ALTER TABLE uploads ADD COLUMN checksum_type TEXT")

    def _add_usage_counters(self) -> None:
        """Create `tier_usage` and its triggers, counted from `objects`, if this catalog lacks them.

        In one write transaction, so that processes opening the catalog together (workers, the
        lifecycle daemon) create them once, and no object committed meanwhile is missed.
        """
        exists = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'tier_usage'"
        if self._writer.execute(exists).fetchone():
            return
        self._writer.execute("BEGIN IMMEDIATE")
        try:
            if not self._writer.execute(exists).fetchone():
                for statement in USAGE_SCHEMA:
                    self._writer.execute(statement)
                self._writer.execute(
                    "INSERT INTO tier_usage (bucket, tier, objects, bytes) "
                    "SELECT bucket, tier, COUNT(*), COALESCE(SUM(size), 0) FROM objects GROUP BY bucket, tier"
                )
        except BaseException:
            self._writer.execute("ROLLBACK")
            raise
        self._writer.execute("COMMIT")

    # --- connections ------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        # NORMAL: SQLite syncs the WAL only around checkpoints; `_make_durable` fsyncs it after
        # each commit (grouped), so an acknowledged write still survives power loss.
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=30000")
        return conn

    def _reader(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            conn.execute("PRAGMA query_only=1")
            self._local.conn = conn
        return conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._write_lock:
            conn = self._writer
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            sequence = self._count_commit()
        if self.durable:
            self._make_durable(sequence)

    def _count_commit(self) -> int:
        with self._sync:
            self._committed += 1
            return self._committed

    def _write_combined(self, fn: Callable[[sqlite3.Connection], _T]) -> _T:
        """`fn(db)` in a write transaction, possibly shared with other threads' (flat combining).

        With many small PUTs committing at once, taking turns on the write lock was the cost:
        each holder needs the GIL back after every SQLite call, so sixteen commits queued behind
        one another for many switch intervals each. Here a committer queues its work; whoever
        holds the write lock runs everything queued in one transaction, each piece inside its
        own savepoint (a piece that raises is rolled back alone and its caller gets the error).
        The others find their work done when they get the lock. Durability is unchanged: each
        caller still waits for the WAL fsync that covers the shared commit.
        """
        op = _Combined(fn)
        with self._queue_lock:
            self._queued.append(op)
        with self._write_lock:
            if not op.done:
                with self._queue_lock:
                    batch, self._queued = self._queued, []
                self._run_combined(batch)
        if op.error is not None:
            raise op.error
        if self.durable:
            self._make_durable(op.sequence)
        return op.result

    def _run_combined(self, batch: list[_Combined]) -> None:
        """Run queued work in one transaction (the write lock is held)."""
        conn = self._writer
        try:
            conn.execute("BEGIN IMMEDIATE")
            for op in batch:
                conn.execute("SAVEPOINT piece")
                try:
                    op.result = op.fn(conn)
                except BaseException as exc:
                    conn.execute("ROLLBACK TO piece")
                    op.error = exc
                conn.execute("RELEASE piece")
            conn.execute("COMMIT")
        except BaseException as exc:  # BEGIN or COMMIT failed (I/O error, disk full): nothing landed
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            for op in batch:
                op.error = op.error or exc
        sequence = self._count_commit()
        for op in batch:
            op.sequence = sequence
            op.done = True

    def _make_durable(self, sequence: int) -> None:
        """Return once commit number `sequence` is on disk; one caller fsyncs for all waiting."""
        with self._sync:
            while self._synced < sequence:
                if self._syncing:
                    self._sync.wait()
                    continue
                self._syncing = True
                target = self._committed
                self._sync.release()
                try:
                    os.fsync(self._wal_fd)
                finally:
                    self._sync.acquire()
                    self._syncing = False
                    self._sync.notify_all()
                self.fsyncs += 1
                self._synced = max(self._synced, target)

    def close(self) -> None:
        with self._write_lock:
            self._writer.close()
            if self._wal_fd >= 0:
                os.close(self._wal_fd)
                self._wal_fd = -1

    # --- buckets ----------------------------------------------------------------------------

    def create_bucket(self, name: str, owner: str, region: str) -> BucketRecord:
        record = BucketRecord(name, time.time(), owner, region)
        with self._write() as db:
            row = db.execute("SELECT owner FROM buckets WHERE name = ?", (name,)).fetchone()
            if row is not None:
                raise BucketAlreadyExists(name, owned_by_caller=row[0] == owner)
            db.execute(
                "INSERT INTO buckets (name, created, owner, region) VALUES (?, ?, ?, ?)",
                (name, record.created, owner, region),
            )
        return record

    def get_bucket(self, name: str) -> BucketRecord:
        row = self._reader().execute(
            "SELECT name, created, owner, region FROM buckets WHERE name = ?", (name,)
        ).fetchone()
        if row is None:
            raise BucketNotFound(name)
        return BucketRecord(*row)

    def list_buckets(self, owner: str | None = None) -> list[BucketRecord]:
        sql = "SELECT name, created, owner, region FROM buckets"
        args: tuple[Any, ...] = ()
        if owner is not None:
            sql += " WHERE owner = ?"
            args = (owner,)
        return [BucketRecord(*row) for row in self._reader().execute(sql + " ORDER BY name", args)]

    def delete_bucket(self, name: str) -> None:
        with self._write() as db:
            if db.execute("SELECT 1 FROM buckets WHERE name = ?", (name,)).fetchone() is None:
                raise BucketNotFound(name)
            if db.execute("SELECT 1 FROM objects WHERE bucket = ? LIMIT 1", (name,)).fetchone():
                raise BucketNotEmpty(name)
            # Unfinished uploads go with the bucket (AWS refuses only for objects).
            self._drop_uploads(db, "bucket = ?", (name,))
            db.execute("DELETE FROM bucket_config WHERE bucket = ?", (name,))
            db.execute("DELETE FROM tier_usage WHERE bucket = ?", (name,))  # all zero: it holds no objects
            db.execute("DELETE FROM buckets WHERE name = ?", (name,))

    def put_bucket_config(self, bucket: str, name: str, value: str | None) -> None:
        with self._write() as db:
            if db.execute("SELECT 1 FROM buckets WHERE name = ?", (bucket,)).fetchone() is None:
                raise BucketNotFound(bucket)
            if value is None:
                db.execute("DELETE FROM bucket_config WHERE bucket = ? AND name = ?", (bucket, name))
            else:
                db.execute(
                    "INSERT INTO bucket_config (bucket, name, value) VALUES (?, ?, ?) "
                    "ON CONFLICT (bucket, name) DO UPDATE SET value = excluded.value",
                    (bucket, name, value),
                )

    def bucket_configs_with_prefix(self, bucket: str, prefix: str) -> list[tuple[str, str]]:
        """(name, value) of a bucket's configuration documents whose name starts with `prefix`."""
        rows = self._reader().execute(
            "SELECT name, value FROM bucket_config WHERE bucket = ? AND name >= ? AND name < ? ORDER BY name",
            (bucket, prefix, key_successor(prefix) or "\U0010ffff"),
        )
        return [(name, value) for name, value in rows]

    def get_bucket_config(self, bucket: str, name: str) -> str | None:
        row = self._reader().execute(
            "SELECT value FROM bucket_config WHERE bucket = ? AND name = ?", (bucket, name)
        ).fetchone()
        return row[0] if row else None

    # --- objects ----------------------------------------------------------------------------

    @staticmethod
    def _object_from_row(row: tuple[Any, ...]) -> ObjectRecord:
        (bucket, key, generation, size, etag, mtime, tier, meta, tags, algo, checksum, segments,
         heat, heat_at, last_access, tier_since, restore) = row
        return ObjectRecord(
            bucket=bucket,
            key=key,
            size=size,
            etag=etag,
            last_modified=mtime,
            tier=tier,
            meta=ObjectMeta.from_json(json.loads(meta), json.loads(tags)),
            segments=tuple(Segment.from_json(s) for s in json.loads(segments)),
            checksum_algorithm=algo,
            checksum=checksum,
            generation=generation,
            heat=heat,
            heat_at=heat_at,
            last_access=last_access,
            tier_since=tier_since,
            restore=RestoreState.from_json(json.loads(restore)) if restore else None,
        )

    def get_object(self, bucket: str, key: str) -> ObjectRecord:
        row = self._reader().execute(
            f"SELECT {OBJECT_COLUMNS} FROM objects WHERE bucket = ? AND key = ?", (bucket, key)
        ).fetchone()
        if row is None:
            # Tell a missing bucket from a missing key (NoSuchBucket vs NoSuchKey).
            self.get_bucket(bucket)
            raise ObjectNotFound(bucket, key)
        return self._object_from_row(row)

    @staticmethod
    def _next_generation(db: sqlite3.Connection) -> int:
        """The next value of the catalog-wide generation counter (inside the caller's transaction).

        An object's generation is the compare-and-swap token of movers, the restriper and the
        expiry (`expected_generation`): it must never take a value it had before, or a mover that
        copied an older object could commit its copy over a newer one of the same key.
        """
        row = db.execute("UPDATE counters SET value = value + 1 WHERE name = 'generation' RETURNING value").fetchone()
        return int(row[0])

    def _current_if(self, db: sqlite3.Connection, bucket: str, key: str, expected_generation: int) -> ObjectRecord:
        """The object as it is now, if it is still the version a mover looked at (the CAS check)."""
        row = db.execute(f"SELECT {OBJECT_COLUMNS} FROM objects WHERE bucket = ? AND key = ?", (bucket, key)).fetchone()
        current = self._object_from_row(row) if row else None
        if current is None or current.generation != expected_generation:
            raise PreconditionFailed("generation")
        return current

    @staticmethod
    def _claim_blobs(db: sqlite3.Connection, tier: str, bucket: str, key: str, segments: tuple[Segment, ...]) -> None:
        """Record that these blobs now belong to bucket/key on `tier` (the `blobs` index)."""
        db.executemany(
            "INSERT OR REPLACE INTO blobs (data_id, tier, bucket, key, upload_id) VALUES (?, ?, ?, ?, NULL)",
            [(seg.stored.data_id, tier, bucket, key) for seg in segments],
        )

    def _retire(self, db: sqlite3.Connection, tier: str, stored: list[StoredData]) -> None:
        due = time.time() + RETIRE_GRACE_SECONDS
        db.executemany("DELETE FROM blobs WHERE data_id = ?", [(s.data_id,) for s in stored])
        db.executemany(
            "INSERT INTO garbage (data_id, tier, stored, not_before) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (data_id) DO NOTHING",
            [(s.data_id, tier, _stored_to_json(s), due) for s in stored],
        )

    def _retire_object_row(self, db: sqlite3.Connection, bucket: str, key: str) -> ObjectRecord | None:
        row = db.execute(
            f"SELECT {OBJECT_COLUMNS} FROM objects WHERE bucket = ? AND key = ?", (bucket, key)
        ).fetchone()
        if row is None:
            return None
        old = self._object_from_row(row)
        self._retire(db, old.tier, [s.stored for s in old.segments])
        if old.restore is not None:
            self._retire(db, old.restore.tier, [s.stored for s in old.restore.segments])
        return old

    def commit_object(
        self,
        record: ObjectRecord,
        *,
        if_match: str | None = None,
        if_none_match: str | None = None,
        expected_generation: int | None = None,
    ) -> ObjectRecord:
        """Make `record` the visible version of its key in one transaction; retire the old data.

        `expected_generation` is the mover's compare-and-swap: commit only if the object is still
        the one the mover copied (raises PreconditionFailed otherwise).
        """
        return self._write_combined(
            lambda db: self._commit_object_in(db, record, if_match, if_none_match, expected_generation)
        )

    def _commit_object_in(
        self,
        db: sqlite3.Connection,
        record: ObjectRecord,
        if_match: str | None,
        if_none_match: str | None,
        expected_generation: int | None,
    ) -> ObjectRecord:
        if db.execute("SELECT 1 FROM buckets WHERE name = ?", (record.bucket,)).fetchone() is None:
            raise BucketNotFound(record.bucket)
        row = db.execute(
            f"SELECT {OBJECT_COLUMNS} FROM objects WHERE bucket = ? AND key = ?",
            (record.bucket, record.key),
        ).fetchone()
        current = self._object_from_row(row) if row else None
        if if_none_match is not None and current is not None:
            raise PreconditionFailed("If-None-Match")
        if if_match is not None:
            if current is None:
                raise ObjectNotFound(record.bucket, record.key)
            if if_match.strip() != "*" and if_match.strip().strip('"') != current.etag:
                raise PreconditionFailed("If-Match")
        if expected_generation is not None and (current is None or current.generation != expected_generation):
            raise PreconditionFailed("generation")
        generation = self._next_generation(db)
        now = record.last_modified
        # A write is an access: the new version inherits the key's heat, bumped.
        heat = bump(current.heat, current.heat_at, now) if current else 1.0
        if current is not None:
            keep = {s.stored.data_id for s in record.segments}
            self._retire(db, current.tier, [s.stored for s in current.segments if s.stored.data_id not in keep])
            if current.restore is not None:
                self._retire(db, current.restore.tier, [s.stored for s in current.restore.segments])
        self._claim_blobs(db, record.tier, record.bucket, record.key, record.segments)
        db.execute(
            f"INSERT OR REPLACE INTO objects ({OBJECT_COLUMNS}, storage_class) VALUES ({OBJECT_PLACEHOLDERS}, ?)",
            (
                record.bucket,
                record.key,
                generation,
                record.size,
                record.etag,
                record.last_modified,
                record.tier,
                _dumps(record.meta.to_json()),
                _dumps(record.meta.tags),
                record.checksum_algorithm,
                record.checksum,
                _dumps([s.to_json() for s in record.segments]),
                heat,
                now,
                now,
                now,
                None,
                record.meta.storage_class,
            ),
        )
        return ObjectRecord(
            **{**record.__dict__, "generation": generation, "heat": heat, "heat_at": now, "last_access": now,
               "tier_since": now, "restore": None}
        )

    def update_object_meta(
        self, bucket: str, key: str, meta: ObjectMeta, *, if_etag: str | None = None
    ) -> ObjectRecord:
        """Change metadata (and tags) without touching data: the self-copy with REPLACE."""
        with self._write() as db:
            row = db.execute(
                f"SELECT {OBJECT_COLUMNS} FROM objects WHERE bucket = ? AND key = ?", (bucket, key)
            ).fetchone()
            if row is None:
                raise ObjectNotFound(bucket, key)
            current = self._object_from_row(row)
            if if_etag is not None and current.etag != if_etag:
                raise PreconditionFailed("etag")
            # The data stays as it is, so its encryption does too.
            meta = dataclasses.replace(meta, encryption=current.meta.encryption)
            now = time.time()
            generation = self._next_generation(db)
            db.execute(
                "UPDATE objects SET meta = ?, tags = ?, storage_class = ?, last_modified = ?, "
                "generation = ? WHERE bucket = ? AND key = ?",
                (_dumps(meta.to_json()), _dumps(meta.tags), meta.storage_class, now, generation, bucket, key),
            )
        return ObjectRecord(**{**current.__dict__, "meta": meta, "last_modified": now, "generation": generation})

    def put_tags(self, bucket: str, key: str, tags: dict[str, str]) -> None:
        with self._write() as db:
            cur = db.execute(
                "UPDATE objects SET tags = ? WHERE bucket = ? AND key = ?", (_dumps(tags), bucket, key)
            )
            if cur.rowcount == 0:
                if db.execute("SELECT 1 FROM buckets WHERE name = ?", (bucket,)).fetchone() is None:
                    raise BucketNotFound(bucket)
                raise ObjectNotFound(bucket, key)

    def put_object_acl(self, bucket: str, key: str, acl: str) -> None:
        """Replace an object's ACL (PutObjectAcl): its data, dates and generation stay as they are."""
        with self._write() as db:
            row = db.execute("SELECT meta FROM objects WHERE bucket = ? AND key = ?", (bucket, key)).fetchone()
            if row is None:
                if db.execute("SELECT 1 FROM buckets WHERE name = ?", (bucket,)).fetchone() is None:
                    raise BucketNotFound(bucket)
                raise ObjectNotFound(bucket, key)
            meta = json.loads(row[0])
            meta["acl"] = acl
            db.execute("UPDATE objects SET meta = ? WHERE bucket = ? AND key = ?", (_dumps(meta), bucket, key))

    def delete_object(self, bucket: str, key: str, *, expected_generation: int | None = None) -> ObjectRecord | None:
        with self._write() as db:
            if db.execute("SELECT 1 FROM buckets WHERE name = ?", (bucket,)).fetchone() is None:
                raise BucketNotFound(bucket)
            if expected_generation is not None:
                row = db.execute("SELECT generation FROM objects WHERE bucket = ? AND key = ?", (bucket, key)).fetchone()
                if row is None or row[0] != expected_generation:
                    return None  # changed since the caller decided: leave it
            old = self._retire_object_row(db, bucket, key)
            if old is not None:
                db.execute("DELETE FROM objects WHERE bucket = ? AND key = ?", (bucket, key))
            return old

    def count_objects(self, bucket: str | None = None) -> tuple[int, int]:
        sql = "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM objects"
        args: tuple[Any, ...] = ()
        if bucket is not None:
            sql += " WHERE bucket = ?"
            args = (bucket,)
        count, size = self._reader().execute(sql, args).fetchone()
        return int(count), int(size)

    def create_empty_objects(
        self, bucket: str, keys: Iterable[str], *, tier: str, meta: ObjectMeta, now: float
    ) -> int:
        """Create zero-byte objects at those of `keys` that hold none yet, in one transaction;
        returns how many were created. Existing objects are left as they are, never replaced.

        A zero-byte object has no data on any tier (no segments), so unlike a PUT there is nothing
        to make durable before the commit: bulk loads (the listing benchmark's million keys) take
        this path instead of one commit per key.
        """
        meta_json, tags_json = _dumps(meta.to_json()), _dumps(meta.tags)
        with self._write() as db:
            if db.execute("SELECT 1 FROM buckets WHERE name = ?", (bucket,)).fetchone() is None:
                raise BucketNotFound(bucket)
            # A new object's row as commit_object writes it: a fresh generation, heat 1 (one write).
            # One generation serves the whole batch: it only has to be new for each key.
            generation = self._next_generation(db)
            # Existing keys are filtered out, not left to ON CONFLICT DO NOTHING: the usage
            # counters' BEFORE INSERT trigger would fire for them (USAGE_SCHEMA).
            cursor = db.executemany(
                f"INSERT INTO objects ({OBJECT_COLUMNS}, storage_class) SELECT {OBJECT_PLACEHOLDERS}, ? "
                "WHERE NOT EXISTS (SELECT 1 FROM objects WHERE bucket = ? AND key = ?)",
                ((bucket, key, generation, 0, EMPTY_ETAG, now, tier, meta_json, tags_json, None, None, "[]",
                  1.0, now, now, now, None, meta.storage_class, bucket, key) for key in keys),
            )
            return cursor.rowcount

    def list_objects(
        self,
        bucket: str,
        *,
        prefix: str = "",
        delimiter: str = "",
        start_after: str = "",
        max_keys: int = 1000,
    ) -> ListPage:
        """One page of keys in UTF-8 binary order, with common prefixes rolled up.

        An ordered index scan: each common prefix costs one seek past its keys, so the cost of
        a page depends on the page, not on the bucket's size.
        """
        db = self._reader()
        if db.execute("SELECT 1 FROM buckets WHERE name = ?", (bucket,)).fetchone() is None:
            raise BucketNotFound(bucket)
        if max_keys <= 0:
            return ListPage([], [], False, None)
        upper = key_successor(prefix) if prefix else None
        # Lower bound: strictly after start_after, and at or after the prefix.
        if start_after and start_after >= prefix:
            lower, inclusive = start_after, False
        else:
            lower, inclusive = prefix, True
        if not delimiter:
            # Nothing rolls up: the page is the next max_keys rows of the index, fetched in one call
            # (one more tells whether the listing goes on).
            rows = _listing_rows(db, bucket, lower, inclusive, upper, max_keys + 1).fetchall()
            entries = list(map(_list_entry, rows[:max_keys]))
            return ListPage(entries, [], len(rows) > max_keys, entries[-1].key if entries else None)
        objects: list[ListEntry] = []
        prefixes: list[str] = []
        last: str | None = None
        batch = min(max_keys + 1, 1001)
        while True:
            # Iterate the cursor lazily: after a seek past a common prefix the rest of the batch
            # is never stepped, so each prefix costs one index seek, not a batch of rows.
            cursor = _listing_rows(db, bucket, lower, inclusive, upper, batch)
            seen = 0
            sought = False
            for row in cursor:
                seen += 1
                key: str = row[0]
                cut = key.find(delimiter, len(prefix))
                if cut >= 0:
                    common = key[: cut + len(delimiter)]
                    if len(objects) + len(prefixes) >= max_keys:
                        cursor.close()
                        return ListPage(objects, prefixes, True, last)
                    if not (start_after and common <= start_after):
                        prefixes.append(common)
                        last = common
                    # Skip every other key under this prefix with one seek.
                    successor = key_successor(common)
                    cursor.close()
                    if successor is None:
                        return ListPage(objects, prefixes, False, last)
                    lower, inclusive = successor, True
                    sought = True
                    break
                if len(objects) + len(prefixes) >= max_keys:
                    cursor.close()
                    return ListPage(objects, prefixes, True, last)
                objects.append(_list_entry(row))
                last = key
            if not sought:
                if seen < batch:
                    return ListPage(objects, prefixes, False, last)
                lower, inclusive = last or lower, False

    # --- multipart uploads ------------------------------------------------------------------

    def create_upload(self, upload: UploadRecord) -> None:
        with self._write() as db:
            if db.execute("SELECT 1 FROM buckets WHERE name = ?", (upload.bucket,)).fetchone() is None:
                raise BucketNotFound(upload.bucket)
            db.execute(
                "INSERT INTO uploads (upload_id, bucket, key, initiated, tier, meta, tags, "
                "checksum_algorithm, owner, checksum_type) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    upload.upload_id,
                    upload.bucket,
                    upload.key,
                    upload.initiated,
                    upload.tier,
                    _dumps(upload.meta.to_json()),
                    _dumps(upload.meta.tags),
                    upload.checksum_algorithm,
                    upload.owner,
                    upload.checksum_type,
                ),
            )

    @staticmethod
    def _upload_from_row(row: tuple[Any, ...]) -> UploadRecord:
        upload_id, bucket, key, initiated, tier, meta, tags, algo, owner, checksum_type = row
        return UploadRecord(
            upload_id, bucket, key, initiated, tier, ObjectMeta.from_json(json.loads(meta), json.loads(tags)),
            algo, owner, checksum_type,
        )

    def get_upload(self, bucket: str, key: str, upload_id: str) -> UploadRecord:
        row = self._reader().execute(
            "SELECT upload_id, bucket, key, initiated, tier, meta, tags, checksum_algorithm, owner, checksum_type "
            "FROM uploads WHERE upload_id = ?",
            (upload_id,),
        ).fetchone()
        if row is None or row[1] != bucket or row[2] != key:
            self.get_bucket(bucket)
            raise UploadNotFound(upload_id)
        return self._upload_from_row(row)

    def list_uploads(
        self, bucket: str, *, prefix: str = "", key_marker: str = "", upload_id_marker: str = "", limit: int = 1000
    ) -> list[UploadRecord]:
        self.get_bucket(bucket)
        sql = (
            "SELECT upload_id, bucket, key, initiated, tier, meta, tags, checksum_algorithm, owner, checksum_type "
            "FROM uploads WHERE bucket = ? AND key >= ?"
        )
        args: list[Any] = [bucket, prefix]
        upper = key_successor(prefix) if prefix else None
        if upper is not None:
            sql += " AND key < ?"
            args.append(upper)
        if key_marker:
            if upload_id_marker:
                sql += " AND (key > ? OR (key = ? AND upload_id > ?))"
                args += [key_marker, key_marker, upload_id_marker]
            else:
                sql += " AND key > ?"
                args.append(key_marker)
        sql += " ORDER BY key, upload_id LIMIT ?"
        args.append(limit)
        return [self._upload_from_row(row) for row in self._reader().execute(sql, args)]

    def put_part(self, upload_id: str, part: PartRecord) -> bool:
        """Record a part; False if a part of that number whose body ended later is already there.

        Two uploads of one part number race: the one whose body finished last on the wire
        (`last_modified`) is the part, whichever commits last; the other's data is retired, in
        the same transaction, so it is never leaked and never deleted while it is the live part.
        """
        with self._write() as db:
            upload = db.execute("SELECT tier FROM uploads WHERE upload_id = ?", (upload_id,)).fetchone()
            if upload is None:
                # The upload was aborted or completed while this part streamed in.
                raise UploadNotFound(upload_id)
            old = db.execute(
                "SELECT stored, last_modified FROM parts WHERE upload_id = ? AND part_number = ?",
                (upload_id, part.part_number),
            ).fetchone()
            if old is not None and old[1] > part.last_modified:
                self._retire(db, upload[0], [part.stored])
                return False
            if old is not None:
                self._retire(db, upload[0], [_stored_from_json(old[0])])
            db.execute(
                "INSERT OR REPLACE INTO blobs (data_id, tier, bucket, key, upload_id) VALUES (?, ?, NULL, NULL, ?)",
                (part.stored.data_id, upload[0], upload_id),
            )
            db.execute(
                "INSERT OR REPLACE INTO parts (upload_id, part_number, size, etag, last_modified, stored, "
                "checksum) VALUES (?,?,?,?,?,?,?)",
                (
                    upload_id,
                    part.part_number,
                    part.size,
                    part.etag,
                    part.last_modified,
                    _stored_to_json(part.stored),
                    part.checksum,
                ),
            )
        return True

    def list_parts(self, upload_id: str, *, marker: int = 0, limit: int = 10000) -> list[PartRecord]:
        rows = self._reader().execute(
            "SELECT part_number, size, etag, last_modified, stored, checksum FROM parts "
            "WHERE upload_id = ? AND part_number > ? ORDER BY part_number LIMIT ?",
            (upload_id, marker, limit),
        )
        return [PartRecord(pn, size, etag, mtime, _stored_from_json(st), ck) for pn, size, etag, mtime, st, ck in rows]

    def complete_upload(
        self,
        upload: UploadRecord,
        record: ObjectRecord,
        *,
        if_match: str | None = None,
        if_none_match: str | None = None,
        requested: list[tuple[int, str]] | None = None,
    ) -> ObjectRecord:
        """Commit the assembled object and drop the upload in one transaction, remembering the
        completion (with the `requested` part list) for `completed_upload`."""
        with self._write() as db:
            if db.execute("SELECT 1 FROM uploads WHERE upload_id = ?", (upload.upload_id,)).fetchone() is None:
                raise UploadNotFound(upload.upload_id)
            parts = [_stored_from_json(raw) for (raw,) in db.execute(
                "SELECT stored FROM parts WHERE upload_id = ?", (upload.upload_id,))]
            # The parts' locations as they are now: the rebalancer may have moved a part's shards
            # since the caller listed them (relocate_blob_if), and the old files are being retired.
            current = {stored.data_id: stored for stored in parts}
            record = dataclasses.replace(record, segments=tuple(
                dataclasses.replace(s, stored=current.get(s.stored.data_id, s.stored)) for s in record.segments))
            committed = self._commit_object_in(db, record, if_match, if_none_match, None)
            used = {s.stored.data_id for s in record.segments}
            unused = [stored for stored in parts if stored.data_id not in used]
            self._retire(db, upload.tier, unused)
            db.execute("DELETE FROM parts WHERE upload_id = ?", (upload.upload_id,))
            db.execute("DELETE FROM uploads WHERE upload_id = ?", (upload.upload_id,))
            db.execute(
                "INSERT OR REPLACE INTO completed_uploads (upload_id, bucket, key, parts, etag, last_modified, "
                "completed) VALUES (?,?,?,?,?,?,?)",
                (upload.upload_id, upload.bucket, upload.key, _dumps(requested or []), committed.etag,
                 committed.last_modified, time.time()),
            )
        return committed

    def completed_upload(
        self, bucket: str, key: str, upload_id: str, requested: list[tuple[int, str]]
    ) -> ObjectRecord | None:
        """The object an upload made, if it completed lately with these parts and that object is
        still the current one (same ETag and time: a move keeps both, an overwrite changes them)."""
        db = self._reader()
        row = db.execute(
            "SELECT bucket, key, parts, etag, last_modified FROM completed_uploads WHERE upload_id = ?", (upload_id,)
        ).fetchone()
        if row is None or (row[0], row[1]) != (bucket, key) or json.loads(row[2]) != json.loads(_dumps(requested)):
            return None
        current = db.execute(f"SELECT {OBJECT_COLUMNS} FROM objects WHERE bucket = ? AND key = ?", (bucket, key))
        found = current.fetchone()
        if found is None:
            return None
        record = self._object_from_row(found)
        return record if (record.etag, record.last_modified) == (row[3], row[4]) else None

    def forget_completed_uploads(self, before: float) -> int:
        """Drop the memory of uploads completed before `before` (wall clock); how many went."""
        if self._reader().execute("SELECT 1 FROM completed_uploads WHERE completed < ? LIMIT 1", (before,)).fetchone():
            with self._write() as db:
                return db.execute("DELETE FROM completed_uploads WHERE completed < ?", (before,)).rowcount
        return 0

    def abort_upload(self, bucket: str, key: str, upload_id: str) -> None:
        with self._write() as db:
            row = db.execute("SELECT bucket, key FROM uploads WHERE upload_id = ?", (upload_id,)).fetchone()
            if row is None or row[0] != bucket or row[1] != key:
                raise UploadNotFound(upload_id)
            self._drop_uploads(db, "upload_id = ?", (upload_id,))

    def _drop_uploads(self, db: sqlite3.Connection, where: str, args: tuple[Any, ...]) -> None:
        for upload_id, tier in db.execute(f"SELECT upload_id, tier FROM uploads WHERE {where}", args).fetchall():
            stored = [_stored_from_json(st) for (st,) in db.execute(
                "SELECT stored FROM parts WHERE upload_id = ?", (upload_id,)
            )]
            self._retire(db, tier, stored)
            db.execute("DELETE FROM parts WHERE upload_id = ?", (upload_id,))
            db.execute("DELETE FROM uploads WHERE upload_id = ?", (upload_id,))

    # --- garbage ----------------------------------------------------------------------------

    def due_garbage(self, now: float, limit: int = 256) -> list[tuple[str, StoredData]]:
        rows = self._reader().execute(
            "SELECT tier, stored FROM garbage WHERE not_before <= ? ORDER BY not_before LIMIT ?", (now, limit)
        )
        return [(tier, _stored_from_json(st)) for tier, st in rows]

    def forget_garbage(self, data_ids: list[str]) -> None:
        with self._write() as db:
            db.executemany("DELETE FROM garbage WHERE data_id = ?", [(d,) for d in data_ids])

    def publish_pins(self, holder: str, data_ids: list[str], expires: float) -> None:
        """Replace `holder`'s published read pins with `data_ids`, valid until `expires`."""
        with self._write() as db:
            db.execute("DELETE FROM read_pins WHERE holder = ?", (holder,))
            db.executemany(
                "INSERT INTO read_pins (holder, data_id, expires) VALUES (?, ?, ?)",
                [(holder, d, expires) for d in data_ids],
            )

    def pinned_elsewhere(self, data_ids: list[str], now: float) -> set[str]:
        """Which of these blobs some process has published an unexpired read pin for."""
        db = self._reader()
        return {
            d for d in data_ids
            if db.execute("SELECT 1 FROM read_pins WHERE data_id = ? AND expires > ?", (d, now)).fetchone()
        }

    def is_referenced(self, data_id: str) -> bool:
        """Does any object or unfinished upload still use this blob (or is it queued for deletion)?"""
        db = self._reader()
        return bool(
            db.execute("SELECT 1 FROM blobs WHERE data_id = ?", (data_id,)).fetchone()
            or db.execute("SELECT 1 FROM garbage WHERE data_id = ?", (data_id,)).fetchone()
        )

    # --- maintenance: heal and scrub -----------------------------------------------------------

    def blobs_after(self, tier: str, after: str, limit: int) -> list[tuple[str, str | None, str | None]]:
        """(data_id, bucket, key) of a tier's blobs in data id order: the scrubber's cursor."""
        rows = self._reader().execute(
            "SELECT data_id, bucket, key FROM blobs WHERE tier = ? AND data_id > ? ORDER BY data_id LIMIT ?",
            (tier, after, limit),
        )
        return [tuple(row) for row in rows]

    def stored_blob(self, data_id: str) -> StoredData | None:
        """The current StoredData (with its recorded location) of a live blob."""
        db = self._reader()
        row = db.execute("SELECT bucket, key, upload_id FROM blobs WHERE data_id = ?", (data_id,)).fetchone()
        if row is None:
            return None
        bucket, key, upload_id = row
        if upload_id is not None:
            for (raw,) in db.execute("SELECT stored FROM parts WHERE upload_id = ?", (upload_id,)):
                stored = _stored_from_json(raw)
                if stored.data_id == data_id:
                    return stored
            return None
        seg_row = db.execute("SELECT segments FROM objects WHERE bucket = ? AND key = ?", (bucket, key)).fetchone()
        if seg_row is None:
            return None
        for segment in json.loads(seg_row[0]):
            if segment["id"] == data_id:
                return StoredData(data_id, segment["size"], segment.get("loc") or {})
        return None

    def blob_owner(self, data_id: str) -> tuple[str | None, str | None]:
        row = self._reader().execute("SELECT bucket, key FROM blobs WHERE data_id = ?", (data_id,)).fetchone()
        return (row[0], row[1]) if row else (None, None)

    def count_blobs(self, tier: str) -> int:
        return int(self._reader().execute("SELECT COUNT(*) FROM blobs WHERE tier = ?", (tier,)).fetchone()[0])

    def tier_usage(self) -> dict[str, tuple[int, int]]:
        """(objects, bytes) per tier that holds any (from the usage counters: no scan)."""
        rows = self._reader().execute(
            "SELECT tier, SUM(objects), SUM(bytes) FROM tier_usage GROUP BY tier HAVING SUM(objects) > 0"
        )
        return {tier: (int(n), int(size)) for tier, n, size in rows}

    def bucket_tier_usage(self) -> dict[tuple[str, str], tuple[int, int]]:
        """(objects, bytes) per (bucket, tier) that holds any (from the usage counters: no scan)."""
        rows = self._reader().execute("SELECT bucket, tier, objects, bytes FROM tier_usage WHERE objects > 0")
        return {(bucket, tier): (int(n), int(size)) for bucket, tier, n, size in rows}

    # --- temperature, moves and restores (driven by lifecycle through tiering's API) ----------

    def record_accesses(
        self, accesses: dict[tuple[str, str], tuple[int, float]], half_life: float = DEFAULT_HALF_LIFE
    ) -> None:
        """Fold a batch of reads into heat and last access: one transaction per batch, never per GET."""
        with self._write() as db:
            for (bucket, key), (count, at) in accesses.items():
                row = db.execute(
                    "SELECT heat, heat_at FROM objects WHERE bucket = ? AND key = ?", (bucket, key)
                ).fetchone()
                if row is None:
                    continue  # deleted since it was read
                heat = decayed(row[0], row[1], at, half_life) + count
                db.execute(
                    "UPDATE objects SET heat = ?, heat_at = ?, last_access = MAX(last_access, ?) "
                    "WHERE bucket = ? AND key = ?",
                    (heat, at, at, bucket, key),
                )

    def commit_move(
        self,
        bucket: str,
        key: str,
        *,
        expected_generation: int,
        tier: str,
        segments: tuple[Segment, ...],
        storage_class: str | None,
        now: float,
        reason: str,
    ) -> ObjectRecord:
        """Point an object at its copy on another tier — only if it is still the version copied.

        Raises PreconditionFailed if the object changed (overwritten, deleted, moved) meanwhile:
        the mover then throws its copy away and the object keeps its newer state.
        """
        with self._write() as db:
            current = self._current_if(db, bucket, key, expected_generation)
            keep = {s.stored.data_id for s in segments}  # a class change on the same tier keeps its data
            self._retire(db, current.tier, [s.stored for s in current.segments if s.stored.data_id not in keep])
            meta = current.meta
            system = dict(meta.system)
            system.pop(ARCHIVE_STATUS, None)
            if tier == "cold" and meta.storage_class == "INTELLIGENT_TIERING":
                # S3 reports an archived Intelligent-Tiering object by its access tier.
                system[ARCHIVE_STATUS] = "DEEP_ARCHIVE_ACCESS" if "deep-archive" in reason else "ARCHIVE_ACCESS"
            # replace(), not a new ObjectMeta: a move keeps every other field (the ACL, ...).
            meta = dataclasses.replace(meta, system=system, storage_class=storage_class or meta.storage_class)
            restore = current.restore
            if restore is not None and tier != "cold":
                # Out of the archive for good: the temporary restored copy has no job left.
                self._retire(db, restore.tier, [s.stored for s in restore.segments])
                restore = None
            self._claim_blobs(db, tier, bucket, key, segments)
            generation = self._next_generation(db)
            db.execute(
                "UPDATE objects SET tier = ?, segments = ?, meta = ?, storage_class = ?, tier_since = ?, "
                "restore = ?, generation = ? WHERE bucket = ? AND key = ?",
                (tier, _dumps([s.to_json() for s in segments]), _dumps(meta.to_json()), meta.storage_class, now,
                 _dumps(restore.to_json()) if restore else None, generation, bucket, key),
            )
            db.execute(
                "INSERT INTO moves (bucket, key, at, from_tier, to_tier, size, reason) VALUES (?,?,?,?,?,?,?)",
                (bucket, key, now, current.tier, tier, current.size, reason),
            )
        return ObjectRecord(
            **{**current.__dict__, "tier": tier, "segments": segments, "meta": meta, "tier_since": now,
               "restore": restore, "generation": generation}
        )

    def set_restore(
        self, bucket: str, key: str, *, expected_generation: int, restore: RestoreState | None, now: float
    ) -> ObjectRecord:
        """Record (or clear) the restored copy of an archived object, compare-and-swap like a move."""
        with self._write() as db:
            current = self._current_if(db, bucket, key, expected_generation)
            old = current.restore
            if old is not None:
                keep = {s.stored.data_id for s in restore.segments} if restore else set()
                self._retire(db, old.tier, [s.stored for s in old.segments if s.stored.data_id not in keep])
            if restore is not None:
                self._claim_blobs(db, restore.tier, bucket, key, restore.segments)
                if restore.segments and (old is None or not old.segments):
                    db.execute(
                        "INSERT INTO moves (bucket, key, at, from_tier, to_tier, size, reason) VALUES (?,?,?,?,?,?,?)",
                        (bucket, key, now, current.tier, restore.tier, current.size, "restore"),
                    )
            generation = self._next_generation(db)
            db.execute(
                "UPDATE objects SET restore = ?, generation = ? WHERE bucket = ? AND key = ?",
                (_dumps(restore.to_json()) if restore else None, generation, bucket, key),
            )
        return ObjectRecord(**{**current.__dict__, "restore": restore, "generation": generation})

    def set_encryption(self, bucket: str, key: str, generation: int, encryption: dict[str, Any]) -> bool:
        """Replace an object's encryption descriptor (a master-key rotation re-wrapping its data
        key); False if the object changed meanwhile. The generation stays: data and location are
        untouched, and a mover's commit re-reads the metadata inside its own transaction."""
        with self._write() as db:
            row = db.execute("SELECT meta FROM objects WHERE bucket = ? AND key = ? AND generation = ?",
                             (bucket, key, generation)).fetchone()
            if row is None:
                return False
            meta = json.loads(row[0])
            meta["enc"] = encryption
            db.execute("UPDATE objects SET meta = ? WHERE bucket = ? AND key = ? AND generation = ?",
                       (_dumps(meta), bucket, key, generation))
        return True

    def uploads_after(self, upload_id: str, limit: int) -> list[UploadRecord]:
        """Unfinished uploads of every bucket after a cursor (upload id order)."""
        rows = self._reader().execute(
            "SELECT upload_id, bucket, key, initiated, tier, meta, tags, checksum_algorithm, owner, checksum_type "
            "FROM uploads WHERE upload_id > ? ORDER BY upload_id LIMIT ?", (upload_id, limit))
        return [self._upload_from_row(row) for row in rows]

    def set_upload_encryption(self, upload_id: str, old: dict[str, Any], new: dict[str, Any]) -> bool:
        """An unfinished upload's descriptor re-wrapped, if it is still `old`."""
        with self._write() as db:
            row = db.execute("SELECT meta FROM uploads WHERE upload_id = ?", (upload_id,)).fetchone()
            if row is None or json.loads(row[0]).get("enc") != old:
                return False
            meta = json.loads(row[0])
            meta["enc"] = new
            db.execute("UPDATE uploads SET meta = ? WHERE upload_id = ?", (_dumps(meta), upload_id))
        return True

    def objects_after(self, bucket: str, key: str, limit: int) -> list[ObjectRecord]:
        """Objects of every bucket in (bucket, key) order after a cursor: the daemon's scan."""
        rows = self._reader().execute(
            f"SELECT {OBJECT_COLUMNS} FROM objects WHERE bucket > ? OR (bucket = ? AND key > ?) "
            "ORDER BY bucket, key LIMIT ?",
            (bucket, bucket, key, limit),
        )
        return [self._object_from_row(row) for row in rows]

    def moves_for(self, bucket: str, key: str, limit: int = 100) -> list[MoveRecord]:
        rows = self._reader().execute(
            "SELECT at, from_tier, to_tier, size, reason FROM moves WHERE bucket = ? AND key = ? "
            "ORDER BY at DESC LIMIT ?",
            (bucket, key, limit),
        )
        return [MoveRecord(*row) for row in rows]

    def count_moves(self) -> dict[tuple[str, str], tuple[int, int]]:
        """(moves, bytes) per (from, to): for transition metrics."""
        rows = self._reader().execute(
            "SELECT from_tier, to_tier, COUNT(*), COALESCE(SUM(size), 0) FROM moves WHERE reason != 'restore' "
            "GROUP BY from_tier, to_tier"
        )
        return {(f, t): (int(n), int(b)) for f, t, n, b in rows}

    def uploads_before(self, initiated_before: float, limit: int = 1000) -> list[UploadRecord]:
        rows = self._reader().execute(
            "SELECT upload_id, bucket, key, initiated, tier, meta, tags, checksum_algorithm, owner, checksum_type "
            "FROM uploads WHERE initiated < ? ORDER BY initiated LIMIT ?",
            (initiated_before, limit),
        )
        return [self._upload_from_row(row) for row in rows]

    def acquire_lease(self, name: str, holder: str, ttl: float, now: float, *, replacing: str | None = None) -> bool:
        """Take or renew a named lease; False while another holder's lease is unexpired — unless
        that holder is `replacing` (one the caller found dead: see tiering.lease_holders)."""
        with self._write() as db:
            row = db.execute("SELECT holder, expires FROM leases WHERE name = ?", (name,)).fetchone()
            if row is not None and row[0] not in (holder, replacing) and row[1] > now:
                return False
            db.execute(
                "INSERT INTO leases (name, holder, expires) VALUES (?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires = excluded.expires",
                (name, holder, now + ttl),
            )
            return True

    def release_lease(self, name: str, holder: str) -> None:
        with self._write() as db:
            db.execute("DELETE FROM leases WHERE name = ? AND holder = ?", (name, holder))

    def lease(self, name: str, now: float) -> tuple[str, float] | None:
        """(holder, expires) of an unexpired lease."""
        row = self._reader().execute("SELECT holder, expires FROM leases WHERE name = ?", (name,)).fetchone()
        return (row[0], float(row[1])) if row and row[1] > now else None

    def lease_holder(self, name: str, now: float) -> str | None:
        row = self._reader().execute("SELECT holder, expires FROM leases WHERE name = ?", (name,)).fetchone()
        return row[0] if row and row[1] > now else None

    def get_setting(self, name: str) -> str | None:
        row = self._reader().execute("SELECT value FROM settings WHERE name = ?", (name,)).fetchone()
        return row[0] if row else None

    def put_setting(self, name: str, value: str) -> None:
        with self._write() as db:
            db.execute(
                "INSERT INTO settings (name, value) VALUES (?, ?) "
                "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                (name, value),
            )

    def settings_with_prefix(self, prefix: str) -> dict[str, str]:
        """Every setting whose name starts with `prefix` (an index range scan)."""
        upper = key_successor(prefix)
        sql = "SELECT name, value FROM settings WHERE name >= ?" + (" AND name < ?" if upper else "")
        return dict(self._reader().execute(sql, (prefix, upper) if upper else (prefix,)).fetchall())

    def tier_heats(self, tier: str) -> list[tuple[float, float]]:
        """(heat, heat_at) of every object on a tier: for the heat histogram of `admin tiers`."""
        return [(h, at) for h, at in self._reader().execute("SELECT heat, heat_at FROM objects WHERE tier = ?", (tier,))]

    # --- topology and rebalancing (tiering.rebalance) -------------------------------------------

    def seed_domains(self, rows: list[dict[str, Any]]) -> None:
        """Record config-declared domains that have no row yet (a row, once there, wins)."""
        with self._write() as db:
            db.executemany(
                "INSERT INTO domains (id, tier, path, node, rack, zone, weight, status, changed) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, 'active', ?) ON CONFLICT (id) DO NOTHING",
                [(r["id"], r["tier"], r["path"], r["node"], r["rack"], r["zone"], r["weight"], time.time())
                 for r in rows],
            )

    def add_domain(self, row: dict[str, Any]) -> None:
        """A new active domain; ValueError if the id is taken by one not removed."""
        with self._write() as db:
            old = db.execute("SELECT status FROM domains WHERE id = ?", (row["id"],)).fetchone()
            if old is not None and old[0] != "removed":
                raise ValueError(f"domain {row['id']!r} exists ({old[0]})")
            db.execute(
                "INSERT OR REPLACE INTO domains (id, tier, path, node, rack, zone, weight, status, changed) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, 'active', ?)",
                (row["id"], row["tier"], row["path"], row["node"], row["rack"], row["zone"], row["weight"],
                 time.time()),
            )

    def domain_rows(self) -> list[dict[str, Any]]:
        rows = self._reader().execute(
            "SELECT id, tier, path, node, rack, zone, weight, status, changed FROM domains ORDER BY tier, id"
        )
        keys = ("id", "tier", "path", "node", "rack", "zone", "weight", "status", "changed")
        return [dict(zip(keys, row, strict=True)) for row in rows]

    def set_domain_status(self, domain_ids: list[str], status: str) -> None:
        with self._write() as db:
            db.executemany("UPDATE domains SET status = ?, changed = ? WHERE id = ?",
                           [(status, time.time(), d) for d in domain_ids])

    def _blob_location_in(self, db: sqlite3.Connection, data_id: str) -> tuple[str, Any, Any] | None:
        """Where a live blob's location is kept: ("part", upload_id, raw) or ("object", (bucket, key), segments)."""
        row = db.execute("SELECT bucket, key, upload_id FROM blobs WHERE data_id = ?", (data_id,)).fetchone()
        if row is None:
            return None
        bucket, key, upload_id = row
        if upload_id is not None:
            raw = db.execute("SELECT stored FROM parts WHERE upload_id = ? AND stored LIKE ?",
                             (upload_id, f'%"{data_id}"%')).fetchone()
            return ("part", upload_id, raw[0]) if raw else None
        seg_row = db.execute("SELECT segments FROM objects WHERE bucket = ? AND key = ?", (bucket, key)).fetchone()
        return ("object", (bucket, key), json.loads(seg_row[0])) if seg_row else None

    def relocate_blob_if(self, data_id: str, expected: dict[str, Any], location: dict[str, Any]) -> bool:
        """Compare-and-swap a blob's location: False (nothing written) unless it is still `expected`.

        A heal, an overwrite or a delete that changed the blob meanwhile wins; the caller then
        discards its copy.
        """
        with self._write() as db:
            found = self._blob_location_in(db, data_id)
            if found is None:
                return False
            kind, where, value = found
            if kind == "part":
                stored = _stored_from_json(value)
                if stored.location != expected:
                    return False
                db.execute("UPDATE parts SET stored = ? WHERE upload_id = ? AND stored = ?",
                           (_stored_to_json(StoredData(data_id, stored.size, location)), where, value))
                return True
            segments = value
            matched = [s for s in segments if s["id"] == data_id]
            if not matched or any((s.get("loc") or {}) != expected for s in matched):
                return False
            for segment in matched:
                segment["loc"] = location
            # The bytes are the same, so the generation (the movers' CAS token) stays as it is.
            db.execute("UPDATE objects SET segments = ? WHERE bucket = ? AND key = ?",
                       (_dumps(segments), *where))
            return True

    def commit_restripe(self, bucket: str, key: str, *, expected_generation: int,
                        segments: tuple[Segment, ...]) -> ObjectRecord:
        """Point an object at a re-striped copy of its data on the same tier (compare-and-swap on
        the generation, like a move; PreconditionFailed if it changed). Old data is retired."""
        with self._write() as db:
            current = self._current_if(db, bucket, key, expected_generation)
            keep = {s.stored.data_id for s in segments}
            self._retire(db, current.tier, [s.stored for s in current.segments if s.stored.data_id not in keep])
            self._claim_blobs(db, current.tier, bucket, key, segments)
            generation = self._next_generation(db)
            db.execute(
                "UPDATE objects SET segments = ?, generation = ? WHERE bucket = ? AND key = ?",
                (_dumps([s.to_json() for s in segments]), generation, bucket, key),
            )
        return ObjectRecord(**{**current.__dict__, "segments": segments, "generation": generation})

    def blobs_on_domain(self, tier: str, domain_id: str, limit: int = 1000) -> list[str]:
        """Data ids of live blobs whose recorded location names `domain_id` (an admin-time scan)."""
        pattern = f'%"{domain_id}"%'
        db = self._reader()
        found: list[str] = []
        for (raw,) in db.execute("SELECT segments FROM objects WHERE tier = ? AND segments LIKE ?", (tier, pattern)):
            found += [s["id"] for s in json.loads(raw) if _names_domain(s.get("loc") or {}, domain_id)]
        for (raw,) in db.execute(
            "SELECT parts.stored FROM parts JOIN uploads ON parts.upload_id = uploads.upload_id "
            "WHERE uploads.tier = ? AND parts.stored LIKE ?", (tier, pattern)
        ):
            stored = _stored_from_json(raw)
            if _names_domain(stored.location, domain_id):
                found.append(stored.data_id)
        for (raw,) in db.execute("SELECT restore FROM objects WHERE restore LIKE ?", (pattern,)):
            restore = json.loads(raw)
            found += [s["id"] for s in restore.get("segments", []) if _names_domain(s.get("loc") or {}, domain_id)]
        return found[:limit]

    def add_shard_garbage(self, entries: list[tuple[str, str, str, int]], not_before: float) -> None:
        """(data_id, tier, domain, shard) files to delete after `not_before` unless referenced again."""
        with self._write() as db:
            db.executemany(
                "INSERT INTO shard_garbage (data_id, tier, domain, shard, not_before) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (data_id, domain, shard) DO UPDATE SET not_before = excluded.not_before",
                [(*e, not_before) for e in entries],
            )

    def due_shard_garbage(self, now: float, limit: int = 256) -> list[tuple[str, str, str, int]]:
        rows = self._reader().execute(
            "SELECT data_id, tier, domain, shard FROM shard_garbage WHERE not_before <= ? ORDER BY not_before LIMIT ?",
            (now, limit),
        )
        return [(d, t, dom, int(s)) for d, t, dom, s in rows]

    def forget_shard_garbage(self, entries: list[tuple[str, str, int]]) -> None:
        """Drop (data_id, domain, shard) rows."""
        with self._write() as db:
            db.executemany("DELETE FROM shard_garbage WHERE data_id = ? AND domain = ? AND shard = ?", entries)

    def shard_garbage_of(self, data_id: str) -> set[tuple[str, int]]:
        """(domain, shard) files of this blob already queued for the shard collector."""
        rows = self._reader().execute("SELECT domain, shard FROM shard_garbage WHERE data_id = ?", (data_id,))
        return {(domain, int(shard)) for domain, shard in rows}

    def shard_garbage_on(self, domain_id: str) -> tuple[int, float | None]:
        """(pending entries, latest due time) of retired data still on a domain: shard files a
        rebalance moved away, and retired blobs (overwritten, deleted) the collector has not removed."""
        db = self._reader()
        count, due = db.execute(
            "SELECT COUNT(*), MAX(not_before) FROM shard_garbage WHERE domain = ?", (domain_id,)
        ).fetchone()
        count = int(count)
        for raw, not_before in db.execute(
            "SELECT stored, not_before FROM garbage WHERE stored LIKE ?", (f'%"{domain_id}"%',)
        ):
            if _names_domain(_stored_from_json(raw).location, domain_id):
                count += 1
                due = not_before if due is None else max(due, not_before)
        return count, due

    # --- users -------------------------------------------------------------------------------

    def add_user(self, access_key: str, secret_key: str, name: str, is_admin: bool) -> None:
        with self._write() as db:
            if db.execute("SELECT 1 FROM users WHERE access_key = ?", (access_key,)).fetchone():
                raise ValueError(f"access key {access_key!r} exists")
            db.execute(
                "INSERT INTO users (access_key, secret_key, name, created, is_admin) VALUES (?, ?, ?, ?, ?)",
                (access_key, secret_key, name, time.time(), int(is_admin)),
            )

    def remove_user(self, access_key: str) -> bool:
        with self._write() as db:
            return db.execute("DELETE FROM users WHERE access_key = ?", (access_key,)).rowcount > 0

    def get_user(self, access_key: str) -> tuple[str, str, bool] | None:
        """(secret key, name, is admin) of a user."""
        row = self._reader().execute(
            "SELECT secret_key, name, is_admin FROM users WHERE access_key = ?", (access_key,)
        ).fetchone()
        return (row[0], row[1], bool(row[2])) if row else None

    def user_keys(self) -> dict[str, tuple[str, str, bool]]:
        """Every user: access key → (secret key, name, is admin). Small: loaded whole by the gateway."""
        rows = self._reader().execute("SELECT access_key, secret_key, name, is_admin FROM users")
        return {a: (sk, n, bool(i)) for a, sk, n, i in rows}

    def list_users(self) -> list[dict[str, Any]]:
        rows = self._reader().execute("SELECT access_key, name, created, is_admin FROM users ORDER BY name")
        return [{"access_key": a, "name": n, "created": c, "admin": bool(i)} for a, n, c, i in rows]

    def put_user_policy(self, name: str, policy: str | None) -> bool:
        """Set (or with None remove) the policy of user `name`; False when there was none to remove."""
        with self._write() as db:
            if policy is None:
                return db.execute("DELETE FROM user_policies WHERE name = ?", (name,)).rowcount > 0
            db.execute(
                "INSERT INTO user_policies (name, policy) VALUES (?, ?) "
                "ON CONFLICT (name) DO UPDATE SET policy = excluded.policy",
                (name, policy),
            )
            return True

    def user_policies(self) -> dict[str, str]:
        """Every user policy: name → document. Small: loaded whole by the gateway."""
        return dict(self._reader().execute("SELECT name, policy FROM user_policies").fetchall())
