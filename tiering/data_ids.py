"""Data ids: the names blobs are stored under (generated here, never taken from a request).

A new id is time-ordered: `t`, 14 hex digits of microseconds since the epoch, then 18 random hex
digits (72 bits: unique without any coordination between processes and hosts). The process that
writes the blob appends `-<its process id>` (tiering/peers.py, `LiveProcess.new_data_id`).

Why time-ordered: every id is a key in the catalog's indexes (`blobs`, `garbage`, the heal queue,
PostgreSQL's as well as SQLite's B-trees). A random id lands on a random leaf page of each, so
every small PUT dirtied a page of its own in the blobs index — a 4 KiB frame in SQLite's WAL,
flushed with the commit and written again at the next checkpoint, and at a million objects a page
that is rarely cached. Ids made one after another land next to each other, on the index's
rightmost leaf, which a whole batch of PUTs shares (measured: bench/RESULTS.md, "Time-ordered
data ids").

The leading `t` tells these ids apart from the random ones of earlier versions (32 hex digits),
which stay valid: code that derives something from an id's characters — the files backend's
fan-out directories — must take it from the random part (`spread_chars`), since a time-ordered
id's first characters change only every few days.
"""

from __future__ import annotations

import secrets
import time

TIME_ORDERED = "t"  # first character of a time-ordered id; never that of an earlier version's id
_CLOCK_DIGITS = 14  # hex digits of microseconds since the epoch: enough until the year 4253
_RANDOM_BYTES = 9


def new_data_id() -> str:
    """A new time-ordered data id (without an owner suffix)."""
    micros = time.time_ns() // 1000
    return f"{TIME_ORDERED}{micros:0{_CLOCK_DIGITS}x}{secrets.token_hex(_RANDOM_BYTES)}"


def spread_chars(data_id: str) -> str:
    """Four characters of `data_id` that are spread evenly over its possible values: the start of
    the random part of a time-ordered id, the first four of an earlier version's random id."""
    if data_id.startswith(TIME_ORDERED):
        start = len(TIME_ORDERED) + _CLOCK_DIGITS
        return data_id[start : start + 4]
    return data_id[:4]
