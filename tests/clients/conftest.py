"""Fixtures for the real-client tests: an HTTPS server with a test-made certificate."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import boto3
import pytest
import trustme

from tests.conftest import ACCESS_KEY, REGION, SECRET_KEY, ServerProcess, free_port


@dataclass
class TlsServer:
    server: ServerProcess
    cafile: str

    @property
    def endpoint(self) -> str:
        return self.server.endpoint


@pytest.fixture(scope="session")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    """A second server, serving HTTPS with a certificate issued by a throw-away CA."""
    root = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert_path, key_path, ca_path = root / "cert.pem", root / "key.pem", root / "ca.pem"
    cert.private_key_and_cert_chain_pem.write_to_path(str(cert_path))
    cert.private_key_pem.write_to_path(str(key_path))
    ca.cert_pem.write_to_path(str(ca_path))
    proc = ServerProcess(
        root / "data", free_port(), scheme="https",
        extra_args=["--tls-cert", str(cert_path), "--tls-key", str(key_path)],
    ).start()  # fmt: skip
    try:
        yield TlsServer(proc, str(ca_path))
    finally:
        assert proc.stop() == 0, proc.log()


@pytest.fixture(scope="session")
def tls_s3(tls_server: TlsServer):
    """boto3 exactly as a user gets it: default config, only the endpoint and trust store set."""
    return boto3.client(
        "s3",
        endpoint_url=tls_server.endpoint,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name=REGION,
        verify=tls_server.cafile,
    )


_counter = iter(range(1_000_000))


@pytest.fixture
def tls_bucket(tls_s3) -> Iterator[str]:
    name = f"tls-{os.getpid()}-{next(_counter)}"
    tls_s3.create_bucket(Bucket=name)
    yield name
    for page in tls_s3.get_paginator("list_objects_v2").paginate(Bucket=name):
        for obj in page.get("Contents", []):
            tls_s3.delete_object(Bucket=name, Key=obj["Key"])
    for upload in tls_s3.list_multipart_uploads(Bucket=name).get("Uploads", []):
        tls_s3.abort_multipart_upload(Bucket=name, Key=upload["Key"], UploadId=upload["UploadId"])
    tls_s3.delete_bucket(Bucket=name)
