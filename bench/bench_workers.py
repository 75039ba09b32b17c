"""4 KiB PUT and GET ops/s: `tierstore serve --workers 1` against the default (one worker per core).

    .venv/bin/python bench/bench_workers.py [--rounds 3] [--duration 5] [--concurrency 16]

Both servers run at once on fresh data directories (the idle one costs nothing); the load comes
from the lean client `../shared/tools/s3bench.py` (this checkout's `bench/s3bench.py` measures
boto3-shaped traffic instead), runs interleaved A B A B for `--rounds` rounds; the summary is the
median per server and the ratio. Its table goes to stderr, one JSON line per run to stdout.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from servers import Tierstore  # noqa: E402

from server.workers import default_workers  # noqa: E402

TOOL = Path(__file__).resolve().parent.parent.parent / "shared" / "tools" / "s3bench.py"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per run")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--tool", type=Path, default=TOOL, help="the s3bench.py load generator")
    args = parser.parse_args()
    cores = default_workers()
    single, default = Tierstore(workers=1), Tierstore(workers=cores)
    print(f"bench_workers: --workers 1 vs the default ({cores} workers)", file=sys.stderr, flush=True)
    try:
        single.start()
        default.start()
        for op in ("put", "get"):
            subprocess.run(
                [
                    sys.executable,
                    str(args.tool),
                    "--endpoint",
                    f"workers-1={single.endpoint}",
                    "--endpoint",
                    f"workers-{cores}={default.endpoint}",
                    "--access-key",
                    single.access_key,
                    "--secret-key",
                    single.secret_key,
                    "--op",
                    op,
                    "--size",
                    "4KiB",
                    "--concurrency",
                    str(args.concurrency),
                    "--duration",
                    f"{args.duration}s",
                    "--objects",
                    "256",
                    "--rounds",
                    str(args.rounds),
                    "--label",
                    f"{op}-4KiB-c{args.concurrency}",
                ],
                check=True,
            )
    finally:
        single.stop()
        default.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
