"""A request's figures written to the Prometheus metrics once per turn of the event loop.

Under a supervisor every metric value lives in a memory-mapped file (prometheus_client's
multi-process mode: server/metrics_workers.py), and each update is a locked write through several
layers of Python. A small GET made six (its count; its latency's sum and bucket; the bytes sent;
its time to first byte's sum and bucket): 6 % of a worker's samples holding the GIL at 16 clients
(bench/RESULTS.md). Here a request only notes its figures; the first note of a turn of the event
loop schedules one write of everything noted by then (`loop.call_soon`): a turn answers several
requests, whose counts add up to one write per series.

When a figure lands: the write runs on the loop's next turn, right after the response's bytes
went to the socket (as the bytes sent and the time to first byte always did: they are known only
then), and before any request that arrives after it is handled here. A scrape counts every
response sent before it: it writes its own worker's notes first (`Metrics.endpoint`), and under a
supervisor it waits until every worker has refreshed its metrics (`Gateway.sync_workers`), which
writes that worker's notes too (`Gateway._refresh`).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("tierstore.metrics")


class RequestTally:
    """Counter increments and histogram observations, noted now and written together (by the
    event loop that serves the requests: one, in a server's process)."""

    def __init__(self, after_write: Callable[[], None] | None = None) -> None:
        self._after_write = after_write  # e.g. the codec counters' sync, once per write too
        self._counts: dict[Any, float] = {}  # counter child -> amount to add
        self._observed: dict[Any, list[float]] = {}  # histogram child -> amounts observed
        # The event loop a write is scheduled on: one at a time. A loop closed before its write ran
        # (an in-process test's) leaves it set: the next note schedules the write on its own loop.
        self._scheduled_on: asyncio.AbstractEventLoop | None = None
        self.writes = 0  # turns written (their ratio to requests is the saving)

    def count(self, counter: Any, amount: float = 1) -> None:
        """`counter.inc(amount)`, soon (`counter`: a labelled child)."""
        self._counts[counter] = self._counts.get(counter, 0) + amount
        self._schedule()

    def observe(self, histogram: Any, amount: float) -> None:
        """`histogram.observe(amount)`, soon (`histogram`: a labelled child)."""
        found = self._observed.get(histogram)
        if found is None:
            self._observed[histogram] = [amount]
        else:
            found.append(amount)
        self._schedule()

    def write(self) -> None:
        """Write everything noted so far (the scheduled call; a caller off the loop may call it too)."""
        self._scheduled_on = None
        counts, self._counts = self._counts, {}
        observed, self._observed = self._observed, {}
        self.writes += 1
        try:
            for counter, amount in counts.items():
                counter.inc(amount)
            for histogram, amounts in observed.items():
                observe_many(histogram, amounts)
            if self._after_write is not None:
                self._after_write()
        except Exception:  # a metrics file that cannot be written must not fail the loop's turn
            log.exception("request metrics not written")

    def _schedule(self) -> None:
        scheduled = self._scheduled_on
        if scheduled is not None and not scheduled.is_closed():
            # A write is due on that loop's next turn: it takes this note too. Checked before
            # asking for the running loop, which in Python 3.11 makes a `getpid` system call each
            # time (three per 4 KiB PUT; such calls were ~4 % of a worker's event loop).
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on an event loop (a test, a thread): at once
            self.write()
            return
        self._scheduled_on = loop
        loop.call_soon(self.write)


def observe_many(histogram: Any, amounts: list[float]) -> None:
    """`histogram.observe(a)` for every `a` in `amounts`, with one write to the sum and one to
    each bucket touched: what `Histogram.observe` does per amount (prometheus_client's counting
    is per bucket, cumulated only when scraped), through its child's value objects. A version of
    prometheus_client without them gets one `observe` per amount."""
    try:
        bounds: list[float] = histogram._upper_bounds
        buckets: list[Any] = histogram._buckets
        total: Any = histogram._sum
    except AttributeError:
        for amount in amounts:
            histogram.observe(amount)
        return
    per_bucket: dict[int, int] = {}
    for amount in amounts:
        # The first bucket whose upper bound is at least the amount, as `observe` finds it (the
        # last bound is +Inf).
        at = bisect.bisect_left(bounds, amount)
        per_bucket[at] = per_bucket.get(at, 0) + 1
    total.inc(sum(amounts))
    for at, count in per_bucket.items():
        buckets[at].inc(count)
