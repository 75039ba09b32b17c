"""Group durability for shard files: one filesystem flush serves every writer waiting on it.

A shard used to cost two fsyncs of its own (the file, then its directory after the rename); a
small object (m+1 replica files) paid for several, one after another. Here a committing writer
renames its finished file into place and then waits on a barrier: the first waiter calls
`syncfs()` on the domain's filesystem, and that single flush — file data, the rename, the new
directory entries — covers every writer that arrived before it began. Writers arriving during a
flush share the next one. Durable on return, like fsync, but concurrent writes share the cost.

Nothing reads a shard before the catalog names it, and the catalog commit comes after this
barrier, so a crash between the rename and the flush only leaves an unreferenced file that the
orphan sweep removes. Where `syncfs` is unavailable (not Linux), per-file fsync is used.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from pathlib import Path

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_syncfs = getattr(_libc, "syncfs", None)
HAVE_SYNCFS = _syncfs is not None


class FlushBarrier:
    """Leader/follower flush of one filesystem (one barrier per device)."""

    def __init__(self, anchor: Path) -> None:
        self._fd = os.open(anchor, os.O_RDONLY)
        self._cond = threading.Condition()
        self._requested = 0
        self._flushed = 0
        self._flushing = False
        self.flushes = 0

    def wait(self) -> None:
        """Return once everything written to this filesystem before the call is on disk."""
        with self._cond:
            self._requested += 1
            ticket = self._requested
            while self._flushed < ticket:
                if self._flushing:
                    self._cond.wait()
                    continue
                self._flushing = True
                target = self._requested
                self._cond.release()
                try:
                    _flush(self._fd)
                finally:
                    self._cond.acquire()
                    self._flushing = False
                    self._cond.notify_all()
                self.flushes += 1
                self._flushed = max(self._flushed, target)


def _flush(fd: int) -> None:
    assert _syncfs is not None
    if _syncfs(fd) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


_barriers: dict[int, FlushBarrier] = {}
_lock = threading.Lock()


def barrier_for(path: Path) -> FlushBarrier | None:
    """The shared barrier of the filesystem holding `path` (None: use per-file fsync)."""
    if not HAVE_SYNCFS:
        return None
    device = os.stat(path).st_dev
    with _lock:
        barrier = _barriers.get(device)
        if barrier is None:
            barrier = _barriers[device] = FlushBarrier(path)
        return barrier
