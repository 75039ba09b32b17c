"""A local drive's shard count and bytes, shared by every process of this host that writes to it.

Each process used to count only its own writes on top of its start-up scan, so with several
workers (`tierstore serve --workers N`) `admin domains` and the metrics answered differently
depending on which worker was asked. Now the two numbers live in a 16-byte file in the host's
state directory, one per drive: a scan sets them, every shard committed or removed adds to them,
each under an exclusive `lockf` (a few microseconds; one lock per shard, not per byte). The file
is a status counter, not a record: it is not flushed to disk, and each process's start-up scan
sets it anew from what is on the drive.
"""

from __future__ import annotations

import fcntl
import os
import struct
import threading
from pathlib import Path

_COUNTS = struct.Struct("<qq")  # shards, bytes


class SharedCounters:
    """The (shards, bytes) pair of one drive in a file every process on this host updates."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self._lock = threading.Lock()  # lockf excludes other processes, not this one's threads

    def read(self) -> tuple[int, int]:
        raw = os.pread(self._fd, _COUNTS.size, 0)
        return _COUNTS.unpack(raw) if len(raw) == _COUNTS.size else (0, 0)

    def set(self, shards: int, size: int) -> None:
        with self._lock:
            fcntl.lockf(self._fd, fcntl.LOCK_EX)
            try:
                os.pwrite(self._fd, _COUNTS.pack(shards, size), 0)
            finally:
                fcntl.lockf(self._fd, fcntl.LOCK_UN)

    def add(self, shards: int, size: int) -> None:
        with self._lock:
            fcntl.lockf(self._fd, fcntl.LOCK_EX)
            try:
                count, total = self.read()
                os.pwrite(self._fd, _COUNTS.pack(count + shards, total + size), 0)
            finally:
                fcntl.lockf(self._fd, fcntl.LOCK_UN)
