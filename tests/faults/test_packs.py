"""Pack files (the default: a tier's pack_threshold_bytes, 512 KiB): many small objects through a
real server and boto3.

Byte-exact PUT/GET/overwrite/DELETE, a handful of files for thousands of objects, a SIGKILL in a
PUT storm (every acknowledged object readable after restart, a torn tail ignored), and the online
compactor reclaiming deleted space while reads go on.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests.conftest import ServerProcess, make_client
from tests.support import admin, run_admin, wait_for

Spawn = Callable[..., ServerProcess]
PACKS = {"TIERSTORE_TIERS_HOT_PACK_COMPACT_SECONDS": "1"}  # the default threshold; compacting often


def body(n: int, version: int = 0) -> bytes:
    return random.Random(n * 1000 + version).randbytes(100 + (n * 37) % 9000)


def files_of(data: Path) -> tuple[int, int]:
    """(files under the tier's domains, of which pack files)."""
    files = [Path(d) / f for d, _, names in os.walk(data / "domains") for f in names]
    return len(files), sum(1 for f in files if f.suffix == ".tsp")


def pack_bytes(data: Path) -> int:
    total = 0
    for pack in (data / "domains").rglob("*.tsp"):
        with contextlib.suppress(FileNotFoundError):  # compacted away between listing and stat
            total += pack.stat().st_size
    return total


def test_many_small_objects_in_a_handful_of_pack_files(spawn: Spawn, tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = spawn(data, env=PACKS, extra_args=["--no-lifecycle"])
    s3 = make_client(server.endpoint, max_pool_connections=16)
    s3.create_bucket(Bucket="packs")
    count = 2000

    def put(n: int, version: int = 0) -> None:
        s3.put_object(Bucket="packs", Key=f"k{n:05d}", Body=body(n, version))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, range(count)))
        list(pool.map(lambda n: put(n, 1), range(0, count, 3)))  # overwrites
        list(pool.map(lambda n: s3.delete_object(Bucket="packs", Key=f"k{n:05d}"), range(1, count, 7)))
    files, packs = files_of(data)
    # 16 drives: about one open pack each per worker process (each appends to its own: one writer
    # per file, no lock on the PUT path), a few more where compaction rotated one; and a key each.
    assert packs <= 16 * server.workers + 8 and files <= packs + 16, (files, packs, server.workers)

    def expect(n: int) -> bytes | None:
        return None if n % 7 == 1 else body(n, 1 if n % 3 == 0 else 0)

    def check(n: int) -> None:
        want = expect(n)
        if want is None:
            try:
                s3.get_object(Bucket="packs", Key=f"k{n:05d}")
                raise AssertionError(f"k{n:05d} was deleted")
            except s3.exceptions.NoSuchKey:
                return
        assert s3.get_object(Bucket="packs", Key=f"k{n:05d}")["Body"].read() == want

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(check, range(count)))
    server.stop()
    server = spawn(data, env=PACKS, extra_args=["--no-lifecycle"])  # reindexed from the packs
    s3 = make_client(server.endpoint, max_pool_connections=16)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(check, range(count)))


def test_sigkill_in_a_put_storm_keeps_every_acknowledged_object(spawn: Spawn, tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = spawn(data, env=PACKS, extra_args=["--no-lifecycle"])
    s3 = make_client(server.endpoint, max_pool_connections=16)
    s3.create_bucket(Bucket="storm")
    acked: set[int] = set()
    lock = threading.Lock()
    stop = threading.Event()

    def storm(worker: int) -> None:
        for i in range(100_000):
            if stop.is_set():
                return
            n = worker * 100_000 + i
            try:
                s3.put_object(Bucket="storm", Key=f"k{n}", Body=body(n))
            except Exception:
                return  # the server died under us
            with lock:
                acked.add(n)

    threads = [threading.Thread(target=storm, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    wait_for(lambda: len(acked) >= 400, 120, "400 acknowledged PUTs")
    server.kill()
    stop.set()
    for t in threads:
        t.join(60)
    for pack in (data / "domains").rglob("*.tsp"):  # and a record torn mid-write on every drive
        with open(pack, "ab") as f:
            f.write(b"TSPR\x01\x0a\x00\x00" + os.urandom(25))
    server = spawn(data, env=PACKS, extra_args=["--no-lifecycle"])
    s3 = make_client(server.endpoint, max_pool_connections=16)

    def check(n: int) -> None:
        assert s3.get_object(Bucket="storm", Key=f"k{n}")["Body"].read() == body(n), n

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(check, sorted(acked)))
    s3.put_object(Bucket="storm", Key="after", Body=b"x" * 5000)  # writing goes on past the tails
    assert s3.get_object(Bucket="storm", Key="after")["Body"].read() == b"x" * 5000


def test_compaction_reclaims_deleted_space_while_reads_go_on(spawn: Spawn, tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = spawn(data, env=PACKS, extra_args=["--no-lifecycle"])
    s3 = make_client(server.endpoint, max_pool_connections=16)
    s3.create_bucket(Bucket="compact")
    count = 1000
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: s3.put_object(Bucket="compact", Key=f"k{n}", Body=body(n)), range(count)))
    before = pack_bytes(data)
    kept = [n for n in range(count) if n % 5 == 0]
    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda n: s3.delete_object(Bucket="compact", Key=f"k{n}"), [n for n in range(count) if n % 5]
            )
        )
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                for n in kept[:50]:
                    assert s3.get_object(Bucket="compact", Key=f"k{n}")["Body"].read() == body(n)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        wait_for(lambda: pack_bytes(data) < before * 0.4, 60, f"pack bytes to shrink from {before}")
    finally:
        stop.set()
        thread.join(60)
    assert not errors, errors
    for n in kept:
        assert s3.get_object(Bucket="compact", Key=f"k{n}")["Body"].read() == body(n), n


def test_fsck_heal_and_drain_treat_packed_shards_as_first_class(spawn: Spawn, tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {**PACKS, "TIERSTORE_RETIRE_GRACE_SECONDS": "1", "TIERSTORE_REBALANCE_SETTLE_SECONDS": "1"}
    # One process: the drain and compaction progress this test waits for is one worker's.
    server = spawn(data, env=env, extra_args=["--no-lifecycle", "--workers", "1"])
    s3 = make_client(server.endpoint, max_pool_connections=16)
    s3.create_bucket(Bucket="first")
    count = 200
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: s3.put_object(Bucket="first", Key=f"k{n}", Body=body(n)), range(count)))

    def fsck(*args: str) -> tuple[int, dict[str, Any]]:
        done = run_admin(server.endpoint, "fsck", *args)
        assert done.returncode in (0, 1), done.stderr
        return done.returncode, json.loads(done.stdout)

    assert fsck("--verify")[0] == 0
    pack = max((data / "domains").rglob("*.tsp"), key=lambda p: p.stat().st_size)
    raw = bytearray(pack.read_bytes())
    raw[-50] ^= 0xFF  # inside the last record's last block
    pack.write_bytes(bytes(raw))
    code, report = fsck("--verify")
    assert code == 1 and len(report["corrupt"]) == 1, report
    assert admin(server.endpoint, "heal", "--wait")["shards_healed"] >= 1
    assert fsck("--verify")[0] == 0

    node = data / "domains" / "hot" / "n3"
    assert list(node.rglob("*.tsp")), "nothing was packed on hot-n3"
    assert run_admin(server.endpoint, "domain", "drain", "hot-n3", "--wait", timeout=300).returncode == 0
    # Its packs hold only dead records now: the compactor removes them.
    wait_for(lambda: not list(node.rglob("*.tsp")), 60, "hot-n3's packs to be compacted away")
    done = run_admin(server.endpoint, "domain", "remove", "hot-n3")
    assert done.returncode == 0, done.stderr
    with ThreadPoolExecutor(8) as pool:
        for n, got in zip(
            range(count),
            pool.map(lambda n: s3.get_object(Bucket="first", Key=f"k{n}")["Body"].read(), range(count)),
            strict=True,
        ):
            assert got == body(n), n
    assert fsck("--verify")[0] == 0
