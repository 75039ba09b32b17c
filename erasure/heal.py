"""Verify a blob's shards and rebuild the missing or corrupt ones.

Pass 1 verifies every block of every reachable shard (one worker thread per shard, one block in
memory each). If some stripe has fewer than k good blocks the blob is reported lost and nothing is
touched; `unrecoverable` when even the shards on offline domains could not make up k. Pass 2
rebuilds each damaged shard whole — from any k good blocks per stripe — into a new file that
replaces the old one atomically: on its own domain if that is online, writable (not full or
failing) and not draining, otherwise on another online domain in a group (at the pool's spreading
level) that holds no other shard of the blob. The caller records the returned location when `changed` is true.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from erasure.checksum import block_checksum
from erasure.codec import codec_for, rebuild_blocks
from erasure.drive import ShardReader, ShardWriter
from erasure.errors import CorruptShard, ErasureError
from erasure.location import Location
from erasure.placement import place
from erasure.reader import OFFLINE, open_shards
from erasure.shard_format import ShardHeader
from erasure.stripe import StripeLayout
from erasure.topology import Domain

if TYPE_CHECKING:
    from erasure.pool import ErasurePool


@dataclass
class HealResult:
    data_id: str
    location: dict[str, Any]  # the location after healing (the input one when nothing changed)
    changed: bool = False  # location differs from the input: record it
    lost: bool = False  # some stripe has fewer than k good blocks reachable now
    # Some stripe has fewer than k good blocks even counting the shards on offline domains: no
    # domain coming back can make the blob readable again. (`lost` without this may be an outage.)
    unrecoverable: bool = False
    damaged: list[int] = field(default_factory=list)  # shards found missing, offline or corrupt
    rebuilt: list[int] = field(default_factory=list)  # shards rewritten by this call
    still_missing: list[int] = field(default_factory=list)  # damaged shards with nowhere to go
    corrupt_blocks: int = 0

    @property
    def clean(self) -> bool:
        return not self.damaged and not self.lost


def _verify_shard(f: ShardReader, stripes: int) -> set[int]:
    """Stripes whose block in this shard is bad (runs in a worker thread)."""
    bad = set()
    for s in range(stripes):
        try:
            f.read_block(s)
        except CorruptShard:
            bad.add(s)
    return bad


async def heal(
    pool: ErasurePool, data_id: str, raw: dict[str, Any], size: int, repair: bool = True
) -> HealResult:
    loc = Location.from_dict(raw)
    geo = StripeLayout(size, loc.k, loc.block_size)
    files, problems = await open_shards(pool, data_id, loc, size)
    result = HealResult(data_id, loc.to_dict())
    try:
        bad: dict[int, set[int]] = {}
        verified = await asyncio.gather(
            *(asyncio.to_thread(_verify_shard, f, geo.stripe_count) for f in files.values()),
            return_exceptions=True,
        )
        for i, outcome in zip(list(files), verified, strict=True):
            if isinstance(outcome, set):
                bad[i] = outcome
            elif isinstance(outcome, ErasureError | OSError):
                problems[i] = "offline"  # the domain went away while we verified it
                await asyncio.to_thread(files.pop(i).close)
            else:
                raise outcome
        damaged = set(problems) | {i for i, stripes in bad.items() if stripes}
        result.damaged = sorted(damaged)
        result.corrupt_blocks = sum(len(s) for s in bad.values())
        healthy_per_stripe = [sum(1 for i in files if s not in bad[i]) for s in range(geo.stripe_count)]
        result.lost = len(files) < loc.k or any(n < loc.k for n in healthy_per_stripe)
        offline = sum(1 for why in problems.values() if why == OFFLINE)
        result.unrecoverable = any(n + offline < loc.k for n in healthy_per_stripe)
        if result.lost or not damaged or not repair:
            result.still_missing = sorted(damaged)
            return result
        targets = _choose_targets(pool, data_id, loc, damaged)
        rebuilt = await _rebuild(pool, data_id, loc, geo, files, bad, targets)
    finally:
        await asyncio.gather(*(asyncio.to_thread(f.close) for f in files.values()))
    new = Location(
        loc.layout, loc.k, loc.m, loc.block_size, list(loc.shards), set(loc.missing), loc.placed_by
    )
    for i, domain in rebuilt.items():
        new.shards[i] = domain.id
    # Shards with nowhere to go keep their recorded place: an offline domain may come back.
    new.missing -= set(rebuilt)
    result.rebuilt = sorted(rebuilt)
    result.still_missing = sorted(damaged - set(rebuilt))
    result.location = new.to_dict()
    result.changed = result.location != raw
    return result


def _choose_targets(pool: ErasurePool, data_id: str, loc: Location, damaged: set[int]) -> dict[int, Domain]:
    level = pool.spread_level
    targets: dict[int, Domain] = {}
    taken: set[str] = set()
    for i, domain_id in enumerate(loc.shards):
        domain = pool.topology.get(domain_id) if domain_id else None
        if domain is None:
            continue
        if i not in damaged:
            taken.add(domain.label(level))
        elif pool.writable(domain) and not domain.draining:
            targets[i] = domain  # rebuilt in place, unless the drive is full, failing or draining
            taken.add(domain.label(level))
        # A draining domain is being emptied: its damaged shard is rebuilt elsewhere, like an
        # offline one's, not written back to it for the rebalancer to move again.
    for i in sorted(damaged - set(targets)):
        found = place(
            loc.placement_key(data_id), pool.topology, level, 1, exclude_groups=taken, usable=pool.writable
        )
        if found:
            targets[i] = found[0]
            taken.add(found[0].label(level))
        elif (own := pool.topology.get(loc.shards[i] or "")) is not None and own.online:
            targets[i] = own  # draining, but nowhere else to go: full width beats an empty domain
    return targets


async def _rebuild(
    pool: ErasurePool,
    data_id: str,
    loc: Location,
    geo: StripeLayout,
    files: dict[int, ShardReader],
    bad: dict[int, set[int]],
    targets: dict[int, Domain],
) -> dict[int, Domain]:
    """Write the target shards stripe by stripe; returns the ones committed."""
    codec = codec_for(loc.k, loc.m)
    headers = {
        i: ShardHeader(data_id, loc.layout, loc.k, loc.m, i, loc.block_size, geo.size) for i in targets
    }
    created = await asyncio.gather(
        *(asyncio.to_thread(pool.store_of(d).create, headers[i]) for i, d in targets.items()),
        return_exceptions=True,
    )
    for i, made in zip(targets, created, strict=True):
        _report(pool, targets[i], made)
    writers = {i: w for i, w in zip(targets, created, strict=True) if not isinstance(w, BaseException)}
    try:
        for stripe in range(geo.stripe_count):
            if not writers:
                break
            good = await _good_blocks(files, bad, stripe, loc.k)
            blocks = await asyncio.to_thread(rebuild_blocks, codec, good, list(writers))
            appended = await asyncio.gather(
                *(asyncio.to_thread(_append, w, stripe, i, blocks[i]) for i, w in writers.items()),
                return_exceptions=True,
            )
            for i, outcome in zip(list(writers), appended, strict=True):
                if isinstance(outcome, BaseException):
                    _report(pool, targets[i], outcome)
                    await asyncio.to_thread(writers.pop(i).discard)
        committed = await asyncio.gather(
            *(asyncio.to_thread(w.commit) for w in writers.values()), return_exceptions=True
        )
    except BaseException:
        await asyncio.gather(*(asyncio.to_thread(w.discard) for w in writers.values()))
        raise
    for i, outcome in zip(writers, committed, strict=True):
        _report(pool, targets[i], outcome)
    done = {
        i for i, outcome in zip(writers, committed, strict=True) if not isinstance(outcome, BaseException)
    }
    await asyncio.gather(*(asyncio.to_thread(w.discard) for i, w in writers.items() if i not in done))
    return {i: targets[i] for i in done}


def _report(pool: ErasurePool, target: Domain, outcome: object) -> None:
    """Tell drive health how a write to a heal target went (a full or failing drive is then skipped)."""
    if isinstance(outcome, OSError):
        pool.health.write_failed(target, outcome)
    elif not isinstance(outcome, BaseException):
        pool.health.write_succeeded(target.id)


async def _good_blocks(
    files: dict[int, ShardReader], bad: dict[int, set[int]], stripe: int, k: int
) -> dict[int, bytes]:
    """k verified blocks of `stripe`, data shards first (so a healthy stripe needs no decode)."""
    candidates = [i for i in sorted(files) if stripe not in bad[i]]
    good: dict[int, bytes] = {}
    while len(good) < k and candidates:
        batch, candidates = candidates[: k - len(good)], candidates[k - len(good) :]
        results = await asyncio.gather(
            *(asyncio.to_thread(files[i].read_block, stripe) for i in batch), return_exceptions=True
        )
        good.update({i: r for i, r in zip(batch, results, strict=True) if isinstance(r, bytes)})
    if len(good) < k:
        raise ErasureError(f"stripe {stripe} lost its k-th good block during heal")
    return good


def _append(writer: ShardWriter, stripe: int, shard: int, block: bytes | memoryview) -> None:
    """Checksum and append one rebuilt block (in a worker thread: hashing stays off the loop)."""
    writer.append(stripe, block_checksum(block, stripe, shard), block)
