"""A local drive's shard count and bytes, shared by every process of this host that writes to it.

Each process used to count only its own writes on top of its start-up scan, so with several
workers (`tierstore serve --workers N`) `admin domains` and the metrics answered differently
depending on which worker was asked. Now the two numbers live in a 16-byte file per drive in a
directory every process of the host finds alike (the server's: the data directory's runtime
directory in memory, server/runtime_dir.py; else the catalog's folder): a scan sets them, every
shard committed or removed adds to them, each under an exclusive `flock` of the file. The file is a
status counter, not a record: it is not flushed to disk, and each process's start-up scan sets it
anew from what is on the drive. (On the drives' file system every small PUT's `syncfs` wrote the
mapped pages back, and the next update faulted: hence memory.)

The file is mapped (MAP_SHARED), not read and written: every process sees the same page, and an
update is a store into memory. A `pwrite` per shard used to be one more journalled write to the
filesystem per shard (its mtime), and while another process's flush commits the journal each
such write waits for it: under two workers' small PUTs, half of the committer's writes were
these (bench/RESULTS.md, "Shared drive counters mapped").

Why `flock`, not `lockf`: a POSIX record lock (`lockf`) belongs to the whole process, so the
kernel's deadlock check took one process's thread holding drive A's lock, while another of its
threads waited for drive B's — held by a second process whose thread waited for A — for a cycle,
and failed the wait with EDEADLK (a 500 on concurrent large PUTs under two workers). No thread
holds two of these locks at once, so there is no real cycle; a lock of the open file (`flock`)
has no such check.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

_COUNTS = struct.Struct("<qq")  # shards, bytes

# Per thread, while `batched_updates` runs: the updates held back, by counter.
_held = threading.local()


@contextlib.contextmanager
def batched_updates() -> Iterator[None]:
    """Hold back this thread's `SharedCounters.add` calls and apply them at the end, one per counter.

    Why: every update takes and drops the file's lock, two system calls that each let go of the
    GIL and wait to get it back from the busy event loop. The small PUTs' committer stores a batch
    of blobs, three shards each, in one go (`ErasurePool.write_blobs`): one update per drive
    instead of one per shard. Other processes see the batch's counts when it is applied (the
    counts are a status figure, never a record)."""
    if getattr(_held, "updates", None) is not None:  # nested: the outermost applies them
        yield
        return
    updates: dict[SharedCounters, list[int]] = {}
    _held.updates = updates
    try:
        yield
    finally:
        _held.updates = None
        for counters, (shards, size) in updates.items():
            counters.add(shards, size)


class SharedCounters:
    """The (shards, bytes) pair of one drive in a file every process on this host updates."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size < _COUNTS.size:
                # Growing a new (or short) file adds zeros: (0, 0), the scan's starting point; a
                # process racing to do the same changes nothing.
                os.ftruncate(fd, _COUNTS.size)
            self._map = mmap.mmap(fd, _COUNTS.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd  # kept open for flock
        self._lock = threading.Lock()  # flock excludes other processes, not this one's threads

    def read(self) -> tuple[int, int]:
        shards, size = _COUNTS.unpack_from(self._map, 0)
        return shards, size

    def set(self, shards: int, size: int) -> None:
        with self._lock:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                _COUNTS.pack_into(self._map, 0, shards, size)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def add(self, shards: int, size: int) -> None:
        held: dict[SharedCounters, list[int]] | None = getattr(_held, "updates", None)
        if held is not None:
            pending = held.setdefault(self, [0, 0])
            pending[0] += shards
            pending[1] += size
            return
        with self._lock:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                count, total = _COUNTS.unpack_from(self._map, 0)
                _COUNTS.pack_into(self._map, 0, count + shards, total + size)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
