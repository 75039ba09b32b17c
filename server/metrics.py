"""Prometheus metrics (at /metrics and /_tierstore/metrics) and the per-request access log.

Request metrics are counted as requests go by (`RequestObserver`, a small ASGI middleware that
also sees the body bytes in and out and writes the JSON access log). Everything about storage
(tiers, domains, heal, codec, lifecycle, power) is read from the live objects at scrape time by
one collector, so there is no second copy of that state to drift. Usage per tier and bucket comes
from the catalog's counters; heat per tier scans every object, so it is cached for `SLOW_STATS_TTL`
and shared through the catalog: one scan serves every worker, and they all answer with it.

Label sets are bounded: S3 operation names, HTTP status, tier, domain, node and bucket (at most
`MAX_BUCKET_SERIES` buckets, the rest summed under `bucket="_other"`) — never an object key.
Bucket labels name tenants' data, so they are in a scrape only when configured (`[metrics]
per_bucket`) or when an administrator signs it (`server.status`).
Names follow Prometheus conventions: `_total` counters, `_bytes`, `_seconds`, `_watts`, `_joules`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response

from erasure.stats import CODEC
from lifecycle.temperature import heat_histogram
from server import connection_limits, metrics_workers
from server.request_tally import RequestTally
from tiering import nodes
from tiering.domains import list_domains
from tiering.heat import decayed

if TYPE_CHECKING:
    from lifecycle.runtime import Lifecycle
    from tiering.store import ObjectStore
    from tiering.tiers import Tier


# From 100 µs (a gpu-direct hit) to a minute (a cold read or a multi-GiB upload).
LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
    10.0, 30.0, 60.0,
)  # fmt: skip

SLOW_STATS_TTL = 15.0  # seconds: heat per tier is a full catalog scan
HEAT_SETTING = "metrics:heat_per_tier"  # the last scan's result, shared by the processes on the catalog
MAX_BUCKET_SERIES = 200  # the largest buckets get their own series; the rest are summed
DRIVE_STATES = ("normal", "full", "failing")  # a drive's write health (erasure.drive_health)

# Energy to move one GB through a medium (read or write), in joules: the active power of one
# device divided by its streaming rate. Sources are typical datasheet values:
#   hbm/dram      ~ 5 pJ/bit                                   →   0.04 J/GB
#   nvme-flash    ~ 12 W active at ~3.5 GB/s                   →   3.5  J/GB
#   hdd           ~ 8 W active at ~0.25 GB/s                   →  32    J/GB
#   tape/archive  ~ 30 W per drive at ~0.3 GB/s (LTO-9 class)  → 100    J/GB
# A move costs a read on the source tier plus a write on the target tier.
JOULES_PER_GB: dict[str, float] = {"hbm/dram": 0.04, "nvme-flash": 3.5, "hdd": 32.0, "tape/archive": 100.0}
DEFAULT_JOULES_PER_GB = 10.0


def joules_per_gb(media: str) -> float:
    return JOULES_PER_GB.get(media, DEFAULT_JOULES_PER_GB)


def expansion(tier: Tier) -> float:
    """Bytes stored per logical byte: (k+m)/k for an erasure-coded tier, 1 otherwise."""
    k, m = tier.config.options.get("k"), tier.config.options.get("m")
    if tier.config.backend == "erasure" and isinstance(k, int) and isinstance(m, int) and k > 0:
        return (k + m) / k
    return 1.0


def tier_capacity(tier: Tier, stats: dict[str, Any]) -> int | None:
    """Logical bytes a tier may hold: its configured capacity_bytes, else from its file systems.

    Erasure-coded tiers count each file system under their domains once (simulated domains often
    share one disk) and scale raw bytes by k/(k+m). None when nothing can tell.
    """
    if tier.config.capacity_bytes:
        return tier.config.capacity_bytes
    if "domains" in stats:
        seen: dict[int, int] = {}
        for d in stats["domains"]:
            if d.get("total_bytes"):
                with contextlib.suppress(OSError):
                    seen.setdefault(os.stat(d["path"]).st_dev, int(d["total_bytes"]))
        return int(sum(seen.values()) / expansion(tier)) if seen else None
    total = stats.get("total_bytes")
    return int(total) if total else None


@dataclass
class HeatSummary:
    """The decayed heat of a tier's objects, summed up: a Prometheus-style histogram."""

    histogram: dict[str, int]  # cumulative count by `le` bound
    total: float
    count: int

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0


@dataclass
class SlowStats:
    """What the full-scan query found, and when."""

    at: float  # wall-clock time of the scan (shared between processes)
    heats: dict[str, HeatSummary]  # by tier


class StorageView:
    """The numbers both the collector and the status page show, with the slow ones cached."""

    def __init__(
        self, store: ObjectStore, lifecycle: Lifecycle | None = None, ttl: float = SLOW_STATS_TTL
    ) -> None:
        self.store = store
        self.lifecycle = lifecycle
        self.ttl = ttl
        self._slow: SlowStats | None = None
        self._lock = threading.Lock()

    @property
    def half_life(self) -> float:
        return self.lifecycle.settings.temperature.half_life_s if self.lifecycle else 86400.0

    def slow(self) -> SlowStats:
        """Heat per tier: recomputed at most once per `ttl` by one of the processes on the catalog,
        which shares it there (HEAT_SETTING), so that every worker answers the same (blocking)."""
        with self._lock:
            now = time.time()
            if self._slow is not None and now - self._slow.at < self.ttl:
                return self._slow
            shared = self._shared_slow()
            if shared is not None and 0 <= now - shared.at < self.ttl:
                self._slow = shared
                return shared
            catalog, clock_now = self.store.catalog, self.store.clock()
            heats = {}
            for name in self.store.tiers:
                values = [decayed(h, at, clock_now, self.half_life) for h, at in catalog.tier_heats(name)]
                heats[name] = HeatSummary(heat_histogram(values), sum(values), len(values))
            self._slow = SlowStats(now, heats)
            with contextlib.suppress(Exception):  # a catalog hiccup costs the others a scan, nothing more
                catalog.put_setting(HEAT_SETTING, json.dumps(dataclasses.asdict(self._slow)))
            return self._slow

    def _shared_slow(self) -> SlowStats | None:
        try:
            raw = self.store.catalog.get_setting(HEAT_SETTING)
            if raw is None:
                return None
            found = json.loads(raw)
            heats = {name: HeatSummary(**heat) for name, heat in found["heats"].items()}
            return SlowStats(float(found["at"]), heats)
        except Exception:  # noqa: BLE001 - unreadable or of another version: computed anew
            return None

    def tiers(self) -> list[dict[str, Any]]:
        """Per tier: usage, capacity, fill, heat, power and domain counts (blocking)."""
        usage = self.store.catalog.tier_usage()
        slow = self.slow()
        rows = []
        for name, tier in self.store.tiers.items():
            objects, size = usage.get(name, (0, 0))
            stats = tier.backend.stats()
            capacity = tier_capacity(tier, stats)
            heat = slow.heats.get(name) or HeatSummary(heat_histogram([]), 0.0, 0)
            row: dict[str, Any] = {
                "name": name,
                "backend": tier.config.backend,
                "media": tier.media.media,
                "watts_per_tb": tier.media.watts_per_tb,
                "objects": objects,
                "bytes": size,
                "stored_bytes": int(size * expansion(tier)),
                "capacity_bytes": capacity,
                "fill": size / capacity if capacity else None,
                "heat_mean": heat.mean,
                "heat_sum": heat.total,
                "heat_histogram": heat.histogram,
                "power_watts": size * expansion(tier) / 1e12 * tier.media.watts_per_tb,
            }
            if "domains" in stats:
                row.update(
                    k=stats["k"],
                    m=stats["m"],
                    spread_level=stats["spread_level"],
                    domains=len(stats["domains"]),
                    domains_online=stats["online"],
                    heal_queue=stats.get("heal_queue", 0),
                )
            rows.append(row)
        return rows

    def bucket_usage(self) -> dict[tuple[str, str], tuple[int, int]]:
        """(bucket, tier) → (objects, bytes), from the catalog's usage counters (blocking, cheap)."""
        return self.store.catalog.bucket_tier_usage()

    def buckets(
        self, usage: dict[tuple[str, str], tuple[int, int]] | None = None
    ) -> dict[str, dict[str, Any]]:
        """Per bucket: objects, bytes and estimated watts, with the bytes split by tier (blocking).

        `usage`: `bucket_usage()`, if the caller has read it already.
        """
        if usage is None:
            usage = self.bucket_usage()
        out: dict[str, dict[str, Any]] = {}
        for (bucket, tier_name), (n, size) in usage.items():
            entry = out.setdefault(bucket, {"objects": 0, "bytes": 0, "power_watts": 0.0, "tiers": {}})
            entry["objects"] += n
            entry["bytes"] += size
            entry["tiers"][tier_name] = size
            tier = self.store.tiers.get(tier_name)
            if tier is not None:
                entry["power_watts"] += size * expansion(tier) / 1e12 * tier.media.watts_per_tb
        return out


class StorageCollector(Collector):
    """`shared`: what the catalog says (the same in every worker); `local`: this process's own
    figures (heal and rebalance progress, codec, lifecycle daemon and mover), which several
    workers add up through `server.metrics_workers`."""

    def __init__(
        self,
        store: ObjectStore,
        view: StorageView | None = None,
        *,
        shared: bool = True,
        local: bool = True,
        codec: bool = True,
    ) -> None:
        self.store = store
        self.view = view or StorageView(store)
        self.shared = shared
        self.local = local
        self.codec = codec

    def collect(self) -> Iterator[Metric]:
        if self.shared:
            yield from self._tiers()
            yield from self._domains()
            yield from self._nodes()
            yield from self._moves()
            yield GaugeMetricFamily(
                "tierstore_lost_objects",
                "Blobs heal found unrecoverable (fewer than k shards left anywhere): GET answers 410",
                value=len(self.store.catalog.lost_blobs()),  # the catalog's: every process's finding
            )
        if self.local:
            yield from self._heal()
            yield from self._rebalance()
            reads = CounterMetricFamily(
                "tierstore_small_reads",
                "Small GETs by where they were answered: on the event loop, their catalog row and "
                "bytes in memory (at_hand), or in a worker thread (thread)",
                labels=["path"],
            )
            for path in ("at_hand", "thread"):
                reads.add_metric([path], self.store.small_reads[path])
            yield reads
            pages = CounterMetricFamily(
                "tierstore_listing_pages",
                "ListObjects pages by where they came from: read ahead while the client read the "
                "page before (used), read ahead but something changed since (stale), or read by "
                "their request (read); tiering/listing_readahead.py",
                labels=["source"],
            )
            for source, count in self.store.listing.counts.items():
                pages.add_metric([source], count)
            yield pages
            committer = self.store.small_writes
            if committer is not None:
                # Their ratio is how many PUTs one drive flush and one catalog fsync served.
                yield CounterMetricFamily(
                    "tierstore_small_write_batches",
                    "Batches of small PUTs stored and committed together (tiering/small_writes.py)",
                    value=committer.batches,
                )
                yield CounterMetricFamily(
                    "tierstore_small_writes_batched",
                    "Small PUTs stored and committed in those batches",
                    value=committer.writes,
                )
            if self.codec:
                yield from self._codec()
            yield from self._lifecycle()

    def _tiers(self) -> Iterator[Metric]:
        labels = ["tier"]
        objects = GaugeMetricFamily("tierstore_tier_objects", "Objects held by a tier", labels=labels)
        size = GaugeMetricFamily(
            "tierstore_tier_bytes", "Logical bytes of the objects a tier holds", labels=labels
        )
        stored = GaugeMetricFamily(
            "tierstore_tier_stored_bytes",
            "Bytes a tier stores for its objects, parity included",
            labels=labels,
        )
        capacity = GaugeMetricFamily(
            "tierstore_tier_capacity_bytes",
            "Logical bytes a tier may hold (capacity_bytes, else its file systems)",
            labels=labels,
        )
        heat_mean = GaugeMetricFamily(
            "tierstore_tier_heat_mean",
            "Mean decayed access heat of a tier's objects (cached 15 s)",
            labels=labels,
        )
        heat = HistogramMetricFamily(
            "tierstore_tier_heat", "Decayed access heat of a tier's objects (cached 15 s)", labels=labels
        )
        watts = GaugeMetricFamily(
            "tierstore_tier_power_watts",
            "Estimated power of a tier's stored bytes: TB stored x media watts_per_tb",
            labels=labels,
        )
        info = GaugeMetricFamily(
            "tierstore_tier_info",
            "A tier's backend and media (always 1)",
            labels=["tier", "backend", "media"],
        )
        for row in self.view.tiers():
            tier = [row["name"]]
            objects.add_metric(tier, row["objects"])
            size.add_metric(tier, row["bytes"])
            stored.add_metric(tier, row["stored_bytes"])
            if row["capacity_bytes"]:
                capacity.add_metric(tier, row["capacity_bytes"])
            heat_mean.add_metric(tier, row["heat_mean"])
            heat.add_metric(tier, buckets=list(row["heat_histogram"].items()), sum_value=row["heat_sum"])
            watts.add_metric(tier, row["power_watts"])
            info.add_metric([row["name"], row["backend"], row["media"]], 1)
        yield from (objects, size, stored, capacity, heat_mean, heat, watts, info)

    def _domains(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "tierstore_domain_up", "1 if a failure domain is online", labels=["tier", "domain", "node"]
        )
        shards = GaugeMetricFamily(
            "tierstore_domain_shards", "Shard files on a domain", labels=["tier", "domain"]
        )
        used = GaugeMetricFamily(
            "tierstore_domain_used_bytes", "Shard bytes on a domain", labels=["tier", "domain"]
        )
        free = GaugeMetricFamily(
            "tierstore_domain_free_bytes", "Free bytes on a domain's file system", labels=["tier", "domain"]
        )
        health = GaugeMetricFamily(
            "tierstore_domain_state",
            "1 for a drive's write health: normal, full or failing (skipped by placement)",
            labels=["tier", "domain", "state"],
        )
        for d in list_domains(self.store):
            for state in DRIVE_STATES:
                health.add_metric([d["tier"], d["id"], state], 1 if d.get("health", "normal") == state else 0)
            up.add_metric([d["tier"], d["id"], d["node"]], 1 if d["state"] == "online" else 0)
            shards.add_metric([d["tier"], d["id"]], d["shards"])
            used.add_metric([d["tier"], d["id"]], d["used_bytes"])
            if d.get("free_bytes") is not None:
                free.add_metric([d["tier"], d["id"]], d["free_bytes"])
        yield from (up, shards, used, free, health)

    def _nodes(self) -> Iterator[Metric]:
        """Storage nodes registered in the catalog (tiering.nodes): absent on a single-host store."""
        up = GaugeMetricFamily(
            "tierstore_node_up",
            "1 if a storage node's heartbeat is fresh, 0 if it is down",
            labels=["node", "rack", "zone"],
        )
        age = GaugeMetricFamily(
            "tierstore_node_heartbeat_age_seconds",
            "Seconds since a storage node's last heartbeat",
            labels=["node"],
        )
        for n in nodes.node_status(self.store.catalog):
            up.add_metric([n["name"], n.get("rack", ""), n.get("zone", "")], 1 if n["state"] == "up" else 0)
            age.add_metric([n["name"]], n["heartbeat_age"])
        yield from (up, age)

    def _heal(self) -> Iterator[Metric]:
        progress = self.store.maintenance.progress
        yield GaugeMetricFamily(
            "tierstore_degraded_objects", "Blobs known to miss shards", value=len(progress.degraded)
        )
        yield CounterMetricFamily(
            "tierstore_shards_healed", "Shards rebuilt by heal", value=progress.shards_healed
        )
        yield CounterMetricFamily(
            "tierstore_corrupt_blocks_found",
            "Corrupt shard blocks found",
            value=progress.corrupt_blocks_found,
        )
        yield CounterMetricFamily(
            "tierstore_scrub_checked_bytes",
            "Bytes verified by heal/scrub passes",
            value=progress.bytes_checked,
        )
        yield GaugeMetricFamily(
            "tierstore_scrub_running", "1 while a heal/scrub pass runs", value=int(progress.running)
        )
        yield GaugeMetricFamily(
            "tierstore_scrub_checked_blobs",
            "Blobs verified in the current or last pass",
            value=progress.blobs_checked,
        )
        yield GaugeMetricFamily(
            "tierstore_scrub_total_blobs",
            "Blobs to verify in the current or last pass",
            value=progress.blobs_total,
        )
        yield CounterMetricFamily(
            "tierstore_scrub_passes", "Completed heal/scrub passes", value=progress.passes
        )
        queue = GaugeMetricFamily(
            "tierstore_heal_queue", "Heal requests waiting, per erasure-coded tier", labels=["tier"]
        )
        for name, tier in self.store.tiers.items():
            pool = tier.backend.erasure_pool()
            if pool is not None:
                queue.add_metric([name], pool.heal_requests.qsize())
        yield queue

    def _rebalance(self) -> Iterator[Metric]:
        p = self.store.rebalancer.progress
        pending = p.to_json()
        yield GaugeMetricFamily(
            "tierstore_rebalance_running",
            "1 while a rebalance (moves, re-striping) runs",
            value=int(p.running),
        )
        yield GaugeMetricFamily(
            "tierstore_rebalance_shards_pending",
            "Shards the running rebalance still has to move",
            value=pending["shards_pending"],
        )
        yield GaugeMetricFamily(
            "tierstore_rebalance_bytes_pending",
            "Bytes the running rebalance still has to copy",
            value=pending["bytes_pending"],
        )
        yield GaugeMetricFamily(
            "tierstore_rebalance_eta_seconds",
            "Estimated seconds left in the running rebalance",
            value=pending["eta_seconds"] or 0.0,
        )
        yield CounterMetricFamily(
            "tierstore_rebalance_shards_moved", "Shards moved by the rebalancer", value=p.total_shards_moved
        )
        yield CounterMetricFamily(
            "tierstore_rebalance_bytes_moved",
            "Shard bytes copied by the rebalancer",
            value=p.total_bytes_moved,
        )
        yield CounterMetricFamily(
            "tierstore_rebalance_objects_restriped",
            "Objects re-striped with a new code",
            value=p.total_objects_restriped,
        )
        yield CounterMetricFamily(
            "tierstore_rebalance_conflicts",
            "Moves dropped: the blob changed while copying",
            value=p.total_conflicts,
        )
        yield CounterMetricFamily(
            "tierstore_rebalance_failures", "Shard moves or re-stripes that failed", value=p.total_failures
        )
        yield CounterMetricFamily(
            "tierstore_rebalance_passes", "Rebalance passes run by this process", value=p.total_passes
        )

    def _codec(self) -> Iterator[Metric]:
        codec = CounterMetricFamily(
            "tierstore_ec_seconds", "CPU seconds spent in the erasure codec", labels=["op"]
        )
        codec.add_metric(["encode"], CODEC.encode_seconds)
        codec.add_metric(["decode"], CODEC.decode_seconds)
        yield codec
        codec_bytes = CounterMetricFamily(
            "tierstore_ec_bytes", "Bytes through the erasure codec", labels=["op"]
        )
        codec_bytes.add_metric(["encode"], CODEC.encode_bytes)
        codec_bytes.add_metric(["decode"], CODEC.decode_bytes)
        yield codec_bytes

    def _moves(self) -> Iterator[Metric]:
        pair = ["from_tier", "to_tier"]
        moves = CounterMetricFamily(
            "tierstore_lifecycle_transitions", "Objects moved between tiers (catalog)", labels=pair
        )
        moved = CounterMetricFamily(
            "tierstore_lifecycle_transition_bytes", "Bytes moved between tiers (catalog)", labels=pair
        )
        energy = CounterMetricFamily(
            "tierstore_lifecycle_transition_energy_joules",
            "Estimated energy of moves: GB x (source + target media joules per GB)",
            labels=pair,
        )
        tiers = self.store.tiers
        for (src, dst), (n, size) in sorted(self.store.catalog.count_moves().items()):
            moves.add_metric([src, dst], n)
            moved.add_metric([src, dst], size)
            per_gb = sum(
                joules_per_gb(tiers[t].media.media) if t in tiers else DEFAULT_JOULES_PER_GB
                for t in (src, dst)
            )
            energy.add_metric([src, dst], size / 1e9 * per_gb)
        yield from (moves, moved, energy)

    def _lifecycle(self) -> Iterator[Metric]:
        pair = ["from_tier", "to_tier"]
        tiers = self.store.tiers
        lifecycle = self.view.lifecycle
        if lifecycle is None:
            return
        daemon = lifecycle.daemon
        stats = daemon.mover.stats
        yield CounterMetricFamily(
            "tierstore_lifecycle_passes", "Lifecycle daemon passes in this process", value=daemon.passes
        )
        yield GaugeMetricFamily("tierstore_mover_active", "Moves copying now", value=stats.active)
        yield CounterMetricFamily("tierstore_mover_queued", "Moves handed to the mover", value=stats.queued)
        yield CounterMetricFamily(
            "tierstore_mover_skipped", "Moves dropped: the object changed while copying", value=stats.skipped
        )
        yield CounterMetricFamily("tierstore_mover_failed", "Moves that failed", value=stats.failed)
        yield CounterMetricFamily(
            "tierstore_mover_restores", "Archive restores completed", value=stats.restores
        )
        done = CounterMetricFamily(
            "tierstore_mover_moves", "Moves completed by this process's mover", labels=pair
        )
        done_bytes = CounterMetricFamily(
            "tierstore_mover_bytes", "Bytes moved by this process's mover", labels=pair
        )
        for (src, dst), n in sorted(stats.moves.items()):
            done.add_metric([src, dst], n)
            done_bytes.add_metric([src, dst], stats.bytes[(src, dst)])
        yield from (done, done_bytes)
        pending = GaugeMetricFamily(
            "tierstore_mover_pending", "Moves queued or running, by target tier", labels=["tier"]
        )
        for tier in tiers:
            pending.add_metric([tier], daemon.pending_by_tier().get(tier, 0))
        yield pending


class BucketCollector(Collector):
    """Per bucket usage and power: in an unsigned scrape only with `[metrics] per_bucket`.

    Bucket names are the tenants' data (they often name customers and projects), and /metrics
    answers anyone who can reach the port.
    """

    def __init__(self, view: StorageView) -> None:
        self.view = view

    def collect(self) -> Iterator[Metric]:
        objects = GaugeMetricFamily(
            "tierstore_bucket_objects",
            "Objects in a bucket, by tier (cached 15 s)",
            labels=["bucket", "tier"],
        )
        size = GaugeMetricFamily(
            "tierstore_bucket_bytes",
            "Logical bytes in a bucket, by tier (cached 15 s)",
            labels=["bucket", "tier"],
        )
        watts = GaugeMetricFamily(
            "tierstore_bucket_power_watts",
            "Estimated power of a bucket: its stored bytes x watts_per_tb of the tiers holding them",
            labels=["bucket"],
        )
        usage = self.view.bucket_usage()
        buckets = self.view.buckets(usage)
        ranked = sorted(buckets, key=lambda b: buckets[b]["bytes"], reverse=True)
        shown, rest = ranked[:MAX_BUCKET_SERIES], ranked[MAX_BUCKET_SERIES:]
        per_tier: dict[tuple[str, str], list[int]] = {}
        for (bucket, tier), (n, b) in usage.items():
            label = bucket if bucket in shown or not rest else "_other"
            totals = per_tier.setdefault((label, tier), [0, 0])
            totals[0] += n
            totals[1] += b
        for (bucket, tier), (n, b) in sorted(per_tier.items()):
            objects.add_metric([bucket, tier], n)
            size.add_metric([bucket, tier], b)
        for bucket in shown:
            watts.add_metric([bucket], buckets[bucket]["power_watts"])
        if rest:
            watts.add_metric(["_other"], sum(buckets[b]["power_watts"] for b in rest))
        yield from (objects, size, watts)


def _version() -> str:
    try:
        return version("tierstore")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "unknown"


class Metrics:
    """`registry`: what every scrape shows; `bucket_registry`: the per bucket series, added to an
    administrator's scrape, and to every scrape with `per_bucket`."""

    def __init__(
        self, store: ObjectStore, lifecycle: Lifecycle | None = None, *, per_bucket: bool = False
    ) -> None:
        # Under a supervisor the request metrics live in files every worker's scrape adds up, and
        # this process's own figures are mirrored there (server/metrics_workers.py).
        shared_dir = metrics_workers.multiprocess_dir()
        self.registry = metrics_workers.scrape_registry(shared_dir) if shared_dir else CollectorRegistry()
        own = None if shared_dir else self.registry  # where this process's metrics register
        self.bucket_registry = CollectorRegistry()
        self.per_bucket = per_bucket
        self.view = StorageView(store, lifecycle)
        op = ["operation"]
        self.requests = Counter(
            "tierstore_s3_requests",
            "S3 requests by operation and HTTP status",
            ["operation", "status"],
            registry=own,
        )
        self.latency = Histogram(
            "tierstore_s3_request_duration_seconds",
            "Time to the response head, by S3 operation",
            op,
            buckets=LATENCY_BUCKETS,
            registry=own,
        )
        self.received = Counter(
            "tierstore_s3_received_bytes",
            "Request body bytes received, by operation",
            op,
            registry=own,
        )
        self.sent = Counter(
            "tierstore_s3_sent_bytes", "Response body bytes sent, by operation", op, registry=own
        )
        self.first_byte = Histogram(
            "tierstore_s3_time_to_first_byte_seconds",
            "Time to the first body byte of a successful GET",
            op,
            buckets=LATENCY_BUCKETS,
            registry=own,
        )
        # Written once per turn of the event loop, not per request (server/request_tally.py).
        self.tally = RequestTally(self._sync_codec)
        self._request_counts: dict[tuple[str, int], Any] = {}
        self._children: dict[tuple[int, str], Any] = {}
        self.in_flight = InFlight()
        Gauge(
            "tierstore_build_info",
            "The running version (always 1)",
            ["version"],
            registry=own,
            multiprocess_mode="livemax",
        ).labels(_version()).set(1)
        self.started = time.time()
        Gauge(
            "tierstore_start_time_seconds",
            "When this server started (Unix time)",
            registry=own,
            multiprocess_mode="min",
        ).set(self.started)
        process: list[Collector] = []
        with contextlib.suppress(Exception):  # /proc may be absent (macOS): no process metrics then
            process.append(ProcessCollector(registry=None))
        self.mirror: metrics_workers.Mirror | None = None
        self.codec: metrics_workers.CodecCounters | None = None
        if shared_dir:
            self.registry.register(StorageCollector(store, self.view, local=False))
            # Codec work is done by requests: counted with each request's other figures
            # (server/request_tally.py), so that a scrape after a PUT sees it whichever worker answers.
            self.codec = metrics_workers.CodecCounters()
            local = StorageCollector(store, self.view, shared=False, codec=False)
            self.mirror = metrics_workers.Mirror([local, connection_limits.STATS, self.in_flight, *process])
        else:
            collectors = (
                *process,
                StorageCollector(store, self.view),
                connection_limits.STATS,
                self.in_flight,
            )
            for collector in collectors:
                self.registry.register(collector)
        self.bucket_registry.register(BucketCollector(self.view))

    def sync_own(self) -> None:
        """Under a supervisor: this worker's own figures into the shared metrics now (blocking).
        The admin API calls it before answering, so a scrape after an admin command sees it."""
        if self.mirror is not None:
            self.mirror.sync()

    def start_mirror(self) -> asyncio.Task[None] | None:
        """Under a supervisor: mirror this worker's own figures for every worker's scrapes."""
        return asyncio.create_task(self.mirror.run_forever()) if self.mirror else None

    def observe(self, operation: str, status: int, started: float) -> None:
        count = self._request_counts.get((operation, status))
        if count is None:
            count = self._request_counts[operation, status] = self.requests.labels(operation, str(status))
        tally = self.tally
        tally.count(count)
        tally.observe(self.child(self.latency, operation), time.perf_counter() - started)

    def _sync_codec(self) -> None:
        # Codec work is done by requests: counted with their other figures.
        if self.codec is not None:
            self.codec.sync()

    def child(self, metric: Counter | Histogram, operation: str) -> Any:
        """`metric.labels(operation)`, remembered: the same child prometheus_client would return
        (no series is ever removed), without its label checks and lock on every request."""
        key = (id(metric), operation)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(operation)
        return found

    async def endpoint(self, request: Request, *, administrator: bool = False) -> Response:
        """A scrape; per bucket series with `per_bucket` or for an `administrator`."""
        request.state.operation = "Metrics"
        registries = [self.registry]
        if self.per_bucket or administrator:
            registries.append(self.bucket_registry)
        mirror = self.mirror

        self.tally.write()  # this worker's requests of this turn, before anything is read

        def scrape() -> bytes:
            if mirror is not None:
                mirror.sync()  # this worker's own figures as of now; the others' within a second
            return b"".join(generate_latest(r) for r in registries)

        # The collectors read SQLite: off the event loop.
        body = await asyncio.to_thread(scrape)
        return Response(body, media_type=CONTENT_TYPE_LATEST)


class InFlight(Collector):
    """The HTTP requests this process is serving: a plain count, read when scraped (mirrored into
    the shared metrics under a supervisor: server/metrics_workers.py), rather than two locked
    updates of a shared file per request (prometheus_client's multi-process gauge)."""

    def __init__(self) -> None:
        self.count = 0  # changed on the event loop only

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily("tierstore_http_requests_in_flight", "HTTP requests being served")
        family.add_metric([], self.count)
        yield family
