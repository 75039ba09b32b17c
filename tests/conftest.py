"""Shared fixtures: a real `tierstore serve` process on a free loopback port, and real clients."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from tests import postgres
from tests import reliability as reliability_plugin
from tests.reliability import reliability  # noqa: F401 - the fixture, for every test family

ACCESS_KEY = "test-access-key"
SECRET_KEY = "test-secret-key-0123456789"
REGION = "us-east-1"
START_TIMEOUT = 30.0


# Which catalog the servers the tests start use: `--catalog=postgresql` (or the environment
# variable) starts one PostgreSQL server for the session (tests/postgres.py) and gives every
# tierstore server a fresh database on it; the default is each server's own SQLite file.
CATALOG_ENV = "TIERSTORE_TEST_CATALOG"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--soak", action="store_true", help="also run long soak tests")
    parser.addoption(
        "--catalog",
        choices=("sqlite", "postgresql"),
        default=None,
        help=f"the catalog of the servers tests start (default: ${CATALOG_ENV} or sqlite)",
    )


def catalog_kind() -> str:
    return os.environ.get(CATALOG_ENV) or "sqlite"


def pytest_configure(config: pytest.Config) -> None:
    reliability_plugin.register(config)
    config.addinivalue_line(
        "markers", "sqlite_only: needs the SQLite catalog (reads its file); skipped on PostgreSQL"
    )
    config.addinivalue_line("markers", "postgresql: needs a PostgreSQL server (tests/postgres.py)")
    if config.getoption("--catalog"):
        os.environ[CATALOG_ENV] = config.getoption("--catalog")  # servers and subprocesses see it
    if config.getoption("--soak"):
        # The property tests read this when imported (tests/fuzzing.py): long random runs.
        os.environ.setdefault("TIERSTORE_FUZZ", "soak")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    on_postgresql = catalog_kind() == "postgresql"
    no_postgresql = postgres.unavailable()
    for item in items:
        if on_postgresql and "sqlite_only" in item.keywords:
            item.add_marker(
                pytest.mark.skip(reason="reads the SQLite catalog file; this run uses PostgreSQL")
            )
        if (on_postgresql or "postgresql" in item.keywords) and no_postgresql:
            item.add_marker(pytest.mark.skip(reason=no_postgresql))
    if config.getoption("--soak"):
        return
    skip = pytest.mark.skip(reason="soak test: run with --soak")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


def catalog_env(data_dir: Path) -> dict[str, str]:
    """The environment a process needs to open the catalog of the server whose data is in `data_dir`."""
    return (
        {"TIERSTORE_CATALOG_URL": postgres.database_for(data_dir)} if catalog_kind() == "postgresql" else {}
    )


def catalog_location(data_dir: Path) -> str | Path:
    """The catalog of the server whose data is in `data_dir`: its SQLite file or its database's URL."""
    return catalog_env(data_dir).get("TIERSTORE_CATALOG_URL") or data_dir / "catalog" / "catalog.db"


def catalog_query(data_dir: Path, sql: str, args: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
    """Rows of a read-only query (`?` placeholders) on that server's catalog, whichever database it is."""
    if catalog_kind() == "postgresql":
        url = postgres.database_for(data_dir)
        return [tuple(r) for r in postgres.session_server().sql(url, sql.replace("?", "%s"), args)]
    db = sqlite3.connect(f"file:{data_dir / 'catalog' / 'catalog.db'}?mode=ro", uri=True, timeout=30)
    try:
        return [tuple(r) for r in db.execute(sql, args)]
    finally:
        db.close()


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
        if "TIERSTORE_CATALOG_URL" not in self.env and "--catalog" not in self.extra_args:
            # On PostgreSQL: this server's own database, the same one each time it (re)starts on this data.
            self.env.update(catalog_env(self.data_dir))
        # The access log is off by default; tests read it (status, error codes) as an operator would.
        env = {
            **os.environ,
            "TIERSTORE_ACCESS_KEY": ACCESS_KEY,
            "TIERSTORE_SECRET_KEY": SECRET_KEY,
            "TIERSTORE_SERVER_ACCESS_LOG": "true",
            "PYTHONUNBUFFERED": "1",
            **self.env,
        }
        log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "server.cli",
                "serve",
                "--data",
                str(self.data_dir),
                "--listen",
                f"127.0.0.1:{self.port}",
                *self.extra_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            text=True,
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
