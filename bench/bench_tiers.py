"""GET latency and throughput per tier, and mover throughput under a reader load.

    .venv/bin/python bench/bench_tiers.py            # ~3 min on 2 cores
    .venv/bin/python bench/bench_tiers.py --quick    # ~1 min: fewer ops

Starts one `tierstore serve --test-clock` (default configuration, lifecycle interval one hour so
only the passes this script asks for run) on a free port in a temp dir, then:

1. places objects of 4 KiB and 1 MiB with StorageClass EXPRESS_ONEZONE (gpu-direct), STANDARD
   (hot), STANDARD_IA (warm) and GLACIER (cold), restores the GLACIER ones (`RestoreObject`, one
   lifecycle pass) and checks every object's tier with HEAD's x-tierstore-tier;
2. per tier and size: GET latency P50/P99 at concurrency 1, and throughput at concurrency 8;
3. the mover: 1 MiB objects on hot, the clock advanced 31 days, one lifecycle pass moves them all
   to warm while 4 threads GET 4 KiB objects; reports MiB/s moved and the readers' rate and P99.

Needs boto3 (the test extra). Prints a Markdown table; `--out FILE` also writes JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from server.cli import main as tierstore_main  # noqa: E402

ACCESS, SECRET = "bench-access", "bench-secret-key-0123"
KiB, MiB = 1024, 1024 * 1024
PLACEMENTS = [
    ("gpu-direct", "EXPRESS_ONEZONE"),
    ("hot", "STANDARD"),
    ("warm", "STANDARD_IA"),
    ("cold (restored copy)", "GLACIER"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def client(endpoint: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=ACCESS,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, max_pool_connections=16),
    )


def admin(endpoint: str, *args: str) -> Any:
    out = io.StringIO()
    os.environ["TIERSTORE_ACCESS_KEY"], os.environ["TIERSTORE_SECRET_KEY"] = ACCESS, SECRET
    with contextlib.redirect_stdout(out):
        code = tierstore_main(["admin", "--endpoint", endpoint, *args, "--json"])
    if code:
        raise RuntimeError(out.getvalue())
    return json.loads(out.getvalue())


def start_server(tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    log = open(tmp / "server.log", "wb")  # noqa: SIM115 - lives as long as the server
    env = {
        **os.environ,
        "TIERSTORE_ACCESS_KEY": ACCESS,
        "TIERSTORE_SECRET_KEY": SECRET,
        "TIERSTORE_LIFECYCLE_INTERVAL_SECONDS": "3600",
        "PYTHONUNBUFFERED": "1",
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "server.cli",
            "serve",
            "--data",
            str(tmp / "data"),
            "--listen",
            f"127.0.0.1:{port}",
            "--workers",
            "1",  # as measured before one worker per core became the default
            "--test-clock",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while b"tierstore: listening on" not in (tmp / "server.log").read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError((tmp / "server.log").read_text())
        time.sleep(0.05)
    return proc, f"http://127.0.0.1:{port}"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def get_latency(endpoint: str, bucket: str, keys: list[str], ops: int) -> dict[str, float]:
    s3 = client(endpoint)
    times = []
    for i in range(ops):
        t0 = time.perf_counter()
        s3.get_object(Bucket=bucket, Key=keys[i % len(keys)])["Body"].read()
        times.append(time.perf_counter() - t0)
    return {"p50_ms": percentile(times, 0.5) * 1e3, "p99_ms": percentile(times, 0.99) * 1e3}


def get_throughput(
    endpoint: str, bucket: str, keys: list[str], size: int, budget: float, concurrency: int = 8
) -> dict[str, float]:
    stop = time.monotonic() + budget
    counts = [0] * concurrency

    def work(index: int) -> None:
        s3 = client(endpoint)
        i = index
        while time.monotonic() < stop:
            s3.get_object(Bucket=bucket, Key=keys[i % len(keys)])["Body"].read()
            counts[index] += 1
            i += concurrency

    started = time.monotonic()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(work, range(concurrency)))
    elapsed = time.monotonic() - started
    ops = sum(counts)
    return {"ops_s": ops / elapsed, "mib_s": ops * size / MiB / elapsed}


def put_many(endpoint: str, bucket: str, keys: list[str], size: int, storage_class: str | None) -> None:
    body = os.urandom(size)

    def put(key: str) -> None:
        extra = {"StorageClass": storage_class} if storage_class else {}
        client_ = clients.setdefault(threading.get_ident(), client(endpoint))
        client_.put_object(Bucket=bucket, Key=key, Body=body, **extra)

    clients: dict[int, Any] = {}
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, keys))


def bench_tiers(endpoint: str, quick: bool) -> list[dict[str, Any]]:
    s3 = client(endpoint)
    s3.create_bucket(Bucket="tiers")
    sizes = [("4 KiB", 4 * KiB, 32), ("1 MiB", MiB, 8)]
    rows: list[dict[str, Any]] = []
    for label, storage_class in PLACEMENTS:
        for size_label, size, count in sizes:
            keys = [f"{storage_class}/{size_label}/{i}" for i in range(count)]
            put_many(endpoint, "tiers", keys, size, storage_class)
            rows.append(
                {"tier": label, "class": storage_class, "size": size_label, "bytes": size, "keys": keys}
            )
    for row in rows:
        if row["class"] == "GLACIER":
            for key in row["keys"]:
                s3.restore_object(Bucket="tiers", Key=key, RestoreRequest={"Days": 1})
    admin(endpoint, "lifecycle", "run", "--wait")
    for row in rows:
        head = s3.head_object(Bucket="tiers", Key=row["keys"][0])
        row["placed_on"] = head["ResponseMetadata"]["HTTPHeaders"]["x-tierstore-tier"]
        if row["class"] == "GLACIER":
            assert 'ongoing-request="false"' in head["Restore"], head
            row["placed_on"] += (
                "+restore@" + admin(endpoint, "object", "tiers", row["keys"][0])["restore"]["tier"]
            )
        big = row["bytes"] >= MiB
        ops = (40 if big else 150) if quick else (100 if big else 400)
        get_latency(endpoint, "tiers", row["keys"], 10)  # warm up connections and caches
        row.update(get_latency(endpoint, "tiers", row["keys"], ops))
        row.update(get_throughput(endpoint, "tiers", row["keys"], row["bytes"], 3.0 if quick else 6.0))
        print(
            f"  {row['tier']:22} {row['size']:6} p50 {row['p50_ms']:7.2f} ms  p99 {row['p99_ms']:7.2f} ms  "
            f"{row['ops_s']:8.1f} ops/s  {row['mib_s']:7.1f} MiB/s",
            flush=True,
        )
        del row["keys"]
    return rows


def bench_mover(endpoint: str, quick: bool) -> dict[str, Any]:
    s3 = client(endpoint)
    s3.create_bucket(Bucket="mover")
    count = 48 if quick else 128
    keys = [f"m/{i}" for i in range(count)]
    put_many(endpoint, "mover", keys, MiB, None)  # unclassified: temperature moves them
    hot_keys = [f"r/{i}" for i in range(32)]
    put_many(endpoint, "mover", hot_keys, 4 * KiB, "STANDARD")  # the readers' objects never move
    stop = threading.Event()
    latencies: list[float] = []
    errors = [0]

    def reader() -> None:
        c = client(endpoint)
        i = 0
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                c.get_object(Bucket="mover", Key=hot_keys[i % len(hot_keys)])["Body"].read()
            except Exception:  # noqa: BLE001 - counted
                errors[0] += 1
            latencies.append(time.perf_counter() - t0)
            i += 1

    admin(endpoint, "clock", "advance", "31")
    threads = [threading.Thread(target=reader, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    before = len(latencies)
    t0 = time.monotonic()
    report = admin(endpoint, "lifecycle", "run", "--wait")
    elapsed = time.monotonic() - t0
    during = latencies[before:]
    stop.set()
    for t in threads:
        t.join()
    moved = [m for m in report["mover"]["moves"] if m["from"] == "hot" and m["to"] == "warm"]
    moved_bytes = sum(m["bytes"] for m in moved)
    assert moved_bytes >= count * MiB, report["mover"]
    tiers = {
        s3.head_object(Bucket="mover", Key=k)["ResponseMetadata"]["HTTPHeaders"]["x-tierstore-tier"]
        for k in keys
    }
    assert tiers == {"warm"}, tiers
    result = {
        "objects": count,
        "mib": moved_bytes / MiB,
        "seconds": elapsed,
        "mib_s": moved_bytes / MiB / elapsed,
        "reader_ops_s": len(during) / elapsed,
        "reader_p50_ms": percentile(during, 0.5) * 1e3,
        "reader_p99_ms": percentile(during, 0.99) * 1e3,
        "reader_errors": errors[0],
    }
    print(
        f"  mover: {result['mib']:.0f} MiB hot→warm in {elapsed:.1f} s = {result['mib_s']:.1f} MiB/s; "
        f"readers {result['reader_ops_s']:.0f} ops/s, p50 {result['reader_p50_ms']:.1f} ms, "
        f"p99 {result['reader_p99_ms']:.1f} ms, errors {errors[0]}",
        flush=True,
    )
    return result


def markdown(rows: list[dict[str, Any]], mover: dict[str, Any]) -> str:
    lines = [
        "| tier (placed by) | served from | size | GET p50 (c1) | GET p99 (c1) | ops/s (c8) | MiB/s (c8) |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['tier']} ({r['class']}) | {r['placed_on']} | {r['size']} | {r['p50_ms']:.2f} ms | "
            f"{r['p99_ms']:.2f} ms | {r['ops_s']:.0f} | {r['mib_s']:.1f} |"
        )
    lines += [
        "",
        "| mover: hot → warm | MiB moved | seconds | MiB/s | reader GET 4 KiB ops/s (c4) | "
        "reader p50 | reader p99 | reader errors |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| {mover['objects']} × 1 MiB, one pass | {mover['mib']:.0f} | {mover['seconds']:.1f} | "
        f"{mover['mib_s']:.1f} | {mover['reader_ops_s']:.0f} | {mover['reader_p50_ms']:.1f} ms | "
        f"{mover['reader_p99_ms']:.1f} ms | {mover['reader_errors']} |",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-tiers-"))
    proc, endpoint = start_server(tmp)
    try:
        print(f"tierstore on {endpoint} (data in {tmp})", flush=True)
        rows = bench_tiers(endpoint, args.quick)
        mover = bench_mover(endpoint, args.quick)
        table = markdown(rows, mover)
        print("\n" + table)
        if args.out:
            args.out.write_text(json.dumps({"tiers": rows, "mover": mover}, indent=2))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
