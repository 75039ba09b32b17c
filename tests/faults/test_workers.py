"""Several processes on one data directory: `tierstore serve --workers N`, and what they share.

In-process checks first (two stores on one catalog and one set of domains, as two workers have):
temporary files and orphans of a live process are never swept, a dead one's are; domain states
and the test clock reach every process. Then real supervisors: 4 workers under a concurrent PUT
load (no error, no "database is locked"), SIGTERM draining a request in flight, a killed worker
replaced.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from erasure import ErasurePool
from erasure.shard_store import TMP_DIR
from server.app import build_store
from server.config import load_config
from tests.conftest import ServerProcess, make_client
from tests.faults.conftest import MiB, StreamingPut
from tests.support import wait_for
from tiering import domains
from tiering.clock import Clock
from tiering.peers import ProcessRegistry
from tiering.store import ObjectStore

Spawn = Callable[..., ServerProcess]


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# --- in-process: what several processes share -------------------------------------------------


def _store(data: Path) -> ObjectStore:
    config = load_config(None, data_dir=data, test_clock=True)
    return build_store(config)


def _hot_pool(store: ObjectStore) -> ErasurePool:
    pool = store.tiers["hot"].backend.erasure_pool()
    assert pool is not None, "the default hot tier is erasure-coded"
    return pool


def test_temp_files_of_live_writers_survive_a_start(tmp_path: Path) -> None:
    store = _store(tmp_path / "data")
    pool = _hot_pool(store)
    tmp = next(iter(pool.topology)).path / TMP_DIR
    tmp.mkdir(parents=True, exist_ok=True)
    live = tmp / f"abc.0.0123456789ab.p{os.getppid()}.tmp"  # pytest's parent: alive
    dead = tmp / f"abd.0.0123456789ab.p{dead_pid()}.tmp"
    legacy = tmp / "abe.0.0123456789ab.tmp"  # an older version's name: age decides
    for path in (live, dead, legacy):
        path.write_bytes(b"x")

    async def run() -> None:
        await store.start()
        await store.close()

    asyncio.run(run())
    assert live.exists() and legacy.exists()
    assert not dead.exists()


def test_dead_process_checkpoint_is_swept_only_when_no_peer_overlaps(tmp_path: Path) -> None:
    data = tmp_path / "data"
    store = _store(data)
    state = data / "catalog"
    now = time.time()
    gone = dead_pid()
    (state / f"checkpoint.{gone}").write_text(f"running {now - 5} {now - 100}")
    # A live peer that started before the dead one's last heartbeat: its blobs of that time may
    # still be in flight, so the dead one's orphan sweep must wait (an hour), not run now.
    (state / f"checkpoint.{os.getppid()}").write_text(f"running {now} {now - 50}")
    swept: list[tuple[float, float]] = []

    async def fake_sweep(since: float, until: float) -> None:
        swept.append((since, until))

    store._sweep_orphans = fake_sweep  # type: ignore[method-assign]

    async def run() -> None:
        await store.start()
        await asyncio.sleep(0.2)
        assert [p.pid for p in store.live_peers] == [os.getppid()]
        assert swept == []  # deferred
        assert (state / f"checkpoint.{gone}").exists()
        assert (state / f"checkpoint.{os.getpid()}").exists()
        await store.close()

    asyncio.run(run())
    assert not (state / f"checkpoint.{os.getpid()}").exists()  # an orderly close
    (state / f"checkpoint.{os.getppid()}").unlink()  # no peer now: the sweep runs at once
    store = _store(data)
    store._sweep_orphans = fake_sweep  # type: ignore[method-assign]

    async def again() -> None:
        await store.start()
        await asyncio.sleep(0.2)
        await store.close()

    asyncio.run(again())
    assert len(swept) == 1 and swept[0][0] < now - 5 < swept[0][1]
    assert not (state / f"checkpoint.{gone}").exists()


def test_domain_state_and_clock_reach_the_other_process(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first, second = _store(data), _store(data)

    async def run() -> None:
        await first.start()
        await second.start()
        try:
            changed = domains.set_domain_state(first, "hot-n1", online=False)
            assert changed
            pool = _hot_pool(second)
            deadline = time.monotonic() + 3
            while any(pool.topology[d].online for d in changed):
                assert time.monotonic() < deadline, "the other process never saw the domains go offline"
                await asyncio.sleep(0.05)
            domains.set_domain_state(first, "hot-n1", online=True)
            deadline = time.monotonic() + 3
            while not all(pool.topology[d].online for d in changed):
                assert time.monotonic() < deadline, "the other process never saw the domains return"
                await asyncio.sleep(0.05)
            # The test clock: advanced in one process, seen by the other within a second.
            assert isinstance(first.clock, Clock) and isinstance(second.clock, Clock)
            before = second.clock()
            first.clock.advance(86400)
            await asyncio.sleep(1.1)
            assert second.clock() - before > 86000
        finally:
            await second.close()
            await first.close()

    asyncio.run(run())
    # A later start with no other process alive finds every domain online again.
    third = _store(data)

    async def fresh() -> None:
        await third.start()
        try:
            pool = _hot_pool(third)
            assert all(d.online for d in pool.topology)
        finally:
            await third.close()

    asyncio.run(fresh())


def test_registry_ignores_its_own_stale_file(tmp_path: Path) -> None:
    registry = ProcessRegistry(tmp_path)
    (tmp_path / f"checkpoint.{os.getpid()}").write_text("running 1.0 0.5")  # an earlier incarnation
    found = registry.scan()
    assert [(c.pid, c.alive(time.time())) for c in found] == [(os.getpid(), False)]
    registry.heartbeat()
    assert registry.scan() == []


# --- real supervisors ---------------------------------------------------------------------------


def worker_pids(server: ServerProcess) -> list[int]:
    assert server.proc is not None
    out = subprocess.run(["pgrep", "-P", str(server.proc.pid)], capture_output=True, text=True).stdout
    return sorted(int(p) for p in out.split())


def test_four_workers_under_concurrent_puts(spawn: Spawn) -> None:
    server = spawn(extra_args=["--workers", "4"])
    assert len(worker_pids(server)) == 4
    setup = make_client(server.endpoint)
    setup.create_bucket(Bucket="load")
    errors: list[str] = []
    acked: dict[str, str] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def writer(n: int) -> None:
        # A new client (connection) every few requests, so the load spreads over the workers.
        count = 0
        while not stop.is_set():
            s3 = make_client(server.endpoint)
            for _ in range(10):
                key = f"w{n}/{count:05d}"
                body = os.urandom(256 + count % 4096)
                try:
                    etag = s3.put_object(Bucket="load", Key=key, Body=body)["ETag"].strip('"')
                except Exception as exc:  # noqa: BLE001 - any failure is the finding
                    with lock:
                        errors.append(f"PUT {key}: {exc!r}")
                    continue
                assert etag == hashlib.md5(body).hexdigest()
                with lock:
                    acked[key] = etag
                count += 1

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    time.sleep(8)
    stop.set()
    for thread in threads:
        thread.join(30)
    assert not errors, errors[:5]
    assert len(acked) > 200, f"only {len(acked)} PUTs in 8 s"
    listed = {
        o["Key"]: o["ETag"].strip('"')
        for page in setup.get_paginator("list_objects_v2").paginate(Bucket="load")
        for o in page.get("Contents", [])
    }
    assert listed == acked
    log = server.log()
    assert "database is locked" not in log
    assert "Traceback" not in log, log[-3000:]
    assert server.stop() == 0
    assert "workers exited: [0, 0, 0, 0]" in server.log()


def test_sigterm_to_the_supervisor_drains_an_upload(spawn: Spawn) -> None:
    server = spawn(extra_args=["--workers", "2"])
    s3 = make_client(server.endpoint)
    s3.create_bucket(Bucket="drain")
    upload = StreamingPut(server, "/drain/obj", seed=5, size=24 * MiB, pause_at=8 * MiB)
    upload.start()
    assert upload.paused.wait(30), "the upload never got going"
    assert server.proc is not None
    server.proc.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    assert server.proc.poll() is None, "the supervisor exited with a request in flight"
    upload.resume.set()
    upload.join(60)
    assert upload.error is None and upload.status == 200, (upload.error, upload.reply)
    assert server.proc.wait(60) == 0, server.log()
    restarted = spawn(server.data_dir)
    assert make_client(restarted.endpoint).head_object(Bucket="drain", Key="obj")["ETag"] == (
        f'"{upload.md5.hexdigest()}"'
    )


def test_a_killed_worker_is_replaced(spawn: Spawn) -> None:
    server = spawn(extra_args=["--workers", "2"])
    s3 = make_client(server.endpoint)
    s3.create_bucket(Bucket="kill")
    s3.put_object(Bucket="kill", Key="before", Body=b"x")
    victim = worker_pids(server)[0]
    os.kill(victim, signal.SIGKILL)
    wait_for(
        lambda: len(worker_pids(server)) == 2 and victim not in worker_pids(server),
        60,
        "a replacement worker",
    )
    wait_for(lambda: server.log().count("accepting on") >= 3, 60, "the replacement to accept")
    for n in range(20):  # whichever worker answers
        s3 = make_client(server.endpoint)
        s3.put_object(Bucket="kill", Key=f"after{n}", Body=b"y")
        assert s3.get_object(Bucket="kill", Key="before")["Body"].read() == b"x"
    # The survivor lives on: the dead worker's checkpoint waits for its (deferred) orphan sweep.
    assert (server.data_dir / "catalog" / f"checkpoint.{victim}").exists()
    assert server.stop() == 0
