"""Temperature, tier moves and restores (driven by lifecycle through tiering's API), and the daemon's scans."""

from __future__ import annotations

import dataclasses

from tiering.catalog.base import (
    ARCHIVE_STATUS,
    OBJECT_COLUMNS,
    _dumps,
)
from tiering.catalog.database import Conn, transaction
from tiering.catalog.versions import VERSION_RECORD_SELECT, VersionsCatalog
from tiering.errors import PreconditionFailed
from tiering.heat import DEFAULT_HALF_LIFE, decayed
from tiering.records import (
    MoveRecord,
    ObjectRecord,
    RestoreState,
    Segment,
    UploadRecord,
)


class MovesCatalog(VersionsCatalog):
    @transaction
    def record_accesses(
        self, accesses: dict[tuple[str, str, str], tuple[int, float]], half_life: float = DEFAULT_HALF_LIFE
    ) -> None:
        """Fold a batch of reads into heat and last access: one transaction per batch, never per GET.

        Keys are (bucket, key, version id): "" for a read through the key (its current version);
        a read by version id warms that version, the current one or a noncurrent one, so an old
        version's reads neither warm the current one nor are lost.

        On PostgreSQL this one transaction is `relaxed` (READ COMMITTED, each row locked as it is
        read, in key order so that two batches never deadlock): a SERIALIZABLE batch of hundreds
        of rows conflicts with some PUT nearly every time under load, and was starved.
        """
        with self._write(relaxed=True) as db:
            for (bucket, key, version_id), (count, at) in sorted(accesses.items()):
                # Within a key, the current version's row is always locked before a noncurrent one's.
                where = "bucket = ? AND key = ?" + (" AND version_id = ?" if version_id else "")
                params: tuple[str, ...] = (bucket, key, version_id) if version_id else (bucket, key)
                table = "objects"
                row = db.execute(
                    f"SELECT heat, heat_at FROM objects WHERE {where}{self._db.for_update}", params
                ).fetchone()
                if row is None and version_id:
                    table = "object_versions"
                    row = db.execute(
                        f"SELECT heat, heat_at FROM object_versions WHERE {where} AND marker = 0{self._db.for_update}",
                        params,
                    ).fetchone()
                if row is None:
                    continue  # deleted since it was read
                heat = decayed(row[0], row[1], at, half_life) + count
                db.execute(
                    f"UPDATE {table} SET heat = ?, heat_at = ?, last_access = {self._db.greatest}(last_access, ?) "
                    f"WHERE {where}",
                    (heat, at, at, *params),
                )

    @transaction
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
            self._retire(
                db, current.tier, [s.stored for s in current.segments if s.stored.data_id not in keep]
            )
            meta = current.meta
            system = dict(meta.system)
            system.pop(ARCHIVE_STATUS, None)
            if tier == "cold" and meta.storage_class == "INTELLIGENT_TIERING":
                # S3 reports an archived Intelligent-Tiering object by its access tier.
                system[ARCHIVE_STATUS] = (
                    "DEEP_ARCHIVE_ACCESS" if "deep-archive" in reason else "ARCHIVE_ACCESS"
                )
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
                (
                    tier,
                    _dumps([s.to_json() for s in segments]),
                    _dumps(meta.to_json()),
                    meta.storage_class,
                    now,
                    _dumps(restore.to_json()) if restore else None,
                    generation,
                    bucket,
                    key,
                ),
            )
            db.execute(
                "INSERT INTO moves (bucket, key, at, from_tier, to_tier, size, reason) VALUES (?,?,?,?,?,?,?)",
                (bucket, key, now, current.tier, tier, current.size, reason),
            )
        return dataclasses.replace(
            current,
            tier=tier,
            segments=segments,
            meta=meta,
            tier_since=now,
            restore=restore,
            generation=generation,
        )

    @transaction
    def set_restore(
        self,
        bucket: str,
        key: str,
        *,
        expected_generation: int,
        restore: RestoreState | None,
        now: float,
        version_id: str | None = None,
    ) -> ObjectRecord:
        """Record (or clear) the restored copy of an archived object, compare-and-swap like a move.

        `version_id` names the version restored (None: the current one). The restore follows
        the version, not the key: a version demoted to noncurrent since the caller looked keeps
        its generation, and its restore is recorded on its `object_versions` row."""
        with self._write() as db:
            if version_id is not None:
                row = db.execute(
                    "SELECT version_id FROM objects WHERE bucket = ? AND key = ?", (bucket, key)
                ).fetchone()
                if row is None or row[0] != version_id:
                    return self._set_noncurrent_restore(
                        db, bucket, key, version_id, expected_generation, restore, now
                    )
            current = self._current_if(db, bucket, key, expected_generation)
            self._swap_restore_blobs(db, current, restore, now, None)
            generation = self._next_generation(db)
            db.execute(
                "UPDATE objects SET restore = ?, generation = ? WHERE bucket = ? AND key = ?",
                (_dumps(restore.to_json()) if restore else None, generation, bucket, key),
            )
        return dataclasses.replace(current, restore=restore, generation=generation)

    def _set_noncurrent_restore(
        self,
        db: Conn,
        bucket: str,
        key: str,
        version_id: str,
        expected_generation: int,
        restore: RestoreState | None,
        now: float,
    ) -> ObjectRecord:
        found = self._version_row(db, bucket, key, version_id)
        if found is None or found[19] or found[2] != expected_generation:
            raise PreconditionFailed("generation")
        version = self._object_from_row(found[:18])
        self._swap_restore_blobs(db, version, restore, now, version_id)
        generation = self._next_generation(db)
        db.execute(
            "UPDATE object_versions SET restore = ?, generation = ? WHERE bucket = ? AND key = ? AND version_id = ?",
            (_dumps(restore.to_json()) if restore else None, generation, bucket, key, version_id),
        )
        return dataclasses.replace(version, restore=restore, generation=generation)

    def _swap_restore_blobs(
        self,
        db: Conn,
        record: ObjectRecord,
        restore: RestoreState | None,
        now: float,
        version_id: str | None,
    ) -> None:
        """Retire the old restored copy's blobs (those the new state does not keep) and claim the
        new copy's, owned by `version_id` (None: the key's current version)."""
        old = record.restore
        if old is not None:
            keep = {s.stored.data_id for s in restore.segments} if restore else set()
            self._retire(db, old.tier, [s.stored for s in old.segments if s.stored.data_id not in keep])
        if restore is None:
            return
        self._claim_blobs(db, restore.tier, record.bucket, record.key, restore.segments)
        if version_id is not None:
            db.executemany(
                "UPDATE blobs SET version_id = ? WHERE data_id = ?",
                [(version_id, s.stored.data_id) for s in restore.segments],
            )
        if restore.segments and (old is None or not old.segments):
            db.execute(
                "INSERT INTO moves (bucket, key, at, from_tier, to_tier, size, reason) VALUES (?,?,?,?,?,?,?)",
                (record.bucket, record.key, now, record.tier, restore.tier, record.size, "restore"),
            )

    def restored_versions(self, after: tuple[str, str, str], limit: int) -> list[ObjectRecord]:
        """Noncurrent versions with a restore under way or a restored copy, in (bucket, key,
        version id) order after a cursor: the daemon makes and expires their copies. Read through
        a partial index of those rows only (schema.py, version 4)."""
        bucket, key, version_id = after
        rows = self._reader().execute(
            f"SELECT {VERSION_RECORD_SELECT} FROM object_versions WHERE restore IS NOT NULL AND marker = 0 "
            "AND (bucket, key, version_id) > (?, ?, ?) ORDER BY bucket, key, version_id LIMIT ?",
            (bucket, key, version_id, limit),
        )
        return [self._object_from_row(row) for row in rows]

    def objects_after(self, bucket: str, key: str, limit: int) -> list[ObjectRecord]:
        """Objects of every bucket in (bucket, key) order after a cursor: the daemon's scan.

        The cursor is one row value, `(bucket, key) > (?, ?)`: both databases seek the primary key's
        index to it. Written as `bucket > ? OR (bucket = ? AND key > ?)` (as it was), SQLite and
        PostgreSQL both read the index from its first entry for every page, so a pass over N objects
        visited ~N²/1,000 entries (bench/RESULTS.md, "The lifecycle's scan")."""
        rows = self._reader().execute(
            f"SELECT {OBJECT_COLUMNS} FROM objects WHERE (bucket, key) > (?, ?) ORDER BY bucket, key LIMIT ?",
            (bucket, key, limit),
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

    def tier_heats(self, tier: str) -> list[tuple[float, float]]:
        """(heat, heat_at) of every object on a tier: for the heat histogram of `admin tiers`."""
        return [
            (h, at)
            for h, at in self._reader().execute("SELECT heat, heat_at FROM objects WHERE tier = ?", (tier,))
        ]
