"""The one clock every policy reads: wall time, plus an offset that tests and demos may advance.

`tierstore serve --test-clock` allows `tierstore admin clock advance DAYS`, so "30 days idle"
runs in seconds; without it the offset stays zero and cannot be changed.
"""

from __future__ import annotations

import time


class ClockLocked(Exception):
    """Advancing time was refused: the server was not started with --test-clock."""


class Clock:
    def __init__(self, *, adjustable: bool = False) -> None:
        self.adjustable = adjustable
        self.offset = 0.0

    def now(self) -> float:
        return time.time() + self.offset

    def __call__(self) -> float:
        return self.now()

    def advance(self, seconds: float) -> float:
        if not self.adjustable:
            raise ClockLocked("the clock can only be advanced on a server started with --test-clock")
        if seconds < 0:
            raise ValueError("time only moves forward")
        self.offset += seconds
        return self.now()
