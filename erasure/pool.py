"""ErasurePool: one tier's erasure-coded set over its failure domains — the package's public API.

Layouts (recorded per blob in its location):
- "ec": blobs of at least `small_object_threshold` bytes are striped k+m (zfec, systematic).
- "replica": smaller blobs are stored as m+1 whole copies on distinct domains. Same promise —
  survives the loss of any m domains — but m+1 files instead of k+m, and no block smaller than a
  filesystem page per shard. Past the threshold the (k+m)/k space overhead wins.

Write quorum: by default k+1 shards (copies: 2) must be durable for a write to succeed — Ceph's
EC `min_size` rule. A write accepted at quorum can lose one more domain before heal restores full
width and still be read; accepting bare k would make the next failure lose acknowledged data.
So writes tolerate m-1 unavailable domains, reads tolerate m.

Drive health (drive_health.py): a drive that is full or keeps failing writes stays online for
reads but is skipped by placement; a shard whose write fails is retried on another drive (see
writer.py) before the quorum is judged. A background task re-probes marked drives.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from erasure.drive import Drive, DriveFactory
from erasure.drive_health import DriveHealth, DriveHealthSettings
from erasure.durability import FlushBarrier
from erasure.errors import DataLost, DataNotFound, DomainOffline, ErasureError
from erasure.heal import HealResult, heal
from erasure.location import Location
from erasure.pack import PackSet
from erasure.placement import PlacementMemo
from erasure.reader import PoolReader
from erasure.rebalance import Throttle, move_shard, plan_moves
from erasure.shard_store import LocalDrive, local_drive, publish_shards_many
from erasure.topology import LEVELS, Domain, Topology
from erasure.whole_reads import read_at_hand, read_healthy
from erasure.writer import PoolWriter

DEFAULT_BLOCK_SIZE = 1 << 20
DEFAULT_SMALL_OBJECT_THRESHOLD = 64 << 10


@dataclass(frozen=True)
class ShardFile:
    """A committed shard file found on a domain (see `ErasurePool.list_shards`)."""

    data_id: str
    index: int
    domain: str
    mtime: float
    size: int


@dataclass(frozen=True)
class HealRequest:
    """A blob a reader found degraded; whoever drains `ErasurePool.heal_requests` calls `heal`."""

    data_id: str
    location: dict[str, Any]
    size: int
    reason: str


class ErasurePool:
    def __init__(
        self,
        name: str,
        topology: Topology,
        k: int,
        m: int,
        spread_level: str = "drive",
        block_size: int = DEFAULT_BLOCK_SIZE,
        write_quorum: int | None = None,
        small_object_threshold: int = DEFAULT_SMALL_OBJECT_THRESHOLD,
        heal_queue_size: int = 1024,
        drive_health: DriveHealthSettings | None = None,
        drive_factory: DriveFactory = local_drive,
    ) -> None:
        if k < 1 or m < 0 or k + m > 256:
            raise ValueError(f"pool {name}: need k >= 1, m >= 0, k+m <= 256")
        if spread_level not in LEVELS:
            raise ValueError(f"pool {name}: unknown spread level {spread_level!r}")
        groups = len(topology.groups(spread_level))
        if groups < k + m:
            raise ValueError(
                f"pool {name}: {k}+{m} needs {k + m} distinct {spread_level}s, topology has {groups}"
            )
        quorum = k + min(m, 1) if write_quorum is None else write_quorum
        if not k <= quorum <= k + m:
            raise ValueError(f"pool {name}: write quorum must be between k={k} and k+m={k + m}")
        if not 0 <= small_object_threshold <= k * block_size:
            raise ValueError(
                f"pool {name}: small_object_threshold must be within one stripe ({k * block_size})"
            )
        self.name, self.topology, self.k, self.m = name, topology, k, m
        self.spread_level, self.block_size = spread_level, block_size
        self.write_quorum = quorum
        self.small_object_threshold = small_object_threshold
        # Degraded reads enqueue here; when full, requests are dropped (a scrub finds them later).
        self.heal_requests: asyncio.Queue[HealRequest] = asyncio.Queue(heal_queue_size)
        self._drive_factory = drive_factory
        self._stores: dict[str, Drive] = {}
        self.health = DriveHealth(name, drive_health, drive_of=self.store_of)
        self._reprobe: asyncio.Task[None] | None = None
        # Pack files (opt-in per drive): how often mostly dead packs are rewritten, how fast.
        self.pack_compact_seconds = 60.0
        self.pack_compact_rate = float(32 << 20)
        self._compactor: asyncio.Task[None] | None = None
        # Writers in this process that chose their domains and have not finished yet, per domain.
        # A write that placed a shard on a domain just before it began draining commits after
        # placement excluded it; a drain waits for these before its last look at the catalog.
        self._placements: Counter[str] = Counter()
        self._placing = 0  # writers between reading the domains' states and holding what they chose
        self._placements_lock = threading.Lock()  # writers place from worker threads too
        self._counters_dir: Path | None = None  # share_counters

    # -- plumbing shared by writer, reader and heal -----------------------------------------

    def store(self, domain_id: str) -> Drive | None:
        """The shard store of a domain by id; None if the topology has no such domain (any more)."""
        store = self._stores.get(domain_id)
        if store is None:
            domain = self.topology.get(domain_id)
            if domain is None:
                return None
            store = self.store_of(domain)
        return store

    def store_of(self, domain: Domain) -> Drive:
        """The drive of a domain in hand (one from this pool's topology): local or on a node."""
        store = self._stores.get(domain.id)
        if store is None:
            store = self._stores[domain.id] = self._drive_factory(domain)
            self._share_counters_of(domain, store)
        return store

    def share_counters(self, directory: Path) -> None:
        """Count the shards and bytes of this pool's local drives in files under `directory`, shared
        with the other processes of this host (erasure/drive_counters.py): call before `start`."""
        self._counters_dir = directory
        for domain in self.topology:
            self._share_counters_of(domain, self.store_of(domain))

    def _share_counters_of(self, domain: Domain, store: Drive) -> None:
        if self._counters_dir is not None and isinstance(store, LocalDrive):
            store.share_counters(self._counters_dir / f"{self.name}.{domain.id}".replace("/", "_"))

    def writable(self, domain: Domain) -> bool:
        """May new shards go to `domain`? (Online, and not marked full or failing; draining is placement's.)"""
        return domain.online and self.health.writable(domain.id)

    def unwritable(self) -> list[str]:
        """Online drives placement skips now, as "<drive> <full|failing>" (for error messages)."""
        return [
            f"{d.id} {self.health.condition(d.id).value}"
            for d in self.topology
            if d.online and not self.health.writable(d.id)
        ]

    def write_quorum_for(self, layout: str) -> int:
        """Shards that must be durable; the replica layout keeps the same number of spare failures."""
        return self.write_quorum if layout == "ec" else self.write_quorum - self.k + 1

    @contextlib.contextmanager
    def placing(self) -> Iterator[None]:
        """Around a writer's choice of domains and its `hold_placement`: until it holds, it may
        have chosen a domain that began draining since it looked, so `writes_placed_on` counts
        it on every domain (a drain then waits for the next count; never misses it)."""
        with self._placements_lock:
            self._placing += 1
        try:
            yield
        finally:
            with self._placements_lock:
                self._placing -= 1

    def hold_placement(self, domain_ids: list[str]) -> list[str]:
        """A writer placed shards on these domains (released by `release_placement`)."""
        with self._placements_lock:
            self._placements.update(domain_ids)
        return domain_ids

    def release_placement(self, domain_ids: list[str]) -> None:
        with self._placements_lock:
            self._placements.subtract(domain_ids)
            self._placements = +self._placements

    def writes_placed_on(self, domain_ids: list[str]) -> int:
        """Writers in this process still writing shards to any of these domains (or choosing)."""
        with self._placements_lock:
            return sum(self._placements[d] for d in domain_ids) + self._placing

    def placements(self, domain_ids: list[str]) -> dict[str, int]:
        """Writers in this process still writing shards (or choosing), per domain of this pool asked about."""
        ours = [d for d in domain_ids if self.topology.get(d) is not None]
        with self._placements_lock:
            return {d: self._placements[d] + self._placing for d in ours}

    def request_heal(self, data_id: str, location: dict[str, Any], size: int, reason: str) -> None:
        with contextlib.suppress(asyncio.QueueFull):
            self.heal_requests.put_nowait(HealRequest(data_id, location, size, reason))

    # -- lifecycle --------------------------------------------------------------------------

    async def start(
        self, tmp_max_age: float = 3600.0, judged_elsewhere: Callable[[str], bool] | None = None
    ) -> None:
        """Sweep abandoned temporary files (see `Drive.sweep_tmp`), count shards on every online
        domain, check drive health."""
        await asyncio.gather(
            *(
                asyncio.to_thread(self._start_domain, d.id, tmp_max_age, judged_elsewhere)
                for d in self.topology
            )
        )
        if self._reprobe is None:
            self._reprobe = asyncio.create_task(self._reprobe_drives(), name=f"drive-health-{self.name}")
        if self._compactor is None and self.pack_compact_seconds > 0 and self._packs():
            self._compactor = asyncio.create_task(self._compact_forever(), name=f"pack-compactor-{self.name}")

    def _packs(self) -> list[PackSet]:
        """The pack sets of this pool's local drives that pack small shards (erasure/pack.py)."""
        found = []
        for domain in self.topology:
            packs = getattr(self.store_of(domain), "packs", None)
            if isinstance(packs, PackSet) and domain.online:
                found.append(packs)
        return found

    async def compact_packs(self) -> int:
        """Rewrite mostly dead pack files on every online drive; returns the bytes reclaimed."""
        reclaimed = 0
        for packs in self._packs():  # one drive at a time: compaction is background work
            try:
                reclaimed += await asyncio.to_thread(packs.compact, bytes_per_second=self.pack_compact_rate)
            except OSError:
                logging.getLogger("tierstore.erasure.packs").exception(
                    "compacting packs in %s failed", packs.dir
                )
        return reclaimed

    async def _compact_forever(self) -> None:
        while True:
            await asyncio.sleep(self.pack_compact_seconds)
            await self.compact_packs()

    def _start_domain(
        self, domain_id: str, tmp_max_age: float, judged_elsewhere: Callable[[str], bool] | None
    ) -> None:
        store = self.store(domain_id)
        assert store is not None
        with contextlib.suppress(DomainOffline, OSError):
            store.sweep_tmp(tmp_max_age, judged_elsewhere)
            store.scan()
        self.health.check([store.domain])

    async def _reprobe_drives(self) -> None:
        """Every `reprobe_seconds`: free space on every drive, a probe write on failing ones."""
        while True:
            await asyncio.sleep(self.health.settings.reprobe_seconds)
            try:
                await asyncio.to_thread(self.health.check, list(self.topology))
            except Exception:  # keep probing: one odd drive must not end it
                logging.getLogger("tierstore.erasure.drives").exception(
                    "re-probing the drives of %s failed", self.name
                )

    async def sweep(self, max_age: float = 3600.0) -> int:
        """Remove temporary files older than `max_age` seconds; returns how many."""
        counts = await asyncio.gather(
            *(asyncio.to_thread(self.store_of(d).sweep_tmp, max_age) for d in self.topology if d.online),
            return_exceptions=True,
        )
        return sum(c for c in counts if isinstance(c, int))

    async def sweep_tmp_of(self, writer: Callable[[str], bool]) -> int:
        """Remove the temporary shard files of data ids `writer` accepts (a dead writer's)."""
        counts = await asyncio.gather(
            *(asyncio.to_thread(self.store_of(d).sweep_tmp_of, writer) for d in self.topology if d.online),
            return_exceptions=True,
        )
        return sum(c for c in counts if isinstance(c, int))

    async def close(self) -> None:
        """Stop re-probing drives."""
        task, self._reprobe = self._reprobe, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        task, self._compactor = self._compactor, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- blobs ------------------------------------------------------------------------------

    async def create_writer(self, data_id: str, size_hint: int | None = None) -> PoolWriter:
        return PoolWriter(self, data_id, size_hint)

    def write_blob(self, data_id: str, data: bytes | memoryview) -> dict[str, Any]:
        """Store a whole blob durably and return its location. Blocking: call it from a worker thread.

        Meant for small blobs (held whole): the write and, by the caller, the catalog commit
        then share one thread trip.
        """
        return PoolWriter(self, data_id, len(data)).write_blob(data)

    def write_blobs(
        self, blobs: Sequence[tuple[str, bytes | memoryview]]
    ) -> list[dict[str, Any] | Exception]:
        """`write_blob` for several blobs at once, sharing one flush per drive: every blob's shards
        are written and published first, then each drive is asked for one flush covering them all.
        Per blob, its location or the error that failed it (nothing of it is left behind then).
        Blocking: call it from a worker thread (the small PUTs' committer: tiering/small_writes.py).

        The blobs are placed together, on the domains the first one's id ranks first (the others'
        locations say so: `Location.placed_by`), so that the batch appends to k+m packs rather
        than to k+m per blob: each pack a batch touches is one more data block and one more inode
        for the flush to write. Four 4 KiB PUTs on the default 16 hot drives touch about nine
        packs; a batch wrote 33 blocks, now 19.5 (bench/RESULTS.md). A blob's shards still go to
        distinct groups, and each drive's share is the same on average (first ids are random);
        a batch being one draw, the spread is wider for as many blobs (erasure/README.md).
        """
        results: list[dict[str, Any] | Exception] = []
        prepared: list[tuple[int, PoolWriter]] = []
        placed_by: str | None = None  # the first blob's id (one that is a valid id)
        memo = PlacementMemo()  # ranked by that id once, not once per blob
        for n, (data_id, data) in enumerate(blobs):
            try:
                writer = PoolWriter(self, data_id, len(data), placed_by=placed_by, memo=memo)
                placed_by = placed_by or writer.data_id
                writer.prepare_blob(data)
            except Exception as exc:
                results.append(exc)
                continue
            results.append({})
            prepared.append((n, writer))
        # Every blob's shards published together: those bound for one drive's packs in one write.
        staged: list[tuple[int, PoolWriter]] = []
        barriers: dict[int, FlushBarrier] = {}
        try:
            published = publish_shards_many([writer.prepared_shards() for _, writer in prepared])
        except Exception as exc:  # a bug, not a drive's failure: no blob of the batch is stored
            for n, writer in prepared:
                writer.abort_prepared()
                results[n] = exc
            return results
        for (n, writer), shards in zip(prepared, published, strict=True):
            barriers.update((id(b), b) for b in writer.publish_prepared(shards))
            staged.append((n, writer))
        # Asked for after the last blob was published: one flush per drive covers every blob.
        # One filesystem for the whole batch (drives that share a disk, as the default simulated
        # domains do): this thread flushes it itself when it waits, no hand-off to the flusher
        # thread and back. Several: the flusher threads flush them in parallel.
        background = len(barriers) > 1
        tickets = {key: barrier.request(background) for key, barrier in barriers.items()}
        for n, writer in staged:
            try:
                results[n] = writer.end_blob(tickets)
            except Exception as exc:
                results[n] = exc
        return results

    async def open_reader(self, data_id: str, location: dict[str, Any], size: int) -> PoolReader:
        return await PoolReader.open(self, data_id, Location.from_dict(location), size)

    def read_healthy(self, data_id: str, location: dict[str, Any], size: int) -> bytes | memoryview | None:
        """The whole blob when all its data shards read cleanly, else None (open a reader then).

        Blocking: call it from a worker thread. Meant for small blobs: the bytes are held whole.
        """
        return read_healthy(self, data_id, Location.from_dict(location), size)

    def read_at_hand(self, data_id: str, location: dict[str, Any], size: int) -> bytes | memoryview | None:
        """`read_healthy` without waiting for anything (no disk, no lock): callable on the event
        loop. None unless every data shard is a packed record in the page cache; then read in a thread."""
        return read_at_hand(self, data_id, Location.from_dict(location), size)

    async def delete(self, data_id: str, location: dict[str, Any]) -> None:
        """Remove every shard on reachable domains. Shards on offline domains stay behind as orphans."""
        loc = Location.from_dict(location)
        stores = [(i, self.store(d)) for i, d in enumerate(loc.shards) if d is not None]
        await asyncio.gather(
            *(asyncio.to_thread(s.remove, data_id, i) for i, s in stores if s is not None),
            return_exceptions=True,
        )

    async def delete_many(self, blobs: Sequence[tuple[str, dict[str, Any]]]) -> list[ValueError | None]:
        """`delete` of several blobs (the garbage collector's batches): one thread trip per drive
        for all their shards on it, packed ones tombstoned in one write, instead of a trip per
        shard. Shards on offline domains stay behind as orphans, as with `delete`. Per blob None,
        or the ValueError of a location that cannot be read (that blob alone is left alone)."""
        results: list[ValueError | None] = [None] * len(blobs)
        by_drive: dict[str, tuple[Drive, list[tuple[str, int]]]] = {}
        for n, (data_id, location) in enumerate(blobs):
            try:
                shards = Location.from_dict(location).shards
            except (ValueError, KeyError, TypeError) as exc:
                results[n] = ValueError(f"erasure location of {data_id}: {exc!r}")
                continue
            for i, domain_id in enumerate(shards):
                store = self.store(domain_id) if domain_id is not None else None
                if domain_id is not None and store is not None:
                    by_drive.setdefault(domain_id, (store, []))[1].append((data_id, i))
        await asyncio.gather(
            *(asyncio.to_thread(_remove_all, store, shards) for store, shards in by_drive.values()),
            return_exceptions=True,
        )
        return results

    def recent_shards(self, since: float, until: float) -> dict[str, dict[str, Any]]:
        """Blobs with a committed shard file written in [since, until), as locations to delete.

        For the orphan sweep after a crash: the catalog decides which of these are referenced.
        Blocking (walks the domains' fan-out directories): call it from a worker thread.
        """
        found: dict[str, dict[str, Any]] = {}
        for domain in self.topology:
            if not domain.online:
                continue
            for shard in self.list_shards(domain.id):
                if since <= shard.mtime < until:
                    blob = found.setdefault(shard.data_id, {"shards": {}})
                    blob["shards"][shard.index] = domain.id
        locations: dict[str, dict[str, Any]] = {}
        for data_id, blob in found.items():
            index, domain_id = next(iter(blob["shards"].items()))
            store = self.store(domain_id)
            if store is None:  # the domain left the topology since it was listed
                continue
            try:
                reader = store.open(data_id, index)
            except (OSError, ErasureError):
                continue
            header = reader.header
            reader.close()
            width = header.k + header.m
            shards = [blob["shards"].get(i) for i in range(width)]
            locations[data_id] = {
                "v": 1,
                "layout": header.layout,
                "k": header.k,
                "m": header.m,
                "block_size": header.block_size,
                "shards": shards,
                "missing": [i for i, d in enumerate(shards) if d is None],
                "size": header.size,
            }
        return locations

    def list_shards(self, domain_id: str) -> list[ShardFile]:
        """Every committed shard file on one domain (not temporary files being written).

        For the consistency check (`tierstore admin fsck`) and the orphan sweep: the caller
        compares them with the locations it recorded. Blocking (walks the fan-out directories):
        call it from a worker thread. Raises DomainOffline when the domain is offline.
        """
        store = self.store(domain_id)
        if store is None:
            raise DataNotFound(f"no domain {domain_id!r} in pool {self.name}")
        return [ShardFile(s.data_id, s.index, domain_id, s.mtime, s.size) for s in store.list_shards()]

    def readable_now(self, location: dict[str, Any]) -> bool:
        """At least k of the blob's shards on domains this pool believes online (no I/O: a
        shard found missing or corrupt on an online domain still fails the read itself)."""
        loc = Location.from_dict(location)
        online = 0
        for _, domain_id in loc.present():
            domain = self.topology.get(domain_id)
            online += domain is not None and domain.online
        return online >= loc.k

    def shards_present(self, data_id: str, location: dict[str, Any]) -> dict[int, bool | None]:
        """Shard index -> is its file where the location says (None: that domain is offline).

        Blocking (one stat per shard): call it from a worker thread.
        """
        present: dict[int, bool | None] = {}
        for index, domain_id in Location.from_dict(location).present():
            store = self.store(domain_id)
            if store is None:
                present[index] = False
                continue
            try:
                present[index] = store.has(data_id, index)
            except DomainOffline:
                present[index] = None
        return present

    async def exists(self, data_id: str, location: dict[str, Any]) -> bool:
        """True while at least k shard files are reachable (the blob can be opened)."""
        loc = Location.from_dict(location)
        stores = [(i, self.store(d)) for i, d in loc.present()]
        found = await asyncio.gather(
            *(asyncio.to_thread(s.has, data_id, i) for i, s in stores if s is not None),
            return_exceptions=True,
        )
        return sum(1 for f in found if f is True) >= loc.k

    async def heal(self, data_id: str, location: dict[str, Any], size: int) -> HealResult:
        return await heal(self, data_id, location, size, repair=True)

    async def verify(self, data_id: str, location: dict[str, Any], size: int) -> HealResult:
        """Like heal, but only reports (a scrubber's read-only pass)."""
        return await heal(self, data_id, location, size, repair=False)

    async def read_all(self, data_id: str, location: dict[str, Any], size: int) -> bytes:
        """Convenience for tests and small blobs: the whole blob in memory."""
        reader = await self.open_reader(data_id, location, size)
        try:
            data = b"".join([chunk async for chunk in reader.stream(0, size)])
        except BaseException as exc:  # not `finally: await`, closed outside the handler: see setup.py
            failure = exc
        else:
            await reader.close()
            return data
        await reader.close()
        raise failure

    # -- rebalancing (erasure.rebalance) ----------------------------------------------------

    def desired_domains(self, data_id: str, location: dict[str, Any]) -> dict[int, str]:
        """Shard index → drive for the shards that should move now (empty: the blob is placed well)."""
        plan = plan_moves(
            data_id, Location.from_dict(location), self.topology, self.spread_level, self.writable
        )
        return {i: d.id for i, d in plan.moves.items()}

    async def move_shard(
        self,
        data_id: str,
        location: dict[str, Any],
        index: int,
        target_domain: str,
        size: int,
        throttle: Throttle | None = None,
    ) -> dict[str, Any]:
        """Copy shard `index` to `target_domain`, verify it; returns the new location (old file kept)."""
        target = self.topology.get(target_domain)
        if target is None:
            raise DataNotFound(f"no domain {target_domain!r} in pool {self.name}")
        return await move_shard(self, data_id, location, index, target, size, throttle)

    # -- status -----------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Per-domain state and usage. Cheap: counters plus one statvfs per online domain."""
        domains = []
        for domain in self.topology:
            store = self.store(domain.id)
            assert store is not None
            entry: dict[str, Any] = {
                "id": domain.id,
                "path": str(domain.path),
                "state": domain.state.value,
                "draining": domain.draining,
                "node": domain.node,
                "rack": domain.rack,
                "zone": domain.zone,
                "weight": domain.weight,
                "shards": store.shard_count,
                "used_bytes": store.shard_bytes,
                "free_bytes": None,
                "total_bytes": None,
                "health": self.health.condition(domain.id).value,
                "health_detail": self.health.detail(domain.id),
            }
            if domain.address is not None:
                entry["address"] = domain.address
            if domain.online:
                with contextlib.suppress(OSError, ErasureError):
                    usage = store.disk_usage()
                    if usage is not None:
                        entry["free_bytes"], entry["total_bytes"] = usage
            domains.append(entry)
        return {
            "name": self.name,
            "k": self.k,
            "m": self.m,
            "spread_level": self.spread_level,
            "block_size": self.block_size,
            "write_quorum": self.write_quorum,
            "small_object_threshold": self.small_object_threshold,
            "online": sum(1 for d in self.topology if d.online),
            "domains": domains,
            "heal_queue": self.heal_requests.qsize(),
        }


__all__ = ["DataLost", "DataNotFound", "ErasurePool", "HealRequest", "HealResult", "ShardFile"]


def _remove_all(store: Drive, shards: list[tuple[str, int]]) -> None:
    """Remove `shards` from one drive: a local drive in one go, any other shard by shard (one
    that fails, e.g. on an unreachable node, stays behind as `delete` leaves it)."""
    if isinstance(store, LocalDrive):
        store.remove_many(shards)
        return
    for data_id, index in shards:
        with contextlib.suppress(Exception):
            store.remove(data_id, index)
