"""`tierstore lifecycle`: the daemon in its own process beside `tierstore serve --no-lifecycle`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import ACCESS_KEY, SECRET_KEY, catalog_env, catalog_query
from tests.lifecycle.conftest import Tiered
from tests.support import admin, wait_for


class Daemon:
    def __init__(self, data: Path, log: Path) -> None:
        self.log_path = log
        env = {
            **os.environ,
            "TIERSTORE_ACCESS_KEY": ACCESS_KEY,
            "TIERSTORE_SECRET_KEY": SECRET_KEY,
            "PYTHONUNBUFFERED": "1",
            "TIERSTORE_LIFECYCLE_INTERVAL_SECONDS": "1",
            **catalog_env(data),
        }
        self._log = open(log, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "server.cli", "lifecycle", "--data", str(data), "--test-clock"],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        deadline = time.monotonic() + 30
        while "lifecycle daemon running" not in self.log():
            assert self.proc.poll() is None, self.log()
            assert time.monotonic() < deadline, self.log()
            time.sleep(0.05)

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self, timeout: float = 20) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise
        self._log.close()
        return self.proc.returncode


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Callable[[Path], Daemon]]:
    started: list[Daemon] = []

    def start(data: Path) -> Daemon:
        daemon = Daemon(data, tmp_path / f"daemon-{len(started)}.log")
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        if daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.wait()


# Lease holders name the pid of the process holding them: the server is one process here.
ONE_PROCESS = ["--workers", "1"]


def lease_holders(data: Path) -> list[tuple[str, float]]:
    return catalog_query(data, "SELECT holder, expires FROM leases WHERE name = 'lifecycle-daemon'")


def admin_subprocess(ts: Tiered, *args: str) -> dict:
    """The admin CLI as a user runs it: its own process."""
    return admin(ts.endpoint, *args, timeout=120)


def test_separate_daemon_moves_objects_holds_the_lease_and_stops_cleanly(
    spawn, daemons, tmp_path: Path
) -> None:
    data = tmp_path / "shared-data"
    ts = spawn(extra_args=["--no-lifecycle", *ONE_PROCESS], data=data)
    ts.s3.create_bucket(Bucket="proc")
    ts.s3.put_object(Bucket="proc", Key="a", Body=b"a" * 5000)

    first = daemons(data)
    wait_for(lambda: len(lease_holders(data)) == 1, 60, "one lease holder")
    time.sleep(2)  # a few passes: nothing is due yet
    assert ts.tier("proc", "a") == "hot"

    # The server advances the clock; the daemon process sees it through the catalog.
    assert admin_subprocess(ts, "clock", "advance", "31")["offset_seconds"] == 31 * 86400
    wait_for(lambda: ts.tier("proc", "a") == "warm", 60, "a to move to warm")
    assert ts.obj("proc", "a")["moves"][0]["reason"] == "temperature"
    assert ts.admin("lifecycle", "status")["passes"] == 0, "the server itself ran no pass"

    second = daemons(data)
    # The second daemon tries every second and is turned away (waiting on its log, not a fixed
    # sleep: on a loaded box its first pass may take a while to come).
    wait_for(
        lambda: "another lifecycle daemon holds the lease" in second.log(), 60, "the second daemon's refusal"
    )
    holders = lease_holders(data)
    assert len(holders) == 1 and holders[0][0].split(":")[1] == str(first.proc.pid), holders

    assert first.stop() == 0
    assert "Traceback" not in first.log()
    # The lease was released on the way out: the second daemon takes over at its next pass.
    wait_for(
        lambda: [h.split(":")[1] for h, _ in lease_holders(data)] == [str(second.proc.pid)],
        30,
        "the second daemon to take the lease",
    )
    ts.s3.put_object(Bucket="proc", Key="b", Body=b"b" * 5000)
    ts.advance(31)
    wait_for(lambda: ts.tier("proc", "b") == "warm", 60, "b to move to warm")
    assert ts.get("proc", "a") == b"a" * 5000 and ts.get("proc", "b") == b"b" * 5000

    assert second.stop() == 0  # exited by itself on SIGTERM (stop() kills after 30 s: -9)
    assert lease_holders(data) == []
    assert "Traceback" not in second.log()


def admin_exit(ts: Tiered, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TIERSTORE_ACCESS_KEY": ACCESS_KEY, "TIERSTORE_SECRET_KEY": SECRET_KEY}
    return subprocess.run(
        [sys.executable, "-m", "server.cli", "admin", "--endpoint", ts.endpoint, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_a_server_killed_with_sigkill_takes_its_lease_back_when_it_restarts(spawn, tmp_path: Path) -> None:
    """The killed server's lease (ttl 3 × the interval: hours here) must not stall the next one."""
    data = tmp_path / "killed"
    ts = spawn(extra_args=ONE_PROCESS, data=data)
    ts.s3.create_bucket(Bucket="killed")
    ts.s3.put_object(Bucket="killed", Key="a", Body=b"a" * 5000)
    assert admin_subprocess(ts, "lifecycle", "run", "--wait")["passes"] == 1
    ((holder, expires),) = lease_holders(data)
    assert expires > time.time() + 3600, "the dead server's lease would outlive the test"

    ts.server.kill()  # SIGKILL: the lease is not released
    assert lease_holders(data) == [(holder, expires)]
    ts.server.start()
    ts.advance(31)
    result = admin_subprocess(ts, "lifecycle", "run", "--wait")  # check=True: exit 0
    assert result["passes"] >= 1 and result["pass"]["scanned"] == 1, result
    assert ts.tier("killed", "a") == "warm"
    ((new_holder, _),) = lease_holders(data)
    assert new_holder != holder and new_holder.split(":")[1] == str(ts.server.proc.pid)


def test_run_wait_names_the_live_holder_of_the_lease(spawn, daemons, tmp_path: Path) -> None:
    data = tmp_path / "held"
    ts = spawn(extra_args=["--no-lifecycle", *ONE_PROCESS], data=data)
    other = daemons(data)  # a live `tierstore lifecycle` on the same data directory takes the lease
    wait_for(lambda: len(lease_holders(data)) == 1, 60, "the daemon to take the lease")
    ((holder, expires),) = lease_holders(data)
    done = admin_exit(ts, "lifecycle", "run", "--wait")
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert f"pid {other.proc.pid}" in done.stderr and holder in done.stderr, done.stderr
    assert "until 20" in done.stderr and "UTC" in done.stderr, done.stderr
    assert [h for h, _ in lease_holders(data)] == [holder], "a live holder keeps its lease"
    assert other.stop() == 0
    # Released on the way out: the server's pass runs now.
    assert admin_subprocess(ts, "lifecycle", "run", "--wait")["passes"] == 1
