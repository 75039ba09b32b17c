"""Fixtures for fault tests: dedicated servers that a test may kill, restart and inspect."""

from __future__ import annotations

import hashlib
import http.client
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import postgres
from tests.clients.wire import sign_v4
from tests.conftest import ServerProcess, free_port

MiB = 1024 * 1024


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """Start a server on `data` (default: this test's own directory); all are stopped at the end."""
    started: list[ServerProcess] = []

    def start(data: Path | None = None, **kwargs: object) -> ServerProcess:
        proc = ServerProcess(data or tmp_path / "data", free_port(), **kwargs)  # type: ignore[arg-type]
        started.append(proc)
        return proc.start()

    yield start
    for proc in started:
        proc.kill()


def pattern(seed: int, size: int, piece: int = MiB) -> Iterator[bytes]:
    """`size` deterministic bytes in pieces, never held whole: cheap to regenerate and check."""
    block = hashlib.sha256(str(seed).encode()).digest() * (piece // 32)
    sent = 0
    while sent < size:
        n = min(piece, size - sent)
        yield block[:n]
        sent += n


def pattern_md5(seed: int, size: int) -> str:
    digest = hashlib.md5()
    for piece in pattern(seed, size):
        digest.update(piece)
    return digest.hexdigest()


def data_bytes(data_dir: Path) -> int:
    """Bytes held by the tier backends (everything under data/ but the catalog)."""
    total = 0
    for path in data_dir.rglob("*"):
        if path.is_file() and "catalog" not in path.relative_to(data_dir).parts[:1]:
            total += path.stat().st_size
    return total


class StreamingPut(threading.Thread):
    """PUT `size` bytes (UNSIGNED-PAYLOAD, SigV4) in pieces from a thread; records how far it got."""

    def __init__(
        self, server: ServerProcess, path: str, seed: int, size: int, *, pause_at: int | None = None
    ) -> None:
        super().__init__(daemon=True)
        self.server, self.path, self.seed, self.size = server, path, seed, size
        self.pause_at = pause_at  # stop sending there until `resume` is set
        self.paused = threading.Event()
        self.resume = threading.Event()
        self.sent = 0
        self.md5 = hashlib.md5()
        self.status: int | None = None
        self.reply = b""
        self.error: BaseException | None = None

    def run(self) -> None:
        url = f"{self.server.endpoint}{self.path}"
        headers = sign_v4("PUT", url, {"Content-Length": str(self.size)}, "UNSIGNED-PAYLOAD").headers
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=120)
        try:
            conn.putrequest("PUT", self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in headers.items():
                conn.putheader(name, value)
            conn.endheaders()
            for piece in pattern(self.seed, self.size):
                if self.pause_at is not None and self.sent >= self.pause_at and not self.resume.is_set():
                    self.paused.set()
                    self.resume.wait(120)
                conn.send(piece)
                self.md5.update(piece)
                self.sent += len(piece)
            response = conn.getresponse()
            self.status, self.reply = response.status, response.read()
        except BaseException as exc:  # the server may be killed under us: that is the test
            self.error = exc
        finally:
            conn.close()


class Gateways:
    """Gateways on one fresh database (`url`) and one data directory: `gateways(N)` starts N more."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.url = postgres.session_server().create_database("gateways")
        self.started: list[ServerProcess] = []

    def __call__(self, count: int, env: dict[str, str] | None = None) -> list[ServerProcess]:
        procs = [
            ServerProcess(
                self.data,
                free_port(),
                # One process per gateway: lease holders are matched to the gateway's pid.
                extra_args=["--catalog", self.url, "--test-clock", "--workers", "1"],
                env={"TIERSTORE_LIFECYCLE_INTERVAL_SECONDS": "1", **(env or {})},
            )
            for _ in range(count)
        ]
        for proc in procs:
            self.started.append(proc.start())
        return procs

    def sql(self, statement: str) -> list[Any]:
        return postgres.session_server().sql(self.url, statement)


@pytest.fixture
def gateways(tmp_path: Path) -> Iterator[Gateways]:
    """Start N gateways on one fresh database and one data directory; stopped at the end."""
    spawn = Gateways(tmp_path / "data")
    yield spawn
    for proc in spawn.started:
        proc.stop()
