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


def fully_cached(path: Path, length: int | None = None) -> bool:
    """True if every page of `path` (of its first `length` bytes) is in the page cache (a missing
    or empty file: nothing to read)."""
    pages = _residency(path, length)
    return pages is not None and b"\0" not in pages


def keep_cached(path: Path, length: int | None = None) -> bool:
    """`fully_cached`, after reading back whatever pages of it were not (this thread waits for
    the disk, so that the event loop's lookups need not). False: it cannot be told, or a page
    was still missing after the read (evicted again at once, or the file changed meanwhile)."""
    pages = _residency(path, length)
    if pages is None:
        return False
    if b"\0" not in pages:
        return True
    try:
        with open(path, "rb", buffering=0) as f:
            for start, end in _runs_of_zeros(pages):
                os.pread(f.fileno(), (end - start) * mmap.PAGESIZE, start * mmap.PAGESIZE)
    except OSError:
        return False
    return fully_cached(path, length)


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


def cached_pages(path: Path) -> int:
    """How many of `path`'s pages are in the page cache (0 if it cannot be told)."""
    pages = _residency(path, None)
    return pages.count(1) if pages is not None else 0


def _residency(path: Path, length: int | None) -> bytes | None:
    """One byte per page of the file (of its first `length` bytes): 1 cached, 0 not; None if
    it cannot be told (no mincore, mmap or mincore failed)."""
    if _mincore is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return b""
    try:
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
    finally:
        os.close(fd)
