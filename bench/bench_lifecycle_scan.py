"""What one lifecycle pass costs per object, as the catalog grows (the daemon's scan, in process).

    .venv/bin/python bench/bench_lifecycle_scan.py                       # 30,000 and 300,000 objects
    .venv/bin/python bench/bench_lifecycle_scan.py --objects 1000000 --passes 2

A scratch data directory with the default configuration; the bucket is filled straight through the
catalog with zero-byte objects (bench/fill_bucket.py: the rows a 0-byte PUT writes, none of them due
for a move), then the lifecycle daemon runs unpaced passes over it (`run_pass(paced=False)`, what
`tierstore admin lifecycle run --wait` asks for). Reported per catalog size: the process's CPU time
per scanned object (every thread: the scan's catalog reads run on worker threads) and the pass's
wall time, median of the passes. A paced pass (the daemon's own, every `interval_seconds`) does the
same work spread out: at `scan_share` 0.1 it takes ten times the wall time and as much CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "bench"), str(REPO)]

from fill_bucket import catalog_path, fill  # noqa: E402

BUCKET = "scan"


async def measure(objects: int, passes: int) -> dict[str, float]:
    os.environ.setdefault("TIERSTORE_ACCESS_KEY", "bench-access-key")
    os.environ.setdefault("TIERSTORE_SECRET_KEY", "bench-secret-key-0123456789")
    from server.app import create_app
    from server.config import load_config

    scratch = Path(tempfile.mkdtemp(prefix="lifecycle-scan-"))
    try:
        app = create_app(load_config(data_dir=scratch / "data"))
        gateway = app.app.gateway  # type: ignore[attr-defined]  # RequestObserver -> S3FastLane
        store = gateway.store
        await store.start()
        try:
            await asyncio.to_thread(store.catalog.create_bucket, BUCKET, "bench", "us-east-1")
            await asyncio.to_thread(fill, catalog_path(scratch / "data"), BUCKET, objects)
            daemon = gateway.lifecycle.daemon
            cpu_us: list[float] = []
            wall_s: list[float] = []
            for _ in range(passes):
                wall, cpu = time.perf_counter(), time.process_time()
                report = await daemon.run_pass(paced=False)
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                if report.scanned != objects or report.transitions or report.skipped:
                    raise SystemExit(f"unexpected pass: {report.to_json()}")
                cpu_us.append(1e6 * cpu / objects)
                wall_s.append(wall)
            return {
                "objects": objects,
                "cpu_us_per_object": statistics.median(cpu_us),
                "wall_s": statistics.median(wall_s),
            }
        finally:
            await store.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--objects", type=int, action="append", help="catalog size (repeatable; default 30,000 and 300,000)"
    )
    parser.add_argument("--passes", type=int, default=3, help="passes per size (the median is reported)")
    args = parser.parse_args()
    sizes = args.objects or [30_000, 300_000]
    print("| objects | CPU per object (µs) | pass wall time (s) |")
    print("| ---: | ---: | ---: |")
    for objects in sizes:
        result = asyncio.run(measure(objects, args.passes))
        print(f"| {objects:,} | {result['cpu_us_per_object']:.1f} | {result['wall_s']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
