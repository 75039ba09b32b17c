"""Multipart uploads and their parts; completions remembered for re-sent CompleteMultipartUpload."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

from tiering.catalog.base import (
    OBJECT_COLUMNS,
    CatalogBase,
    _dumps,
    _stored_from_json,
    _stored_to_json,
    key_successor,
)
from tiering.catalog.database import Conn, transaction
from tiering.errors import (
    BucketNotFound,
    UploadNotFound,
)
from tiering.records import (
    ObjectMeta,
    ObjectRecord,
    PartRecord,
    UploadRecord,
)


class UploadsCatalog(CatalogBase):
    @transaction
    def create_upload(self, upload: UploadRecord) -> None:
        with self._write() as db:
            if (
                db.execute(
                    f"SELECT 1 FROM buckets WHERE name = ?{self._db.key_share}", (upload.bucket,)
                ).fetchone()
                is None
            ):
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
            upload_id,
            bucket,
            key,
            initiated,
            tier,
            ObjectMeta.from_json(json.loads(meta), json.loads(tags)),
            algo,
            owner,
            checksum_type,
        )

    def get_upload(self, bucket: str, key: str, upload_id: str) -> UploadRecord:
        row = (
            self._reader()
            .execute(
                "SELECT upload_id, bucket, key, initiated, tier, meta, tags, checksum_algorithm, owner, checksum_type "
                "FROM uploads WHERE upload_id = ?",
                (upload_id,),
            )
            .fetchone()
        )
        if row is None or row[1] != bucket or row[2] != key:
            self.get_bucket(bucket)
            raise UploadNotFound(upload_id)
        return self._upload_from_row(row)

    def list_uploads(
        self,
        bucket: str,
        *,
        prefix: str = "",
        key_marker: str = "",
        upload_id_marker: str = "",
        limit: int = 1000,
    ) -> list[UploadRecord]:
        self.get_bucket(bucket)
        sql = (
            "SELECT upload_id, bucket, key, initiated, tier, meta, tags, checksum_algorithm, owner, checksum_type "
            "FROM uploads WHERE bucket = ? AND key >= ?"
        )
        # The index is sought to the later of the prefix and the marker: with only the prefix as
        # its lower bound, a page after a marker read every upload between the two first (a
        # marker's page deep into a bucket cost as much as all the pages before it). Code-point
        # order is UTF-8 byte order, the column's.
        args: list[Any] = [bucket, max(prefix, key_marker)]
        upper = key_successor(prefix) if prefix else None
        if upper is not None:
            sql += " AND key < ?"
            args.append(upper)
        if key_marker:
            if upload_id_marker:
                sql += " AND (key, upload_id) > (?, ?)"
                args += [key_marker, upload_id_marker]
            else:
                sql += " AND key > ?"
                args.append(key_marker)
        sql += " ORDER BY key, upload_id LIMIT ?"
        args.append(limit)
        return [self._upload_from_row(row) for row in self._reader().execute(sql, args)]

    @transaction
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
                "INSERT INTO blobs (data_id, tier, bucket, key, upload_id) VALUES (?, ?, NULL, NULL, ?) "
                "ON CONFLICT (data_id) DO UPDATE SET tier = excluded.tier, bucket = NULL, key = NULL, "
                "upload_id = excluded.upload_id",
                (part.stored.data_id, upload[0], upload_id),
            )
            db.execute(
                "INSERT INTO parts (upload_id, part_number, size, etag, last_modified, stored, checksum) "
                "VALUES (?,?,?,?,?,?,?) ON CONFLICT (upload_id, part_number) DO UPDATE SET size = excluded.size, "
                "etag = excluded.etag, last_modified = excluded.last_modified, stored = excluded.stored, "
                "checksum = excluded.checksum",
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
        return [
            PartRecord(pn, size, etag, mtime, _stored_from_json(st), ck)
            for pn, size, etag, mtime, st, ck in rows
        ]

    @transaction
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
            if (
                db.execute("SELECT 1 FROM uploads WHERE upload_id = ?", (upload.upload_id,)).fetchone()
                is None
            ):
                raise UploadNotFound(upload.upload_id)
            parts = [
                _stored_from_json(raw)
                for (raw,) in db.execute("SELECT stored FROM parts WHERE upload_id = ?", (upload.upload_id,))
            ]
            # The parts' locations as they are now: the rebalancer may have moved a part's shards
            # since the caller listed them (relocate_blob_if), and the old files are being retired.
            current = {stored.data_id: stored for stored in parts}
            record = dataclasses.replace(
                record,
                segments=tuple(
                    dataclasses.replace(s, stored=current.get(s.stored.data_id, s.stored))
                    for s in record.segments
                ),
            )
            committed = self._commit_object_in(db, record, if_match, if_none_match, None)
            used = {s.stored.data_id for s in record.segments}
            unused = [stored for stored in parts if stored.data_id not in used]
            self._retire(db, upload.tier, unused)
            db.execute("DELETE FROM parts WHERE upload_id = ?", (upload.upload_id,))
            db.execute("DELETE FROM uploads WHERE upload_id = ?", (upload.upload_id,))
            db.execute(
                "INSERT INTO completed_uploads (upload_id, bucket, key, parts, etag, last_modified, completed) "
                "VALUES (?,?,?,?,?,?,?) ON CONFLICT (upload_id) DO UPDATE SET bucket = excluded.bucket, "
                "key = excluded.key, parts = excluded.parts, etag = excluded.etag, "
                "last_modified = excluded.last_modified, completed = excluded.completed",
                (
                    upload.upload_id,
                    upload.bucket,
                    upload.key,
                    _dumps(requested or []),
                    committed.etag,
                    committed.last_modified,
                    time.time(),
                ),
            )
        return committed

    def completed_upload(
        self, bucket: str, key: str, upload_id: str, requested: list[tuple[int, str]]
    ) -> ObjectRecord | None:
        """The object an upload made, if it completed lately with these parts and that object is
        still the current one (same ETag and time: a move keeps both, an overwrite changes them)."""
        db = self._reader()
        row = db.execute(
            "SELECT bucket, key, parts, etag, last_modified FROM completed_uploads WHERE upload_id = ?",
            (upload_id,),
        ).fetchone()
        if (
            row is None
            or (row[0], row[1]) != (bucket, key)
            or json.loads(row[2]) != json.loads(_dumps(requested))
        ):
            return None
        current = db.execute(
            f"SELECT {OBJECT_COLUMNS} FROM objects WHERE bucket = ? AND key = ?", (bucket, key)
        )
        found = current.fetchone()
        if found is None:
            return None
        record = self._object_from_row(found)
        return record if (record.etag, record.last_modified) == (row[3], row[4]) else None

    @transaction
    def forget_completed_uploads(self, before: float) -> int:
        """Drop the memory of uploads completed before `before` (wall clock); how many went."""
        if (
            self._reader()
            .execute("SELECT 1 FROM completed_uploads WHERE completed < ? LIMIT 1", (before,))
            .fetchone()
        ):
            with self._write() as db:
                return db.execute("DELETE FROM completed_uploads WHERE completed < ?", (before,)).rowcount
        return 0

    @transaction
    def abort_upload(self, bucket: str, key: str, upload_id: str) -> None:
        with self._write() as db:
            row = db.execute("SELECT bucket, key FROM uploads WHERE upload_id = ?", (upload_id,)).fetchone()
            if row is None or row[0] != bucket or row[1] != key:
                raise UploadNotFound(upload_id)
            self._drop_uploads(db, "upload_id = ?", (upload_id,))

    def _drop_uploads(self, db: Conn, where: str, args: tuple[Any, ...]) -> None:
        for upload_id, tier in db.execute(
            f"SELECT upload_id, tier FROM uploads WHERE {where}", args
        ).fetchall():
            stored = [
                _stored_from_json(st)
                for (st,) in db.execute("SELECT stored FROM parts WHERE upload_id = ?", (upload_id,))
            ]
            self._retire(db, tier, stored)
            db.execute("DELETE FROM parts WHERE upload_id = ?", (upload_id,))
            db.execute("DELETE FROM uploads WHERE upload_id = ?", (upload_id,))

    def uploads_after(self, upload_id: str, limit: int) -> list[UploadRecord]:
        """Unfinished uploads of every bucket after a cursor (upload id order)."""
        rows = self._reader().execute(
            "SELECT upload_id, bucket, key, initiated, tier, meta, tags, checksum_algorithm, owner, checksum_type "
            "FROM uploads WHERE upload_id > ? ORDER BY upload_id LIMIT ?",
            (upload_id, limit),
        )
        return [self._upload_from_row(row) for row in rows]

    @transaction
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
