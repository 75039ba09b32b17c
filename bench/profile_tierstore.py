"""Profile a tierstore server (py-spy) while bench_peers' load generator drives one shape at it.

    .venv/bin/python bench/profile_tierstore.py --shape list [--keys 3000] [--seconds 20] [--py-spy PATH]
    .venv/bin/python bench/profile_tierstore.py --shape get-4KiB-c16
    .venv/bin/python bench/profile_tierstore.py --shape put-4KiB-c32 --out /tmp/prof

Starts `tierstore serve` (default configuration, temp dir), prepares the data the shape needs, then
runs the shape in a loop while `py-spy record --format raw` samples the server (non-idle threads
only) for `--seconds`. Prints the top functions by self and by inclusive share of the samples, and
keeps the collapsed stacks (`--out DIR/profile.txt`, loadable in speedscope / flamegraph.pl).
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_peers as bp  # noqa: E402
from servers import cpu_seconds  # noqa: E402


def find_py_spy(given: str | None) -> str:
    for c in (given, "/tmp/pyspy-venv/bin/py-spy", shutil.which("py-spy")):
        if c and Path(c).exists():
            return c
    raise SystemExit(
        "py-spy not found: python3 -m venv /tmp/pyspy-venv && /tmp/pyspy-venv/bin/pip install py-spy"
    )


def top(stacks: Path, n: int = 25) -> str:
    self_c: collections.Counter[str] = collections.Counter()
    incl_c: collections.Counter[str] = collections.Counter()
    total = 0
    for line in stacks.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        c = int(count)
        total += c
        frames = stack.split(";")
        self_c[frames[-1]] += c
        for f in set(frames):
            incl_c[f] += c
    out = [f"{total} samples (non-idle threads)", "", "self %  function (file:line)"]
    out += [f"{100 * c / total:6.1f}  {f}" for f, c in self_c.most_common(n)]
    out += ["", "inclusive %  function (file:line)"]
    out += [f"{100 * c / total:6.1f}  {f}" for f, c in incl_c.most_common(n)]
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--shape", required=True, help="list, or a bench_peers shape name (get-4KiB-c16, put-64MiB-c2, ...)"
    )
    ap.add_argument("--keys", type=int, default=3000, help="LIST bucket size (filled with 0-byte PUTs)")
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--rate", type=int, default=100, help="py-spy samples per second")
    ap.add_argument("--py-spy")
    ap.add_argument(
        "--gil", action="store_true", help="only samples holding the GIL (CPU spent in Python, not waits)"
    )
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    py_spy = find_py_spy(args.py_spy)
    out = args.out or Path(tempfile.mkdtemp(prefix="profile-tierstore-"))
    out.mkdir(parents=True, exist_ok=True)
    with bp.own_tierstore() as t:
        server = t.server
        shape = next((s for s in bp.FULL.shapes if s.name == args.shape), None)
        small = bp.payloads(4 * bp.KiB, 256)
        large = bp.payloads(64 * bp.MiB, 2) if shape and shape.size == 64 * bp.MiB else []
        bp.setup_target(t, small, large, gpu=bool(shape and shape.op == "gget"))
        if args.shape == "list":
            fill = bp.fill_list_bucket(t, 600, args.keys)
            print(f"LIST bucket: {fill}", flush=True)
        elif shape is None:
            raise SystemExit(f"unknown shape {args.shape}")
        stop = threading.Event()
        rounds = [0]

        def load() -> None:
            rnd = 0
            while not stop.is_set():
                if args.shape == "list":
                    passes = bp.list_full_pass(t, args.keys, 2.0)
                    print(
                        f"  list {passes['keys_s']:,.0f} keys/s page P50 {passes['page_p50_ms']:.1f} ms",
                        flush=True,
                    )
                else:
                    assert shape is not None
                    cpu0 = cpu_seconds(server.proc.pid) if server.proc else 0.0
                    r = bp.run_shape(t, shape, 100 + rnd, small, large)
                    cpu = (cpu_seconds(server.proc.pid) if server.proc else 0.0) - cpu0
                    per_op = (
                        1000 * cpu / max(1, r.ops + r.errors)
                    )  # includes the untimed warm-up: an upper bound
                    print(
                        f"  {shape.name} {r.ops_s:.1f} ops/s {r.mib_s:.1f} MiB/s P50 {r.p50_ms:.1f} ms"
                        f"  server CPU {per_op:.3f} ms/op",
                        flush=True,
                    )
                rnd += 1
                rounds[0] = rnd

        th = threading.Thread(target=load, daemon=True)
        th.start()
        time.sleep(1.0)
        stacks = out / "profile.txt"
        cmd = [
            py_spy,
            "record",
            "--pid",
            str(server.proc.pid if server.proc else 0),
            "--duration",
            str(args.seconds),
            "--rate",
            str(args.rate),
            "--format",
            "raw",
            "--output",
            str(stacks),
            "--subprocesses",
            "--nonblocking",
        ]
        if args.gil:
            cmd.append("--gil")
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=False, stdout=subprocess.DEVNULL)
        stop.set()
        th.join(60)
        report = top(stacks)
        (out / "top.txt").write_text(report)
        print(report)
        print(f"\ncollapsed stacks: {stacks}; load {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
