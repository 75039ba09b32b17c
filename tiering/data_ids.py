"""Data ids: the names blobs are stored under (generated here, never taken from a request).

Two kinds, chosen by the tier's backend (`TierBackend.time_ordered_ids`):

- **Time-ordered** (erasure-coded tiers): `t`, 14 hex digits of microseconds since the epoch, then
  18 random hex digits (72 bits: unique without any coordination between processes and hosts).
  Every data id is a key in the catalog's indexes (`blobs`, `garbage`, the heal queue; SQLite's
  and PostgreSQL's B-trees alike). A random id lands on a random leaf page of each, so every small
  PUT dirtied a page of its own in the `blobs` index — a 4 KiB frame in SQLite's WAL, flushed with
  the commit and written again at the next checkpoint, and as the catalog grows a page that is
  rarely cached. Ids made one after another land together on the rightmost leaf, which a whole
  batch of PUTs shares (measured: bench/RESULTS.md, "Time-ordered data ids"). The erasure-coded
  backend finds shards through its pack index and spreads shard files by a hash of the id, so
  nothing there depends on the id's first characters.
- **Random** (32 hex digits, as every id was before): for backends that derive something from an
  id's first characters — the files backend (and the memory tier's write-through files under it)
  its directories `<id[:2]>/<id[2:4]>`, which earlier versions compute the same way, so blobs
  stay readable by them during a rolling upgrade or after a downgrade; an external S3 bucket its
  partitions by key prefix, which ids with a common prefix would crowd onto one.

The process that writes the blob appends `-<its process id>` (tiering/peers.py).
"""

from __future__ import annotations

import os
import threading
import time

TIME_ORDERED = "t"  # first character of a time-ordered id; never that of a random (hex) one
_CLOCK_DIGITS = 14  # hex digits of microseconds since the epoch: enough until the year 4253
_RANDOM_BYTES = 9

# The kernel's random bytes, taken a page at a time. `os.urandom` is a `getrandom` system call
# that lets go of the GIL: on the event loop, once per PUT, for nine bytes, and a hand-off to
# whichever thread waits for the GIL (the small-write committer, mostly). A fork starts the
# child on a fresh page, so that no two processes hand out the same bytes.
_POOL_BYTES = 4096
_pool = b""
_taken = 0
_pool_lock = threading.Lock()


def _random_hex(count: int) -> str:
    """`count` bytes from the kernel's random source, in hex (as `secrets.token_hex(count)`)."""
    global _pool, _taken
    with _pool_lock:
        if _taken + count > len(_pool):
            _pool, _taken = os.urandom(_POOL_BYTES), 0
        start = _taken
        _taken = start + count
        return _pool[start : start + count].hex()


def _forget_pool() -> None:
    # A fresh lock too: another thread may have held this one at the fork, and it never will
    # let go of it in the child.
    global _pool, _taken, _pool_lock
    _pool, _taken, _pool_lock = b"", 0, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)


def new_data_id(time_ordered: bool) -> str:
    """A new data id (without an owner suffix): time-ordered, or 32 random hex digits."""
    if not time_ordered:
        return _random_hex(16)
    micros = time.time_ns() // 1000
    return f"{TIME_ORDERED}{micros:0{_CLOCK_DIGITS}x}{_random_hex(_RANDOM_BYTES)}"
