"""Metrics of a server with several worker processes: one /metrics for all of them.

A scrape reaches whichever worker takes the connection. If each answered with its own counters,
a counter would jump down and up again from one scrape to the next as they landed on different
workers — Prometheus would read each drop as a restart. So, under a supervisor, the workers use
prometheus_client's multi-process mode: the supervisor names a directory
(`PROMETHEUS_MULTIPROC_DIR`, read by prometheus_client when it is imported, so it is set in the
workers' environment), every worker's metric values live in memory-mapped files there, and a
scrape in any worker adds them all up (`MultiProcessCollector`). A dead worker's counters stay
counted (its files stay); its gauges are dropped once the supervisor marks it dead.

What a worker reads from its own objects at scrape time (heal and rebalance progress, the mover,
codec seconds, connections, the `process_*` figures) is mirrored into such metrics by `Mirror`,
once a second and before each scrape: counters by their increase, gauges by their value, summed
over the live workers (`livesum`) unless `GAUGE_MODES` says otherwise. What comes from the
catalog (tiers, domains, nodes, moves, usage) is the same in every worker and is read directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import threading
from pathlib import Path
from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client import values as prometheus_values
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from erasure.stats import CODEC
from tiering.peers import locked_directory

log = logging.getLogger("tierstore.metrics")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
SYNC_INTERVAL = 1.0  # seconds: how stale another worker's mirrored figures may be in a scrape

# How a gauge several workers report is combined (prometheus_client's multiprocess modes).
# Flags and per-process views of one shared thing take the largest live value (summing two
# workers' views of the same degraded blob would count it twice); amounts held by each worker
# (connections, memory, moves running) are summed.
GaugeMode = Literal["livesum", "livemax", "min"]
GAUGE_MODES: dict[str, GaugeMode] = {
    "tierstore_scrub_running": "livemax",
    "tierstore_scrub_checked_blobs": "livemax",
    "tierstore_scrub_total_blobs": "livemax",
    "tierstore_degraded_objects": "livemax",
    "tierstore_rebalance_running": "livemax",
    "tierstore_rebalance_shards_pending": "livemax",
    "tierstore_rebalance_bytes_pending": "livemax",
    "tierstore_rebalance_eta_seconds": "livemax",
    "process_start_time_seconds": "min",  # the first worker's start: the server's
    "process_max_fds": "livemax",
}


def multiprocess_dir() -> str | None:
    """The shared metrics directory when this process is a supervised worker, else None."""
    return os.environ.get(MULTIPROC_ENV) or None


# A multi-process metric value asks for the process id on every update, to notice a fork (its
# values then go to the child's own files): `os.getpid`, a system call each time — about one per
# small request even with updates written once per turn (server/request_tally.py). Such calls
# were ~4 % of a worker's event loop (bench/RESULTS.md). prometheus_client takes the function as
# `MultiProcessValue(process_identifier=...)`; this one answers the id remembered at start and
# after every fork. Set here, at import: every value made afterwards (a labelled child of an
# older metric too) takes this class and the files it maps; a value made before keeps its own
# class, which asks getpid, and writes only the place in the file it already has (tested).
_pid = os.getpid()


def _process_id() -> int:
    return _pid


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)
if multiprocess_dir():  # prometheus_client chose its multi-process values when it was imported
    prometheus_values.ValueClass = prometheus_values.MultiProcessValue(process_identifier=_process_id)


def prepare_dir(runtime: Path | None, data_dir: Path) -> Path:
    """A fresh directory for this supervisor's workers, `<parent>/metrics/<pid>`: the parent is the
    data directory's runtime directory in memory (server/runtime_dir.py), or `data_dir` where
    there is none or it is gone. Directories left by supervisors that are gone (killed) are
    removed. A restart starts its counters at zero."""
    if runtime is not None:
        # Under the runtime directory's lock, and never making it: a process of this data directory
        # that stops now removes it while it holds nothing but its owner file (under the same lock:
        # runtime_dir.remove_if_unused). Made again here, it had no owner file and mode 0755, and no
        # sweep ever removed it (nor would the next start use it).
        try:
            with locked_directory(runtime):
                return _fresh(runtime / "metrics")
        except FileNotFoundError:  # removed before this start locked it (or its empty `metrics`)
            log.info("runtime directory %s removed meanwhile: worker metrics in the data directory", runtime)
    return _fresh(data_dir / "metrics", parents=True)


def _fresh(root: Path, *, parents: bool = False) -> Path:
    """`root/<pid>`, empty; `root` made if need be (its parents too only when told)."""
    root.mkdir(parents=parents, exist_ok=True)
    for old in root.iterdir():
        if old.name.isdigit() and not _alive(int(old.name)):
            shutil.rmtree(old, ignore_errors=True)
    path = root / str(os.getpid())
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir()
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def mark_dead(pid: int, path: Path) -> None:
    """A worker is gone: its live gauges leave the sums (its counters stay)."""
    from prometheus_client import multiprocess

    with contextlib.suppress(OSError):
        multiprocess.mark_process_dead(pid, str(path))


def scrape_registry(path: str) -> CollectorRegistry:
    """A registry whose scrape adds up every worker's values."""
    from prometheus_client import multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=path)
    return registry


class CodecCounters:
    """`erasure.stats.CODEC` (plain numbers, erasure knows no Prometheus) as shared counters."""

    def __init__(self) -> None:
        self.seconds = Counter(
            "tierstore_ec_seconds", "CPU seconds spent in the erasure codec", ["op"], registry=None
        )
        self.bytes = Counter("tierstore_ec_bytes", "Bytes through the erasure codec", ["op"], registry=None)
        self._last = (0.0, 0, 0.0, 0)

    def sync(self) -> None:
        now = (CODEC.encode_seconds, CODEC.encode_bytes, CODEC.decode_seconds, CODEC.decode_bytes)
        if now == self._last:
            return  # the common case (a GET of a whole stripe set, any non-EC request): no work
        last, self._last = self._last, now
        for (counter, op), value, before in zip(
            (
                (self.seconds, "encode"),
                (self.bytes, "encode"),
                (self.seconds, "decode"),
                (self.bytes, "decode"),
            ),
            now,
            last,
            strict=True,
        ):
            if value > before:
                counter.labels(op).inc(value - before)


class Mirror:
    """Copies what `collectors` report in this worker into multi-process metrics."""

    def __init__(self, collectors: list[Collector]) -> None:
        self.collectors = collectors
        self._counters: dict[str, Counter] = {}
        self._gauges: dict[str, Gauge] = {}
        self._last: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        # The mirror's own loop and an admin command's sync run in worker threads at once: two
        # syncs reading the same last value would both add the same delta to a counter.
        self._lock = threading.Lock()

    def sync(self) -> None:
        """Blocking (collectors may read files under /proc): call it off the event loop."""
        with self._lock:
            for collector in self.collectors:
                for family in collector.collect():
                    if family.type == "counter":
                        self._counter(family)
                    elif family.type == "gauge":
                        self._gauge(family)

    def _counter(self, family: Metric) -> None:
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue  # `_created`: meaningless summed
            labels = tuple(sorted(sample.labels.items()))
            metric = self._counters.get(family.name)
            if metric is None:
                metric = self._counters[family.name] = Counter(
                    family.name,
                    family.documentation,
                    [name for name, _ in labels],
                    registry=None,
                )
            key = (sample.name, labels)
            delta = sample.value - self._last.get(key, 0.0)
            self._last[key] = sample.value
            if delta > 0:
                (metric.labels(*[v for _, v in labels]) if labels else metric).inc(delta)

    def _gauge(self, family: Metric) -> None:
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            metric = self._gauges.get(family.name)
            if metric is None:
                metric = self._gauges[family.name] = Gauge(
                    family.name,
                    family.documentation,
                    [name for name, _ in labels],
                    registry=None,
                    multiprocess_mode=GAUGE_MODES.get(family.name, "livesum"),
                )
            (metric.labels(*[v for _, v in labels]) if labels else metric).set(sample.value)

    async def run_forever(self) -> None:
        while True:
            try:
                await asyncio.to_thread(self.sync)
            except Exception:  # noqa: BLE001 - a metrics hiccup must not stop the mirror
                log.exception("mirroring this worker's metrics failed")
            await asyncio.sleep(SYNC_INTERVAL)
