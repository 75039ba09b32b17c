"""iso_time (one call per listed key, so built from tables and a cache) against the plain formula."""

from __future__ import annotations

import random
import time

from server.xml_io import escape_text, iso_time


def _reference(timestamp: float) -> str:
    seconds = int(timestamp)
    millis = int((timestamp - seconds) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def test_iso_time_matches_the_plain_formula() -> None:
    rnd = random.Random(7)
    samples = [0.0, 0.999, 59.5, 3599.001, 3600.0, 86399.9995, 951782400.25, 4102444799.999]
    samples += [rnd.uniform(0, 4.1e9) for _ in range(20000)]
    samples += [1.7e9 + i * 0.37 for i in range(20000)]  # keys written close together: cache hits
    for timestamp in samples:
        assert iso_time(timestamp) == _reference(timestamp), timestamp
    assert iso_time(1704164645.123456) == "2024-01-02T03:04:05.123Z"


def test_escape_text_escapes_markup_only() -> None:
    assert escape_text("a&b<c>d\"e'f") == "a&amp;b&lt;c&gt;d\"e'f"
    assert escape_text("photos/2024/x.jpg") == "photos/2024/x.jpg"
