"""Live processes: a row per process that writes through this catalog, kept fresh by heartbeats.

Every gateway, worker and lifecycle process on any host registers here (tiering.peers): its id
(which also tags the data ids it writes), a host id, its pid, when it started, and an expiry its
heartbeats push forward. A process is alive while its row is unexpired — whatever host it runs
on, so nothing here asks the local kernel about a pid. Rows with an expiry, no advisory locks:
the same on SQLite and PostgreSQL. A process whose row was taken away (a survivor found it
expired and swept its orphans) learns it at its next heartbeat (`renew_process` is False).
"""

from __future__ import annotations

from dataclasses import dataclass

from tiering.catalog.base import CatalogBase
from tiering.catalog.database import transaction


@dataclass(frozen=True)
class ProcessRow:
    id: str
    host: str
    pid: int
    started: float
    heartbeat: float
    expires: float

    def alive(self, now: float) -> bool:
        return self.expires > now


class ProcessesCatalog(CatalogBase):
    @transaction
    def register_process(self, row: ProcessRow) -> None:
        with self._write() as db:
            db.execute(
                "INSERT INTO processes (id, host, pid, started, heartbeat, expires) VALUES (?, ?, ?, ?, ?, ?)",
                (row.id, row.host, row.pid, row.started, row.heartbeat, row.expires),
            )

    @transaction
    def renew_process(self, process_id: str, heartbeat: float, expires: float) -> bool:
        """Push a live process's expiry forward; False if its row is gone or claimed by a sweeper
        (it was declared dead: see tiering.peers)."""
        with self._write() as db:
            cursor = db.execute(
                "UPDATE processes SET heartbeat = ?, expires = ? WHERE id = ? AND expires >= 0",
                (heartbeat, expires, process_id),
            )
            return cursor.rowcount > 0

    @transaction
    def claim_process(self, process_id: str, expired_before: float) -> bool:
        """Declare a process dead before sweeping what it left: only while its row is still
        expired at `expired_before` (one that beat again meanwhile lives on). The row stays,
        marked (expires = -1), until the sweep is done: a sweeper that dies midway leaves it to
        the next. From here on the process's heartbeats fail, so it never commits what it wrote."""
        with self._write() as db:
            cursor = db.execute(
                "UPDATE processes SET expires = -1 WHERE id = ? AND expires <= ?",
                (process_id, expired_before),
            )
            return cursor.rowcount > 0

    def process_rows(self) -> list[ProcessRow]:
        rows = self._reader().execute(
            "SELECT id, host, pid, started, heartbeat, expires FROM processes ORDER BY id"
        )
        return [ProcessRow(r[0], r[1], int(r[2]), float(r[3]), float(r[4]), float(r[5])) for r in rows]

    @transaction
    def forget_process(self, process_id: str) -> None:
        """Remove a process's row: it exited in order, or its orphans were swept."""
        with self._write() as db:
            db.execute("DELETE FROM processes WHERE id = ?", (process_id,))
