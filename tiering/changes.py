"""A shared "something changed" token for the processes that serve one data directory.

Caches spare the request path a catalog read: credentials, user and bucket policies, ACLs,
CORS rules, the test clock, domain states. A change made through one worker must be seen by the
next request whichever worker takes it (S3's read-after-write, and `tierstore admin` acting on
all workers), yet polling the catalog per request would cost what the caches save. So every
change of such state also writes a fresh random token into an 8-byte memory-mapped file in the
state directory, and a process compares the token it last caught up with at the start of each
request (a memory read): a different token makes it reload its caches before it answers.

The writer changes the catalog first and the token after, so a process that sees the new token
reads the new state. Random tokens rather than a counter: two concurrent bumps can never leave
the value a reader already saw. Gateways on other hosts (a PostgreSQL catalog) do not share the
file; they keep their caches' time limits (a second).
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

FILE_NAME = "changes"
SIZE = 8


class ChangeSignal:
    """The token of one state directory; `None` directory: this process alone (a tool, a test)."""

    def __init__(self, state_dir: Path | None) -> None:
        self._map: mmap.mmap | bytearray
        if state_dir is None:
            self._map = bytearray(SIZE)
            return
        state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(state_dir / FILE_NAME, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < SIZE:
                os.ftruncate(fd, SIZE)
            self._map = mmap.mmap(fd, SIZE)
        finally:
            os.close(fd)  # the mapping stays valid

    def token(self) -> bytes:
        return bytes(self._map[:SIZE])

    def bump(self) -> None:
        """Call after the change is committed to the catalog."""
        self._map[:SIZE] = os.urandom(SIZE)
