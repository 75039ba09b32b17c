"""Shared fixtures: a real `tierstore serve` process on a free loopback port, and real clients."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from server import compiled_build, runtime_dir
from tests import node_cluster, ports, postgres, server_logs
from tests import reliability as reliability_plugin
from tests.reliability import reliability  # noqa: F401 - the fixture, for every test family

ACCESS_KEY = "test-access-key"
SECRET_KEY = "test-secret-key-0123456789"
REGION = "us-east-1"
# A supervisor imports the server, then its workers do, each opening the catalog: on a loaded
# 2-core machine that took over 30 s once; a quick start returns as soon as it listens anyway.
START_TIMEOUT = 60.0
# Servers the tests start run as one process (`tierstore serve` itself runs one worker per core
# by default). TIERSTORE_TEST_WORKERS=2 runs every one of them as 2 workers under a supervisor: the
# run that had to pass before one worker per core became the default (2026-12-03, on 04bf522 and
# 8fabe16: tests/faults, tests/lifecycle, tests/s3 568 passed, 1 skipped;
# tests/admin, clients, clients_ml, ops 116 passed); a test that needs one process (it reads one
# process's memory, or kills "the" server mid-write) passes `--workers 1` and says why.
# tests/faults/test_workers.py runs the supervised path always, and tests/ops/test_console_log.py
# the default.
TEST_WORKERS = os.environ.get("TIERSTORE_TEST_WORKERS", "1")


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
    parser.addoption(
        "--cluster",
        action="store_true",
        help="servers keep their erasure-coded tiers on 6 storage nodes (tests/node_cluster.py); "
        "the session server is 2 gateways that the `s3` client alternates between",
    )


def catalog_kind() -> str:
    return os.environ.get(CATALOG_ENV) or "sqlite"


def pytest_configure(config: pytest.Config) -> None:
    stale = compiled_build.stale_message()
    if stale:  # the tests would run the old compiled code, not the source under test
        pytest.exit(stale, 2)
    reliability_plugin.register(config)
    config.addinivalue_line(
        "markers", "sqlite_only: needs the SQLite catalog (reads its file); skipped on PostgreSQL"
    )
    config.addinivalue_line("markers", "postgresql: needs a PostgreSQL server (tests/postgres.py)")
    if config.getoption("--catalog"):
        os.environ[CATALOG_ENV] = config.getoption("--catalog")  # servers and subprocesses see it
    if config.getoption("--cluster"):
        os.environ[node_cluster.CLUSTER_ENV] = "1"
    if config.getoption("--soak"):
        # The property tests read this when imported (tests/fuzzing.py): long random runs.
        os.environ.setdefault("TIERSTORE_FUZZ", "soak")


# The suite runs on every core: pyproject's addopts give `-n auto --dist loadfile`, so each file
# goes whole to one pytest-xdist process (its module fixtures start once). Files are independent:
# each test starts its servers on ports of its own process's slice (tests/ports.py), and each
# process its own PostgreSQL server (tests/postgres.py) and session servers (below), whose logs
# are checked when they stop. Serially the whole suite took 40 of CI's 90 minutes on a slow
# 2-core machine (2026-12-07), most of it waiting: for servers to start, a heal, a lease, a kill.
@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook, for `-n auto`
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """A process per core this one may run on, no more than tests/ports.py has port slices."""
    return max(1, min(len(os.sched_getaffinity(0)), ports.SLICES))


def pytest_report_header(config: pytest.Config) -> str:
    return f"tierstore build: {compiled_build.describe()}"


def pytest_sessionfinish(session: pytest.Session) -> None:
    node_cluster.stop_everything()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test's report ends with the logs of the servers that ran during it (tests/server_logs.py)."""
    report = yield
    if report.failed and call.when in ("setup", "call"):
        report.sections.extend(server_logs.written_since(call.start))
    return report


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
    """A loopback port for a server a test starts (tests/ports.py)."""
    return ports.free_port()


# Run as `python -c _LOWER_OPEN_FILES SOFT COMMAND...`: the soft limit on open files set, then the
# command in the same process. (A `preexec_fn` did it in the child between fork and exec, which
# Python documents as unsafe in a parent with threads, as an xdist worker has: it may deadlock.)
_LOWER_OPEN_FILES = (
    "import os, resource, sys; "
    "resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), resource.getrlimit(resource.RLIMIT_NOFILE)[1])); "
    "os.execv(sys.argv[2], sys.argv[2:])"
)


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
    # With --cluster: start storage nodes for this data directory (False: the test brings its own).
    nodes: bool = True
    # The other gateways on this data that the session's clients also send requests to (--cluster).
    siblings: list[ServerProcess] = field(default_factory=list)
    # The server's soft limit on open files, set in its process alone (None: inherited): lowering
    # the test process's own would fail whatever it opens meanwhile (an xdist worker holds more).
    open_files_soft_limit: int | None = None

    @property
    def endpoint(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    @property
    def workers(self) -> int:
        """How many processes serve (`--workers`, else the environment, else TIERSTORE_TEST_WORKERS;
        0: one per core): each appends to packs of its own, so counts of pack files scale with it."""
        if "--workers" in self.extra_args:
            count = self.extra_args[self.extra_args.index("--workers") + 1]
        else:
            count = self.env.get("TIERSTORE_SERVER_WORKERS", TEST_WORKERS)
        return int(count) or len(os.sched_getaffinity(0))

    def _catalog_for_nodes(self) -> Path | str:
        if "--catalog" in self.extra_args:
            return self.extra_args[self.extra_args.index("--catalog") + 1]
        if "TIERSTORE_CATALOG_URL" in self.env:
            return self.env["TIERSTORE_CATALOG_URL"]
        (self.data_dir / "catalog").mkdir(parents=True, exist_ok=True)
        return self.data_dir / "catalog" / "catalog.db"

    def _over_nodes(self) -> bool:
        return self.nodes and node_cluster.cluster_mode()

    def start(self) -> ServerProcess:
        self.log_path = self.data_dir.parent / f"server-{self.port}.log"
        server_logs.register(self.log_path)
        if "TIERSTORE_CATALOG_URL" not in self.env and "--catalog" not in self.extra_args:
            # On PostgreSQL: this server's own database, the same one each time it (re)starts on this data.
            # A new dict, not an update: the caller's (often a module's constant, shared by several
            # tests' servers) must not carry this server's database into the next one.
            self.env = {**self.env, **catalog_env(self.data_dir)}
        # The access log is off by default; tests read it (status, error codes) as an operator would.
        env = {
            **os.environ,
            "TIERSTORE_ACCESS_KEY": ACCESS_KEY,
            "TIERSTORE_SECRET_KEY": SECRET_KEY,
            "TIERSTORE_SERVER_ACCESS_LOG": "true",
            "TIERSTORE_SERVER_WORKERS": TEST_WORKERS,
            "PYTHONUNBUFFERED": "1",
            **self.env,
        }
        if self._over_nodes():
            env["TIERSTORE_CLUSTER_SECRET"] = node_cluster.SECRET
            node_cluster.attach(self.data_dir, self._catalog_for_nodes(), self)
        log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        command = [
            sys.executable,
            "-m",
            "server.cli",
            "serve",
            "--data",
            str(self.data_dir),
            "--listen",
            f"127.0.0.1:{self.port}",
            *self.extra_args,
        ]
        if self.open_files_soft_limit is not None:
            command = [sys.executable, "-c", _LOWER_OPEN_FILES, str(self.open_files_soft_limit), *command]
        self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, text=True)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited early:\n{self.log_path.read_text()}")
            if "tierstore: listening on" in self.log_path.read_text():
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"server did not start in {START_TIMEOUT}s:\n{self.log_path.read_text()}")

    def worker_pids(self) -> list[int]:
        """The supervisor's worker processes (none for a single-process server)."""
        if self.proc is None:
            return []
        out = subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True).stdout
        return sorted(int(p) for p in out.split())

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int | None:
        if self.proc is None:
            return None
        workers = self.worker_pids()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        # Workers die with their supervisor (SIGKILL on its death): wait until they are gone, so
        # that what follows (a restart on the same data, a look at its files) sees no live writer.
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.01)
        code = self.proc.returncode
        self.proc = None
        if self._over_nodes():
            node_cluster.detach(self.data_dir, self)
        return code

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path else ""

    def access_log(self) -> list[dict[str, Any]]:
        """The access-log entries of this server and its siblings, oldest first."""
        entries = [
            json.loads(line)
            for proc in (self, *self.siblings)
            for line in proc.log().splitlines()
            if line.startswith("{")
        ]
        return sorted(entries, key=lambda entry: str(entry.get("time")))

    def data_roots(self) -> list[Path]:
        """Where this server's tiers keep bytes: its data directory, and its storage nodes' (--cluster)."""
        return [self.data_dir, *node_cluster.node_dirs(self.data_dir)]


def _alive(pid: int) -> bool:
    """True while `pid` runs (a zombie, reparented to init and not yet reaped, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


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


@pytest.fixture(scope="session", autouse=True)
def runtime_dirs_removed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """At the session's end (every server of it stopped: this fixture is set up first, so it is
    torn down last), the runtime directories of the session's data directories go from /dev/shm.
    The servers tests kill with SIGKILL never remove theirs, and pytest keeps the last three
    sessions' temporary trees, so the usual sweep of directories whose data is gone would not
    either: a full CI run left over a hundred behind (~150 KB each)."""
    yield
    runtime_dir.remove_for_data_under(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="session")
def session_gateways(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ServerProcess]]:
    """The session's servers: one, or with --cluster two gateways on one catalog over the nodes.

    When the session ends, each must still be running and must have logged no traceback and no
    internal error, whatever the tests sent it: checked here, after every test of this process
    that used it, whichever files the process ran (so it fails the session, reported as an error
    in the teardown of its last test)."""
    data = tmp_path_factory.mktemp("server") / "data"
    procs = [ServerProcess(data, free_port()).start()]
    try:
        if node_cluster.cluster_mode():
            procs.append(ServerProcess(data, free_port()).start())
            procs[0].siblings = procs[1:]
        yield procs
        running = [proc.proc is not None and proc.proc.poll() is None for proc in procs]
    finally:
        for proc in procs:
            proc.stop()
    for proc, ran in zip(procs, running, strict=True):
        log = proc.log()
        assert ran, f"the session's server {proc.endpoint} died:\n{log[-3000:]}"
        assert "Traceback" not in log, log[max(0, log.find("Traceback") - 2000) :]
        assert "internal error" not in log, log[max(0, log.find("internal error") - 2000) :]


@pytest.fixture(scope="session")
def server(session_gateways: list[ServerProcess]) -> ServerProcess:
    """One server for the whole session (tests use their own buckets)."""
    return session_gateways[0]


# Bucket configurations each gateway caches for a second (server/authorization.py, server/cors.py):
# a change made through one gateway reaches the others within that second — the propagation delay
# S3 documents for bucket configuration. A client alternating between gateways waits it out.
PROPAGATING_CONFIGURATIONS = {
    "PutBucketPolicy",
    "DeleteBucketPolicy",
    "PutBucketAcl",
    "PutObjectAcl",
    "PutBucketCors",
    "DeleteBucketCors",
    "PutBucketOwnershipControls",
    "DeleteBucketOwnershipControls",
    "PutPublicAccessBlock",
    "DeletePublicAccessBlock",
}
CONFIGURATION_PROPAGATION_SECONDS = 1.1


def alternate_gateways(client: Any, endpoints: list[str]) -> Any:
    """Send each request of a boto3 client to the next of `endpoints` in turn (before it is signed,
    so that its signature covers the gateway it goes to): a load balancer's round robin."""
    turn = iter(range(1 << 62))

    def propagate(model: Any, **_: object) -> None:
        if model.name in PROPAGATING_CONFIGURATIONS:
            time.sleep(CONFIGURATION_PROPAGATION_SECONDS)

    client.meta.events.register("after-call.s3", propagate)

    def pick(request: Any, **_: object) -> None:
        url = request.url
        for endpoint in endpoints:
            if url.startswith(endpoint):
                request.url = endpoints[next(turn) % len(endpoints)] + url[len(endpoint) :]
                return

    client.meta.events.register("before-sign.s3", pick)
    return client


@pytest.fixture(scope="session")
def s3(session_gateways: list[ServerProcess]):
    client = make_client(session_gateways[0].endpoint)
    endpoints = [g.endpoint for g in session_gateways]
    return alternate_gateways(client, endpoints) if len(endpoints) > 1 else client


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
