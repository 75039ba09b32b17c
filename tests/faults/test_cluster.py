"""A cluster on loopback: 6 `tierstore node` processes over 3 racks, 2 gateways, one shared catalog.

The hot tier is 3+2 spread over nodes (5 of 6 nodes per object), so with m = 2 nodes down the
4 left still make the write quorum (k+1) and every object stays readable. Each test ends with
every acknowledged object read back byte-exact.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests import postgres
from tests.conftest import (
    ACCESS_KEY,
    SECRET_KEY,
    ServerProcess,
    catalog_env,
    catalog_kind,
    catalog_query,
    free_port,
    make_client,
)
from tests.node_cluster import NODES, SECRET, Node
from tests.shards import count_shards, shards_under

GRACE = {"TIERSTORE_RETIRE_GRACE_SECONDS": "3"}  # a drained node's retired files are collected soon


def _catalog_of(gateway_data: Path) -> Path | str:
    """What the nodes register in: the gateways' SQLite file, or their PostgreSQL database
    (--catalog=postgresql)."""
    catalog = gateway_data / "catalog" / "catalog.db"
    catalog.parent.mkdir(parents=True, exist_ok=True)
    return catalog_env(gateway_data).get("TIERSTORE_CATALOG_URL") or catalog


@dataclass
class Cluster:
    nodes: list[Node]
    gateways: list[ServerProcess]
    objects: dict[str, str] = field(default_factory=dict)  # key -> sha256 of every acknowledged PUT

    def client(self, n: int = 0):
        return make_client(self.gateways[n].endpoint)

    def put(self, key: str, body: bytes, gateway: int = 0) -> None:
        self.client(gateway).put_object(Bucket="cluster", Key=key, Body=body)
        self.objects[key] = hashlib.sha256(body).hexdigest()

    def check_all(self, gateway: int = 0) -> None:
        s3 = self.client(gateway)
        for key, digest in list(self.objects.items()):  # a traffic thread may add to it
            body = s3.get_object(Bucket="cluster", Key=key)["Body"].read()
            assert hashlib.sha256(body).hexdigest() == digest, key


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("cluster")
    catalog = _catalog_of(root / "gw")
    nodes = [
        Node(f"n{i}", f"rack{i % 3 + 1}", free_port(), root / f"n{i}", catalog) for i in range(1, NODES + 1)
    ]
    tiers = '[tiers.hot]\nk = 3\nm = 2\nspread_level = "node"\n\n[drives]\nreserve_bytes = 0\n'
    (root / "secret").write_text(SECRET + "\n")
    config, config_with_secret = root / "gateway.toml", root / "gateway-secret-file.toml"
    config.write_text(tiers)
    config_with_secret.write_text(f'{tiers}\n[cluster]\nsecret_file = "{root / "secret"}"\n')
    # Two gateways on one data directory (one catalog): either serves every object. The first
    # takes the cluster secret from the environment, the second from its config file.
    gateways = [
        ServerProcess(
            root / "gw",
            free_port(),
            extra_args=["--config", str(config)],
            env={"TIERSTORE_CLUSTER_SECRET": SECRET, **GRACE},
            nodes=False,
        ),
        ServerProcess(
            root / "gw",
            free_port(),
            extra_args=["--config", str(config_with_secret)],
            env=GRACE,
            nodes=False,
        ),
    ]
    try:
        for node in nodes:
            node.start()
        for gateway in gateways:
            gateway.start()
        made = Cluster(nodes, gateways)
        made.client().create_bucket(Bucket="cluster")
        yield made
    finally:
        for gateway in gateways:
            gateway.kill()
        for node in nodes:
            node.stop()


@pytest.fixture(autouse=True)
def _cluster_whole_again(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test on the shared cluster, restart a node it left killed: a test that fails
    between its kill and its restart must not fail the module's later tests too."""
    yield
    if "cluster" not in request.fixturenames:
        return
    cluster: Cluster = request.getfixturevalue("cluster")
    for node in cluster.nodes:
        if node.proc is not None and node.proc.poll() is not None:
            node.start()


def _node_shards(cluster: Cluster) -> int:
    """Shards on the nodes' drives: shard files and live records in pack files (the default)."""
    return sum(count_shards(n.data) for n in cluster.nodes)


def test_s3_basics_over_nodes(cluster: Cluster) -> None:
    s3 = cluster.client()
    before = _node_shards(cluster)
    small, large = os.urandom(1000), os.urandom(3 * 1024 * 1024 + 12345)
    cluster.put("small", small)
    cluster.put("large", large)
    assert _node_shards(cluster) >= before + 3 + 5  # replicas (m+1) and k+m shards, on the nodes
    # Nodes pack small shards by default (tierstore node --pack-threshold-bytes, 512 KiB).
    assert any(list(n.data.rglob("*.tsp")) for n in cluster.nodes)
    got = s3.get_object(Bucket="cluster", Key="large", Range="bytes=1048570-2097200")["Body"].read()
    assert got == large[1048570:2097201]
    assert {o["Key"] for o in s3.list_objects_v2(Bucket="cluster")["Contents"]} >= {"small", "large"}
    upload = s3.create_multipart_upload(Bucket="cluster", Key="multi")
    parts = [os.urandom(5 * 1024 * 1024), os.urandom(777)]
    etags = [
        s3.upload_part(Bucket="cluster", Key="multi", UploadId=upload["UploadId"], PartNumber=i + 1, Body=p)[
            "ETag"
        ]
        for i, p in enumerate(parts)
    ]
    s3.complete_multipart_upload(
        Bucket="cluster",
        Key="multi",
        UploadId=upload["UploadId"],
        MultipartUpload={"Parts": [{"ETag": e, "PartNumber": i + 1} for i, e in enumerate(etags)]},
    )
    cluster.objects["multi"] = hashlib.sha256(b"".join(parts)).hexdigest()
    cluster.put("doomed", b"z" * 100_000)
    s3.delete_object(Bucket="cluster", Key="doomed")
    del cluster.objects["doomed"]
    cluster.check_all()
    cluster.check_all(gateway=1)


def test_a_shard_healed_in_place_on_a_node_is_counted_once(cluster: Cluster) -> None:
    """Heal rewrites a damaged shard where it was, over the old one: the node's drive holds no
    more shards than before, and the gateway's count of it says so (the node answers whether its
    write replaced a shard; each rewrite once counted one more, for good)."""
    bodies = {"healed/file": os.urandom(3 * 1024 * 1024), "healed/packed": os.urandom(300_000)}
    for key, body in bodies.items():  # 1 MiB shards, files of their own; 100 KB ones, packed
        cluster.put(key, body)
    damaged = []
    for key in bodies:
        (segments,) = catalog_query(
            cluster.gateways[0].data_dir,
            "SELECT segments FROM objects WHERE bucket = 'cluster' AND key = ?",
            (key,),
        )[0]
        data_id = json.loads(segments)[0]["id"]
        shard = next(s for n in cluster.nodes for s in shards_under(n.data, data_id) if s.index == 0)
        shard.corrupt()
        damaged.append(shard)
    assert {s.packed for s in damaged} == {False, True}
    # What the earlier tests deleted is collected first: only the heal may change the counts here.
    gateway_data = cluster.gateways[0].data_dir
    _wait_for(
        "the garbage of the earlier tests to be collected",
        lambda: all(
            catalog_query(gateway_data, f"SELECT COUNT(*) FROM {table}")[0][0] == 0
            for table in ("garbage", "shard_garbage")
        ),
        60,
    )
    # A node's drive is <node>/<drive>/<tier>; the gateways call it <tier>-<node>-<drive>.
    domains = {"-".join((s.domain.parts[-1], s.domain.parts[-3], s.domain.parts[-2])) for s in damaged}

    def counts() -> list[dict[str, object]]:
        """Each gateway's counts of those drives (whichever gateway heals, it counts its writes)."""
        return [
            {d["id"]: d["shards"] for d in _admin(cluster, "domains", gateway=n) if d["id"] in domains}
            for n in range(len(cluster.gateways))
        ]

    before = counts()
    assert all(set(c) == domains for c in before)
    on_disk = _node_shards(cluster)
    healed = json.loads(_run_admin(cluster, "heal", "--wait", "--json").stdout)
    assert healed["corrupt_blocks_found"] >= 2 and healed["shards_healed"] >= 2, healed
    assert counts() == before
    assert _node_shards(cluster) == on_disk
    cluster.check_all()


def test_forged_and_unsigned_requests_are_refused(cluster: Cluster) -> None:
    node = cluster.nodes[0]
    before = sorted(p for p in node.data.rglob("*"))
    for headers in (
        {},
        {
            "x-tierstore-date": f"{time.time():.3f}",
            "x-tierstore-content-sha256": "STREAMING",
            "x-tierstore-signature": "0" * 64,
        },
        {"x-tierstore-date": "1000", "x-tierstore-content-sha256": "x", "x-tierstore-signature": "0"},
    ):
        for method, path in (
            ("GET", "/v1/drive/d1/hot/list"),
            ("DELETE", "/v1/drive/d1/hot/shard/abc/0"),
            ("PUT", "/v1/drive/d1/hot/shard/forged/0"),
        ):
            request = urllib.request.Request(
                node.address + path,
                method=method,
                headers=headers,
                data=b"x" * 100 if method == "PUT" else None,
            )
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=5)
            assert refused.value.code == 403
    assert sorted(p for p in node.data.rglob("*")) == before
    # A request signed with the cluster secret is accepted once; the same bytes again are refused.
    from erasure import node_auth

    target = "/v1/drive/d1/hot/list"
    signed = node_auth.sign(SECRET.encode(), "GET", target)
    with urllib.request.urlopen(urllib.request.Request(node.address + target, headers=signed), timeout=5):
        pass
    with pytest.raises(urllib.error.HTTPError) as replayed:
        urllib.request.urlopen(urllib.request.Request(node.address + target, headers=signed), timeout=5)
    assert replayed.value.code == 403


def test_hung_node_requests_complete_within_bounds(cluster: Cluster) -> None:
    hung = cluster.nodes[1]
    hung.signal(signal.SIGSTOP)
    try:
        for i in range(4):
            started = time.monotonic()
            body = os.urandom(200_000 * (i + 1))
            cluster.put(f"hung-{i}", body)
            assert cluster.client().get_object(Bucket="cluster", Key=f"hung-{i}")["Body"].read() == body
            assert time.monotonic() - started < 20, "a hung node must cost at most its timeouts"
        started = time.monotonic()
        cluster.check_all()
        assert time.monotonic() - started < 60
    finally:
        hung.signal(signal.SIGCONT)


def test_node_killed_mid_put_and_mid_get(cluster: Cluster) -> None:
    victim = cluster.nodes[2]
    body = os.urandom(24 * 1024 * 1024)
    outcome: dict[str, object] = {}

    def put() -> None:
        try:
            cluster.client().put_object(Bucket="cluster", Key="mid-put", Body=body)
            outcome["ok"] = True
        except Exception as exc:  # a failed PUT is allowed; an acknowledged one must read back
            outcome["error"] = exc

    writer = threading.Thread(target=put)
    writer.start()
    time.sleep(0.3)
    victim.signal(signal.SIGKILL)
    writer.join(120)
    if outcome.get("ok"):
        cluster.objects["mid-put"] = hashlib.sha256(body).hexdigest()
        # Written short (the victim's shard was lost with it; its replacement's place is recorded),
        # and healed at once: not left for a reader or for the victim's return to find, while
        # m - 1 more failures would make it unreadable.
        _wait_for("the blob written short is healed", lambda: _missing_shards(cluster, "mid-put") == 0, 30)
    victim.start()
    time.sleep(3)  # its heartbeat is back
    big = os.urandom(16 * 1024 * 1024)
    cluster.put("mid-get", big)
    stream = cluster.client().get_object(Bucket="cluster", Key="mid-get")["Body"]
    first = stream.read(1024 * 1024)
    cluster.nodes[3].signal(signal.SIGKILL)
    rest = stream.read()
    assert hashlib.sha256(first + rest).hexdigest() == cluster.objects["mid-get"]
    cluster.nodes[3].start()
    cluster.check_all()


def _missing_shards(cluster: Cluster, key: str) -> int:
    """Shards the catalog records as missing in the object's blobs (written short, not healed yet)."""
    rows = catalog_query(
        cluster.gateways[0].data_dir,
        "SELECT segments FROM objects WHERE bucket = ? AND key = ?",
        ("cluster", key),
    )
    return sum(
        len(segment["loc"].get("missing", [])) for (segments,) in rows for segment in json.loads(segments)
    )


def test_m_nodes_down_reads_and_writes_go_on(cluster: Cluster) -> None:
    down = [cluster.nodes[4], cluster.nodes[5]]
    for node in down:
        node.signal(signal.SIGKILL)
    try:
        for i in range(3):
            cluster.put(f"degraded-{i}", os.urandom(300_000 + i))
        cluster.check_all()
    finally:
        for node in down:
            node.start()
    _wait_drives(cluster, ("n5", "n6"), "online")
    # The shards the degraded writes could not place are rebuilt on the returned nodes; then the
    # catalog and the nodes' shard files agree.
    _run_admin(cluster, "heal", "--wait")
    fsck = _run_admin(cluster, "fsck", check=False)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    cluster.check_all()


def _run_admin(
    cluster: Cluster, *args: str, check: bool = True, gateway: int = 0
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "TIERSTORE_ENDPOINT": cluster.gateways[gateway].endpoint,
        "TIERSTORE_ACCESS_KEY": ACCESS_KEY,
        "TIERSTORE_SECRET_KEY": SECRET_KEY,
    }
    done = subprocess.run(
        [sys.executable, "-m", "server.cli", "admin", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 or not check, done.stdout + done.stderr
    return done


def _admin(cluster: Cluster, *args: str, gateway: int = 0) -> list[dict[str, object]]:
    return list(json.loads(_run_admin(cluster, *args, "--json", gateway=gateway).stdout))


def _wait_drives(cluster: Cluster, nodes: tuple[str, ...], state: str, within: float = 15) -> None:
    """Until every drive of `nodes` is `state` (online | offline) in the first gateway."""
    since = time.monotonic()
    while {d["state"] for d in _admin(cluster, "domains") if d["node"] in nodes} != {state}:
        assert time.monotonic() - since < within, f"drives of {nodes} not {state} within {within} s"
        time.sleep(0.5)


def test_silent_node_is_marked_down_within_seconds(cluster: Cluster) -> None:
    node = cluster.nodes[0]
    assert {n["name"]: n["state"] for n in _admin(cluster, "nodes")} == {n.name: "up" for n in cluster.nodes}
    node.signal(signal.SIGKILL)
    killed = time.monotonic()
    try:
        while True:
            states = {n["name"]: n["state"] for n in _admin(cluster, "nodes")}
            drives = {d["id"]: d["state"] for d in _admin(cluster, "domains") if d["node"] == node.name}
            if states[node.name] == "down" and drives and set(drives.values()) == {"offline"}:
                break
            assert time.monotonic() - killed < 15, (states, drives)
            time.sleep(0.5)
        assert all(s == "up" for name, s in states.items() if name != node.name)
        # Visible to monitoring: the per-node gauge and the status page's nodes row.
        metrics = (
            urllib.request.urlopen(cluster.gateways[1].endpoint + "/metrics", timeout=10).read().decode()
        )
        assert 'tierstore_node_up{node="n1",rack="rack2",zone="zone1"} 0.0' in metrics, metrics[-3000:]
        assert 'tierstore_node_up{node="n2",rack="rack3",zone="zone1"} 1.0' in metrics
        status = json.loads(
            urllib.request.urlopen(
                cluster.gateways[0].endpoint + "/_tierstore/status.json", timeout=10
            ).read()
        )
        assert {n["name"]: n["state"] for n in status["nodes"]}["n1"] == "down"
        assert all(n["state"] == "up" for n in status["nodes"] if n["name"] != "n1")
        cluster.put("while-n1-down", os.urandom(70_000))
    finally:
        node.start()
    _wait_drives(cluster, (node.name,), "online")
    cluster.check_all()
    # An operator's offline of a drive on a live node stands: heartbeats change only what they changed.
    _run_admin(cluster, "domain", "offline", "hot-n2-d1")
    time.sleep(3)
    assert {d["id"]: d["state"] for d in _admin(cluster, "domains")}["hot-n2-d1"] == "offline"
    _run_admin(cluster, "domain", "online", "hot-n2-d1")


def test_node_whose_heartbeat_is_late_but_answers_stays_up(cluster: Cluster) -> None:
    """The catalog late with a node's heartbeats while the node serves (a busy database delays
    every node's beat at once): the gateways ask the node before they take its drives offline,
    and keep them online — no PUT or GET loses that node's shards to a slow catalog write.
    Here the node's record is rewritten a minute old many times a second, faster than it beats.
    (Before: its drives went offline within seconds, and with three nodes late at once a rolling
    upgrade's PUTs and GETs failed.) A node that is late and does not answer still goes down."""
    from tiering.catalog import Catalog

    node = cluster.nodes[4]
    catalog = Catalog(node.catalog)
    stop = threading.Event()

    def age_the_heartbeat() -> None:
        while not stop.is_set():
            raw = catalog.get_setting(f"node:{node.name}")
            if raw is not None:
                catalog.put_setting(
                    f"node:{node.name}", json.dumps({**json.loads(raw), "heartbeat": time.time() - 60})
                )
            stop.wait(0.02)

    ager = threading.Thread(target=age_the_heartbeat, daemon=True)
    ager.start()
    try:
        seen_down = 0
        started = time.monotonic()
        while time.monotonic() - started < 10:
            seen_down += {n["name"]: n["state"] for n in _admin(cluster, "nodes")}[node.name] == "down"
            drives = {d["id"]: d["state"] for d in _admin(cluster, "domains") if d["node"] == node.name}
            assert drives and set(drives.values()) == {"online"}, drives
            time.sleep(0.5)
        assert seen_down, "the heartbeat never looked late: the test did not test"
        for n in range(6):  # 5 of the 6 nodes hold each object: most of these land on it
            cluster.put(f"late-beat-{n}", os.urandom(50_000 + n))
        cluster.check_all()
        assert "heartbeat is late but it answers" in cluster.gateways[0].log()
        # Late and gone: down, as before.
        node.signal(signal.SIGKILL)
        _wait_drives(cluster, (node.name,), "offline")
    finally:
        stop.set()
        ager.join(10)
        catalog.close()
        if node.proc is not None and node.proc.poll() is not None:
            node.start()
    _wait_drives(cluster, (node.name,), "online")
    cluster.check_all()


def test_m_plus_one_nodes_down_clean_503s_then_full_recovery(cluster: Cluster) -> None:
    """Three of six nodes down with a 3+2 code: writes get 503 (nothing half-written is kept),
    reads answer byte-exact or 503 — never wrong bytes, never a 500; all back when the nodes are."""
    from botocore.exceptions import ClientError, ResponseStreamingError

    down = cluster.nodes[1:4]
    for node in down:
        node.signal(signal.SIGKILL)
    try:
        time.sleep(7)  # heartbeats missed: the gateway knows they are down
        s3 = cluster.client()
        with pytest.raises(ClientError) as refused:
            s3.put_object(Bucket="cluster", Key="too-degraded", Body=os.urandom(200_000))
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
        cut = 0
        for key, digest in cluster.objects.items():
            try:
                body = s3.get_object(Bucket="cluster", Key=key)["Body"].read()
            except ClientError as exc:
                assert exc.response["ResponseMetadata"]["HTTPStatusCode"] == 503, (key, exc.response)
                continue
            except ResponseStreamingError:
                # Read partly, then a shard failed after the headers were out, so the server cut
                # the connection (server/responses.py StreamedBody) — a short body the client
                # detects, not wrong bytes. Seen once in CI (5 MiB read of 5 MiB + 777 bytes): a
                # later part on the down nodes, now refused before the first byte
                # (tests/unit/test_unreadable_parts.py); left: a node the gateway still believes up.
                cut += 1
                continue
            assert hashlib.sha256(body).hexdigest() == digest, key
        assert cut < len(cluster.objects), "every read was cut: none answered 503 or whole"
    finally:
        for node in down:
            node.start()
    _wait_drives(cluster, ("n2", "n3", "n4"), "online")
    cluster.check_all()
    cluster.check_all(gateway=1)


class _Traffic:
    """Light traffic while the cluster changes shape: PUTs and GETs in a thread, every answer checked."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster, self.stop, self.puts = cluster, threading.Event(), 0
        self.errors: list[Exception] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        s3 = self.cluster.client()
        while not self.stop.is_set() and self.puts < 500:
            key = f"traffic-{self.puts}"
            body = os.urandom(20_000 + 7919 * (self.puts % 40))
            try:
                self.cluster.put(key, body)
                assert s3.get_object(Bucket="cluster", Key=key)["Body"].read() == body
            except Exception as exc:  # collected: the test fails on any
                self.errors.append(exc)
            self.puts += 1
            self.stop.wait(0.2)

    def __enter__(self) -> _Traffic:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(60)
        assert not self.errors, self.errors[:3]


def _shards_on(node: Node) -> int:
    return count_shards(node.data)


def _wait_for(what: str, done: Callable[[], bool], limit: float = 20.0) -> None:
    deadline = time.monotonic() + limit
    while not done():
        assert time.monotonic() < deadline, what
        time.sleep(0.5)


def test_node_added_to_running_gateways_then_a_node_drained_and_removed(cluster: Cluster) -> None:
    """A 7th node joins both running gateways within seconds (new writes use it, `admin rebalance
    --wait` moves data onto it); then `admin node drain n1 --wait` returns only when `admin node
    remove n1` succeeds. Every object byte-exact throughout, under light traffic."""
    for i in range(12):
        cluster.put(f"before-n7-{i}", os.urandom(150_000 + i))
    root = cluster.nodes[0].data.parent
    new = Node("n7", "rack1", free_port(), root / "n7", cluster.nodes[0].catalog).start()
    cluster.nodes.append(new)
    with _Traffic(cluster) as traffic:
        _wait_for(
            "n7's drives join the gateway",
            lambda: {d["id"] for d in _admin(cluster, "domains")} >= {"hot-n7-d1", "hot-n7-d2", "hot-n7-d3"},
        )
        _wait_for("new writes land on n7", lambda: _shards_on(new) > 0, limit=60)
        refused = _run_admin(cluster, "node", "remove", "n7", check=False)
        assert refused.returncode != 0 and "DomainNotEmpty" in refused.stderr, refused.stdout + refused.stderr
        before = _shards_on(new)
        _run_admin(cluster, "rebalance", "--wait")
        assert _shards_on(new) > before, "the rebalance moved data onto the new node"
        cluster.check_all()
        cluster.check_all(gateway=1)

        drained = _run_admin(cluster, "node", "drain", "n1", "--wait")
        assert "ready to remove" in drained.stdout, drained.stdout
        removed = _run_admin(cluster, "node", "remove", "n1")
        assert "removed node n1" in removed.stdout, removed.stdout
        assert traffic.puts > 0
    assert _shards_on(cluster.nodes[0]) == 0, "nothing left on the removed node"
    time.sleep(3)  # n1 still beats: its drives must not come back
    assert not any(d["node"] == "n1" for d in _admin(cluster, "domains"))
    assert {n["name"]: n["state"] for n in _admin(cluster, "nodes")}["n1"] == "removed", "not just up"
    cluster.put("after-remove", os.urandom(300_000))
    cluster.check_all()
    cluster.check_all(gateway=1)
    cluster.nodes.pop(0).stop()
    # The name of a removed node may serve again: a new machine called n1 (its own data, so its
    # own node id) joins like any new node, and admin nodes shows it up, not removed.
    again = Node("n1", "rack2", free_port(), root / "n1-again", cluster.nodes[0].catalog).start()
    cluster.nodes.append(again)
    _wait_for(
        "the new n1's drives join",
        lambda: {d["id"] for d in _admin(cluster, "domains") if d["state"] == "online"} >= {"hot-n1-d1"},
    )
    assert {n["name"]: n["state"] for n in _admin(cluster, "nodes")}["n1"] == "up"
    for i in range(8):
        cluster.put(f"after-n1-again-{i}", os.urandom(120_000 + i))
    _wait_for("writes land on the new n1", lambda: _shards_on(again) > 0, limit=60)
    cluster.check_all(gateway=1)


def test_full_drive_on_one_node(tmp_path: Path) -> None:
    """One node's drive is full (a tmpfs filled to the last byte; every node drive is a tmpfs of the
    same size, so placement weighs them alike): every PUT succeeds and reads back byte-exact, the
    gateway marks that drive full, and no shard lands on it."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs per drive needs root")
    catalog = _catalog_of(tmp_path / "gw")
    nodes = [
        Node(f"n{i}", f"rack{i % 3 + 1}", free_port(), tmp_path / f"n{i}", catalog)
        for i in range(1, NODES + 1)
    ]
    mounted: list[Path] = []
    config = tmp_path / "gateway.toml"
    config.write_text(
        '[tiers.hot]\nk = 3\nm = 2\nspread_level = "node"\n\n'
        f"[drives]\nreserve_bytes = {256 * 1024}\nreprobe_seconds = 1\n"
    )
    gateway = ServerProcess(
        tmp_path / "gw",
        free_port(),
        extra_args=["--config", str(config)],
        env={"TIERSTORE_CLUSTER_SECRET": SECRET},
        nodes=False,
    )
    try:
        for node in nodes:
            for drive in ("d1", "d2", "d3"):
                path = node.data / drive
                path.mkdir(parents=True)
                done = subprocess.run(
                    ["mount", "-t", "tmpfs", "-o", "size=64m", f"tierstore-{node.name}-{drive}", str(path)],
                    capture_output=True,
                    text=True,
                    timeout=30,
                )
                if done.returncode != 0:
                    pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
                mounted.append(path)
        full = nodes[1].data / "d1"
        with open(full / "filler", "wb") as filler:
            with contextlib.suppress(OSError):  # ENOSPC: as full as it gets
                while True:
                    filler.write(b"\xff" * 65536)
                    filler.flush()
        for node in nodes:
            node.start()
        gateway.start()
        made = Cluster(nodes, [gateway])
        made.client().create_bucket(Bucket="cluster")
        for i in range(40):
            made.put(f"full-{i}", os.urandom(50_000 + 15_000 * i))
        made.check_all()
        health = {str(d["id"]): d["health"] for d in _admin(made, "domains")}
        assert health["hot-n2-d1"] == "full", health
        assert {h for d, h in health.items() if d != "hot-n2-d1" and d.startswith("hot-")} == {"normal"}
        assert [p.name for p in full.rglob("*") if p.is_file()] == ["filler"]
        assert sum(_shards_on(n) for n in nodes) > 40 * 3
    finally:
        gateway.kill()
        for node in nodes:
            node.stop()
        for path in reversed(mounted):
            if subprocess.run(["umount", str(path)], capture_output=True, timeout=30).returncode != 0:
                subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


def test_network_partition_of_one_node(tmp_path: Path) -> None:
    """One node runs in a network namespace of its own, reached over a veth pair (10.200.0.1/30 ↔
    10.200.0.2/30). Cut the link on its side: the node still beats (its catalog link is not the
    data link: the catalog is a file, or a PostgreSQL it reaches over a second veth pair,
    10.200.0.5/30 ↔ 10.200.0.6/30), so the gateway sees it up but cannot reach it — every PUT and
    GET still completes within its timeouts, byte-exact. Restore the link: heal rebuilds what it
    missed, fsck is clean."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    tag = os.getpid() % 100000
    ns, outside, inside = f"ts-part-{os.getpid()}", f"tsp{tag}a", f"tsp{tag}b"
    catalog_outside, catalog_inside = f"tsp{tag}c", f"tsp{tag}d"
    made_ns = _ip("netns", "add", ns)
    if made_ns.returncode != 0:
        pytest.skip(f"cannot create a network namespace here: {made_ns.stderr.strip()}")
    gateway: ServerProcess | None = None
    nodes: list[Node] = []
    database: postgres.PostgresServer | None = None
    try:
        for step in (
            ["link", "add", outside, "type", "veth", "peer", "name", inside],
            ["link", "set", inside, "netns", ns],
            ["addr", "add", "10.200.0.1/30", "dev", outside],
            ["link", "set", outside, "up"],
            ["netns", "exec", ns, "ip", "addr", "add", "10.200.0.2/30", "dev", inside],
            ["netns", "exec", ns, "ip", "link", "set", inside, "up"],
            ["netns", "exec", ns, "ip", "link", "set", "lo", "up"],
            ["link", "add", catalog_outside, "type", "veth", "peer", "name", catalog_inside],
            ["link", "set", catalog_inside, "netns", ns],
            ["addr", "add", "10.200.0.5/30", "dev", catalog_outside],
            ["link", "set", catalog_outside, "up"],
            ["netns", "exec", ns, "ip", "addr", "add", "10.200.0.6/30", "dev", catalog_inside],
            ["netns", "exec", ns, "ip", "link", "set", catalog_inside, "up"],
        ):
            done = _ip(*step)
            if done.returncode != 0:
                pytest.skip(f"cannot set up the veth pairs: ip {' '.join(step)}: {done.stderr.strip()}")
        gateway_env = {"TIERSTORE_CLUSTER_SECRET": SECRET}
        catalog: Path | str
        node_catalog: Path | str
        if catalog_kind() == "postgresql":
            # A PostgreSQL of this test's own, also listening on the catalog link's host side (the
            # session's listens on loopback only, which the namespace cannot reach).
            database = postgres.PostgresServer(listen=("127.0.0.1", "10.200.0.5"), clients=("10.200.0.4/30",))
            name = database.create_database().rsplit("/", 1)[1]
            catalog = gateway_env["TIERSTORE_CATALOG_URL"] = database.url(name)
            node_catalog = database.url(name, host="10.200.0.5")
        else:
            catalog = node_catalog = _catalog_of(tmp_path / "gw")
        nodes = [
            Node(
                f"n{i}",
                f"rack{i % 3 + 1}",
                free_port(),
                tmp_path / f"n{i}",
                catalog,
            )
            for i in range(1, NODES)
        ]
        nodes.append(
            Node(
                f"n{NODES}",
                f"rack{NODES % 3 + 1}",
                free_port(),
                tmp_path / f"n{NODES}",
                node_catalog,
                host="10.200.0.2",
                netns=ns,
            )
        )
        config = tmp_path / "gateway.toml"
        config.write_text('[tiers.hot]\nk = 3\nm = 2\nspread_level = "node"\n\n[drives]\nreserve_bytes = 0\n')
        gateway = ServerProcess(
            tmp_path / "gw",
            free_port(),
            extra_args=["--config", str(config)],
            env=gateway_env,
            nodes=False,
        )
        for node in nodes:
            node.start()
        gateway.start()
        made = Cluster(nodes, [gateway])
        made.client().create_bucket(Bucket="cluster")
        for i in range(6):
            made.put(f"before-{i}", os.urandom(200_000 + i))
        assert _shards_on(nodes[-1]) > 0, "the namespaced node takes shards over the veth"
        assert _ip("netns", "exec", ns, "ip", "link", "set", inside, "down").returncode == 0  # the partition
        s3 = made.client()
        for i in range(4):
            started = time.monotonic()
            body = os.urandom(300_000 * (i + 1))
            made.put(f"partitioned-{i}", body)
            assert s3.get_object(Bucket="cluster", Key=f"partitioned-{i}")["Body"].read() == body
            assert s3.get_object(Bucket="cluster", Key=f"before-{i}")["Body"].read() is not None
            assert time.monotonic() - started < 30, "a partitioned node must cost at most its timeouts"
        made.check_all()
        assert {n["name"]: n["state"] for n in _admin(made, "nodes")}[nodes[-1].name] == "up", (
            "it still beats"
        )
        assert _ip("netns", "exec", ns, "ip", "link", "set", inside, "up").returncode == 0
        _wait_for("the node is reachable again", lambda: urllib_ok(nodes[-1].address), limit=30)
        _run_admin(made, "heal", "--wait")
        fsck = _run_admin(made, "fsck", check=False)
        assert fsck.returncode == 0, fsck.stdout + fsck.stderr
        made.check_all()
    finally:
        if gateway is not None:
            gateway.kill()
        for node in nodes:
            node.stop()
        if database is not None:
            database.destroy()
        _ip("link", "del", outside)
        _ip("link", "del", catalog_outside)
        _ip("netns", "del", ns)


def urllib_ok(address: str) -> bool:
    """Does the node answer at all (403 to an unsigned request counts: it is reachable)?"""
    try:
        urllib.request.urlopen(address + "/v1/drive/d1/hot/list", timeout=2)
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True
