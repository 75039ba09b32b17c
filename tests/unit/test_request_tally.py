"""Request figures noted during a turn of the event loop are written once, after it, and add up to
exactly what writing each one at once would have (server/request_tally.py)."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram

from server.request_tally import RequestTally, observe_many

BUCKETS = (0.001, 0.01, 0.1, 1.0)
# On the bounds (a bucket's bound is inclusive), between them, zero and past the last finite one.
AMOUNTS = [0.0, 0.001, 0.0011, 0.01, 0.05, 0.1, 0.5, 1.0, 7.5, 0.001, 120.0]


def _metrics() -> tuple[CollectorRegistry, Counter, Histogram]:
    registry = CollectorRegistry()
    counter = Counter("t_requests", "requests", ["op"], registry=registry)
    histogram = Histogram("t_seconds", "seconds", ["op"], buckets=BUCKETS, registry=registry)
    return registry, counter, histogram


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in registry.collect()
        for s in family.samples
        if not s.name.endswith("_created")
    }


def test_many_observations_at_once_land_where_each_one_would() -> None:
    one_by_one, _, direct = _metrics()
    together, _, batched = _metrics()
    for amount in AMOUNTS:
        direct.labels("get").observe(amount)
    observe_many(batched.labels("get"), AMOUNTS)
    assert _samples(together) == _samples(one_by_one)
    assert _samples(together)[("t_seconds_bucket", (("le", "0.001"), ("op", "get")))] == 3


def test_a_histogram_without_the_internals_gets_one_observe_per_amount() -> None:
    seen: list[float] = []

    class Plain:
        def observe(self, amount: float) -> None:
            seen.append(amount)

    observe_many(Plain(), [1.0, 2.0])
    assert seen == [1.0, 2.0]


def test_notes_of_one_turn_are_written_once_after_it() -> None:
    registry, counter, histogram = _metrics()
    synced: list[int] = []
    tally = RequestTally(lambda: synced.append(tally.writes))

    async def requests() -> None:
        for n, amount in enumerate(AMOUNTS):
            tally.count(counter.labels("put"))
            tally.count(counter.labels("bytes"), 100 * n)
            tally.observe(histogram.labels("put"), amount)
        assert _samples(registry)[("t_requests_total", (("op", "put"),))] == 0  # not yet
        assert tally.writes == 0
        await asyncio.sleep(0)  # the loop's next turn
        assert tally.writes == 1 and synced == [1]
        tally.count(counter.labels("put"))  # a later turn's note: a write of its own
        await asyncio.sleep(0)
        assert tally.writes == 2

    asyncio.run(requests())
    samples = _samples(registry)
    assert samples[("t_requests_total", (("op", "put"),))] == len(AMOUNTS) + 1
    assert samples[("t_requests_total", (("op", "bytes"),))] == 100 * sum(range(len(AMOUNTS)))
    assert samples[("t_seconds_count", (("op", "put"),))] == len(AMOUNTS)
    assert samples[("t_seconds_sum", (("op", "put"),))] == sum(AMOUNTS)


def test_a_note_while_a_write_is_due_does_not_look_for_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a turn's first note asks for the running loop (a getpid system call in Python 3.11)."""
    registry, counter, _ = _metrics()
    tally = RequestTally()

    def no_lookup() -> asyncio.AbstractEventLoop:
        raise AssertionError("asked for the running loop with a write already due")

    async def requests() -> None:
        tally.count(counter.labels("put"))
        with monkeypatch.context() as patched:
            patched.setattr(asyncio, "get_running_loop", no_lookup)
            tally.count(counter.labels("put"))
            tally.count(counter.labels("get"))
        await asyncio.sleep(0)

    asyncio.run(requests())
    samples = _samples(registry)
    assert samples[("t_requests_total", (("op", "put"),))] == 2 and tally.writes == 1
    assert samples[("t_requests_total", (("op", "get"),))] == 1


def test_off_the_event_loop_a_note_is_written_at_once() -> None:
    registry, counter, histogram = _metrics()
    tally = RequestTally()
    tally.count(counter.labels("x"), 2)
    tally.observe(histogram.labels("x"), 0.5)
    samples = _samples(registry)
    assert samples[("t_requests_total", (("op", "x"),))] == 2
    assert samples[("t_seconds_count", (("op", "x"),))] == 1 and tally.writes == 2


def test_a_write_that_fails_is_logged_and_the_next_turn_writes_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry, counter, _ = _metrics()

    class Broken:
        def inc(self, amount: float) -> None:
            raise OSError("metrics file gone")

    tally = RequestTally()

    async def requests() -> None:
        tally.count(Broken())
        await asyncio.sleep(0)
        tally.count(counter.labels("ok"))
        await asyncio.sleep(0)

    asyncio.run(requests())
    assert "request metrics not written" in caplog.text
    assert _samples(registry)[("t_requests_total", (("op", "ok"),))] == 1


def test_a_loop_gone_before_its_write_ran_does_not_stop_the_next_one_from_writing() -> None:
    registry, counter, _ = _metrics()
    tally = RequestTally()

    gone = asyncio.new_event_loop()
    gone.call_soon(tally.count, counter.labels("first"))  # schedules the write on `gone`...
    gone.call_soon(gone.stop)  # ...which stops first and is closed with the write still queued
    gone.run_forever()
    gone.close()
    assert _samples(registry)[("t_requests_total", (("op", "first"),))] == 0

    async def note_and_turn() -> None:
        tally.count(counter.labels("second"))
        await asyncio.sleep(0)

    asyncio.run(note_and_turn())
    samples = _samples(registry)
    assert samples[("t_requests_total", (("op", "first"),))] == 1
    assert samples[("t_requests_total", (("op", "second"),))] == 1
