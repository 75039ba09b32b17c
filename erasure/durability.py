"""Group durability for shard files: one filesystem flush serves every writer waiting on it.

A shard used to cost two fsyncs of its own (the file, then its directory after the rename); a
small object (m+1 replica files) paid for several, one after another. Here a committing writer
renames its finished file into place and then waits on a barrier: the filesystem's flusher thread
calls `syncfs()`, and that single flush — file data, the rename, the new directory entries —
covers every writer that asked before it began. Writers asking during a flush share the next one.
Durable on return, like fsync, but concurrent writes share the cost.

One flusher thread per filesystem so that a writer committing shards on several drives can ask
every drive at once and wait for all: the drives flush in parallel instead of one after another.
But a writer that comes to wait while no flush runs flushes itself instead of handing over to
the flusher: waking that thread and being woken by it are two more trips through the GIL, each
waiting for the busy event loop to let go of it (the small PUTs' committer flushes every batch).

Nothing reads a shard before the catalog names it, and the catalog commit comes after this
barrier, so a crash between the rename and the flush only leaves an unreferenced file that the
orphan sweep removes. Where `syncfs` is unavailable (not Linux), per-file fsync is used.

`start_writeback` is only a hint: it asks the kernel to begin writing a range now (Linux
`sync_file_range`), so that the flush at commit finds a large shard mostly on disk already
instead of writing all of it while the client waits. It promises nothing about durability.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from pathlib import Path

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_syncfs = getattr(_libc, "syncfs", None)
_sync_file_range = getattr(_libc, "sync_file_range", None)
if _sync_file_range is not None:
    _sync_file_range.argtypes = (ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint)
HAVE_SYNCFS = _syncfs is not None
_SYNC_FILE_RANGE_WRITE = 2
_KEPT_ERRORS = 64  # failed flushes remembered for waiters that have not woken up yet


class FlushBarrier:
    """Group flush of one filesystem (one barrier, and one flusher thread, per device)."""

    def __init__(self, anchor: Path) -> None:
        self._fd = os.open(anchor, os.O_RDONLY)
        self._make_conditions()
        self._requested = 0  # tickets handed out
        self._flushed = 0  # every ticket up to this one has been through a flush
        self._errors: list[tuple[int, int, OSError]] = []  # (first, last ticket, error) of failed flushes
        self._flushing = False  # a flush is under way (by the flusher thread or by a waiter)
        self._flusher: threading.Thread | None = None
        self.flushes = 0

    def _make_conditions(self) -> None:
        # Two conditions on one lock: a request wakes only the flusher, a finished flush only the
        # writers. With one condition every request also woke every writer already waiting, each
        # of which took the GIL just to go back to sleep (sixteen concurrent small PUTs: ~15
        # wake-ups per request).
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # the flusher waits here for requests
        self._done = threading.Condition(self._lock)  # writers wait here for their flush

    def request(self, background: bool = True) -> int:
        """Ask for a flush covering everything written before this call; returns the ticket to wait on.

        `background=False`: the caller waits for it right away, and flushes itself then; the
        flusher thread is not woken (worth it when there is no other filesystem to flush meanwhile)."""
        with self._lock:
            self._requested += 1
            if background:
                if self._flusher is None:
                    self._flusher = threading.Thread(target=self._run, name="syncfs", daemon=True)
                    self._flusher.start()
                self._work.notify()
            return self._requested

    def wait(self, ticket: int | None = None) -> None:
        """Return once the flush covering `ticket` (default: a new one) is done; OSError if it failed."""
        if ticket is None:
            ticket = self.request(background=False)
        with self._lock:
            while self._flushed < ticket:
                if self._flushing:
                    self._done.wait()
                else:  # nobody flushes now: this writer does, for everyone who asked so far
                    self._flush_requested()
            for first, last, error in self._errors:
                if first <= ticket <= last:
                    raise OSError(error.errno, f"filesystem flush failed: {error.strerror}")

    def _run(self) -> None:
        with self._lock:
            while True:
                while self._flushing or self._flushed >= self._requested:
                    self._work.wait()
                self._flush_requested()

    def _flush_requested(self) -> None:
        """One flush covering every ticket handed out so far (called and returns with the lock
        held; lets go of it during the flush). Never two at once: `_flushing`."""
        first, target = self._flushed + 1, self._requested
        self._flushing = True
        self._lock.release()
        error: OSError | None = None
        try:
            _flush(self._fd)
        except OSError as exc:
            error = exc
        finally:
            self._lock.acquire()
            self._flushing = False
        if error is not None:
            self._errors = [*self._errors[-_KEPT_ERRORS + 1 :], (first, target, error)]
        self._flushed = target
        self.flushes += 1
        self._done.notify_all()
        if self._flushed < self._requested:  # asked for during this flush: the flusher takes them
            self._work.notify()


def _flush(fd: int) -> None:
    assert _syncfs is not None
    if _syncfs(fd) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Start writing [offset, offset+length) of `fd` to disk without waiting (a hint; errors ignored)."""
    if _sync_file_range is not None:
        _sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE)


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


def _reset_after_fork() -> None:
    # A forked child has none of the parent's threads: each barrier starts its own flusher when
    # first asked (shard stores keep references to these barriers, so they are reset, not dropped).
    global _lock
    _lock = threading.Lock()
    for barrier in _barriers.values():
        barrier._make_conditions()
        barrier._flusher = None
        barrier._flushing = False
        barrier._flushed = barrier._requested


os.register_at_fork(after_in_child=_reset_after_fork)
