"""Weighted rendezvous (highest-random-weight) placement of a blob's shards on failure domains.

Each candidate gets score = -weight / ln(u), u = hash(data id, candidate) mapped into (0, 1); the
highest scores win. This is the "logarithmic method" of weighted HRW: a candidate wins with
probability proportional to its weight, and adding one candidate moves only the placements it
now wins (its share) — no table, no coordination, deterministic for a data id (or for the id a
blob was placed by: a batch of small blobs is ranked by its first blob's id, `Location.placed_by`).

Placement first ranks the groups at the spreading level (drives, nodes, racks, ...), then picks one
online drive inside each chosen group, so the shards land in distinct groups. It decides only
where *new* shards go: the catalog records actual locations, so reads never depend on it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence

import xxhash

from erasure.topology import Domain, Topology

_TWO64 = float(1 << 64)


def hrw_score(key: str, candidate: str, weight: float) -> float:
    return _score(key.encode() + b"\0", candidate, weight)


def _score(prefix: bytes, candidate: str, weight: float) -> float:
    """`hrw_score` with the key already encoded (`prefix`: its UTF-8 bytes and a NUL)."""
    if weight <= 0:
        return 0.0
    h = xxhash.xxh3_64_intdigest(prefix + candidate.encode())
    u = (h + 0.5) / _TWO64  # strictly inside (0, 1)
    return -weight / math.log(u)


def rank(key: str, candidates: Sequence[tuple[str, float]]) -> list[str]:
    """Candidate ids (with weights) ordered best first for `key`: by `hrw_score`, ties by id,
    candidates that score nothing left out.

    The key is encoded once, not once per candidate: every PUT ranks a dozen or more groups
    (15–24 k instructions fewer per 4 KiB PUT, bench/RESULTS.md)."""
    prefix = key.encode() + b"\0"
    scored: list[tuple[float, str]] = []
    for cid, weight in candidates:
        score = _score(prefix, cid, weight)
        if score > 0:
            scored.append((score, cid))
    scored.sort(reverse=True)
    return [cid for _, cid in scored]


def takes_new_shards(
    domain: Domain, usable: Callable[[Domain], bool] | None, online_only: bool = True
) -> bool:
    """May `domain` receive a new shard now? Online (unless `online_only` is off), not draining,
    and `usable` (not full or failing: erasure.drive_health). One rule for `place()` and for a
    `PlacementMemo` deciding whether its ranking still holds."""
    return (domain.online or not online_only) and not domain.draining and (usable is None or usable(domain))


def place(
    data_id: str,
    topology: Topology,
    level: str,
    count: int,
    *,
    exclude_groups: Collection[str] = (),
    online_only: bool = True,
    usable: Callable[[Domain], bool] | None = None,
) -> list[Domain]:
    """Up to `count` drives in distinct `level` groups for `data_id`, best first.

    Group scores use the group's full capacity weight (offline members included), so a drive
    failing does not reshuffle which groups the other blobs prefer. Draining drives count for
    nothing and receive nothing (erasure.rebalance computes the same ranking). `usable` leaves
    out drives that cannot take writes now (full or failing: erasure.drive_health); their group
    then gets its next best drive.
    """
    groups = topology.groups(level)
    chosen: list[Domain] = []
    weights = [(g, sum(d.weight for d in ds if not d.draining)) for g, ds in groups.items()]
    for group_id in rank(data_id, weights):
        if group_id in exclude_groups:
            continue
        members = [d for d in groups[group_id] if takes_new_shards(d, usable, online_only)]
        if len(members) == 1:
            # What ranking one candidate gives (it wins if it weighs anything), without hashing:
            # at the drive level, the default, every group is one drive.
            if members[0].weight > 0:
                chosen.append(members[0])
        elif members:
            by_id = {d.id: d for d in members}
            best = rank(f"{data_id}\0{group_id}", [(d.id, d.weight) for d in members])
            if best:
                chosen.append(by_id[best[0]])
        if len(chosen) == count:
            break
    return chosen


class PlacementMemo:
    """`place()` for the blobs of one batch, which all rank by one key (`ErasurePool.write_blobs`):
    the ranking is computed once per width and reused while it still holds.

    It holds while the topology's groups are the ones it was ranked over (a drive added or
    removed rebuilds them) and every drive it chose is still online, not draining and `usable`;
    else it is ranked again. Reused, it may miss a drive that became usable since (the batch
    lands on the next best ones; a rebalance moves it later). Ranking once per batch instead of
    once per blob, 4 KiB PUTs in batches of up to eight (bench/request_instructions.py): 2,525 k →
    2,274 k instructions per PUT in plain Python, 1,716 k → 1,664 k compiled; too little to show in
    the PUT rate on this box (bench/RESULTS.md).
    """

    def __init__(self) -> None:
        # (key, level, count) -> (the groups it was ranked over, the drives chosen)
        self._chosen: dict[tuple[str, str, int], tuple[dict[str, list[Domain]], list[Domain]]] = {}

    def place(
        self,
        data_id: str,
        topology: Topology,
        level: str,
        count: int,
        *,
        usable: Callable[[Domain], bool],
    ) -> list[Domain]:
        groups = topology.groups(level)
        memo_key = (data_id, level, count)
        hit = self._chosen.get(memo_key)
        if hit is not None and hit[0] is groups and all(takes_new_shards(d, usable) for d in hit[1]):
            return list(hit[1])
        chosen = place(data_id, topology, level, count, usable=usable)
        self._chosen[memo_key] = (groups, chosen)
        return list(chosen)
