"""Growing, draining and re-coding erasure-coded tiers while they serve: topology in the catalog,
and the rebalancer that moves data to where placement wants it.

Topology. The catalog's `domains` table holds every failure domain with its status (active |
draining | removed). Config-declared domains are seeded into it at start; domains added at runtime
(`tierstore admin domain add`) are loaded from it at start and added to the pool's Topology at
once. A tier's code (k, m) after `tierstore admin tier recode` is the setting `tier_code:<tier>`.
A change bumps the setting `topology_version`, which every process on the catalog follows.

Rebalancing. A request (add, drain, recode, `tierstore admin rebalance`) is recorded in the
catalog (setting `rebalance_requested`); one process at a time — the holder of the lease
"rebalancer" — runs passes until one finds nothing to do, then records `rebalance_done`. A
restart resumes: it recomputes everything from the catalog. Each pass, per tier:
1. re-stripes objects written with an older code (`ObjectStore.restripe_object`: copy with the
   new code → verify → compare-and-swap on the generation → old data retired by the collector);
2. moves exactly the shards whose rendezvous placement changed (`erasure.rebalance.plan_moves`):
   copy the shard file to its target domain, verify every block, compare-and-swap the blob's
   location (`Catalog.relocate_blob_if`; a concurrent heal or overwrite wins and the copy is
   dropped), and retire the old file after the read grace.

Retiring shard files. A reader that looked the old location up just before the swap must still
find the file, so moved-away files go to the catalog's `shard_garbage` table and are deleted
`RETIRE_GRACE_SECONDS` later — unless the blob's location names that file again by then (it
moved back). A copy is registered there *before* it is made (due in an hour), so a crash between
copy and swap leaves nothing behind for good.

Draining. `drain --wait` answers only when `remove` will succeed (`wait_drained`): the run is done,
no writer of any process still writes shards it placed on the domain before it began draining
(this process's counted here; every other live process — a worker of this gateway, another
gateway, a lifecycle process, on any host — publishes its own in the catalog once it has taken up
the drain, and counts as one writer until then: `Rebalancer.writers_on`), no live blob names the
domain (one committed after a run's last scan gets another run), and the files retired from it
have outlived the readers' grace and been collected.

Throttled by bytes/s (a `Throttle` the server builds from [rebalance] bytes_per_second) and by
`concurrency` blobs at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from erasure import ErasureError, ErasurePool
from erasure import rebalance as placement
from erasure.location import Location, names_shard
from erasure.stripe import StripeLayout
from erasure.topology import Domain
from tiering.backend import BackendError, StoredData
from tiering.catalog import RETIRE_GRACE_SECONDS, Catalog
from tiering.domains import UnknownDomain, erasure_pools
from tiering.errors import TieringError
from tiering.lease_holders import holder_is_dead, process_holder

if TYPE_CHECKING:
    from tiering.store import ObjectStore

log = logging.getLogger("tierstore.rebalance")

T = TypeVar("T")

Throttle = Callable[[int], Awaitable[None]]

LEASE = "rebalancer"
LEASE_TTL = 30.0
LOOP_INTERVAL = 0.5
PUBLISH_INTERVAL = 1.0
SCAN_BATCH = 256
MAX_PASSES = 20
WAIT_LIMIT = 3600.0  # `--wait` gives up (an error) after this long
MAX_FRUITLESS_DRAIN_RUNS = 3  # `drain --wait` gives up after this many runs that moved nothing off
INTENT_DELAY = 3600.0  # a copy not recorded in a location by then is an orphan
OFFLINE_RETRY_SECONDS = 5.0  # a shard file to retire on an offline drive: tried again this much later
REQUESTED, DONE, PROGRESS = "rebalance_requested", "rebalance_done", "rebalance_progress"
TOPOLOGY_VERSION = "topology_version"
CODE_PREFIX = "tier_code:"
# + a process id (tiering.peers): the domains that process takes as draining, and how many of its
# writes still write shards there (`Rebalancer._publish_writers`, read by `writers_on`).
WRITERS_PREFIX = "draining_writers:"
STATUSES = ("active", "draining", "removed")
_DOMAIN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class RebalanceRefused(TieringError):
    """An operator's topology change that cannot be done (now); `code` names it for the admin API."""

    code = "InvalidRequest"
    status = 400


class DomainNotEmpty(RebalanceRefused):
    code = "DomainNotEmpty"
    status = 409


class DrainIncomplete(RebalanceRefused):
    code = "DrainIncomplete"
    status = 409


class UnknownTier(RebalanceRefused):
    code = "NoSuchTier"
    status = 404


@dataclass
class RebalanceSettings:
    """[rebalance] keys (server/config.py reads and validates them)."""

    bytes_per_second: float = 0.0  # 0: unlimited
    concurrency: int = 4  # blobs moved (or objects re-striped) at once
    # A run starts once the last request is this old: an operator adding several drives one by one
    # gets one rebalance to the final topology, not a cascade of moves to intermediate ones.
    settle_seconds: float = 2.0


@dataclass
class RebalanceProgress:
    """The current (or last) run; `admin rebalance status` and the tierstore_rebalance_* metrics."""

    running: bool = False
    state: str = "idle"  # idle | planning | restriping | moving | done | stalled
    passes: int = 0
    started: float | None = None
    finished: float | None = None
    shards_scanned: int = 0  # readable shards looked at by the first pass of this run
    shards_planned: int = 0  # shards to move, planned by the passes of this run
    bytes_planned: int = 0
    shards_moved: int = 0
    bytes_moved: int = 0
    objects_planned: int = 0  # objects to re-stripe with the tier's new code
    objects_restriped: int = 0
    bytes_restriped: int = 0
    conflicts: int = 0  # a heal or an overwrite changed the blob while we copied: copy dropped
    failures: int = 0
    blocked: int = 0  # misplaced shards whose source or target is offline now (last pass)
    unplaceable: int = 0  # misplaced shards with no free desired group (last pass)
    first_pass_fraction: float | None = None  # shards planned / shards scanned in the first pass
    # Lifetime counters of this process (metrics).
    total_shards_moved: int = 0
    total_bytes_moved: int = 0
    total_objects_restriped: int = 0
    total_conflicts: int = 0
    total_failures: int = 0
    total_passes: int = 0
    per_tier: dict[str, dict[str, int]] = field(default_factory=dict)

    def remaining_bytes(self) -> int:
        return max(self.bytes_planned - self.bytes_moved, 0) + max(
            self.per_tier_restripe_bytes() - self.bytes_restriped, 0
        )

    def per_tier_restripe_bytes(self) -> int:
        return sum(t.get("restripe_bytes", 0) for t in self.per_tier.values())

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        elapsed = (
            (self.finished if not self.running and self.finished else time.time()) - self.started
            if self.started
            else 0.0
        )
        done = self.bytes_moved + self.bytes_restriped
        rate = done / elapsed if elapsed > 0 else 0.0
        out["elapsed_seconds"] = elapsed
        out["rate_bytes_per_second"] = rate
        out["shards_pending"] = max(self.shards_planned - self.shards_moved, 0) if self.running else 0
        out["bytes_pending"] = self.remaining_bytes() if self.running else 0
        out["eta_seconds"] = (self.remaining_bytes() / rate if rate > 0 else None) if self.running else 0.0
        return out


def _stored_blobs(
    catalog: Catalog, batch: list[tuple[str, str | None, str | None]]
) -> list[StoredData | None]:
    """The recorded StoredData of each (data_id, bucket, key) of a scan batch (one thread trip)."""
    return [catalog.stored_blob(data_id) for data_id, _, _ in batch]


def _row(tier: str, domain: Domain, status: str = "active") -> dict[str, Any]:
    return {
        "id": domain.id,
        "tier": tier,
        "path": str(domain.path),
        "node": domain.node,
        "rack": domain.rack,
        "zone": domain.zone,
        "weight": domain.weight,
        "status": status,
    }


class Rebalancer:
    """Per process: follows the shared topology; runs rebalance passes while holding the lease."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.settings = RebalanceSettings()
        self.throttle: Throttle | None = None
        self.progress = RebalanceProgress()
        self._holder = process_holder(f"rebalancer-{id(self):x}")
        self._tasks: list[asyncio.Task[None]] = []
        self._wake = asyncio.Event()
        self._gc_lock = asyncio.Lock()
        self.topology_lock = asyncio.Lock()  # one operator change of shape at a time (ids, checks)
        self._following = asyncio.Lock()
        self._seen_version: str | None = None
        self._published: tuple[str, str] | None = None  # (setting, value) of our writers on draining domains
        self._leader = False
        self._last_publish = 0.0

    def configure(self, settings: RebalanceSettings, throttle: Throttle | None = None) -> None:
        self.settings = settings
        self.throttle = throttle

    @property
    def pools(self) -> dict[str, ErasurePool]:
        return erasure_pools(self.store)

    def writes_placed(self, domain_ids: list[str]) -> dict[str, int]:
        """This process's writers still writing shards (or choosing where), per domain asked about."""
        placed: dict[str, int] = {}
        for pool in self.pools.values():
            for domain_id, count in pool.placements(domain_ids).items():
                placed[domain_id] = placed.get(domain_id, 0) + count
        return placed

    def draining_ids(self) -> list[str]:
        """The domains this process no longer places shards on because they are draining."""
        return sorted(d.id for pool in self.pools.values() for d in pool.topology if d.draining)

    async def writers_on(self, pool: ErasurePool, domain_ids: list[str], *, draining: bool = True) -> int:
        """Writers still writing shards to these domains: this process's and, when they are
        `draining`, every other live process's (a drain must not end while any of them writes
        there): what each published (`_publish_writers`), or one for a process that has not
        taken up the drain yet (it may still place shards there). Domains that are not draining
        take new shards from any process at any moment: only this process's are counted then."""
        here = pool.writes_placed_on(domain_ids)
        if not draining:
            return here
        return here + await asyncio.to_thread(self._writers_elsewhere, domain_ids)

    def _writers_elsewhere(self, domain_ids: list[str]) -> int:
        catalog = self.store.catalog
        own = self.store.process.id if self.store.process is not None else None
        published = catalog.settings_with_prefix(WRITERS_PREFIX)
        now = time.time()
        count = 0
        for row in catalog.process_rows():
            if row.id == own or not row.alive(now):
                continue
            raw = published.get(WRITERS_PREFIX + row.id)
            entry = json.loads(raw) if raw else {}
            if not set(domain_ids) <= set(entry.get("draining", ())):
                count += 1
                continue
            count += sum(int(entry.get("writers", {}).get(d, 0)) for d in domain_ids)
        return count

    def forget_writers_of(self, process_id: str) -> None:
        """Drop what a process that is gone published (its orphans swept: see tiering.store)."""
        self.store.catalog.delete_setting(WRITERS_PREFIX + process_id)

    async def _publish_writers(self) -> None:
        """Tell every other process (any host: through the catalog) which domains this one takes
        as draining and how many of its writes still write shards there — placed before it took
        up the drain. Written when that changes, while any domain drains; removed after."""
        process = self.store.process
        catalog = self.store.catalog
        name = WRITERS_PREFIX + process.id if process is not None else None
        draining = self.draining_ids()
        if self._published is not None and (name != self._published[0] or not draining):
            # Drains over, or our id changed (declared dead: nothing placed under the old one commits).
            await asyncio.to_thread(catalog.delete_setting, self._published[0])
            self._published = None
        if name is None or not draining:
            return
        writers = {d: n for d, n in self.writes_placed(draining).items() if n}
        value = json.dumps({"draining": draining, "writers": writers}, sort_keys=True)
        if self._published != (name, value):
            await asyncio.to_thread(catalog.put_setting, name, value)
            self._published = (name, value)

    # --- start, stop, follow the shared topology ------------------------------------------------

    async def load(self) -> None:
        """Seed config-declared domains, then take up runtime changes (added, draining, removed, codes)."""
        seed = [_row(tier, d) for tier, pool in self.pools.items() for d in pool.topology]
        if seed:
            await asyncio.to_thread(self.store.catalog.seed_domains, seed)
        self._seen_version = await asyncio.to_thread(self.store.catalog.get_setting, TOPOLOGY_VERSION)
        await self._apply()

    async def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._loop()))

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self._published is not None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.store.catalog.delete_setting, self._published[0])
        if self._leader:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self.store.catalog.release_lease, LEASE, self._holder)

    async def _apply(self) -> None:
        """Make this process's pools match the catalog's domains table and tier codes."""
        catalog = self.store.catalog
        rows = await asyncio.to_thread(catalog.domain_rows)
        codes = await asyncio.to_thread(catalog.settings_with_prefix, CODE_PREFIX)
        pools = self.pools
        for row in rows:
            pool = pools.get(row["tier"])
            if pool is None:
                continue
            domain = pool.topology.get(row["id"])
            if row["status"] == "removed":
                if domain is not None:
                    placement.remove_domain(pool, row["id"])
                continue
            if domain is None and any(d.address is not None for d in pool.topology):
                continue  # a tier on storage nodes takes its drives from the nodes' records (tiering.nodes)
            if domain is None:
                domain = Domain(
                    id=row["id"],
                    path=Path(row["path"]),
                    node=row["node"],
                    rack=row["rack"],
                    zone=row["zone"],
                    weight=float(row["weight"]),
                )
                await asyncio.to_thread(domain.path.mkdir, parents=True, exist_ok=True)
                placement.add_domain(pool, domain)
                log.info("domain %s added to tier %s (from the catalog)", domain.id, row["tier"])
            domain.draining = row["status"] == "draining"
        for name, raw in codes.items():
            pool = pools.get(name[len(CODE_PREFIX) :])
            if pool is None:
                continue
            code = json.loads(raw)
            if (pool.k, pool.m) != (code["k"], code["m"]):
                try:
                    placement.set_code(pool, int(code["k"]), int(code["m"]))
                except ValueError as exc:
                    log.error("cannot apply the recorded code of tier %s: %s", pool.name, exc)

    async def _changed(self) -> None:
        """After a topology change here: tell the other processes, and ask for a rebalance."""
        await asyncio.to_thread(
            self.store.catalog.put_setting, TOPOLOGY_VERSION, f"{time.time():.6f}:{id(self)}"
        )

    async def follow(self) -> None:
        """Take up a topology change another process made (a drain, an added drive, a new code):
        each pass of the loop, and before a request once the change token says something changed."""
        async with self._following:  # a second caller waits until the change is applied
            version = await asyncio.to_thread(self.store.catalog.get_setting, TOPOLOGY_VERSION)
            if version != self._seen_version:
                await self._apply()
                self._seen_version = version  # only once applied: a failed pass is tried again
            await self._publish_writers()

    def _hold_lease(self) -> bool:
        now = time.time()
        catalog = self.store.catalog
        holder = catalog.lease_holder(LEASE, now)
        if holder is not None and holder != self._holder:
            if not holder_is_dead(holder):
                return False
            log.warning(
                "the rebalancer lease was held by %s, which is no longer running: taking it over", holder
            )
        return catalog.acquire_lease(LEASE, self._holder, LEASE_TTL, now, replacing=holder)

    async def _loop(self) -> None:
        while True:
            try:
                await self.follow()
                self._leader = await asyncio.to_thread(self._hold_lease)
                if self._leader:
                    await self.collect_shard_garbage()
                    requested, done = await self._request_state()
                    settled = (
                        requested is not None and time.time() - requested >= self.settings.settle_seconds
                    )
                    if requested is not None and (done is None or done < requested) and settled:
                        await self._run(requested)
            except asyncio.CancelledError:
                raise
            except Exception:  # keep going: a busy catalog must not end the rebalancer
                log.exception("rebalancer loop failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), LOOP_INTERVAL)
            self._wake.clear()

    async def _request_state(self) -> tuple[float | None, float | None]:
        get = self.store.catalog.get_setting
        requested, done = await asyncio.to_thread(get, REQUESTED), await asyncio.to_thread(get, DONE)
        return (float(requested) if requested else None), (float(done) if done else None)

    # --- requests and waiting --------------------------------------------------------------------

    async def request(self) -> float:
        """Ask for a rebalance (any process may; the lease holder runs it). Returns the request's token."""
        raw = f"{time.time():.6f}"
        token = float(raw)  # exactly what the catalog holds: compared with `rebalance_done` later
        await asyncio.to_thread(self.store.catalog.put_setting, REQUESTED, raw)
        self._wake.set()
        return token

    async def wait(self, token: float) -> dict[str, Any]:
        """Until a run that started after `token` converged (the data is where placement wants it)."""
        deadline = time.monotonic() + WAIT_LIMIT
        while time.monotonic() < deadline:
            _, done = await self._request_state()
            if done is not None and done >= token:
                return await self.status()
            await asyncio.sleep(0.2)
        raise TimeoutError("rebalance did not finish in time")

    async def status(self) -> dict[str, Any]:
        """Progress of the current or last run (this process's, else the one the lease holder published)."""
        if self.progress.started is not None:
            progress = self.progress.to_json()
        else:
            raw = await asyncio.to_thread(self.store.catalog.get_setting, PROGRESS)
            progress = json.loads(raw) if raw else RebalanceProgress().to_json()
        requested, done = await self._request_state()
        pending = requested is not None and (done is None or done < requested)
        tiers = []
        for name, pool in self.pools.items():
            domains = [d for d in pool.topology]
            tiers.append(
                {
                    "tier": name,
                    "k": pool.k,
                    "m": pool.m,
                    "spread_level": pool.spread_level,
                    "groups": len(pool.topology.groups(pool.spread_level)),
                    "active_groups": placement.writable_groups(pool),
                    "draining": sorted(d.id for d in domains if d.draining),
                    "domains": len(domains),
                }
            )
        return {**progress, "pending": pending, "tiers": tiers}

    # --- a run: passes until nothing is left to do -----------------------------------------------

    async def _run(self, requested: float) -> None:
        p = self.progress
        totals = {
            k: getattr(p, k)
            for k in (
                "total_shards_moved",
                "total_bytes_moved",
                "total_objects_restriped",
                "total_conflicts",
                "total_failures",
                "total_passes",
            )
        }
        self.progress = p = RebalanceProgress(running=True, state="planning", started=time.time(), **totals)
        ticker = asyncio.create_task(self._tick())
        try:
            for _ in range(MAX_PASSES):
                acted, planned, failed = await self._pass()
                if not planned:
                    p.state = "done"
                    break
                if not acted:
                    p.state = "stalled" if failed else "done"
                    break
            else:
                p.state = "stalled"
        finally:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker
            p.running = False
            p.finished = time.time()
            await self._publish(force=True)
        await asyncio.to_thread(self.store.catalog.put_setting, DONE, f"{requested:.6f}")
        log.info(
            "rebalance %s: %d shards moved (%d bytes), %d objects re-striped, %d conflicts, %d failures",
            p.state,
            p.shards_moved,
            p.bytes_moved,
            p.objects_restriped,
            p.conflicts,
            p.failures,
        )

    async def _tick(self) -> None:
        """While a run goes on: keep the lease, publish progress, retire what is due."""
        while True:
            await asyncio.sleep(PUBLISH_INTERVAL)
            with contextlib.suppress(Exception):
                await asyncio.to_thread(self._hold_lease)
                await self._publish()
                await self.collect_shard_garbage()
                await self.follow()

    async def _publish(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last_publish >= PUBLISH_INTERVAL:
            self._last_publish = now
            await asyncio.to_thread(
                self.store.catalog.put_setting, PROGRESS, json.dumps(self.progress.to_json())
            )

    async def _pass(self) -> tuple[int, int, int]:
        """One pass over every erasure-coded tier: (actions done, actions planned, failures)."""
        p = self.progress
        first = p.passes == 0
        p.passes += 1
        p.total_passes += 1
        p.blocked = p.unplaceable = 0
        acted = planned = failed = 0
        failures_before = p.failures
        for tier, pool in self.pools.items():
            p.state = "planning"
            restripe, moves, scanned, shard_moves = await self._plan(tier, pool)
            if first:
                p.shards_scanned += scanned
            stats = p.per_tier.setdefault(tier, {"restripe_bytes": 0, "scanned": 0, "planned": 0})
            stats["scanned"] += scanned if first else 0
            stats["planned"] += shard_moves
            planned += len(restripe) + len(moves)
            if restripe:
                p.state = "restriping"
                acted += await self._each(restripe, functools.partial(self._restripe, tier))
            if moves:
                p.state = "moving"
                acted += await self._each(moves, functools.partial(self._move_blob, tier, pool))
        if first and p.shards_scanned:
            p.first_pass_fraction = p.shards_planned / p.shards_scanned
        failed = p.failures - failures_before
        return acted, planned, failed

    async def _each(self, items: list[T], work: Callable[[T], Awaitable[bool]]) -> int:
        """Run `work` over `items`, `concurrency` at a time; returns how many did something."""
        queue = list(reversed(items))
        done = 0

        async def worker() -> None:
            nonlocal done
            while queue:
                item = queue.pop()
                try:
                    if await work(item):
                        done += 1
                except (ErasureError, BackendError, TieringError, OSError) as exc:
                    self.progress.failures += 1
                    self.progress.total_failures += 1
                    log.warning("rebalance of %s failed: %s", item, exc)

        await asyncio.gather(*(worker() for _ in range(self.settings.concurrency)))
        return done

    async def _plan(self, tier: str, pool: ErasurePool) -> tuple[list[tuple[str, str]], list[str], int, int]:
        """Objects to re-strip and blobs with shards to move on one tier, from the catalog."""
        p = self.progress
        catalog = self.store.catalog
        restripe: dict[tuple[str, str], None] = {}
        moves: list[str] = []
        scanned = shard_moves = 0
        cursor = ""
        while True:
            batch = await asyncio.to_thread(catalog.blobs_after, tier, cursor, SCAN_BATCH)
            if not batch:
                break
            cursor = batch[-1][0]
            stored_all = await asyncio.to_thread(_stored_blobs, catalog, batch)
            for (data_id, bucket, key), stored in zip(batch, stored_all, strict=True):
                if stored is None or not stored.location:
                    continue
                try:
                    loc = Location.from_dict(stored.location)
                except (ValueError, KeyError):
                    continue
                scanned += len(loc.present())
                if placement.stale_code(pool, loc):
                    if bucket is not None and key is not None and (bucket, key) not in restripe:
                        restripe[(bucket, key)] = None
                        p.objects_planned += 1
                        p.per_tier[tier] = p.per_tier.get(
                            tier, {"restripe_bytes": 0, "scanned": 0, "planned": 0}
                        )
                        p.per_tier[tier]["restripe_bytes"] += stored.size
                    continue
                plan = placement.plan_moves(data_id, loc, pool.topology, pool.spread_level, pool.writable)
                p.blocked += plan.blocked
                p.unplaceable += plan.unplaceable
                if plan.moves:
                    moves.append(data_id)
                    shard_moves += len(plan.moves)
                    p.shards_planned += len(plan.moves)
                    p.bytes_planned += (
                        len(plan.moves) * StripeLayout(stored.size, loc.k, loc.block_size).shard_bytes()
                    )
            await asyncio.sleep(0)
        return list(restripe), moves, scanned, shard_moves

    async def _restripe(self, tier: str, object_key: tuple[str, str]) -> bool:
        bucket, key = object_key
        pool = self.pools[tier]

        def stale(stored: Any) -> bool:
            try:
                return placement.stale_code(pool, Location.from_dict(stored.location))
            except (ValueError, KeyError):
                return False

        async def count(n: int) -> None:
            self.progress.bytes_restriped += n
            if self.throttle is not None:
                await self.throttle(n)

        record = await self.store.restripe_object(bucket, key, tier, needs=stale, on_chunk=count)
        if record is None:
            return False
        self.progress.objects_restriped += 1
        self.progress.total_objects_restriped += 1
        return True

    async def _move_blob(self, tier: str, pool: ErasurePool, data_id: str) -> bool:
        """Move one blob's misplaced shards (planned again on its current location), then swap."""
        catalog = self.store.catalog
        stored = await asyncio.to_thread(catalog.stored_blob, data_id)
        if stored is None or not stored.location:
            return False
        before = stored.location
        loc = Location.from_dict(before)
        if placement.stale_code(pool, loc):
            return False  # re-striping rewrites it whole
        plan = placement.plan_moves(data_id, loc, pool.topology, pool.spread_level, pool.writable)
        if not plan.moves:
            return False
        intents = [(data_id, tier, d.id, i) for i, d in plan.moves.items()]
        async with self._gc_lock:
            await asyncio.to_thread(catalog.add_shard_garbage, intents, time.time() + INTENT_DELAY)
        p = self.progress

        async def count(n: int) -> None:
            p.bytes_moved += n
            p.total_bytes_moved += n
            if self.throttle is not None:
                await self.throttle(n)

        after, moved = before, []
        try:
            for index, target in sorted(plan.moves.items()):
                after = await pool.move_shard(data_id, after, index, target.id, stored.size, count)
                moved.append(index)
        except (ErasureError, OSError) as exc:
            p.failures += 1
            p.total_failures += 1
            log.warning("moving a shard of %s on %s failed: %s", data_id, tier, exc)
            if isinstance(exc, ErasureError):
                pool.request_heal(data_id, before, stored.size, f"rebalance: {exc}")
        if not moved:
            await self._drop_copies(intents)
            return False
        if await asyncio.to_thread(catalog.relocate_blob_if, data_id, before, after):
            old = [(data_id, tier, domain, i) for i in moved if (domain := loc.shards[i]) is not None]
            await asyncio.to_thread(catalog.add_shard_garbage, old, time.time() + RETIRE_GRACE_SECONDS)
            p.shards_moved += len(moved)
            p.total_shards_moved += len(moved)
            unmoved = [e for e in intents if e[3] not in moved]
            if unmoved:
                await self._drop_copies(unmoved)
            return True
        p.conflicts += 1
        p.total_conflicts += 1
        await self._drop_copies(intents)
        return False

    async def _drop_copies(self, intents: list[tuple[str, str, str, int]]) -> None:
        """Copies nobody recorded: due now (the collector still spares any a location names)."""
        await asyncio.to_thread(self.store.catalog.add_shard_garbage, intents, time.time())

    async def collect_shard_garbage(self) -> int:
        """Delete moved-away shard files whose grace has passed and that no location names again.
        Returns how many queued entries this batch settled (deleted, or found gone or named
        again): 0 once nothing due can be settled now (none due, or all on offline drives)."""
        catalog = self.store.catalog
        due = await asyncio.to_thread(catalog.due_shard_garbage, time.time())
        if not due:
            return 0
        pools = self.pools
        forget: list[tuple[str, str, int]] = []
        # Entries on offline drives go to the back of the queue: left due, a drive that stays away
        # with a batch's worth of them would hold up every other entry behind them.
        postponed: list[tuple[str, str, str, int]] = []
        deleted: list[tuple[str, str, str, int]] = []
        async with self._gc_lock:
            for data_id, tier, domain_id, shard in due:
                stored = await asyncio.to_thread(catalog.stored_blob, data_id)
                if stored is not None and names_shard(stored.location, domain_id, shard):
                    forget.append((data_id, domain_id, shard))
                    continue
                pool = pools.get(tier)
                domain = pool.topology.get(domain_id) if pool is not None else None
                if pool is None or domain is None:
                    forget.append((data_id, domain_id, shard))
                    continue
                if not domain.online:
                    postponed.append((data_id, tier, domain_id, shard))  # tried again when it is back
                    continue
                store = pool.store(domain_id)
                assert store is not None
                try:
                    if await asyncio.to_thread(store.remove, data_id, shard):
                        deleted.append((data_id, tier, domain_id, shard))
                except (ErasureError, OSError) as exc:
                    log.warning("could not retire shard %s.%d on %s: %s", data_id, shard, domain_id, exc)
                    continue
                forget.append((data_id, domain_id, shard))
            await self._named_since(deleted)
            if forget:
                await asyncio.to_thread(catalog.forget_shard_garbage, forget)
            if postponed:
                await asyncio.to_thread(
                    catalog.add_shard_garbage, postponed, time.time() + OFFLINE_RETRY_SECONDS
                )
        if deleted:
            log.debug("retired %d moved-away shard files", len(deleted))
        return len(forget)

    async def _named_since(self, deleted: list[tuple[str, str, str, int]]) -> None:
        """Files this batch deleted that a location names now: a heal that rebuilt a shard at that
        very place (a drive it had moved away from) recorded it between the check and the delete.
        Healed again, through the queue; heal checks its files after its swap too, which closes
        the other order (maintenance.py `_still_there`)."""
        catalog = self.store.catalog

        def named_again() -> list[tuple[str, str]]:  # one worker-thread trip for the batch
            again = []
            for data_id, tier, domain_id, shard in deleted:
                stored = catalog.stored_blob(data_id)
                if stored is not None and names_shard(stored.location, domain_id, shard):
                    log.warning(
                        "shard %s.%d on %s was named again as it went: healing it", data_id, shard, domain_id
                    )
                    again.append((tier, data_id))
            return again

        again = await asyncio.to_thread(named_again) if deleted else []
        if again:
            await asyncio.to_thread(catalog.queue_heals, again, time.time())


# --- operator actions (the admin API calls these) ------------------------------------------------


def _pool(store: ObjectStore, tier: str) -> ErasurePool:
    pool = erasure_pools(store).get(tier)
    if pool is None:
        raise UnknownTier(f"no erasure-coded tier {tier!r}")
    return pool


def resolve_domains(store: ObjectStore, target: str) -> tuple[str, ErasurePool, list[Domain]]:
    """A drive id (hot-n1-d2), or every drive under a tier's node/rack/zone (hot-n3, hot-rack2)."""
    for tier, pool in erasure_pools(store).items():
        domain = pool.topology.get(target)
        if domain is not None:
            return tier, pool, [domain]
        if target.startswith(f"{tier}-"):
            short = target[len(tier) + 1 :]
            found = [
                d
                for d in pool.topology
                if short in (d.node, d.rack, d.zone, d.region)
                or short in (d.label(lv) for lv in ("node", "rack", "zone"))
            ]
            if found:
                return tier, pool, found
    raise UnknownDomain(target)


async def add_domain(
    store: ObjectStore,
    tier: str,
    path: str,
    node: str,
    rack: str,
    *,
    zone: str = "zone1",
    weight: float = 0.0,
    domain_id: str | None = None,
) -> dict[str, Any]:
    """Add a drive to a tier now (recorded in the catalog); the caller asks for a rebalance."""
    async with store.rebalancer.topology_lock:
        await store.rebalancer.follow()  # what another process changed last (ids, states) first
        return await _add_domain(store, tier, path, node, rack, zone, weight, domain_id)


async def _add_domain(
    store: ObjectStore,
    tier: str,
    path: str,
    node: str,
    rack: str,
    zone: str,
    weight: float,
    domain_id: str | None,
) -> dict[str, Any]:
    pool = _pool(store, tier)
    if not path or not node or not rack:
        raise RebalanceRefused("a new domain needs --path, --node and --rack")
    if weight < 0:
        raise RebalanceRefused("weight must be positive (0: the file system's size)")
    if domain_id is None:
        n = 1 + sum(1 for d in pool.topology if d.node == node)
        while pool.topology.get(f"{tier}-{node}-d{n}") is not None:
            n += 1
        domain_id = f"{tier}-{node}-d{n}"
    if not _DOMAIN_ID.fullmatch(domain_id):
        raise RebalanceRefused(f"invalid domain id {domain_id!r}")
    if any(pool.topology.get(domain_id) for pool in erasure_pools(store).values()):
        raise RebalanceRefused(f"domain {domain_id!r} exists")
    existing = [d for other in erasure_pools(store).values() for d in other.topology]

    def prepare() -> tuple[Path, Domain | None]:
        where = Path(path).resolve()
        taken = next((d for d in existing if d.path.resolve() == where), None)
        if taken is None:
            where.mkdir(parents=True, exist_ok=True)
        return where, taken

    where, taken = await asyncio.to_thread(prepare)
    if taken is not None:
        raise RebalanceRefused(f"{path} is already domain {taken.id}")
    domain = Domain(id=domain_id, path=where, node=node, rack=rack, zone=zone, weight=weight)
    try:
        await asyncio.to_thread(store.catalog.add_domain, _row(tier, domain))
    except ValueError as exc:
        raise RebalanceRefused(str(exc)) from None
    if pool.topology.get(domain_id) is None:
        placement.add_domain(pool, domain)
    await store.rebalancer._changed()
    log.info("domain %s added to tier %s at %s (node %s, rack %s)", domain_id, tier, where, node, rack)
    return _row(tier, domain)


async def drain_domain(store: ObjectStore, target: str) -> dict[str, Any]:
    """Stop placing new shards on a drive or node; the rebalancer then moves everything off it."""
    async with store.rebalancer.topology_lock:
        await store.rebalancer.follow()  # what another process changed last (ids, states) first
        return await _drain_domain(store, target)


async def _drain_domain(store: ObjectStore, target: str) -> dict[str, Any]:
    tier, pool, domains = resolve_domains(store, target)
    before = {d.id: d.draining for d in domains}
    for d in domains:
        d.draining = True
    left = placement.writable_groups(pool)
    if left < pool.k + pool.m:
        for d in domains:
            d.draining = before[d.id]
        raise RebalanceRefused(
            f"draining {target} would leave {left} active {pool.spread_level}s in tier {tier}; "
            f"its code {pool.k}+{pool.m} needs {pool.k + pool.m}: add capacity first"
        )
    ids = [d.id for d in domains]
    await asyncio.to_thread(store.catalog.set_domain_status, ids, "draining")
    await store.rebalancer._changed()
    log.info("draining %s on tier %s", ids, tier)
    return {"tier": tier, "target": target, "domains": ids, "status": "draining"}


async def drain_state(store: ObjectStore, target: str) -> dict[str, Any]:
    """How far a drain of `target` is from a `remove` that succeeds.

    Three things keep a drained domain from being removable: blobs the catalog still places on it
    (the rebalancer has not moved them yet, or they were committed after its last scan), writers
    (of this process, or of another worker) that placed shards on it before it began draining
    and have not finished, and
    retired files on it (moved away, overwritten, deleted) that readers may use until their grace
    has passed and the collector has removed them.
    """
    tier, pool, domains = resolve_domains(store, target)
    ids = [d.id for d in domains]
    catalog = store.catalog
    blobs = 0
    retired = 0
    due: float | None = None
    for domain_id in ids:
        blobs += len(await asyncio.to_thread(catalog.blobs_on_domain, tier, domain_id, 1000))
        pending, latest = await asyncio.to_thread(catalog.shard_garbage_on, domain_id)
        retired += pending
        if latest is not None:
            due = latest if due is None else max(due, latest)
    writers = await store.rebalancer.writers_on(pool, ids)
    return {
        "tier": tier,
        "target": target,
        "domains": ids,
        "draining": all(d.draining for d in domains),
        "blobs": blobs,
        "writers": writers,
        "retired_files": retired,
        "retired_wait_seconds": max((due or 0.0) - time.time(), 0.0) if retired else 0.0,
        "removable": blobs == 0 and writers == 0 and retired == 0,
    }


async def wait_drained(store: ObjectStore, target: str, token: float) -> dict[str, Any]:
    """Until `remove_domain(target)` can succeed: the rebalance run asked for by `token` is done,
    no writer of any worker still writes to the domains, no live blob names them, and the files
    retired from them have outlived the readers' grace and been collected.

    A blob that lands on the domains after a run's last scan (a write placed just before the
    drain, committed after) is moved by another run, asked for here. Runs that leave as many
    blobs as before (a source offline, no free node) end the wait with DrainIncomplete.
    """
    rebalancer = store.rebalancer
    deadline = time.monotonic() + WAIT_LIMIT
    rescan = False  # writers finished since the last run began: what they committed needs another run
    left: int | None = None  # blobs on the domains after the previous run
    fruitless = 0  # runs in a row that left no fewer blobs
    while time.monotonic() < deadline:
        run = await rebalancer.wait(token)
        state = await drain_state(store, target)
        if not state["draining"]:
            return state
        if state["writers"]:
            rescan = True
            await asyncio.sleep(0.2)
            continue
        if state["blobs"] or rescan:
            fruitless = fruitless + 1 if left is not None and state["blobs"] >= left > 0 else 0
            if fruitless >= MAX_FRUITLESS_DRAIN_RUNS:
                raise DrainIncomplete(
                    f"{target} still holds shards of {state['blobs']} blob(s) that {fruitless} rebalance runs "
                    f"could not move (last run: blocked {run.get('blocked', 0)}, unplaceable "
                    f"{run.get('unplaceable', 0)}, failures {run.get('failures', 0)}): bring offline domains "
                    f"back or add capacity, then drain again"
                )
            left, rescan = state["blobs"], False
            log.info(
                "drain of %s: %d blob(s) on it after the last run; rebalancing again", target, state["blobs"]
            )
            token = await rebalancer.request()
            continue
        if state["removable"]:
            return state
        await asyncio.sleep(min(max(state["retired_wait_seconds"], 0.2), 1.0))  # the collector's turn
    raise TimeoutError(f"drain of {target} did not finish in time")


async def remove_domain(store: ObjectStore, target: str) -> dict[str, Any]:
    """Forget a drive or node that holds no shard (drain it first). Refused otherwise."""
    async with store.rebalancer.topology_lock:
        await store.rebalancer.follow()  # what another process changed last (ids, states) first
        return await _remove_domain(store, target)


async def _remove_domain(store: ObjectStore, target: str) -> dict[str, Any]:
    tier, pool, domains = resolve_domains(store, target)
    catalog = store.catalog
    before = {d.id: d.draining for d in domains}
    for d in domains:
        d.draining = True  # no new shard lands here while we look
    try:
        for d in domains:
            holding = await asyncio.to_thread(catalog.blobs_on_domain, tier, d.id, 1000)
            if holding:
                raise DomainNotEmpty(
                    f"domain {d.id} holds shards of {len(holding)}{'+' if len(holding) >= 1000 else ''} "
                    f"blob(s); drain it first: tierstore admin domain drain {target} --wait"
                )
            writers = await store.rebalancer.writers_on(pool, [d.id], draining=before[d.id])
            if writers:
                raise DomainNotEmpty(
                    f"domain {d.id} receives shards of {writers} write(s) placed before it began draining; "
                    f"retry when they are done (drain {target} --wait waits for them)"
                )
            pending, due = await asyncio.to_thread(catalog.shard_garbage_on, d.id)
            if pending:
                wait = max((due or 0) - time.time(), 0)
                raise DomainNotEmpty(
                    f"domain {d.id} still holds {pending} retired shard file(s) that readers may use "
                    f"for {wait:.0f}s more; retry then"
                )
        if placement.writable_groups(pool) < pool.k + pool.m:
            raise RebalanceRefused(
                f"removing {target} would leave tier {tier} fewer {pool.spread_level}s "
                f"than its code {pool.k}+{pool.m} needs"
            )
    except BaseException:
        for d in domains:
            d.draining = before[d.id]
        raise
    ids = [d.id for d in domains]
    await asyncio.to_thread(catalog.set_domain_status, ids, "removed")
    for domain_id in ids:
        placement.remove_domain(pool, domain_id)
    await store.rebalancer._changed()
    log.info("removed %s from tier %s", ids, tier)
    return {"tier": tier, "target": target, "domains": ids, "status": "removed"}


async def recode_tier(store: ObjectStore, tier: str, k: int, m: int) -> dict[str, Any]:
    """New writes on `tier` use k+m at once; existing objects are re-striped by the rebalancer."""
    pool = _pool(store, tier)
    old = (pool.k, pool.m)
    try:
        placement.set_code(pool, k, m)
    except ValueError as exc:
        raise RebalanceRefused(str(exc)) from None
    await asyncio.to_thread(store.catalog.put_setting, CODE_PREFIX + tier, json.dumps({"k": k, "m": m}))
    await store.rebalancer._changed()
    log.info("tier %s recoded %d+%d -> %d+%d", tier, *old, k, m)
    return {"tier": tier, "k": k, "m": m, "previous": {"k": old[0], "m": old[1]}}


def domain_rows(store: ObjectStore) -> list[dict[str, Any]]:
    """The catalog's domains table (with removed ones), for `admin domains --all`."""
    return store.catalog.domain_rows()
