"""The lifecycle daemon: one pass decides where every object should live, the mover makes it so.

A pass (every `interval_seconds`, or on `tierstore admin lifecycle run`):
1. flushes pending access heat, re-reads the clock;
2. scans the catalog in key order and asks the pure policies about each object —
   S3 lifecycle rules (expire / transition), Intelligent-Tiering archive configurations, and
   access temperature for the objects temperature manages;
3. expires restored copies whose time is up and makes the copies that were asked for (of
   current objects during the scan, of noncurrent versions after it);
4. enforces capacity watermarks by moving the coldest managed objects one tier down;
5. aborts incomplete multipart uploads that a rule says are too old;
6. hands all moves to the mover (throttled, copy → verify → compare-and-swap).

Decisions are recomputed from the catalog on every pass, so a restart loses nothing: moves that
were queued or half-copied are simply decided again (half-made copies are swept as orphans).
Only one daemon acts at a time, whichever process it runs in: it holds a lease in the catalog.
A lease whose holder was killed (kill -9) is taken over at the next pass, not after its ttl: the
holder's name lets a process on the same machine prove it dead (tiering.lease_holders, which
also says why two live processes never both hold it). A pass that cannot take the lease reports
who holds it and until when (`tierstore admin lifecycle run --wait` prints it and exits 1).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from lifecycle.facts import ActionKind, ObjectFacts, UploadFacts
from lifecycle.intelligent_tiering import (
    IntelligentTieringConfig,
    ITPolicy,
    it_action,
    parse_intelligent_tiering,
)
from lifecycle.mover import MoveOrder, Mover
from lifecycle.rules import (
    LifecycleConfiguration,
    RuleError,
    noncurrent_action,
    object_action,
    parse_lifecycle,
    removes_lone_marker,
    upload_should_abort,
)
from lifecycle.temperature import (
    TemperaturePolicy,
    Watermarks,
    bytes_to_free,
    coldest_first,
    desired_tier,
    over_high_watermark,
    temperature_managed,
)
from lifecycle.tracker import AccessTracker
from tiering.clock import Clock
from tiering.errors import TieringError
from tiering.lease_holders import describe, holder_is_dead, process_holder
from tiering.records import ObjectRecord
from tiering.store import ObjectStore
from tiering.tiers import COLD, GPU_DIRECT, HOT, TIER_ORDER, WARM, tier_for_storage_class

log = logging.getLogger("tierstore.lifecycle")

LEASE = "lifecycle-daemon"
IT_CONFIG_PREFIX = "intelligent-tiering:"
TEMPERATURE_TAG = "tierstore:temperature"  # bucket tag "off" opts a bucket's unclassified objects out
MAX_PAUSE_SECONDS = 5.0  # a background pass's pause between pages, at most


class _LeaseLost(Exception):
    """Another daemon took the lifecycle lease during a long pass: this pass stops acting."""


ONE_STEP_DOWN = {GPU_DIRECT: HOT, HOT: WARM}  # watermark eviction stays among instantly readable tiers


@dataclass(frozen=True)
class LifecycleSettings:
    enabled: bool = True
    interval_seconds: float = 60.0
    manage_unclassified: bool = True  # objects written without a storage class follow temperature
    temperature: TemperaturePolicy = field(default_factory=TemperaturePolicy)
    intelligent_tiering: ITPolicy = field(default_factory=ITPolicy)
    watermarks: Watermarks = field(default_factory=Watermarks)
    mover_concurrency: int = 4
    mover_bytes_per_second: float = 0.0  # 0: unlimited
    restore_tier: str = WARM
    min_transition_size: int = 0
    scan_batch: int = 500
    # The share of its time a background pass's object scan may spend working; it sleeps the rest,
    # between pages. Unpaced, a pass over a million objects took most of a core, back to back
    # (one every interval): the PUT rate fell by half as the catalog grew (bench/RESULTS.md,
    # "A million small objects"). A pass asked for (`admin lifecycle run`, a restore) runs unpaced.
    scan_share: float = 0.1


@dataclass
class BucketPolicy:
    lifecycle: LifecycleConfiguration | None
    intelligent_tiering: list[IntelligentTieringConfig]
    manage_unclassified: bool


@dataclass
class PassReport:
    started: float = 0.0
    finished: float = 0.0
    scanned: int = 0
    expired: int = 0
    transitions: int = 0
    restores_started: int = 0
    restores_expired: int = 0
    uploads_aborted: int = 0
    watermark_moves: int = 0
    # Versioned buckets: noncurrent versions expired / moved, lone delete markers removed.
    noncurrent_expired: int = 0
    noncurrent_transitions: int = 0
    noncurrent_cooled: int = 0  # noncurrent versions temperature moved (colder, or back to hot)
    markers_removed: int = 0
    # Set when the pass did not run because another live daemon holds the lease.
    skipped: str = ""
    lease_holder: str = ""
    lease_expires: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


class LifecycleDaemon:
    def __init__(
        self, store: ObjectStore, settings: LifecycleSettings, tracker: AccessTracker, clock: Clock
    ) -> None:
        self.store = store
        self.settings = settings
        self.tracker = tracker
        self.clock = clock
        self.mover = Mover(
            store, concurrency=settings.mover_concurrency, bytes_per_second=settings.mover_bytes_per_second
        )
        self.holder = process_holder(f"{id(self):x}")
        self.lease_blocked_by: tuple[str, float] | None = None  # (holder, expires) when last turned away
        self.last_pass: PassReport | None = None
        self.passes = 0
        self._task: asyncio.Task[None] | None = None
        self._running: asyncio.Task[PassReport] | None = None
        self._queued = False  # `_running` is waiting for the pass before it to finish
        self._wakeup = asyncio.Event()
        # May the pass now scanning pause between pages, and the one queued behind it? Not once a
        # caller that does not want pauses waits for either (it waits for both).
        self._pace_current = False
        self._pace_next = False
        self._unpaced = asyncio.Event()  # set when the current pass stops pacing: ends a pause early
        self._renewed = 0.0  # when the running pass last took or renewed the lease (monotonic)

    # --- running ------------------------------------------------------------------------------

    async def start(self) -> None:
        if self.settings.enabled:
            self._task = asyncio.create_task(self._loop())

    async def close(self) -> None:
        tasks = [t for t in (self._task, self._running) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self.store.catalog.release_lease, LEASE, self.holder)

    def wake(self) -> None:
        """Run a pass soon (a restore was requested, say) instead of waiting for the interval: an
        unpaced one, and the one under way stops pausing."""
        self._set_pace_current(False)
        self._wakeup.set()

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), self.settings.interval_seconds)
            woken = self._wakeup.is_set()
            self._wakeup.clear()
            try:
                await self.run_pass(paced=not woken)
            except Exception:
                log.exception("lifecycle pass failed")

    async def _take_lease(self) -> bool:
        """Take or renew the lease; take it over from a holder that provably died. Remembers who
        holds it when it cannot."""
        ttl = self._lease_ttl()
        catalog = self.store.catalog

        def take() -> bool:
            now = time.time()
            if catalog.acquire_lease(LEASE, self.holder, ttl, now):
                self.lease_blocked_by = None
                return True
            held = catalog.lease(LEASE, now)
            if held is not None and holder_is_dead(held[0]):
                log.warning(
                    "the lifecycle lease was held by %s, which is no longer running: taking it over", held[0]
                )
                if catalog.acquire_lease(LEASE, self.holder, ttl, now, replacing=held[0]):
                    self.lease_blocked_by = None
                    return True
                held = catalog.lease(LEASE, now)
            self.lease_blocked_by = held
            return held is None and catalog.acquire_lease(LEASE, self.holder, ttl, now)  # it just ran out

        return await asyncio.to_thread(take)

    def _lease_ttl(self) -> float:
        return max(3 * self.settings.interval_seconds, 60.0)

    def _set_pace_current(self, paced: bool) -> None:
        self._pace_current = paced
        if paced:
            self._unpaced.clear()
        else:
            self._unpaced.set()  # a caller waits for this pass: a pause under way ends now

    async def _between_pages(self, page_started: float) -> None:
        """After a page of any of a pass's scans (objects, versions, markers): pause if the pass is
        paced, and renew the lease of a long pass; _LeaseLost if another daemon has taken it."""
        await self._pause(page_started)
        if time.monotonic() - self._renewed > self._lease_ttl() / 3:
            if not await self._take_lease():
                raise _LeaseLost()
            self._renewed = time.monotonic()

    async def _pause(self, page_started: float) -> None:
        """After a page of a background pass: sleep so that the scan works `scan_share` of the time,
        unless (or until) a caller that waits for this pass arrives."""
        share = self.settings.scan_share
        if not self._pace_current or share >= 1:
            return
        worked = time.monotonic() - page_started
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._unpaced.wait(), min(worked * (1 - share) / share, MAX_PAUSE_SECONDS))

    def run_pass(self, *, paced: bool = False) -> asyncio.Task[PassReport]:
        """A pass that starts no earlier than this call: started now, or queued behind a running one.

        Joining a pass already under way is not enough: it may have scanned past an object the
        caller just changed (a restore requested, a rule put), and `lifecycle run --wait` promises
        a pass that sees the caller's changes. Callers that arrive while one is queued share it.

        `paced` (the background passes): the scan pauses between pages (`scan_share`) unless a
        caller that is not paced waits for this pass or the one after it.
        """
        if self._running is None or self._running.done():
            self._set_pace_current(paced)
            self._running = asyncio.create_task(self._pass())
            self._queued = False
        elif not self._queued:
            previous = self._running
            self._set_pace_current(self._pace_current and paced)
            self._pace_next = paced

            async def after_previous() -> PassReport:
                with contextlib.suppress(Exception):
                    await previous
                self._queued = False  # from here on it scans: a later caller needs a later pass
                self._set_pace_current(self._pace_next)
                return await self._pass()

            self._running = asyncio.create_task(after_previous())
            self._queued = True
        elif not paced:  # joins the queued pass, and waits for the current one first
            self._set_pace_current(False)
            self._pace_next = False
        return self._running

    # --- one pass -----------------------------------------------------------------------------

    async def _bucket_policy(self, bucket: str, cache: dict[str, BucketPolicy]) -> BucketPolicy:
        if bucket in cache:
            return cache[bucket]
        catalog = self.store.catalog
        raw = await asyncio.to_thread(catalog.get_bucket_config, bucket, "lifecycle")
        lifecycle = None
        if raw:
            try:
                lifecycle = parse_lifecycle(raw.encode())
            except RuleError:
                log.warning("bucket %s has an unreadable lifecycle configuration", bucket)
        configs = []
        for _, value in await asyncio.to_thread(catalog.bucket_configs_with_prefix, bucket, IT_CONFIG_PREFIX):
            with contextlib.suppress(Exception):
                configs.append(parse_intelligent_tiering(value.encode()))
        manage = self.settings.manage_unclassified
        tags_raw = await asyncio.to_thread(catalog.get_bucket_config, bucket, "tagging")
        if tags_raw and TEMPERATURE_TAG in tags_raw:
            manage = json.loads(tags_raw).get(TEMPERATURE_TAG, "on").lower() != "off"
        cache[bucket] = BucketPolicy(lifecycle, configs, manage)
        return cache[bucket]

    @staticmethod
    def facts(record: ObjectRecord) -> ObjectFacts:
        return ObjectFacts(
            key=record.key,
            size=record.size,
            tags=record.meta.tags,
            storage_class=record.meta.storage_class,
            tier=record.tier,
            created=record.last_modified,
            last_access=record.last_access,
            heat=record.heat,
            heat_at=record.heat_at,
            storage_class_explicit=record.meta.storage_class_explicit,
        )

    def _managed(self, record: ObjectRecord, policy: BucketPolicy, facts: ObjectFacts | None = None) -> bool:
        """Heat and watermarks may move it (lifecycle.temperature.temperature_managed)."""
        return temperature_managed(
            facts if facts is not None else self.facts(record), policy.manage_unclassified
        )

    def _decide(
        self, record: ObjectRecord, policy: BucketPolicy, now: float, facts: ObjectFacts | None = None
    ) -> tuple[str, str, str | None, str | None] | str | None:
        """("move", tier, storage class, reason) as a tuple, "expire", or None to leave it.
        `facts`: `self.facts(record)`, if the caller has them (a pass builds them once per object)."""
        facts = facts if facts is not None else self.facts(record)
        if policy.lifecycle is not None:
            action = object_action(
                policy.lifecycle, facts, now, min_transition_size=self.settings.min_transition_size
            )
            if action is not None and action.kind is ActionKind.EXPIRE:
                return "expire"
            if action is not None and action.storage_class:
                tier = tier_for_storage_class(action.storage_class)
                # Data that temperature already put on the target tier still takes the rule's class.
                changed = tier != record.tier or action.storage_class != record.meta.storage_class
                if changed and tier in self.store.tiers:
                    return ("move", tier, action.storage_class, f"lifecycle:{action.rule_id}")
        if record.tier == COLD:
            return None  # only a restore reads archived data; temperature never touches it
        if record.meta.storage_class == "INTELLIGENT_TIERING":
            if record.size < self.settings.intelligent_tiering.min_monitored_size:
                return None  # not monitored (AWS: under 128 KiB): always frequent access, never demoted
            action = it_action(policy.intelligent_tiering, facts, now, self.settings.intelligent_tiering)
            if action is not None and action.storage_class:
                tier = tier_for_storage_class(action.storage_class)
                if tier != record.tier and tier in self.store.tiers:
                    return ("move", tier, None, f"intelligent-tiering:{action.reason or action.rule_id}")
            if record.tier == WARM and record.last_access > record.tier_since:
                # Any access brings an Intelligent-Tiering object back to frequent access.
                return ("move", HOT, None, "intelligent-tiering:accessed")
        if self._managed(record, policy, facts):
            wanted = desired_tier(facts, self.settings.temperature, now)
            if wanted is not None and wanted != record.tier and wanted in self.store.tiers:
                return ("move", wanted, None, "temperature")
        return None

    async def _pass(self) -> PassReport:
        report = PassReport(started=time.time())
        if not await self._take_lease():
            holder, expires = self.lease_blocked_by or ("", 0.0)
            report.lease_holder, report.lease_expires = holder, expires
            report.skipped = (
                f"the lifecycle lease is held by {describe(holder)} ({holder}) until "
                f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(expires))} "
                f"({max(expires - time.time(), 0):.0f}s from now)"
            )
            log.info("another lifecycle daemon holds the lease; skipping this pass: %s", report.skipped)
            report.finished = time.time()
            return report
        self._renewed = time.monotonic()
        try:
            await self._scan_and_act(report)
        except _LeaseLost:
            report.skipped = "the lifecycle lease was lost during the pass"
            log.warning("%s; its holder's passes go on", report.skipped)
            report.finished = time.time()
            return report
        report.finished = time.time()
        self.last_pass = report
        self.passes += 1
        return report

    async def _scan_and_act(self, report: PassReport) -> None:
        await asyncio.to_thread(self.clock.reload)
        await self.tracker.flush()
        now = self.clock()
        policies: dict[str, BucketPolicy] = {}
        usage = await asyncio.to_thread(self.store.catalog.tier_usage)
        orders: list[MoveOrder] = []
        incoming: dict[str, int] = defaultdict(int)
        outgoing: dict[str, int] = defaultdict(int)
        # Watermark eviction candidates per tier: (record, noncurrent?).
        candidates: dict[str, list[tuple[ObjectRecord, bool]]] = defaultdict(list)
        cursor = ("", "")
        while True:
            page_started = time.monotonic()
            batch = await self.store.objects_after(*cursor, self.settings.scan_batch)
            if not batch:
                break
            cursor = (batch[-1].bucket, batch[-1].key)
            for record in batch:
                report.scanned += 1
                policy = await self._bucket_policy(record.bucket, policies)
                await self._restores(record, now, report)
                facts = self.facts(record)
                decision = self._decide(record, policy, now, facts)
                if decision == "expire":
                    if await self._expire(record):
                        report.expired += 1
                    continue
                if isinstance(decision, tuple):
                    _, tier, storage_class, reason = decision
                    if tier == GPU_DIRECT and not self._fits(
                        GPU_DIRECT, record.size, usage, incoming, outgoing
                    ):
                        continue
                    orders.append(
                        MoveOrder(
                            record.bucket,
                            record.key,
                            tier,
                            reason or "",
                            record.generation,
                            record.size,
                            storage_class,
                        )
                    )
                    incoming[tier] += record.size
                    outgoing[record.tier] += record.size
                elif self._managed(record, policy, facts) and record.tier in ONE_STEP_DOWN:
                    candidates[record.tier].append((record, False))
            await self._between_pages(page_started)
        await self._version_restores(now, report)
        pressed = self._tiers_over_high(usage, incoming, outgoing)
        if pressed:
            await self._noncurrent_candidates(pressed, policies, now, candidates)
        report.watermark_moves = self._watermark_orders(orders, candidates, usage, incoming, outgoing, now)
        report.transitions = len(orders)
        report.uploads_aborted = await self._abort_uploads(policies, now)
        await self.mover.run(orders)
        await self._versions(policies, now, report)

    def _noncurrent_tier(self, record: ObjectRecord, policy: BucketPolicy, now: float) -> str | None:
        """The tier temperature sends a noncurrent version to, or None.

        A noncurrent version follows temperature like a current object without a class (same
        policy, same bucket opt-out, classed versions stay on their class's tier), judged by its
        own heat and last access: reads by versionId warm that version (lifecycle.tracker). It
        never goes to gpu-direct, whose room the watermarks keep for current objects: where
        temperature would send it there, it goes to hot."""
        if record.tier == COLD or not self._managed(record, policy):
            return None
        wanted = desired_tier(self.facts(record), self.settings.temperature, now)
        if wanted == GPU_DIRECT:
            wanted = HOT
        if wanted is None or wanted == record.tier or wanted not in self.store.tiers:
            return None
        return wanted

    async def _versions(self, policies: dict[str, BucketPolicy], now: float, report: PassReport) -> None:
        """Noncurrent versions (rules, then temperature) and lone delete markers of every bucket.

        Every bucket is looked at, not only those the object scan met: a bucket whose keys were
        all deleted holds only markers and noncurrent versions."""
        for bucket in await self.store.list_buckets():
            policy = await self._bucket_policy(bucket.name, policies)
            config = policy.lifecycle
            if config is not None and not any(r.enabled and r.acts_on_versions for r in config.rules):
                config = None  # no rule acts on versions: only temperature may move them
            cursor: tuple[str, int] | None = None
            while True:
                page_started = time.monotonic()
                batch, cursor = await asyncio.to_thread(
                    self.store.catalog.noncurrent_versions, bucket.name, cursor, self.settings.scan_batch
                )
                for version in batch:
                    record = version.record
                    action = None
                    if config is not None:
                        action = noncurrent_action(
                            config,
                            self.facts(record),
                            version.noncurrent_since,
                            version.newer_noncurrent,
                            now,
                        )
                    if action is None:
                        await self._cool_version(bucket.name, record, policy, now, report)
                        continue
                    try:
                        if action.kind is ActionKind.EXPIRE:
                            await self.store.delete_version(bucket.name, record.key, record.version_id)
                            report.noncurrent_expired += 1
                        elif action.storage_class:
                            tier = tier_for_storage_class(action.storage_class)
                            if tier in self.store.tiers and tier != record.tier:
                                moved = await self.store.move_version(
                                    bucket.name,
                                    record.key,
                                    record.version_id,
                                    tier,
                                    storage_class=action.storage_class,
                                    expected_generation=record.generation,
                                )
                                report.noncurrent_transitions += moved is not None
                    except TieringError:
                        log.warning(
                            "lifecycle could not act on %s/%s version %s",
                            bucket.name,
                            record.key,
                            record.version_id,
                        )
                await self._between_pages(page_started)
                if cursor is None:
                    break
            if config is not None:
                await self._lone_markers(bucket.name, config, report)

    async def _cool_version(
        self, bucket: str, record: ObjectRecord, policy: BucketPolicy, now: float, report: PassReport
    ) -> None:
        """Move a noncurrent version where its temperature says (keeping its class), through
        the same compare-and-swap on its generation as a rule's move: a version that became
        current, changed or was deleted meanwhile is left as it is."""
        tier = self._noncurrent_tier(record, policy, now)
        if tier is None:
            return
        try:
            moved = await self.store.move_version(
                bucket,
                record.key,
                record.version_id,
                tier,
                storage_class=record.meta.storage_class,
                expected_generation=record.generation,
            )
        except TieringError:
            log.warning("lifecycle could not cool %s/%s version %s", bucket, record.key, record.version_id)
            return
        report.noncurrent_cooled += moved is not None

    async def _lone_markers(self, bucket: str, config: LifecycleConfiguration, report: PassReport) -> None:
        """ExpiredObjectDeleteMarker: a delete marker with no version left behind it goes."""
        if not any(r.enabled and r.expired_object_delete_marker for r in config.rules):
            return
        after: str | None = ""
        while after is not None:
            page_started = time.monotonic()
            markers, after = await asyncio.to_thread(
                self.store.catalog.lone_delete_markers, bucket, after, self.settings.scan_batch
            )
            for key, version_id in markers:
                if removes_lone_marker(config, key) is not None:
                    with contextlib.suppress(TieringError):
                        await self.store.delete_version(bucket, key, version_id)
                        report.markers_removed += 1
            await self._between_pages(page_started)

    async def _restores(self, record: ObjectRecord, now: float, report: PassReport) -> None:
        restore = record.restore
        if restore is None:
            return
        if restore.ongoing:
            report.restores_started += 1
            tier = self.settings.restore_tier if self.settings.restore_tier in self.store.tiers else HOT
            await self.mover.restore(record, tier)
        elif restore.expiry <= now:
            await self.store.expire_restore(record)
            report.restores_expired += 1

    async def _version_restores(self, now: float, report: PassReport) -> None:
        """Restores of noncurrent versions (RestoreObject with a versionId): copies to make and
        copies whose time is up, found through the catalog's index of exactly those versions
        rather than a scan of every version. The copy belongs to the version: the key's current
        version is not touched."""
        cursor = ("", "", "")
        while True:
            batch = await self.store.restored_versions(cursor, self.settings.scan_batch)
            for record in batch:
                await self._restores(record, now, report)
            if len(batch) < self.settings.scan_batch:
                return
            last = batch[-1]
            cursor = (last.bucket, last.key, last.version_id)

    async def _expire(self, record: ObjectRecord) -> bool:
        try:
            return await self.store.delete_object_if(record.bucket, record.key, record.generation)
        except TieringError:
            return False

    def _capacity(self, tier: str) -> int | None:
        config = self.store.tiers[tier].config
        return config.capacity_bytes

    def _fits(
        self,
        tier: str,
        size: int,
        usage: dict[str, tuple[int, int]],
        incoming: dict[str, int],
        outgoing: dict[str, int],
    ) -> bool:
        capacity = self._capacity(tier)
        if not capacity:
            return True
        used = usage.get(tier, (0, 0))[1] + incoming[tier] - outgoing[tier]
        return used + size <= capacity * self.settings.watermarks.high

    def _tiers_over_high(
        self, usage: dict[str, tuple[int, int]], incoming: dict[str, int], outgoing: dict[str, int]
    ) -> set[str]:
        """Tiers watermark eviction will act on this pass (above the high watermark after the
        moves already decided, with a tier below to shed to)."""
        pressed = set()
        for tier in TIER_ORDER:
            capacity = self._capacity(tier)
            lower = ONE_STEP_DOWN.get(tier)
            if not capacity or lower is None or lower not in self.store.tiers:
                continue
            used = usage.get(tier, (0, 0))[1] + incoming[tier] - outgoing[tier]
            if over_high_watermark(used, capacity, self.settings.watermarks):
                pressed.add(tier)
        return pressed

    async def _noncurrent_candidates(
        self,
        tiers: set[str],
        policies: dict[str, BucketPolicy],
        now: float,
        candidates: dict[str, list[tuple[ObjectRecord, bool]]],
    ) -> None:
        """Noncurrent versions on a tier over its high watermark join its eviction candidates:
        they hold bytes there like current objects (the usage counters count them) and are often
        the coldest data on it. Only a version nothing else moves this pass is a candidate: one
        that temperature may move (same rule as a current object: not classed, bucket not opted
        out), that no lifecycle rule acts on now and that temperature leaves where it is (those
        are moved by `_versions`). One scan of the noncurrent versions, and only under pressure."""
        for bucket in await self.store.list_buckets():
            policy = await self._bucket_policy(bucket.name, policies)
            config = policy.lifecycle
            if config is not None and not any(r.enabled and r.acts_on_versions for r in config.rules):
                config = None
            cursor: tuple[str, int] | None = None
            while True:
                page_started = time.monotonic()
                batch, cursor = await asyncio.to_thread(
                    self.store.catalog.noncurrent_versions, bucket.name, cursor, self.settings.scan_batch
                )
                for version in batch:
                    record = version.record
                    if record.tier not in tiers or not self._managed(record, policy):
                        continue
                    if config is not None and noncurrent_action(
                        config, self.facts(record), version.noncurrent_since, version.newer_noncurrent, now
                    ):
                        continue
                    if self._noncurrent_tier(record, policy, now) is None:
                        candidates[record.tier].append((record, True))
                await self._between_pages(page_started)
                if cursor is None:
                    break

    def _watermark_orders(
        self,
        orders: list[MoveOrder],
        candidates: dict[str, list[tuple[ObjectRecord, bool]]],
        usage: dict[str, tuple[int, int]],
        incoming: dict[str, int],
        outgoing: dict[str, int],
        now: float,
    ) -> int:
        """Above the high watermark, move the coldest managed objects and noncurrent versions one
        tier down to the low one."""
        added = 0
        for tier in TIER_ORDER:
            capacity = self._capacity(tier)
            lower = ONE_STEP_DOWN.get(tier)
            if not capacity or lower is None or lower not in self.store.tiers:
                continue
            used = usage.get(tier, (0, 0))[1] + incoming[tier] - outgoing[tier]
            if not over_high_watermark(used, capacity, self.settings.watermarks):
                continue  # between the watermarks nothing moves: that gap is what keeps tiers from flapping
            need = bytes_to_free(used, capacity, self.settings.watermarks)
            # One entry per version: a key's current object and its noncurrent versions are apart.
            by_version = {
                (r.bucket, r.key, r.version_id, old): (r, old) for r, old in candidates.get(tier, [])
            }
            facts = {id(f): (r, old, f) for r, old in by_version.values() for f in [self.facts(r)]}
            ordered = coldest_first(
                [f for _, _, f in facts.values()], now, self.settings.temperature.half_life_s
            )
            for fact in ordered:
                if need <= 0:
                    break
                record, noncurrent = facts[id(fact)][:2]
                orders.append(
                    MoveOrder(
                        record.bucket,
                        record.key,
                        lower,
                        "watermark",
                        record.generation,
                        record.size,
                        # A noncurrent version keeps its class, as temperature's moves of it do.
                        record.meta.storage_class if noncurrent else None,
                        record.version_id if noncurrent else None,
                    )
                )
                need -= record.size
                outgoing[tier] += record.size
                incoming[lower] += record.size
                added += 1
        return added

    async def _abort_uploads(self, policies: dict[str, BucketPolicy], now: float) -> int:
        aborted = 0
        uploads = await asyncio.to_thread(self.store.catalog.uploads_before, now, 10_000)
        for upload in uploads:
            policy = await self._bucket_policy(upload.bucket, policies)
            if policy.lifecycle is None:
                continue
            if upload_should_abort(policy.lifecycle, UploadFacts(upload.key, upload.initiated), now):
                with contextlib.suppress(TieringError):
                    await self.store.abort_upload(upload.bucket, upload.key, upload.upload_id)
                    aborted += 1
        return aborted

    def pending_by_tier(self) -> dict[str, int]:
        return dict(self.mover.pending)

    def status(self) -> dict[str, Any]:
        stats = self.mover.stats
        return {
            "enabled": self.settings.enabled,
            "passes": self.passes,
            "last_pass": self.last_pass.to_json() if self.last_pass else None,
            "running": self._running is not None and not self._running.done(),
            "lease": {"holder": self.lease_blocked_by[0], "expires": self.lease_blocked_by[1], "ours": False}
            if self.lease_blocked_by
            else None,
            "mover": {
                "queued": stats.queued,
                "active": stats.active,
                "skipped": stats.skipped,
                "failed": stats.failed,
                "restores": stats.restores,
                "moves": [
                    {"from": f, "to": t, "count": n, "bytes": stats.bytes[(f, t)]}
                    for (f, t), n in sorted(stats.moves.items())
                ],
            },
            "clock": {
                "now": self.clock(),
                "offset_seconds": self.clock.offset,
                "adjustable": self.clock.adjustable,
            },
        }
