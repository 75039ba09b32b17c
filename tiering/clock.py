"""The one clock every policy reads: wall time, plus an offset that tests and demos may advance.

`tierstore serve --test-clock` allows `tierstore admin clock advance DAYS`, so "30 days idle"
runs in seconds; without it the offset stays zero and cannot be changed. The offset is kept in
the catalog, so a separate `tierstore lifecycle` process sees the same time as the server.
"""

from __future__ import annotations

import sqlite3
import time
from typing import TYPE_CHECKING

from tiering.errors import CatalogUnavailable

if TYPE_CHECKING:
    from tiering.catalog import Catalog

OFFSET_SETTING = "clock_offset_seconds"
# An adjustable clock re-reads the shared offset at most this often when read (another worker, or
# the lifecycle process, may have advanced it): one indexed read a second, test clocks only.
RELOAD_INTERVAL = 1.0


class ClockLocked(Exception):
    """Advancing time was refused: the server was not started with --test-clock."""


class Clock:
    def __init__(self, *, adjustable: bool = False, catalog: Catalog | None = None) -> None:
        self.adjustable = adjustable
        self.catalog = catalog
        self.offset = 0.0
        self._fresh_until = 0.0
        self.reload()

    def now(self) -> float:
        if self.adjustable and self.catalog is not None and time.monotonic() >= self._fresh_until:
            try:
                self.reload()
            except (sqlite3.Error, CatalogUnavailable):
                self._fresh_until = time.monotonic() + RELOAD_INTERVAL  # keep the last offset
        return time.time() + self.offset

    def __call__(self) -> float:
        return self.now()

    def reload(self) -> None:
        """Pick up an offset another process set (cheap: one indexed read)."""
        if self.catalog is not None and self.adjustable:
            stored = self.catalog.get_setting(OFFSET_SETTING)
            self.offset = float(stored) if stored else 0.0
            self._fresh_until = time.monotonic() + RELOAD_INTERVAL

    def advance(self, seconds: float) -> float:
        if not self.adjustable:
            raise ClockLocked("the clock can only be advanced on a server started with --test-clock")
        if seconds < 0:
            raise ValueError("time only moves forward")
        self.reload()
        self.offset += seconds
        if self.catalog is not None:
            self.catalog.put_setting(OFFSET_SETTING, repr(self.offset))
        return self.now()
