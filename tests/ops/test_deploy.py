"""deploy/: the compose file validates, its volumes match the tier layout, the image is sane."""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from server.config import load_config
from tests.conftest import ServerProcess, free_port, make_client

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


def test_dockerfile_copies_what_pip_install_builds_with(tmp_path: Path) -> None:
    """The image's `pip install .` sees only what the Dockerfile copies: the same copies here, then
    the same build (a wheel, without the dependencies or a download)."""
    pytest.importorskip("setuptools", reason="the build without isolation uses this venv's setuptools")
    source = tmp_path / "src"
    for line in (DEPLOY / "Dockerfile").read_text().splitlines():
        if not line.startswith("COPY "):
            continue
        *paths, destination = line.split()[1:]
        for path in paths:
            origin = DEPLOY.parent / path
            target = source / destination / (origin.name if destination.endswith("/") else "")
            target.parent.mkdir(parents=True, exist_ok=True)
            if origin.is_dir():
                shutil.copytree(origin, target, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
            else:
                shutil.copy(origin, target)
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "wheel"),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    assert [w.name.split("-")[0] for w in (tmp_path / "wheel").glob("*.whl")] == ["tierstore"]


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


@pytest.mark.parametrize("stack", [DEPLOY, CLUSTER], ids=["compose", "cluster"])
def test_the_gateways_believe_forwarded_headers_from_the_load_balancer_only(stack: Path) -> None:
    compose = yaml.safe_load((stack / "docker-compose.yml").read_text())
    services = compose["services"]
    lb = services["lb"]["networks"]["default"]["ipv4_address"]
    subnet = compose["networks"]["default"]["ipam"]["config"][0]["subnet"]
    assert ipaddress.ip_address(lb) in ipaddress.ip_network(subnet)
    gateways = [s for s in services.values() if "serve" in s.get("command", [])]
    assert len(gateways) == 2
    for gateway in gateways:
        assert gateway["environment"]["TIERSTORE_SERVER_TRUSTED_PROXIES"] == lb


def _lb_config(stack: Path, listen: int, gateway: int) -> str:
    """The stack's haproxy.cfg as it is, but listening on a loopback port and sending to one
    gateway on another (the container names do not resolve here)."""
    lines: list[str] = []
    for line in (stack / "haproxy.cfg").read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("bind "):
            line = f"    bind 127.0.0.1:{listen}"
        elif stripped.startswith("server "):
            if lines and lines[-1].startswith("    server gateway "):
                continue  # one gateway is enough here
            line = f"    server gateway 127.0.0.1:{gateway} check inter 1s"
        lines.append(line)
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("stack", [DEPLOY, CLUSTER], ids=["compose", "cluster"])
def test_the_load_balancer_states_the_client_itself(stack: Path, tmp_path: Path) -> None:
    """The stack's real haproxy config in front of a real gateway that trusts it: bucket policies
    see the S3 client's own address and scheme, whatever X-Forwarded-* headers the client sent."""
    haproxy = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)
    if haproxy is None:
        pytest.skip("haproxy is not installed (Debian: apt-get install haproxy)")
    server = ServerProcess(
        tmp_path / "data", free_port(), env={"TIERSTORE_SERVER_TRUSTED_PROXIES": "127.0.0.1"}
    ).start()
    listen = free_port()
    config = tmp_path / "haproxy.cfg"
    config.write_text(_lb_config(stack, listen, server.port))
    lb = subprocess.Popen([haproxy, "-db", "-f", str(config)], stderr=subprocess.PIPE, text=True)
    try:
        s3 = make_client(server.endpoint)
        s3.create_bucket(Bucket="behind-lb")
        s3.put_object(Bucket="behind-lb", Key="k", Body=b"v")
        url = f"http://127.0.0.1:{listen}/behind-lb/k"
        deadline = time.monotonic() + 30
        while True:  # haproxy is up and its health check has found the gateway
            try:
                if requests.get(url, timeout=5).status_code == 403:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline and lb.poll() is None, "haproxy did not come up"
            time.sleep(0.2)

        def allow_if(condition: dict[str, Any]) -> None:
            statement = {
                "Effect": "Allow",
                "Principal": "*",
                "Action": "s3:GetObject",
                "Resource": "arn:aws:s3:::behind-lb/*",
                "Condition": condition,
            }
            s3.put_bucket_policy(
                Bucket="behind-lb", Policy=json.dumps({"Version": "2012-10-17", "Statement": [statement]})
            )

        forged = {"X-Forwarded-For": "203.0.113.7", "X-Forwarded-Proto": "https"}
        allow_if({"IpAddress": {"aws:SourceIp": "127.0.0.1/32"}})  # the client's real address
        assert requests.get(url, headers=forged, timeout=30).status_code == 200
        allow_if({"IpAddress": {"aws:SourceIp": "203.0.113.0/24"}})  # the address it claims
        assert requests.get(url, headers=forged, timeout=30).status_code == 403
        allow_if({"Bool": {"aws:SecureTransport": "true"}})  # TLS it claims; the proxy is plain HTTP
        assert requests.get(url, headers=forged, timeout=30).status_code == 403
    finally:
        lb.terminate()
        lb.wait(timeout=30)
        server.stop()
