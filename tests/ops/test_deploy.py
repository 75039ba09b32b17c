"""deploy/: the compose file validates, its volumes match the tier layout, the image is sane."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from server.config import load_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def compose_command() -> list[str]:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"]
    pytest.skip(
        "neither docker-compose nor the docker compose plugin is installed (Debian: apt-get install docker-compose)"
    )


def test_docker_compose_config_validates() -> None:
    out = subprocess.run(
        [*compose_command(), "-f", str(DEPLOY / "docker-compose.yml"), "config"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=DEPLOY,
    )
    assert out.returncode == 0, out.stderr
    resolved = yaml.safe_load(out.stdout)
    assert set(resolved["services"]) == {
        "postgres",
        "tierstore",
        "tierstore-2",
        "lb",
        "prometheus",
        "grafana",
    }
    # Two gateways on one catalog, behind the load balancer: the same drives, the same database.
    gateways = [resolved["services"][name] for name in ("tierstore", "tierstore-2")]
    assert gateways[0]["volumes"] == gateways[1]["volumes"]
    urls = {g["environment"]["TIERSTORE_CATALOG_URL"] for g in gateways}
    assert len(urls) == 1
    url = urls.pop()
    assert url.startswith("postgresql://") and "@postgres:5432/" in url
    assert "9000" in str(resolved["services"]["lb"]["ports"]) and "ports" not in gateways[0]


def test_every_simulated_node_has_its_own_volume(tmp_path: Path) -> None:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    config = load_config(DEPLOY / "tierstore.toml", data_dir=tmp_path)
    mounts = {}
    for spec in compose["services"]["tierstore"]["volumes"]:
        source, target = spec.split(":")[:2]
        mounts[target] = source
    expected = {
        f"/data/domains/{t.name}/n{i}"
        for t in config.tiers
        if t.backend == "erasure"
        for i in range(1, int(t.options["nodes"]) + 1)
    }
    assert expected and expected <= set(mounts), sorted(expected - set(mounts))
    node_volumes = [mounts[target] for target in expected]
    assert len(set(node_volumes)) == len(node_volumes), "one named volume per node"
    assert set(node_volumes) <= set(compose["volumes"])
    assert mounts["/data/catalog"] in compose["volumes"]
    for tier in config.tiers:
        if tier.backend == "erasure":
            assert int(tier.options["nodes"]) > int(tier.options["k"]) + int(tier.options["m"]) - 1


def test_compose_store_starts_with_the_compose_layout(tmp_path: Path) -> None:
    """The tier config the container runs builds a working store (same code path as `serve`)."""
    import asyncio

    from server.app import build_store

    config = load_config(DEPLOY / "tierstore.toml", data_dir=tmp_path)  # --data wins over /data
    assert config.catalog_path == tmp_path / "catalog" / "catalog.db"

    async def roundtrip() -> list[str]:
        store = build_store(config)
        await store.start()
        try:
            tiers = (await store.status())["tiers"]
            assert isinstance(tiers, list)
            return [t["name"] for t in tiers]
        finally:
            await store.close()

    assert asyncio.run(roundtrip()) == ["gpu-direct", "hot", "warm", "cold"]


def test_prometheus_scrapes_the_unauthenticated_metrics_path() -> None:
    prometheus = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    job = prometheus["scrape_configs"][0]
    assert job["metrics_path"] == "/metrics" and job["static_configs"][0]["targets"] == ["tierstore:9000"]


def test_dockerfile_runs_as_non_root_with_a_health_check() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert "FROM python:3.11-slim" in text
    assert "pip install ." in text and "USER tierstore" in text
    assert "HEALTHCHECK" in text and "/_tierstore/health" in text
    assert 'VOLUME ["/data"]' in text


CLUSTER = DEPLOY / "cluster"


def test_cluster_compose_config_validates() -> None:
    """deploy/cluster: 6 nodes over 3 racks (a volume each, one shared catalog), 2 gateways behind
    haproxy, Prometheus scraping both gateways, Grafana with the per-node dashboard."""
    out = subprocess.run(
        [*compose_command(), "-f", str(CLUSTER / "docker-compose.yml"), "config"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=CLUSTER,
    )
    assert out.returncode == 0, out.stderr
    services = yaml.safe_load(out.stdout)["services"]
    nodes = {name: s for name, s in services.items() if name.startswith("node")}
    assert (
        set(services) == {*nodes, "gateway1", "gateway2", "lb", "prometheus", "grafana"} and len(nodes) == 6
    )

    def mounts(service: dict[str, Any]) -> dict[str, str]:
        return (
            {v["target"]: v.get("source", "") for v in service["volumes"]}
            if isinstance(service["volumes"][0], dict)
            else {v.split(":")[1]: v.split(":")[0] for v in service["volumes"]}
        )

    racks: dict[str, int] = {}
    for name, node in nodes.items():
        command = node["command"]
        assert command[0] == "node" and command[command.index("--name") + 1] == name
        racks[command[command.index("--rack") + 1]] = racks.get(command[command.index("--rack") + 1], 0) + 1
        assert mounts(node)["/data/tiers"] == name, "a volume of its own per node"
        assert mounts(node)["/data/catalog"] == "catalog"
    assert racks == {"rack1": 2, "rack2": 2, "rack3": 2}
    for gateway in ("gateway1", "gateway2"):
        assert mounts(services[gateway])["/data/catalog"] == "catalog"
        assert set(services[gateway]["depends_on"]) == set(nodes)
    haproxy = (CLUSTER / "haproxy.cfg").read_text()
    assert "server gateway1 gateway1:9000" in haproxy and "server gateway2 gateway2:9000" in haproxy
    prometheus = yaml.safe_load((CLUSTER / "prometheus.yml").read_text())
    assert prometheus["scrape_configs"][0]["static_configs"][0]["targets"] == [
        "gateway1:9000",
        "gateway2:9000",
    ]
    dashboard = json.loads((CLUSTER / "grafana" / "cluster.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert any("tierstore_node_up" in e for e in exprs)
    assert any(p.get("repeat") == "node" for p in dashboard["panels"]), "a panel per node"


def test_cluster_gateway_config_loads(tmp_path: Path) -> None:
    config = load_config(CLUSTER / "gateway.toml", data_dir=tmp_path)
    hot = next(t for t in config.tiers if t.name == "hot")
    assert (hot.options["k"], hot.options["m"], hot.options["spread_level"]) == (3, 2, "node")
