"""Shared fixtures: a real `tierstore serve` process on a free loopback port, and real clients."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import boto3
import pytest
from botocore.config import Config

from tests import reliability as reliability_plugin
from tests.reliability import reliability  # noqa: F401 - the fixture, for every test family

ACCESS_KEY = "test-access-key"
SECRET_KEY = "test-secret-key-0123456789"
REGION = "us-east-1"
START_TIMEOUT = 30.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", help="also run long soak tests")


def pytest_configure(config: pytest.Config) -> None:
    reliability_plugin.register(config)
    if config.getoption("--soak"):
        # The property tests read this when imported (tests/fuzzing.py): long random runs.
        os.environ.setdefault("TIERSTORE_FUZZ", "soak")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--soak"):
        return
    skip = pytest.mark.skip(reason="soak test: run with --soak")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ServerProcess:
    """A running `tierstore serve`, started the way a user starts it."""

    data_dir: Path
    port: int
    scheme: str = "http"
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[str] | None = None
    log_path: Path | None = None

    @property
    def endpoint(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def start(self) -> ServerProcess:
        self.log_path = self.data_dir.parent / f"server-{self.port}.log"
        # The access log is off by default; tests read it (status, error codes) as an operator would.
        env = {**os.environ, "TIERSTORE_ACCESS_KEY": ACCESS_KEY, "TIERSTORE_SECRET_KEY": SECRET_KEY,
               "TIERSTORE_SERVER_ACCESS_LOG": "true", "PYTHONUNBUFFERED": "1", **self.env}
        log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "server.cli", "serve", "--data", str(self.data_dir),
             "--listen", f"127.0.0.1:{self.port}", *self.extra_args],
            stdout=log, stderr=subprocess.STDOUT, env=env, text=True,
        )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited early:\n{self.log_path.read_text()}")
            if "tierstore: listening on" in self.log_path.read_text():
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"server did not start in {START_TIMEOUT}s:\n{self.log_path.read_text()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        code = self.proc.returncode
        self.proc = None
        return code

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path else ""


def make_client(endpoint: str, *, addressing: str = "path", verify: bool | str = True, **config: object):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name=REGION,
        verify=verify,
        config=Config(s3={"addressing_style": addressing}, retries={"max_attempts": 1}, **config),
    )


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the whole session (tests use their own buckets)."""
    data = tmp_path_factory.mktemp("server") / "data"
    proc = ServerProcess(data, free_port()).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def s3(server: ServerProcess):
    return make_client(server.endpoint)


_counter = iter(range(1_000_000))


@pytest.fixture
def bucket(s3) -> Iterator[str]:
    """A fresh bucket, emptied and removed afterwards."""
    name = f"test-{os.getpid()}-{next(_counter)}"
    s3.create_bucket(Bucket=name)
    yield name
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
        for obj in page.get("Contents", []):
            s3.delete_object(Bucket=name, Key=obj["Key"])
    for upload in s3.list_multipart_uploads(Bucket=name).get("Uploads", []):
        s3.abort_multipart_upload(Bucket=name, Key=upload["Key"], UploadId=upload["UploadId"])
    s3.delete_bucket(Bucket=name)
