"""Process-wide counters of codec work, read by the metrics endpoint.

Plain numbers (no Prometheus dependency here): `erasure` stays free of the layers above it.
Updated from worker threads; a lost increment under a race only blurs a rate, never data.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class CodecStats:
    encode_seconds: float = 0.0
    encode_bytes: int = 0
    encode_calls: int = 0
    decode_seconds: float = 0.0
    decode_bytes: int = 0
    decode_calls: int = 0


CODEC = CodecStats()


@contextmanager
def timed(kind: str, nbytes: int) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - started
        if kind == "encode":
            CODEC.encode_seconds += elapsed
            CODEC.encode_bytes += nbytes
            CODEC.encode_calls += 1
        else:
            CODEC.decode_seconds += elapsed
            CODEC.decode_bytes += nbytes
            CODEC.decode_calls += 1
