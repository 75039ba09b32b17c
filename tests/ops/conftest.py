"""Fixtures for the operations tests: one test-clock server with some traffic behind it."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.conftest import ACCESS_KEY, REGION, SECRET_KEY, ServerProcess, free_port, make_client

# The lifecycle daemon runs a pass only when a test asks for one.
QUIET_DAEMON = {"TIERSTORE_LIFECYCLE_INTERVAL_SECONDS": "3600"}
SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})? (\S+)$")


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode()


def http(
    url: str,
    *,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
    sign: bool = False,
    keys: tuple[str, str] = (ACCESS_KEY, SECRET_KEY),
) -> Reply:
    """One HTTP request, SigV4-signed if `sign` (with `keys`: the test's root keys, an administrator's);
    any status comes back."""
    headers = dict(headers or {})
    if sign:
        request = AWSRequest(method=method, url=url, data=body or b"", headers=headers)
        S3SigV4Auth(Credentials(*keys), "s3", REGION).add_auth(request)
        headers = dict(request.headers.items())
    prepared = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(prepared, timeout=30) as response:
            return Reply(
                response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
            )
    except urllib.error.HTTPError as exc:
        return Reply(exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read())


def parse_metrics(text: str) -> dict[str, float]:
    """`name{labels}` → value for every sample line."""
    return {
        m.group(1) + (m.group(2) or ""): float(m.group(3))
        for line in text.splitlines()
        if (m := SAMPLE.match(line))
    }


def sample_names(text: str) -> set[str]:
    return {m.group(1) for line in text.splitlines() if (m := SAMPLE.match(line))}


@dataclass
class Ops:
    server: ServerProcess
    traffic: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.s3 = make_client(self.server.endpoint)

    @property
    def endpoint(self) -> str:
        return self.server.endpoint

    def metrics_text(self, *, admin: bool = False) -> str:
        """An unsigned scrape, or with `admin` one signed by an administrator (per bucket series too)."""
        reply = (
            http(f"{self.endpoint}/_tierstore/metrics", sign=True)
            if admin
            else http(f"{self.endpoint}/metrics")
        )
        assert reply.status == 200, reply.text
        return reply.text

    def metrics(self, *, admin: bool = False) -> dict[str, float]:
        return parse_metrics(self.metrics_text(admin=admin))

    def admin(self, method: str, path: str, query: str = "") -> Any:
        import json

        reply = http(
            f"{self.endpoint}/_tierstore/admin/{path}" + (f"?{query}" if query else ""),
            method=method,
            sign=True,
        )
        assert reply.status == 200, reply.text
        return json.loads(reply.body)


@pytest.fixture(scope="session")
def ops(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ops]:
    proc = ServerProcess(
        tmp_path_factory.mktemp("ops") / "data",
        free_port(),
        extra_args=["--test-clock"],
        env=dict(QUIET_DAEMON),
    )
    proc.start()
    ops = Ops(proc)
    # Traffic first, before anything scrapes: heat and per-bucket numbers are cached for 15 s.
    ops.traffic = make_traffic(ops)
    yield ops
    proc.stop()


@pytest.fixture(scope="session")
def traffic(ops: Ops) -> dict[str, Any]:
    return ops.traffic


def make_traffic(ops: Ops) -> dict[str, Any]:
    """PUTs, GETs and one lifecycle move (hot → warm after 31 idle days), then a heal pass."""
    s3 = ops.s3
    bucket = "ops-traffic"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="idle", Body=b"i" * 300_000)
    s3.put_object(Bucket=bucket, Key="fast", Body=b"f" * 4096, StorageClass="EXPRESS_ONEZONE")
    s3.put_object(Bucket=bucket, Key="cold", Body=b"c" * 5000, StorageClass="GLACIER")
    ops.admin("POST", "clock/advance", "days=31")
    ops.admin("POST", "lifecycle/run", "wait=1")
    for _ in range(3):
        assert s3.get_object(Bucket=bucket, Key="fast")["Body"].read() == b"f" * 4096
    assert s3.get_object(Bucket=bucket, Key="idle")["Body"].read() == b"i" * 300_000
    head = s3.head_object(Bucket=bucket, Key="idle")
    assert head["ResponseMetadata"]["HTTPHeaders"]["x-tierstore-tier"] == "warm"
    ops.admin("POST", "heal", "wait=1")
    ops.admin("POST", "lifecycle/run", "wait=1")  # folds the GETs into heat first
    return {"bucket": bucket}
