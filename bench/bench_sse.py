"""SSE-S3 against plaintext: what sealing objects in AES-256-GCM chunks costs a PUT and a GET.

One `tierstore serve` (default configuration, from this checkout); two buckets, one plain and one
whose objects are sent with `x-amz-server-side-encryption: AES256`. For 4 KiB objects (ops/s,
8 connections) and 64 MiB objects (MiB/s, 1 connection): PUT then GET, plain and SSE interleaved
for `--rounds` rounds; the median round is reported with P50/P99 and the SSE/plain ratio.

    .venv/bin/python bench/bench_sse.py              # ~3 min on 2 cores
    .venv/bin/python bench/bench_sse.py --quick      # ~1 min

The client is bench/rawhttp.py (keep-alive http.client, every request signed before the clock
starts; bodies compared with what was sent), so the server, not the client, is measured.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rawhttp import CheckError, Conn, LoadResult, Request, Response, Signer, run_load  # noqa: E402
from servers import Tierstore  # noqa: E402

KiB, MiB = 1024, 1024 * 1024
SSE = {"x-amz-server-side-encryption": "AES256"}


def shape(
    server: Tierstore,
    signer: Signer,
    bucket: str,
    sse: bool,
    op: str,
    size: int,
    concurrency: int,
    count: int,
    budget: float,
    payloads: list[bytes],
) -> LoadResult:
    extra = SSE if sse else {}
    host, port = "127.0.0.1", server.port
    if op == "PUT":
        reqs = [
            signer.request(
                "PUT",
                f"/{bucket}/put-{size}-{i}",
                body=payloads[i % len(payloads)],
                sha256=hashlib.sha256(payloads[i % len(payloads)]).hexdigest(),
                headers=extra,
            )
            for i in range(count)
        ]

        def check_put(i: int, req: Request, res: Response) -> None:
            if res.status != 200:
                raise CheckError(f"PUT {res.status}: {bytes(res.body[:200])!r}")
            if sse and res.headers.get("x-amz-server-side-encryption") != "AES256":
                raise CheckError("PUT answered without x-amz-server-side-encryption")

        return run_load(host, port, [], concurrency, count, budget, lambda i: reqs[i], check_put, size=size)
    keys = [f"/{bucket}/get-{size}-{i}" for i in range(len(payloads))]
    conn = Conn(host, port)
    for key, body in zip(keys, payloads, strict=True):  # the working set, untimed
        res = conn.do(signer.request("PUT", key, body=body, headers=extra))
        assert res.status == 200, res.status
    conn.close()
    gets = [signer.request("GET", key) for key in keys]

    def check_get(i: int, req: Request, res: Response) -> None:
        want = payloads[i % len(payloads)]
        if res.status != 200 or res.length != len(want):
            raise CheckError(f"GET {res.status}: {res.length} bytes, not what was PUT")
        # Small bodies compared whole; a large one at its ends and every 1 MiB (a full compare
        # would cost the client as much as the server's work).
        for at in range(0, len(want), MiB) if len(want) > MiB else (0,):
            if res.body[at : at + 4 * KiB] != want[at : at + 4 * KiB]:
                raise CheckError(f"GET: bytes at {at} are not what was PUT")
        if res.body[len(want) - 4 * KiB : len(want)] != want[-4 * KiB :]:
            raise CheckError("GET: the last bytes are not what was PUT")

    return run_load(
        host,
        port,
        [],
        concurrency,
        count,
        budget,
        lambda i: gets[i % len(gets)],
        check_get,
        size=size,
        expect_size=size,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short budgets, one round")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    rounds = args.rounds or (1 if args.quick else 3)
    small_budget = 4.0 if args.quick else 8.0
    shapes = [  # (op, size, concurrency, max ops, budget s, distinct payloads)
        ("PUT", 4 * KiB, 8, 20_000, small_budget, 64),
        ("GET", 4 * KiB, 8, 50_000, small_budget, 64),
        ("PUT", 64 * MiB, 1, 3 if args.quick else 4, 60.0, 2),
        ("GET", 64 * MiB, 1, 4 if args.quick else 6, 60.0, 2),
    ]
    server = Tierstore()
    server.start()
    try:
        signer = Signer("127.0.0.1", server.port, server.access_key, server.secret_key)
        conn = Conn("127.0.0.1", server.port)
        for bucket in ("plain", "sse"):
            assert conn.do(signer.request("PUT", f"/{bucket}")).status == 200
        conn.close()
        print(f"tierstore {server.info.get('tiers', '')}; {rounds} round(s), median shown", file=sys.stderr)
        header = f"{'shape':<14}{'mode':<7}{'ops/s':>9}{'MiB/s':>9}{'P50 ms':>9}{'P99 ms':>9}{'errors':>8}"
        print(header)
        for op, size, concurrency, count, budget, distinct in shapes:
            payloads = [os.urandom(size) for _ in range(distinct)]
            results: dict[str, list[LoadResult]] = {"plain": [], "sse": []}
            for _ in range(rounds):
                for mode in ("plain", "sse"):
                    results[mode].append(
                        shape(
                            server,
                            signer,
                            mode,
                            mode == "sse",
                            op,
                            size,
                            concurrency,
                            count,
                            budget,
                            payloads,
                        )
                    )
            name = f"{op} {size // MiB} MiB" if size >= MiB else f"{op} {size // KiB} KiB"
            medians = {}
            for mode, runs in results.items():
                runs.sort(key=lambda r: r.ops_s)
                best = runs[len(runs) // 2]
                medians[mode] = best
                print(
                    f"{name:<14}{mode:<7}{best.ops_s:>9.1f}{best.mib_s:>9.1f}{best.p50_ms:>9.2f}{best.p99_ms:>9.2f}"
                    f"{sum(r.errors for r in runs):>8}"
                )
                for sample in best.error_samples:
                    print(f"    {sample}", file=sys.stderr)
            ratio = medians["sse"].ops_s / medians["plain"].ops_s if medians["plain"].ops_s else float("nan")
            print(
                f"{name:<14}{'ratio':<7}{ratio:>9.2f}  (SSE / plain throughput; per-round "
                f"{statistics.median([r.ops_s for r in results['sse']]):.1f} vs "
                f"{statistics.median([r.ops_s for r in results['plain']]):.1f} ops/s)"
            )
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
