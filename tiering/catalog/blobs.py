"""Blobs and garbage: which data is live and whose, retired data due for deletion, read pins, the scrubber's cursor."""

from __future__ import annotations

import json
import time

from tiering.backend import StoredData
from tiering.catalog.base import (
    CatalogBase,
    _stored_from_json,
)
from tiering.catalog.database import transaction


class BlobsCatalog(CatalogBase):
    def due_garbage(self, now: float, limit: int = 256) -> list[tuple[str, StoredData]]:
        """Retired blobs whose grace ended by `now`, oldest first, less those that some process
        holds an unexpired read pin on (pins expire by the wall clock). Pinned rows were once
        returned too and dropped by the collector: a batch's worth of blobs under long reads at
        the head of the queue stopped collection of everything behind them."""
        rows = self._reader().execute(
            "SELECT tier, stored FROM garbage WHERE not_before <= ? AND NOT EXISTS "
            "(SELECT 1 FROM read_pins WHERE read_pins.data_id = garbage.data_id AND read_pins.expires > ?) "
            "ORDER BY not_before LIMIT ?",
            (now, time.time(), limit),
        )
        return [(tier, _stored_from_json(st)) for tier, st in rows]

    @transaction
    def forget_garbage(self, data_ids: list[str]) -> None:
        with self._write() as db:
            db.executemany("DELETE FROM garbage WHERE data_id = ?", [(d,) for d in data_ids])

    @transaction
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
            d
            for d in data_ids
            if db.execute("SELECT 1 FROM read_pins WHERE data_id = ? AND expires > ?", (d, now)).fetchone()
        }

    def is_referenced(self, data_id: str) -> bool:
        """Does any object or unfinished upload still use this blob (or is it queued for deletion)?"""
        db = self._reader()
        return bool(
            db.execute("SELECT 1 FROM blobs WHERE data_id = ?", (data_id,)).fetchone()
            or db.execute("SELECT 1 FROM garbage WHERE data_id = ?", (data_id,)).fetchone()
        )

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
        row = db.execute(
            "SELECT bucket, key, upload_id, version_id FROM blobs WHERE data_id = ?", (data_id,)
        ).fetchone()
        if row is None:
            return None
        bucket, key, upload_id, version_id = row
        if upload_id is not None:
            for (raw,) in db.execute("SELECT stored FROM parts WHERE upload_id = ?", (upload_id,)):
                stored = _stored_from_json(raw)
                if stored.data_id == data_id:
                    return stored
            return None
        if version_id is not None:  # a noncurrent version's (versions.py)
            seg_row = db.execute(
                "SELECT segments, restore FROM object_versions WHERE bucket = ? AND key = ? AND version_id = ?",
                (bucket, key, version_id),
            ).fetchone()
        else:
            seg_row = db.execute(
                "SELECT segments, restore FROM objects WHERE bucket = ? AND key = ?", (bucket, key)
            ).fetchone()
        if seg_row is None:
            return None
        # The object's own data, or its restored copy (a blob of the copy's tier, for days).
        restored = json.loads(seg_row[1]).get("segments", []) if seg_row[1] else []
        for segment in [*json.loads(seg_row[0]), *restored]:
            if segment["id"] == data_id:
                return StoredData(data_id, segment["size"], segment.get("loc") or {})
        return None

    def blob_owner(self, data_id: str) -> tuple[str | None, str | None]:
        row = self._reader().execute("SELECT bucket, key FROM blobs WHERE data_id = ?", (data_id,)).fetchone()
        return (row[0], row[1]) if row else (None, None)

    def count_blobs(self, tier: str) -> int:
        return int(self._reader().execute("SELECT COUNT(*) FROM blobs WHERE tier = ?", (tier,)).fetchone()[0])

    # --- the heal queue (every gateway's) --------------------------------------------------------

    @transaction
    def queue_heals(self, blobs: list[tuple[str, str]], now: float) -> None:
        """(tier, data_id) of blobs a reader found damaged: queued once, whoever found them."""
        with self._write() as db:
            db.executemany(
                "INSERT INTO heal_queue (data_id, tier, queued, holder, until) VALUES (?, ?, ?, NULL, 0) "
                "ON CONFLICT (data_id) DO NOTHING",
                [(data_id, tier, now) for tier, data_id in blobs],
            )

    @transaction
    def claim_heals(self, holder: str, now: float, ttl: float, limit: int = 16) -> list[tuple[str, str]]:
        """Up to `limit` queued (tier, data_id), oldest first, now `holder`'s for `ttl` seconds; a
        claim that ran out (its holder died or is stuck) is claimed again."""
        with self._write() as db:
            rows = db.execute(
                "SELECT data_id, tier FROM heal_queue WHERE until <= ? ORDER BY until, queued LIMIT ?",
                (now, limit),
            ).fetchall()
            db.executemany(
                "UPDATE heal_queue SET holder = ?, until = ? WHERE data_id = ?",
                [(holder, now + ttl, data_id) for data_id, _ in rows],
            )
            return [(tier, data_id) for data_id, tier in rows]

    @transaction
    def finish_heal(self, data_id: str, holder: str) -> None:
        with self._write() as db:
            db.execute("DELETE FROM heal_queue WHERE data_id = ? AND holder = ?", (data_id, holder))

    def heal_due(self, now: float) -> bool:
        """Is any queued heal unclaimed (a cheap read before `claim_heals` writes)?"""
        return (
            self._reader().execute("SELECT 1 FROM heal_queue WHERE until <= ? LIMIT 1", (now,)).fetchone()
            is not None
        )

    def heal_queue_length(self) -> int:
        return int(self._reader().execute("SELECT COUNT(*) FROM heal_queue").fetchone()[0])

    # --- lost blobs (every process's) ------------------------------------------------------------

    @transaction
    def mark_blob_lost(self, data_id: str, tier: str, now: float) -> None:
        """Heal found this blob unrecoverable: every process answers its reads 410 from now on."""
        with self._write() as db:
            db.execute(
                "INSERT INTO lost_blobs (data_id, tier, found) VALUES (?, ?, ?) ON CONFLICT (data_id) DO NOTHING",
                (data_id, tier, now),
            )

    @transaction
    def clear_lost_blobs(self, data_ids: list[str]) -> None:
        """Lost no more: deleted, overwritten, or found whole by a later heal."""
        with self._write() as db:
            db.executemany("DELETE FROM lost_blobs WHERE data_id = ?", [(d,) for d in data_ids])

    def blob_is_lost(self, data_id: str) -> bool:
        return (
            self._reader().execute("SELECT 1 FROM lost_blobs WHERE data_id = ?", (data_id,)).fetchone()
            is not None
        )

    def lost_blobs(self) -> dict[str, str]:
        """Data id -> tier of every blob some process's heal found lost."""
        return dict(
            self._reader().execute("SELECT data_id, tier FROM lost_blobs ORDER BY data_id").fetchall()
        )
