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
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from erasure import ErasurePool
from erasure.shard_store import TMP_DIR
from server import runtime_dir
from server.app import build_store
from server.config import load_config
from tests.conftest import ACCESS_KEY, SECRET_KEY, ServerProcess, make_client
from tests.faults.conftest import MiB, StreamingPut
from tests.shards import count_shards
from tests.support import admin, wait_for
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

    async def fake_sweep(since: float, until: float, owner: str | None = None) -> None:
        assert owner is None  # a checkpoint file: an earlier version's process, untagged blobs
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


# --- the default: every core ---------------------------------------------------------------------


@pytest.mark.parametrize("how", ["--workers 0", "TIERSTORE_SERVER_WORKERS=0"])
def test_workers_0_is_one_worker_per_usable_core(spawn: Spawn, how: str) -> None:
    # 0 is also the default (tests/ops/test_console_log.py starts a server with no settings at all).
    if how == "--workers 0":
        server = spawn(extra_args=["--workers", "0"])
    else:
        server = spawn(env={"TIERSTORE_SERVER_WORKERS": "0"})
    cores = len(os.sched_getaffinity(0))
    assert len(server.worker_pids()) == (cores if cores > 1 else 0)
    expected = f"workers: {cores} worker processes" if cores > 1 else "workers: 1 process"
    assert expected in server.log()


def test_workers_1_is_a_single_process(spawn: Spawn) -> None:
    server = spawn(extra_args=["--workers", "1"])
    assert server.worker_pids() == []
    assert "workers: 1 process" in server.log()
    make_client(server.endpoint).create_bucket(Bucket="single")


def test_kill9_of_the_supervisor_leaves_no_worker_serving(spawn: Spawn) -> None:
    """`kill -9` of the server's pid is a crash of the whole server, as for one process: the
    upload in flight is cut off (not finished by an orphaned, draining worker) and no worker
    lives on holding the port."""
    server = spawn(extra_args=["--workers", "2"])
    workers = server.worker_pids()
    assert len(workers) == 2
    make_client(server.endpoint).create_bucket(Bucket="crash")
    upload = StreamingPut(server, "/crash/obj", seed=9, size=8 * MiB, pause_at=2 * MiB)
    upload.start()
    assert upload.paused.wait(30), "the upload never got going"
    assert server.proc is not None
    os.kill(server.proc.pid, signal.SIGKILL)
    server.proc.wait(10)

    def gone(pid: int) -> bool:
        # Every thread, not just the leader: a killed process's leader turns zombie while a
        # thread stuck in a slow fsync still holds the process's files (the listening socket
        # among them) until it, too, has exited — seconds on a loaded machine.
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return True
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/stat") as stat:
                    if stat.read().rpartition(")")[2].split()[0] not in ("Z", "X"):
                        return False
            except OSError:
                continue  # that thread just went
        return True

    wait_for(lambda: all(gone(pid) for pid in workers), 10, "the workers to die with their supervisor")
    upload.resume.set()
    upload.join(30)
    assert upload.status != 200, "an orphaned worker finished the upload after the crash"
    with socket.socket() as probe:  # nobody serves the port any more
        assert probe.connect_ex(("127.0.0.1", server.port)) != 0


def _scrape(endpoint: str) -> dict[str, float]:
    """One /metrics scrape on a new connection (so that scrapes land on different workers)."""
    with urllib.request.urlopen(f"{endpoint}/metrics", timeout=30) as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if name and not line.startswith("#"):
            values[name] = float(value)
    return values


def test_metrics_add_up_every_worker(spawn: Spawn) -> None:
    """Whichever worker a scrape lands on, it counts every worker's requests: a counter never
    drops from one scrape to the next (a drop reads as a restart to Prometheus)."""
    server = spawn(extra_args=["--workers", "2"])
    make_client(server.endpoint).create_bucket(Bucket="counted")
    puts = 'tierstore_s3_requests_total{operation="PutObject",status="200"}'
    encoded = 'tierstore_ec_bytes_total{op="encode"}'
    for n in range(20):  # a new client each time: the PUTs spread over both workers
        make_client(server.endpoint).put_object(Bucket="counted", Key=f"k{n}", Body=b"x" * 200_000)
    scrapes = [_scrape(server.endpoint) for _ in range(12)]
    assert [s.get(puts) for s in scrapes] == [20.0] * 12
    assert len({s.get(encoded) for s in scrapes}) == 1 and scrapes[0][encoded] > 0
    # Request counters keep the requests of a worker that died.
    os.kill(server.worker_pids()[0], signal.SIGKILL)
    wait_for(lambda: server.log().count("accepting on") >= 3, 60, "the replacement to accept")
    assert all(_scrape(server.endpoint).get(puts) == 20.0 for _ in range(6))


def test_a_change_through_one_worker_holds_at_once_on_every_worker(spawn: Spawn) -> None:
    """Caches (bucket policies, users, the test clock) never let a worker answer with what another
    worker already changed: each request, on a new connection, may land on either worker."""
    server = spawn(extra_args=["--workers", "2", "--test-clock"])
    s3 = make_client(server.endpoint)
    s3.create_bucket(Bucket="shared")
    s3.put_object(Bucket="shared", Key="o", Body=b"public")
    url = f"{server.endpoint}/shared/o"

    def anonymous_status() -> int:
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return exc.code

    policy = json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": "*",
                    "Action": "s3:GetObject",
                    "Resource": "arn:aws:s3:::shared/*",
                }
            ],
        }
    )
    for _ in range(3):
        assert {anonymous_status() for _ in range(6)} == {403}  # both workers cache "no policy"
        s3.put_bucket_policy(Bucket="shared", Policy=policy)
        assert {anonymous_status() for _ in range(6)} == {200}
        s3.delete_bucket_policy(Bucket="shared")
    # A user removed through one worker is refused by all, from the next request on.
    user = admin(server.endpoint, "user", "add", "someone")
    signer = (user["access_key"], user["secret_key"])

    def as_user() -> int:
        client = boto3.client(
            "s3",
            endpoint_url=server.endpoint,
            aws_access_key_id=signer[0],
            aws_secret_access_key=signer[1],
            region_name="us-east-1",
            config=Config(retries={"max_attempts": 1}),
        )
        try:
            client.list_buckets()
            return 200
        except ClientError as exc:
            return int(exc.response["ResponseMetadata"]["HTTPStatusCode"])

    assert {as_user() for _ in range(6)} == {200}
    admin(server.endpoint, "user", "remove", signer[0])
    assert {as_user() for _ in range(6)} == {403}
    # The test clock: advanced through one worker, read the same through every one.
    now = admin(server.endpoint, "clock", "show")["offset_seconds"]
    admin(server.endpoint, "clock", "advance", "2")
    assert {admin(server.endpoint, "clock", "show")["offset_seconds"] for _ in range(4)} == {now + 2 * 86400}
    # A drain through one worker: every worker places no new shard on the node from the next
    # request on (its `drain --wait` can only count its own writers still writing there).

    # Signed here, not by the CLI: the next request follows within milliseconds, well inside the
    # half second in which the other worker's rebalancer loop would have caught up by itself.

    def admin_call(method: str, path: str) -> Any:
        signed = AWSRequest(method=method, url=f"{server.endpoint}/_tierstore/admin/{path}")
        S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1").add_auth(signed)
        request = urllib.request.Request(signed.url, method=method, headers=dict(signed.headers.items()))
        with urllib.request.urlopen(request, timeout=30) as response:  # a new connection: either worker
            return json.loads(response.read())

    def draining_seen() -> bool:
        rows = admin_call("GET", "domains")
        return all(row["draining"] for row in rows if row["id"].startswith("hot-n3-"))

    assert {draining_seen() for _ in range(6)} == {False}
    admin_call("POST", "domains/hot-n3/drain")
    assert {draining_seen() for _ in range(6)} == {True}


def test_every_worker_counts_every_workers_shards(spawn: Spawn) -> None:
    """`admin domains` answers the same shard counts and bytes on every worker, and they are what
    is on the drives: each worker used to count only its own writes on top of its start-up scan."""
    server = spawn(extra_args=["--workers", "2"])
    make_client(server.endpoint).create_bucket(Bucket="counted")
    for n in range(24):  # a new client each time: the PUTs spread over both workers
        body = os.urandom(300 + 40_000 * (n % 6))  # packed and unpacked shards
        make_client(server.endpoint).put_object(Bucket="counted", Key=f"k{n}", Body=body)

    def counts() -> list[tuple[str, str, int, int]]:  # each `tierstore admin` is a new connection
        return sorted(
            (d["tier"], d["id"], d["shards"], d["used_bytes"]) for d in admin(server.endpoint, "domains")
        )

    answers = [counts() for _ in range(6)]
    assert all(answer == answers[0] for answer in answers), answers
    assert sum(row[2] for row in answers[0]) == count_shards(server.data_dir)
    make_client(server.endpoint).delete_object(Bucket="counted", Key="k5")  # removals count too
    wait_for(
        lambda: all(sum(row[2] for row in counts()) == count_shards(server.data_dir) for _ in range(3)),
        60,
        "every worker's counts to follow the collector's removals",
    )


def _shared_mappings(pid: int) -> set[str]:
    """The files a process has mapped shared (MAP_SHARED), from /proc/<pid>/maps."""
    found = set()
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[1].endswith("s") and fields[5].startswith("/"):
            found.add(fields[5])
    return found


def test_per_request_shared_files_stay_off_the_drives(spawn: Spawn) -> None:
    """The drive counters and the workers' metrics, stored into on every request, are mapped from
    the data directory's runtime directory in memory: every small PUT's flush of the drives' file
    system wrote them back when they were in the data directory. Only the catalog's shared index
    and the change token (read there by earlier versions during a rolling upgrade) stay there. The
    last process out removes the runtime directory."""
    server = spawn(extra_args=["--workers", "2"])
    expected = runtime_dir.for_data_dir(server.data_dir)
    if expected is None:
        pytest.skip("no usable /dev/shm on this host: the files stay in the data directory")
    make_client(server.endpoint).create_bucket(Bucket="mapped")
    for n in range(8):
        make_client(server.endpoint).put_object(Bucket="mapped", Key=f"k{n}", Body=b"x" * 4096)
    data_dir = str(server.data_dir.resolve())
    for pid in server.worker_pids():
        mapped = _shared_mappings(pid)
        on_drives = {Path(p).name for p in mapped if p.startswith(data_dir + "/")}
        # (no `-shm` with the catalog on PostgreSQL)
        assert "changes" in on_drives and on_drives <= {"catalog.db-shm", "changes"}, mapped
        counters = [p for p in mapped if Path(p).parent == expected / "drive-counters"]
        metrics = [p for p in mapped if Path(p).parent.parent == expected / "metrics"]
        assert len(counters) >= 3 and metrics, mapped
    server.stop()
    assert not expected.exists()


def test_every_worker_answers_the_same_heat(spawn: Spawn) -> None:
    """Heat per tier is a full catalog scan, cached for 15 s: one process's scan is shared through
    the catalog, so scrapes agree whichever worker answers. (Each worker's own scan, taken at its
    own moment of the decaying heat, answered differently: scrapes flipped between two values.)"""
    server = spawn(extra_args=["--workers", "2"])
    s3 = make_client(server.endpoint)
    s3.create_bucket(Bucket="warm")
    for n in range(6):
        s3.put_object(Bucket="warm", Key=f"k{n}", Body=b"h" * (1000 * (n + 1)))
        for _ in range(n):
            s3.get_object(Bucket="warm", Key=f"k{n}")["Body"].read()
    started = time.monotonic()
    scrapes = [
        sorted(
            (k, v) for k, v in _scrape(server.endpoint).items() if k.startswith("tierstore_tier_heat_mean")
        )
        for _ in range(12)
    ]
    took = time.monotonic() - started
    assert any(v > 0 for _, v in scrapes[0]), scrapes[0]
    # Equal throughout, or one change where the cache ran out and one process scanned anew (one
    # more per 15 s the scrapes took, on a box slow enough for that).
    changes = sum(1 for before, after in zip(scrapes, scrapes[1:], strict=False) if before != after)
    assert changes <= 1 + int(took // 15), (took, scrapes)
