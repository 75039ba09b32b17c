"""Where a blob's shards live: the JSON-serialisable record the catalog keeps for a read.

    {"v": 1, "layout": "ec" | "replica", "k": 4, "m": 2, "block_size": 1048576,
     "shards": ["hot-n1-d2", "hot-n3-d1", ...],   # shard index -> domain id (null: never placed)
     "missing": [5],                               # indexes not written; heal recreates them
     "placed_by": "t0662..."}                      # only if placement ranked another id (below)

A replica layout is stored as k=1 (one data shard) with m extra copies.

`placed_by`: the id placement ranked the domains with, when it is not the blob's own. A batch of
small PUTs is placed together, on the drives its first blob's id ranks first (erasure/pool.py,
`write_blobs`): rebalance and heal must rank with the same id, or they would take the batch's
blobs for misplaced and move them. Absent (the blob's own id) in every other location.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FORMAT_VERSION = 1


@dataclass
class Location:
    layout: str
    k: int
    m: int
    block_size: int
    shards: list[str | None]
    missing: set[int] = field(default_factory=set)
    placed_by: str | None = None

    def __init__(
        self,
        layout: str,
        k: int,
        m: int,
        block_size: int,
        shards: list[str | None],
        missing: set[int] | None = None,
        placed_by: str | None = None,
    ) -> None:
        # Written out, not generated: one per blob written or read (tiering/records.py says why).
        self.layout = layout
        self.k = k
        self.m = m
        self.block_size = block_size
        self.shards = shards
        self.missing = set() if missing is None else missing
        self.placed_by = placed_by

    @property
    def width(self) -> int:
        return self.k + self.m

    def placement_key(self, data_id: str) -> str:
        """The id that placement ranks this blob's domains by (rebalance and heal too)."""
        return self.placed_by or data_id

    def present(self) -> list[tuple[int, str]]:
        """(shard index, domain id) of every shard that should exist."""
        return [(i, d) for i, d in enumerate(self.shards) if d is not None and i not in self.missing]

    def to_dict(self) -> dict[str, Any]:
        raw: dict[str, Any] = {
            "v": FORMAT_VERSION,
            "layout": self.layout,
            "k": self.k,
            "m": self.m,
            "block_size": self.block_size,
            "shards": list(self.shards),
            "missing": sorted(self.missing),
        }
        if self.placed_by is not None:
            raw["placed_by"] = self.placed_by
        return raw

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Location:
        if raw.get("v") != FORMAT_VERSION or raw.get("layout") not in ("ec", "replica"):
            raise ValueError(f"unsupported erasure location: {raw!r}")
        loc = cls(
            raw["layout"],
            int(raw["k"]),
            int(raw["m"]),
            int(raw["block_size"]),
            list(raw["shards"]),
            {int(i) for i in raw.get("missing", ())},
            raw.get("placed_by"),
        )
        if len(loc.shards) != loc.width:
            raise ValueError("erasure location: shard list does not match k+m")
        return loc


def names_shard(raw: dict[str, Any], domain_id: str, shard: int) -> bool:
    """Whether a recorded location says shard `shard` lives on `domain_id` (and was written)."""
    shards = raw.get("shards") or []
    return shard < len(shards) and shards[shard] == domain_id and shard not in set(raw.get("missing") or ())
