"""Prometheus metrics at /_tierstore/metrics.

Request metrics are counted as requests finish; everything about storage (tiers, domains, heal,
codec) is read from the live objects at scrape time by one collector, so there is no second copy
of that state to drift. Label sets are bounded: S3 operation names, tier and domain ids — never
a bucket or key.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response

from erasure.stats import CODEC
from tiering.domains import list_domains

if TYPE_CHECKING:
    from tiering.store import ObjectStore

# From 100 µs (a gpu-direct hit) to a minute (a cold read or a multi-GiB upload).
LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
    10.0, 30.0, 60.0,
)  # fmt: skip


class StorageCollector(Collector):
    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        store = self.store
        usage = store.catalog.tier_usage()
        objects = GaugeMetricFamily("tierstore_tier_objects", "Objects held by a tier", labels=["tier"])
        size = GaugeMetricFamily("tierstore_tier_bytes", "Logical bytes of the objects a tier holds", labels=["tier"])
        for tier in store.tiers:
            n, b = usage.get(tier, (0, 0))
            objects.add_metric([tier], n)
            size.add_metric([tier], b)
        yield objects
        yield size

        up = GaugeMetricFamily("tierstore_domain_up", "1 if a failure domain is online", labels=["tier", "domain", "node"])
        shards = GaugeMetricFamily("tierstore_domain_shards", "Shard files on a domain", labels=["tier", "domain"])
        used = GaugeMetricFamily("tierstore_domain_used_bytes", "Shard bytes on a domain", labels=["tier", "domain"])
        for d in list_domains(store):
            up.add_metric([d["tier"], d["id"], d["node"]], 1 if d["state"] == "online" else 0)
            shards.add_metric([d["tier"], d["id"]], d["shards"])
            used.add_metric([d["tier"], d["id"]], d["used_bytes"])
        yield up
        yield shards
        yield used

        progress = store.maintenance.progress
        yield GaugeMetricFamily("tierstore_degraded_objects", "Blobs known to miss shards", value=len(progress.degraded))
        yield GaugeMetricFamily("tierstore_lost_objects", "Blobs with fewer than k good shards", value=len(progress.lost))
        yield CounterMetricFamily("tierstore_shards_healed", "Shards rebuilt by heal", value=progress.shards_healed)
        yield CounterMetricFamily("tierstore_corrupt_blocks_found", "Corrupt shard blocks found",
                                  value=progress.corrupt_blocks_found)
        yield GaugeMetricFamily("tierstore_scrub_running", "1 while a heal/scrub pass runs", value=int(progress.running))
        yield GaugeMetricFamily("tierstore_scrub_checked_blobs", "Blobs verified in the current or last pass",
                                value=progress.blobs_checked)
        yield GaugeMetricFamily("tierstore_scrub_total_blobs", "Blobs to verify in the current or last pass",
                                value=progress.blobs_total)
        yield CounterMetricFamily("tierstore_scrub_passes", "Completed heal/scrub passes", value=progress.passes)

        codec = CounterMetricFamily("tierstore_ec_seconds", "CPU seconds spent in the erasure codec", labels=["op"])
        codec.add_metric(["encode"], CODEC.encode_seconds)
        codec.add_metric(["decode"], CODEC.decode_seconds)
        yield codec
        codec_bytes = CounterMetricFamily("tierstore_ec_bytes", "Bytes through the erasure codec", labels=["op"])
        codec_bytes.add_metric(["encode"], CODEC.encode_bytes)
        codec_bytes.add_metric(["decode"], CODEC.decode_bytes)
        yield codec_bytes


class Metrics:
    def __init__(self, store: ObjectStore) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "tierstore_s3_requests", "S3 requests by operation and HTTP status", ["operation", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "tierstore_s3_request_duration_seconds", "Time to the response head, by S3 operation", ["operation"],
            buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self.registry.register(StorageCollector(store))

    def observe(self, operation: str, status: int, started: float) -> None:
        self.requests.labels(operation, str(status)).inc()
        self.latency.labels(operation).observe(time.perf_counter() - started)

    async def endpoint(self, request: Request) -> Response:
        body = await asyncio.to_thread(generate_latest, self.registry)  # the collector reads SQLite
        return Response(body, media_type=CONTENT_TYPE_LATEST)
