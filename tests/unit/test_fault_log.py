"""server/fault_log.py: the cause of each 5xx answer, one line per cause and interval."""

from __future__ import annotations

import logging

import pytest

from server.fault_log import FaultLog
from tiering.errors import CatalogUnavailable, TierUnavailable


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_one_line_per_cause_and_interval_then_the_count_of_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    faults = FaultLog(logging.getLogger("test.faults"), interval=10.0, clock=clock)
    outage = CatalogUnavailable("couldn't get a connection after 5.00 sec")
    with caplog.at_level(logging.WARNING, logger="test.faults"):
        assert faults.record("PUT", "/b/k", 503, "ServiceUnavailable", outage)
        for _ in range(4):
            clock.now += 2.0
            assert not faults.record("GET", "/b/k", 503, "ServiceUnavailable", outage)
        # Another cause has a line of its own at once.
        assert faults.record(
            "PUT", "/b/x", 503, "ServiceUnavailable", TierUnavailable("2 of 6 shards failed")
        )
        clock.now += 2.0  # 10 s after the first line
        assert faults.record("GET", "/b/k", 503, "ServiceUnavailable", outage)
        clock.now += 10.0
        assert faults.record("GET", "/b/k", 503, "ServiceUnavailable", outage)
    assert [r.getMessage() for r in caplog.records] == [
        "PUT /b/k answered 503 ServiceUnavailable: CatalogUnavailable: couldn't get a connection after 5.00 sec",
        "PUT /b/x answered 503 ServiceUnavailable: TierUnavailable: 2 of 6 shards failed",
        "GET /b/k answered 503 ServiceUnavailable: CatalogUnavailable: couldn't get a connection after 5.00 sec"
        " (4 more like it since the last line)",
        "GET /b/k answered 503 ServiceUnavailable: CatalogUnavailable: couldn't get a connection after 5.00 sec",
    ]
    assert all(r.levelno == logging.WARNING for r in caplog.records)
