"""Start and stop the S3 servers that `s3bench.py` measures, each on a free 127.0.0.1 port.

Every server is a child process in its own session (so a Ctrl-C in the terminal reaches only the
benchmark, which then stops them in order), with its data and log in a temp dir that `stop()`
removes. Nothing here reads or writes outside that temp dir.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # bench scripts put only bench/ on the path
    sys.path.insert(0, str(REPO))

from tests import ports  # noqa: E402 - the tests' ports: off the ephemeral range (tests/ports.py)

START_TIMEOUT = 60.0
STOP_TIMEOUT = 20.0
# The peer scripts in shared/peers accept only this range; moto is started in it for the same reason.
PEER_PORTS = range(9100, 9200)


port_is_free = ports.is_free


def free_port(candidates: range | None = None) -> int:
    """A port nobody listens on: the first free one in `candidates`, else one from below the
    kernel's ephemeral range, where no outgoing connection takes it before the server binds it."""
    if candidates is not None:
        for port in candidates:
            if port_is_free(port):
                return port
        raise RuntimeError(f"no free port in {candidates.start}-{candidates.stop - 1}")
    return ports.free_port()


@dataclass
class Server:
    """One benchmark target: how to start it, its endpoint and credentials once started."""

    name: str
    access_key: str
    secret_key: str
    port: int = 0
    tmp: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    info: dict[str, str] = field(default_factory=dict)
    start_s: float = 0.0
    cwd: Path | None = None  # the source tree to run from (default: this checkout)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "started"
        return self.proc.pid

    @property
    def log_path(self) -> Path:
        assert self.tmp is not None
        return self.tmp / f"{self.name}.log"

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    # Subclasses fill these in.
    def command(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        return {}

    def ready(self) -> bool:
        raise NotImplementedError

    def pick_port(self) -> int:
        return free_port()

    def start(self) -> Self:
        self.tmp = Path(tempfile.mkdtemp(prefix=f"s3bench-{self.name}-"))
        self.port = self.pick_port()
        t0 = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.command(),
                cwd=self.cwd or REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.environment()},
                start_new_session=True,
            )
        deadline = t0 + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited early (rc {self.proc.returncode}):\n{self.log_tail()}"
                )
            if self.ready():
                self.start_s = time.monotonic() - t0
                return self
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} did not answer within {START_TIMEOUT:.0f}s:\n{self.log_tail()}")

    def stop(self) -> None:
        """TERM, then KILL after STOP_TIMEOUT; then remove the temp dir. Safe to call twice.

        Sets info["stop_s"] / info["rmtree_s"]: removing a tierstore data dir with tens of thousands
        of shard files can take a minute or more on a busy disk."""
        t0 = time.monotonic()
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        t1 = time.monotonic()
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None
        self.info["stop_s"] = f"{t1 - t0:.1f}"
        self.info["rmtree_s"] = f"{time.monotonic() - t1:.1f}"


def cpu_seconds(pid: int) -> float:
    """CPU time of a process and its live descendants (the workers of `serve --workers N`)."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        child = int(stat.parent.name)
        parents[child] = int(fields[1])
        times[child] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += times.get(p, 0.0)
        todo += [c for c, parent in parents.items() if parent == p]
    return total


class Tierstore(Server):
    """`python -m server.cli serve` from this checkout, default configuration, a fresh data dir."""

    def __init__(self, workers: int = 1) -> None:
        super().__init__(
            "tierstore" if workers == 1 else f"tierstore-w{workers}",
            "bench-access-key",
            "bench-secret-key-0123456789",
        )
        self.workers = workers

    @property
    def data_dir(self) -> Path:
        assert self.tmp is not None, "started"
        return self.tmp / "data"

    def command(self) -> list[str]:
        # Always explicit: `tierstore serve` alone runs one worker per core.
        extra = ["--workers", str(self.workers)]
        return [
            sys.executable,
            "-m",
            "server.cli",
            "serve",
            "--data",
            str(self.data_dir),
            "--listen",
            f"127.0.0.1:{self.port}",
            *extra,
        ]

    def environment(self) -> dict[str, str]:
        return {"TIERSTORE_ACCESS_KEY": self.access_key, "TIERSTORE_SECRET_KEY": self.secret_key}

    def ready(self) -> bool:
        text = self.log_path.read_text(errors="replace")
        if "tierstore: listening on" not in text:
            return False
        for line in text.splitlines():
            if "tierstore: tiers:" in line:  # after the log line's time and level
                self.info["tiers"] = line.split("tierstore: tiers:", 1)[1].strip()
        self.info["config"] = "default (catalog durable=true: fsync per commit)"
        return True


class Moto(Server):
    """moto's server mode (`python -m moto.server`): in-memory, signatures not checked."""

    def __init__(self) -> None:
        super().__init__("moto", "testing", "testing")

    def pick_port(self) -> int:
        return free_port(PEER_PORTS)

    def command(self) -> list[str]:
        return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=2) as resp:
                resp.read()
        except urllib.error.HTTPError:
            pass  # any HTTP answer means it is serving
        except OSError:
            return False
        import moto

        self.info["version"] = moto.__version__
        return True


TARGETS: dict[str, Callable[[], Server]] = {"tierstore": Tierstore, "moto": Moto}
