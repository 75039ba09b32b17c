"""A rolling upgrade of a whole cluster under load, with zero failed requests.

6 `tierstore node` processes over 3 racks and 2 gateways on one catalog (the hot tier 3+2 over
nodes). Client threads run PUT, GET, LIST and DELETE continuously (botocore's retries off), each
client sending its requests to both gateways in turn as a round-robin load balancer does, plus a
bare keep-alive connection to the first. Then, as the README's "Upgrade a cluster" says:

1. every node, one at a time: SIGTERM (it stops listening and finishes the requests in flight),
   start it again, wait until the gateways see it up and `admin status` on each shows no
   degraded object (the writes it missed are rebuilt onto it before the next node goes);
2. every gateway, one at a time: start the new one on the same port with `--reuse-port`, wait
   for it to listen, SIGTERM the old one (it drains).

No request may fail; at the end the listing is exactly the acknowledged writes, every one of them
reads back byte-exact through each gateway, and fsck is clean.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ServerProcess, alternate_gateways, catalog_env, free_port, make_client
from tests.faults.test_rolling_restart import BUCKET, MixedLoad
from tests.node_cluster import SECRET, Node, make_nodes, start_all
from tests.support import admin, run_admin, wait_for

pytestmark = pytest.mark.timeout(600)


@dataclass
class Cluster:
    root: Path
    nodes: list[Node]
    gateways: list[ServerProcess]

    def gateway(self, port: int, name: str) -> ServerProcess:
        """A gateway on the shared data directory (its log named apart: old and new share a port)."""
        (self.root / name).mkdir(exist_ok=True)
        data = self.root / name / "data"
        if not data.exists():
            data.symlink_to(self.root / "gw")
        return ServerProcess(
            data,
            port,
            extra_args=["--config", str(self.root / "gateway.toml"), "--reuse-port"],
            env={"TIERSTORE_CLUSTER_SECRET": SECRET, **catalog_env(self.root / "gw")},
            nodes=False,
        )


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    gw = tmp_path / "gw"
    (gw / "catalog").mkdir(parents=True)
    catalog: Path | str = catalog_env(gw).get("TIERSTORE_CATALOG_URL") or gw / "catalog" / "catalog.db"
    (tmp_path / "gateway.toml").write_text(
        '[tiers.hot]\nk = 3\nm = 2\nspread_level = "node"\n\n[drives]\nreserve_bytes = 0\n'
    )
    made = Cluster(tmp_path, make_nodes(tmp_path / "nodes", catalog), [])
    try:
        start_all(made.nodes)
        for n in range(2):
            made.gateways.append(made.gateway(free_port(), f"gw{n}-0").start())
        yield made
    finally:
        for gateway in made.gateways:
            gateway.kill()
        for node in made.nodes:
            node.stop()


def _up(name: str, endpoint: str) -> bool:
    return any(n["name"] == name and n["state"] == "up" for n in admin(endpoint, "nodes"))


def _whole(endpoint: str) -> bool:
    return bool(admin(endpoint, "status")["degraded_objects"] == 0)


def _wait_whole(cluster: Cluster) -> None:
    """Every gateway has healed what it wrote while a node was away (degraded objects: 0)."""
    for gateway in cluster.gateways:
        wait_for(
            functools.partial(_whole, gateway.endpoint),
            60,
            f"no degraded object on {gateway.endpoint}",
            interval=1,
        )


def test_rolling_upgrade_of_every_node_then_every_gateway(cluster: Cluster) -> None:
    first, second = cluster.gateways
    make_client(first.endpoint).create_bucket(Bucket=BUCKET)
    with MixedLoad(first.endpoint, threads=2, also=[second.endpoint]) as load:
        time.sleep(2)
        for node in cluster.nodes:
            before = load.requests
            assert node.terminate() == 0, node.log_path.read_text() if node.log_path else ""
            node.start()
            # Liveness is the heartbeat in the shared catalog: what one gateway sees, all do.
            wait_for(functools.partial(_up, node.name, first.endpoint), 30, f"{node.name} up")
            _wait_whole(cluster)
            assert load.requests > before, f"no request completed while {node.name} restarted"
        for n, old in enumerate(list(cluster.gateways)):
            new = cluster.gateway(old.port, f"gw{n}-1").start()
            cluster.gateways.append(new)
            time.sleep(1)
            assert old.stop() == 0, old.log()[-3000:]
            cluster.gateways.remove(old)
            before = load.requests
            time.sleep(2)  # the new gateway serves
            assert load.requests > before
    load.verify(make_client(first.endpoint))
    # Every acknowledged object, through both gateways in turn.
    s3 = alternate_gateways(make_client(first.endpoint), [g.endpoint for g in cluster.gateways])

    def read_back(key: str) -> None:
        body = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        assert hashlib.md5(body).hexdigest() == load.acked[key], key

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(read_back, sorted(load.acked)))
    _wait_whole(cluster)
    fsck = run_admin(cluster.gateways[0].endpoint, "fsck")
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    assert load.requests > 200, load.requests
