"""Fixtures for lifecycle tests: dedicated servers on a test clock, driven through boto3 and the admin CLI.

Every server here starts with `--test-clock` and a one-hour lifecycle interval, so a pass runs only
when a test says `tierstore admin lifecycle run --wait`: what a test asserts after a pass is what
that pass did. The admin CLI runs in-process (`server.cli.main`, the same parser and HTTP calls a
shell user gets) because a Python start per command would dominate the suite's wall time; one test
in test_daemon_process.py runs it as a real subprocess.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from server.cli import main as tierstore_main
from tests.conftest import ACCESS_KEY, SECRET_KEY, ServerProcess, free_port, make_client

KiB = 1024
MiB = 1024 * 1024
DAY = 86400.0
# A pass runs only when a test asks for one.
QUIET_DAEMON = {"TIERSTORE_LIFECYCLE_INTERVAL_SECONDS": "3600"}

_admin_lock = threading.Lock()


def admin_cli(endpoint: str, *args: str) -> Any:
    """`tierstore admin --endpoint E ARGS --json`, in-process; the parsed JSON it printed."""
    out = io.StringIO()
    with _admin_lock:
        saved = {k: os.environ.get(k) for k in ("TIERSTORE_ACCESS_KEY", "TIERSTORE_SECRET_KEY")}
        os.environ["TIERSTORE_ACCESS_KEY"], os.environ["TIERSTORE_SECRET_KEY"] = ACCESS_KEY, SECRET_KEY
        try:
            with contextlib.redirect_stdout(out):
                code = tierstore_main(["admin", "--endpoint", endpoint, *args, "--json"])
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    assert code == 0, out.getvalue()
    return json.loads(out.getvalue())


@dataclass
class Tiered:
    """A running server with a test clock, its boto3 client and admin shortcuts."""

    server: ServerProcess

    def __post_init__(self) -> None:
        self.s3 = make_client(self.server.endpoint)

    @property
    def endpoint(self) -> str:
        return self.server.endpoint

    def admin(self, *args: str) -> Any:
        return admin_cli(self.endpoint, *args)

    def advance(self, days: float) -> dict[str, Any]:
        return self.admin("clock", "advance", str(days))

    def run_pass(self) -> dict[str, Any]:
        """One lifecycle pass, returning when it and all its moves are done; the pass report."""
        return self.admin("lifecycle", "run", "--wait")["pass"]

    def obj(self, bucket: str, key: str) -> dict[str, Any]:
        return self.admin("object", bucket, key)

    def tier(self, bucket: str, key: str) -> str:
        """The tier as HEAD reports it (x-tierstore-tier), checked against `admin object`.

        A daemon may move the object between the two reads, so HEAD is bracketed by two admin
        reads: only when both agree (nothing moved meanwhile) must HEAD say the same tier.
        """
        for _ in range(5):
            before = self.obj(bucket, key)["tier"]
            head = self.s3.head_object(Bucket=bucket, Key=key)
            tier = head["ResponseMetadata"]["HTTPHeaders"]["x-tierstore-tier"]
            after = self.obj(bucket, key)["tier"]
            if before == after:
                assert tier == after, f"HEAD says {tier}, the catalog says {after}"
                return tier
            assert tier in (before, after), f"HEAD says {tier} while the object moved {before} -> {after}"
        raise AssertionError(f"{bucket}/{key} kept moving between tiers")

    def storage_class(self, bucket: str, key: str) -> str:
        return self.s3.head_object(Bucket=bucket, Key=key).get("StorageClass", "STANDARD")

    def get(self, bucket: str, key: str, **kwargs: Any) -> bytes:
        return self.s3.get_object(Bucket=bucket, Key=key, **kwargs)["Body"].read()

    def heat_up(self, bucket: str, key: str, reads: int) -> None:
        """GETs warm an object; the tracker batches them, and every pass flushes the batch first."""
        for _ in range(reads):
            self.get(bucket, key)

    def tiers(self) -> dict[str, dict[str, Any]]:
        return {t["name"]: t for t in self.admin("tiers")}


def error_code(exc: ClientError) -> str:
    return str(exc.response["Error"]["Code"])


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., Tiered]]:
    """Start a dedicated test-clock server: `spawn(env={...}, extra_args=[...])`. Killed at the end."""
    started: list[ServerProcess] = []

    def start(
        *, env: dict[str, str] | None = None, extra_args: list[str] | None = None, data: Path | None = None
    ) -> Tiered:
        proc = ServerProcess(
            data or tmp_path / f"data{len(started)}",
            free_port(),
            extra_args=["--test-clock", *(extra_args or [])],
            env={**QUIET_DAEMON, **(env or {})},
        )
        started.append(proc)
        proc.start()
        return Tiered(proc)

    yield start
    for proc in started:
        proc.stop()


def clocked_server(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[Tiered]:
    """A server on a test clock with a quiet lifecycle daemon (passes run when a test asks)."""
    proc = ServerProcess(
        tmp_path_factory.mktemp(name) / "data",
        free_port(),
        extra_args=["--test-clock"],
        env=dict(QUIET_DAEMON),
    )
    proc.start()
    yield Tiered(proc)
    proc.stop()


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tiered]:
    """One test-clock server per test module (tests use their own buckets)."""
    yield from clocked_server(tmp_path_factory, "lifecycle")


_names = iter(range(1_000_000))


@pytest.fixture
def new_bucket(shared: Tiered) -> Callable[[], str]:
    def make() -> str:
        name = f"lc-{os.getpid()}-{next(_names)}"
        shared.s3.create_bucket(Bucket=name)
        return name

    return make


def signed_request(
    endpoint: str, method: str, path: str, query: str = "", body: bytes = b""
) -> tuple[int, str]:
    """One SigV4-signed request with exactly this body (for documents boto3 would never send)."""
    import base64
    import hashlib
    import urllib.error
    import urllib.request

    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    url = f"{endpoint}{path}" + (f"?{query}" if query else "")
    headers = {"Content-MD5": base64.b64encode(hashlib.md5(body).digest()).decode()}
    request = AWSRequest(method=method, url=url, data=body, headers=headers)
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1").add_auth(request)
    prepared = urllib.request.Request(url, data=body, method=method, headers=dict(request.headers.items()))
    try:
        with urllib.request.urlopen(prepared, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
