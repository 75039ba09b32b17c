"""Rebalance throughput, and foreground GET latency with and without a rebalance, in one run.

    .venv/bin/python bench/bench_rebalance.py                 # ~1-2 min on 2 cores
    .venv/bin/python bench/bench_rebalance.py --large 32      # quicker, fewer MiB to move

Starts one `tierstore serve` (default configuration: hot = 4+2 over 8 nodes × 2 drives, spread by
node; lifecycle off) on a free port in a temp dir, then:

1. PUTs `--large` objects of 4 MiB and `--small` objects of 16 KiB to the hot tier;
2. baseline: `--readers` threads GET random 16 KiB objects for `--seconds` → P50/P99, req/s;
3. adds two nodes of two drives each (`tierstore admin domain add` × 4) and, with the same readers
   running, waits for the rebalance to finish (`admin rebalance status` polled); GETs that started
   while it ran give the P50/P99 during the rebalance; the run's own counters give MiB/s moved;
4. checks every object reads back exactly afterwards.

[rebalance] settings come from the environment (TIERSTORE_REBALANCE_BYTES_PER_SECOND, _CONCURRENCY).
Prints a Markdown table; `--out FILE` also writes JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from servers import Tierstore  # noqa: E402

KIB, MIB = 1 << 10, 1 << 20
BUCKET = "bench-rebalance"


class Server(Tierstore):
    def command(self) -> list[str]:
        return [*super().command(), "--no-lifecycle"]

    def environment(self) -> dict[str, str]:
        return {**super().environment(), "TIERSTORE_REBALANCE_SETTLE_SECONDS": "3"}


def admin(server: Server, *args: str) -> Any:
    env = {**os.environ, "TIERSTORE_ACCESS_KEY": server.access_key, "TIERSTORE_SECRET_KEY": server.secret_key}
    done = subprocess.run(
        [sys.executable, "-m", "server.cli", "admin", *args, "--endpoint", server.endpoint, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(f"admin {' '.join(args)}: {done.stderr}")
    return json.loads(done.stdout)


class Readers:
    """`n` threads GETting random small objects; records (start time, latency) per request."""

    def __init__(self, server: Server, keys: list[str], n: int) -> None:
        self.server, self.keys, self.n = server, keys, n
        self.samples: list[tuple[float, float]] = []
        self.errors = 0
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(n)]

    def _run(self, seed: int) -> None:
        s3 = client(self.server)
        rng = random.Random(seed)
        while not self.stop.is_set():
            key = rng.choice(self.keys)
            t0 = time.time()
            try:
                s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
            except Exception:
                self.errors += 1
                continue
            self.samples.append((t0, time.time() - t0))

    def __enter__(self) -> Readers:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)


def client(server: Server) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        aws_access_key_id=server.access_key,
        aws_secret_access_key=server.secret_key,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}, max_pool_connections=32),
    )


def summary(latencies: list[float], seconds: float) -> dict[str, float]:
    if not latencies:
        return {"requests": 0, "req_per_s": 0.0, "p50_ms": 0.0, "p99_ms": 0.0}
    ordered = sorted(latencies)
    return {
        "requests": len(ordered),
        "req_per_s": len(ordered) / seconds,
        "p50_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[int(0.99 * (len(ordered) - 1))] * 1000,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--large", type=int, default=64, help="4 MiB objects (default 64)")
    parser.add_argument("--small", type=int, default=300, help="16 KiB objects (default 300)")
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0, help="baseline GET phase length")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    server = Server().start()
    try:
        s3 = client(server)
        s3.create_bucket(Bucket=BUCKET)
        rng = random.Random(1)
        small = {f"s/{i:05d}": rng.randbytes(16 * KIB) for i in range(args.small)}
        large = {f"l/{i:04d}": rng.randbytes(4 * MIB) for i in range(args.large)}
        t0 = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(
                pool.map(
                    lambda kv: s3.put_object(Bucket=BUCKET, Key=kv[0], Body=kv[1]),
                    list(small.items()) + list(large.items()),
                )
            )
        put_s = time.monotonic() - t0
        print(f"loaded {len(small) + len(large)} objects in {put_s:.1f}s", file=sys.stderr)
        logical = sum(map(len, small.values())) + sum(map(len, large.values()))

        keys = list(small)
        with Readers(server, keys, args.readers) as base:
            time.sleep(args.seconds)
        baseline = summary([lat for _, lat in base.samples], args.seconds)

        root = server.data_dir / "domains" / "hot"
        before = admin(server, "rebalance", "status")
        with Readers(server, keys, args.readers) as during:
            time.sleep(1.0)
            print("adding two nodes; rebalancing", file=sys.stderr)
            with ThreadPoolExecutor(4) as pool:  # settles into one run (settle_seconds=3)
                added = list(
                    pool.map(
                        lambda nd: admin(
                            server,
                            "domain",
                            "add",
                            "--tier",
                            "hot",
                            "--path",
                            str(root / nd[0] / nd[1]),
                            "--node",
                            nd[0],
                            "--rack",
                            "rack1",
                            "--wait",
                        ),
                        [("n9", "d1"), ("n9", "d2"), ("n10", "d1"), ("n10", "d2")],
                    )
                )
            after = admin(server, "rebalance", "--wait")
        status = max((a["rebalance"] for a in added), key=lambda r: r["shards_moved"])
        started, finished = status["started"], status["finished"]
        window = [lat for at, lat in during.samples if started <= at <= finished]
        rebalancing = summary(window, finished - started)
        moved_mib = (after["total_bytes_moved"] - before["total_bytes_moved"]) / MIB
        throughput = status["bytes_moved"] / MIB / status["elapsed_seconds"]
        status["shards_moved"] = after["total_shards_moved"] - before["total_shards_moved"]

        for key, body in {**small, **large}.items():
            got = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
            assert hashlib.md5(got).digest() == hashlib.md5(body).digest(), key
        result = {
            "objects": len(small) + len(large),
            "logical_mib": logical / MIB,
            "put_seconds": put_s,
            "shards_moved": status["shards_moved"],
            "shards_scanned": status["shards_scanned"],
            "moved_fraction": status["shards_moved"] / max(status["shards_scanned"], 1),
            "mib_moved": moved_mib,
            "rebalance_seconds": status["elapsed_seconds"],
            "rebalance_mib_per_s": throughput,
            "conflicts": status["conflicts"],
            "failures": status["failures"],
            "get_errors": base.errors + during.errors,
            "baseline": baseline,
            "during_rebalance": rebalancing,
            "concurrency": os.environ.get("TIERSTORE_REBALANCE_CONCURRENCY", "4 (default)"),
            "bytes_per_second": os.environ.get("TIERSTORE_REBALANCE_BYTES_PER_SECOND", "unlimited"),
        }
    finally:
        server.stop()

    print(
        f"\n{result['objects']} objects ({result['logical_mib']:.0f} MiB) on hot 4+2, 8 → 10 nodes; "
        f"rebalance concurrency {result['concurrency']}, rate {result['bytes_per_second']}\n"
    )
    print("| measure | value |\n|---|---:|")
    print(
        f"| shards moved / scanned | {result['shards_moved']} / {result['shards_scanned']} "
        f"({result['moved_fraction']:.3f}; ideal 0.200) |"
    )
    print(f"| MiB moved | {result['mib_moved']:.1f} |")
    print(f"| rebalance time | {result['rebalance_seconds']:.1f} s |")
    print(f"| rebalance throughput | {result['rebalance_mib_per_s']:.1f} MiB/s |")
    print(
        f"| GET 16 KiB without rebalance: P50 / P99 / req/s | {baseline['p50_ms']:.1f} / "
        f"{baseline['p99_ms']:.1f} ms / {baseline['req_per_s']:.0f} |"
    )
    print(
        f"| GET 16 KiB during rebalance: P50 / P99 / req/s | {rebalancing['p50_ms']:.1f} / "
        f"{rebalancing['p99_ms']:.1f} ms / {rebalancing['req_per_s']:.0f} |"
    )
    print(
        f"| GET errors, move failures, conflicts | {result['get_errors']}, {result['failures']}, "
        f"{result['conflicts']} |"
    )
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    return 0 if not result["get_errors"] and not result["failures"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
