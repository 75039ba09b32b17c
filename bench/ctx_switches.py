"""Server CPU and context switches per request while bench_peers' load generator drives one shape.

    .venv/bin/python bench/ctx_switches.py --shape put-4KiB-c16 [--rounds 3]

Starts `tierstore serve` from this checkout (default configuration, temp dir; bench/servers.py),
prepares the shape's data, runs one untimed round, then `--rounds` rounds. Per round it prints
ops/s, the server's voluntary and involuntary context switches per request (summed over its threads,
/proc/PID/task/*/status) and its CPU per request. Hand-offs between threads show up as voluntary
switches, which CPU profiles do not count. For an A/B, run it from a worktree of the old commit too.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_peers as bp  # noqa: E402
from servers import cpu_seconds  # noqa: E402


def switches(pid: int) -> tuple[int, int]:
    """(voluntary, involuntary) context switches of every live thread of `pid`."""
    voluntary = involuntary = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        try:
            lines = status.read_text().splitlines()
        except (FileNotFoundError, ProcessLookupError):  # a thread that just ended
            continue
        for line in lines:
            if line.startswith("voluntary_ctxt_switches"):
                voluntary += int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches"):
                involuntary += int(line.split()[1])
    return voluntary, involuntary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--shape", required=True, help="a bench_peers shape name (put-4KiB-c16, get-64MiB-c2, ...)"
    )
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    shape = next((s for s in bp.FULL.shapes if s.name == args.shape), None)
    if shape is None:
        raise SystemExit(f"unknown shape {args.shape}")
    with bp.own_tierstore() as t:
        assert t.server.proc is not None
        pid = t.server.proc.pid
        small = bp.payloads(4 * bp.KiB, 256)
        large = bp.payloads(64 * bp.MiB, 2) if shape.size == 64 * bp.MiB else []
        bp.setup_target(t, small, large, gpu=shape.op == "gget")
        bp.run_shape(t, shape, 99, small, large)  # warm-up
        for n in range(args.rounds):
            (v0, i0), c0 = switches(pid), cpu_seconds(pid)
            r = bp.run_shape(t, shape, 100 + n, small, large)
            (v1, i1), c1 = switches(pid), cpu_seconds(pid)
            ops = max(1, r.ops + r.errors)
            print(
                f"{shape.name} {r.ops_s:,.1f} ops/s  voluntary switches/op {(v1 - v0) / ops:.1f}  "
                f"involuntary/op {(i1 - i0) / ops:.1f}  server CPU {1000 * (c1 - c0) / ops:.2f} ms/op",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
