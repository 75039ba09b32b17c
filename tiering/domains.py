"""Failure domains as operators see them: list them, take them offline, bring them back.

The domains themselves belong to each erasure-coded tier's pool (`erasure.Topology`); this module
gives them one namespace across tiers. A target names a drive (`hot-n1-d2`), or everything under a
node, rack or zone of one tier (`hot-n1`, `hot-rack1`, `hot-zone1`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tiering.store import ObjectStore


class UnknownDomain(KeyError):
    pass


def _pools(store: ObjectStore) -> dict[str, Any]:
    return {
        name: tier.backend.pool for name, tier in store.tiers.items() if hasattr(tier.backend, "pool")
    }


def list_domains(store: ObjectStore) -> list[dict[str, Any]]:
    rows = []
    for tier, pool in _pools(store).items():
        for domain in pool.status()["domains"]:
            rows.append({"tier": tier, **domain})
    return rows


def set_domain_state(store: ObjectStore, target: str, online: bool) -> list[str]:
    """Mark a drive, or every drive under a node/rack/zone, online or offline. Returns drive ids."""
    for tier, pool in _pools(store).items():
        topology = pool.topology
        if topology.get(target) is not None:
            changed = topology.set_state(target, "online" if online else "offline", "drive")
        elif target.startswith(f"{tier}-"):
            short = target[len(tier) + 1 :]
            try:
                changed = topology.set_state(short, "online" if online else "offline")
            except KeyError:
                continue
        else:
            continue
        ids = [d.id for d in changed]
        store.maintenance.domains_changed(ids, online)
        return ids
    raise UnknownDomain(target)
