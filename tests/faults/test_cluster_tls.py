"""Storage nodes over TLS: `tierstore node --tls-cert/--tls-key`, gateways verifying them (--node-ca).

A CA and a certificate for 127.0.0.1 are made here with `cryptography`. Three TLS nodes carry
every erasure-coded tier; a gateway that trusts the CA writes and reads through them byte-exact,
a gateway given another CA gets clean 503s (never wrong bytes) while the nodes log the failed
handshakes, and a plain-HTTP request to a TLS node fails with nothing on its drives touched.
"""

from __future__ import annotations

import datetime
import hashlib
import http.client
import ipaddress
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.conftest import ServerProcess, catalog_env, free_port, make_client
from tests.node_cluster import SECRET, Node, start_all
from tests.shards import count_shards

TIERS = """
[tiers.hot]
k = 2
m = 1
spread_level = "node"

[tiers.warm]
k = 2
m = 1
spread_level = "node"

[tiers.cold]
k = 2
m = 1
spread_level = "node"

[drives]
reserve_bytes = 0
"""


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )


def make_ca(directory: Path, name: str) -> tuple[Path, ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A self-signed CA: (its PEM certificate file, its key, its certificate)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(_name(name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    path = directory / f"{name}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path, key, cert


def make_node_cert(
    directory: Path, ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate
) -> tuple[Path, Path]:
    """A server certificate for 127.0.0.1 signed by the CA: (cert file, key file)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("tierstore node"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    cert_path, key_path = directory / "node.pem", directory / "node-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, key_path)
    return cert_path, key_path


@dataclass
class TLSCluster:
    root: Path
    nodes: list[Node]
    gateway: ServerProcess
    ca: Path
    wrong_ca: Path
    config: Path


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TLSCluster]:
    root = tmp_path_factory.mktemp("tls")
    ca, ca_key, ca_cert = make_ca(root, "cluster-ca")
    wrong_ca, _, _ = make_ca(root, "some-other-ca")
    cert, key = make_node_cert(root, ca_key, ca_cert)
    gw = root / "gw"
    catalog: Path | str = catalog_env(gw).get("TIERSTORE_CATALOG_URL") or gw / "catalog" / "catalog.db"
    if isinstance(catalog, Path):
        catalog.parent.mkdir(parents=True, exist_ok=True)
    # One node takes its certificate from a config file's [node] table, the others from flags.
    node_config = root / "node.toml"
    node_config.write_text(f'[node]\ntls_cert = "{cert}"\ntls_key = "{key}"\n')
    nodes = [
        Node(
            f"t{i}",
            f"rack{i}",
            free_port(),
            root / f"t{i}",
            catalog,
            extra_args=["--tls-cert", str(cert), "--tls-key", str(key)]
            if i > 1
            else ["--config", str(node_config)],
        )
        for i in range(1, 4)
    ]
    config = root / "gateway.toml"
    config.write_text(TIERS)
    gateway = ServerProcess(
        gw,
        free_port(),
        extra_args=["--config", str(config), "--node-ca", str(ca)],
        env={"TIERSTORE_CLUSTER_SECRET": SECRET},
        nodes=False,
    )
    try:
        start_all(nodes)
        gateway.start()
        yield TLSCluster(root, nodes, gateway, ca, wrong_ca, config)
    finally:
        gateway.kill()
        for node in nodes:
            node.stop()


def _snapshot(node: Node) -> list[tuple[str, int]]:
    return sorted((str(p), p.stat().st_size) for p in node.data.rglob("*") if p.is_file())


def test_nodes_register_https_and_serve_a_gateway_that_trusts_them(tls_cluster: TLSCluster) -> None:
    for node in tls_cluster.nodes:
        assert node.log_path is not None
        assert f"listening on https://127.0.0.1:{node.port}" in node.log_path.read_text()
    s3 = make_client(tls_cluster.gateway.endpoint)
    s3.create_bucket(Bucket="tls")
    before = sum(count_shards(n.data) for n in tls_cluster.nodes)
    bodies = {"small": os.urandom(3000), "large": os.urandom(2 * 1024 * 1024 + 777)}
    for key, body in bodies.items():
        s3.put_object(Bucket="tls", Key=key, Body=body)
    # a small object as m+1 replicas, a large one as k+m shards: all on the TLS nodes
    assert sum(count_shards(n.data) for n in tls_cluster.nodes) >= before + 2 + 3
    for key, body in bodies.items():
        got = s3.get_object(Bucket="tls", Key=key)["Body"].read()
        assert hashlib.sha256(got).hexdigest() == hashlib.sha256(body).hexdigest(), key
    part = s3.get_object(Bucket="tls", Key="large", Range="bytes=1048570-1048600")["Body"].read()
    assert part == bodies["large"][1048570:1048601]


def test_gateway_with_the_wrong_ca_gets_clean_503s(tls_cluster: TLSCluster) -> None:
    s3 = make_client(tls_cluster.gateway.endpoint)
    s3.create_bucket(Bucket="wrongca")
    body = os.urandom(200_000)
    s3.put_object(Bucket="wrongca", Key="kept", Body=body)
    seen = [n.log_path.stat().st_size for n in tls_cluster.nodes if n.log_path is not None]
    # A second gateway on the same catalog that trusts another CA (given by the environment).
    other = ServerProcess(
        tls_cluster.gateway.data_dir,
        free_port(),
        extra_args=["--config", str(tls_cluster.config)],
        env={"TIERSTORE_CLUSTER_SECRET": SECRET, "TIERSTORE_NODE_CA": str(tls_cluster.wrong_ca)},
        nodes=False,
    )
    other.start()
    try:
        wrong = make_client(other.endpoint)
        for attempt in range(2):
            with pytest.raises(ClientError) as refused:
                wrong.put_object(Bucket="wrongca", Key=f"refused-{attempt}", Body=os.urandom(100_000))
            assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
            with pytest.raises(ClientError) as unread:
                wrong.get_object(Bucket="wrongca", Key="kept")["Body"].read()
            assert unread.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    finally:
        other.kill()
    logs = [
        n.log_path.read_text()[start:]
        for n, start in zip(tls_cluster.nodes, seen, strict=True)
        if n.log_path is not None
    ]
    assert any("TLS handshake with 127.0.0.1 failed" in text for text in logs), logs
    assert any("CERTIFICATE" in text.upper() or "UNKNOWN CA" in text.upper() for text in logs), logs
    # Nothing the refused PUTs sent landed; the gateway that trusts the CA still serves the object.
    listed = s3.list_objects_v2(Bucket="wrongca").get("Contents", [])
    assert [o["Key"] for o in listed] == ["kept"]
    assert s3.get_object(Bucket="wrongca", Key="kept")["Body"].read() == body


def test_plain_http_to_a_tls_node_fails_with_nothing_touched(tls_cluster: TLSCluster) -> None:
    node = tls_cluster.nodes[1]
    before = _snapshot(node)
    seen = node.log_path.stat().st_size if node.log_path is not None else 0
    from erasure import node_auth

    for method, path in (("GET", "/v1/drive/d1/hot/list"), ("DELETE", "/v1/drive/d1/hot/shard/abc/0")):
        # Signed with the cluster secret, even: over plain HTTP it is not heard.
        headers = node_auth.sign(SECRET.encode(), method, path)
        request = urllib.request.Request(
            f"http://127.0.0.1:{node.port}{path}", method=method, headers=headers
        )
        with pytest.raises((urllib.error.URLError, http.client.HTTPException, ConnectionError)):
            urllib.request.urlopen(request, timeout=5)
    assert _snapshot(node) == before
    assert node.log_path is not None
    assert "TLS handshake with 127.0.0.1 failed" in node.log_path.read_text()[seen:]
