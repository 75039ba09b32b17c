"""What every concern of the catalog shares: constants, row encodings, and the base class that
holds the database and the helpers several modules use inside their transactions (generation,
blob ownership, retiring data).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from tiering.backend import StoredData
from tiering.catalog.database import Conn, Cursor, Database
from tiering.catalog.rows import dumps, loads, object_from_row, standard_dumps
from tiering.errors import PreconditionFailed
from tiering.records import (
    BucketRecord,
    ListEntry,
    ObjectRecord,
    Segment,
    UploadRecord,
)

_T = TypeVar("_T")

OBJECT_COLUMNS = (
    "bucket, key, generation, size, etag, last_modified, tier, meta, tags, "
    "checksum_algorithm, checksum, segments, heat, heat_at, last_access, tier_since, restore, version_id"
)
OBJECT_PLACEHOLDERS = ",".join("?" * 18)
# What a listing shows of each key: plain columns, no JSON to decode (listing is a hot path).
LIST_COLUMNS = "key, size, etag, last_modified, storage_class, checksum_algorithm"
EMPTY_ETAG = "d41d8cd98f00b204e9800998ecf8427e"  # MD5 of no bytes: the ETag of every zero-byte object

ARCHIVE_STATUS = "x-amz-archive-status"

# How long retired data stays on disk: a GET that looked the object up just before an overwrite
# still opens the old blob within this window (an opened blob survives deletion).
# TIERSTORE_RETIRE_GRACE_SECONDS overrides it (tests that wait for the collector shorten it).
RETIRE_GRACE_SECONDS = float(os.environ.get("TIERSTORE_RETIRE_GRACE_SECONDS", "30"))


# A catalog column's JSON text (a PUT's row columns take `rows.dumps`, orjson).
_dumps = standard_dumps


# A stored JSON column decoded (orjson, the standard library for what orjson refuses): compiled.
_loads = loads


def _stored_to_json(stored: StoredData) -> str:
    return dumps({"id": stored.data_id, "size": stored.size, "loc": stored.location})


def _stored_from_json(raw: str) -> StoredData:
    value = _loads(raw)
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
    db: Conn, bucket: str, lower: str, inclusive: bool, upper: str | None, limit: int
) -> Cursor:
    """Up to `limit` listing rows (LIST_COLUMNS) of `bucket` from `lower` on, below `upper`, in key order."""
    sql = f"SELECT {LIST_COLUMNS} FROM objects WHERE bucket = ? AND key {'>=' if inclusive else '>'} ?"
    args: list[Any] = [bucket, lower]
    if upper is not None:
        sql += " AND key < ?"
        args.append(upper)
    return db.execute(sql + " ORDER BY key LIMIT ?", [*args, limit])


class CatalogBase:
    """The database and the helpers shared by the catalog's modules (each one a mixin of `Catalog`)."""

    _db: Database

    if TYPE_CHECKING:
        # Defined by one concern's module and used by others (all are mixins of `Catalog`).
        def get_bucket(self, name: str) -> BucketRecord: ...  # buckets.py
        def _commit_object_in(  # objects.py
            self,
            db: Conn,
            record: ObjectRecord,
            if_match: str | None,
            if_none_match: str | None,
            expected_generation: int | None,
        ) -> ObjectRecord: ...
        @staticmethod
        def _upload_from_row(row: tuple[Any, ...]) -> UploadRecord: ...  # uploads.py
        def _drop_uploads(self, db: Conn, where: str, args: tuple[Any, ...]) -> None: ...  # uploads.py

    @property
    def batches_writes(self) -> bool:
        """Does `commit_objects` share one transaction and flush among its records? (SQLite)"""
        return self._db.batches_writes

    def listing_stamp(self) -> int | None:
        """See Database.listing_stamp: differs once what a listing shows changed (None: unknown)."""
        return self._db.listing_stamp()

    def _reader(self) -> Any:
        """This thread's connection for reads (a sqlite3.Connection on SQLite)."""
        return self._db.reader()

    def _write(self, *, relaxed: bool = False, snapshot: bool = False) -> AbstractContextManager[Conn]:
        return self._db.write(relaxed=relaxed, snapshot=snapshot)

    def _write_combined(self, fn: Callable[[Any], _T], *, snapshot: bool = False) -> _T:
        return self._db.write_combined(fn, snapshot=snapshot)

    # The record of a row of OBJECT_COLUMNS: compiled (tiering/catalog/rows.py), as every GET runs it.
    _object_from_row = staticmethod(object_from_row)

    def _next_generation(self, db: Conn) -> int:
        """The next value of the catalog-wide generation counter (inside the caller's transaction).

        An object's generation is the compare-and-swap token of movers, the restriper and the
        expiry (`expected_generation`): it must never take a value it had before, or a mover that
        copied an older object could commit its copy over a newer one of the same key.
        """
        return self._db.next_generation(db)

    def _current_if(self, db: Conn, bucket: str, key: str, expected_generation: int) -> ObjectRecord:
        """The object as it is now, if it is still the version a mover looked at (the CAS check)."""
        row = db.execute(
            f"SELECT {OBJECT_COLUMNS} FROM objects WHERE bucket = ? AND key = ?", (bucket, key)
        ).fetchone()
        current = self._object_from_row(row) if row else None
        if current is None or current.generation != expected_generation:
            raise PreconditionFailed("generation")
        return current

    @staticmethod
    def _claim_blobs(db: Conn, tier: str, bucket: str, key: str, segments: tuple[Segment, ...]) -> None:
        """Record that these blobs now belong to bucket/key on `tier` (the `blobs` index)."""
        db.executemany(
            "INSERT INTO blobs (data_id, tier, bucket, key, upload_id) VALUES (?, ?, ?, ?, NULL) "
            "ON CONFLICT (data_id) DO UPDATE SET tier = excluded.tier, bucket = excluded.bucket, key = excluded.key, "
            "upload_id = NULL, version_id = NULL",
            [(seg.stored.data_id, tier, bucket, key) for seg in segments],
        )

    def _retire(self, db: Conn, tier: str, stored: list[StoredData]) -> None:
        due = time.time() + RETIRE_GRACE_SECONDS
        db.executemany("DELETE FROM blobs WHERE data_id = ?", [(s.data_id,) for s in stored])
        db.executemany(
            "INSERT INTO garbage (data_id, tier, stored, not_before) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (data_id) DO NOTHING",
            [(s.data_id, tier, _stored_to_json(s), due) for s in stored],
        )

    def _retire_object_row(self, db: Conn, bucket: str, key: str) -> ObjectRecord | None:
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
