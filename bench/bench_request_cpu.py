"""Server CPU per small request, old tree against new tree, in one interleaved run.

    .venv/bin/python bench/bench_request_cpu.py --old /tmp/tierstore-base [--rounds 3] [--duration 8] [--size 4KiB] [--workers 1]

Starts two `tierstore serve` (default configuration, fresh temp dirs): OLD from the source tree
given (e.g. `git archive <commit> | tar -x -C DIR`), NEW from this checkout. Then, for 4 KiB GET
and 4 KiB PUT at 16 clients, runs `/work/shared/tools/s3bench.py` against both endpoints with
`--rounds` interleaved rounds (old, new, new, old, ...) and `--server-pid` so that s3bench reads
each server's utime+stime (/proc/<pid>/stat) around the timed window. Prints s3bench's
comparison (medians of the rounds) and the µs of server CPU per request of each tree.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from servers import Tierstore  # noqa: E402

S3BENCH = Path("/work/shared/tools/s3bench.py")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", type=Path, required=True, help="source tree of the baseline")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--ops", default="get,put")
    ap.add_argument("--size", default="4KiB", help="object size, as s3bench takes it (e.g. 64MiB)")
    ap.add_argument("--workers", type=int, default=1, help="`serve --workers` of both servers")
    args = ap.parse_args()
    servers = {"old": Tierstore(args.workers), "new": Tierstore(args.workers)}
    servers["old"].cwd = args.old.resolve()
    out = Path(tempfile.mkdtemp(prefix="bench-request-cpu-")) / "runs.jsonl"
    try:
        for s in servers.values():
            s.start()
        summary: dict[str, dict[str, float]] = {}
        for op in args.ops.split(","):
            cmd = [
                sys.executable,
                str(S3BENCH),
                "--op",
                op,
                "--size",
                args.size,
                "-c",
                str(args.concurrency),
                "--duration",
                str(args.duration),
                "--rounds",
                str(args.rounds),
                "--access-key",
                servers["old"].access_key,
                "--secret-key",
                servers["old"].secret_key,
                "--json-out",
                str(out),
                "--label",
                f"request-cpu {op} {args.size}",
            ]
            for name, s in servers.items():
                cmd += ["--endpoint", f"{name}={s.endpoint}", "--server-pid", f"{name}={s.pid}"]
            print("+", " ".join(cmd), flush=True)
            subprocess.run(cmd, check=True)
            runs = [json.loads(line) for line in out.read_text().splitlines()]
            for name in servers:
                mine = [
                    r
                    for r in runs
                    if r.get("type") != "compare"
                    and r.get("endpoint_name") == name
                    and r.get("op") == op
                    and "server_cpu_ms_per_op" in r
                ]
                us = [1000 * r["server_cpu_ms_per_op"] for r in mine]
                summary.setdefault(op, {})[name] = statistics.median(us)
                print(
                    f"{op} {name}: server CPU µs/request per round {[round(u) for u in us]}, "
                    f"median {statistics.median(us):.0f}",
                    flush=True,
                )
        print(json.dumps(summary))
        print(f"all runs: {out}")
    finally:
        for s in servers.values():
            s.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
