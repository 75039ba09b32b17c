"""Failure domains as operators see them: list them, take them offline, bring them back.

The domains themselves belong to each erasure-coded tier's pool (`erasure.Topology`); this module
gives them one namespace across tiers. A target names a drive (`hot-n1-d2`), or everything under a
node, rack or zone of one tier (`hot-n1`, `hot-rack1`, `hot-zone1`).

The state set here is also kept in the catalog (settings `domain_state:<drive>` and a version):
every process on the same data directory (workers, a lifecycle process) follows it within a
second. A start with no other process alive clears it: a fresh start finds every domain online.

So is each drive's write health (normal | full | failing: erasure/drive_health.py), which the
processes writing to the drives observe rather than an operator sets: `SharedDriveHealth` records
what this process observed (settings `drive_health:<drive>` and a version) and takes up what the
others did, so that placement skips a failing drive in every process once one has found it out,
and `admin domains`, `/metrics` and the status page answer the same on every worker.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import threading
from typing import TYPE_CHECKING, Any

from erasure.drive_health import DriveCondition

if TYPE_CHECKING:
    from erasure import ErasurePool
    from tiering.store import ObjectStore


log = logging.getLogger("tierstore.domains")

STATE_PREFIX = "domain_state:"
VERSION_SETTING = "domain_state_version"
HEALTH_PREFIX = "drive_health:"
HEALTH_VERSION_SETTING = "drive_health_version"
FOLLOW_INTERVAL = 0.5


class UnknownDomain(KeyError):
    pass


def erasure_pools(store: ObjectStore) -> dict[str, ErasurePool]:
    """The erasure pool of every tier that has one, by tier name."""
    pools: dict[str, ErasurePool] = {}
    for name, tier in store.tiers.items():
        pool = tier.backend.erasure_pool()
        if pool is not None:
            pools[name] = pool
    return pools


def list_domains(store: ObjectStore) -> list[dict[str, Any]]:
    """Every drive of every tier, with its state, write health (normal | full | failing) and usage."""
    rows = []
    for name, tier in store.tiers.items():
        for domain in tier.backend.domains():
            rows.append({"tier": name, **domain})
    return rows


def set_domain_state(store: ObjectStore, target: str, online: bool) -> list[str]:
    """Mark a drive, or every drive under a node/rack/zone, online or offline. Returns drive ids."""
    for tier, pool in erasure_pools(store).items():
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
        _persist(store, {i: "online" if online else "offline" for i in ids})
        return ids
    raise UnknownDomain(target)


def _persist(store: ObjectStore, states: dict[str, str]) -> None:
    for drive, state in states.items():
        store.catalog.put_setting(STATE_PREFIX + drive, state)
    store.catalog.put_setting(VERSION_SETTING, secrets.token_hex(8))  # written last: readers see all
    store.changes.bump()  # this host's other processes: before their next request


def _apply(store: ObjectStore, states: dict[str, str]) -> None:
    """Make this process's domains match the shared state (drives it has no row for are left as they are)."""
    changed: dict[bool, list[str]] = {True: [], False: []}
    for name, state in states.items():
        drive = name[len(STATE_PREFIX) :]
        for pool in erasure_pools(store).values():
            domain = pool.topology.get(drive)
            if domain is not None and domain.state != state:
                pool.topology.set_state(drive, state, "drive")
                changed[state == "online"].append(drive)
    for online, ids in changed.items():
        if ids:
            log.info("domains %s: %s (set by another process)", "online" if online else "offline", ids)
            store.maintenance.domains_changed(ids, online)


async def load_domain_state(store: ObjectStore, *, reset: bool) -> None:
    """At start: take up the shared state, or (`reset`: no other process alive) clear it."""
    states = await asyncio.to_thread(store.catalog.settings_with_prefix, STATE_PREFIX)
    if reset:
        stale = {name[len(STATE_PREFIX) :]: "online" for name, state in states.items() if state != "online"}
        if stale:
            await asyncio.to_thread(_persist, store, stale)
        return
    _apply(store, states)


async def follow_domain_state(store: ObjectStore) -> None:
    """Pick up domain states other processes set (polls one setting every FOLLOW_INTERVAL)."""
    seen: str | None = None
    while True:
        await asyncio.sleep(FOLLOW_INTERVAL)
        try:
            version = await asyncio.to_thread(store.catalog.get_setting, VERSION_SETTING)
            if version != seen:
                _apply(store, await asyncio.to_thread(store.catalog.settings_with_prefix, STATE_PREFIX))
                seen = version
        except Exception:  # keep following: a busy catalog must not end it
            log.exception("reading the shared domain state failed")


class SharedDriveHealth:
    """Drive write health as every process on the catalog observed it (see the module's doc)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._observed: dict[str, str] = {}  # drive id -> its state as observed here, not yet recorded
        self._seen: str | None = None  # the version last taken up

    def attach(self) -> None:
        for pool in erasure_pools(self.store).values():
            pool.health.on_change = self._note

    def _note(self, drive: str, condition: DriveCondition, detail: str) -> None:
        # From any thread (writers report from worker threads): recorded at the next `sync`.
        with self._lock:
            self._observed[drive] = json.dumps({"condition": condition.value, "detail": detail})

    def reset(self) -> None:
        """No other process alive: forget what earlier ones recorded (each drive is probed anew)."""
        catalog = self.store.catalog
        for name in catalog.settings_with_prefix(HEALTH_PREFIX):
            catalog.delete_setting(name)

    def sync(self) -> None:
        """Record what this process observed, then take up what the others did (blocking)."""
        catalog = self.store.catalog
        with self._lock:
            observed, self._observed = self._observed, {}
        for drive, state in observed.items():
            catalog.put_setting(HEALTH_PREFIX + drive, state)
        if observed:
            catalog.put_setting(HEALTH_VERSION_SETTING, secrets.token_hex(8))  # last: readers see all
        version = catalog.get_setting(HEALTH_VERSION_SETTING)
        if version == self._seen:
            return
        states = catalog.settings_with_prefix(HEALTH_PREFIX)
        pools = erasure_pools(self.store).values()
        with self._lock:
            newer_here = set(self._observed)  # observed since: recorded at the next sync
        for name, raw in states.items():
            drive = name[len(HEALTH_PREFIX) :]
            if drive in newer_here:
                continue
            state = json.loads(raw)
            for pool in pools:
                if pool.topology.get(drive) is not None:
                    pool.health.adopt(drive, DriveCondition(state["condition"]), str(state["detail"]))
        self._seen = version


async def follow_drive_health(shared: SharedDriveHealth) -> None:
    """Share drive health every FOLLOW_INTERVAL (a setting read when nothing changed)."""
    while True:
        await asyncio.sleep(FOLLOW_INTERVAL)
        try:
            await asyncio.to_thread(shared.sync)
        except Exception:  # keep following: a busy catalog must not end it
            log.exception("sharing drive health failed")
