"""Topology: failure domains, and the rebalancer's records (blob relocation, restripes, shard garbage)."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

from tiering.backend import StoredData
from tiering.catalog.base import (
    CatalogBase,
    _dumps,
    _names_domain,
    _stored_from_json,
    _stored_to_json,
)
from tiering.catalog.database import Conn, transaction
from tiering.records import (
    ObjectRecord,
    Segment,
)


class TopologyCatalog(CatalogBase):
    @transaction
    def seed_domains(self, rows: list[dict[str, Any]]) -> None:
        """Record config-declared domains that have no row yet (a row, once there, wins)."""
        with self._write() as db:
            db.executemany(
                "INSERT INTO domains (id, tier, path, node, rack, zone, weight, status, changed) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, 'active', ?) ON CONFLICT (id) DO NOTHING",
                [
                    (r["id"], r["tier"], r["path"], r["node"], r["rack"], r["zone"], r["weight"], time.time())
                    for r in rows
                ],
            )

    @transaction
    def add_domain(self, row: dict[str, Any]) -> None:
        """A new active domain; ValueError if the id is taken by one not removed."""
        with self._write() as db:
            old = db.execute("SELECT status FROM domains WHERE id = ?", (row["id"],)).fetchone()
            if old is not None and old[0] != "removed":
                raise ValueError(f"domain {row['id']!r} exists ({old[0]})")
            db.execute(
                "INSERT INTO domains (id, tier, path, node, rack, zone, weight, status, changed) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, 'active', ?) ON CONFLICT (id) DO UPDATE SET tier = excluded.tier, "
                "path = excluded.path, node = excluded.node, rack = excluded.rack, zone = excluded.zone, "
                "weight = excluded.weight, status = excluded.status, changed = excluded.changed",
                (
                    row["id"],
                    row["tier"],
                    row["path"],
                    row["node"],
                    row["rack"],
                    row["zone"],
                    row["weight"],
                    time.time(),
                ),
            )

    def domain_rows(self) -> list[dict[str, Any]]:
        rows = self._reader().execute(
            "SELECT id, tier, path, node, rack, zone, weight, status, changed FROM domains ORDER BY tier, id"
        )
        keys = ("id", "tier", "path", "node", "rack", "zone", "weight", "status", "changed")
        return [dict(zip(keys, row, strict=True)) for row in rows]

    @transaction
    def set_domain_status(self, domain_ids: list[str], status: str) -> None:
        with self._write() as db:
            db.executemany(
                "UPDATE domains SET status = ?, changed = ? WHERE id = ?",
                [(status, time.time(), d) for d in domain_ids],
            )

    def _blob_location_in(self, db: Conn, data_id: str) -> tuple[str, Any, Any] | None:
        """Where a live blob's location is kept: ("part", upload_id, raw), or ("object", (bucket,
        key), (segments, restore)) / ("version", (bucket, key, version_id), (segments, restore)),
        `restore` being the restored copy's state (None without one), whose segments may hold it."""
        row = db.execute(
            "SELECT bucket, key, upload_id, version_id FROM blobs WHERE data_id = ?", (data_id,)
        ).fetchone()
        if row is None:
            return None
        bucket, key, upload_id, version_id = row
        if upload_id is not None:
            raw = db.execute(
                "SELECT stored FROM parts WHERE upload_id = ? AND stored LIKE ?",
                (upload_id, f'%"{data_id}"%'),
            ).fetchone()
            return ("part", upload_id, raw[0]) if raw else None
        if version_id is not None:  # a noncurrent version's (versions.py)
            seg_row = db.execute(
                "SELECT segments, restore FROM object_versions WHERE bucket = ? AND key = ? AND version_id = ?",
                (bucket, key, version_id),
            ).fetchone()
            where: tuple[str, ...] = (bucket, key, version_id)
            kind = "version"
        else:
            seg_row = db.execute(
                "SELECT segments, restore FROM objects WHERE bucket = ? AND key = ?", (bucket, key)
            ).fetchone()
            where, kind = (bucket, key), "object"
        if seg_row is None:
            return None
        restore = json.loads(seg_row[1]) if seg_row[1] else None
        return (kind, where, (json.loads(seg_row[0]), restore))

    @transaction
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
                db.execute(
                    "UPDATE parts SET stored = ? WHERE upload_id = ? AND stored = ?",
                    (_stored_to_json(StoredData(data_id, stored.size, location)), where, value),
                )
                return True
            segments, restore = value
            # The blob is the object's own data or its restored copy's: the column that names it.
            column, holder = "segments", segments
            matched = [s for s in segments if s["id"] == data_id]
            if not matched and restore is not None:
                column, holder = "restore", restore
                matched = [s for s in restore.get("segments", []) if s["id"] == data_id]
            if not matched or any((s.get("loc") or {}) != expected for s in matched):
                return False
            for segment in matched:
                segment["loc"] = location
            # The bytes are the same, so the generation (the movers' CAS token) stays as it is.
            table, key_columns = (
                ("object_versions", "bucket = ? AND key = ? AND version_id = ?")
                if kind == "version"
                else ("objects", "bucket = ? AND key = ?")
            )
            db.execute(f"UPDATE {table} SET {column} = ? WHERE {key_columns}", (_dumps(holder), *where))
            return True

    @transaction
    def commit_restripe(
        self, bucket: str, key: str, *, expected_generation: int, segments: tuple[Segment, ...]
    ) -> ObjectRecord:
        """Point an object at a re-striped copy of its data on the same tier (compare-and-swap on
        the generation, like a move; PreconditionFailed if it changed). Old data is retired."""
        with self._write() as db:
            current = self._current_if(db, bucket, key, expected_generation)
            keep = {s.stored.data_id for s in segments}
            self._retire(
                db, current.tier, [s.stored for s in current.segments if s.stored.data_id not in keep]
            )
            self._claim_blobs(db, current.tier, bucket, key, segments)
            generation = self._next_generation(db)
            db.execute(
                "UPDATE objects SET segments = ?, generation = ? WHERE bucket = ? AND key = ?",
                (_dumps([s.to_json() for s in segments]), generation, bucket, key),
            )
        return dataclasses.replace(current, segments=segments, generation=generation)

    def blobs_on_domain(self, tier: str, domain_id: str, limit: int = 1000) -> list[str]:
        """Data ids of live blobs whose recorded location names `domain_id` (an admin-time scan)."""
        pattern = f'%"{domain_id}"%'
        db = self._reader()
        found: list[str] = []
        for table in ("objects", "object_versions"):
            for (raw,) in db.execute(
                f"SELECT segments FROM {table} WHERE tier = ? AND segments LIKE ?", (tier, pattern)
            ):
                found += [s["id"] for s in json.loads(raw) if _names_domain(s.get("loc") or {}, domain_id)]
        for (raw,) in db.execute(
            "SELECT parts.stored FROM parts JOIN uploads ON parts.upload_id = uploads.upload_id "
            "WHERE uploads.tier = ? AND parts.stored LIKE ?",
            (tier, pattern),
        ):
            stored = _stored_from_json(raw)
            if _names_domain(stored.location, domain_id):
                found.append(stored.data_id)
        for (raw,) in db.execute("SELECT restore FROM objects WHERE restore LIKE ?", (pattern,)):
            restore = json.loads(raw)
            found += [
                s["id"] for s in restore.get("segments", []) if _names_domain(s.get("loc") or {}, domain_id)
            ]
        return found[:limit]

    @transaction
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

    @transaction
    def forget_shard_garbage(self, entries: list[tuple[str, str, int]]) -> None:
        """Drop (data_id, domain, shard) rows."""
        with self._write() as db:
            db.executemany(
                "DELETE FROM shard_garbage WHERE data_id = ? AND domain = ? AND shard = ?", entries
            )

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
