"""Buckets and their configuration documents (lifecycle, CORS, intelligent-tiering...)."""

from __future__ import annotations

import time
from typing import Any

from tiering.catalog.base import (
    CatalogBase,
    key_successor,
)
from tiering.catalog.database import transaction
from tiering.errors import (
    BucketAlreadyExists,
    BucketNotEmpty,
    BucketNotFound,
)
from tiering.records import (
    BucketRecord,
)


class BucketsCatalog(CatalogBase):
    @transaction
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
        row = (
            self._reader()
            .execute("SELECT name, created, owner, region FROM buckets WHERE name = ?", (name,))
            .fetchone()
        )
        if row is None:
            raise BucketNotFound(name)
        return BucketRecord(*row)

    def list_buckets(
        self,
        owner: str | None = None,
        *,
        prefix: str = "",
        after: str = "",
        region: str | None = None,
        limit: int | None = None,
    ) -> list[BucketRecord]:
        """Buckets in name order: `owner`'s (None: all), named with `prefix` and after `after`,
        in `region` if given, at most `limit` (ListBuckets' paging: an index range scan)."""
        conditions: list[str] = []
        args: list[Any] = []
        if owner is not None:
            conditions.append("owner = ?")
            args.append(owner)
        if prefix:
            conditions.append("name >= ?")
            args.append(prefix)
        if after:
            conditions.append("name > ?")
            args.append(after)
        if region is not None:
            conditions.append("region = ?")
            args.append(region)
        sql = "SELECT name, created, owner, region FROM buckets"
        if conditions:
            sql += " WHERE " + " AND ".join(conditions)
        sql += " ORDER BY name"
        rows = (BucketRecord(*row) for row in self._reader().execute(sql, args))
        found: list[BucketRecord] = []
        for bucket in rows:
            if not bucket.name.startswith(prefix):
                break  # past the prefix's range (names sort after it from here on)
            found.append(bucket)
            if limit is not None and len(found) >= limit:
                break
        return found

    @transaction
    def delete_bucket(self, name: str) -> None:
        # Relaxed (READ COMMITTED on PostgreSQL), the bucket's row locked first: writers into the
        # bucket hold a key-share lock on it (commit_object runs with snapshot isolation, not
        # SERIALIZABLE), so this waits for them, and the emptiness check below, a new statement,
        # sees what they committed.
        with self._write(relaxed=True) as db:
            if (
                db.execute(f"SELECT 1 FROM buckets WHERE name = ?{self._db.for_update}", (name,)).fetchone()
                is None
            ):
                raise BucketNotFound(name)
            if db.execute("SELECT 1 FROM objects WHERE bucket = ? LIMIT 1", (name,)).fetchone():
                raise BucketNotEmpty(name)
            # Noncurrent versions and delete markers keep a bucket too, as on S3.
            if db.execute("SELECT 1 FROM object_versions WHERE bucket = ? LIMIT 1", (name,)).fetchone():
                raise BucketNotEmpty(name)
            # Unfinished uploads go with the bucket (AWS refuses only for objects).
            self._drop_uploads(db, "bucket = ?", (name,))
            db.execute("DELETE FROM bucket_config WHERE bucket = ?", (name,))
            db.execute("DELETE FROM tier_usage WHERE bucket = ?", (name,))  # all zero: it holds no objects
            db.execute("DELETE FROM buckets WHERE name = ?", (name,))

    @transaction
    def put_bucket_config(self, bucket: str, name: str, value: str | None) -> None:
        with self._write() as db:
            if (
                db.execute(f"SELECT 1 FROM buckets WHERE name = ?{self._db.key_share}", (bucket,)).fetchone()
                is None
            ):
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
        row = (
            self._reader()
            .execute("SELECT value FROM bucket_config WHERE bucket = ? AND name = ?", (bucket, name))
            .fetchone()
        )
        return row[0] if row else None
