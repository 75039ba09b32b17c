"""4 KiB PUT ops/s and files created, pack files off vs on (#17), in one interleaved s3bench run.

    python bench/bench_packs.py [--duration 8] [--rounds 2] [--concurrency 16]

Two servers from this checkout with fresh data dirs: the default configuration, and the same with
`pack_threshold_bytes = 65536` on the hot tier. s3bench PUTs 4 KiB objects to both, interleaved
(A B A B ...), then the files under each server's tier domains are counted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from servers import Tierstore  # noqa: E402

S3BENCH = Path("/work/shared/tools/s3bench.py")


class PackedTierstore(Tierstore):
    def __init__(self) -> None:
        super().__init__()
        self.name = "tierstore-packs"

    def environment(self) -> dict[str, str]:
        return {**super().environment(), "TIERSTORE_TIERS_HOT_PACK_THRESHOLD_BYTES": "65536"}


def files_under(path: Path) -> int:
    return sum(len(names) for _, _, names in os.walk(path))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    off, on = Tierstore(), PackedTierstore()
    try:
        off.start()
        on.start()
        before = {s.name: files_under(s.data_dir / "domains") for s in (off, on)}
        cmd = [
            sys.executable,
            str(S3BENCH),
            "--op",
            "put",
            "--size",
            "4KiB",
            "--concurrency",
            str(args.concurrency),
            "--duration",
            str(args.duration),
            "--rounds",
            str(args.rounds),
            "--keep",
            "--verify",
            "32",
            "--access-key",
            off.access_key,
            "--secret-key",
            off.secret_key,
            "--endpoint",
            f"packs-off={off.endpoint}",
            "--endpoint",
            f"packs-on={on.endpoint}",
            "--server-pid",
            f"packs-off={off.pid}",
            "--server-pid",
            f"packs-on={on.pid}",
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        sys.stderr.write(done.stderr)
        runs = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        for run in runs:
            print(json.dumps(run))
        for server in (off, on):
            files = files_under(server.data_dir / "domains") - before[server.name]
            print(json.dumps({"server": server.name, "files_created": files}))
        return done.returncode
    finally:
        off.stop()
        on.stop()


if __name__ == "__main__":
    raise SystemExit(main())
