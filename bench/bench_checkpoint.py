"""S3Checkpoint save/load of a state dict on tierstore vs torch.save/torch.load to a local file.

One tierstore server (default configuration, started and stopped here), one state dict of random
float32 tensors, `--rounds` rounds with the side order alternating (round 0: tierstore first), medians.

- tierstore save: `with S3Checkpoint.writer(uri) as w: torch.save(state, w)` (s3torchconnector's
  streaming multipart upload; no StorageClass, so the object lands on `hot`: erasure 4+2, fsync'd).
- local save: `torch.save(state, f)` to a file in a temp dir, then `fsync` (tierstore fsyncs too).
- load: `torch.load(..., weights_only=True)` right after the save, so both read warm page cache.
Every load is checked tensor by tensor against the saved state (untimed). After each round the
object and the file are deleted (untimed); their on-disk size is measured first.

    .venv/bin/python bench/bench_checkpoint.py --mib 1024 --rounds 3 --out /tmp/ckpt.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import servers  # noqa: E402

MiB = 1024 * 1024
REGION = "us-east-1"


def disk_bytes(root: Path) -> int:
    """Allocated bytes (st_blocks) of every file under root."""
    total = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                pass
    return total


def make_state(mib: int, torch) -> dict[str, Any]:
    """`mib` MiB of float32 in 64 MiB weight tensors, plus small biases and some metadata."""
    g = torch.Generator().manual_seed(0)
    n = max(1, mib // 64)
    state: dict[str, Any] = {f"layers.{i}.weight": torch.randn(4096, 4096, generator=g) for i in range(n)}
    state.update({f"layers.{i}.bias": torch.randn(4096, generator=g) for i in range(n)})
    state["step"] = torch.tensor(1234)
    state["meta"] = {"epoch": 3, "lr": 3e-4}
    return state


def tensor_bytes(state: dict[str, Any]) -> int:
    return sum(v.numel() * v.element_size() for v in state.values() if hasattr(v, "numel"))


def check(state: dict[str, Any], back: dict[str, Any], torch, side: str) -> None:
    for k, v in state.items():
        same = torch.equal(back[k], v) if hasattr(v, "numel") else back[k] == v
        if not same:
            raise RuntimeError(f"{side}: {k} read back differs")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=1024, help="state dict size in MiB (the issue says 2048)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    import torch
    from s3torchconnector import S3Checkpoint, S3ClientConfig

    load0 = os.getloadavg()
    state = make_state(args.mib, torch)
    nbytes = tensor_bytes(state)
    mib = nbytes / MiB
    print(
        f"state dict: {len(state)} entries, {mib:.0f} MiB of tensors; nproc {os.cpu_count()}, "
        f"load {load0[0]:.1f}",
        flush=True,
    )
    server = servers.Tierstore()
    tmp = Path(tempfile.mkdtemp(prefix="bench-ckpt-"))
    rows: list[dict[str, float]] = []
    loads: list[float] = [load0[0]]
    try:
        server.start()
        for k, v in {
            "AWS_ACCESS_KEY_ID": server.access_key,
            "AWS_SECRET_ACCESS_KEY": server.secret_key,
            "AWS_REGION": REGION,
            "AWS_EC2_METADATA_DISABLED": "true",
        }.items():
            os.environ[k] = v
        import boto3

        s3 = boto3.client(
            "s3",
            endpoint_url=server.endpoint,
            aws_access_key_id=server.access_key,
            aws_secret_access_key=server.secret_key,
            region_name=REGION,
        )
        s3.create_bucket(Bucket="ckpt")
        ck = S3Checkpoint(
            region=REGION,
            endpoint=server.endpoint,
            s3client_config=S3ClientConfig(force_path_style=True, max_attempts=1),
        )
        data_dir = server.data_dir
        local = tmp / "state.pt"
        for r in range(args.rounds):
            row: dict[str, float] = {}
            uri, key = f"s3://ckpt/r{r}/state.pt", f"r{r}/state.pt"
            for side in ("s3", "local") if r % 2 == 0 else ("local", "s3"):
                if side == "s3":
                    base_disk = disk_bytes(data_dir)  # the previous round's blobs may still await GC
                    t0 = time.perf_counter()
                    with ck.writer(uri) as w:
                        torch.save(state, w)
                    row["s3_save_s"] = time.perf_counter() - t0
                    row["s3_object_bytes"] = s3.head_object(Bucket="ckpt", Key=key)["ContentLength"]
                    row["s3_disk_bytes"] = disk_bytes(data_dir) - base_disk
                    t0 = time.perf_counter()
                    with ck.reader(uri) as rd:
                        # torch types `f` as IO[bytes]; any binary file object works (S3Reader is a BufferedIOBase).
                        back = torch.load(rd, weights_only=True)  # type: ignore[arg-type]
                    row["s3_load_s"] = time.perf_counter() - t0
                    check(state, back, torch, "tierstore")
                    del back
                    s3.delete_object(Bucket="ckpt", Key=key)
                else:
                    t0 = time.perf_counter()
                    with open(local, "wb") as f:
                        torch.save(state, f)
                        f.flush()
                        os.fsync(f.fileno())
                    row["local_save_s"] = time.perf_counter() - t0
                    row["local_disk_bytes"] = local.stat().st_blocks * 512
                    t0 = time.perf_counter()
                    with open(local, "rb") as f:
                        back = torch.load(f, weights_only=True)
                    row["local_load_s"] = time.perf_counter() - t0
                    check(state, back, torch, "local")
                    del back
                    local.unlink()
            row["load_avg"] = os.getloadavg()[0]
            loads.append(row["load_avg"])
            rows.append(row)
            print(
                f"round {r}: "
                + "  ".join(
                    f"{k[:-2]} {mib / row[k]:6.1f} MiB/s ({row[k]:.1f}s)"
                    for k in ("s3_save_s", "local_save_s", "s3_load_s", "local_load_s")
                )
                + f"  on disk: tierstore {row['s3_disk_bytes'] / MiB:.0f} MiB, local {row['local_disk_bytes'] / MiB:.0f} MiB"
                f"  load {row['load_avg']:.1f}",
                flush=True,
            )
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]} if rows else {}
    summary: dict[str, Any] = {
        "mib": mib,
        "rounds": rows,
        "median": med,
        "save_mib_s": {"tierstore": mib / med["s3_save_s"], "local": mib / med["local_save_s"]},
        "load_mib_s": {"tierstore": mib / med["s3_load_s"], "local": mib / med["local_load_s"]},
        "load_avg": {"min": min(loads), "max": max(loads), "end": os.getloadavg()[0]},
        "nproc": os.cpu_count(),
        "command": " ".join([sys.executable, *sys.argv]),
    }
    print("\n| op | tierstore MiB/s | local file MiB/s | tierstore / local |\n| --- | ---: | ---: | ---: |")
    for op in ("save", "load"):
        t, loc = summary[f"{op}_mib_s"]["tierstore"], summary[f"{op}_mib_s"]["local"]
        print(f"| {op} ({mib:.0f} MiB) | {t:.1f} | {loc:.1f} | {t / loc:.2f} |")
    print(
        f"on disk per copy: tierstore {med['s3_disk_bytes'] / MiB:.0f} MiB (object {med['s3_object_bytes'] / MiB:.0f} MiB), "
        f"local {med['local_disk_bytes'] / MiB:.0f} MiB; load average {min(loads):.1f}-{max(loads):.1f}"
    )
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
