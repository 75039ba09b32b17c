"""A local drive's shard count and bytes, shared by every process of this host that writes to it.

Each process used to count only its own writes on top of its start-up scan, so with several
workers (`tierstore serve --workers N`) `admin domains` and the metrics answered differently
depending on which worker was asked. Now the two numbers live in a small file per drive in a
directory every process of the host finds alike (the server's: the data directory's runtime
directory in memory, server/runtime_dir.py; else the catalog's folder). The file is a status
counter, not a record: it is not flushed to disk, and each process's start-up scan sets it anew
from what is on the drive. (On the drives' file system every small PUT's `syncfs` wrote the
mapped pages back, and the next update faulted: hence memory.)

The file is mapped (MAP_SHARED), not read and written: every process sees the same pages, and an
update is a store into memory. A `pwrite` per shard used to be one more journalled write to the
filesystem per shard (its mtime), and while another process's flush commits the journal each
such write waits for it: under two workers' small PUTs, half of the committer's writes were
these (bench/RESULTS.md, "Shared drive counters mapped").

The file holds `SLOTS` (shards, bytes) pairs and the counts are their sum. Each `SharedCounters`
claims a slot of its own (slot 1 and up) with an open-file-description lock on its 16 bytes, held
as long as its file stays open, and adds to it alone: an update is two stores into memory, no
system call and no lock between processes. It used to be one pair updated under an exclusive
`flock`: two system calls per update, each letting go of the GIL and waiting to get it back from
the busy event loop, for every drive a batch of small PUTs touched (bench/RESULTS.md, "Drive
counters without a lock"). A slot whose process died keeps what it added (its shards are still
on the drive); the next process to claim it adds on top. Slot 0 belongs to no process: `set`
(after a scan) puts there what makes the sum come out right, and a process that finds no free
slot (or runs where open-file-description locks do not exist) adds there, under the `flock`.

Why `flock`, not `lockf`, for slot 0: a POSIX record lock (`lockf`) belongs to the whole process,
so the kernel's deadlock check took one process's thread holding drive A's lock, while another of
its threads waited for drive B's — held by a second process whose thread waited for A — for a
cycle, and failed the wait with EDEADLK (a 500 on concurrent large PUTs under two workers). No
thread holds two of these locks at once, so there is no real cycle; a lock of the open file
(`flock`) has no such check. The slots' locks are open-file-description locks for the same
reason: they belong to the file descriptor, not the process, and are never waited for.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import mmap
import os
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

_COUNTS = struct.Struct("<qq")  # shards, bytes
SLOTS = 128  # one per process (and per open counter) at a time; 2 KiB
_SHARED_SLOT = 0  # set's correction, and the adds of a process without a slot of its own
# struct flock of Linux x86-64 / arm64: l_type, l_whence, l_start, l_len, l_pid (and padding).
_FLOCK = struct.Struct("hhqqi4x")


class SharedCounters:
    """The (shards, bytes) pair of one drive in a file every process on this host updates."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size < _COUNTS.size * SLOTS:
                # Growing a new (or short: an older version's single pair) file adds zeros, the
                # scan's starting point; a process racing to do the same changes nothing.
                os.ftruncate(fd, _COUNTS.size * SLOTS)
            self._map = mmap.mmap(fd, _COUNTS.size * SLOTS, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            self._slot = _claim_slot(fd)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd  # kept open: it holds the slot's lock (and takes slot 0's flock)
        self._lock = threading.Lock()  # this object's own slot, among this process's threads

    def read(self) -> tuple[int, int]:
        return self._sum()

    def set(self, shards: int, size: int) -> None:
        """Make the counts (shards, size): slot 0 takes the difference from the other slots."""
        with self._lock, self._shared_slot_locked():
            others_shards, others_size = self._sum(without=_SHARED_SLOT)
            _COUNTS.pack_into(self._map, 0, shards - others_shards, size - others_size)

    def add(self, shards: int, size: int) -> None:
        with self._lock:
            if self._slot != _SHARED_SLOT:
                self._add_to_own_slot(shards, size)  # no other open file writes it: no flock
                return
            with self._shared_slot_locked():
                self._add_to_own_slot(shards, size)

    def close(self) -> None:
        """Give the slot back (what it added stays in the file)."""
        self._map.close()
        os.close(self._fd)

    def _add_to_own_slot(self, shards: int, size: int) -> None:
        offset = self._slot * _COUNTS.size
        count, total = _COUNTS.unpack_from(self._map, offset)
        _COUNTS.pack_into(self._map, offset, count + shards, total + size)

    @contextlib.contextmanager
    def _shared_slot_locked(self) -> Iterator[None]:
        """Slot 0 excludes the other processes' `set`s and slot-less adds by the file's `flock`."""
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _sum(self, without: int | None = None) -> tuple[int, int]:
        shards = size = 0
        for n, (count, total) in enumerate(_COUNTS.iter_unpack(self._map)):
            if n != without:
                shards += count
                size += total
        return shards, size


def _claim_slot(fd: int) -> int:
    """The first slot no other open file holds, locked for this one; slot 0 when none is free."""
    command = getattr(fcntl, "F_OFD_SETLK", None)  # Linux only
    if command is None:
        return _SHARED_SLOT
    for slot in range(1, SLOTS):
        request = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, slot * _COUNTS.size, _COUNTS.size, 0)
        try:
            fcntl.fcntl(fd, command, request)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                continue  # another open file's slot
            if exc.errno == errno.EINVAL:
                return _SHARED_SLOT  # no OFD locks on this system
            raise
        return slot
    return _SHARED_SLOT
