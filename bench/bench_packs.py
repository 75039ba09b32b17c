"""4 KiB PUT ops/s and files created, pack files on vs off (#17), in one interleaved s3bench run;
then a delete-heavy workload on the packed server and what its compactor reclaims.

    python bench/bench_packs.py [--duration 8] [--rounds 2] [--concurrency 16] [--delete-fraction 0.8]

Three servers from this checkout with fresh data dirs: the default configuration (packs on: 128
KiB `pack_threshold_bytes` on every erasure-coded tier; compaction every 2 s and a retire grace
of 2 s here so the run is short), the same with `pack_threshold_bytes = 0` on every tier (a file
per shard), and packs on with small objects striped k+m instead of m+1 whole copies
(`small_object_threshold = 0`: the replica-vs-stripe decision, measured). s3bench PUTs 4 KiB objects to all three, interleaved
(A B C A B C ...); the files under each server's tier domains are counted (and given per 10k
objects), with the bytes on the drives per object; then 4 KiB GETs the same way. Then, on the packed server, `--delete-fraction`
of the objects are deleted (DeleteObjects, 1000 keys a request) and the pack bytes are followed
until the compactor has reclaimed the dead space: bytes before/after, seconds, and a sample of the
objects left read back whole.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from servers import Tierstore  # noqa: E402

S3BENCH = Path("/work/shared/tools/s3bench.py")


TIERS = ("hot", "warm", "cold")


class PackedTierstore(Tierstore):
    """The default (packs on), compacting every 2 s instead of 60 so that the run can watch it."""

    def __init__(self) -> None:
        super().__init__()
        self.name = "tierstore-packs"

    def environment(self) -> dict[str, str]:
        return {
            **super().environment(),
            "TIERSTORE_TIERS_HOT_PACK_COMPACT_SECONDS": "2",
            "TIERSTORE_RETIRE_GRACE_SECONDS": "2",  # deleted blobs removed 2 s after, not 30
        }


class UnpackedTierstore(Tierstore):
    """Packs off on every erasure-coded tier: a file per shard."""

    def __init__(self) -> None:
        super().__init__()
        self.name = "tierstore-files"

    def environment(self) -> dict[str, str]:
        off = {f"TIERSTORE_TIERS_{t.upper()}_PACK_THRESHOLD_BYTES": "0" for t in TIERS}
        return {**super().environment(), **off}


class StripedTierstore(PackedTierstore):
    """Packs on, and small objects striped k+m like big ones (no m+1 whole copies): the other side
    of the replica-vs-stripe decision for small objects (erasure/README.md)."""

    def __init__(self) -> None:
        super().__init__()
        self.name = "tierstore-stripe"

    def environment(self) -> dict[str, str]:
        return {**super().environment(), "TIERSTORE_TIERS_HOT_SMALL_OBJECT_THRESHOLD": "0"}


def files_under(path: Path) -> int:
    return sum(len(names) for _, _, names in os.walk(path))


def pack_bytes(path: Path) -> int:
    total = 0
    for pack in path.rglob("*.tsp"):
        with contextlib.suppress(FileNotFoundError):  # compacted away between listing and stat
            total += pack.stat().st_size
    return total


def client(server: Tierstore) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        aws_access_key_id=server.access_key,
        aws_secret_access_key=server.secret_key,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, max_pool_connections=8),
    )


def keys_of(server: Tierstore, bucket: str) -> list[str]:
    pages = client(server).get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def delete_heavy(server: Tierstore, bucket: str, fraction: float, limit: float) -> dict[str, float]:
    """Delete `fraction` of the bucket's objects; follow the pack bytes until compaction settles."""
    s3 = client(server)
    keys = keys_of(server, bucket)
    step = max(1, round(1 / (1 - fraction))) if fraction < 1 else 0
    doomed = [k for n, k in enumerate(keys) if not step or n % step]
    gone = set(doomed)
    kept = [k for k in keys if k not in gone]
    domains = server.data_dir / "domains"
    before = pack_bytes(domains)
    began = time.monotonic()
    for at in range(0, len(doomed), 1000):
        batch = [{"Key": k} for k in doomed[at : at + 1000]]
        s3.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True})
    deleted_in = time.monotonic() - began
    after_delete = pack_bytes(domains)
    began = time.monotonic()
    last, changed = after_delete, time.monotonic()
    # Deleted blobs are removed after the retire grace (2 s here), then compacted (every 2 s):
    # settled once the pack bytes went down and then stayed put for 6 s (three compaction passes).
    while time.monotonic() - began < limit:
        time.sleep(0.5)
        now = pack_bytes(domains)
        if now != last:
            last, changed = now, time.monotonic()
        elif last < after_delete and time.monotonic() - changed >= 6:
            break
    settled_in = changed - began
    bad = 0
    for key in kept[:: max(1, len(kept) // 500)]:  # a sample of the survivors, read back
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        bad += len(body) != 4096
    return {
        "objects": len(keys),
        "deleted": len(doomed),
        "delete_seconds": round(deleted_in, 2),
        "pack_bytes_before": before,
        "pack_bytes_after_delete": after_delete,
        "pack_bytes_after_compaction": last,
        "reclaimed_fraction": round(1 - last / before, 3) if before else 0.0,
        "compaction_seconds": round(settled_in, 1),
        "survivors_checked_bad": bad,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--delete-fraction", type=float, default=0.8)
    parser.add_argument("--no-get", dest="get", action="store_false", help="skip the 4 KiB GET comparison")
    args = parser.parse_args()
    off, on, striped = UnpackedTierstore(), PackedTierstore(), StripedTierstore()
    servers = ((on, "packs-on"), (off, "packs-off"), (striped, "packs-stripe"))
    try:
        for server, _ in servers:
            server.start()
        before = {s.name: files_under(s.data_dir / "domains") for s, _ in servers}
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
            "--objects",
            "1000000",  # a key space larger than any run: every PUT of a round makes a new object
            "--keep",
            "--verify",
            "32",
            "--bucket",
            "packs",
            "--access-key",
            on.access_key,
            "--secret-key",
            on.secret_key,
            "--endpoint",
            f"packs-on={on.endpoint}",
            "--endpoint",
            f"packs-off={off.endpoint}",
            "--server-pid",
            f"packs-on={on.pid}",
            "--server-pid",
            f"packs-off={off.pid}",
            "--endpoint",
            f"packs-stripe={striped.endpoint}",
            "--server-pid",
            f"packs-stripe={striped.pid}",
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        sys.stderr.write(done.stderr)
        runs = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        for run in runs:
            print(json.dumps(run))
        for server, label in servers:
            files = files_under(server.data_dir / "domains") - before[server.name]
            objects = len(keys_of(server, "packs"))  # rounds overwrite the same keys: count them
            per_10k = round(files / objects * 10_000, 1) if objects else None
            disk = sum(p.stat().st_size for p in (server.data_dir / "domains").rglob("*") if p.is_file())
            print(json.dumps({"server": label, "bytes_on_drives_per_object": round(disk / max(objects, 1))}))
            print(json.dumps({"server": label, "objects_put": objects, "files_created": files,
                              "files_per_10k_objects": per_10k}))  # fmt: skip
        if done.returncode == 0 and args.get:
            # 4 KiB GETs of objects prepared in a bucket of their own: one record read (replica)
            # against k records (striped), packs against files.
            get = [*cmd]
            get[get.index("put")] = "get"
            get[get.index("1000000")] = "400"
            get[get.index("packs")] = "packs-get"
            get.remove("--keep")
            reads = subprocess.run(get, capture_output=True, text=True, timeout=900)
            sys.stderr.write(reads.stderr)
            for line in reads.stdout.splitlines():
                if line.startswith("{") and '"type": "compare"' in line:
                    print(line)
        if done.returncode == 0 and args.delete_fraction > 0:
            print(
                json.dumps(
                    {
                        "server": "packs-on",
                        "delete_heavy": delete_heavy(on, "packs", args.delete_fraction, 240),
                    }
                )
            )
        return done.returncode
    finally:
        for server, _ in servers:
            server.stop()


if __name__ == "__main__":
    raise SystemExit(main())
