"""Feed simulated accelerators through a real torch DataLoader: tierstore tiers vs local files.

MLPerf Storage's method, scaled to one small box: each simulated accelerator is a consumer loop that
takes a batch from its own DataLoader, then sleeps the model's compute time for that batch;
accelerator utilisation AU = compute time / wall time. Sources: the same samples written once to
tierstore with StorageClass EXPRESS_ONEZONE (gpu-direct), STANDARD (hot) and STANDARD_IA (warm) and
read through s3torchconnector's S3MapDataset, and as local files read by a plain torch Dataset.
See bench/README.md ("feed/run.py") for what every number means.

    .venv/bin/python bench/feed/run.py --out /tmp/feed.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import loaders  # noqa: E402
import servers  # noqa: E402

KiB, MiB = 1024, 1024 * 1024
BUCKET = "feed"
TIERS = {"gpu-direct": "EXPRESS_ONEZONE", "hot": "STANDARD", "warm": "STANDARD_IA"}
SOURCES = ["local", *TIERS]


@dataclass(frozen=True)
class Workload:
    name: str
    sample_bytes: int
    batch: int
    compute_s: float
    samples: int  # dataset size written once per source
    batches: int  # measured batches per accelerator (after the warm-up)


# mlcommons/storage configs/dlio/workload/resnet50_h100.yaml: record_length_bytes 114660, batch_size
# 400, computation_time 0.224. unet3d_h100.yaml: batch_size 7, computation_time 0.323 (samples there
# are ~140 MiB; scaled down to 4 MiB here so a dataset fits this box, see bench/README.md).
WORKLOADS = {
    "resnet50": Workload("resnet50", 112 * KiB, 400, 0.224, 2000, 60),
    "unet3d": Workload("unet3d", 4 * MiB, 7, 0.323, 64, 40),
}


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


class LoadSampler(threading.Thread):
    """1-minute load average every 2 s while a run is going."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.samples.append(loadavg())
            self.stop.wait(2.0)


def s3_client(server: servers.Server):
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        aws_access_key_id=server.access_key,
        aws_secret_access_key=server.secret_key,
        region_name=loaders.REGION,
        config=Config(retries={"max_attempts": 1}, max_pool_connections=16),
    )


def prepare(server: servers.Server, wl: Workload, root: Path, sources: list[str]) -> dict[str, Any]:
    """Write the dataset once: local files, and one object per sample on each tier. Returns keys/paths."""
    rng = random.Random(wl.name)
    data_dir = root / wl.name
    data_dir.mkdir(parents=True)
    paths = [data_dir / f"sample-{i:06d}.bin" for i in range(wl.samples)]
    for i, p in enumerate(paths):
        p.write_bytes(loaders.make_sample(i, wl.sample_bytes, rng))
    s3 = s3_client(server)
    clients: dict[int, Any] = {}
    uris: dict[str, list[str]] = {}
    timings: dict[str, float] = {}
    for tier in [s for s in sources if s != "local"]:
        keys = [f"{wl.name}/{tier}/{p.name}" for p in paths]

        def put(i: int, keys: list[str] = keys, tier: str = tier) -> None:
            c = clients.setdefault(threading.get_ident(), s3_client(server))
            c.put_object(Bucket=BUCKET, Key=keys[i], Body=paths[i].read_bytes(), StorageClass=TIERS[tier])

        t0 = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(put, range(len(keys))))
        timings[tier] = time.monotonic() - t0
        for key in (keys[0], keys[-1]):
            placed = s3.head_object(Bucket=BUCKET, Key=key)["ResponseMetadata"]["HTTPHeaders"][
                "x-tierstore-tier"
            ]
            if placed != tier:
                raise RuntimeError(f"{key}: StorageClass {TIERS[tier]} landed on {placed}, not {tier}")
        uris[tier] = [f"s3://{BUCKET}/{k}" for k in keys]
        mib = wl.samples * wl.sample_bytes / MiB
        print(
            f"  put {wl.name} -> {tier}: {wl.samples} x {wl.sample_bytes // KiB} KiB in {timings[tier]:.1f}s "
            f"({mib / timings[tier]:.1f} MiB/s), placement checked",
            flush=True,
        )
    return {"paths": paths, "uris": uris, "put_s": timings}


def run_one(
    server: servers.Server,
    wl: Workload,
    source: str,
    n: int,
    data: dict[str, Any],
    *,
    workers: int,
    prefetch: int,
    max_s: float,
) -> dict[str, Any]:
    """N accelerator threads, each with its own DataLoader (`workers` processes) over its shard."""
    warmup = workers * prefetch  # the prefetch queue a loader can fill before the clock starts
    per_acc = warmup + wl.batches
    its = []
    for rank in range(n):
        sampler = loaders.ShardSampler(wl.samples, rank, n, per_acc * wl.batch, seed=rank)
        loader = loaders.make_loader(
            source,
            uris=data["uris"].get(source, []),
            paths=data["paths"],
            endpoint=server.endpoint,
            batch_size=wl.batch,
            workers=workers,
            sampler=sampler,
            prefetch=prefetch,
        )
        its.append((iter(loader), sampler.order()))  # forks the workers here, one loader at a time
    results: list[dict[str, Any]] = [{} for _ in range(n)]
    start = threading.Barrier(n + 1)
    deadline_box: list[float] = []

    def accelerator(rank: int) -> None:
        it, order = its[rank]
        res = results[rank]
        start.wait()
        deadline = deadline_box[0]
        t_first = time.monotonic()
        t0 = t_first
        done = measured = 0
        wait_s = 0.0
        try:
            for b in range(per_acc):
                if b == warmup:
                    t0 = time.monotonic()
                t_w = time.monotonic()
                batch = next(it)
                if b >= warmup:
                    wait_s += time.monotonic() - t_w
                want = order[b * wl.batch : (b + 1) * wl.batch]
                if batch.shape != (wl.batch, wl.sample_bytes) or loaders.sample_index(batch) != want:
                    raise RuntimeError(f"batch {b}: wrong samples or shape {tuple(batch.shape)}")
                del batch
                time.sleep(wl.compute_s)  # the accelerator computes; its loader keeps prefetching
                done += 1
                measured += b >= warmup
                if time.monotonic() >= deadline:
                    break
        except Exception as exc:  # noqa: BLE001
            res["error"] = f"{type(exc).__name__}: {exc}"[:300]
        t_end = time.monotonic()
        if measured >= 3:
            res.update(window_s=t_end - t0, batches=measured, mode="steady")
        else:  # never got past the warm-up before the deadline: whole run, warm-up included
            res.update(window_s=t_end - t_first, batches=done, mode="whole")
        res["au"] = res["batches"] * wl.compute_s / res["window_s"] if res["window_s"] > 0 else 0.0
        res["wait_s"] = wait_s

    threads = [threading.Thread(target=accelerator, args=(r,), daemon=True) for r in range(n)]
    for t in threads:
        t.start()
    load = LoadSampler()
    load.start()
    cpu0, t_run = servers.cpu_seconds(server.pid), time.monotonic()
    deadline_box.append(t_run + max_s)
    start.wait()
    for t in threads:
        t.join(max_s + 120)
    wall = time.monotonic() - t_run
    server_cpu = servers.cpu_seconds(server.pid) - cpu0
    load.stop.set()
    for it, _ in its:
        if isinstance(it, _MultiProcessingDataLoaderIter):  # with workers > 0
            it._shutdown_workers()  # noqa: SLF001 - stop the worker processes now, not at GC time
    its.clear()
    errors = [r["error"] for r in results if "error" in r]
    samples_s = sum(r["batches"] * wl.batch / r["window_s"] for r in results if r.get("window_s"))
    return {
        "workload": wl.name,
        "source": source,
        "accelerators": n,
        "workers_per_accelerator": workers,
        "au_mean": statistics.fmean(r["au"] for r in results),
        "au_min": min(r["au"] for r in results),
        "samples_s": samples_s,
        "mib_s": samples_s * wl.sample_bytes / MiB,
        "batches": [r["batches"] for r in results],
        "modes": sorted({r["mode"] for r in results}),
        "wall_s": wall,
        "server_cpu_s": server_cpu,
        "server_cores": server_cpu / wall,
        "load_min": min(load.samples, default=loadavg()),
        "load_max": max(load.samples, default=loadavg()),
        "errors": errors,
    }


def fmt(row: dict[str, Any]) -> str:
    err = f"  ERRORS {row['errors'][:1]}" if row["errors"] else ""
    return (
        f"  {row['workload']:8s} {row['source']:10s} N={row['accelerators']}  AU {row['au_mean'] * 100:5.1f}% "
        f"(min {row['au_min'] * 100:5.1f}%)  {row['samples_s']:7.0f} samples/s  {row['mib_s']:6.1f} MiB/s  "
        f"server {row['server_cores']:.2f} cores  load {row['load_min']:.1f}-{row['load_max']:.1f}  "
        f"batches {row['batches']} {','.join(row['modes'])}{err}"
    )


def sweep(server: servers.Server, wl: Workload, data: dict[str, Any], args: argparse.Namespace) -> list[dict]:
    """N = 1, 2, 4, ...: every source at each N (order rotated per N); stop after the first N where
    local files fall below the AU threshold (but not before --min-accelerators), or at --max-accelerators."""
    rows = []
    n, step = 1, 0
    while n <= args.max_accelerators:
        order = args.sources[step % len(args.sources) :] + args.sources[: step % len(args.sources)]
        for source in order:
            row = run_one(
                server,
                wl,
                source,
                n,
                data,
                workers=args.workers,
                prefetch=args.prefetch,
                max_s=args.max_seconds,
            )
            print(fmt(row), flush=True)
            rows.append(row)
        local = [r for r in rows if r["source"] == "local" and r["accelerators"] == n]
        if local and local[0]["au_mean"] < args.au and n >= args.min_accelerators:
            break
        n, step = n * 2, step + 1
    return rows


def profile_server(
    server: servers.Server,
    wl: Workload,
    source: str,
    n: int,
    data: dict[str, Any],
    args: argparse.Namespace,
    out_dir: Path,
) -> dict[str, Any]:
    """py-spy record (raw collapsed stacks) of the server during one more run of the worst case."""
    raw = out_dir / f"pyspy-{wl.name}-{source}-n{n}.txt"
    duration = int(args.max_seconds)
    spy = subprocess.Popen(
        [
            args.py_spy,
            "record",
            "--pid",
            str(server.pid),
            "--duration",
            str(duration),
            "--rate",
            "50",
            "--format",
            "raw",
            "--nonblocking",
            "--gil",
            "--output",
            str(raw),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        time.sleep(1.0)
        row = run_one(
            server, wl, source, n, data, workers=args.workers, prefetch=args.prefetch, max_s=args.max_seconds
        )
        print("  (profiled)" + fmt(row), flush=True)
        _, err = spy.communicate(timeout=duration + 60)
    finally:
        if spy.poll() is None:
            spy.terminate()
            spy.wait(10)
    if not raw.exists():
        return {"error": err.decode(errors="replace")[-500:]}
    return {"row": row, "raw": str(raw), **summarise_stacks(raw)}


def summarise_stacks(raw: Path, top: int = 15) -> dict[str, Any]:
    """Self and inclusive sample shares per function from py-spy's raw (collapsed) output."""
    self_c: Counter[str] = Counter()
    incl_c: Counter[str] = Counter()
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        c = int(count)
        total += c
        frames = [
            f.split(" (")[0] + " (" + f.split(" (")[1].rsplit(":", 1)[0] + ")" if " (" in f else f
            for f in stack.split(";")
        ]
        frames = [f for f in frames if not f.startswith(("process ", "thread "))]
        if frames:
            self_c[frames[-1]] += c
        for f in set(frames):
            incl_c[f] += c
    pct = (lambda c: round(100.0 * c / total, 1)) if total else (lambda c: 0.0)
    return {
        "samples": total,
        "self": [(f, pct(c)) for f, c in self_c.most_common(top)],
        "inclusive": [(f, pct(c)) for f, c in incl_c.most_common(top + 10)],
    }


def largest_ok(rows: list[dict], source: str, au: float) -> int:
    ok = [r["accelerators"] for r in rows if r["source"] == source and r["au_mean"] >= au and not r["errors"]]
    return max(ok, default=0)


def report(rows: list[dict], workloads: list[str], sources: list[str], au: float) -> str:
    lines = []
    for name in workloads:
        wl_rows = [r for r in rows if r["workload"] == name]
        ns = sorted({r["accelerators"] for r in wl_rows})
        lines.append(f"\n{name}: AU % (samples/s)")
        lines.append("| source | " + " | ".join(f"N={n}" for n in ns) + f" | largest N with AU ≥ {au:.0%} |")
        lines.append("| --- |" + " ---: |" * (len(ns) + 1))
        for s in sources:
            cells = []
            for n in ns:
                r = next((r for r in wl_rows if r["source"] == s and r["accelerators"] == n), None)
                cells.append(
                    "—"
                    if r is None
                    else f"{r['au_mean'] * 100:.1f} ({r['samples_s']:.0f}){' ERR' if r['errors'] else ''}"
                )
            lines.append(f"| {s} | " + " | ".join(cells) + f" | {largest_ok(wl_rows, s, au) or 'none'} |")
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    model = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        "?",
    )
    return {
        "nproc": os.cpu_count(),
        "cpu": model,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "mem_gib": round(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default="resnet50,unet3d")
    ap.add_argument("--sources", default=",".join(SOURCES))
    ap.add_argument("--max-accelerators", type=int, default=8)
    ap.add_argument(
        "--min-accelerators",
        type=int,
        default=1,
        help="sweep at least up to this N even if local files already fell below the AU target",
    )
    ap.add_argument("--workers", type=int, default=2, help="DataLoader worker processes per accelerator")
    ap.add_argument(
        "--server-workers", type=int, default=1, help="`tierstore serve --workers N` (1: one process)"
    )
    ap.add_argument("--prefetch", type=int, default=2, help="DataLoader prefetch_factor")
    ap.add_argument("--max-seconds", type=float, default=25.0, help="wall-clock cap of one run")
    ap.add_argument("--au", type=float, default=0.90)
    ap.add_argument("--resnet-samples", type=int, default=WORKLOADS["resnet50"].samples)
    ap.add_argument("--unet-samples", type=int, default=WORKLOADS["unet3d"].samples)
    ap.add_argument(
        "--batches", type=int, default=0, help="measured batches per accelerator (0: per workload)"
    )
    ap.add_argument(
        "--profile",
        action="store_true",
        help="if the goal is missed, py-spy the server during the worst case",
    )
    ap.add_argument("--py-spy", default=shutil.which("py-spy") or "/tmp/pyspy-venv/bin/py-spy")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    args.sources = args.sources.split(",")
    names = args.workloads.split(",")
    wls = {}
    for name in names:
        wl = WORKLOADS[name]
        samples = args.resnet_samples if name == "resnet50" else args.unet_samples
        wls[name] = Workload(
            wl.name, wl.sample_bytes, wl.batch, wl.compute_s, samples, args.batches or wl.batches
        )

    for k, v in {
        "AWS_ACCESS_KEY_ID": "",
        "AWS_SECRET_ACCESS_KEY": "",
        "AWS_REGION": loaders.REGION,
        "AWS_DEFAULT_REGION": loaders.REGION,
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        os.environ[k] = v
    os.environ.pop("AWS_PROFILE", None)
    meta = {
        "command": " ".join([sys.executable, *sys.argv]),
        "date": time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "workers_per_accelerator": args.workers,
        "prefetch_factor": args.prefetch,
        "server_workers": args.server_workers,
        "max_seconds": args.max_seconds,
        "workloads": {n: vars(w) for n, w in wls.items()},
        "load_start": loadavg(),
    }
    print(f"machine: {meta['machine']}  load {meta['load_start']}", flush=True)
    out: dict[str, Any] = {"meta": meta, "rows": [], "prepare": {}}
    server = servers.Tierstore(workers=args.server_workers)
    root = Path(tempfile.mkdtemp(prefix="feed-local-"))
    try:
        server.start()
        os.environ["AWS_ACCESS_KEY_ID"] = server.access_key
        os.environ["AWS_SECRET_ACCESS_KEY"] = server.secret_key
        os.environ["AWS_ENDPOINT_URL"] = server.endpoint
        print(
            f"tierstore at {server.endpoint} (started in {server.start_s:.1f}s): {server.info.get('tiers')}",
            flush=True,
        )
        s3_client(server).create_bucket(Bucket=BUCKET)
        datas = {}
        for name, wl in wls.items():
            datas[name] = prepare(server, wl, root, args.sources)
            out["prepare"][name] = datas[name]["put_s"]
        for name, wl in wls.items():
            print(
                f"{name}: {wl.samples} samples x {wl.sample_bytes // KiB} KiB, batch {wl.batch}, "
                f"compute {wl.compute_s}s/batch, {wl.batches} measured batches per accelerator "
                f"(+{args.workers * args.prefetch} warm-up), cap {args.max_seconds:.0f}s per run",
                flush=True,
            )
            out["rows"] += sweep(server, wl, datas[name], args)
        text = report(out["rows"], names, args.sources, args.au)
        print(text, flush=True)
        goal = {}
        for name in names:
            wl_rows = [r for r in out["rows"] if r["workload"] == name]
            n_local = largest_ok(wl_rows, "local", args.au)
            met = n_local > 0 and all(
                any(
                    r["source"] == s
                    and r["accelerators"] == n_local
                    and r["au_mean"] >= args.au
                    and not r["errors"]
                    for r in wl_rows
                )
                for s in ("gpu-direct", "hot")
                if s in args.sources
            )
            goal[name] = {"local_largest_n": n_local, "met": met}
            print(
                f"goal {name}: local holds {args.au:.0%} up to N={n_local}; gpu-direct and hot at that N: "
                f"{'MET' if met else 'NOT met'}",
                flush=True,
            )
        out["goal"] = goal
        if args.profile and not all(g["met"] for g in goal.values()):
            # Worst case: the workload/tier (gpu-direct or hot) with the lowest AU at local's largest N.
            cands = [
                r
                for r in out["rows"]
                if r["source"] in ("gpu-direct", "hot")
                and r["accelerators"] == max(goal[r["workload"]]["local_largest_n"], 1)
            ]
            worst = min(cands, key=lambda r: r["au_mean"])
            print(
                f"profiling the server: {worst['workload']} {worst['source']} N={worst['accelerators']}",
                flush=True,
            )
            prof = profile_server(
                server,
                wls[worst["workload"]],
                worst["source"],
                worst["accelerators"],
                datas[worst["workload"]],
                args,
                (args.out.parent if args.out else Path("/tmp")),
            )
            out["profile"] = prof
            for kind in ("self", "inclusive"):
                print(f"  py-spy top ({kind}, % of {prof.get('samples', 0)} samples):")
                for f, p in prof.get(kind, [])[:15]:
                    print(f"    {p:5.1f}%  {f}")
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
        meta["load_end"] = loadavg()
        if args.out:
            args.out.write_text(json.dumps(out, indent=1, default=str))
    return 2 if any(r["errors"] for r in out["rows"]) else 0


if __name__ == "__main__":
    raise SystemExit(main())
