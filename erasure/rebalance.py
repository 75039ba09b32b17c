"""Rebalancing one pool: where a blob's shards *should* be now, and moving one shard there.

Placement (placement.py) decides where new shards go; the catalog records where they are. After
the topology changes (a drive or node added, a domain draining) the two disagree for a share of
the blobs. This module computes, per blob, the smallest set of shard moves that makes the blob's
groups (at the pool's spreading level) equal to the groups placement would choose now:

- The desired groups are the top k+m groups by weighted rendezvous hashing over the groups that
  have at least one active (not draining) drive, weighted by their active capacity — exactly the
  ranking `place()` uses for new writes, so a blob written now needs no move.
- A shard *stays* if its drive is active, its group is desired and no other shard already kept
  that group. Every other readable shard moves: first into its own group when that group is still
  desired and unused (a draining drive's shard goes to a sibling drive), then into the desired
  groups nobody uses, best ranked first. Shard indexes never change, so adding one of N equal
  nodes moves about (k+m)/(N+1) shards of a blob — the share the new node wins — and nothing else.
- Missing shards (never written, or on an offline drive) are heal's business, not ours: they are
  not moved and do not hold a group.

A move copies the shard file block by block (each block checksum-verified as it is read), commits
it on the target domain (tmp → fsync → rename → dir fsync), then reads the new file back and
verifies every block. The caller swaps the location in its catalog and retires the old file.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from erasure.checksum import block_checksum
from erasure.drive import Drive, ShardWriter
from erasure.errors import ErasureError
from erasure.location import Location
from erasure.placement import rank
from erasure.shard_format import ShardHeader, file_size
from erasure.topology import Domain, Topology

if TYPE_CHECKING:
    from erasure.pool import ErasurePool

Throttle = Callable[[int], Awaitable[None]]
T = TypeVar("T")


# --- placement arithmetic (pure) ------------------------------------------------------------------


def active_groups(topology: Topology, level: str) -> dict[str, list[Domain]]:
    """Groups at `level` with their active (not draining) drives; groups with none are left out."""
    out: dict[str, list[Domain]] = {}
    for group_id, members in topology.groups(level).items():
        active = [d for d in members if not d.draining]
        if active:
            out[group_id] = active
    return out


def desired_groups(data_id: str, topology: Topology, level: str, count: int) -> list[str]:
    """The `count` groups placement prefers for `data_id` now, best first (offline ones included)."""
    groups = active_groups(topology, level)
    return rank(data_id, [(g, sum(d.weight for d in ds)) for g, ds in groups.items()])[:count]


def pick_drive(
    data_id: str,
    group_id: str,
    members: list[Domain],
    writable: Callable[[Domain], bool] | None = None,
) -> Domain | None:
    """The drive of a group that placement would write to: online, active and `writable` (not full
    or failing), best HRW score."""
    usable = {d.id: d for d in members if d.online and not d.draining and (writable is None or writable(d))}
    best = rank(f"{data_id}\0{group_id}", [(d.id, d.weight) for d in usable.values()])
    return usable[best[0]] if best else None


@dataclass
class MovePlan:
    """The moves that bring one blob to its desired groups."""

    moves: dict[int, Domain] = field(default_factory=dict)  # shard index → target drive
    misplaced: int = 0  # readable shards outside the desired set (moves + blocked + unplaceable)
    blocked: int = 0  # misplaced, but the target group has no writable drive now (offline)
    unplaceable: int = 0  # misplaced, but no desired group is free (fewer groups than shards)
    desired: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return self.misplaced == 0


def plan_moves(
    data_id: str,
    loc: Location,
    topology: Topology,
    level: str,
    writable: Callable[[Domain], bool] | None = None,
) -> MovePlan:
    """The minimal matching of a blob's shards onto its desired groups (see the module doc).

    `writable` leaves out target drives that cannot take writes now (full, failing): a move there
    is blocked, as to an offline drive, until the drive recovers.
    """
    key = loc.placement_key(data_id)  # what placement ranked by: a batch's blobs share their first's id
    desired = desired_groups(key, topology, level, loc.width)
    plan = MovePlan(desired=desired)
    wanted = set(desired)
    kept: set[str] = set()
    movers: list[tuple[int, str]] = []  # (index, current group)
    for i, domain_id in loc.present():
        domain = topology.get(domain_id)
        if domain is None:
            continue  # recorded on a drive this process does not know: nothing we can read
        group = domain.label(level)
        if not domain.draining and group in wanted and group not in kept:
            kept.add(group)
        elif domain.online:
            movers.append((i, group))
        else:
            # Unreadable now; it still holds its group if it may (heal rebuilds it in place).
            plan.misplaced += 1
            plan.blocked += 1
    free = [g for g in desired if g not in kept]
    members = active_groups(topology, level)
    # Phase 1: a shard whose own group is still wanted moves inside it (drive drain); phase 2: the rest.
    rest = []
    for i, group in movers:
        if group in free:
            free.remove(group)
            _assign(plan, key, i, group, members, writable)
        else:
            rest.append(i)
    for i in rest:
        if not free:
            plan.misplaced += 1
            plan.unplaceable += 1
            continue
        _assign(plan, key, i, free.pop(0), members, writable)
    return plan


def _assign(
    plan: MovePlan,
    key: str,
    index: int,
    group: str,
    members: dict[str, list[Domain]],
    writable: Callable[[Domain], bool] | None,
) -> None:
    plan.misplaced += 1
    target = pick_drive(key, group, members.get(group, []), writable)
    if target is None:
        plan.blocked += 1
    else:
        plan.moves[index] = target


def shard_file_bytes(loc: Location, size: int) -> int:
    """Bytes of one shard file of a blob (header and checksums included)."""
    return file_size(ShardHeader("x", loc.layout, loc.k, loc.m, 0, loc.block_size, size))


# --- moving one shard -----------------------------------------------------------------------------


async def move_shard(
    pool: ErasurePool,
    data_id: str,
    location: dict[str, Any],
    index: int,
    target: Domain,
    size: int,
    throttle: Throttle | None = None,
) -> dict[str, Any]:
    """Copy shard `index` to `target`, verify the copy, return the location that names it.

    The source stays untouched (the caller retires it after swapping the location); on any
    failure the partial copy is removed and ErasureError/OSError propagates.
    """
    loc = Location.from_dict(location)
    source_id = loc.shards[index]
    if source_id is None or index in loc.missing:
        raise ErasureError(f"{data_id}: shard {index} has no copy to move")
    source, dest = pool.store(source_id), pool.store(target.id)
    if source is None or dest is None:
        raise ErasureError(f"{data_id}: unknown domain {source_id if source is None else target.id}")
    if target.id == source_id:
        return loc.to_dict()
    reader = await asyncio.to_thread(source.open, data_id, index)
    writer: ShardWriter | None = None
    committed = False
    try:
        header = reader.header
        if (header.k, header.m, header.size, header.block_size) != (loc.k, loc.m, size, loc.block_size):
            raise ErasureError(f"{data_id}: shard {index} on {source_id} does not match its location")
        writer = await _write_to(pool, target, dest.create, header)
        for stripe in range(header.geometry.stripe_count):
            block = await asyncio.to_thread(reader.read_block, stripe)  # CorruptShard if not intact
            await _write_to(pool, target, writer.append, stripe, block_checksum(block, stripe, index), block)
            if throttle is not None:
                await throttle(len(block))
        await _write_to(pool, target, writer.commit)
        committed = True
        pool.health.write_succeeded(target.id)
        await asyncio.to_thread(_verify_copy, dest, header)
    except BaseException:
        if writer is not None and not committed:
            await asyncio.to_thread(writer.discard)
        elif committed:
            with contextlib.suppress(ErasureError, OSError):
                await asyncio.to_thread(dest.remove, data_id, index)
        raise
    finally:
        await asyncio.to_thread(reader.close)
    loc.shards[index] = target.id
    return loc.to_dict()


async def _write_to(pool: ErasurePool, target: Domain, fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a worker thread; an OSError is the target drive's, and its drive health hears of it."""
    try:
        return await asyncio.to_thread(fn, *args)
    except OSError as exc:
        pool.health.write_failed(target, exc)
        raise


def _verify_copy(store: Drive, expected: ShardHeader) -> None:
    """Read every block of a fresh copy back where it lives (checksums verified); raises
    CorruptShard if one is bad."""
    if store.verify_shard(expected.data_id, expected.index) != expected:
        raise ErasureError(f"copy of {expected.data_id}.{expected.index} has a different header")


# --- changing the pool itself ----------------------------------------------------------------------


def add_domain(pool: ErasurePool, domain: Domain) -> None:
    """Add a drive to a running pool: new writes may land on it at once."""
    if domain.address is None:  # a local directory (a node makes its own)
        domain.path.mkdir(parents=True, exist_ok=True)
    pool.topology.add(domain)
    store = pool.store(domain.id)
    assert store is not None
    with contextlib.suppress(ErasureError, OSError):
        store.scan()


def remove_domain(pool: ErasurePool, domain_id: str) -> Domain:
    """Forget a drive (the caller made sure nothing recorded lives on it)."""
    domain = pool.topology.remove(domain_id)
    pool._stores.pop(domain_id, None)
    return domain


def writable_groups(pool: ErasurePool) -> int:
    return len(active_groups(pool.topology, pool.spread_level))


def set_code(pool: ErasurePool, k: int, m: int) -> None:
    """Switch the code new blobs are written with; blobs already written keep theirs (the location says).

    The write quorum keeps its number of spare shards (default k+1: one), capped at k+m.
    """
    if k < 1 or m < 0 or k + m > 256:
        raise ValueError(f"pool {pool.name}: need k >= 1, m >= 0, k+m <= 256")
    groups = writable_groups(pool)
    if groups < k + m:
        raise ValueError(
            f"pool {pool.name}: {k}+{m} needs {k + m} distinct {pool.spread_level}s, {groups} are active"
        )
    spare = pool.write_quorum - pool.k
    pool.write_quorum = k + min(max(spare, 0), m)
    pool.small_object_threshold = min(pool.small_object_threshold, k * pool.block_size)
    pool.k, pool.m = k, m


def stale_code(pool: ErasurePool, loc: Location) -> bool:
    """Was this blob written with another code than the pool's current one?"""
    if loc.m != pool.m:
        return True
    return loc.layout == "ec" and loc.k != pool.k


__all__ = [
    "MovePlan",
    "active_groups",
    "add_domain",
    "desired_groups",
    "move_shard",
    "pick_drive",
    "plan_moves",
    "remove_domain",
    "set_code",
    "shard_file_bytes",
    "stale_code",
    "writable_groups",
]
