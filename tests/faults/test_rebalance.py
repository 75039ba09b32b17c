"""Growing, draining and re-coding the hot tier under load: a real server, boto3, `tierstore admin`.

One dedicated server holds a few hundred objects on the hot tier (4+2 over 8 nodes × 2 drives,
spread by node): mostly small ones (stored as m+1 copies), some of a few hundred KiB and a few of
several MiB (erasure-coded). Throughout each test, three client threads run a mixed load — PUT,
GET (byte-checked), LIST, DELETE on keys of their own, and GETs of the preloaded objects — and at
the end every acknowledged write is read back exactly. Zero failed requests, zero wrong bytes.

- (a) two simulated nodes join (`admin domain add` × 4 drives) and `admin rebalance --wait` moves
  their share of the shards — within a few percent of the ideal 4/20 — and every blob ends on k+m
  distinct nodes, exactly the ones placement wants.
- (b) `admin domain remove hot-n3` is refused while the node holds shards; `admin domain drain
  hot-n3 --wait` moves everything off it; then the remove succeeds and no shard file is left.
- (c) `admin tier recode hot --k 6 --m 3 --wait` (9 nodes): new writes use 6+3 at once, every
  existing object is re-striped, and everything reads back exactly.

The tests run in file order and share the server (each starts from the previous one's end).
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from erasure.location import Location
from erasure.rebalance import desired_groups
from erasure.topology import Domain, Topology
from tests.conftest import ServerProcess, catalog_query, free_port, make_client
from tests.shards import count_shards
from tests.support import AdminError, admin

pytestmark = pytest.mark.timeout(600)

BUCKET = "rebalance"
KIB, MIB = 1 << 10, 1 << 20
GRACE = 3.0  # TIERSTORE_RETIRE_GRACE_SECONDS for this server: retired shard files go quickly
LOAD_SECONDS = 0.0  # the load runs for as long as the admin operation takes, plus this


@dataclass
class Cluster:
    server: ServerProcess
    data: Path
    objects: dict[str, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.s3 = make_client(
            self.server.endpoint, read_timeout=120, connect_timeout=10, max_pool_connections=16
        )

    def admin(self, *args: str, ok: bool = True) -> Any:
        try:
            return admin(self.server.endpoint, *args, timeout=400)
        except AdminError as exc:
            if ok:
                raise AssertionError(str(exc)) from exc
            raise

    # --- the catalog and the disk, read-only ----------------------------------------------------

    def hot_locations(self) -> dict[str, dict[str, Any]]:
        """data id → location of every live hot blob (read straight from the catalog file)."""
        rows = catalog_query(self.data, "SELECT segments FROM objects WHERE tier = 'hot'")
        return {s["id"]: s["loc"] for (raw,) in rows for s in json.loads(raw)}

    def topology(self) -> Topology:
        topology = Topology()
        for d in self.admin("domains"):
            if d["tier"] == "hot":
                topology.add(
                    Domain(
                        id=d["id"],
                        path=Path(d["path"]),
                        node=d["node"],
                        rack=d["rack"],
                        zone=d["zone"],
                        weight=d["weight"],
                        draining=d.get("draining", False),
                    )
                )
        return topology

    def shard_files(self, node_dir: Path) -> int:
        """Shards on a node's drives: shard files and live records in pack files."""
        return count_shards(node_dir)

    def read_all_back(self) -> None:
        def check(item: tuple[str, bytes]) -> None:
            key, data = item
            body = self.s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
            assert hashlib.md5(body).hexdigest() == hashlib.md5(data).hexdigest(), f"{key}: wrong bytes"

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(check, self.objects.items()))


def _sizes(rng: random.Random, n: int) -> Iterator[int]:
    for i in range(n):
        if i % 40 == 7:
            yield rng.randint(1 * MIB, 4 * MIB)  # a few MiB-sized ones
        elif i % 4 == 1:
            yield rng.randint(100 * KIB, 600 * KIB)  # erasure-coded, one stripe
        else:
            yield rng.randint(0, 60 * KIB)  # m+1 copies


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    data = tmp_path_factory.mktemp("rebalance") / "data"
    server = ServerProcess(
        data,
        free_port(),
        extra_args=["--no-lifecycle"],
        env={
            "TIERSTORE_RETIRE_GRACE_SECONDS": str(GRACE),
            "TIERSTORE_REBALANCE_SETTLE_SECONDS": "2",
            "TIERSTORE_REBALANCE_CONCURRENCY": "4",
        },
    ).start()
    c = Cluster(server, data)
    c.s3.create_bucket(Bucket=BUCKET)
    rng = random.Random(7)
    items = [(f"pre/{i:04d}", rng.randbytes(size)) for i, size in enumerate(_sizes(rng, 280))]

    def put(item: tuple[str, bytes]) -> None:
        c.s3.put_object(Bucket=BUCKET, Key=item[0], Body=item[1])

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, items))
    c.objects.update(items)
    try:
        yield c
    finally:
        server.stop()


class Load(threading.Thread):
    """One client thread: PUT/GET/LIST/DELETE on its own keys, GETs of preloaded objects."""

    def __init__(self, c: Cluster, name: str, seed: int) -> None:
        super().__init__(daemon=True)
        self.c, self.prefix, self.rng = c, f"load/{name}/", random.Random(seed)
        self.s3 = make_client(c.server.endpoint, read_timeout=120, connect_timeout=10)
        self.expected: dict[str, bytes | None] = {}
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.ops = 0

    def run(self) -> None:
        preloaded = list(self.c.objects)
        n = 0
        while not self.stop.is_set():
            op = self.rng.random()
            live = [k for k, v in self.expected.items() if v is not None]
            try:
                if op < 0.35 or not live:
                    key = self.prefix + (
                        f"k{n}" if op < 0.25 or not live else self.rng.choice(live)[len(self.prefix) :]
                    )
                    n += 1
                    size = (
                        self.rng.randint(1 * MIB, 2 * MIB)
                        if self.rng.random() < 0.05
                        else self.rng.randint(0, 200 * KIB)
                    )
                    body = self.rng.randbytes(size)
                    self.s3.put_object(Bucket=BUCKET, Key=key, Body=body)
                    self.expected[key] = body
                elif op < 0.55:
                    key = self.rng.choice(live)
                    got = self.s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
                    if got != self.expected[key]:
                        self.errors.append(f"GET {key}: wrong bytes")
                elif op < 0.75:
                    key = self.rng.choice(preloaded)
                    got = self.s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
                    if got != self.c.objects[key]:
                        self.errors.append(f"GET {key}: wrong bytes")
                elif op < 0.85:
                    page = self.s3.list_objects_v2(Bucket=BUCKET, Prefix=self.prefix, MaxKeys=50)
                    listed = {o["Key"] for o in page.get("Contents", [])}
                    if not page.get("IsTruncated") and listed != set(live):
                        self.errors.append(f"LIST {self.prefix}: {len(listed)} keys, expected {len(live)}")
                else:
                    key = self.rng.choice(live)
                    self.s3.delete_object(Bucket=BUCKET, Key=key)
                    self.expected[key] = None
                self.ops += 1
            except Exception as exc:  # every failed request is a test failure
                self.errors.append(f"{type(exc).__name__}: {exc}")

    def verify(self) -> None:
        for key, body in self.expected.items():
            if body is None:
                with pytest.raises(ClientError) as info:
                    self.s3.get_object(Bucket=BUCKET, Key=key)
                assert info.value.response["Error"]["Code"] == "NoSuchKey"
            else:
                got = self.s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
                assert got == body, f"{key}: wrong bytes after the load"


class MixedLoad:
    def __init__(self, c: Cluster, tag: str) -> None:
        self.threads = [Load(c, f"{tag}{i}", hash((tag, i)) & 0xFFFF) for i in range(3)]

    def __enter__(self) -> MixedLoad:
        for t in self.threads:
            t.start()
        time.sleep(1.0)
        return self

    def __exit__(self, *exc: object) -> None:
        time.sleep(LOAD_SECONDS)
        for t in self.threads:
            t.stop.set()
        for t in self.threads:
            t.join(120)

    def check(self) -> int:
        errors = [e for t in self.threads for e in t.errors]
        assert not errors, errors[:10]
        for t in self.threads:
            t.verify()
        return sum(t.ops for t in self.threads)


def placement_report(c: Cluster, topology: Topology) -> tuple[int, int]:
    """Assert every live hot blob is on k+m distinct active nodes, exactly the desired ones.
    Returns (blobs, shards)."""
    blobs = shards = 0
    for data_id, raw in c.hot_locations().items():
        loc = Location.from_dict(raw)
        assert not loc.missing, f"{data_id}: shards missing {loc.missing}"
        domains = [topology[d] for d in loc.shards if d is not None]
        nodes = {d.label("node") for d in domains}
        assert len(nodes) == loc.width, f"{data_id}: {loc.width} shards on {len(nodes)} nodes"
        assert not any(d.draining for d in domains), f"{data_id}: a shard on a draining domain"
        assert nodes == set(desired_groups(loc.placement_key(data_id), topology, "node", loc.width)), (
            f"{data_id}: not where placement wants it"
        )
        blobs += 1
        shards += loc.width
    return blobs, shards


def test_a_add_two_nodes_and_rebalance(cluster: Cluster) -> None:
    c = cluster
    root = c.data / "domains" / "hot"
    _, shards_before = placement_report(c, c.topology())
    moved_before = c.admin("rebalance", "status")["total_shards_moved"]
    with MixedLoad(c, "a") as load:
        adds = [("n9", "d1"), ("n9", "d2"), ("n10", "d1"), ("n10", "d2")]
        # One change of shape, four drives: the rebalancer settles, then moves once to the final topology.
        with ThreadPoolExecutor(4) as pool:
            added = list(
                pool.map(
                    lambda nd: c.admin(
                        "domain",
                        "add",
                        "--tier",
                        "hot",
                        "--path",
                        str(root / nd[0] / nd[1]),
                        "--node",
                        nd[0],
                        "--rack",
                        "rack1",
                        "--wait",
                    ),
                    adds,
                )
            )
        with pytest.raises(AdminError, match="exists"):
            c.admin(
                "domain",
                "add",
                "--tier",
                "hot",
                "--path",
                str(root / "n9" / "d9"),
                "--node",
                "n9",
                "--rack",
                "rack1",
                "--id",
                "hot-n9-d1",
                ok=False,
            )
        result = c.admin("rebalance", "--wait")  # nothing left: returns at once
    ops = load.check()
    assert {a["id"] for a in added} == {"hot-n9-d1", "hot-n9-d2", "hot-n10-d1", "hot-n10-d2"}
    run = max((a["rebalance"] for a in added), key=lambda r: r["shards_moved"])
    assert run["state"] == "done" and run["failures"] == 0, run
    assert result["state"] == "done" and not result["running"] and result["shards_planned"] == 0, result
    moved = result["total_shards_moved"] - moved_before
    ideal = 4 / 20
    print(
        f"\n(a) moved {moved} of {shards_before} shards = {moved / shards_before:.4f} (ideal {ideal:.4f}); "
        f"first pass planned {run['first_pass_fraction']:.4f} of {run['shards_scanned']} scanned; "
        f"{run['bytes_moved']} bytes in {run['elapsed_seconds']:.1f}s; conflicts {run['conflicts']}; "
        f"{ops} client requests meanwhile"
    )
    # The load goes on writing meanwhile (its blobs are in the rebalance's scan, and those written
    # after the change are placed where they belong), so no one population is the right
    # denominator: the shards that were there before the change had their share moved (at least),
    # and no more than their share of everything the rebalance scanned moved (at most). A rebalance
    # that moved nothing, or reshuffled everything, fails either bound.
    assert moved >= (ideal - 0.04) * shards_before, (moved, shards_before)
    assert moved <= (ideal + 0.04) * run["shards_scanned"], (moved, run["shards_scanned"])
    blobs, _ = placement_report(c, c.topology())
    assert blobs > 280
    # On disk, once the moved-away files are retired: the new nodes hold about their share.
    time.sleep(GRACE + 3)
    after = {n: c.shard_files(root / f"n{n}") for n in range(1, 11)}
    new_share = (after[9] + after[10]) / sum(after.values())
    assert abs(new_share - ideal) < 0.05, after
    status = c.admin("rebalance", "status")
    assert status["pending"] is False and status["state"] == "done"
    c.read_all_back()


def test_b_drain_and_remove_a_node(cluster: Cluster) -> None:
    c = cluster
    with pytest.raises(AdminError, match="DomainNotEmpty.*drain it first"):
        c.admin("domain", "remove", "hot-n3", ok=False)
    with MixedLoad(c, "b") as load:
        result = c.admin("domain", "drain", "hot-n3", "--wait")
    ops = load.check()
    assert result["domains"] == ["hot-n3-d1", "hot-n3-d2"]
    progress = result["rebalance"]
    assert progress["state"] == "done" and progress["failures"] == 0, progress
    print(f"\n(b) drained hot-n3: {progress['shards_moved']} shards moved, {ops} client requests meanwhile")
    topology = c.topology()
    placement_report(c, topology)
    assert not any(d.startswith("hot-n3-") for loc in c.hot_locations().values() for d in loc["shards"] if d)
    deadline = time.monotonic() + GRACE + 30
    while True:  # retired files (moved away, overwritten) stay readable for the grace
        try:
            removed = c.admin("domain", "remove", "hot-n3", ok=False)
            break
        except AdminError as exc:
            assert "retired shard file" in str(exc), exc
            assert time.monotonic() < deadline, exc
            time.sleep(1)
    assert removed["domains"] == ["hot-n3-d1", "hot-n3-d2"] and removed["status"] == "removed"
    assert not any(d["id"].startswith("hot-n3-") for d in c.admin("domains"))
    assert c.shard_files(c.data / "domains" / "hot" / "n3") == 0
    c.read_all_back()


def test_c_recode_hot_to_6_3(cluster: Cluster) -> None:
    c = cluster
    with pytest.raises(AdminError, match="needs 11"):
        c.admin("tier", "recode", "hot", "--k", "8", "--m", "3", ok=False)
    with MixedLoad(c, "c") as load:
        result = c.admin("tier", "recode", "hot", "--k", "6", "--m", "3", "--wait")
    ops = load.check()
    progress = result["rebalance"]
    assert (result["k"], result["m"]) == (6, 3) and progress["state"] == "done", result
    assert progress["failures"] == 0, progress
    print(
        f"\n(c) recoded hot 4+2 -> 6+3: {progress['objects_restriped']} objects re-striped "
        f"({progress['bytes_restriped']} bytes), {ops} client requests meanwhile"
    )
    locations = c.hot_locations()
    for data_id, loc in locations.items():
        assert loc["m"] == 3 and loc["k"] in ((6,) if loc["layout"] == "ec" else (1,)), (data_id, loc)
    placement_report(c, c.topology())
    status = c.admin("status")
    assert next(t for t in status["tiers"] if t["name"] == "hot")["k"] == 6
    c.read_all_back()
    with urllib.request.urlopen(f"{c.server.endpoint}/metrics", timeout=30) as response:
        metrics = response.read().decode()
    moved = [
        line for line in metrics.splitlines() if line.startswith("tierstore_rebalance_shards_moved_total")
    ]
    assert moved and float(moved[0].split()[-1]) > 0, moved
    assert "tierstore_rebalance_objects_restriped_total" in metrics
    # New writes use the new code at once, and a restart keeps the topology and the code.
    c.s3.put_object(Bucket=BUCKET, Key="after-recode", Body=b"x" * (300 * KIB))
    c.server.stop()
    c.server.start()
    again = c.admin("rebalance", "status")
    hot = next(t for t in again["tiers"] if t["tier"] == "hot")
    assert (hot["k"], hot["m"], hot["domains"]) == (6, 3, 18), hot
    assert c.s3.get_object(Bucket=BUCKET, Key="after-recode")["Body"].read() == b"x" * (300 * KIB)
    assert Location.from_dict(c.hot_locations()[next(iter(c.hot_locations()))]).m == 3
    c.read_all_back()
