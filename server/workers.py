"""`tierstore serve`: a supervisor and N worker processes on one listening socket.

N is one per usable core unless told otherwise (`--workers N`, `[server] workers`,
`TIERSTORE_SERVER_WORKERS`); `--workers 1` is a single process with no supervisor. Workers share
everything through the catalog (see the README's "Workers"): any worker may answer any request.

The supervisor binds the listening socket(s) once and every worker inherits them (`--listen-fds`):
all workers take connections from one kernel accept queue. A worker that stops accepting (rolling
restart, SIGTERM) therefore strands nothing — the connections queued there are taken by the
others. Separate SO_REUSEPORT sockets per worker would not do that: the kernel resets the
connections already queued on a socket when it closes (unless `net.ipv4.tcp_migrate_req=1`).

With `--reuse-port` the shared socket (or a single server's own socket) also carries SO_REUSEPORT,
so that a second, independent `tierstore serve --reuse-port` — a new version — can bind the same
port during an upgrade; the old one is then sent SIGTERM and drains.

Signals to the supervisor:
- SIGTERM / SIGINT: forward SIGTERM to every worker, wait until they have drained, exit 0.
- SIGHUP: rolling restart — for each worker: start a new one (new code and configuration are
  read from disk), wait until it accepts, SIGTERM the old one and wait for it to drain.
A worker that dies unexpectedly is replaced. Workers die with the supervisor: a supervisor killed
with SIGKILL (an operator's `kill -9`, a test's crash) takes its workers with it at once
(PR_SET_PDEATHSIG = SIGKILL), as if the server were one process; none is left serving.
Readiness: a worker writes one line to the pipe named by `--ready-fd` once it accepts requests.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from server import metrics_workers, runtime_dir
from server.logs import console

log = logging.getLogger("tierstore.workers")

BACKLOG = 2048
READY_TIMEOUT = 120.0  # a worker opens the catalog and scans its domains before it accepts
STOP_TIMEOUT = 75.0  # a worker's drain (30 s for requests in flight) plus closing the store
SUPERVISOR_ENV = "TIERSTORE_SUPERVISOR_PID"
PR_SET_PDEATHSIG = 1


def default_workers() -> int:
    """One worker per core this process may run on (its CPU affinity, as containers set it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS has no sched_getaffinity
        return max(1, os.cpu_count() or 1)


def bind_sockets(host: str, port: int, *, reuse_port: bool, listen: bool) -> list[socket.socket]:
    """Bound TCP sockets for HOST:PORT (one per address family the host resolves to).

    `listen=False` leaves them bound but not yet listening: the server listens only once it can
    serve, so that no connection waits on a process that is still starting.
    """
    if reuse_port and not hasattr(socket, "SO_REUSEPORT"):
        raise ValueError("--reuse-port needs SO_REUSEPORT, which this platform lacks")
    sockets: list[socket.socket] = []
    seen: set[tuple[int, object]] = set()
    try:
        for family, kind, proto, _, address in socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        ):
            if (family, address) in seen:
                continue
            seen.add((family, address))
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            if listen:
                sock.listen(BACKLOG)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def inherited_sockets(fds: str) -> list[socket.socket]:
    """The listening sockets a supervisor handed down (`--listen-fds 3,4`)."""
    return [socket.socket(fileno=int(fd)) for fd in fds.split(",") if fd]


def worker_setup() -> None:
    """In a worker: die with the supervisor, and leave SIGHUP to it."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            # PR_SET_PDEATHSIG: the supervisor's death is the server's crash. (A SIGTERM here would
            # leave orphans draining — serving queued requests, holding the port — for up to 30 s.)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    expected = os.environ.get(SUPERVISOR_ENV)
    if expected and os.getppid() != int(expected):
        raise SystemExit("tierstore: the supervisor is gone")


def signal_ready(fd: int | None) -> None:
    if fd is None:
        return
    with contextlib.suppress(OSError):
        os.write(fd, b"ready\n")
        os.close(fd)


@dataclass
class _Worker:
    proc: subprocess.Popen[bytes]
    ready_fd: int
    started: float = field(default_factory=time.monotonic)

    @property
    def pid(self) -> int:
        return self.proc.pid


class Supervisor:
    """Runs `count` workers of `command` on `sockets`; see the module docstring for signals."""

    def __init__(
        self,
        command: list[str],
        sockets: list[socket.socket],
        count: int,
        banner: str,
        metrics_dir: Path | None = None,
    ) -> None:
        self.command = command
        self.metrics_dir = metrics_dir  # the workers' shared metrics (server/metrics_workers.py)
        self.sockets = sockets
        self.count = count
        self.banner = banner
        self.workers: list[_Worker] = []
        self._signals: deque[int] = deque()
        self._quick_deaths = 0

    # --- signals ---------------------------------------------------------------------------------

    def _on_signal(self, sig: int, _frame: object) -> None:
        self._signals.append(sig)

    def _stop_requested(self) -> bool:
        return any(s in (signal.SIGTERM, signal.SIGINT) for s in self._signals)

    def _say(self, message: str) -> None:
        log.info("supervisor: %s", message)

    # --- workers ---------------------------------------------------------------------------------

    def _spawn(self) -> _Worker:
        read_fd, write_fd = os.pipe()
        fds = [s.fileno() for s in self.sockets]
        command = [*self.command, "--listen-fds", ",".join(map(str, fds)), "--ready-fd", str(write_fd)]
        env = {**os.environ, SUPERVISOR_ENV: str(os.getpid())}
        if self.metrics_dir is not None:
            env[metrics_workers.MULTIPROC_ENV] = str(self.metrics_dir)
        try:
            proc = subprocess.Popen(command, pass_fds=[*fds, write_fd], env=env)
        finally:
            os.close(write_fd)
        return _Worker(proc, read_fd)

    def _wait_ready(self, worker: _Worker, timeout: float = READY_TIMEOUT) -> bool:
        """True once the worker accepts; False if it died, timed out, or a stop was requested."""
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline and not self._stop_requested():
                readable, _, _ = select.select([worker.ready_fd], [], [], 0.1)
                if readable:
                    return os.read(worker.ready_fd, 64).startswith(b"ready")  # b"": it died
            return False
        finally:
            os.close(worker.ready_fd)
            worker.ready_fd = -1

    def _terminate(self, worker: _Worker, *, wait: bool, signal_it: bool = True) -> int | None:
        # One SIGTERM only: a second one could land after the worker's drain, when its handler
        # is gone, and turn a clean exit into "killed by SIGTERM".
        if signal_it and worker.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                worker.proc.send_signal(signal.SIGTERM)
        if not wait:
            return None
        deadline = time.monotonic() + STOP_TIMEOUT
        while worker.proc.poll() is None:
            if time.monotonic() > deadline:
                self._say(f"worker {worker.pid} did not drain in {STOP_TIMEOUT:.0f}s: killing it")
                worker.proc.kill()
                return worker.proc.wait()
            time.sleep(0.05)
        return worker.proc.returncode

    def _start_one(self) -> _Worker | None:
        worker = self._spawn()
        if self._wait_ready(worker):
            return worker
        self._terminate(worker, wait=True)
        return None

    def _roll(self) -> None:
        """Replace every worker, one at a time, never dropping below `count` accepting workers."""
        self._say(f"rolling restart of {len(self.workers)} worker(s)")
        for old in list(self.workers):
            if self._stop_requested():
                return
            if old.proc.poll() is not None:
                continue  # died meanwhile: _replace_dead starts its successor
            new = self._start_one()
            if new is None:
                self._say("a new worker failed to start: rolling restart abandoned, old workers kept")
                return
            self.workers.append(new)
            self._say(f"worker {new.pid} accepting; draining worker {old.pid}")
            self.workers.remove(old)
            code = self._terminate(old, wait=True)
            self._gone(old)
            self._say(f"worker {old.pid} exited ({code})")
        self._say("rolling restart done")

    def _gone(self, worker: _Worker) -> None:
        if self.metrics_dir is not None:
            metrics_workers.mark_dead(worker.pid, self.metrics_dir)

    def _replace_dead(self) -> None:
        for worker in list(self.workers):
            code = worker.proc.poll()
            if code is None:
                continue
            self.workers.remove(worker)
            self._gone(worker)
            lived = time.monotonic() - worker.started
            self._say(f"worker {worker.pid} exited unexpectedly ({code}) after {lived:.1f}s: replacing it")
            self._quick_deaths = self._quick_deaths + 1 if lived < 10 else 0
            if self._quick_deaths:
                time.sleep(min(10.0, 0.5 * 2 ** min(self._quick_deaths, 5)))  # crash loop: back off
            if self._stop_requested():
                return
            new = self._start_one()
            if new is not None:
                self.workers.append(new)

    def _stop_all(self) -> int:
        self._say(f"stopping {len(self.workers)} worker(s)")
        for worker in self.workers:
            self._terminate(worker, wait=False)
        # The workers hold the sockets too; each drains its accept queue before closing it.
        for sock in self.sockets:
            sock.close()
        codes = [self._terminate(worker, wait=True, signal_it=False) for worker in self.workers]
        self._say(f"workers exited: {codes}")
        return 0 if all(code == 0 for code in codes) else 1

    # --- main loop -------------------------------------------------------------------------------

    def run(self) -> int:
        try:
            return self._run()
        except BaseException:
            # A supervisor bug must not leave workers behind: drain them, then fail.
            log.exception("supervisor failed: stopping the workers")
            self._stop_all()
            raise
        finally:
            if self.metrics_dir is not None:
                shutil.rmtree(self.metrics_dir, ignore_errors=True)
                runtime_dir.remove_if_unused(self.metrics_dir.parent.parent)

    def _run(self) -> int:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, self._on_signal)
        spawned = [self._spawn() for _ in range(self.count)]
        ready = [w for w in spawned if self._wait_ready(w)]
        self.workers = spawned
        if len(ready) != self.count:
            self._say("workers failed to start")
            self._stop_all()
            return 1
        for line in self.banner.splitlines():  # scripts and tests wait for "tierstore: listening on"
            console.info("%s", line)
        self._say(f"{self.count} worker(s): {[w.pid for w in self.workers]} (SIGHUP: rolling restart)")
        while True:
            while self._signals:
                sig = self._signals.popleft()
                if sig in (signal.SIGTERM, signal.SIGINT):
                    return self._stop_all()
                if sig == signal.SIGHUP:
                    self._roll()
            self._replace_dead()
            time.sleep(0.05)
