"""Is a file wholly in the page cache? (mincore(2)) Then reading any of it cannot wait for a disk.

The catalog answers a small GET's lookup on the event loop only while its SQLite files are all
cached (see SQLiteDatabase.row_at_hand): a thread trip per GET cost more CPU than the lookup
itself, but a lookup that waited for a disk would stall every request the loop serves. A page
evicted between two checks is the residual risk; the checks run once a second. (Pages do leave
the cache within seconds on some machines: this one runs DAMON's proactive reclaim, which pages
out what was not touched for a second or two — a WAL's frames written and never read, say.)
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
    if _mincore is None:
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    try:
        size = os.fstat(fd).st_size
        if length is not None:
            size = min(size, length)
        if size <= 0:
            return True
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr is None or addr == _MAP_FAILED:
            return False
        try:
            pages = ctypes.create_string_buffer((size + mmap.PAGESIZE - 1) // mmap.PAGESIZE)
            if _mincore(addr, size, pages) != 0:
                return False
            return b"\0" not in pages.raw.translate(_LOW_BIT)
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)
