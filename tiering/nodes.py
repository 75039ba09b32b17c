"""Storage nodes in the catalog: how `tierstore node` processes and gateways find each other.

A node keeps one setting, `node:<name>`, holding a JSON record — its address, rack, zone, drives
(name and capacity) and a heartbeat time it rewrites every HEARTBEAT seconds. Only the catalog's
generic settings primitives are used, so any catalog backend that has them serves (SQLite shared
by the processes of one host, or a database server).

A gateway that finds nodes registered at start places its erasure-coded tiers on the nodes'
drives (one domain per node drive and tier, id `<tier>-<node>-<drive>`), and follows the
heartbeats: a node silent for DOWN_AFTER seconds has its drives marked offline in this process
(not in the shared operator state), and online again when it beats again — heal then reconciles
what it missed. A late heartbeat alone is not enough, though: the gateway first asks the node
itself, and one that answers stays up (a catalog slow to take heartbeats — every node's at once —
must not cost reads and writes that the nodes can serve).

Nodes registered after a gateway started join it while it runs: `follow_nodes` adds the drives
of every live node it has not placed on yet to each tier on nodes (new writes may land there at
once; `tierstore admin rebalance` moves existing data onto them). An operator retires a node
with `admin node drain NAME --wait` (the domain drain of `<tier>-<NAME>` for every tier on nodes)
and `admin node remove NAME` (refused while any of its drives holds shards); its drives' catalog
rows then say "removed", and its heartbeats no longer bring them back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from erasure import ErasurePool
    from tiering.catalog import Catalog
    from tiering.store import ObjectStore
    from tiering.tiers import TierConfig

log = logging.getLogger("tierstore.nodes")

PREFIX = "node:"
# `admin node remove NAME` records here the id of the node it removed (a node's id is random, kept
# in its data directory): a new node that takes the name later has another id and joins afresh,
# while the removed one, still beating, stays out.
REMOVED_PREFIX = "node-removed:"
NODE_ID_FILE = ".node-id"
HEARTBEAT = 2.0  # seconds between a node's heartbeats
DOWN_AFTER = 6.0  # a node silent this long is down (three missed heartbeats)
FOLLOW_INTERVAL = 1.0
SECRET_ENV = "TIERSTORE_CLUSTER_SECRET"
NODE_CA_ENV = "TIERSTORE_NODE_CA"  # the CA bundle gateways verify TLS nodes against


def cluster_secret(secret_file: str | Path | None = None) -> bytes:
    """The cluster secret: the content of `secret_file` ([cluster] secret_file, a node's
    --secret-file), else TIERSTORE_CLUSTER_SECRET; empty when neither is set."""
    if secret_file:
        return Path(secret_file).read_text().strip().encode()
    return os.environ.get(SECRET_ENV, "").encode()


def node_ca(configured: str | None = None) -> str | None:
    """The CA bundle (PEM file) that node certificates are verified against: `configured`
    ([cluster] node_ca, --node-ca), else TIERSTORE_NODE_CA; None: the system's trust store."""
    return configured or os.environ.get(NODE_CA_ENV) or None


def node_id(data: Path) -> str:
    """This node's id, made once and kept in its data directory."""
    path = data / NODE_ID_FILE
    if not path.exists():
        path.write_text(os.urandom(8).hex() + "\n")
    return path.read_text().strip()


def _removed_ids(catalog: Catalog) -> dict[str, str]:
    """Node name → the id of the node `admin node remove` removed under that name."""
    return {k[len(REMOVED_PREFIX) :]: v for k, v in catalog.settings_with_prefix(REMOVED_PREFIX).items()}


def _reuses_removed_name(record: dict[str, Any], removed_ids: dict[str, str]) -> bool:
    """Is this node a new one under the name of a removed node (not the removed node itself)?"""
    removed = removed_ids.get(record["name"])
    return bool(removed and record.get("id") and record["id"] != removed)


def register(catalog: Catalog, record: dict[str, Any]) -> None:
    """Write (or refresh) a node's record with the heartbeat time now."""
    catalog.put_setting(PREFIX + record["name"], json.dumps({**record, "heartbeat": time.time()}))


def registered(catalog: Catalog) -> list[dict[str, Any]]:
    """Every node record, by name."""
    records = []
    for name, raw in sorted(catalog.settings_with_prefix(PREFIX).items()):
        try:
            records.append(json.loads(raw))
        except ValueError:
            log.warning("ignoring a bad node record %s", name)
    return records


def alive(record: dict[str, Any], now: float | None = None) -> bool:
    return (time.time() if now is None else now) - float(record.get("heartbeat", 0)) <= DOWN_AFTER


def removed_nodes(catalog: Catalog) -> set[str]:
    """Nodes whose every drive row says "removed" (`admin node remove`): they may still beat."""
    states: dict[str, set[str]] = {}
    for row in catalog.domain_rows():
        if row["node"]:
            states.setdefault(str(row["node"]), set()).add(str(row["status"]))
    return {node for node, seen in states.items() if seen == {"removed"}}


def node_status(catalog: Catalog) -> list[dict[str, Any]]:
    """For `tierstore admin nodes`: every node with its state — up, down, or removed (by an
    operator: it holds nothing and takes nothing, beating or not) — and its heartbeat's age."""
    now = time.time()
    removed_ids = _removed_ids(catalog)
    removed = {n for n in removed_nodes(catalog) if n not in removed_ids} | {
        r["name"] for r in registered(catalog) if removed_ids.get(r["name"]) == r.get("id")
    }
    return [
        {
            **r,
            "state": "removed" if r["name"] in removed else "up" if alive(r, now) else "down",
            "heartbeat_age": round(now - r["heartbeat"], 1),
        }
        for r in registered(catalog)
    ]


def remote_domains(tier: str, nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The domains of one tier over the nodes' drives."""
    out = []
    for node in nodes:
        for drive in node["drives"]:
            out.append(
                {
                    "id": f"{tier}-{node['name']}-{drive['name']}",
                    "path": f"{drive['name']}/{tier}",
                    "address": node["address"],
                    "node": node["name"],
                    "rack": node.get("rack", "rack1"),
                    "zone": node.get("zone", "zone1"),
                    "weight": max(drive.get("total", 0) / float(1 << 40), 0.001),
                }
            )
    return out


def place_on_nodes(
    tiers: list[TierConfig],
    nodes: list[dict[str, Any]],
    secret: bytes,
    timeout: float = 3.0,
    ca_file: str | None = None,
) -> list[TierConfig]:
    """The tier configs with every erasure-coded tier's domains on the registered nodes (those
    at https:// addresses verified against `ca_file`, or the system store)."""
    if not secret:
        raise ValueError(f"storage nodes are registered but no cluster secret is set ({SECRET_ENV})")
    out = []
    for tier in tiers:
        if tier.backend == "erasure":
            options = {
                **tier.options,
                "remote_domains": remote_domains(tier.name, nodes),
                "cluster_secret": secret,
                "node_timeout": timeout,
                "node_ca": ca_file,
            }
            tier = replace(tier, options=options)
        out.append(tier)
    return out


def late_nodes(nodes: list[dict[str, Any]], known: dict[str, bool], now: float | None = None) -> list[str]:
    """The nodes this process holds up (or has not seen yet) whose heartbeat is too old."""
    return [n["name"] for n in nodes if known.get(n["name"], True) and not alive(n, now)]


def answering(store: ObjectStore, names: list[str]) -> set[str]:
    """Those of `names` that answer a request for one of their drives, asked all at once.

    Blocking: a node that is gone refuses at once, a hung one costs the node timeout.
    """
    from erasure.remote import RemoteDrive
    from tiering.domains import erasure_pools

    drives: dict[str, RemoteDrive] = {}
    for pool in erasure_pools(store).values():
        for domain in pool.topology:
            if domain.node in names and domain.node not in drives and domain.address is not None:
                drive = pool.store(domain.id)
                if isinstance(drive, RemoteDrive):
                    drives[domain.node] = drive
    if not drives:
        return set()
    with ThreadPoolExecutor(len(drives), thread_name_prefix="node-probe") as probes:
        answers = dict(zip(drives, probes.map(RemoteDrive.answers, drives.values()), strict=True))
    return {name for name, answered in answers.items() if answered}


def apply_liveness(
    store: ObjectStore,
    nodes: list[dict[str, Any]],
    known: dict[str, bool],
    now: float | None = None,
    reachable: set[str] | frozenset[str] = frozenset(),
) -> None:
    """When a node goes down (or comes back) mark its drives offline (online) in this process.

    A node is up while its heartbeat is fresh, or while it is in `reachable`: it answered this
    process just now though its heartbeat is late (the catalog, not the node, was slow — taking
    such a node's drives offline would fail reads and writes that it could serve).

    Only changes of a node's liveness since `known` (updated here) act, so that an operator's
    `admin domain offline` of a drive on a live node stands. Drives start online: a node first
    seen down is a change.
    """
    from tiering.domains import erasure_pools

    now_up = {n["name"]: alive(n, now) or n["name"] in reachable for n in nodes}
    changes = {name: up for name, up in now_up.items() if known.get(name, True) != up}
    known.update(now_up)
    if not changes:
        return
    for pool in erasure_pools(store).values():
        changed: dict[bool, list[str]] = {True: [], False: []}
        for domain in pool.topology:
            if domain.address is None or domain.node not in changes:
                continue
            up = changes[domain.node]
            if domain.online != up:
                pool.topology.set_state(domain.id, "online" if up else "offline", "drive")
                changed[up].append(domain.id)
        for online, ids in changed.items():
            if ids:
                log.warning("node drives %s: %s (heartbeat)", "online" if online else "offline", ids)
                store.maintenance.domains_changed(ids, online)


def _node_tiers(store: ObjectStore) -> dict[str, ErasurePool]:
    """The erasure-coded tiers placed on storage nodes (their domains have an address)."""
    from tiering.domains import erasure_pools

    return {t: p for t, p in erasure_pools(store).items() if any(d.address is not None for d in p.topology)}


def join_new_nodes(store: ObjectStore, records: list[dict[str, Any]]) -> list[str]:
    """Add the drives of live nodes this process does not place on yet to every tier on nodes.

    A drive whose catalog row says "removed" (`admin node remove`) stays out; one that says
    "draining" joins draining. Returns the ids added. Blocking (catalog, a scan of each new
    drive): call it off the event loop.
    """
    from erasure import rebalance as placement
    from erasure.topology import Domain

    added: list[str] = []
    live = [r for r in records if alive(r)]
    for tier, pool in _node_tiers(store).items():
        new = [d for d in remote_domains(tier, live) if pool.topology.get(d["id"]) is None]
        if not new:
            continue
        status = {row["id"]: row["status"] for row in store.catalog.domain_rows()}
        unrecorded = [{**d, "tier": tier} for d in new if d["id"] not in status]
        if unrecorded:  # a write only for drives never seen (a removed node that still beats costs a read)
            store.catalog.seed_domains(unrecorded)
        removed_ids = _removed_ids(store.catalog) if "removed" in status.values() else {}
        by_name = {r["name"]: r for r in live}
        for d in new:
            if status.get(d["id"]) == "removed":
                if not _reuses_removed_name(by_name[d["node"]], removed_ids):
                    continue
                # A new node under a removed node's name: its drives are new domains.
                with contextlib.suppress(ValueError):  # another gateway made it active first
                    store.catalog.add_domain({**d, "tier": tier})
            domain = Domain(
                id=d["id"],
                path=Path(d["path"]),
                node=d["node"],
                rack=d["rack"],
                zone=d["zone"],
                weight=d["weight"],
                address=d["address"],
            )
            domain.draining = status.get(d["id"]) == "draining"
            placement.add_domain(pool, domain)
            added.append(d["id"])
    if added:
        log.warning("drives of newly registered nodes joined: %s", added)
    return added


async def drain_node(store: ObjectStore, name: str, wait: bool) -> dict[str, Any]:
    """`admin node drain NAME`: drain `<tier>-<NAME>` on every tier on nodes; with `wait`, answer
    only when `remove_node` will succeed."""
    from tiering import rebalance

    targets = _node_targets(store, name)
    drained = [await rebalance.drain_domain(store, target) for target in targets]
    token = await store.rebalancer.request()
    result: dict[str, Any] = {
        "node": name,
        "domains": [d for r in drained for d in r["domains"]],
        "status": "draining",
    }
    if wait:
        result["drain"] = [await rebalance.wait_drained(store, target, token) for target in targets]
        result["status"] = "drained"
    result["rebalance"] = await store.rebalancer.status()
    return result


async def remove_node(store: ObjectStore, name: str) -> dict[str, Any]:
    """`admin node remove NAME`: forget the node's drives on every tier (refused while any holds shards)."""
    from tiering import rebalance

    removed = [await rebalance.remove_domain(store, target) for target in _node_targets(store, name)]
    record = next((r for r in await asyncio.to_thread(registered, store.catalog) if r["name"] == name), None)
    if record is not None and record.get("id"):
        await asyncio.to_thread(store.catalog.put_setting, REMOVED_PREFIX + name, record["id"])
    return {"node": name, "domains": [d for r in removed for d in r["domains"]], "status": "removed"}


def _node_targets(store: ObjectStore, name: str) -> list[str]:
    from tiering.domains import UnknownDomain

    targets = [
        f"{tier}-{name}"
        for tier, pool in _node_tiers(store).items()
        if any(d.node == name for d in pool.topology)
    ]
    if not targets:
        raise UnknownDomain(name)
    return targets


async def follow_nodes(store: ObjectStore) -> None:
    """Follow the nodes' heartbeats (every FOLLOW_INTERVAL) for as long as the store runs."""
    known: dict[str, bool] = {}
    late_but_answering: set[str] = set()
    while True:
        try:
            now = time.time()  # before the read: a slow read must not age the heartbeats it returns
            records = await asyncio.to_thread(registered, store.catalog)
            await asyncio.to_thread(join_new_nodes, store, records)
            late = late_nodes(records, known, now)
            reachable = await asyncio.to_thread(answering, store, late) if late else set()
            for name in sorted(reachable - late_but_answering):
                log.warning("node %s: its heartbeat is late but it answers; kept up", name)
            late_but_answering = reachable
            apply_liveness(store, records, known, now, reachable)
        except Exception:  # keep following: a busy catalog must not end it
            log.exception("reading the node records failed")
        await asyncio.sleep(FOLLOW_INTERVAL)
