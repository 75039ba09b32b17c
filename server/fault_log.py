"""Why the server answered a request with a 5xx: the storage error behind it, in the log.

A client is told what it may act on ("the namespace's database cannot be reached right now;
retry shortly") and never the database's address or a drive's path. The operator needs exactly
those, and the cause: a pool that waited its timeout out, a registration that lapsed, a commit
lost halfway, a tier short of domains. So each such answer logs the storage error's own words.

During an outage every request fails the same way: one line per cause and INTERVAL_SECONDS, the
next saying how many more there were meanwhile, rather than a line per request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

INTERVAL_SECONDS = 10.0


class FaultLog:
    """Called on the event loop only (the S3 and the admin API's answers): no lock."""

    def __init__(
        self,
        logger: logging.Logger,
        interval: float = INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger
        self._interval = interval
        self._clock = clock
        # cause (the storage error's class) → (when it was last logged, answers since not logged)
        self._last: dict[str, tuple[float, int]] = {}

    def record(self, method: str, path: str, status: int, code: str, cause: Exception) -> bool:
        """Log this answer's cause unless one like it was logged less than `interval` ago;
        True if it was logged."""
        kind = type(cause).__name__
        now = self._clock()
        logged_at, unlogged = self._last.get(kind, (None, 0))
        if logged_at is not None and now - logged_at < self._interval:
            self._last[kind] = (logged_at, unlogged + 1)
            return False
        self._last[kind] = (now, 0)
        since = f" ({unlogged} more like it since the last line)" if unlogged else ""
        self._log.warning("%s %s answered %d %s: %s: %s%s", method, path, status, code, kind, cause, since)
        return True
