"""S3 load generator: tierstore against a reference server (moto), both started here, same run.

    .venv/bin/python bench/s3bench.py [--quick] [--targets tierstore,moto] [--rounds 3] [--out FILE.json]

Each target is started on a free 127.0.0.1 port with a temp dir, and stopped (and its temp dir
removed) at the end, on error and on Ctrl-C. Shapes: PUT and GET of 4 KiB, 1 MiB and 64 MiB at
fixed concurrencies, and LIST (ListObjectsV2, pages of 1000). Each shape is bounded by an op count
and a time budget. Targets run interleaved per shape (tierstore shape X, moto shape X, ...; the
order alternates between rounds), every shape is repeated for several rounds and the summary is
the median of the rounds. Every response is checked (PUT ETag, GET length + ETag + bytes, LIST key
count and order); a shape with any error or mismatch is flagged ERR and gets no ratio.
See bench/README.md for what each number means.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import boto3
import botocore
from botocore.config import Config

sys.path.insert(0, str(Path(__file__).resolve().parent))

from servers import TARGETS, Server  # noqa: E402

KiB = 1024
MiB = 1024 * 1024
BUCKET = "s3bench"
LIST_BUCKET = "s3bench-list"
LIST_PAGE = 1000
MAX_ERRORS = 10  # a shape stops after this many failed ops
STOP = threading.Event()  # set on Ctrl-C / SIGTERM: workers finish their current op and return


@dataclass(frozen=True)
class Shape:
    name: str
    op: str  # "put" | "get" | "list"
    size: int  # object size in bytes (LIST: 0)
    concurrency: int
    max_ops: int  # upper bound on ops (LIST: pages, whole listing passes only)
    budget_s: float  # no new op (LIST: no new pass) is started after this


@dataclass(frozen=True)
class Plan:
    shapes: tuple[Shape, ...]
    list_keys: int
    rounds: int
    # distinct payloads per size (GET working set = this many keys, each with its own bytes)
    pool: dict[int, int] = field(default_factory=dict)


def _shapes(
    budget_small: float, budget_large: float, n_large: int, list_passes: int, list_keys: int, scale: float
) -> tuple[Shape, ...]:
    def n(x: int) -> int:
        return max(1, int(x * scale))

    pages = math.ceil(list_keys / LIST_PAGE)
    return (
        Shape("put-4KiB-c1", "put", 4 * KiB, 1, n(600), budget_small),
        Shape("put-4KiB-c8", "put", 4 * KiB, 8, n(1500), budget_small),
        Shape("get-4KiB-c1", "get", 4 * KiB, 1, n(800), budget_small),
        Shape("get-4KiB-c8", "get", 4 * KiB, 8, n(2000), budget_small),
        Shape("put-1MiB-c1", "put", MiB, 1, n(200), budget_small),
        Shape("put-1MiB-c8", "put", MiB, 8, n(400), budget_small),
        Shape("get-1MiB-c1", "get", MiB, 1, n(300), budget_small),
        Shape("get-1MiB-c8", "get", MiB, 8, n(600), budget_small),
        Shape("put-64MiB-c2", "put", 64 * MiB, 2, n_large, budget_large),
        Shape("get-64MiB-c2", "get", 64 * MiB, 2, n_large, budget_large),
        Shape(f"list-{list_keys}-c1", "list", 0, 1, list_passes * pages, budget_large),
    )


FULL = Plan(
    _shapes(budget_small=5.0, budget_large=45.0, n_large=6, list_passes=4, list_keys=5000, scale=1.0),
    list_keys=5000,
    rounds=3,
    pool={4 * KiB: 64, MiB: 16, 64 * MiB: 2},
)
QUICK = Plan(
    _shapes(budget_small=1.0, budget_large=15.0, n_large=2, list_passes=2, list_keys=2000, scale=0.25),
    list_keys=2000,
    rounds=3,
    pool={4 * KiB: 32, MiB: 8, 64 * MiB: 2},
)


# ---------------------------------------------------------------- payloads and clients


class Payloads:
    """Generated once: `pool[size]` distinct random buffers per size, with their MD5 (= S3 ETag)."""

    def __init__(self, pool: dict[int, int]) -> None:
        self.data: dict[int, list[bytes]] = {}
        self.md5: dict[int, list[str]] = {}
        for size, count in pool.items():
            self.data[size] = [os.urandom(size) for _ in range(count)]
            self.md5[size] = [hashlib.md5(b).hexdigest() for b in self.data[size]]

    def pick(self, size: int, i: int) -> tuple[bytes, str]:
        j = i % len(self.data[size])
        return self.data[size][j], self.md5[size][j]


def make_client(server: Server):
    cfg = Config(
        s3={"addressing_style": "path"},
        retries={"max_attempts": 1, "mode": "standard"},  # a failure is counted, not hidden by a retry
        max_pool_connections=2,
        connect_timeout=10,
        read_timeout=300,
    )
    return boto3.session.Session().client(
        "s3",
        endpoint_url=server.endpoint,
        aws_access_key_id=server.access_key,
        aws_secret_access_key=server.secret_key,
        region_name="us-east-1",
        config=cfg,
    )


class BenchError(Exception):
    """A response that does not match what was sent: the op counts as failed."""


def etag_of(resp: dict[str, Any]) -> str:
    return str(resp.get("ETag", "")).strip('"')


def get_key(size: int, i: int) -> str:
    return f"get/{size}/{i:04d}"


# ---------------------------------------------------------------- one shape on one target


@dataclass
class RunResult:
    target: str
    shape: str
    round: int
    ops: int
    errors: int
    wall_s: float
    ops_s: float
    mib_s: float
    p50_ms: float
    p99_ms: float
    keys_s: float = 0.0
    error_samples: list[str] = field(default_factory=list)


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile (P99 of 100 samples is the 99th smallest)."""
    if not sorted_values:
        return float("nan")
    k = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[k - 1]


class ShapeRunner:
    def __init__(self, server: Server, clients: list[Any], payloads: Payloads, plan: Plan) -> None:
        self.server = server
        self.clients = clients
        self.payloads = payloads
        self.plan = plan

    # -- ops: each returns (latency seconds, bytes moved, keys listed); it raises on any mismatch

    def op_put(self, client: Any, shape: Shape, rnd: int, i: int) -> tuple[float, int, int]:
        body, md5 = self.payloads.pick(shape.size, i)
        key = f"put/{shape.name}/r{rnd}/{i:06d}"
        t0 = time.perf_counter()
        resp = client.put_object(Bucket=BUCKET, Key=key, Body=body)
        dt_s = time.perf_counter() - t0
        if etag_of(resp) != md5:
            raise BenchError(f"PUT {key}: ETag {etag_of(resp)!r}, expected {md5!r}")
        return dt_s, shape.size, 0

    def op_get(self, client: Any, shape: Shape, rnd: int, i: int) -> tuple[float, int, int]:
        j = i % len(self.payloads.data[shape.size])
        body, md5 = self.payloads.pick(shape.size, j)
        key = get_key(shape.size, j)
        t0 = time.perf_counter()
        resp = client.get_object(Bucket=BUCKET, Key=key)
        got = resp["Body"].read()
        dt_s = time.perf_counter() - t0
        if len(got) != shape.size or resp.get("ContentLength") != shape.size:
            raise BenchError(
                f"GET {key}: {len(got)} bytes (Content-Length {resp.get('ContentLength')}), "
                f"expected {shape.size}"
            )
        if etag_of(resp) != md5:
            raise BenchError(f"GET {key}: ETag {etag_of(resp)!r}, expected {md5!r}")
        if got != body:
            raise BenchError(f"GET {key}: body differs from what was PUT")
        return dt_s, shape.size, 0

    def list_pass(self, client: Any, record: Callable[[float, int], None]) -> None:
        """One full listing of LIST_BUCKET, one record() per page; checks count, order and paging."""
        token: str | None = None
        seen = 0
        last = ""
        pages = 0
        while True:
            kwargs: dict[str, Any] = {"Bucket": LIST_BUCKET, "MaxKeys": LIST_PAGE}
            if token:
                kwargs["ContinuationToken"] = token
            t0 = time.perf_counter()
            resp = client.list_objects_v2(**kwargs)
            dt_s = time.perf_counter() - t0
            keys = [o["Key"] for o in resp.get("Contents", [])]
            pages += 1
            if len(keys) > LIST_PAGE or resp.get("KeyCount", len(keys)) != len(keys):
                raise BenchError(f"LIST page {pages}: {len(keys)} keys, KeyCount {resp.get('KeyCount')}")
            if keys and (keys[0] <= last or keys != sorted(keys)):
                raise BenchError(f"LIST page {pages}: keys out of order")
            seen += len(keys)
            last = keys[-1] if keys else last
            record(dt_s, len(keys))
            if not resp.get("IsTruncated"):
                break
            token = resp.get("NextContinuationToken")
            if not token:
                raise BenchError(f"LIST page {pages}: IsTruncated without NextContinuationToken")
            if pages > self.plan.list_keys // LIST_PAGE + 2:
                raise BenchError("LIST: more pages than keys allow")
        if seen != self.plan.list_keys:
            raise BenchError(f"LIST: {seen} keys listed, expected {self.plan.list_keys}")

    # -- driver

    def run(self, shape: Shape, rnd: int) -> RunResult:
        conc = shape.concurrency
        clients = self.clients[:conc]
        for c in clients:  # keep-alive connections open (and re-opened after idling) before the clock starts
            c.head_bucket(Bucket=BUCKET)
        lock = threading.Lock()
        latencies: list[float] = []
        moved = [0, 0]  # bytes, keys
        errors: list[str] = []
        counter = [0]
        start = time.perf_counter()
        deadline = start + shape.budget_s

        def record(dt_s: float, nbytes: int, nkeys: int) -> None:
            with lock:
                latencies.append(dt_s)
                moved[0] += nbytes
                moved[1] += nkeys

        def fail(exc: BaseException) -> None:
            with lock:
                errors.append(f"{type(exc).__name__}: {exc}"[:300])

        def worker(client: Any) -> None:
            while not STOP.is_set():
                with lock:
                    i = counter[0]
                    counter[0] += 1
                    if i >= shape.max_ops or len(errors) >= MAX_ERRORS:
                        return
                if time.perf_counter() >= deadline:
                    return
                try:
                    op = self.op_put if shape.op == "put" else self.op_get
                    dt_s, nbytes, nkeys = op(client, shape, rnd, i)
                    record(dt_s, nbytes, nkeys)
                except Exception as exc:  # noqa: BLE001 - any failure is a counted error
                    fail(exc)

        def list_worker(client: Any) -> None:
            pages = math.ceil(self.plan.list_keys / LIST_PAGE)
            done = 0
            while not STOP.is_set() and done + pages <= shape.max_ops and len(errors) < MAX_ERRORS:
                if done and time.perf_counter() >= deadline:
                    return
                try:
                    self.list_pass(client, lambda d, k: record(d, 0, k))
                except Exception as exc:  # noqa: BLE001
                    fail(exc)
                done += pages

        pool = ThreadPoolExecutor(conc, thread_name_prefix=f"{self.server.name}-{shape.name}")
        try:
            futures = [pool.submit(list_worker if shape.op == "list" else worker, c) for c in clients]
            wait(futures)
            for f in futures:
                f.result()
        finally:
            pool.shutdown(wait=not STOP.is_set(), cancel_futures=True)
        wall = time.perf_counter() - start
        lat = sorted(latencies)
        ops = len(lat)
        return RunResult(
            target=self.server.name,
            shape=shape.name,
            round=rnd,
            ops=ops,
            errors=len(errors),
            wall_s=wall,
            ops_s=ops / wall if wall > 0 else 0.0,
            mib_s=moved[0] / MiB / wall if wall > 0 else 0.0,
            p50_ms=percentile(lat, 50) * 1000,
            p99_ms=percentile(lat, 99) * 1000,
            keys_s=moved[1] / wall if wall > 0 else 0.0,
            error_samples=errors[:3],
        )

    def cleanup_puts(self, shape: Shape, rnd: int) -> None:
        """Delete what a PUT shape wrote (untimed), so rounds start alike and memory/disk stay bounded."""
        client = self.clients[0]
        prefix = f"put/{shape.name}/r{rnd}/"
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
            objs = [{"Key": o["Key"]} for o in page.get("Contents", [])]
            if objs:
                resp = client.delete_objects(Bucket=BUCKET, Delete={"Objects": objs, "Quiet": True})
                if resp.get("Errors"):
                    raise BenchError(f"cleanup of {prefix}: {resp['Errors'][:2]}")


# ---------------------------------------------------------------- setup


def setup_target(clients: list[Any], payloads: Payloads, list_keys: int) -> dict[str, float]:
    """Buckets, the GET working set (verified), and the LIST bucket. Returns setup timings."""
    c0 = clients[0]
    c0.create_bucket(Bucket=BUCKET)
    c0.create_bucket(Bucket=LIST_BUCKET)
    for c in clients:
        c.head_bucket(Bucket=BUCKET)
    jobs = [(size, j) for size in payloads.data for j in range(len(payloads.data[size]))]

    def put_get(job: tuple[int, int], client: Any) -> None:
        size, j = job
        body, md5 = payloads.pick(size, j)
        resp = client.put_object(Bucket=BUCKET, Key=get_key(size, j), Body=body)
        if etag_of(resp) != md5:
            raise BenchError(f"setup PUT {get_key(size, j)}: ETag {etag_of(resp)!r}, expected {md5!r}")

    def put_list(i: int, client: Any) -> None:
        client.put_object(Bucket=LIST_BUCKET, Key=f"list/{i:06d}", Body=b"%016d" % i)

    def fan_out(items: list[Any], fn: Callable[[Any, Any], None]) -> float:
        def run_part(part: list[Any], client: Any) -> None:
            for x in part:
                if not STOP.is_set():
                    fn(x, client)

        t0 = time.perf_counter()
        n = len(clients)
        with ThreadPoolExecutor(n) as pool:
            futures = [pool.submit(run_part, items[w::n], clients[w]) for w in range(n)]
            for f in futures:
                f.result()
        if STOP.is_set():
            raise KeyboardInterrupt
        return time.perf_counter() - t0

    get_set_s = fan_out(jobs, put_get)
    out = {"get_working_set_s": round(get_set_s, 2)}
    if list_keys:
        list_set_s = fan_out(list(range(list_keys)), put_list)
        out.update(list_populate_s=round(list_set_s, 2), list_populate_ops_s=round(list_keys / list_set_s, 1))
    return out


# ---------------------------------------------------------------- reporting


def machine_info() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    repo = Path(__file__).resolve().parents[1]

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", *args], cwd=repo, capture_output=True, text=True, timeout=10
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    dirty = git("status", "--porcelain", "--", "server", "tiering", "erasure", "lifecycle")
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "boto3": boto3.__version__,
        "botocore": botocore.__version__,
        "git_head": git("rev-parse", "--short", "HEAD"),
        "git_dirty_server_files": len(dirty.splitlines()) if dirty else 0,
        "loadavg_start": os.getloadavg(),
    }


def summarize(
    results: list[RunResult], targets: list[str], shapes: tuple[Shape, ...]
) -> dict[str, dict[str, Any]]:
    """Per target and shape: the median over rounds of each metric."""
    out: dict[str, dict[str, Any]] = {}
    for t in targets:
        out[t] = {}
        for s in shapes:
            rs = [r for r in results if r.target == t and r.shape == s.name]
            if not rs:
                continue
            out[t][s.name] = {
                "rounds": len(rs),
                "ops_total": sum(r.ops for r in rs),
                "errors": sum(r.errors for r in rs),
                "ops_s": statistics.median(r.ops_s for r in rs),
                "mib_s": statistics.median(r.mib_s for r in rs),
                "p50_ms": statistics.median(r.p50_ms for r in rs),
                "p99_ms": statistics.median(r.p99_ms for r in rs),
                "keys_s": statistics.median(r.keys_s for r in rs),
                "ops_s_rounds": [round(r.ops_s, 1) for r in rs],
                "error_samples": [e for r in rs for e in r.error_samples][:3],
            }
    return out


def fmt(x: float, digits: int = 1) -> str:
    if x != x:  # nan
        return "-"
    return f"{x:,.{digits}f}" if abs(x) < 100 else f"{x:,.0f}"


def target_table(name: str, summary: dict[str, Any], shapes: tuple[Shape, ...]) -> str:
    rows = [
        f"### {name}",
        "",
        "| shape | ops/s | MiB/s | P50 ms | P99 ms | ops (all rounds) | errors |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s in shapes:
        m = summary.get(s.name)
        if not m:
            continue
        mib = f"{fmt(m['keys_s'], 0)} keys/s" if s.op == "list" else fmt(m["mib_s"])
        rows.append(
            f"| {s.name} | {fmt(m['ops_s'])} | {mib} | {fmt(m['p50_ms'], 2)} | {fmt(m['p99_ms'], 2)} "
            f"| {m['ops_total']} | {m['errors'] or ''} |"
        )
    return "\n".join(rows)


def comparison(
    summaries: dict[str, dict[str, Any]], a: str, b: str, shapes: tuple[Shape, ...]
) -> tuple[str, list]:
    rows = [
        f"| shape | {a} ops/s | {b} ops/s | ops/s {a}/{b} | {a} P50 ms | {b} P50 ms | P50 {a}/{b} "
        f"| {a} P99 ms | {b} P99 ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    data = []
    for s in shapes:
        ma, mb = summaries[a].get(s.name), summaries[b].get(s.name)
        if not ma or not mb:
            continue
        bad = ma["errors"] or mb["errors"]
        r_ops = ma["ops_s"] / mb["ops_s"] if mb["ops_s"] and not bad else float("nan")
        r_p50 = ma["p50_ms"] / mb["p50_ms"] if mb["p50_ms"] and not bad else float("nan")
        data.append({"shape": s.name, "ops_s_ratio": r_ops, "p50_ratio": r_p50, "invalid": bool(bad)})
        ro = "ERR" if bad else f"**{r_ops:.2f}**"
        rp = "ERR" if bad else f"{r_p50:.2f}"
        rows.append(
            f"| {s.name} | {fmt(ma['ops_s'])} | {fmt(mb['ops_s'])} | {ro} | {fmt(ma['p50_ms'], 2)} "
            f"| {fmt(mb['p50_ms'], 2)} | {rp} | {fmt(ma['p99_ms'], 2)} | {fmt(mb['p99_ms'], 2)} |"
        )
    return "\n".join(rows), data


# ---------------------------------------------------------------- main


def _on_signal(signum: int, frame: Any) -> None:
    """SIGINT/SIGTERM: tell the workers to stop after their current op, then unwind to the finally."""
    STOP.set()
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="short budgets and small counts (~2 min)")
    parser.add_argument(
        "--targets",
        default="tierstore,moto",
        help=f"comma list from {sorted(TARGETS)}; ratios are first/second (default tierstore,moto)",
    )
    parser.add_argument("--rounds", type=int, help="rounds per shape (default 3); the summary is the median")
    parser.add_argument("--shapes", help="comma list of shape-name prefixes to run (e.g. get-4KiB,list)")
    parser.add_argument("--out", type=Path, help="write all results as JSON here")
    args = parser.parse_args(argv)

    names = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = [t for t in names if t not in TARGETS]
    if unknown or not names or len(set(names)) != len(names):
        parser.error(f"--targets: unknown or repeated in {names}; choose from {sorted(TARGETS)}")
    plan = QUICK if args.quick else FULL
    rounds = args.rounds or plan.rounds
    shapes = plan.shapes
    if args.shapes:
        wanted = [p.strip() for p in args.shapes.split(",") if p.strip()]
        shapes = tuple(s for s in shapes if any(s.name.startswith(p) for p in wanted))
        if not shapes:
            parser.error("--shapes matched nothing")
    needed_sizes = {s.size for s in shapes if s.op in ("get", "put")}  # PUTs send these payloads too
    pool = {size: n for size, n in plan.pool.items() if size in needed_sizes}

    # Installed explicitly: a shell starting us in the background would otherwise leave SIGINT ignored.
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    t_start = time.monotonic()
    meta: dict[str, Any] = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "mode": "quick" if args.quick else "full",
        "rounds": rounds,
        "list_keys": plan.list_keys,
        "shapes": [asdict(s) for s in shapes],
        "get_working_set": {str(k): v for k, v in pool.items()},
        "machine": machine_info(),
    }
    print(f"s3bench: {meta['mode']} run, targets {names}, {rounds} rounds, {len(shapes)} shapes", flush=True)
    print(
        "s3bench: machine: {nproc} x {cpu_model}, python {python}, boto3 {boto3}".format(**meta["machine"]),
        flush=True,
    )
    t0 = time.perf_counter()
    payloads = Payloads(pool)
    print(f"s3bench: payloads generated in {time.perf_counter() - t0:.1f}s", flush=True)

    servers: list[Server] = []
    results: list[RunResult] = []
    target_meta: dict[str, Any] = {}
    exit_code = 0
    runners: dict[str, ShapeRunner] = {}
    try:
        max_conc = max(s.concurrency for s in shapes)
        for name in names:
            server = TARGETS[name]()
            servers.append(server)  # before start(): a failed start is still cleaned up
            server.start()
            clients = [make_client(server) for _ in range(max(max_conc, 4))]
            runners[name] = ShapeRunner(server, clients, payloads, plan)
            print(
                f"s3bench: {name} up at {server.endpoint} in {server.start_s:.1f}s {server.info}", flush=True
            )
            list_keys = plan.list_keys if any(s.op == "list" for s in shapes) else 0
            setup = setup_target(clients, payloads, list_keys)
            print(f"s3bench: {name} setup {setup}", flush=True)
            target_meta[name] = {
                "endpoint": server.endpoint,
                "start_s": round(server.start_s, 2),
                "info": server.info,
                "setup": setup,
            }

        for rnd in range(rounds):
            order = names if rnd % 2 == 0 else list(reversed(names))
            for shape in shapes:
                for name in order:
                    r = runners[name].run(shape, rnd)
                    if STOP.is_set():
                        raise KeyboardInterrupt
                    results.append(r)
                    flag = f"  ERRORS {r.errors}: {r.error_samples[:1]}" if r.errors else ""
                    extra = f" {r.keys_s:,.0f} keys/s" if shape.op == "list" else f" {r.mib_s:8.1f} MiB/s"
                    print(
                        f"  r{rnd} {shape.name:<16} {name:<10} {r.ops:5d} ops {r.wall_s:6.2f}s "
                        f"{r.ops_s:9.1f} ops/s{extra}  P50 {r.p50_ms:8.2f} ms  P99 {r.p99_ms:8.2f} ms{flag}",
                        flush=True,
                    )
                    if shape.op == "put":
                        runners[name].cleanup_puts(shape, rnd)
    except KeyboardInterrupt:
        STOP.set()
        print("\ns3bench: interrupted; stopping servers", file=sys.stderr, flush=True)
        exit_code = 130
    except Exception as exc:
        STOP.set()
        print(f"s3bench: FAILED: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        for s in servers:
            if s.tmp is not None:
                print(f"--- {s.name} log tail ---\n{s.log_tail()}", file=sys.stderr)
        exit_code = 1
    finally:
        # finish stopping servers even if Ctrl-C is pressed again
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for runner in runners.values():
            for c in runner.clients:
                c.close()  # drop keep-alive connections, so a graceful server stop need not wait on them
        for s in reversed(servers):
            s.stop()
            print(
                f"s3bench: {s.name} stopped in {s.info['stop_s']}s, temp dir removed in {s.info['rmtree_s']}s",
                file=sys.stderr,
                flush=True,
            )
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    if not results:
        return exit_code or 1
    summaries = summarize(results, names, shapes)
    meta["machine"]["loadavg_end"] = os.getloadavg()
    meta["elapsed_s"] = round(time.monotonic() - t_start, 1)
    print(f"\ns3bench: done in {meta['elapsed_s']:.0f}s (medians of {rounds} rounds)\n")
    for name in names:
        print(target_table(name, summaries[name], shapes) + "\n")
    comp_data: list[Any] = []
    if len(names) >= 2:
        a, b = names[0], names[1]
        table, comp_data = comparison(summaries, a, b, shapes)
        print(f"### {a} vs {b} (ops/s ratio > 1: {a} faster; P50 ratio < 1: {a} faster)\n\n{table}\n")
    if any(m["errors"] for s in summaries.values() for m in s.values()):
        print("s3bench: SOME SHAPES HAD ERRORS (marked ERR / errors column); their numbers are not valid.")
        exit_code = exit_code or 2
    if args.out:
        doc = {
            "meta": meta,
            "targets": target_meta,
            "summary": summaries,
            "comparison": comp_data,
            "runs": [asdict(r) for r in results],
        }
        args.out.write_text(json.dumps(doc, indent=2, default=str))
        print(f"s3bench: results written to {args.out}")
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
