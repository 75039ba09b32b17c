"""Small PUTs through the committer alone, in this process: no HTTP, no client, no second worker.

    .venv/bin/python bench/bench_small_commits.py [--concurrency 16] [--duration 6] [--rounds 3] [--loop-work-ms 0 0.25]

What it is for: telling a small PUT's own storage cost (placement, pack appends, the drives'
flush, the catalog rows and the WAL's fsync: tiering/small_writes.py) apart from what the server
around it adds (request parsing on the same event loop, which holds the GIL the committer thread
needs back after every system call; the other worker; the client; the CPU they all share). The
store is built as `tierstore serve` builds it (server.app.build_store, embedded defaults, fresh
data directory under /tmp), a bucket made, then `--concurrency` tasks each PUT 4 KiB bodies to
fresh keys through `ObjectStore.begin_put` / `PendingWrite.commit_object` for `--duration`
seconds. `--loop-work-ms` spins the event loop that long before each PUT, holding the GIL, as a
stand-in for a request's handling (a 4 KiB PUT's is ~0.25-0.3 ms of loop CPU on this box:
bench/RESULTS.md); give several values to compare them in interleaved rounds.

Prints per round and as medians: PUTs/s, this process's CPU per PUT (user + system), PUTs per
committed batch, the batch cycle (the run's wall time over the batches), P50/P99 PUT latency.
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import uvloop  # noqa: E402

from server import runtime_dir  # noqa: E402
from server.app import build_store  # noqa: E402
from server.config import load_config  # noqa: E402
from tiering.records import ObjectMeta  # noqa: E402

BODY_BYTES = 4096


def _spin(ms: float) -> None:
    """Hold the GIL for `ms` milliseconds, as parsing and answering a request does."""
    until = time.perf_counter() + ms / 1e3
    while time.perf_counter() < until:
        pass


async def one_round(concurrency: int, duration: float, loop_work_ms: float) -> dict[str, float]:
    data_dir = Path(tempfile.mkdtemp(prefix="bench-small-commits-"))
    store = build_store(load_config(None, data_dir=data_dir))
    try:
        await store.start()
        await store.create_bucket("bench", "bench", "us-east-1")
        body = os.urandom(BODY_BYTES)
        latencies: list[float] = []
        stop = time.monotonic() + duration

        async def client(n: int) -> None:
            i = 0
            while time.monotonic() < stop:
                if loop_work_ms:
                    _spin(loop_work_ms)
                started = time.perf_counter()
                pending = await store.begin_put("bench", "STANDARD", size_hint=len(body))
                await pending.write(body)
                await pending.end_body()
                await pending.commit_object("bench", f"c{n}/{i:08d}", ObjectMeta())
                latencies.append(time.perf_counter() - started)
                i += 1

        committer = store.small_writes
        assert committer is not None, "the default store commits small PUTs in batches"
        batches0, writes0 = committer.batches, committer.writes
        cpu0, wall0 = os.times(), time.monotonic()
        await asyncio.gather(*(client(n) for n in range(concurrency)))
        wall, cpu1 = time.monotonic() - wall0, os.times()
        batches, writes = committer.batches - batches0, committer.writes - writes0
    finally:
        await store.close()
        # As the server stops (server/app.py): its runtime directory in /dev/shm goes with it.
        if store.runtime_dir is not None:
            await asyncio.to_thread(runtime_dir.remove_if_unused, store.runtime_dir)
        shutil.rmtree(data_dir, ignore_errors=True)
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    latencies.sort()
    return {
        "puts_per_s": len(latencies) / wall,
        "cpu_ms_per_put": cpu * 1e3 / len(latencies),
        "puts_per_batch": writes / max(batches, 1),
        "cycle_ms": wall * 1e3 / max(batches, 1),
        "p50_ms": latencies[len(latencies) // 2] * 1e3,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--duration", type=float, default=6.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loop-work-ms", type=float, nargs="+", default=[0.0])
    args = parser.parse_args()
    # As `tierstore serve` runs (server/cli.py): the committer waits this long at most for the GIL.
    from server.cli import GIL_SWITCH_INTERVAL

    sys.setswitchinterval(GIL_SWITCH_INTERVAL)
    results: dict[float, list[dict[str, float]]] = {work: [] for work in args.loop_work_ms}
    for r in range(args.rounds):
        for work in args.loop_work_ms:  # interleaved: round 1 of every setting, then round 2, ...
            res = uvloop.run(one_round(args.concurrency, args.duration, work))
            results[work].append(res)
            print(
                f"round {r + 1} loop work {work} ms: {res['puts_per_s']:.0f} PUTs/s, "
                f"{res['cpu_ms_per_put']:.3f} ms CPU/PUT, {res['puts_per_batch']:.1f} PUTs/batch, "
                f"cycle {res['cycle_ms']:.2f} ms, P50 {res['p50_ms']:.2f} ms, P99 {res['p99_ms']:.2f} ms",
                flush=True,
            )
    print(f"medians of {args.rounds} rounds, {args.concurrency} concurrent PUTs of {BODY_BYTES} bytes:")
    for work, runs in results.items():
        med = {k: statistics.median(run[k] for run in runs) for k in runs[0]}
        print(
            f"  loop work {work} ms: {med['puts_per_s']:.0f} PUTs/s, {med['cpu_ms_per_put']:.3f} ms CPU/PUT, "
            f"{med['puts_per_batch']:.1f} PUTs/batch, cycle {med['cycle_ms']:.2f} ms, "
            f"P50 {med['p50_ms']:.2f} ms, P99 {med['p99_ms']:.2f} ms"
        )


if __name__ == "__main__":
    main()
