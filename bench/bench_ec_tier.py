"""An erasure-coded tier against a plain-file tier: same server, same run, same sizes.

    .venv/bin/python bench/bench_ec_tier.py [--sizes 1,64 --clients 4 --rounds 3 --count-1 32 --count-64 4]

One `tierstore serve --config` process whose hot tier is the default erasure-coded 4+2 (8 nodes
× 2 drives, spread by node) and whose warm tier is `backend = "files"`. PUT with StorageClass
STANDARD lands on hot (EC), STANDARD_IA on warm (files). For each object size, each round runs
the two tiers back to back (order alternating between rounds), PUT then GET of the same objects
from `--clients` threads; throughput is total bytes / wall time, latency is per request. The
table shows the median over rounds, and the EC/files ratio.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

REPO = Path(__file__).resolve().parents[1]
ACCESS, SECRET = "bench-access", "bench-secret-key"
TIERS = {"ec": ("STANDARD", "hot, erasure 4+2"), "files": ("STANDARD_IA", "warm, plain files")}
CONFIG = """
[tiers.warm]
backend = "files"
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    (tmp / "tierstore.toml").write_text(CONFIG)
    port = free_port()
    log = open(tmp / "server.log", "wb")  # noqa: SIM115 - lives as long as the server
    env = {
        **os.environ,
        "TIERSTORE_ACCESS_KEY": ACCESS,
        "TIERSTORE_SECRET_KEY": SECRET,
        "PYTHONUNBUFFERED": "1",
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "server.cli",
            "serve",
            "--config",
            str(tmp / "tierstore.toml"),
            "--data",
            str(tmp / "data"),
            "--listen",
            f"127.0.0.1:{port}",
            "--workers",
            "1",  # as measured before one worker per core became the default
        ],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError((tmp / "server.log").read_text())
        if b"tierstore: listening on" in (tmp / "server.log").read_bytes():
            return proc, f"http://127.0.0.1:{port}"
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("server did not start")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def client(endpoint: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=ACCESS,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
        config=Config(
            s3={"addressing_style": "path"},
            retries={"max_attempts": 1},
            read_timeout=600,
            max_pool_connections=64,
        ),
    )


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))]


def run_phase(
    clients: list[Any], op: str, keys: list[str], storage_class: str, body: bytes
) -> dict[str, float]:
    """PUT or GET every key, spread over the clients; throughput and latency figures."""
    latencies: list[float] = []

    def one(job: tuple[int, str]) -> None:
        n, key = job
        c = clients[n % len(clients)]
        t0 = time.perf_counter()
        if op == "put":
            c.put_object(Bucket="bench", Key=key, Body=body, StorageClass=storage_class)
        else:
            got = c.get_object(Bucket="bench", Key=key)["Body"].read()
            if len(got) != len(body):
                raise AssertionError(f"{key}: {len(got)} bytes, expected {len(body)}")
        latencies.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(len(clients)) as pool:
        list(pool.map(one, enumerate(keys)))
    wall = time.perf_counter() - t0
    return {
        "mibs": len(keys) * len(body) / wall / (1 << 20),
        "p50": pct(latencies, 50) * 1e3,
        "p99": pct(latencies, 99) * 1e3,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1,64", help="object sizes in MiB (comma list)")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--count-1", type=int, default=32, help="objects per round at 1 MiB")
    parser.add_argument("--count-64", type=int, default=4, help="objects per round at 64 MiB")
    parser.add_argument("--count", type=int, default=8, help="objects per round at other sizes")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="bench-ec-"))
    proc, endpoint = start_server(tmp)
    results: dict[tuple[int, str, str], list[dict[str, float]]] = {}
    try:
        clients = [client(endpoint) for _ in range(args.clients)]
        clients[0].create_bucket(Bucket="bench")
        for size in sizes:
            body = os.urandom(size << 20)
            count = {1: args.count_1, 64: args.count_64}.get(size, args.count)
            for rnd in range(args.rounds):
                order = list(TIERS) if rnd % 2 == 0 else list(reversed(TIERS))
                for tier in order:
                    storage_class = TIERS[tier][0]
                    keys = [f"{tier}/{size}m/r{rnd}/{i}" for i in range(count)]
                    for op in ("put", "get"):
                        results.setdefault((size, tier, op), []).append(
                            run_phase(clients, op, keys, storage_class, body)
                        )
                    for key in keys:
                        clients[0].delete_object(Bucket="bench", Key=key)
    finally:
        stop_server(proc)
        shutil.rmtree(tmp, ignore_errors=True)

    def med(size: int, tier: str, op: str, field: str) -> float:
        return statistics.median(r[field] for r in results[(size, tier, op)])

    print(
        f"machine: {platform.machine()} {os.cpu_count()} CPUs, {platform.platform()}, "
        f"python {platform.python_version()}; {args.clients} clients, median of {args.rounds} rounds"
    )
    print(
        "| size | op | EC 4+2 (hot) MiB/s | files (warm) MiB/s | EC/files | EC p50 / p99 ms | files p50 / p99 ms |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for size in sizes:
        for op in ("put", "get"):
            ec, fl = med(size, "ec", op, "mibs"), med(size, "files", op, "mibs")
            print(
                f"| {size} MiB | {op.upper()} | {ec:.1f} | {fl:.1f} | {ec / fl:.2f} "
                f"| {med(size, 'ec', op, 'p50'):.0f} / {med(size, 'ec', op, 'p99'):.0f} "
                f"| {med(size, 'files', op, 'p50'):.0f} / {med(size, 'files', op, 'p99'):.0f} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
