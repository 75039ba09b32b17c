"""Versions: a bucket's versioning state, noncurrent versions and delete markers, ListObjectVersions.

The key's current version stays in `objects` (so ListObjects, moves and usage read what they
did); every other version of it, and every delete marker, is a row of `object_versions`, ordered
per key by `seq` (schema.py, version 3). Invariant: a key with no row in `objects` has either no
versions at all or a delete marker as its newest `object_versions` row (its current version);
whenever a change would leave a real version newest there, it is promoted back into `objects`.

Blobs: a noncurrent version keeps its data. `blobs.version_id` names the version that owns each
blob (NULL: the current one), so heal and rebalance find its location, and the orphan sweep
never collects it; a blob is retired only when the last version that uses it is deleted.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import string
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tiering.catalog.base import (
    OBJECT_COLUMNS,
    CatalogBase,
    _dumps,
    key_successor,
)
from tiering.catalog.database import Conn, NotAtHand, transaction
from tiering.conditions import DeleteCondition
from tiering.errors import (
    BucketNotFound,
    DeleteMarkerCurrent,
    InvalidBucketState,
    ObjectLocked,
    ObjectNotFound,
    PreconditionFailed,
    VersionIsDeleteMarker,
    VersionNotFound,
)
from tiering.object_lock import CONFIG_NAME as LOCK_CONFIG
from tiering.object_lock import LockConfiguration, retention_change_refused, why_locked
from tiering.records import ObjectRecord, Segment

ENABLED = "Enabled"
SUSPENDED = "Suspended"
VERSIONING_CONFIG = "versioning"  # the bucket configuration document holding the state
NULL = "null"

# object_versions' columns after its own (bucket ... noncurrent_since): those of OBJECT_COLUMNS
# in the same order, so one row decodes with `_object_from_row`.
_DATA_COLUMNS = (
    "generation, size, etag, last_modified, tier, meta, tags, checksum_algorithm, checksum, "
    "segments, heat, heat_at, last_access, tier_since, restore"
)
VERSION_COLUMNS = f"bucket, key, version_id, seq, marker, noncurrent_since, {_DATA_COLUMNS}, storage_class"
# A version row as an ObjectRecord-compatible tuple, then seq, marker, noncurrent_since.
_VERSION_SELECT = f"bucket, key, {_DATA_COLUMNS}, version_id, seq, marker, noncurrent_since, storage_class"
# A version row as an ObjectRecord's columns only (`_object_from_row`).
VERSION_RECORD_SELECT = f"bucket, key, {_DATA_COLUMNS}, version_id"


_ID_ALPHABET = string.ascii_letters + string.digits


def new_version_id() -> str:
    """A fresh version id: 32 letters and digits (190 random bits), never "null". No '-' or '_':
    an id that starts with '-' reads as an option to command lines (`aws s3api --version-id`)."""
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(32))


def well_formed_version_id(version_id: str) -> bool:
    """Could this be a version id of ours ("null" or new_version_id's form)?"""
    return version_id == NULL or (
        len(version_id) == 32 and all(c.isascii() and (c.isalnum() or c in "-_") for c in version_id)
    )


@dataclass(frozen=True)
class VersionEntry:
    """One line of ListObjectVersions: a version or a delete marker (plain columns, no JSON)."""

    key: str
    version_id: str
    is_latest: bool
    is_marker: bool
    last_modified: float
    size: int
    etag: str
    storage_class: str


@dataclass(frozen=True)
class VersionPage:
    entries: list[VersionEntry]
    common_prefixes: list[str]
    is_truncated: bool
    next_key_marker: str | None
    next_version_id_marker: str | None


@dataclass(frozen=True)
class DeleteOutcome:
    """What a DeleteObject did: which version went (or which marker was added), and was it a marker."""

    version_id: str | None  # None: unversioned bucket, no version named
    delete_marker: bool
    previous: ObjectRecord | None = None  # the version that was current (or the one named) before


@dataclass(frozen=True)
class NoncurrentVersion:
    """A noncurrent version as lifecycle sees it: the record, when it stopped being current, and
    how many newer noncurrent versions its key has (for NewerNoncurrentVersions)."""

    record: ObjectRecord
    noncurrent_since: float
    newer_noncurrent: int
    seq: int


class VersionsCatalog(CatalogBase):
    # --- the bucket's state -----------------------------------------------------------------------

    def _versioning_in(self, db: Conn, bucket: str) -> str:
        row = db.execute(
            "SELECT value FROM bucket_config WHERE bucket = ? AND name = ?", (bucket, VERSIONING_CONFIG)
        ).fetchone()
        return row[0] if row else ""

    def versioning(self, bucket: str) -> str:
        """ "" (never versioned), "Enabled" or "Suspended"."""
        self.get_bucket(bucket)
        return self._versioning_in(self._reader(), bucket)

    @transaction
    def set_versioning(self, bucket: str, state: str) -> None:
        assert state in (ENABLED, SUSPENDED)
        with self._write() as db:
            if (
                db.execute(f"SELECT 1 FROM buckets WHERE name = ?{self._db.key_share}", (bucket,)).fetchone()
                is None
            ):
                raise BucketNotFound(bucket)
            if state == SUSPENDED and self._lock_config_in(db, bucket) is not None:
                raise InvalidBucketState(
                    bucket,
                    "An Object Lock configuration is present on this bucket, so the versioning state cannot be changed.",
                )
            db.execute(
                "INSERT INTO bucket_config (bucket, name, value) VALUES (?, ?, ?) "
                "ON CONFLICT (bucket, name) DO UPDATE SET value = excluded.value",
                (bucket, VERSIONING_CONFIG, state),
            )

    # --- Object Lock (tiering.object_lock holds the rules) ---------------------------------------

    @staticmethod
    def _lock_config_in(db: Conn, bucket: str) -> LockConfiguration | None:
        row = db.execute(
            "SELECT value FROM bucket_config WHERE bucket = ? AND name = ?", (bucket, LOCK_CONFIG)
        ).fetchone()
        return LockConfiguration.from_json(row[0]) if row else None

    def object_lock_config(self, bucket: str) -> LockConfiguration | None:
        """The bucket's Object Lock configuration (None: Object Lock is not enabled on it)."""
        self.get_bucket(bucket)
        return self._lock_config_in(self._reader(), bucket)

    @transaction
    def set_object_lock_config(self, bucket: str, config: LockConfiguration) -> None:
        """Enable Object Lock (for good: there is no way back) and set the default retention."""
        with self._write() as db:
            if (
                db.execute(f"SELECT 1 FROM buckets WHERE name = ?{self._db.key_share}", (bucket,)).fetchone()
                is None
            ):
                raise BucketNotFound(bucket)
            if self._versioning_in(db, bucket) != ENABLED:
                raise InvalidBucketState(
                    bucket, "Versioning must be 'Enabled' on the bucket to apply a Object Lock configuration"
                )
            db.execute(
                "INSERT INTO bucket_config (bucket, name, value) VALUES (?, ?, ?) "
                "ON CONFLICT (bucket, name) DO UPDATE SET value = excluded.value",
                (bucket, LOCK_CONFIG, config.to_json()),
            )

    @transaction
    def set_lock(
        self,
        bucket: str,
        key: str,
        version_id: str | None,
        *,
        retention: tuple[str | None, float | None] | None = None,
        hold: bool | None = None,
        bypass_governance: bool = False,
        now: float | None = None,
    ) -> str:
        """PutObjectRetention (`retention`: (mode, until), (None, None) to remove) or
        PutObjectLegalHold (`hold`) of one version (None: the current one); its version id.
        `now`: the store's clock (tiering.clock), which judges retention everywhere: the same
        time that PUT's checks of a retain-until date read (wall time when not given)."""
        with self._write() as db:
            if self._lock_config_in(db, bucket) is None:
                self.get_bucket(bucket)
                raise InvalidBucketState(bucket, "Bucket is missing Object Lock Configuration")
            row = db.execute(
                "SELECT meta, version_id FROM objects WHERE bucket = ? AND key = ?", (bucket, key)
            ).fetchone()
            table, where = "objects", "bucket = ? AND key = ?"
            args: tuple[Any, ...] = (bucket, key)
            if version_id is None and row is None:
                marker = self._newest_marker(db, bucket, key)
                if marker is not None:
                    raise DeleteMarkerCurrent(bucket, key, marker)
                raise ObjectNotFound(bucket, key)
            if row is None or (version_id is not None and row[1] != version_id):
                assert version_id is not None
                found = self._version_row(db, bucket, key, version_id)
                if found is None:
                    raise VersionNotFound(bucket, key, version_id)
                if found[19]:
                    raise VersionIsDeleteMarker(bucket, key, version_id)
                row = (found[7], version_id)
                table, where = "object_versions", "bucket = ? AND key = ? AND version_id = ?"
                args = (bucket, key, version_id)
            meta = json.loads(row[0])
            lock = dict(meta.get("lock") or {})
            if retention is not None:
                mode, until = retention
                refused = retention_change_refused(
                    lock,
                    mode,
                    until,
                    time.time() if now is None else now,
                    bypass_governance=bypass_governance,
                )
                if refused is not None:
                    raise ObjectLocked(bucket, key, row[1], refused)
                lock.pop("mode", None)
                lock.pop("until", None)
                if mode is not None:
                    lock.update(mode=mode, until=until)
            if hold is not None:
                lock.pop("hold", None)
                if hold:
                    lock["hold"] = True
            if lock:
                meta["lock"] = lock
            else:
                meta.pop("lock", None)
            db.execute(f"UPDATE {table} SET meta = ? WHERE {where}", (_dumps(meta), *args))
            return str(row[1])

    def _check_unlocked(self, db: Conn, record: ObjectRecord, bypass_governance: bool, now: float) -> None:
        why = why_locked(record.meta.lock, now, bypass_governance=bypass_governance)
        if why is not None:
            raise ObjectLocked(record.bucket, record.key, record.version_id, why)

    # --- helpers inside a writer's transaction ------------------------------------------------

    def _demote(self, db: Conn, current: ObjectRecord, now: float) -> None:
        """Turn the key's current version into its newest noncurrent one (data kept). The caller
        then replaces or deletes its `objects` row."""
        seq = self._next_generation(db)
        db.execute(
            f"INSERT INTO object_versions ({VERSION_COLUMNS}) SELECT bucket, key, version_id, ?, 0, ?, "
            f"{_DATA_COLUMNS}, storage_class FROM objects WHERE bucket = ? AND key = ?",
            (seq, now, current.bucket, current.key),
        )
        self._own_blobs(db, current, current.version_id)

    @staticmethod
    def _own_blobs(db: Conn, record: ObjectRecord, version_id: str | None) -> None:
        ids = [s.stored.data_id for s in record.segments]
        if record.restore is not None:
            ids += [s.stored.data_id for s in record.restore.segments]
        db.executemany("UPDATE blobs SET version_id = ? WHERE data_id = ?", [(version_id, d) for d in ids])

    def _add_marker(self, db: Conn, bucket: str, key: str, version_id: str, now: float) -> None:
        seq = self._next_generation(db)
        db.execute(
            f"INSERT INTO object_versions ({VERSION_COLUMNS}) VALUES "
            "(?, ?, ?, ?, 1, ?, ?, 0, '', ?, '', '{}', '{}', NULL, NULL, '[]', 0, 0, 0, 0, NULL, 'STANDARD')",
            (bucket, key, version_id, seq, now, seq, now),
        )

    def _version_row(self, db: Conn, bucket: str, key: str, version_id: str) -> tuple[Any, ...] | None:
        row: tuple[Any, ...] | None = db.execute(
            f"SELECT {_VERSION_SELECT} FROM object_versions WHERE bucket = ? AND key = ? AND version_id = ?",
            (bucket, key, version_id),
        ).fetchone()
        return row

    def _drop_version(self, db: Conn, row: tuple[Any, ...]) -> ObjectRecord | None:
        """Delete a noncurrent version (or marker) row and retire its data. Returns the version's
        record (None for a marker). No two versions share a blob: in a versioned bucket every
        write, self-copies included, writes its own data (server/handlers/copy.py)."""
        record = self._object_from_row(row[:18])
        db.execute(
            "DELETE FROM object_versions WHERE bucket = ? AND key = ? AND version_id = ?",
            (record.bucket, record.key, record.version_id),
        )
        if row[19]:
            return None
        self._retire_data(db, record)
        return record

    def _retire_data(self, db: Conn, record: ObjectRecord) -> None:
        self._retire(db, record.tier, [s.stored for s in record.segments])
        if record.restore is not None:
            self._retire(db, record.restore.tier, [s.stored for s in record.restore.segments])

    def _promote_newest(self, db: Conn, bucket: str, key: str) -> None:
        """After the current version went: the newest remaining version becomes current, unless
        it is a delete marker (then the key reads as deleted, the marker staying where it is)."""
        row = db.execute(
            f"SELECT {_VERSION_SELECT} FROM object_versions WHERE bucket = ? AND key = ? ORDER BY seq DESC LIMIT 1",
            (bucket, key),
        ).fetchone()
        if row is None or row[19]:
            return
        record = self._object_from_row(row[:18])
        # A fresh generation: a mover that copied this version while it was noncurrent holds the
        # old one, and its compare-and-swap must fail.
        generation = self._next_generation(db)
        db.execute(
            self._db.upsert_object_sql(f"{OBJECT_COLUMNS}, storage_class", ",".join("?" * 19)),
            (bucket, key, generation, *row[3:17], record.version_id, row[21]),
        )
        db.execute(
            "DELETE FROM object_versions WHERE bucket = ? AND key = ? AND version_id = ?",
            (bucket, key, record.version_id),
        )
        self._own_blobs(db, record, None)

    def _newest_marker(self, db: Conn, bucket: str, key: str) -> str | None:
        """The version id of the key's current delete marker, if its current version is one."""
        row = db.execute(
            "SELECT version_id, marker FROM object_versions WHERE bucket = ? AND key = ? ORDER BY seq DESC LIMIT 1",
            (bucket, key),
        ).fetchone()
        return str(row[0]) if row and row[1] else None

    def _make_room(
        self, db: Conn, state: str, bucket: str, key: str, current: ObjectRecord | None, now: float
    ) -> bool:
        """Before a new current version (or marker) of the key: keep the old current version as a
        noncurrent one if the bucket's state says so, and drop a noncurrent "null" version that a
        new "null" one replaces. True: `current` is replaced outright (unversioned, or Suspended
        over a null version), its data for the caller to retire."""
        if state == "":
            return current is not None
        replaced = False
        if current is not None:
            if state == SUSPENDED and current.version_id == NULL:
                replaced = True
            else:
                self._demote(db, current, now)
        if state == SUSPENDED:
            old_null = self._version_row(db, bucket, key, NULL)
            if old_null is not None:
                self._drop_version(db, old_null)
        return replaced

    # --- reads ------------------------------------------------------------------------------------

    def version_at_hand(self, bucket: str, key: str, version_id: str | None) -> ObjectRecord | None:
        """`get_version`'s plain case — the key's current row, which is the version asked for —
        if the database can answer without waiting (Database.row_at_hand): callable on the event
        loop. None otherwise, and for every other case (missing key, delete marker, an older
        version): `get_version` in a thread answers those, errors included."""
        try:
            row = self._db.row_at_hand(
                f"SELECT {OBJECT_COLUMNS} FROM objects WHERE bucket = ? AND key = ?", (bucket, key)
            )
        except NotAtHand:
            return None
        if row is None or (version_id is not None and row[17] != version_id):
            return None
        return self._object_from_row(row)

    def get_version(self, bucket: str, key: str, version_id: str | None) -> ObjectRecord:
        """A version of a key (None: the current one). A current delete marker reads as a
        missing key (DeleteMarkerCurrent); a marker named by its id is VersionIsDeleteMarker."""
        db = self._reader()
        row = db.execute(
            f"SELECT {OBJECT_COLUMNS} FROM objects WHERE bucket = ? AND key = ?", (bucket, key)
        ).fetchone()
        if row is not None and (version_id is None or row[17] == version_id):
            return self._object_from_row(row)
        if version_id is None:
            self.get_bucket(bucket)
            marker = self._newest_marker(db, bucket, key)
            if marker is not None:
                raise DeleteMarkerCurrent(bucket, key, marker)
            raise ObjectNotFound(bucket, key)
        found = self._version_row(db, bucket, key, version_id)
        if found is None:
            self.get_bucket(bucket)
            raise VersionNotFound(bucket, key, version_id)
        if found[19]:
            raise VersionIsDeleteMarker(bucket, key, version_id)
        return self._object_from_row(found[:18])

    # --- deletes ----------------------------------------------------------------------------------

    def _delete_current_in(
        self,
        db: Conn,
        bucket: str,
        key: str,
        expected_generation: int | None,
        condition: DeleteCondition | None,
        now: float,
    ) -> DeleteOutcome | None:
        """DeleteObject without a version id, by the bucket's state. None: `expected_generation`
        no longer matches (the caller's decision is stale). `condition` (S3's conditional
        delete) is checked on the current object in this transaction; it raises if it fails."""
        # Locked as read (as commit_object does): a concurrent writer of the key then fails this
        # transaction with a serialization failure, run again, rather than with a unique violation
        # when both demote the same current version into object_versions.
        row = db.execute(
            f"SELECT {OBJECT_COLUMNS} FROM objects WHERE bucket = ? AND key = ?{self._db.for_update}",
            (bucket, key),
        ).fetchone()
        current = self._object_from_row(row) if row else None
        if expected_generation is not None and (current is None or current.generation != expected_generation):
            return None
        if condition:
            condition.check(bucket, key, current)  # holding on no object: delete as usual
        state = self._versioning_in(db, bucket)
        if self._make_room(db, state, bucket, key, current, now):
            self._retire_object_row(db, bucket, key)
        if current is not None:
            db.execute("DELETE FROM objects WHERE bucket = ? AND key = ?", (bucket, key))
        if state == "":
            return DeleteOutcome(None, False, current)
        marker_id = new_version_id() if state == ENABLED else NULL
        self._add_marker(db, bucket, key, marker_id, now)
        return DeleteOutcome(marker_id, True, current)

    def _delete_version_in(
        self,
        db: Conn,
        bucket: str,
        key: str,
        version_id: str,
        bypass_governance: bool,
        condition: DeleteCondition | None,
        now: float,
    ) -> DeleteOutcome:
        """DeleteObject with a version id: that version (or marker) goes for good, unless Object
        Lock protects it (ObjectLocked) or `condition` fails on that version."""
        row = db.execute(
            f"SELECT {OBJECT_COLUMNS} FROM objects WHERE bucket = ? AND key = ?{self._db.for_update}",
            (bucket, key),
        ).fetchone()
        if row is not None and row[17] == version_id:
            current = self._object_from_row(row)
            if condition:
                condition.check(bucket, key, current)
            self._check_unlocked(db, current, bypass_governance, now)
            self._retire_object_row(db, bucket, key)
            db.execute("DELETE FROM objects WHERE bucket = ? AND key = ?", (bucket, key))
            self._promote_newest(db, bucket, key)
            return DeleteOutcome(version_id, False, current)
        found = self._version_row(db, bucket, key, version_id)
        if condition:
            condition.check(
                bucket, key, None if found is None or found[19] else self._object_from_row(found[:18])
            )
        if found is None:
            return DeleteOutcome(version_id, False)  # S3 answers 204 for a version that is not there
        if not found[19]:
            self._check_unlocked(db, self._object_from_row(found[:18]), bypass_governance, now)
        removed = self._drop_version(db, found)
        if row is None:
            self._promote_newest(db, bucket, key)  # the marker that went may have been current
        return DeleteOutcome(version_id, bool(found[19]), removed)

    @transaction
    def delete_object_version(
        self,
        bucket: str,
        key: str,
        version_id: str | None = None,
        *,
        expected_generation: int | None = None,
        bypass_governance: bool = False,
        condition: DeleteCondition | None = None,
        now: float | None = None,
    ) -> DeleteOutcome | None:
        """S3's DeleteObject in every bucket state (see the module's docstring). A version under
        Object Lock is refused (ObjectLocked); GOVERNANCE yields to `bypass_governance`.
        `condition`: S3's conditional delete (tiering/conditions.py), checked in this transaction.
        `now`: the store's clock, which judges retention and dates markers (wall time if None)."""
        if now is None:
            now = time.time()
        with self._write() as db:
            if (
                db.execute(f"SELECT 1 FROM buckets WHERE name = ?{self._db.key_share}", (bucket,)).fetchone()
                is None
            ):
                raise BucketNotFound(bucket)
            if version_id is None:
                return self._delete_current_in(db, bucket, key, expected_generation, condition, now)
            return self._delete_version_in(db, bucket, key, version_id, bypass_governance, condition, now)

    # --- tags and ACLs of one version ---------------------------------------------------------------

    @transaction
    def set_version_fields(
        self,
        bucket: str,
        key: str,
        version_id: str,
        *,
        tags: dict[str, str] | None = None,
        acl: str | None = None,
    ) -> None:
        """PutObjectTagging / PutObjectAcl of one version, current or not (data and generation
        untouched, as for the current version's put_tags / put_object_acl)."""
        with self._write() as db:
            row = db.execute(
                "SELECT meta FROM objects WHERE bucket = ? AND key = ? AND version_id = ?",
                (bucket, key, version_id),
            ).fetchone()
            table, where = "objects", "bucket = ? AND key = ?"
            args: tuple[Any, ...] = (bucket, key)
            if row is None:
                found = self._version_row(db, bucket, key, version_id)
                if found is None:
                    if db.execute("SELECT 1 FROM buckets WHERE name = ?", (bucket,)).fetchone() is None:
                        raise BucketNotFound(bucket)
                    raise VersionNotFound(bucket, key, version_id)
                if found[19]:
                    raise VersionIsDeleteMarker(bucket, key, version_id)
                row = (found[7],)
                table, where = "object_versions", "bucket = ? AND key = ? AND version_id = ?"
                args = (bucket, key, version_id)
            if tags is not None:
                db.execute(f"UPDATE {table} SET tags = ? WHERE {where}", (_dumps(tags), *args))
            if acl is not None:
                meta = json.loads(row[0])
                meta["acl"] = acl
                db.execute(f"UPDATE {table} SET meta = ? WHERE {where}", (_dumps(meta), *args))

    # --- ListObjectVersions -------------------------------------------------------------------------

    def list_versions(
        self,
        bucket: str,
        *,
        prefix: str = "",
        delimiter: str = "",
        key_marker: str = "",
        version_id_marker: str = "",
        max_keys: int = 1000,
    ) -> VersionPage:
        """One page of versions and delete markers: keys in UTF-8 order, each key's versions
        newest first. Two ordered index scans merged (current versions from `objects`, the rest
        from `object_versions` by (bucket, key, seq)), plain columns only (no JSON decoded),
        common prefixes skipped with one seek each: the cost of a page depends on the page, not
        on how many versions the bucket holds (bench/bench_versions.py)."""
        db = self._reader()
        if db.execute("SELECT 1 FROM buckets WHERE name = ?", (bucket,)).fetchone() is None:
            raise BucketNotFound(bucket)
        if max_keys <= 0:
            return VersionPage([], [], False, None, None)
        upper = key_successor(prefix) if prefix else None
        # Where to start: (key, mode, seq). mode "from": every version of keys >= key;
        # "current-done": the noncurrent versions of key, then keys > key; "seq": noncurrent versions
        # of key older than seq, then keys > key; "after": keys > key.
        start: tuple[str, str, int] = (prefix, "from", 0)
        if key_marker and key_marker >= prefix:
            start = (key_marker, "after", 0)
            if version_id_marker:
                current = db.execute(
                    "SELECT version_id FROM objects WHERE bucket = ? AND key = ?", (bucket, key_marker)
                ).fetchone()
                if current is not None and current[0] == version_id_marker:
                    start = (key_marker, "current-done", 0)
                else:
                    found = db.execute(
                        "SELECT seq FROM object_versions WHERE bucket = ? AND key = ? AND version_id = ?",
                        (bucket, key_marker, version_id_marker),
                    ).fetchone()
                    if found is not None:
                        start = (key_marker, "seq", int(found[0]))
        entries: list[VersionEntry] = []
        prefixes: list[str] = []
        # The key whose versions we are inside (so that an older one is not the latest).
        inside: str | None = start[0] if start[1] in ("current-done", "seq") else None
        last: tuple[str | None, str | None] = (None, None)
        # Without a delimiter the page is the next max_keys rows; with one, most rows may roll up
        # into a prefix that is skipped by a seek, so batches start small and grow.
        batch = max_keys + 1 if not delimiter else min(max_keys + 1, 32)
        while True:
            seen = 0
            sought = False
            for row, position in self._merged_versions(db, bucket, start, upper, batch):
                seen += 1
                key = row[0]
                cut = key.find(delimiter, len(prefix)) if delimiter else -1
                if cut >= 0:
                    common = key[: cut + len(delimiter)]
                    if len(entries) + len(prefixes) >= max_keys:
                        return VersionPage(entries, prefixes, True, *last)
                    if not (key_marker and common <= key_marker):
                        prefixes.append(common)
                        last = (common, None)
                    successor = key_successor(common)
                    if successor is None or (upper is not None and successor >= upper):
                        return VersionPage(entries, prefixes, False, None, None)
                    start, inside, sought = (successor, "from", 0), None, True
                    break
                if len(entries) + len(prefixes) >= max_keys:
                    return VersionPage(entries, prefixes, True, *last)
                _, is_current, version_id, size, etag, modified, storage_class, _seq, marker = row
                entries.append(
                    VersionEntry(
                        key,
                        version_id,
                        is_current or inside != key,
                        bool(marker),
                        modified,
                        size,
                        etag,
                        storage_class,
                    )
                )
                inside = key
                last = (key, version_id)
                start = position
            if not sought:
                if seen == 0:
                    return VersionPage(entries, prefixes, False, None, None)
                batch = min(batch * 2, max_keys + 1)

    def _merged_versions(
        self, db: Conn, bucket: str, start: tuple[str, str, int], upper: str | None, limit: int
    ) -> Iterator[tuple[tuple[Any, ...], tuple[str, str, int]]]:
        """Rows (key, is_current, version_id, size, etag, last_modified, storage_class, seq,
        marker) from `start` on in listing order, each with the position just after it; at most
        `limit` from each table, and none past where either fetched batch ran out."""
        key, mode, seq = start
        bound = " AND key < ?" if upper is not None else ""
        extra: list[Any] = [upper] if upper is not None else []
        op = ">=" if mode == "from" else ">"
        currents: list[tuple[Any, ...]] = db.execute(
            f"SELECT key, version_id, size, etag, last_modified, storage_class FROM objects "
            f"WHERE bucket = ? AND key {op} ?{bound} ORDER BY key LIMIT ?",
            [bucket, key, *extra, limit],
        ).fetchall()
        columns = "key, version_id, size, etag, last_modified, storage_class, seq, marker"
        olders: list[tuple[Any, ...]] = []
        if mode in ("current-done", "seq"):
            olders = db.execute(
                f"SELECT {columns} FROM object_versions WHERE bucket = ? AND key = ?"
                f"{' AND seq < ?' if mode == 'seq' else ''} ORDER BY seq DESC LIMIT ?",
                [bucket, key, *([seq] if mode == "seq" else []), limit],
            ).fetchall()
        if len(olders) < limit:
            olders += db.execute(
                f"SELECT {columns} FROM object_versions WHERE bucket = ? AND key {op} ?{bound} "
                "ORDER BY key, seq DESC LIMIT ?",
                [bucket, key, *extra, limit - len(olders)],
            ).fetchall()
        full_currents = len(currents) >= limit
        full_olders = len(olders) >= limit
        i = j = 0
        while i < len(currents) or j < len(olders):
            if j >= len(olders) and full_olders or i >= len(currents) and full_currents:
                return  # past what one of the batches covers: the caller fetches again
            if j >= len(olders) or (i < len(currents) and currents[i][0] <= olders[j][0]):
                k, version_id, size, etag, modified, storage_class = currents[i]
                i += 1
                yield (k, True, version_id, size, etag, modified, storage_class, 0, 0), (k, "current-done", 0)
            else:
                k, version_id, size, etag, modified, storage_class, s, marker = olders[j]
                j += 1
                yield (
                    (k, False, version_id, size, etag, modified, storage_class, s, marker),
                    (k, "seq", int(s)),
                )

    # --- lifecycle: noncurrent versions ---------------------------------------------------------

    def noncurrent_versions(
        self, bucket: str, after: tuple[str, int] | None, limit: int
    ) -> tuple[list[NoncurrentVersion], tuple[str, int] | None]:
        """A bucket's noncurrent versions (markers skipped) in (key, newest first) order after
        `after` = (key, seq): lifecycle's cursor over them. Returns them and the next cursor (None
        at the end). One ordered index scan; the count of newer noncurrent versions is carried
        along the key's rows (one COUNT for a key the previous batch began)."""
        db = self._reader()
        if after is None:
            rows = db.execute(
                f"SELECT {_VERSION_SELECT} FROM object_versions WHERE bucket = ? ORDER BY key, seq DESC LIMIT ?",
                (bucket, limit),
            ).fetchall()
        else:
            key, seq = after
            rows = db.execute(
                f"SELECT {_VERSION_SELECT} FROM object_versions WHERE bucket = ? AND key = ? AND seq < ? "
                "ORDER BY seq DESC LIMIT ?",
                (bucket, key, seq, limit),
            ).fetchall()
            if len(rows) < limit:
                rows += db.execute(
                    f"SELECT {_VERSION_SELECT} FROM object_versions WHERE bucket = ? AND key > ? "
                    "ORDER BY key, seq DESC LIMIT ?",
                    (bucket, key, limit - len(rows)),
                ).fetchall()
        found: list[NoncurrentVersion] = []
        newer: dict[str, int] = {}
        for row in rows:
            key = row[1]
            if key not in newer:
                newer[key] = 0
                if after is not None and key == after[0]:
                    newer[key] = int(
                        db.execute(
                            "SELECT COUNT(*) FROM object_versions WHERE bucket = ? AND key = ? AND seq >= ? "
                            "AND marker = 0",
                            (bucket, key, after[1]),
                        ).fetchone()[0]
                    )
            if row[19]:
                continue
            found.append(
                NoncurrentVersion(self._object_from_row(row[:18]), float(row[20]), newer[key], int(row[18]))
            )
            newer[key] += 1
        cursor = (rows[-1][1], int(rows[-1][18])) if len(rows) >= limit else None
        return found, cursor

    def lone_delete_markers(
        self, bucket: str, after: str, limit: int
    ) -> tuple[list[tuple[str, str]], str | None]:
        """(key, version id) of current delete markers with no other version left (what
        ExpiredObjectDeleteMarker removes) among up to `limit` markers of keys after `after`;
        and the key to go on after (None at the end)."""
        db = self._reader()
        rows = db.execute(
            "SELECT key, version_id FROM object_versions WHERE bucket = ? AND key > ? AND marker = 1 "
            "ORDER BY key LIMIT ?",
            (bucket, after, limit),
        ).fetchall()
        lone: list[tuple[str, str]] = []
        for key, version_id in rows:
            others = db.execute(
                "SELECT COUNT(*) FROM object_versions WHERE bucket = ? AND key = ?", (bucket, key)
            ).fetchone()[0]
            current = db.execute(
                "SELECT 1 FROM objects WHERE bucket = ? AND key = ?", (bucket, key)
            ).fetchone()
            if others == 1 and current is None:
                lone.append((key, version_id))
        return lone, (rows[-1][0] if len(rows) >= limit else None)

    @transaction
    def move_version(
        self,
        bucket: str,
        key: str,
        version_id: str,
        *,
        expected_generation: int,
        tier: str,
        segments: tuple[Segment, ...],
        storage_class: str,
        now: float,
        reason: str = "noncurrent version",
    ) -> ObjectRecord:
        """Point a noncurrent version at its copy on another tier (compare-and-swap on its
        generation, like the current version's move); the old data is retired."""
        with self._write() as db:
            found = self._version_row(db, bucket, key, version_id)
            if found is None or found[19] or found[2] != expected_generation:
                raise PreconditionFailed("generation")
            current = self._object_from_row(found[:18])
            keep = {s.stored.data_id for s in segments}
            self._retire(
                db, current.tier, [s.stored for s in current.segments if s.stored.data_id not in keep]
            )
            restore = current.restore
            if restore is not None and tier != "cold":
                # Out of the archive for good: the restored copy has no job left (as commit_move).
                self._retire(db, restore.tier, [s.stored for s in restore.segments])
                restore = None
            self._claim_blobs(db, tier, bucket, key, segments)
            db.executemany(
                "UPDATE blobs SET version_id = ? WHERE data_id = ?",
                [(version_id, s.stored.data_id) for s in segments],
            )
            generation = self._next_generation(db)
            meta = json.loads(found[7])
            meta["sc"] = storage_class
            db.execute(
                "UPDATE object_versions SET tier = ?, segments = ?, meta = ?, storage_class = ?, tier_since = ?, "
                "restore = ?, generation = ? WHERE bucket = ? AND key = ? AND version_id = ?",
                (
                    tier,
                    _dumps([s.to_json() for s in segments]),
                    _dumps(meta),
                    storage_class,
                    now,
                    _dumps(restore.to_json()) if restore else None,
                    generation,
                    bucket,
                    key,
                    version_id,
                ),
            )
            self._db_move_history(db, bucket, key, now, current.tier, tier, current.size, reason)
        return dataclasses.replace(
            current, tier=tier, segments=segments, generation=generation, tier_since=now, restore=restore
        )

    @staticmethod
    def _db_move_history(
        db: Conn, bucket: str, key: str, at: float, from_tier: str, to_tier: str, size: int, reason: str
    ) -> None:
        db.execute(
            "INSERT INTO moves (bucket, key, at, from_tier, to_tier, size, reason) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (bucket, key, at, from_tier, to_tier, size, reason),
        )
