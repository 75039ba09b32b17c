"""Leases (which process runs a job until when: rows with an expiry, no advisory locks) and settings."""

from __future__ import annotations

from tiering.catalog.base import (
    CatalogBase,
    key_successor,
)
from tiering.catalog.database import transaction


class LeasesCatalog(CatalogBase):
    @transaction
    def acquire_lease(
        self, name: str, holder: str, ttl: float, now: float, *, replacing: str | None = None
    ) -> bool:
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

    @transaction
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

    @transaction
    def put_setting(self, name: str, value: str) -> None:
        with self._write() as db:
            db.execute(
                "INSERT INTO settings (name, value) VALUES (?, ?) "
                "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                (name, value),
            )

    @transaction
    def delete_setting(self, name: str) -> None:
        with self._write() as db:
            db.execute("DELETE FROM settings WHERE name = ?", (name,))

    def settings_with_prefix(self, prefix: str) -> dict[str, str]:
        """Every setting whose name starts with `prefix` (an index range scan)."""
        upper = key_successor(prefix)
        sql = "SELECT name, value FROM settings WHERE name >= ?" + (" AND name < ?" if upper else "")
        return dict(self._reader().execute(sql, (prefix, upper) if upper else (prefix,)).fetchall())
