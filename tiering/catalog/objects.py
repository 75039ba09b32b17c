"""Objects: the visible version of each key, its conditional commit, metadata and tags; usage counters."""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from collections.abc import Iterable, Sequence
from typing import Any

from mypy_extensions import mypyc_attr

from tiering.catalog.base import (
    EMPTY_ETAG,
    OBJECT_COLUMNS,
    OBJECT_PLACEHOLDERS,
    _dumps,
)
from tiering.catalog.database import Conn, transaction
from tiering.catalog.rows import dumps
from tiering.catalog.versions import ENABLED, NULL, VERSIONING_CONFIG, VersionsCatalog, new_version_id
from tiering.conditions import DeleteCondition, write_condition
from tiering.errors import (
    BucketNotFound,
    ObjectNotFound,
    PreconditionFailed,
)
from tiering.heat import bump
from tiering.object_lock import with_default
from tiering.records import (
    ObjectMeta,
    ObjectRecord,
)


# Compiled in the compiled build (setup.py); the Catalog that mixes it in is not.
@mypyc_attr(allow_interpreted_subclasses=True)
class ObjectsCatalog(VersionsCatalog):
    def get_object(self, bucket: str, key: str) -> ObjectRecord:
        row = (
            self._reader()
            .execute(f"SELECT {OBJECT_COLUMNS} FROM objects WHERE bucket = ? AND key = ?", (bucket, key))
            .fetchone()
        )
        if row is None:
            # Tell a missing bucket from a missing key (NoSuchBucket vs NoSuchKey).
            self.get_bucket(bucket)
            raise ObjectNotFound(bucket, key)
        return self._object_from_row(row)

    @transaction
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
        # Snapshot isolation on PostgreSQL (see Database.write): the commit writes the one object
        # row it decided on (a concurrent change to it fails the commit, which runs again) and
        # key-share-locks its bucket; SERIALIZABLE's page-level predicate locks made concurrent
        # PUTs of neighbouring keys fail each other most of the time.
        return self._write_combined(
            lambda db: self._commit_object_in(db, record, if_match, if_none_match, expected_generation),
            snapshot=True,
        )

    def commit_objects(
        self, items: Sequence[tuple[ObjectRecord, str | None, str | None]]
    ) -> list[ObjectRecord | BaseException]:
        """`commit_object(record, if_match=, if_none_match=)` for several records at once, sharing
        one transaction and one flush where the database can (`Database.batches_writes`); each
        commits or fails on its own. Per record: what `commit_object` returns, or its error."""
        done = self._db.write_batch(
            [
                functools.partial(self._commit_object_in, record=record, if_match=m, if_none_match=n)
                for record, m, n in items
            ]
        )
        return [result if error is None else error for result, error in done]

    def _commit_object_in(
        self,
        db: Conn,
        record: ObjectRecord,
        if_match: str | None,
        if_none_match: str | None,
        expected_generation: int | None = None,
    ) -> ObjectRecord:
        # The bucket and its versioning state in one statement: each statement lets go of the GIL
        # and waits to get it back from the busy event loop (the small PUTs' committer runs this).
        bucket = db.execute(
            "SELECT (SELECT value FROM bucket_config WHERE bucket = buckets.name AND name = ?) "
            f"FROM buckets WHERE name = ?{self._db.key_share}",
            (VERSIONING_CONFIG, record.bucket),
        ).fetchone()
        if bucket is None:
            raise BucketNotFound(record.bucket)
        # The current row is locked as it is read: a concurrent writer of the key that committed
        # since this transaction's snapshot then fails it here with a serialization failure (run
        # again), not later, when demoting the same current version into object_versions, with a
        # unique violation that nothing retries (a 500 on PostgreSQL for concurrent PUTs of one
        # versioned key).
        row = db.execute(
            f"SELECT {OBJECT_COLUMNS} FROM objects WHERE bucket = ? AND key = ?{self._db.for_update}",
            (record.bucket, record.key),
        ).fetchone()
        current = self._object_from_row(row) if row else None
        # The conditional write's check, in the transaction that writes the row (tiering/conditions.py).
        write_condition(if_match, if_none_match).check(record.bucket, record.key, current)
        if expected_generation is not None and (current is None or current.generation != expected_generation):
            raise PreconditionFailed("generation")
        generation = self._next_generation(db)
        now = record.last_modified
        # A write is an access: the new version inherits the key's heat, bumped.
        heat = bump(current.heat, current.heat_at, now) if current else 1.0
        # Versioning (versions.py): the old current version may stay, as a noncurrent one.
        state = bucket[0] or ""  # as `_versioning_in` reads it
        version_id = new_version_id() if state == ENABLED else NULL
        if state == ENABLED:
            # Object Lock: a version that names no retention gets the bucket's default one.
            lock = with_default(record.meta.lock, self._lock_config_in(db, record.bucket), now)
            if lock != record.meta.lock:
                record = dataclasses.replace(record, meta=dataclasses.replace(record.meta, lock=lock))
        if self._make_room(db, state, record.bucket, record.key, current, now) and current is not None:
            keep = {s.stored.data_id for s in record.segments}
            self._retire(
                db, current.tier, [s.stored for s in current.segments if s.stored.data_id not in keep]
            )
            if current.restore is not None:
                self._retire(db, current.restore.tier, [s.stored for s in current.restore.segments])
        self._claim_blobs(db, record.tier, record.bucket, record.key, record.segments)
        db.execute(
            self._db.upsert_object_sql(f"{OBJECT_COLUMNS}, storage_class", f"{OBJECT_PLACEHOLDERS}, ?"),
            (
                record.bucket,
                record.key,
                generation,
                record.size,
                record.etag,
                record.last_modified,
                record.tier,
                dumps(record.meta.to_json()),
                dumps(record.meta.tags),
                record.checksum_algorithm,
                record.checksum,
                dumps([s.to_json() for s in record.segments]),
                heat,
                now,
                now,
                now,
                None,
                version_id,
                record.meta.storage_class,
            ),
        )
        return record.committed(version_id, generation, heat, now)

    @transaction
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
        return dataclasses.replace(current, meta=meta, last_modified=now, generation=generation)

    @transaction
    def put_tags(self, bucket: str, key: str, tags: dict[str, str]) -> None:
        with self._write() as db:
            cur = db.execute(
                "UPDATE objects SET tags = ? WHERE bucket = ? AND key = ?", (_dumps(tags), bucket, key)
            )
            if cur.rowcount == 0:
                if (
                    db.execute(
                        f"SELECT 1 FROM buckets WHERE name = ?{self._db.key_share}", (bucket,)
                    ).fetchone()
                    is None
                ):
                    raise BucketNotFound(bucket)
                raise ObjectNotFound(bucket, key)

    @transaction
    def put_object_acl(self, bucket: str, key: str, acl: str) -> None:
        """Replace an object's ACL (PutObjectAcl): its data, dates and generation stay as they are."""
        with self._write() as db:
            row = db.execute(
                "SELECT meta FROM objects WHERE bucket = ? AND key = ?", (bucket, key)
            ).fetchone()
            if row is None:
                if (
                    db.execute(
                        f"SELECT 1 FROM buckets WHERE name = ?{self._db.key_share}", (bucket,)
                    ).fetchone()
                    is None
                ):
                    raise BucketNotFound(bucket)
                raise ObjectNotFound(bucket, key)
            meta = json.loads(row[0])
            meta["acl"] = acl
            db.execute(
                "UPDATE objects SET meta = ? WHERE bucket = ? AND key = ?", (_dumps(meta), bucket, key)
            )

    @transaction
    def set_encryption(self, bucket: str, key: str, generation: int, encryption: dict[str, Any]) -> bool:
        """Replace an object's encryption descriptor (a master-key rotation re-wrapping its data
        key); False if the object changed meanwhile. The generation stays: data and location are
        untouched, and a mover's commit re-reads the metadata inside its own transaction."""
        with self._write() as db:
            row = db.execute(
                "SELECT meta FROM objects WHERE bucket = ? AND key = ? AND generation = ?",
                (bucket, key, generation),
            ).fetchone()
            if row is None:
                return False
            meta = json.loads(row[0])
            meta["enc"] = encryption
            db.execute(
                "UPDATE objects SET meta = ? WHERE bucket = ? AND key = ? AND generation = ?",
                (_dumps(meta), bucket, key, generation),
            )
        return True

    @transaction
    def delete_object(
        self,
        bucket: str,
        key: str,
        *,
        expected_generation: int | None = None,
        condition: DeleteCondition | None = None,
        now: float | None = None,
    ) -> ObjectRecord | None:
        """DeleteObject without a version id: the visible object goes (in a versioned bucket,
        behind a new delete marker: versions.py). Returns the object that was visible, None if
        none was or (with `expected_generation`) it changed since the caller looked.
        `condition`: S3's conditional delete, checked in the same transaction (PreconditionFailed
        / ObjectNotFound when it does not hold)."""
        outcome = self.delete_object_version(
            bucket, key, expected_generation=expected_generation, condition=condition, now=now
        )
        return outcome.previous if outcome is not None else None

    def count_objects(self, bucket: str | None = None) -> tuple[int, int]:
        sql = "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM objects"
        args: tuple[Any, ...] = ()
        if bucket is not None:
            sql += " WHERE bucket = ?"
            args = (bucket,)
        count, size = self._reader().execute(sql, args).fetchone()
        return int(count), int(size)

    @transaction
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
            if (
                db.execute(f"SELECT 1 FROM buckets WHERE name = ?{self._db.key_share}", (bucket,)).fetchone()
                is None
            ):
                raise BucketNotFound(bucket)
            # A new object's row as commit_object writes it: a fresh generation, heat 1 (one write).
            # One generation serves the whole batch: it only has to be new for each key.
            generation = self._next_generation(db)
            # Existing keys are filtered out, not left to ON CONFLICT DO NOTHING: the usage
            # counters' BEFORE INSERT trigger would fire for them (USAGE_SCHEMA).
            cursor = db.executemany(
                f"INSERT INTO objects ({OBJECT_COLUMNS}, storage_class) SELECT {OBJECT_PLACEHOLDERS}, ? "
                "WHERE NOT EXISTS (SELECT 1 FROM objects WHERE bucket = ? AND key = ?)",
                (
                    (
                        bucket,
                        key,
                        generation,
                        0,
                        EMPTY_ETAG,
                        now,
                        tier,
                        meta_json,
                        tags_json,
                        None,
                        None,
                        "[]",
                        1.0,
                        now,
                        now,
                        now,
                        None,
                        NULL,
                        meta.storage_class,
                        bucket,
                        key,
                    )
                    for key in keys
                ),
            )
            return cursor.rowcount

    def tier_usage(self) -> dict[str, tuple[int, int]]:
        """(objects, bytes) per tier that holds any (from the usage counters: no scan)."""
        rows = self._reader().execute(
            "SELECT tier, SUM(objects), SUM(bytes) FROM tier_usage GROUP BY tier HAVING SUM(objects) > 0"
        )
        return {tier: (int(n), int(size)) for tier, n, size in rows}

    def bucket_tier_usage(self) -> dict[tuple[str, str], tuple[int, int]]:
        """(objects, bytes) per (bucket, tier) that holds any (from the usage counters: no scan)."""
        # Summed: PostgreSQL keeps a (bucket, tier)'s count in several rows (schema.py, USAGE_SLOTS).
        rows = self._reader().execute(
            "SELECT bucket, tier, SUM(objects), SUM(bytes) FROM tier_usage GROUP BY bucket, tier HAVING SUM(objects) > 0"
        )
        return {(bucket, tier): (int(n), int(size)) for bucket, tier, n, size in rows}
