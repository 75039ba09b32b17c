"""glibc malloc settings for a process that streams large blocks (the server, the lifecycle daemon).

A large GET or PUT allocates a fresh 1-4 MiB buffer per block. glibc serves allocations above its
(adaptive) mmap threshold with a mapping of their own, and trims freed heap tops above twice that
back to the kernel, so every block paid for page faults, zeroed pages and a TLB shootdown when it
was freed: a quarter of the server's CPU on a 64 MiB GET (perf). Fixed thresholds keep those
buffers on the heap, where the next block reuses them: 64 MiB GET c2 ~730 -> ~965 MiB/s, server
CPU per GET 89 -> 58 ms; 64 MiB PUT c2 +15 % (bench/RESULTS.md, interleaved A/B).

The price would be memory kept after a burst: up to TRIM_THRESHOLD of free heap in each of glibc's
arenas (8 per core by default): after 2 x 32 concurrent 64 MiB GETs, 600-680 MiB stayed resident
where 153 MiB did before. Hence `malloc_trim` every TRIM_INTERVAL seconds, and ONE arena: glibc's
malloc_trim gives back the free pages inside every arena but the free top of the main arena's only
(its thread arenas' 64 MiB heaps shrink only on a free that leaves more than TRIM_THRESHOLD on
top, which a 64 MiB heap never holds). With more than one arena, a server on PostgreSQL held
137-336 MiB 30 s after 32 concurrent 64 MiB GETs where it had started at 126-135 MiB (more than
64 MiB kept in 5 runs of 8; smaps: the extra was in the thread arenas' 64 MiB heaps); with one,
94 MiB in 4 runs of 4. Nearly every allocation happens under the GIL, so arenas buy no
parallelism here (bench/RESULTS.md, "One malloc arena").

`tune()` must run before the process starts a thread: M_ARENA_MAX only stops new arenas, and
each thread that allocated before it got an arena of its own, which stays in use (later threads
are handed it too). Measured with malloc_info: the limit set first, 1 heap; set after two threads
had allocated, 3. Without glibc (musl, macOS) nothing here does anything.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
from typing import Any

MMAP_THRESHOLD = 8 * 1024 * 1024  # blocks up to this size come from the heap, larger ones from their own mmap
TRIM_THRESHOLD = 64 * 1024 * 1024  # free memory kept at the top of a heap instead of going back at once
ARENA_MAX = 1  # see above: the main arena alone is trimmed to the bone
TRIM_INTERVAL = 10.0  # seconds between hand-backs of free heap memory to the kernel
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8  # mallopt parameters, <malloc.h>


def _libc_function(name: str) -> Any:
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or None), name)
    except (OSError, AttributeError):
        return None


def tune() -> bool:
    """Fix the thresholds and the arena count; False where this is not glibc (nothing done then).
    Call it first thing in the process, before any thread exists (see the module's docstring)."""
    mallopt = _libc_function("mallopt")
    if mallopt is None or _libc_function("malloc_trim") is None:
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    settings = (
        (_M_ARENA_MAX, ARENA_MAX),
        (_M_MMAP_THRESHOLD, MMAP_THRESHOLD),
        (_M_TRIM_THRESHOLD, TRIM_THRESHOLD),
    )
    return all([mallopt(parameter, value) == 1 for parameter, value in settings])


async def trim_periodically(interval: float = TRIM_INTERVAL) -> None:
    """Hand free heap memory back to the kernel every `interval` seconds, until cancelled."""
    malloc_trim = _libc_function("malloc_trim")
    if malloc_trim is None:
        return
    malloc_trim.argtypes, malloc_trim.restype = (ctypes.c_size_t,), ctypes.c_int
    while True:
        await asyncio.sleep(interval)
        await asyncio.to_thread(malloc_trim, 0)  # walks every arena: not on the event loop
