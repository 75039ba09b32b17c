"""Failure domains: the drives a tier's shards live on, and the tree (region/zone/rack/node) above them.

A `Domain` is one drive, which in the embedded default is a directory. Taking a domain offline
simulates a failed drive (or, by node/rack/zone id, a whole failed host): shard stores then act as
if the directory were unreachable — no reads, no writes — while the files stay on disk.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

# Outermost first; "drive" is the domain itself.
LEVELS: tuple[str, ...] = ("region", "zone", "rack", "node", "drive")


class DomainState(StrEnum):
    ONLINE = "online"
    OFFLINE = "offline"


def _default_weight(path: Path) -> float:
    """Capacity weight in TiB of the filesystem holding `path`; 1.0 when it cannot be measured."""
    try:
        total = shutil.disk_usage(path).total
    except OSError:
        return 1.0
    return total / float(1 << 40) if total > 0 else 1.0


@dataclass(eq=False)
class Domain:
    """One drive. Mutable only in `state` (and `weight` when capacity changes)."""

    id: str
    path: Path
    node: str = "node1"
    rack: str = "rack1"
    zone: str = "zone1"
    region: str = "region1"
    weight: float = field(default=0.0)
    state: DomainState = DomainState.ONLINE
    # Draining: still read (and healed in place), but no new shard is placed here; the rebalancer
    # moves its shards away (erasure.rebalance).
    draining: bool = False
    # None: a directory on this host. Else the base URL of the `tierstore node` serving the drive,
    # and `path` is the drive's directory relative to that node's data directory.
    address: str | None = None

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        if self.weight <= 0 and self.address is not None:
            self.weight = 1.0
        elif self.weight <= 0:
            self.weight = _default_weight(self.path)

    @property
    def online(self) -> bool:
        return self.state is DomainState.ONLINE

    def label(self, level: str) -> str:
        """The id of the group this drive belongs to at `level`, qualified so it is unique."""
        if level not in LEVELS:
            raise ValueError(f"unknown topology level {level!r} (one of {', '.join(LEVELS)})")
        if level == "drive":
            return self.id
        depth = LEVELS.index(level) + 1
        return "/".join((self.region, self.zone, self.rack, self.node)[:depth])


class Topology:
    """The domains of one tier, grouped on demand by any level of the failure-domain tree."""

    def __init__(self, domains: Iterable[Domain] = ()) -> None:
        self._domains: dict[str, Domain] = {}
        # level -> its groups: asked for by every placement (each small PUT), and they change
        # only when a drive is added or removed (a drive's ancestors never change).
        self._groups: dict[str, dict[str, list[Domain]]] = {}
        for domain in domains:
            self.add(domain)

    def add(self, domain: Domain) -> None:
        if domain.id in self._domains:
            raise ValueError(f"duplicate domain id {domain.id!r}")
        self._domains[domain.id] = domain
        self._groups = {}

    def remove(self, domain_id: str) -> Domain:
        removed = self._domains.pop(domain_id)
        self._groups = {}
        return removed

    def get(self, domain_id: str) -> Domain | None:
        return self._domains.get(domain_id)

    def __getitem__(self, domain_id: str) -> Domain:
        return self._domains[domain_id]

    def __iter__(self) -> Iterator[Domain]:
        return iter(self._domains.values())

    def __len__(self) -> int:
        return len(self._domains)

    def groups(self, level: str) -> dict[str, list[Domain]]:
        """Drives grouped by their `level` ancestor (drive level: one group per drive). Shared:
        read it, never change it."""
        out = self._groups.get(level)
        if out is None:
            out = {}
            for domain in self._domains.values():
                out.setdefault(domain.label(level), []).append(domain)
            self._groups[level] = out
        return out

    def set_state(self, target: str, state: DomainState | str, level: str | None = None) -> list[Domain]:
        """Set the state of a drive by id, or of every drive under a node/rack/zone/region id.

        A bare `target` is tried as a drive id, then as the short name of a node, rack, zone or
        region (e.g. "n1"), then as a qualified group id (e.g. "region1/zone1/rack1/n1").
        """
        state = DomainState(state)
        matched = self._match(target, level)
        if not matched:
            raise KeyError(f"no domain, node, rack, zone or region named {target!r}")
        for domain in matched:
            domain.state = state
        return matched

    def set_online(self, target: str, level: str | None = None) -> list[Domain]:
        return self.set_state(target, DomainState.ONLINE, level)

    def set_offline(self, target: str, level: str | None = None) -> list[Domain]:
        return self.set_state(target, DomainState.OFFLINE, level)

    def _match(self, target: str, level: str | None) -> list[Domain]:
        levels = [level] if level else ["drive", "node", "rack", "zone", "region"]
        for lvl in levels:
            if lvl == "drive":
                found = [d for d in self._domains.values() if d.id == target]
            else:
                found = [d for d in self._domains.values() if target in (getattr(d, lvl), d.label(lvl))]
            if found:
                return found
        return []


def default_layout(
    root: Path,
    tier: str,
    nodes: int,
    drives_per_node: int,
    *,
    racks: int = 1,
    zones: int = 1,
    weight: float | None = None,
) -> Topology:
    """Create directory domains root/<tier>/n<i>/d<j> with ids "<tier>-n<i>-d<j>".

    Nodes are dealt round-robin over `racks` racks and the racks over `zones` zones, so tests can
    build a tree with several levels from one call.
    """
    if nodes < 1 or drives_per_node < 1:
        raise ValueError("need at least one node and one drive per node")
    topology = Topology()
    for n in range(1, nodes + 1):
        rack_no = (n - 1) % racks + 1
        zone_no = (rack_no - 1) % zones + 1
        for d in range(1, drives_per_node + 1):
            path = Path(root) / tier / f"n{n}" / f"d{d}"
            path.mkdir(parents=True, exist_ok=True)
            topology.add(
                Domain(
                    id=f"{tier}-n{n}-d{d}",
                    path=path,
                    node=f"n{n}",
                    rack=f"rack{rack_no}",
                    zone=f"zone{zone_no}",
                    weight=weight or 0.0,
                )
            )
    return topology
