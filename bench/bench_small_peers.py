"""Small objects side by side (#17 item 4): tierstore against nginx and the peers, one run, one client.

    python bench/bench_small_peers.py [--peers seaweedfs,moto,ceph] [--rounds 3] [--duration 10]
                                      [--shapes put-4KiB-c16,...|none] [--million [--million-count N]]

Every server is started here and stopped in a finally (temp dirs removed): `tierstore` (`tierstore
serve` with no --workers: the configuration's default), `tierstore-wN` (`--workers N`, N = 2 unless
--workers), nginx (bench/nginx.py: static-file GET, WebDAV PUT, no S3 auth) and the peers of
../shared/peers through their own start.sh / stop.sh (bench/peers.py; ceph as EC 2+1 over 3 OSDs).
All of them run at once. A peer that does not start is reported, not fatal.

The load comes from the lean client ../shared/tools/s3bench.py, one invocation per (round, shape,
server) with that server alone (`--auth none` for nginx, SigV4 header auth for the others), so
that every server gets the same client; rounds are interleaved: each shape on every server in
turn, the server order rotated each round and reversed every other round, and before every run
the box settles (bench/settle.py: `sync`, then a bounded wait for quiet CPUs; `--no-settle` skips
it). Shapes: 4 KiB PUT and GET at 16 and 64 clients, 1 MiB PUT and GET at 4 and 16 (`--clients-4k`,
`--clients-1m`). GET objects are PUT once before the
rounds (untimed); 4 KiB and 1 MiB PUTs write fresh keys and keep them (1 MiB: a key space of 4,096
per round, `PUT_1M_KEYS`; the disk holds up to 4 GiB per round and server until the servers stop).
Every run MD5-checks a sample of its keys (s3bench --verify).

The report (stdout, markdown for bench/RESULTS.md): the exact command line, the machine and the
load average during the run, per shape the median over the rounds of ops/s (4 KiB) or MiB/s
(1 MiB) per server with the ratios tierstore / SeaweedFS and tierstore / nginx (median of the
per-round ratios), then P50 / P99 and server CPU per op, then what each server promises when it
acknowledges a PUT.

--million: one more tierstore (default configuration), `--million-count` 4 KiB objects PUT in
chunks of 10,000 (one s3bench --count run each, fresh keys): the PUT rate of the first 10k
against the last 10k (and every chunk's), files and directories under the data dir as % of the
objects, and ListObjectsV2 keys/s over all of them (s3bench --op list, one client, pages of 1000).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_peers import LoadSampler, machine_info  # noqa: E402
from nginx import Nginx  # noqa: E402
from peers import PEER_SPECS, PEERS_DIR, Peer  # noqa: E402
from servers import REPO, Server, Tierstore  # noqa: E402
from settle import MAX_WAIT_S, QUIET_BUSY, Settled, settle, turns  # noqa: E402

KiB = 1024
MiB = 1024 * 1024
# ../shared beside the checkout (a worktree elsewhere: --tool, and PEERS_DIR for bench/peers.py)
TOOL = REPO.parent / "shared" / "tools" / "s3bench.py"
BUCKET = "smallpeers"
PUT_4K_KEYS = 1_000_000  # key space of a 4 KiB PUT run: larger than any run, every PUT a new key
# Key space of a 1 MiB PUT run (4 GiB at most per run and server, kept until the servers stop and
# their data directories go). Larger than any S3 server writes in one run here (~2,000 at
# 230 MiB/s), so every timed PUT is a new key, as in the 4 KiB runs; with 256 keys cycled it measured
# overwrites. Kept, not deleted after each run: a server that collects deleted data later
# (tierstore: 30 s later) did that work inside its next timed run. nginx, the ceiling, may wrap (a
# file overwritten in place).
PUT_1M_KEYS = 4096
MILLION_CHUNK = 10_000
RUN_TIMEOUT = 900.0


@dataclass(frozen=True)
class Shape:
    op: str  # put | get
    size: int
    clients: int

    @property
    def size_h(self) -> str:
        return f"{self.size // MiB}MiB" if self.size >= MiB else f"{self.size // KiB}KiB"

    @property
    def name(self) -> str:
        return f"{self.op}-{self.size_h}-c{self.clients}"

    @property
    def label(self) -> str:
        unit = "MiB/s" if self.size >= MiB else "ops/s"
        size = f"{self.size // MiB} MiB" if self.size >= MiB else f"{self.size // KiB} KiB"
        return f"{self.op.upper()} {size} c{self.clients} {unit}"

    def value(self, rec: dict[str, Any]) -> float:
        return float(rec["mib_per_s"] if self.size >= MiB else rec["ops_per_s"])


def shapes_for(clients_4k: list[int], clients_1m: list[int]) -> list[Shape]:
    out: list[Shape] = []
    for op in ("put", "get"):
        out += [Shape(op, 4 * KiB, c) for c in clients_4k]
    for op in ("put", "get"):
        out += [Shape(op, MiB, c) for c in clients_1m]
    return out


def settling_line(settles: list[Settled]) -> str:
    waits = [x.waited_s for x in settles]
    dirty = [x.dirty_kib / 1024 for x in settles]
    loud = sum(not x.quiet for x in settles)
    return (
        f"- **Settling before each run** (bench/settle.py): {len(settles)} runs; waited median "
        f"{statistics.median(waits):.1f} s, max {max(waits):.1f} s; dirty pages flushed median "
        f"{statistics.median(dirty):,.0f} MiB, max {max(dirty):,.0f} MiB; not quiet within "
        f"{MAX_WAIT_S:g} s: {loud}"
    )


def get_objects(size: int, clients: int) -> int:
    """GET working set: distinct keys, at least two per client."""
    return max(256 if size < MiB else 64, 2 * clients)


# ---------------------------------------------------------------- targets


class BenchTierstore(Tierstore):
    """`tierstore serve --workers N`, or with `workers=None` no --workers at all: the configuration's
    default. Keeps the banner's "workers:" line (how many processes actually serve)."""

    def __init__(self, workers: int | None = None) -> None:
        super().__init__(workers or 1)
        self.default = workers is None

    def command(self) -> list[str]:
        cmd = super().command()
        if self.default:
            at = cmd.index("--workers")
            cmd = cmd[:at] + cmd[at + 2 :]
        return cmd

    def ready(self) -> bool:
        if not super().ready():
            return False
        for line in self.log_path.read_text(errors="replace").splitlines():
            if "workers:" in line:
                said = line.split("workers:", 1)[1].strip()
                self.info["workers"] = re.split(r"[,(]", said)[0].strip()  # "1 process", "2 worker processes"
        return True


def seaweedfs_durability() -> str:
    """What SeaweedFS promises as ../shared/peers/seaweedfs/start.sh starts it, read from the script."""
    try:
        script = (PEERS_DIR / "seaweedfs" / "start.sh").read_text()
    except OSError:
        return "unknown (start.sh not readable)"
    code = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("#"))
    said = sorted(
        set(re.findall(r"-[\w.]*(?:[Ff]sync|[Rr]eplication|[Rr]eplicaPlacement)[\w.]*(?:=\S+)?", code))
    )
    if said:
        return f"start.sh passes {', '.join(said)}: read the script for what that promises"
    return (
        "**no fsync per write, one copy**: start.sh sets no fsync rule (SeaweedFS fsyncs only writes to a "
        "path configured with `fs.configure -fsync`, default off) and no replication "
        "(`-master.defaultReplication` unset: 000, one volume server); a PUT is acknowledged once the "
        "needle is appended to the volume's .dat file in the page cache and the filer entry is written"
    )


DURABILITY = {
    "tierstore": (
        "acknowledged = fsync'd on at least k+1 drives: hot tier erasure 4+2, 4 KiB objects as 3 whole "
        "copies (< 64 KiB) appended to pack files with group-commit fdatasync (quorum 2), 1 MiB striped "
        "4+2 (quorum 5); catalog commit fsync'd. The 6 drives are directories on this one disk"
    ),
    "nginx": "WebDAV PUT: client body temp file + rename, **no fsync**, one copy; no S3 auth (`--auth none`)",
    "moto": "**in memory**: no disk at all, no signature or checksum checks",
    "ceph": (
        "BlueStore: acknowledged once committed on every OSD of the PG's acting set (EC 2+1: 3 OSDs, "
        "sparse block files on this one disk)"
    ),
    "swift": "object servers fsync each object file; EC 4+2 over 6 directories on this one disk",
    "s3rver": "files, no fsync, no signature checks",
}


@dataclass
class Target:
    name: str
    server: Server
    kind: str  # tierstore | nginx | peer
    durability: str
    pids: list[int] = field(default_factory=list)

    @property
    def auth(self) -> str:
        return "none" if self.kind == "nginx" else "header"


def tier_objects(t: Target) -> str:
    """Objects per tier as a tierstore's /metrics counts them ("" for other servers). A GET run
    reads its working set from whichever tier the lifecycle has put it in by then: hot after the
    PUT, gpu-direct (memory) once a lifecycle pass (every 60 s by default) found it hot."""
    if t.kind != "tierstore":
        return ""
    try:
        with urllib.request.urlopen(f"{t.server.endpoint}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return ""
    counts = [
        (sample.labels["tier"], sample.value)
        for family in text_string_to_metric_families(text)
        if family.name == "tierstore_tier_objects"
        for sample in family.samples
    ]
    return ", ".join(f"{tier} {n:,.0f}" for tier, n in counts if n)


def describe(t: Target) -> str:
    info = t.server.info
    bits = [info.get("version", ""), info.get("workers", ""), info.get("note", ""), info.get("tiers", "")]
    return "; ".join(b for b in bits if b)


# ---------------------------------------------------------------- s3bench


@dataclass
class Run:
    shape: str
    target: str
    round: int
    rc: int
    rec: dict[str, Any] | None  # s3bench's "run" record, None when it produced none
    argv: list[str]
    stderr_tail: str

    @property
    def ok(self) -> bool:
        return self.rec is not None and not self.rec["errors"] and self.rec.get("integrity_ok") is not False


def s3bench(
    tool: Path, t: Target, extra: list[str], json_out: Path | None
) -> tuple[int, list[dict[str, Any]], str, list[str]]:
    """One s3bench invocation against one server; returns (rc, its JSON records, stderr, argv)."""
    argv = [
        sys.executable,
        str(tool),
        "--endpoint",
        f"{t.name}={t.server.endpoint}",
        "--access-key",
        t.server.access_key or "none",
        "--secret-key",
        t.server.secret_key or "none",
        "--auth",
        t.auth,
        "--bucket",
        BUCKET,
        *extra,
    ]
    if t.kind == "nginx":
        argv.append("--no-create-bucket")  # the bucket is a directory made at start (PUT /bucket is a file)
    pids = [p for p in t.pids if Path(f"/proc/{p}").exists()]
    if pids:
        argv += ["--server-pid", f"{t.name}={','.join(map(str, pids))}"]
    if json_out is not None:
        argv += ["--json-out", str(json_out)]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired as exc:
        return 124, [], f"s3bench timed out after {RUN_TIMEOUT:.0f}s: {exc}", argv
    recs = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, recs, done.stderr, argv


def shape_args(shape: Shape, rnd: int, args: argparse.Namespace) -> list[str]:
    common = [
        "--op",
        shape.op,
        "--size",
        shape.size_h,
        "--concurrency",
        str(shape.clients),
        "--duration",
        f"{args.duration}s",
        "--warmup",
        f"{args.warmup}s",
        "--verify",
        str(args.verify),
        "--rounds",
        "1",
        "--label",
        f"{shape.name} r{rnd}",
    ]
    if shape.op == "get":
        n = get_objects(shape.size, max(s.clients for s in args.shape_list if s.size == shape.size))
        return [*common, "--objects", str(n), "--prefix", f"get-{shape.size_h}/", "--skip-prepare", "--keep"]
    prefix = f"{shape.name}-r{rnd}/"
    keys = PUT_1M_KEYS if shape.size >= MiB else PUT_4K_KEYS
    return [*common, "--objects", str(keys), "--prefix", prefix, "--keep"]


def prepare_gets(tool: Path, t: Target, shapes: list[Shape], json_out: Path | None) -> str | None:
    """PUT the GET working sets once (untimed); an error message, or None."""
    for size in sorted({s.size for s in shapes if s.op == "get"}):
        n = get_objects(size, max(s.clients for s in shapes if s.size == size))
        size_h = Shape("get", size, 1).size_h
        extra = ["--op", "put", "--size", size_h, "--count", str(n), "--objects", str(n)]
        extra += ["--prefix", f"get-{size_h}/", "--concurrency", "16", "--keep", "--verify", "0", "--quiet"]
        extra += ["--label", f"prepare get-{size_h}"]
        rc, recs, err, _ = s3bench(tool, t, extra, json_out)
        runs = [r for r in recs if r.get("type") == "run"]
        if rc != 0 or not runs or runs[0]["errors"] or runs[0]["ops"] != n:
            detail = runs[0].get("error_samples") if runs else err[-500:]
            return f"preparing {n} x {size_h} failed (rc {rc}): {detail}"
    return None


# ---------------------------------------------------------------- summary


def median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def summarize(runs: list[Run], shapes: list[Shape], names: list[str]) -> dict[str, dict[str, dict[str, Any]]]:
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for s in shapes:
        for n in names:
            mine = [r for r in runs if r.shape == s.name and r.target == n]
            if not mine:
                continue
            good = [r.rec for r in mine if r.ok and r.rec is not None]
            recs = [r.rec for r in mine if r.rec is not None]
            ver = [rec["verify"] for rec in recs if "checked" in rec.get("verify", {})]
            out.setdefault(s.name, {})[n] = {
                "rounds": len(mine),
                "good_rounds": len(good),
                "value": median([s.value(rec) for rec in good]),
                "value_rounds": [
                    round(s.value(rec), 1) if rec is not None else None for rec in (r.rec for r in mine)
                ],
                "p50_ms": median([rec["lat_ms"]["p50"] for rec in good if rec.get("lat_ms")]),
                "p99_ms": median([rec["lat_ms"]["p99"] for rec in good if rec.get("lat_ms")]),
                "server_cpu_ms_per_op": median(
                    [
                        rec["server_cpu_ms_per_op"]
                        for rec in good
                        if rec.get("server_cpu_ms_per_op") is not None
                    ]
                ),
                "errors": sum(rec["errors"] for rec in recs) + sum(r.rec is None for r in mine),
                "verify_ok": sum(v["md5_ok"] for v in ver),
                "verify_checked": sum(v["checked"] for v in ver),
                "error_samples": [e for rec in recs for e in rec.get("error_samples", [])][:3]
                + [r.stderr_tail[-300:] for r in mine if r.rec is None][:2],
            }
    return out


def ratio(runs: list[Run], shape: Shape, num: str, den: str) -> float | None:
    """Median over the rounds of num/den measured in the same round (both runs clean)."""
    by = {(r.target, r.round): r for r in runs if r.shape == shape.name and r.ok and r.rec is not None}
    rounds = {rnd for (_, rnd) in by}
    xs = []
    for rnd in sorted(rounds):
        a, b = by.get((num, rnd)), by.get((den, rnd))
        if a and b and a.rec and b.rec and shape.value(b.rec) > 0:
            xs.append(shape.value(a.rec) / shape.value(b.rec))
    return median(xs)


def fmt(x: float | None, digits: int = 1) -> str:
    if x is None:
        return "-"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.{digits}f}"


def side_by_side_report(
    runs: list[Run],
    shapes: list[Shape],
    targets: list[Target],
    failures: dict[str, str],
    args: argparse.Namespace,
) -> list[str]:
    order = {"nginx": 0, "peer": 1, "tierstore": 2}
    names = [t.name for t in sorted(targets, key=lambda t: order[t.kind])]  # the column order
    summary = summarize(runs, shapes, names)
    lines = [
        f"Each cell: median over {args.rounds} round(s) of the run's ops/s (4 KiB) or MiB/s (1 MiB); "
        f"one s3bench run = {args.warmup:g} s warm-up + {args.duration:g} s window; rounds interleaved "
        "(each shape on every server in turn, the order rotated each round and reversed every other "
        "round). "
        + (
            "No settling between runs (--no-settle). "
            if args.no_settle
            else "Before every run the box settles (bench/settle.py: `sync`, then up to "
            f"{MAX_WAIT_S:g} s for the CPUs to fall below {100 * QUIET_BUSY:g} % busy). "
        )
        + "Ratios: median of the per-round ratios. ERR: a run had errors or a bad MD5 (no number).",
        "",
    ]
    ts_names = [n for n in names if n.startswith("tierstore")]
    refs = [("seaweedfs", "SeaweedFS"), ("nginx", "nginx")]
    ratio_cols = [(ts, ref, label) for ref, label in refs if ref in names for ts in ts_names]
    head = ["shape", *names, *(f"{ts} / {label}" for ts, _, label in ratio_cols)]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("| --- | " + " | ".join("---:" for _ in head[1:]) + " |")
    for s in shapes:
        cells = []
        for n in names:
            m = summary.get(s.name, {}).get(n)
            if m is None:
                cells.append("")
            elif m["errors"] or m["value"] is None:
                cells.append(f"**ERR** ({m['errors']})")
            else:
                cells.append(fmt(m["value"]))
        for ts, ref, _ in ratio_cols:
            r = ratio(runs, s, ts, ref)
            cells.append(f"{r:.2f}×" if r is not None else "-")
        lines.append(f"| {s.label} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| shape | server | per round | P50 ms | P99 ms | server CPU ms/op | MD5 verified | errors |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s in shapes:
        for n in names:
            m = summary.get(s.name, {}).get(n)
            if m is None:
                continue
            per_round = ", ".join(fmt(v) for v in m["value_rounds"])
            ver = f"{m['verify_ok']}/{m['verify_checked']}"
            lines.append(
                f"| {s.name} | {n} | {per_round} | {fmt(m['p50_ms'], 2)} | {fmt(m['p99_ms'], 2)} | "
                f"{fmt(m['server_cpu_ms_per_op'], 3)} | {ver} | {m['errors']} |"
            )
    lines += [
        "",
        "| server | start s | version / configuration | what an acknowledged PUT means |",
        "| --- | ---: | --- | --- |",
    ]
    for t in sorted(targets, key=lambda t: names.index(t.name)):
        lines.append(f"| {t.name} | {t.server.start_s:.1f} | {describe(t)} | {t.durability} |")
    for n, why in failures.items():
        lines.append(f"| {n} | - | **not measured: {why[:200]}** | |")
    bad = [
        f"{s} {n}: {m['error_samples']}" for s, per in summary.items() for n, m in per.items() if m["errors"]
    ]
    if bad:
        lines += ["", "Errors (first samples):", *(f"- {b[:400]}" for b in bad)]
    return lines


# ---------------------------------------------------------------- million


def inodes_under(path: Path) -> tuple[int, int]:
    """(files, directories) under `path`, `path` itself not counted."""
    files = dirs = 0
    for _, dnames, fnames in os.walk(path):
        files += len(fnames)
        dirs += len(dnames)
    return files, dirs


def million_chunks(count: int) -> list[int]:
    """A first and a last chunk of the same size (10k, or half of a smaller count), the rest between."""
    first = min(MILLION_CHUNK, max(1, count // 2))
    middle = count - 2 * first
    chunks = [first]
    while middle > 0:
        chunks.append(min(MILLION_CHUNK, middle))
        middle -= chunks[-1]
    return [*chunks, first] if count > 1 else chunks


def million(tool: Path, args: argparse.Namespace, json_out: Path | None, servers: list[Server]) -> list[str]:
    ts = BenchTierstore()
    servers.append(ts)
    print(f"million: starting tierstore for {args.million_count:,} x 4 KiB ...", flush=True)
    ts.start()
    t = Target("tierstore", ts, "tierstore", DURABILITY["tierstore"], [ts.pid])
    base_files, base_dirs = inodes_under(ts.data_dir)
    chunks = million_chunks(args.million_count)
    rates: list[dict[str, Any]] = []
    done = 0
    t0 = time.monotonic()
    for i, n in enumerate(chunks):
        extra = ["--op", "put", "--size", "4KiB", "--count", str(n), "--objects", str(n)]
        extra += ["--prefix", f"million/p{i:05d}/", "--concurrency", str(args.million_clients)]
        extra += ["--keep", "--verify", "8", "--quiet", "--label", f"million chunk {i}"]
        if i:
            extra.append("--no-create-bucket")
        rc, recs, err, _ = s3bench(tool, t, extra, json_out)
        run = next((r for r in recs if r.get("type") == "run"), None)
        if rc != 0 or run is None or run["errors"] or run.get("integrity_ok") is False:
            detail = run.get("error_samples") if run else err[-500:]
            raise RuntimeError(f"million: chunk {i} ({n} PUTs after {done:,}) failed (rc {rc}): {detail}")
        done += n
        rates.append({"after": done, "n": n, "ops_s": run["ops_per_s"], "p50_ms": run["lat_ms"]["p50"],
                      "p99_ms": run["lat_ms"]["p99"], "load": run.get("loadavg_1m_before")})  # fmt: skip
        print(
            f"  million: {done:>9,} PUT ({n:,} in this chunk at {run['ops_per_s']:,.0f} ops/s, "
            f"P50 {run['lat_ms']['p50']:.1f} / P99 {run['lat_ms']['p99']:.1f} ms), {time.monotonic() - t0:,.0f}s",
            flush=True,
        )
    fill_s = time.monotonic() - t0
    files, dirs = inodes_under(ts.data_dir)
    extra = ["--op", "list", "--size", "0", "--prefix", "million/", "--objects", str(done), "--skip-prepare"]
    extra += [
        "--keep",
        "--no-create-bucket",
        "--concurrency",
        "1",
        "--duration",
        f"{args.million_list_seconds}s",
    ]
    extra += ["--quiet", "--label", "million list"]
    rc, recs, err, argv_list = s3bench(tool, t, extra, json_out)
    lst = next((r for r in recs if r.get("type") == "run"), None)
    first, last = rates[0], rates[-1]
    mid = [r["ops_s"] for r in rates]
    lines = [
        f"{done:,} × 4 KiB PUT into tierstore (default configuration, {describe(t)}) at "
        f"{args.million_clients} clients in {len(chunks)} s3bench `--count` runs, {fill_s:,.0f} s in all:",
        "",
        "| measure | value | target (#17) |",
        "| --- | ---: | --- |",
        f"| PUT ops/s, first {first['n']:,} | {fmt(first['ops_s'])} (P50 {fmt(first['p50_ms'], 2)} / "
        f"P99 {fmt(first['p99_ms'], 2)} ms) | |",
        f"| PUT ops/s, last {last['n']:,} | {fmt(last['ops_s'])} (P50 {fmt(last['p50_ms'], 2)} / "
        f"P99 {fmt(last['p99_ms'], 2)} ms) | |",
        f"| last / first | {last['ops_s'] / first['ops_s']:.2f}× | flat (1.0×) |",
        f"| PUT ops/s over all chunks: min / median / max | {fmt(min(mid))} / {fmt(statistics.median(mid))} / "
        f"{fmt(max(mid))} | |",
        f"| files under the data dir | {files:,} ({100 * files / done:.3f} % of objects; {base_files:,} "
        f"before the first PUT) | ≤ 1 % |",
        f"| directories under the data dir | {dirs:,} ({100 * dirs / done:.3f} %; {base_dirs:,} before) | |",
        f"| files + directories (inodes) | {files + dirs:,} ({100 * (files + dirs) / done:.3f} %) | ≤ 1 % |",
    ]
    if lst is not None and rc == 0 and not lst["errors"]:
        li = lst["list"]
        full = li["full_listing_ms"] or {}
        lines.append(
            f"| ListObjectsV2 keys/s (1 client, pages of 1000, {args.million_list_seconds:g} s window) | "
            f"{fmt(li['keys_per_s'])} ({li['full_listings']} full listings, P50 "
            f"{fmt(full.get('p50'), 0)} ms; page P50 {fmt(lst['lat_ms']['p50'], 2)} ms) | ≥ 200,000 |"
        )
    else:
        detail = lst.get("error_samples") if lst else err[-400:]
        lines.append(f"| ListObjectsV2 | **failed** (rc {rc}): {detail} | ≥ 200,000 |")
    lines += ["", "PUT ops/s per chunk (objects already stored: ops/s): " + ", ".join(
        f"{r['after'] - r['n']:,}: {r['ops_s']:,.0f}" for r in rates)]  # fmt: skip
    lines.append(f"List command: `{shlex.join(['python', *argv_list[1:]])}`")
    return lines


# ---------------------------------------------------------------- main


def command_line() -> str:
    argv = list(sys.argv)
    try:
        argv[0] = str(Path(argv[0]).resolve().relative_to(REPO))
    except ValueError:
        pass
    return shlex.join(["python", *argv])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--peers",
        default="seaweedfs,moto,ceph",
        help=f"comma list from {sorted(PEER_SPECS)}, in the table's column order; '' for none",
    )
    ap.add_argument("--no-nginx", action="store_true")
    ap.add_argument(
        "--workers", type=int, default=2, help="N of the `tierstore serve --workers N` variant (0: none)"
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=10.0, help="seconds of each run's timed window")
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds of load before each window")
    ap.add_argument(
        "--no-settle",
        action="store_true",
        help="start each run right after the last one (no sync, no wait for quiet CPUs: bench/settle.py)",
    )
    ap.add_argument("--clients-4k", default="16,64", help="client counts of the 4 KiB shapes")
    ap.add_argument("--clients-1m", default="4,16", help="client counts of the 1 MiB shapes")
    ap.add_argument(
        "--shapes", help="comma list of shape names (e.g. put-4KiB-c16,get-1MiB-c4); 'none' for none"
    )
    ap.add_argument("--verify", type=int, default=16, help="keys MD5-checked after each run")
    ap.add_argument(
        "--moto-python", default=sys.executable, help="the Python moto runs in (start.sh installs it there)"
    )
    ap.add_argument("--million", action="store_true", help="also the 1,000,000 x 4 KiB fill of one tierstore")
    ap.add_argument("--million-count", type=int, default=1_000_000)
    ap.add_argument("--million-clients", type=int, default=16)
    ap.add_argument("--million-list-seconds", type=float, default=30.0)
    ap.add_argument("--tool", type=Path, default=TOOL, help="the s3bench.py load generator")
    ap.add_argument("--json-out", type=Path, help="every s3bench record and the summary, one JSON line each")
    args = ap.parse_args(argv)

    def ints(text: str) -> list[int]:
        return [int(x) for x in text.split(",") if x.strip()]

    shapes = shapes_for(ints(args.clients_4k), ints(args.clients_1m))
    if args.shapes:
        want = {x.strip() for x in args.shapes.split(",") if x.strip()} - {"none"}
        unknown = want - {s.name for s in shapes}
        if unknown:
            ap.error(f"unknown shapes {sorted(unknown)}; known: {[s.name for s in shapes]}")
        shapes = [s for s in shapes if s.name in want]
    args.shape_list = shapes
    peer_names = [p.strip() for p in args.peers.split(",") if p.strip()]
    if bad := [p for p in peer_names if p not in PEER_SPECS]:
        ap.error(f"unknown peers {bad}")
    if not args.tool.exists():
        ap.error(f"no s3bench at {args.tool}: give --tool PATH/shared/tools/s3bench.py")

    def on_signal(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    meta: dict[str, Any] = {
        "command": command_line(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "loadavg_start": os.getloadavg(),
    }
    m = meta["machine"]
    print(f"bench_small_peers: {len(shapes)} shapes x {args.rounds} rounds; {m['nproc']} x {m['cpu_model']}, "
          f"load {meta['loadavg_start'][0]:.1f}", flush=True)  # fmt: skip
    sampler = LoadSampler()
    sampler.start()
    servers: list[Server] = []
    targets: list[Target] = []
    failures: dict[str, str] = {}
    runs: list[Run] = []
    million_lines: list[str] = []
    settles: list[Settled] = []
    examples: dict[str, str] = {}
    exit_code = 0
    t_start = time.monotonic()
    try:
        if shapes:
            todo: list[tuple[str, str, Server]] = [("tierstore", "tierstore", BenchTierstore())]
            if args.workers > 1:
                todo.append((f"tierstore-w{args.workers}", "tierstore", BenchTierstore(args.workers)))
            if not args.no_nginx:
                todo.append(("nginx", "nginx", Nginx()))  # before the peers: it takes one port of 9100-9199
            for p in peer_names:
                todo.append((p, "peer", Peer(p, {"PYTHON": args.moto_python} if p == "moto" else None)))
            for name, kind, server in todo:
                servers.append(server)
                print(f"bench_small_peers: starting {name} ...", flush=True)
                try:
                    server.start()
                except Exception as exc:  # noqa: BLE001 - a peer that does not start is reported, not fatal
                    if kind == "tierstore":
                        raise
                    failures[name] = f"start failed: {exc}"
                    print(f"bench_small_peers: {name} did not start: {str(exc)[-600:]}", flush=True)
                    continue
                pids = server.pids() if isinstance(server, Peer) else [server.pid]
                durability = (
                    seaweedfs_durability()
                    if name == "seaweedfs"
                    else DURABILITY[kind if kind != "peer" else name]
                )
                t = Target(name, server, kind, durability, pids)
                if isinstance(server, Nginx):
                    server.make_bucket(BUCKET)
                print(
                    f"bench_small_peers: {name} up at {server.endpoint} in {server.start_s:.1f}s ({describe(t)})",
                    flush=True,
                )
                why = prepare_gets(args.tool, t, shapes, args.json_out)
                if why:
                    if kind == "tierstore":
                        raise RuntimeError(f"{name}: {why}")
                    failures[name] = why
                    print(f"bench_small_peers: {name}: {why}", flush=True)
                    continue
                targets.append(t)
            for rnd in range(args.rounds):
                order = turns(targets, rnd)
                for shape in shapes:
                    for t in order:
                        settled = None if args.no_settle else settle()
                        if settled is not None:
                            settles.append(settled)
                        tiers = tier_objects(t) if shape.op == "get" else ""
                        rc, recs, err, run_argv = s3bench(
                            args.tool, t, shape_args(shape, rnd, args), args.json_out
                        )
                        examples.setdefault(shape.name, shlex.join(["python", *run_argv[1:]]))
                        rec = next((r for r in recs if r.get("type") == "run"), None)
                        run = Run(shape.name, t.name, rnd, rc, rec, run_argv, err[-1500:])
                        runs.append(run)
                        if rec is None:
                            print(
                                f"  r{rnd} {shape.name:<13} {t.name:<13} NO RESULT (rc {rc}): {err[-400:]}",
                                flush=True,
                            )
                            continue
                        lat = rec.get("lat_ms") or {}
                        flag = (
                            "" if run.ok else f"  ERRORS {rec['errors']}: {rec.get('error_samples', [])[:1]}"
                        )
                        ver = rec.get("verify", {})
                        print(
                            f"  r{rnd} {shape.name:<13} {t.name:<13} {rec['ops_per_s']:9,.1f} ops/s {rec['mib_per_s']:8,.1f} MiB/s "
                            f"P50 {lat.get('p50', 0):7.2f} P99 {lat.get('p99', 0):7.2f} ms  srv "
                            f"{rec.get('server_cpu_ms_per_op', 0) or 0:.3f} ms/op  md5 {ver.get('md5_ok', '-')}/"
                            f"{ver.get('checked', '-')}{flag}"
                            + (f"  [{settled.describe()}]" if settled is not None else "")
                            + (f"  [objects by tier before the run: {tiers}]" if tiers else ""),
                            flush=True,
                        )
        if shapes:
            stop_all(servers)
        if args.million:
            million_lines = million(args.tool, args, args.json_out, servers)
    except KeyboardInterrupt:
        print("\nbench_small_peers: interrupted; stopping servers", file=sys.stderr, flush=True)
        exit_code = 130
    except Exception as exc:  # noqa: BLE001 - report what was measured, stop everything
        import traceback

        traceback.print_exc()
        print(f"bench_small_peers: FAILED: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        for s in servers:
            if s.tmp is not None and s.log_path.exists():
                print(f"--- {s.name} log tail ---\n{s.log_tail()}", file=sys.stderr)
        exit_code = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stop_all(servers)
        sampler.halt.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    meta["loadavg_end"] = os.getloadavg()
    ld = sampler.summary()
    run_loads = [r.rec["loadavg_1m_before"] for r in runs if r.rec and "loadavg_1m_before" in r.rec]
    lines = [
        f"### Small objects (#17 item 4), {meta['date'][:10]}",
        "",
        f"- **Command**: `{meta['command']}` (git {m['git_head']}, {m['git_dirty_server_files']} modified "
        f"server files; tierstore build: {m['tierstore_build']}), {time.monotonic() - t_start:,.0f} s in all",
        f"- **Machine**: {m['nproc']} × {m['cpu_model']}, {m['mem']}, Python {m['python']}, kernel {m['kernel']}; "
        f"every server and the client on it at once",
        f"- **Load average (1 min) during the run**: min {ld['min']:.1f} / median {ld['median']:.1f} / max "
        f"{ld['max']:.1f} (sampled every 10 s)"
        + (
            f"; at the start of the s3bench runs {min(run_loads):.1f}–{max(run_loads):.1f}"
            if run_loads
            else ""
        )
        + f"; start {meta['loadavg_start'][0]:.1f}, end {meta['loadavg_end'][0]:.1f}",
        f"- **Client**: `{args.tool}`"
        + (
            f", one invocation per round, shape and server, e.g. `{next(iter(examples.values()))}`"
            if examples
            else ""
        ),
        *([settling_line(settles)] if settles else []),
        "",
    ]
    if shapes:
        lines += ["#### Side by side", "", *side_by_side_report(runs, shapes, targets, failures, args)]
    if million_lines:
        lines += ["", "#### 1,000,000 small objects" if args.million_count == 1_000_000 else
                  f"#### {args.million_count:,} small objects (`--million-count`)", "", *million_lines]  # fmt: skip
    print("\n" + "\n".join(lines), flush=True)
    if args.json_out:
        with open(args.json_out, "a") as f:
            summary = summarize(runs, shapes, [t.name for t in targets])
            f.write(json.dumps({"type": "small_peers_summary", "meta": meta, "loadavg_during": ld,
                                "summary": summary, "failures": failures, "report": lines}) + "\n")  # fmt: skip
    if any(not r.ok for r in runs):
        print("bench_small_peers: SOME RUNS HAD ERRORS; their numbers are not valid.", flush=True)
        exit_code = exit_code or 2
    return exit_code


def stop_all(servers: list[Server]) -> None:
    """Stop every server started (in parallel: seaweedfs alone takes ~18 s); safe to call twice."""
    live = [s for s in servers if s.tmp is not None]
    with ThreadPoolExecutor(max_workers=max(1, len(live))) as pool:
        for s, _ in zip(live, pool.map(lambda s: s.stop(), live), strict=True):
            print(
                f"bench_small_peers: {s.name} stopped ({s.info.get('stop_s')}s)", file=sys.stderr, flush=True
            )


if __name__ == "__main__":
    raise SystemExit(main())
