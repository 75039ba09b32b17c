"""Is a file wholly in the page cache? (mincore(2)) Then reading any of it cannot wait for a disk.

The catalog answers a small GET's lookup on the event loop only while its SQLite files are all
cached (see SQLiteDatabase.row_at_hand): a thread trip per GET cost more CPU than the lookup
itself, but a lookup that waited for a disk would stall every request the loop serves. A page
evicted between two checks is the residual risk; the checks run once a second. Pages the check
finds missing it reads back in (`keep_cached`, from its own thread): machines that reclaim cold
page cache on their own (this one runs DAMON's proactive pageout of what went untouched for a
minute) would otherwise keep the catalog from ever being all cached — the pages of tables and
indexes a GET never reads go first.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
from pathlib import Path

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_mincore = getattr(_libc, "mincore", None)
if _mincore is not None:
    _libc.mmap.restype = ctypes.c_void_p
    _libc.mmap.argtypes = (
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    )
    _libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    _mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)
_MAP_FAILED = ctypes.c_void_p(-1).value
_LOW_BIT = bytes(i & 1 for i in range(256))  # mincore defines only bit 0 of each page's byte


class WatchedFile:
    """A file whose page-cache residency is checked, and kept, through one descriptor that stays
    open until `close`. On purpose: closing *any* descriptor of a file drops every POSIX (fcntl)
    lock this process holds on it — SQLite's locks on its database and -shm files included, as
    SQLite's documentation warns. A check that opened and closed catalog.db each second broke a
    gateway's locks within seconds ("disk I/O error"; tests/faults/test_orphan_sweep_hosts.py)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = -1

    def _descriptor(self) -> int | None:
        if self._fd < 0:
            try:
                self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                return None
        return self._fd

    def fully_cached(self, length: int | None = None) -> bool:
        """Every page (of the first `length` bytes) in the page cache? A missing file: yes."""
        fd = self._descriptor()
        if fd is None:
            return True
        pages = _residency(fd, length)
        return pages is not None and b"\0" not in pages

    def keep_cached(self, length: int | None = None) -> bool:
        """`fully_cached`, after reading back whatever pages were not (this thread waits for the
        disk, so that the event loop's lookups need not). False: it cannot be told, or a page was
        still missing after the read (evicted again at once, or the file changed meanwhile)."""
        fd = self._descriptor()
        if fd is None:
            return True
        pages = _residency(fd, length)
        if pages is None:
            return False
        if b"\0" not in pages:
            return True
        try:
            for start, end in _runs_of_zeros(pages):
                os.pread(fd, (end - start) * mmap.PAGESIZE, start * mmap.PAGESIZE)
        except OSError:
            return False
        return self.fully_cached(length)

    def pread(self, length: int, offset: int) -> bytes:
        fd = self._descriptor()
        return os.pread(fd, length, offset) if fd is not None else b""

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


def fully_cached(path: Path, length: int | None = None) -> bool:
    """`WatchedFile.fully_cached` for a file this process holds no lock on (it opens and closes
    it: never for SQLite's files, see WatchedFile)."""
    watched = WatchedFile(path)
    try:
        return watched.fully_cached(length)
    finally:
        watched.close()


def cached_pages(path: Path) -> int:
    """How many of `path`'s pages are in the page cache (0 if it cannot be told); opens and
    closes it, like `fully_cached`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return 0
    try:
        pages = _residency(fd, None)
    finally:
        os.close(fd)
    return pages.count(1) if pages is not None else 0


def _runs_of_zeros(pages: bytes) -> list[tuple[int, int]]:
    """[start, end) page ranges that are not cached."""
    runs: list[tuple[int, int]] = []
    start = pages.find(0)
    while start != -1:
        end = pages.find(1, start)
        end = len(pages) if end == -1 else end
        runs.append((start, end))
        start = pages.find(0, end)
    return runs


def _residency(fd: int, length: int | None) -> bytes | None:
    """One byte per page of the open file (of its first `length` bytes): 1 cached, 0 not; None
    if it cannot be told (no mincore, mmap or mincore failed). mmap and munmap leave locks be."""
    if _mincore is None:
        return None
    size = os.fstat(fd).st_size
    if length is not None:
        size = min(size, length)
    if size <= 0:
        return b""
    addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if addr is None or addr == _MAP_FAILED:
        return None
    try:
        pages = ctypes.create_string_buffer((size + mmap.PAGESIZE - 1) // mmap.PAGESIZE)
        if _mincore(addr, size, pages) != 0:
            return None
        return pages.raw.translate(_LOW_BIT)
    finally:
        _libc.munmap(addr, size)
