"""The catalog on PostgreSQL against SQLite: per-operation cost, and throughput with 1, 2, 4 gateways.

    .venv/bin/python bench/bench_catalog.py                 # ~10 min on 2 cores
    .venv/bin/python bench/bench_catalog.py --quick         # ~3 min: short windows, 20,000 listed keys
    .venv/bin/python bench/bench_catalog.py --list-keys 1000000 --out catalog.json
    .venv/bin/python bench/bench_catalog.py --list-keys 1000000 --skip shapes --skip scale  # LIST only

Starts its own PostgreSQL (Debian's package, as tests/postgres.py does: a temp dir, a free
loopback port) and tierstore servers from this checkout (bench/servers.py), and drives them with
the shared load generator (/work/shared/tools/s3bench.py, or $S3BENCH):

1. Per operation: one gateway on SQLite and one on PostgreSQL, same configuration otherwise,
   measured interleaved (s3bench's A/B rounds) so machine noise hits both alike: 4 KiB PUT and
   GET, 1 MiB PUT (concurrency 1 and 8), and LIST pages (1000 keys) over a bucket of
   --list-keys keys (filled through the catalog with zero-byte objects: bench/fill_bucket.py's
   path). Reported: ops/s, p50 latency, and each as a PostgreSQL/SQLite ratio.
2. Scale-out: 4 gateways on one PostgreSQL database and one data directory; 1, 2 and 4 of them
   loaded at once (one s3bench process per gateway, 4 KiB PUT and GET at concurrency 8 each);
   the aggregate ops/s and its ratio to one gateway.

Figures are ratios within one run; on a machine with fewer cores than gateways + clients +
PostgreSQL the scale-out is CPU-bound, and says so (the machine's core count is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "bench"), str(REPO)]

from servers import Tierstore  # noqa: E402

from tests.postgres import PostgresServer, unavailable  # noqa: E402
from tiering.catalog import EMPTY_ETAG, Catalog  # noqa: E402,F401
from tiering.records import ObjectMeta  # noqa: E402

S3BENCH = os.environ.get("S3BENCH", "/work/shared/tools/s3bench.py")
LIST_BUCKET = "catalog-list"
LIST_PREFIX = "fill/"


class Gateway(Tierstore):
    """A tierstore gateway on a given catalog (and, for the scale-out, a shared data directory)."""

    def __init__(self, name: str, catalog: str = "", data: Path | None = None) -> None:
        super().__init__()
        self.name = name
        self.catalog = catalog
        self.data = data

    def command(self) -> list[str]:
        command = super().command()
        if self.data is not None:
            command[command.index("--data") + 1] = str(self.data)
        return command + (["--catalog", self.catalog] if self.catalog else [])

    def catalog_location(self) -> str | Path:
        assert self.tmp is not None
        return self.catalog or (self.data or self.tmp / "data") / "catalog" / "catalog.db"


def s3bench(endpoints: list[Gateway], *args: str) -> list[dict[str, Any]]:
    """One s3bench run (interleaved over `endpoints`); its JSON records."""
    command = [
        sys.executable,
        S3BENCH,
        "--access-key",
        endpoints[0].access_key,
        "--secret-key",
        endpoints[0].secret_key,
        "--quiet",
        *args,
    ]
    for gateway in endpoints:
        command += ["--endpoint", f"{gateway.name}={gateway.endpoint}"]
        if gateway.proc is not None:
            command += ["--server-pid", f"{gateway.name}={gateway.proc.pid}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"s3bench failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def per_endpoint(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Median ops/s and p50 latency (ms) per endpoint over the rounds."""
    by: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        if "ops_per_s" in record and "endpoint_name" in record:
            by.setdefault(record["endpoint_name"], []).append(record)
    return {
        name: {
            "ops_per_s": statistics.median(r["ops_per_s"] for r in rs),
            "p50_ms": statistics.median((r.get("lat_ms") or {}).get("p50") or 0 for r in rs),
            "errors": sum(r.get("errors", 0) for r in rs),
        }
        for name, rs in by.items()
    }


def fill(location: str | Path, keys: int) -> float:
    """`keys` zero-byte objects in LIST_BUCKET through the catalog (as bench/fill_bucket.py); seconds."""
    started = time.monotonic()
    catalog = Catalog(location, durable=False)
    try:
        meta, now = ObjectMeta(), time.time()
        for start in range(0, keys, 20_000):
            names = [f"{LIST_PREFIX}{i:09d}" for i in range(start, min(keys, start + 20_000))]
            catalog.create_empty_objects(LIST_BUCKET, names, tier="hot", meta=meta, now=now)
    finally:
        catalog.close()
    return time.monotonic() - started


def per_operation(pg: PostgresServer, args: argparse.Namespace) -> dict[str, Any]:
    sqlite = Gateway("sqlite").start()
    postgresql = Gateway("postgresql", pg.create_database("bench_ops")).start()
    results: dict[str, Any] = {}
    try:
        both = [sqlite, postgresql]
        window = ["--duration", str(args.duration), "--rounds", str(args.rounds), "--warmup", "0.5"]
        shapes = [
            ("put-4KiB-c1", ["--op", "put", "--size", "4KiB", "-c", "1"]),
            ("put-4KiB-c8", ["--op", "put", "--size", "4KiB", "-c", "8"]),
            ("get-4KiB-c1", ["--op", "get", "--size", "4KiB", "-c", "1"]),
            ("get-4KiB-c8", ["--op", "get", "--size", "4KiB", "-c", "8"]),
            ("put-1MiB-c1", ["--op", "put", "--size", "1MiB", "-c", "1"]),
            ("put-1MiB-c8", ["--op", "put", "--size", "1MiB", "-c", "8"]),
        ]
        for name, shape in [] if "shapes" in args.skip else shapes:
            results[name] = per_endpoint(s3bench(both, *shape, *window, "--bucket", f"ops-{name.lower()}"))
            print(name, results[name], flush=True)
        # LIST pages over a big bucket: filled through each catalog, then listed by s3bench.
        for gateway in both:
            s3bench(
                [gateway],
                "--op",
                "put",
                "--size",
                "1",
                "--count",
                "1",
                "--bucket",
                LIST_BUCKET,
                "--prefix",
                "warm/",
            )  # creates the bucket
            results[f"fill-{gateway.name}-s"] = round(fill(gateway.catalog_location(), args.list_keys), 1)
        results["list-1000"] = per_endpoint(
            s3bench(
                both,
                "--op",
                "list",
                "--bucket",
                LIST_BUCKET,
                "--prefix",
                LIST_PREFIX,
                "--objects",
                str(args.list_keys),
                "--skip-prepare",
                "--no-create-bucket",
                "--keep",
                "--max-keys",
                "1000",
                "-c",
                "1",
                *window,
            )
        )
        print("list-1000", results["list-1000"], flush=True)
    finally:
        sqlite.stop()
        postgresql.stop()
    return results


def scale_out(pg: PostgresServer, args: argparse.Namespace) -> dict[str, Any]:
    url = pg.create_database("bench_gateways")
    data = Path(tempfile.mkdtemp(prefix="bench-catalog-data-"))
    gateways = [Gateway(f"gw{n}", url, data).start() for n in range(4)]
    results: dict[str, Any] = {}
    try:
        for op in ("put", "get"):
            for count in (1, 2, 4):
                procs = []
                outs = []
                for n, gateway in enumerate(gateways[:count]):
                    out = data.parent / f"bench-catalog-{os.getpid()}-{op}-{count}-{n}.json"
                    outs.append(out)
                    command = [
                        sys.executable,
                        S3BENCH,
                        "--access-key",
                        gateway.access_key,
                        "--secret-key",
                        gateway.secret_key,
                        "--quiet",
                        "--endpoint",
                        f"{gateway.name}={gateway.endpoint}",
                        "--op",
                        op,
                        "--size",
                        "4KiB",
                        "-c",
                        "8",
                        "--duration",
                        str(args.duration),
                        "--warmup",
                        "1",
                        "--bucket",
                        f"scale-{op}-{n}",
                        "--json-out",
                        str(out),
                    ]
                    procs.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
                for proc in procs:
                    proc.wait(600)
                records = [
                    json.loads(line)
                    for out in outs
                    for line in out.read_text().splitlines()
                    if line.startswith("{") and '"ops_per_s"' in line
                ]
                for out in outs:
                    out.unlink(missing_ok=True)
                total = sum(r["ops_per_s"] for r in records)
                results[f"{op}-4KiB-{count}gw"] = {
                    "ops_per_s": round(total, 1),
                    "errors": sum(r.get("errors", 0) for r in records),
                }
                print(op, count, results[f"{op}-4KiB-{count}gw"], flush=True)
            one = results[f"{op}-4KiB-1gw"]["ops_per_s"] or 1
            for count in (2, 4):
                results[f"{op}-4KiB-{count}gw"]["vs_1gw"] = round(
                    results[f"{op}-4KiB-{count}gw"]["ops_per_s"] / one, 2
                )
    finally:
        for gateway in gateways:
            gateway.stop()
        subprocess.run(["rm", "-rf", str(data)], check=False)
    return results


def ratios(per_op: dict[str, Any]) -> list[str]:
    lines = [
        "| shape | SQLite ops/s | PostgreSQL ops/s | PG/SQLite ops/s | SQLite p50 ms | PG p50 ms | PG/SQLite p50 |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for shape, result in per_op.items():
        if not isinstance(result, dict) or "sqlite" not in result or "postgresql" not in result:
            continue
        s, p = result["sqlite"], result["postgresql"]
        lines.append(
            f"| {shape} | {s['ops_per_s']:.0f} | {p['ops_per_s']:.0f} | "
            f"{p['ops_per_s'] / max(s['ops_per_s'], 1e-9):.2f} | {s['p50_ms']:.2f} | {p['p50_ms']:.2f} | "
            f"{p['p50_ms'] / max(s['p50_ms'], 1e-9):.2f} |"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--list-keys", type=int, default=200_000)
    # shapes: the per-operation PUT/GET shapes (LIST alone: --skip shapes --skip scale)
    parser.add_argument("--skip", choices=("ops", "shapes", "scale"), action="append", default=[])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.quick:
        args.duration, args.rounds, args.list_keys = 2.0, 1, 20_000
    reason = unavailable()
    if reason:
        print(f"bench_catalog: {reason}", file=sys.stderr)
        return 2
    pg = PostgresServer()
    try:
        results: dict[str, Any] = {"cores": os.cpu_count(), "args": vars(args) | {"out": str(args.out)}}
        if "ops" not in args.skip:
            results["per_operation"] = per_operation(pg, args)
            print("\n".join(ratios(results["per_operation"])))
        if "scale" not in args.skip:
            results["scale_out"] = scale_out(pg, args)
        print(json.dumps(results, indent=2))
        if args.out:
            args.out.write_text(json.dumps(results, indent=2))
    finally:
        pg.destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
