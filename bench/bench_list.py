"""ListObjectsV2 on a big bucket: keys/s over full passes, first- and last-page latency.

    .venv/bin/python bench/bench_list.py [--keys 1000000] [--reps 100] [--pass-seconds 10] [--out FILE.json]

Starts `tierstore serve` (default configuration, temp dir; bench/servers.py), creates the LIST
bucket over S3, fills it with `--keys` zero-byte objects through the catalog (bench/fill_bucket.py:
minutes for a million keys, where 0-byte PUTs would take hours), then measures with bench_peers'
signed raw-HTTP client, one connection, MaxKeys=1000:

  first / last page   the first page, and the page StartAfter the key before the last 1,000,
                      each `--reps` times: P50 / P99 ms (flat = the page cost does not grow with
                      the position in the bucket)
  full passes         the whole bucket following continuation tokens, passes repeated until
                      `--pass-seconds` (at least one): keys/s, page P50 / P99 ms

Every page is checked (order, KeyCount, the first key expected). The server is stopped and its
temp dir removed at the end, also on errors and Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_peers as bp  # noqa: E402
import fill_bucket  # noqa: E402


def run(keys: int, reps: int, pass_seconds: float) -> dict[str, Any]:
    with bp.own_tierstore() as t:
        server = t.server
        assert server.tmp is not None
        t.one(t.signer.request("PUT", t.path(bp.LIST_BUCKET)))
        fill = fill_bucket.fill(fill_bucket.catalog_path(server.tmp / "data"), bp.LIST_BUCKET, keys)
        print(f"filled: {fill}", flush=True)
        pages = bp.list_pages(t, keys, reps)
        for name, r in pages.items():
            print(
                f"{name} page: P50 {r['p50_ms']:.1f} ms  P99 {r['p99_ms']:.1f} ms  ({r['n']} requests; "
                f"client parse {r['client_parse_ms']:.2f} ms of it)",
                flush=True,
            )
        passes = bp.list_full_pass(t, keys, pass_seconds)
        print(
            f"full passes: {passes['keys_s']:,.0f} keys/s over {passes['passes']} pass(es), {passes['pages']} pages, "
            f"page P50 {passes['page_p50_ms']:.1f} ms  P99 {passes['page_p99_ms']:.1f} ms",
            flush=True,
        )
        return {
            "keys": keys,
            "fill": fill,
            "pages": pages,
            "full_passes": passes,
            "load": os.getloadavg(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=100, help="requests of the first and of the last page each")
    ap.add_argument("--pass-seconds", type=float, default=10.0, help="start no new full pass after this")
    ap.add_argument("--out", type=Path, help="also write the figures as JSON")
    args = ap.parse_args()
    result = run(args.keys, args.reps, args.pass_seconds)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
