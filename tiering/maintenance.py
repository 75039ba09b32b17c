"""Keeping erasure-coded tiers whole: heal what readers found damaged, scrub everything slowly.

`erasure` knows how to verify and rebuild one blob; it does not know which blobs exist or where
the catalog says they are. This module walks the catalog, asks the tier backend to heal each
blob, and records a shard that had to move to another domain (relocation) in the catalog.

Two rules decide *when* a blob is rebuilt elsewhere:
- A blob with shards on a domain that went offline less than `rebuild_delay` seconds ago is only
  marked degraded: most outages are restarts, and rebuilding on every blip would move data for
  nothing (Ceph's "down → out" interval). When the domain returns, the blob is healed in place.
- An explicit heal (`tierstore admin heal`) rebuilds everything it can, now.

Heal requests (blobs a reader found damaged) are queued in the catalog, whichever gateway read
them, and drained by every gateway: each claims a few at a time for HEAL_CLAIM_TTL seconds (a row
lease), so no blob is healed twice at once and one whose healer died is claimed again later. If
the catalog cannot take the request, the gateway heals it itself, as before there was a queue.

A rebuilt shard is a new file (on its own domain or another one). Two files can end up named by
nobody, and heal queues both for the shard collector (as the rebalancer does), or they would be
orphans for good — a blob's garbage entry names only the places recorded when it was retired:
- the rebuilt copy, if the blob was overwritten, deleted or moved while it was written (the swap
  lost, or the blob's files were deleted before the copy was committed);
- the file it replaces on another domain: a shard rebuilt elsewhere because its drive was offline
  is still on that drive when it comes back (the collector waits for the drive).

A blob heal finds unrecoverable is recorded in the catalog (`lost_blobs`), not only in this
process's progress: a read of it answers 410 ObjectDataLost whichever worker or gateway takes it,
and `admin status`, `admin heal` and the metrics count the catalog's lost blobs. It leaves that
list when a heal finds it whole again, when it is gone (deleted, overwritten), or at the end of a
full pass that did not find it lost.

Scrubbing is throttled by a tranquilizer (Garage's habit): after each blob it sleeps
`tranquility` × the time the blob took, so a scrub never crowds out foreground traffic.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from erasure.location import Location, names_shard
from tiering.backend import BackendError, StoredData
from tiering.backends.erasure_coded import ErasureCodedBackend
from tiering.catalog import RETIRE_GRACE_SECONDS
from tiering.lease_holders import process_holder

if TYPE_CHECKING:
    from tiering.store import ObjectStore

log = logging.getLogger("tierstore.maintenance")

SCRUB_BATCH = 256
HEAL_POLL_INTERVAL = 2.0  # seconds between looks at the shared heal queue (a local request wakes it at once)
SCRUB_LEASE = "scrub"
HEAL_CLAIM_TTL = 120.0  # a claimed heal not finished by then is another gateway's to take
# Seconds between retries of the blobs this process knows degraded. A write that missed a domain
# which never went offline — a storage node restarting faster than its heartbeat timeout — has no
# "domain back online" event to wait for: without retries it would stay short of a shard until
# the next scrub, and a rolling restart of the next node could take it below k.
DEGRADED_RETRY_INTERVAL = 5.0


@dataclass
class HealProgress:
    """What the last and current heal/scrub passes did; shown by `admin status` and metrics."""

    running: bool = False
    passes: int = 0
    pass_started: float | None = None
    pass_finished: float | None = None
    blobs_total: int = 0
    blobs_checked: int = 0
    bytes_checked: int = 0
    shards_healed: int = 0
    corrupt_blocks_found: int = 0
    relocated: int = 0
    degraded: dict[str, str] = field(default_factory=dict)  # data id → tier, known damaged now
    # Blobs heal found unrecoverable (fewer than k shards left anywhere, offline domains counted):
    # id → (tier, bucket, key). A blob unreadable only while domains are down is `degraded`.
    lost: dict[str, tuple[str, str | None, str | None]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "running": self.running,
            "passes": self.passes,
            "pass_started": self.pass_started,
            "pass_finished": self.pass_finished,
            "blobs_total": self.blobs_total,
            "blobs_checked": self.blobs_checked,
            "bytes_checked": self.bytes_checked,
            "shards_healed": self.shards_healed,
            "corrupt_blocks_found": self.corrupt_blocks_found,
            "relocated": self.relocated,
            "degraded_objects": len(self.degraded),
            "lost_objects": len(self.lost),
            "lost": [
                {"tier": tier, "bucket": bucket, "key": key, "data_id": data_id}
                for data_id, (tier, bucket, key) in sorted(self.lost.items())
            ],
        }


class Maintenance:
    """Heal-queue drainers and the scrubber for every tier whose backend can heal."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        rebuild_delay: float = 600.0,
        scrub_interval: float | None = None,
        tranquility: float = 2.0,
    ) -> None:
        self.store = store
        self.rebuild_delay = rebuild_delay
        self.scrub_interval = scrub_interval
        self.tranquility = tranquility
        self.progress = HealProgress()
        self.offline_since: dict[str, float] = {}  # domain id → when it went offline
        self._tasks: list[asyncio.Task[None]] = []
        self._pass: asyncio.Task[None] | None = None
        self.holder = process_holder(f"heal-{id(self):x}")
        self._heal_wakeup = asyncio.Event()

    # --- which backends take part --------------------------------------------------------------

    def healable_tiers(self) -> dict[str, ErasureCodedBackend]:
        return {
            name: tier.backend
            for name, tier in self.store.tiers.items()
            if isinstance(tier.backend, ErasureCodedBackend)
        }

    async def start(self) -> None:
        for name, backend in self.healable_tiers().items():
            self._tasks.append(asyncio.create_task(self._drain(name, backend.pool.heal_requests)))
        if self.healable_tiers():
            self._tasks.append(asyncio.create_task(self._heal_queued_forever()))
        if self.scrub_interval:
            self._tasks.append(asyncio.create_task(self._scrub_forever(self.scrub_interval)))

    async def close(self) -> None:
        tasks = self._tasks + ([self._pass] if self._pass else [])
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()

    # --- one blob ------------------------------------------------------------------------------

    def _recently_offline(self, stored: StoredData) -> bool:
        """Whether a shard of this blob sits on a domain that went offline less than rebuild_delay
        ago (it may come back with it). A shard the blob was written without (`missing`) is not
        on its domain whatever happens to it: nothing to wait for, so it never defers the heal —
        a node killed under a PUT and then marked down must not leave the blob short for
        rebuild_delay while m - 1 more failures would make it unreadable."""
        try:
            present = Location.from_dict(stored.location).present()
        except ValueError:
            return False  # not an erasure location: the heal itself says what is wrong with it
        now = time.time()
        return any(
            d in self.offline_since and now - self.offline_since[d] < self.rebuild_delay for _, d in present
        )

    async def heal_blob(self, tier: str, data_id: str, *, force: bool) -> None:
        backend = self.healable_tiers().get(tier)
        stored = await asyncio.to_thread(self.store.catalog.stored_blob, data_id)
        if backend is None or stored is None:  # deleted or overwritten meanwhile
            self.progress.degraded.pop(data_id, None)
            await self._not_lost(data_id)
            return
        if not force and self._recently_offline(stored):
            # Wait for the domain to come back (or for rebuild_delay) before moving anything.
            self.progress.degraded[data_id] = tier
            return
        try:
            result, healed = await backend.heal(stored)
        except BackendError as exc:
            log.warning("heal of %s on %s failed: %s", data_id, tier, exc)
            self.progress.degraded[data_id] = tier
            return
        self.progress.blobs_checked += 1
        self.progress.bytes_checked += stored.size
        self.progress.shards_healed += len(result.rebuilt)
        self.progress.corrupt_blocks_found += result.corrupt_blocks
        if result.changed:
            # Compare-and-swap: a rebalance or overwrite that moved the blob meanwhile wins.
            if await asyncio.to_thread(
                self.store.catalog.relocate_blob_if, data_id, stored.location, healed.location
            ):
                self.progress.relocated += 1
                await self._still_there(backend, tier, healed)
        if result.rebuilt:
            await self._retire_unnamed(tier, data_id, stored.location, healed.location, result.rebuilt)
        if result.unrecoverable:
            where = await asyncio.to_thread(self._owner, data_id)
            await asyncio.to_thread(self.store.catalog.mark_blob_lost, data_id, tier, time.time())
            self.progress.lost[data_id] = (tier, *where)
            self.progress.degraded.pop(data_id, None)
            log.error("blob %s on %s is lost (fewer than k shards survive)", data_id, tier)
        elif result.lost or result.still_missing:
            # Unreadable now, perhaps, but offline domains still hold enough: wait for them.
            self.progress.degraded[data_id] = tier
            await self._not_lost(data_id)
        else:
            self.progress.degraded.pop(data_id, None)
            await self._not_lost(data_id)

    async def _still_there(self, backend: ErasureCodedBackend, tier: str, healed: StoredData) -> None:
        """After recording shards rebuilt on other drives: are they all still there? The shard
        collector may have found a queued entry for one of those places unnamed just before the
        swap, and deleted the new file after it (a file moved away from that drive earlier). The
        collector checks again after deleting; this check after the swap closes the other order.
        A shard gone is healed again, through the queue."""
        check = await backend.check(healed)
        if check.missing:
            log.warning(
                "heal of %s on %s: rebuilt shard(s) %s gone after the swap; healing again",
                healed.data_id, tier, [i for i, _ in check.missing],
            )  # fmt: skip
            await asyncio.to_thread(self.store.catalog.queue_heals, [(tier, healed.data_id)], time.time())
            self._heal_wakeup.set()

    async def _retire_unnamed(
        self, tier: str, data_id: str, before: dict[str, Any], after: dict[str, Any], rebuilt: list[int]
    ) -> None:
        """Queue for the shard collector every file of the rebuilt shards — the new copy and the
        one it replaces elsewhere — that the blob's recorded location does not name now.

        Asked after the swap, so it covers a swap that lost (an overwrite, delete or rebalance came
        first), a blob retired and deleted before its rebuilt file was committed, and the old file
        on the drive a shard moved away from. Due after the readers' grace (one that looked up the
        old location may still read it); the collector spares any file a location names by then,
        and keeps a file on an offline drive queued until the drive is back."""
        old_shards, new_shards = before.get("shards") or [], after.get("shards") or []
        current = await asyncio.to_thread(self.store.catalog.stored_blob, data_id)
        unnamed = {
            (data_id, tier, domain, i)
            for i in rebuilt
            for domain in (new_shards[i], old_shards[i] if i < len(old_shards) else None)
            if domain is not None and (current is None or not names_shard(current.location, domain, i))
        }
        if unnamed:
            log.info(
                "heal of %s on %s: %d shard file(s) named by nobody retired", data_id, tier, len(unnamed)
            )
            await asyncio.to_thread(
                self.store.catalog.add_shard_garbage, sorted(unnamed), time.time() + RETIRE_GRACE_SECONDS
            )

    async def _not_lost(self, data_id: str) -> None:
        # Only a blob this process knows lost costs a catalog write: a scrub heals millions. What
        # another process marked is cleared by the end of a full pass (`_full_pass`).
        if self.progress.lost.pop(data_id, None) is not None:
            await asyncio.to_thread(self.store.catalog.clear_lost_blobs, [data_id])

    def is_lost(self, data_id: str) -> bool:
        """Whether this process's heal found this blob unrecoverable (a memory read: the request
        path asks it first; `lost_in_catalog` asks every process's finding)."""
        return data_id in self.progress.lost

    def lost_in_catalog(self, data_id: str) -> bool:
        """Whether any process's heal found this blob unrecoverable (blocking: a catalog read)."""
        return self.store.catalog.blob_is_lost(data_id)

    def lost_report(self) -> dict[str, tuple[str, str | None, str | None]]:
        """Every lost blob, found by any process: data id -> (tier, bucket, key). Blocking."""
        return {
            data_id: (tier, *self._owner(data_id))
            for data_id, tier in self.store.catalog.lost_blobs().items()
        }

    def _owner(self, data_id: str) -> tuple[str | None, str | None]:
        return self.store.catalog.blob_owner(data_id)

    async def _drain(self, tier: str, queue: asyncio.Queue[Any]) -> None:
        """This process's readers' requests, into the shared queue (in batches)."""
        while True:
            batch = [(tier, (await queue.get()).data_id)]
            while not queue.empty() and len(batch) < SCRUB_BATCH:
                batch.append((tier, queue.get_nowait().data_id))
            try:
                await asyncio.to_thread(self.store.catalog.queue_heals, batch, time.time())
                self._heal_wakeup.set()
            except Exception:  # the catalog cannot take them: heal here and now
                log.exception("queueing %d heal(s) in the catalog failed; healing them here", len(batch))
                for _, data_id in batch:
                    await self._heal_logged(tier, data_id)

    async def _heal_logged(self, tier: str, data_id: str) -> None:
        try:
            await self.heal_blob(tier, data_id, force=False)
        except Exception:  # one bad blob must not stop healing the rest
            log.exception("healing %s failed", data_id)

    async def _heal_queued_forever(self) -> None:
        """Claim and heal what any gateway queued; woken at once by this process's own requests."""
        catalog = self.store.catalog
        retried = time.monotonic()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._heal_wakeup.wait(), HEAL_POLL_INTERVAL)
            self._heal_wakeup.clear()
            if self.progress.degraded and time.monotonic() - retried >= DEGRADED_RETRY_INTERVAL:
                retried = time.monotonic()
                await self._heal_set(dict(self.progress.degraded))  # a deferred one stays deferred
            try:
                now = time.time()
                if not await asyncio.to_thread(catalog.heal_due, now):
                    continue
                claimed = await asyncio.to_thread(catalog.claim_heals, self.holder, now, HEAL_CLAIM_TTL)
            except Exception:  # the catalog is away: requests wait in it (or were healed locally)
                log.exception("reading the heal queue failed")
                continue
            for tier, data_id in claimed:
                await self._heal_logged(tier, data_id)
                try:
                    await asyncio.to_thread(catalog.finish_heal, data_id, self.holder)
                except Exception:  # it stays claimed until HEAL_CLAIM_TTL, then is healed again: harmless
                    log.exception("finishing the heal of %s failed", data_id)
            if claimed:
                self._heal_wakeup.set()  # there may be more

    def note_write(self, tier: str, stored: StoredData) -> None:
        """A blob written with shards missing (domains down at write time, or a drive that failed
        mid-write) is degraded from birth, and queued for heal at once, as a reader's find is.

        Otherwise nothing would look at it until a reader, a domain coming back online, or the
        next scrub: a node that died under a PUT and restarted before its heartbeats were missed
        never goes offline, and meanwhile m - 1 further failures make the blob unreadable. Heal
        itself waits for domains known to be offline (`rebuild_delay`); a shard that has nowhere
        to go stays missing and the blob degraded."""
        if stored.location.get("missing"):
            self.progress.degraded[stored.data_id] = tier
            backend = self.healable_tiers().get(tier)
            if backend is not None:
                backend.pool.request_heal(stored.data_id, stored.location, stored.size, "written short")

    # --- domains going down and coming back ----------------------------------------------------

    def domains_changed(self, domain_ids: list[str], online: bool) -> None:
        now = time.time()
        for domain_id in domain_ids:
            if online:
                self.offline_since.pop(domain_id, None)
            else:
                self.offline_since.setdefault(domain_id, now)
        if online and self.progress.degraded:
            # What waited for these domains can now be healed in place.
            pending = dict(self.progress.degraded)
            self._tasks.append(asyncio.create_task(self._heal_set(pending)))

    async def _heal_set(self, blobs: dict[str, str]) -> None:
        for data_id, tier in blobs.items():
            with contextlib.suppress(Exception):
                await self.heal_blob(tier, data_id, force=False)

    # --- full passes (scrub) --------------------------------------------------------------------

    def run_pass(self, *, force: bool = True) -> asyncio.Task[None]:
        """Start a full verify-and-heal pass over every blob (or join the one running)."""
        if self._pass is None or self._pass.done():
            self._pass = asyncio.create_task(self._full_pass(force=force))
        return self._pass

    async def _full_pass(self, *, force: bool) -> None:
        progress = self.progress
        progress.running = True
        progress.pass_started = time.time()
        progress.blobs_checked = progress.bytes_checked = 0
        seen: set[str] = set()
        try:
            tiers = self.healable_tiers()
            progress.blobs_total = sum(
                [await asyncio.to_thread(self.store.catalog.count_blobs, tier) for tier in tiers]
            )
            for tier in tiers:
                cursor = ""
                while True:
                    batch = await asyncio.to_thread(self.store.catalog.blobs_after, tier, cursor, SCRUB_BATCH)
                    if not batch:
                        break
                    for data_id, _bucket, _key in batch:
                        seen.add(data_id)
                        started = time.monotonic()
                        try:
                            await self.heal_blob(tier, data_id, force=force)
                        except Exception:
                            log.exception("scrub of %s failed", data_id)
                        if not force and self.tranquility:
                            await asyncio.sleep(self.tranquility * (time.monotonic() - started))
                    cursor = batch[-1][0]
            # A lost object deleted or overwritten since is lost no more, nor one this pass found
            # readable that another process had marked (the catalog's list is every process's).
            for data_id in set(progress.lost) - seen:
                progress.lost.pop(data_id, None)
            marked = await asyncio.to_thread(self.store.catalog.lost_blobs)
            stale = [data_id for data_id in marked if data_id not in progress.lost]
            if stale:
                await asyncio.to_thread(self.store.catalog.clear_lost_blobs, stale)
        finally:
            progress.running = False
            progress.passes += 1
            progress.pass_finished = time.time()

    async def _scrub_forever(self, interval: float) -> None:
        """A scheduled scrub pass every `interval`, by one gateway of all that share the catalog: the
        holder of the `scrub` lease (renewed by each of its passes; another takes it once it lapses)."""
        while True:
            await asyncio.sleep(interval)
            try:
                ours = await asyncio.to_thread(
                    self.store.catalog.acquire_lease, SCRUB_LEASE, self.holder, interval * 1.5, time.time()
                )
            except Exception:
                log.exception("taking the scrub lease failed")
                continue
            if ours:
                await self.run_pass(force=False)
