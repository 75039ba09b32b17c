"""Storage nodes for test servers: `pytest --cluster` puts every server's erasure-coded tiers on
6 `tierstore node` processes over 3 racks, started beside it and registered in its catalog.

A server's nodes are keyed by its data directory, so that every server a test starts on the same
data (a restart, a second gateway) shares them; they stop when the last server on that data
stops, and start again (on the same node directories, shards kept) when a server starts there
again. Each node runs the real CLI, `python -m server.cli node`, as an operator runs it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

CLUSTER_ENV = "TIERSTORE_TEST_CLUSTER"  # "1": servers the tests start run over storage nodes
SECRET = "loopback-cluster-secret"
NODES = 6
START_TIMEOUT = 60.0


def cluster_mode() -> bool:
    return os.environ.get(CLUSTER_ENV) == "1"


@dataclass
class Node:
    """One `tierstore node` process. `catalog` is the gateways' SQLite file or a database URL."""

    name: str
    rack: str
    port: int
    data: Path
    catalog: Path | str
    proc: subprocess.Popen[str] | None = None
    log_path: Path | None = None
    host: str = "127.0.0.1"
    netns: str | None = None  # run inside this network namespace (the partition test)
    extra_args: list[str] = field(default_factory=list)  # more `tierstore node` flags (--tls-cert ...)
    _seen: int = 0

    @property
    def address(self) -> str:
        scheme = "https" if "--tls-cert" in self.extra_args else "http"
        return f"{scheme}://{self.host}:{self.port}"

    def launch(self) -> None:
        """Start the process; `wait_listening` waits for it (start several, then wait for all)."""
        self.log_path = self.data.parent / f"{self.name}.log"
        self.data.parent.mkdir(parents=True, exist_ok=True)
        self._seen = self.log_path.stat().st_size if self.log_path.exists() else 0  # a restart appends
        log = open(self.log_path, "a")  # noqa: SIM115 - the process holds it
        inside = ["ip", "netns", "exec", self.netns] if self.netns else []
        where = (
            ["--data-catalog", str(self.catalog)]
            if isinstance(self.catalog, Path)
            else ["--catalog", self.catalog]
        )
        self.proc = subprocess.Popen(
            [
                *inside,
                sys.executable,
                "-m",
                "server.cli",
                "node",
                *where,
                "--listen",
                f"{self.host}:{self.port}",
                "--data",
                str(self.data),
                "--name",
                self.name,
                "--rack",
                self.rack,
                "--drives",
                "3",
                *self.extra_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "TIERSTORE_CLUSTER_SECRET": SECRET, "PYTHONUNBUFFERED": "1"},
        )

    def wait_listening(self) -> Node:
        assert self.proc is not None and self.log_path is not None
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log_path.read_text()
            if "listening on" in self.log_path.read_text()[self._seen :]:
                return self
            time.sleep(0.05)
        raise RuntimeError(f"node {self.name} did not start")

    def start(self) -> Node:
        self.launch()
        return self.wait_listening()

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        if sig == signal.SIGKILL:
            self.proc.wait(10)

    def terminate(self, timeout: float = 30.0) -> int | None:
        """SIGTERM, as a service manager stops it; its exit code."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)


def make_nodes(root: Path, catalog: Path | str, count: int = NODES) -> list[Node]:
    """`count` nodes n1..nN over 3 racks, each with its directory under `root`."""
    from tests.conftest import free_port

    return [
        Node(f"n{i}", f"rack{i % 3 + 1}", free_port(), root / f"n{i}", catalog) for i in range(1, count + 1)
    ]


def start_all(nodes: list[Node]) -> None:
    for node in nodes:
        node.launch()
    for node in nodes:
        _listening_or_moved(node)


def _listening_or_moved(node: Node, tries: int = 3) -> None:
    """Wait for a node's first start; if its port was taken meanwhile, start it on another.

    `free_port()` hands its port back to the kernel, which may give it to any outgoing connection
    (ephemeral ports come from the same range) before the node binds it: "Address already in use"
    (seen once in CI's cluster pass). A node registers the address it listens on as it starts, so
    another port is as good. Only `start_all` moves a node; `Node.start` (a test's restart of one
    node) keeps its address."""
    from tests.conftest import free_port

    for attempt in range(tries):
        try:
            node.wait_listening()
            return
        except AssertionError as exc:
            if "Address already in use" not in str(exc) or attempt == tries - 1:
                raise
        node.port = free_port()
        node.launch()


@dataclass
class ServerNodes:
    """The nodes under the servers on one data directory, and which of those servers run."""

    nodes: list[Node]
    users: set[int] = field(default_factory=set)  # id() of each running ServerProcess


_by_data: dict[Path, ServerNodes] = {}


def attach(data_dir: Path, catalog: Path | str, user: object) -> None:
    """A server on `data_dir` starts: make sure its nodes run (started on first use)."""
    key = data_dir.resolve()
    held = _by_data.get(key)
    if held is None:
        held = _by_data[key] = ServerNodes(make_nodes(data_dir.parent / f"{data_dir.name}-nodes", catalog))
    if not any(n.proc is not None and n.proc.poll() is None for n in held.nodes):
        start_all(held.nodes)
    held.users.add(id(user))


def detach(data_dir: Path, user: object) -> None:
    """A server on `data_dir` stopped: stop its nodes when no other server on it runs."""
    held = _by_data.get(data_dir.resolve())
    if held is None:
        return
    held.users.discard(id(user))
    if not held.users:
        for node in held.nodes:
            node.stop()


def node_dirs(data_dir: Path) -> list[Path]:
    """The data directories of the nodes under the servers on `data_dir` (none without --cluster)."""
    held = _by_data.get(data_dir.resolve())
    return [node.data for node in held.nodes] if held else []


def stop_everything() -> None:
    """End of the session: no node outlives it."""
    for held in _by_data.values():
        for node in held.nodes:
            node.stop()
    _by_data.clear()
