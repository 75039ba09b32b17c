"""Feeding GPUs: tierstore against nginx (the machine's ceiling) and the peer S3 servers, one run.

    .venv/bin/python bench/bench_peers.py [--quick] [--peers moto,seaweedfs[,ceph,swift]] [--no-workers]
                                          [--rounds 3] [--out FILE.json]

Targets, all started here and stopped in a finally (temp dirs removed):
  tierstore      `python -m server.cli serve`, default configuration (new objects -> hot: erasure 4+2,
                 < 64 KiB as 3 replicas, every shard and catalog commit fsync'd)
  tierstore-wN   the same with `--workers N` (N = nproc), if `tierstore serve --workers` exists
  nginx          Debian nginx, static-file GET (sendfile) and WebDAV PUT (bench/nginx.py)
  peers          ../shared/peers start.sh/stop.sh: moto, seaweedfs, ceph (CEPH_OSDS=3 CEPH_EC=2+1),
                 swift (SWIFT_DEFAULT_POLICY=ec), each optional (--peers)

Shapes (interleaved per shape, the order rotated each round and reversed every other round, the box
settled before every run (bench/settle.py; --no-settle: back to back), medians of the rounds):
  get/put 64 MiB at 2 and 4 clients; get/put 4 KiB at 16 and 32 clients; gpu-direct 4 KiB GET
  (EXPRESS_ONEZONE objects, tierstore only) at 1 and 16 clients; then ListObjectsV2 on a bucket filled
  as fast as each server takes 0-byte PUTs within a time budget (full pass keys/s, first- and
  last-page latency); then S3Checkpoint save/load of a state dict against a local file.

The load generator is raw http.client on keep-alive connections (bench/rawhttp.py) with every
request SigV4-signed by botocore before the clock starts (payload SHA-256 precomputed and signed,
so servers that verify it still do); its own ceiling is what it gets from nginx.
See bench/README.md ("bench_peers.py") for what each number means.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import rawhttp  # noqa: E402
from nginx import Nginx  # noqa: E402
from peers import PEER_SPECS, Peer  # noqa: E402
from rawhttp import CheckError, Conn, LoadResult, Request, Response, Signer, parse_list, qs  # noqa: E402
from servers import Server, Tierstore  # noqa: E402
from settle import settle, turns  # noqa: E402

from server import compiled_build  # noqa: E402

KiB = 1024
MiB = 1024 * 1024
BUCKET = "feedgpus"
LIST_BUCKET = "feedgpus-list"
PAGE = 1000


# ---------------------------------------------------------------- plan


@dataclass(frozen=True)
class Shape:
    name: str
    op: str  # get | put | gget (gpu-direct GET, tierstore only)
    size: int
    concurrency: int
    max_ops: int
    budget_s: float


@dataclass(frozen=True)
class Plan:
    shapes: tuple[Shape, ...]
    rounds: int
    pool_small: int  # distinct 4 KiB objects in the GET working set
    pool_large: int  # distinct 64 MiB objects
    list_budget_s: float  # time to fill the LIST bucket, per target (tierstore)
    list_budget_peer_s: float  # ... per peer
    list_max_keys: int
    list_page_reps: int  # first/last page requests per round
    list_pass_budget_s: float
    ckpt_mib: int
    ckpt_rounds: int


def _shapes(
    b_large_get: float, b_large_put: float, b_small: float, n_large: int, n_small: int
) -> tuple[Shape, ...]:
    return (
        Shape("get-64MiB-c2", "get", 64 * MiB, 2, n_large, b_large_get),
        Shape("get-64MiB-c4", "get", 64 * MiB, 4, 2 * n_large, b_large_get),
        Shape("put-64MiB-c2", "put", 64 * MiB, 2, n_large, b_large_put),
        Shape("put-64MiB-c4", "put", 64 * MiB, 4, 2 * n_large, b_large_put),
        Shape("get-4KiB-c16", "get", 4 * KiB, 16, n_small, b_small),
        Shape("get-4KiB-c32", "get", 4 * KiB, 32, n_small, b_small),
        Shape("put-4KiB-c16", "put", 4 * KiB, 16, n_small, b_small),
        Shape("put-4KiB-c32", "put", 4 * KiB, 32, n_small, b_small),
        Shape("gpu-get-4KiB-c1", "gget", 4 * KiB, 1, n_small, b_small),
        Shape("gpu-get-4KiB-c16", "gget", 4 * KiB, 16, n_small, b_small),
    )


FULL = Plan(
    _shapes(2.0, 4.0, 1.5, 6, 6000),
    rounds=3,
    pool_small=256,
    pool_large=4,
    list_budget_s=90.0,
    list_budget_peer_s=20.0,
    list_max_keys=1_000_000,
    list_page_reps=20,
    list_pass_budget_s=4.0,
    ckpt_mib=2048,
    ckpt_rounds=1,
)
QUICK = Plan(
    _shapes(1.5, 2.5, 1.0, 4, 3000),
    rounds=2,
    pool_small=128,
    pool_large=2,
    list_budget_s=15.0,
    list_budget_peer_s=6.0,
    list_max_keys=1_000_000,
    list_page_reps=10,
    list_pass_budget_s=2.0,
    ckpt_mib=256,
    ckpt_rounds=1,
)


# ---------------------------------------------------------------- targets


def workers_supported() -> bool:
    out = subprocess.run(
        [sys.executable, "-m", "server.cli", "serve", "--help"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        timeout=60,
    )
    return "--workers" in out.stdout


@dataclass
class Payload:
    data: bytes
    md5: str
    sha256: str


def payloads(size: int, n: int) -> list[Payload]:
    out = []
    for _ in range(n):
        b = os.urandom(size)
        out.append(Payload(b, hashlib.md5(b).hexdigest(), hashlib.sha256(b).hexdigest()))
    return out


class Target:
    """One server under test: how to address it, its signer and its pool of connections."""

    def __init__(self, server: Server, kind: str) -> None:
        self.server = server
        self.name = server.name
        self.kind = kind  # tierstore | nginx | peer
        self.signer = Signer("127.0.0.1", server.port, server.access_key, server.secret_key)
        self.conns: list[Conn] = []
        self.setup: dict[str, Any] = {}
        self.gpu_tier_ok = False

    @property
    def is_s3(self) -> bool:
        return self.kind != "nginx"

    def conn(self) -> Conn:
        return Conn("127.0.0.1", self.server.port)

    def one(self, req: Request, expect: tuple[int, ...] = (200,)) -> Response:
        c = self.conn()
        try:
            res = c.do(req)
        finally:
            c.close()
        if res.status not in expect:
            raise CheckError(
                f"{self.name} {req.method} {req.target}: HTTP {res.status} {bytes(res.body[:300])!r}"
            )
        return res

    def path(self, bucket: str, key: str = "") -> str:
        return f"/{bucket}/{key}" if key else f"/{bucket}"

    def warm_request(self) -> Request:
        if self.is_s3:
            return self.signer.request("HEAD", self.path(BUCKET))
        return self.signer.request("HEAD", "/.ready")

    def close(self) -> None:
        for c in self.conns:
            c.close()


def etag(res: Response) -> str:
    return (res.headers.get("ETag") or "").strip('"')


def get_key(size: int, j: int) -> str:
    return f"get/{size}/{j:05d}"


def gpu_key(j: int) -> str:
    return f"gpu/{j:05d}"


def fan_out(items: list[Any], fn: Any, threads: int) -> None:
    """Run fn(item) over items on `threads` threads; the first exception is re-raised."""
    errs: list[BaseException] = []
    it = iter(items)
    lock = threading.Lock()

    def work() -> None:
        while not errs and not rawhttp.STOP.is_set():
            with lock:
                x = next(it, None)
            if x is None:
                return
            try:
                fn(x)
            except BaseException as exc:  # noqa: BLE001
                errs.append(exc)

    ts = [threading.Thread(target=work, daemon=True) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errs:
        raise errs[0]
    if rawhttp.STOP.is_set():
        raise KeyboardInterrupt


@contextlib.contextmanager
def own_tierstore() -> Iterator[Target]:
    """A tierstore of this checkout (default configuration, temp dir) and a target on it, for the
    single-server scripts (bench_list, profile_tierstore, ctx_switches): stopped and removed after."""
    server = Tierstore()
    server.start()
    t = Target(server, "tierstore")
    try:
        yield t
    finally:
        rawhttp.STOP.set()
        t.close()
        server.stop()


def setup_target(t: Target, small: list[Payload], large: list[Payload], gpu: bool) -> None:
    t0 = time.perf_counter()
    if not t.is_s3:
        assert isinstance(t.server, Nginx)
        t.server.make_bucket(BUCKET)
        for j, p in enumerate(small):
            t.server.put_file(BUCKET, get_key(4 * KiB, j), p.data)
        for j, p in enumerate(large):
            t.server.put_file(BUCKET, get_key(64 * MiB, j), p.data)
        t.setup["get_working_set_s"] = round(time.perf_counter() - t0, 2)
        return
    t.one(t.signer.request("PUT", t.path(BUCKET)))
    t.one(t.signer.request("PUT", t.path(LIST_BUCKET)))

    def put(job: tuple[str, Payload, dict[str, str]]) -> None:
        key, p, hdrs = job
        res = t.one(t.signer.request("PUT", t.path(BUCKET, key), body=p.data, sha256=p.sha256, headers=hdrs))
        if etag(res) != p.md5:
            raise CheckError(f"{t.name} setup PUT {key}: ETag {etag(res)!r}, expected {p.md5!r}")

    jobs: list[tuple[str, Payload, dict[str, str]]] = [
        (get_key(4 * KiB, j), p, {}) for j, p in enumerate(small)
    ]
    jobs += [(get_key(64 * MiB, j), p, {}) for j, p in enumerate(large)]
    if gpu:
        jobs += [(gpu_key(j), p, {"x-amz-storage-class": "EXPRESS_ONEZONE"}) for j, p in enumerate(small)]
    fan_out(jobs, put, 4)
    t.setup["get_working_set_s"] = round(time.perf_counter() - t0, 2)
    if gpu:
        res = t.one(t.signer.request("HEAD", t.path(BUCKET, gpu_key(0))))
        tier = res.headers.get("x-tierstore-tier")
        t.gpu_tier_ok = tier == "gpu-direct"
        t.setup["gpu_object_tier"] = tier
        res = t.one(t.signer.request("HEAD", t.path(BUCKET, get_key(4 * KiB, 0))))
        t.setup["standard_object_tier"] = res.headers.get("x-tierstore-tier")


# ---------------------------------------------------------------- one shape on one target


@dataclass
class Row:
    target: str
    shape: str
    round: int
    res: LoadResult


def run_shape(t: Target, shape: Shape, rnd: int, small: list[Payload], large: list[Payload]) -> LoadResult:
    pool = small if shape.size == 4 * KiB else large
    sig = t.signer
    if shape.op in ("get", "gget"):
        keyf = gpu_key if shape.op == "gget" else (lambda j: get_key(shape.size, j))
        reqs = [sig.request("GET", t.path(BUCKET, keyf(j))) for j in range(len(pool))]

        def make(i: int) -> Request:
            return reqs[i % len(reqs)]

        def check(i: int, req: Request, res: Response) -> None:
            p = pool[i % len(pool)]
            if res.status != 200:
                raise CheckError(f"GET {req.target}: HTTP {res.status} {bytes(res.body[:200])!r}")
            if res.length != shape.size:
                raise CheckError(f"GET {req.target}: {res.length} bytes, expected {shape.size}")
            if t.is_s3 and etag(res) != p.md5:
                raise CheckError(f"GET {req.target}: ETag {etag(res)!r}, expected {p.md5!r}")
            if res.body != p.data:
                raise CheckError(f"GET {req.target}: body differs from what was PUT")

        return rawhttp.run_load(
            "127.0.0.1",
            t.server.port,
            t.conns,
            shape.concurrency,
            shape.max_ops,
            shape.budget_s,
            make,
            check,
            size=shape.size,
            expect_size=shape.size,
            warm=t.warm_request(),
        )
    # PUT: every request signed before the clock starts (fresh keys per round)
    n = shape.max_ops
    reqs = []
    for i in range(n):
        p = pool[i % len(pool)]
        reqs.append(
            sig.request(
                "PUT", t.path(BUCKET, f"put/{shape.name}/r{rnd}/{i:06d}"), body=p.data, sha256=p.sha256
            )
        )

    def check_put(i: int, req: Request, res: Response) -> None:
        if t.is_s3:
            if res.status != 200:
                raise CheckError(f"PUT {req.target}: HTTP {res.status} {bytes(res.body[:200])!r}")
            if etag(res) != pool[i % len(pool)].md5:
                raise CheckError(
                    f"PUT {req.target}: ETag {etag(res)!r}, expected {pool[i % len(pool)].md5!r}"
                )
        elif res.status not in (201, 204):
            raise CheckError(f"PUT {req.target}: HTTP {res.status}")

    r = rawhttp.run_load(
        "127.0.0.1",
        t.server.port,
        t.conns,
        shape.concurrency,
        n,
        shape.budget_s,
        lambda i: reqs[i],
        check_put,
        size=shape.size,
        warm=t.warm_request(),
    )
    if shape.size >= MiB:  # large PUTs are deleted afterwards (untimed): memory / disk stay bounded

        def delete(i: int) -> None:
            req = sig.request("DELETE", t.path(BUCKET, f"put/{shape.name}/r{rnd}/{i:06d}"))
            t.one(req, expect=(200, 204, 404))

        fan_out(list(range(min(n, r.ops + r.errors + shape.concurrency))), delete, 4)
    return r


# ---------------------------------------------------------------- LIST


def list_key(i: int) -> str:
    return f"list/{i:07d}"


def fill_list_bucket(
    t: Target, budget_s: float, max_keys: int, threads: int = 32, mid: Any = None
) -> dict[str, Any]:
    """0-byte PUTs at `threads` concurrency until the budget or max_keys; keys are contiguous 0..n-1
    (each thread takes the next number). `mid(n)` runs once when half the budget is spent."""
    lock = threading.Lock()
    nxt = [0]
    done: set[int] = set()
    errors: list[str] = []
    t0 = time.perf_counter()
    deadline = t0 + budget_s
    pause = threading.Event()
    pause.set()

    def work() -> None:
        c = t.conn()
        try:
            while not rawhttp.STOP.is_set() and len(errors) < 10:
                pause.wait()
                with lock:
                    if nxt[0] >= max_keys or time.perf_counter() >= deadline:
                        return
                    i = nxt[0]
                    nxt[0] += 1
                req = t.signer.request("PUT", t.path(LIST_BUCKET, list_key(i)), body=b"")
                try:
                    res = c.do(req)
                    if res.status != 200:
                        raise CheckError(f"HTTP {res.status} {bytes(res.body[:200])!r}")
                    with lock:
                        done.add(i)
                except Exception as exc:  # noqa: BLE001
                    with lock:
                        errors.append(f"{list_key(i)}: {type(exc).__name__}: {exc}"[:200])
        finally:
            c.close()

    ts = [threading.Thread(target=work, daemon=True) for _ in range(threads)]
    for th in ts:
        th.start()
    mid_info = None
    paused_s = 0.0
    if mid is not None:
        while time.perf_counter() < t0 + budget_s / 2 and any(th.is_alive() for th in ts):
            time.sleep(0.2)
        if any(th.is_alive() for th in ts):
            pause.clear()
            time.sleep(1.0)  # let in-flight PUTs land
            p0 = time.perf_counter()
            with lock:
                n_now = nxt[0]
                contiguous = len(done) == n_now
            if contiguous:
                mid_info = mid(n_now)
            paused_s = time.perf_counter() - p0
            deadline += paused_s
            pause.set()
    for th in ts:
        th.join()
    wall = time.perf_counter() - t0 - paused_s
    if errors:
        raise CheckError(f"{t.name}: filling the LIST bucket: {len(errors)} errors, e.g. {errors[:2]}")
    n = len(done)
    if n != nxt[0]:
        raise CheckError(f"{t.name}: LIST bucket has holes ({n} of {nxt[0]})")
    return {"keys": n, "fill_s": round(wall, 1), "fill_puts_s": round(n / wall, 1), "mid": mid_info}


def list_page(t: Target, conn: Conn, req: Request) -> tuple[float, list[bytes], bool, str | None, int | None]:
    t0 = time.perf_counter()
    res = conn.do(req)
    dt_s = time.perf_counter() - t0
    if res.status != 200:
        raise CheckError(f"LIST {req.target}: HTTP {res.status} {bytes(res.body[:200])!r}")
    keys, trunc, tok, kc = parse_list(bytes(res.body))
    return dt_s, keys, trunc, tok, kc


def list_pages(t: Target, n_keys: int, reps: int) -> dict[str, Any]:
    """First page and last page (StartAfter the key before the last PAGE), each `reps` times, presigned."""
    conn = t.conn()
    out: dict[str, Any] = {}
    try:
        first = t.signer.request("GET", t.path(LIST_BUCKET), qs({"list-type": "2", "max-keys": str(PAGE)}))
        last_start = max(0, n_keys - PAGE) - 1
        params = {"list-type": "2", "max-keys": str(PAGE)}
        if last_start >= 0:
            params["start-after"] = list_key(last_start)
        last = t.signer.request("GET", t.path(LIST_BUCKET), qs(params))
        conn.do(t.signer.request("HEAD", t.path(LIST_BUCKET)))
        for name, req, want0 in (("first", first, 0), ("last", last, max(0, n_keys - PAGE))):
            lat = []
            parse = []
            for _ in range(reps):
                dt_s, keys, _trunc, _tok, kc = list_page(t, conn, req)
                want = min(PAGE, n_keys)
                if (
                    len(keys) != want
                    or (kc is not None and kc != want)
                    or keys[0] != list_key(want0).encode()
                ):
                    raise CheckError(
                        f"{t.name} LIST {name} page: {len(keys)} keys from "
                        f"{keys[:1]!r}, expected {want} from {list_key(want0)}"
                    )
                lat.append(dt_s)
            # what the client's parsing of that page costs (already inside the latencies above)
            res = conn.do(req)
            p0 = time.perf_counter()
            for _ in range(5):
                parse_list(bytes(res.body))
            parse.append((time.perf_counter() - p0) / 5)
            lat.sort()
            out[name] = {
                "p50_ms": rawhttp.percentile(lat, 50) * 1e3,
                "p99_ms": rawhttp.percentile(lat, 99) * 1e3,
                "n": len(lat),
                "client_parse_ms": statistics.median(parse) * 1e3,
            }
    finally:
        conn.close()
    return out


def list_full_pass(t: Target, n_keys: int, budget_s: float) -> dict[str, Any]:
    """Listing passes over the whole bucket following continuation tokens (signing each page is
    inside the time: ~0.1 ms); stops starting new passes after the budget (at least one pass)."""
    conn = t.conn()
    total_keys = 0
    lat: list[float] = []
    t0 = time.perf_counter()
    passes = 0
    try:
        conn.do(t.signer.request("HEAD", t.path(LIST_BUCKET)))
        t0 = time.perf_counter()
        while passes == 0 or time.perf_counter() - t0 < budget_s:
            token = None
            seen = 0
            last = b""
            while True:
                params = {"list-type": "2", "max-keys": str(PAGE)}
                if token:
                    params["continuation-token"] = token
                req = t.signer.request("GET", t.path(LIST_BUCKET), qs(params))
                dt_s, keys, trunc, token, kc = list_page(t, conn, req)
                lat.append(dt_s)
                if keys and (keys[0] <= last or keys != sorted(keys)) or (kc is not None and kc != len(keys)):
                    raise CheckError(f"{t.name} LIST pass: page out of order or KeyCount wrong")
                seen += len(keys)
                last = keys[-1] if keys else last
                if not trunc:
                    break
                if not token:
                    raise CheckError(f"{t.name} LIST pass: truncated page without a continuation token")
            if seen != n_keys:
                raise CheckError(f"{t.name} LIST pass: {seen} keys, expected {n_keys}")
            total_keys += seen
            passes += 1
            if rawhttp.STOP.is_set():
                raise KeyboardInterrupt
    finally:
        conn.close()
    wall = time.perf_counter() - t0
    lat.sort()
    return {
        "keys_s": total_keys / wall,
        "passes": passes,
        "pages": len(lat),
        "page_p50_ms": rawhttp.percentile(lat, 50) * 1e3,
        "page_p99_ms": rawhttp.percentile(lat, 99) * 1e3,
    }


# ---------------------------------------------------------------- checkpoint


def checkpoint_bench(t: Target, mib: int, rounds: int, tmpdir: Path) -> dict[str, Any]:
    """S3Checkpoint save/load of a state dict of `mib` MiB (random float32 tensors of 64 MiB) vs
    torch.save/torch.load to/from a local file (save: + fsync; load: right after, so from page cache).
    Falls back to boto3 upload_fileobj/download_fileobj of the serialized bytes if s3torchconnector or
    torch is missing."""
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    try:
        import torch
        from s3torchconnector import S3Checkpoint, S3ClientConfig

        mode = "s3torchconnector"
    except Exception:  # noqa: BLE001
        mode = "boto3"
    env = {
        "AWS_ACCESS_KEY_ID": t.server.access_key,
        "AWS_SECRET_ACCESS_KEY": t.server.secret_key,
        "AWS_REGION": "us-east-1",
    }
    os.environ.update(env)
    t.one(t.signer.request("PUT", t.path("ckpt")), expect=(200, 409))
    nbytes = mib * MiB
    local = tmpdir / "ckpt-local.pt"
    rows: list[dict[str, float]] = []
    info: dict[str, Any] = {"mode": mode, "mib": mib}
    if mode == "s3torchconnector":
        g = torch.Generator().manual_seed(0)
        n_t = max(1, mib // 64)
        state = {
            f"layer{i}.weight": torch.randn(16 * MiB, generator=g, dtype=torch.float32) for i in range(n_t)
        }
        nbytes = sum(v.numel() * v.element_size() for v in state.values())
        ck = S3Checkpoint(
            region="us-east-1",
            endpoint=t.server.endpoint,
            s3client_config=S3ClientConfig(force_path_style=True),
        )
        for r in range(rounds):
            uri = f"s3://ckpt/r{r}/state.pt"
            row: dict[str, float] = {}
            order = ("s3", "local") if r % 2 == 0 else ("local", "s3")
            for side in order:
                if side == "s3":
                    t0 = time.perf_counter()
                    with ck.writer(uri) as w:
                        torch.save(state, w)
                    row["s3_save_s"] = time.perf_counter() - t0
                    t0 = time.perf_counter()
                    with ck.reader(uri) as rd:
                        # torch types `f` as IO[bytes]; any binary file object works (S3Reader is a BufferedIOBase).
                        back = torch.load(rd, weights_only=True)  # type: ignore[arg-type]
                    row["s3_load_s"] = time.perf_counter() - t0
                else:
                    t0 = time.perf_counter()
                    with open(local, "wb") as f:
                        torch.save(state, f)
                        f.flush()
                        os.fsync(f.fileno())
                    row["local_save_s"] = time.perf_counter() - t0
                    t0 = time.perf_counter()
                    with open(local, "rb") as f:
                        back = torch.load(f, weights_only=True)
                    row["local_load_s"] = time.perf_counter() - t0
                if not all(
                    torch.equal(back[k], state[k]) for k in ("layer0.weight", f"layer{n_t - 1}.weight")
                ):
                    raise CheckError(f"checkpoint {side}: tensors read back differ")
                del back
            local.unlink(missing_ok=True)
            rows.append(row)
            print(
                f"  ckpt r{r} " + "  ".join(f"{k} {nbytes / MiB / v:7.1f} MiB/s" for k, v in row.items()),
                flush=True,
            )
    else:
        import io

        import boto3

        data = os.urandom(nbytes)
        s3 = boto3.client(
            "s3",
            endpoint_url=t.server.endpoint,
            aws_access_key_id=t.server.access_key,
            aws_secret_access_key=t.server.secret_key,
            region_name="us-east-1",
        )
        for r in range(rounds):
            row = {}
            t0 = time.perf_counter()
            s3.upload_fileobj(io.BytesIO(data), "ckpt", f"r{r}/state.bin")
            row["s3_save_s"] = time.perf_counter() - t0
            buf = io.BytesIO()
            t0 = time.perf_counter()
            s3.download_fileobj("ckpt", f"r{r}/state.bin", buf)
            row["s3_load_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            with open(local, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            row["local_save_s"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            local.read_bytes()
            row["local_load_s"] = time.perf_counter() - t0
            local.unlink(missing_ok=True)
            rows.append(row)
    info["bytes"] = nbytes
    info["rounds"] = rows
    for k in ("s3_save", "s3_load", "local_save", "local_load"):
        info[f"{k}_mib_s"] = nbytes / MiB / statistics.median(r[f"{k}_s"] for r in rows)
    return info


# ---------------------------------------------------------------- report


def machine_info() -> dict[str, Any]:
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    repo = Path(__file__).resolve().parents[1]

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", *args], cwd=repo, capture_output=True, text=True, timeout=10
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    dirty = git("status", "--porcelain", "--", "server", "tiering", "erasure", "lifecycle")
    mem = ""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal"):
            mem = f"{int(line.split()[1]) / 2**20:.0f} GiB"
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "mem": mem,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "git_head": git("rev-parse", "--short", "HEAD"),
        "git_dirty_server_files": len(dirty.splitlines()) if dirty else 0,
        # setup.py's optional compiled build, as the tierstore started from this checkout runs it
        "tierstore_build": compiled_build.describe(repo),
    }


class LoadSampler(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[float] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            self.samples.append(os.getloadavg()[0])
            self.halt.wait(10)

    def summary(self) -> dict[str, float]:
        s = self.samples or [os.getloadavg()[0]]
        return {"min": min(s), "median": statistics.median(s), "max": max(s), "n": len(s)}


def fmt(x: float | None, digits: int = 1) -> str:
    if x is None or x != x:
        return "-"
    return f"{x:,.{digits}f}" if abs(x) < 100 else f"{x:,.0f}"


def summarize(rows: list[Row]) -> dict[str, dict[str, dict[str, Any]]]:
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(r.target, {}).setdefault(r.shape, {"runs": []})["runs"].append(r.res)
    for shapes in out.values():
        for name, m in shapes.items():
            runs: list[LoadResult] = m.pop("runs")
            m.update(
                {
                    "rounds": len(runs),
                    "ops": sum(x.ops for x in runs),
                    "errors": sum(x.errors for x in runs),
                    "ops_s": statistics.median(x.ops_s for x in runs),
                    "mib_s": statistics.median(x.mib_s for x in runs),
                    "p50_ms": statistics.median(x.p50_ms for x in runs),
                    "p99_ms": statistics.median(x.p99_ms for x in runs),
                    "ops_s_rounds": [round(x.ops_s, 1) for x in runs],
                    "error_samples": [e for x in runs for e in x.error_samples][:3],
                }
            )
            del name
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--quick", action="store_true", help="short budgets, 2 rounds, small LIST bucket, 256 MiB checkpoint"
    )
    ap.add_argument(
        "--peers",
        default="moto,seaweedfs",
        help=f"comma list from {sorted(PEER_SPECS)} (ceph and swift take minutes); '' for none",
    )
    ap.add_argument("--no-nginx", action="store_true")
    ap.add_argument(
        "--no-workers", action="store_true", help="skip the `tierstore serve --workers N` variant"
    )
    ap.add_argument(
        "--workers", type=int, default=os.cpu_count() or 2, help="N for the variant (default nproc)"
    )
    ap.add_argument("--rounds", type=int)
    ap.add_argument(
        "--no-settle",
        action="store_true",
        help="start each run right after the last one (no sync, no wait for quiet CPUs: bench/settle.py)",
    )
    ap.add_argument(
        "--shapes", help="comma list of shape-name prefixes (e.g. get-4KiB,gpu); 'none' for no shapes"
    )
    ap.add_argument("--no-list", action="store_true")
    ap.add_argument("--list-budget", type=float, help="seconds to fill tierstore's LIST bucket")
    ap.add_argument("--list-peer-budget", type=float, help="seconds to fill each peer's LIST bucket")
    ap.add_argument(
        "--list-targets",
        default="tierstore,moto,seaweedfs",
        help="which targets get a LIST bucket (default tierstore,moto,seaweedfs)",
    )
    ap.add_argument(
        "--ckpt-mib", type=int, help="checkpoint state-dict size (default 2048; quick 256); 0: skip"
    )
    ap.add_argument("--ckpt-rounds", type=int)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)

    plan = QUICK if args.quick else FULL
    rounds = args.rounds or plan.rounds
    shapes = plan.shapes
    if args.shapes:
        want = [p.strip() for p in args.shapes.split(",") if p.strip()]
        shapes = tuple(s for s in shapes if any(s.name.startswith(p) for p in want))
    peer_names = [p.strip() for p in args.peers.split(",") if p.strip()]
    bad = [p for p in peer_names if p not in PEER_SPECS]
    if bad:
        ap.error(f"unknown peers {bad}")
    ckpt_mib = plan.ckpt_mib if args.ckpt_mib is None else args.ckpt_mib
    ckpt_rounds = args.ckpt_rounds or plan.ckpt_rounds
    list_budget = args.list_budget or plan.list_budget_s
    list_peer_budget = args.list_peer_budget or plan.list_budget_peer_s
    list_targets = [x.strip() for x in args.list_targets.split(",") if x.strip()]

    def on_signal(signum: int, frame: Any) -> None:
        rawhttp.STOP.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    t_start = time.monotonic()
    meta: dict[str, Any] = {
        "command": " ".join([".venv/bin/python", *sys.argv]),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "mode": "quick" if args.quick else "full",
        "rounds": rounds,
        "shapes": [asdict(s) for s in shapes],
        "machine": machine_info(),
        "loadavg_start": os.getloadavg(),
    }
    m = meta["machine"]
    print(
        f"bench_peers: {meta['mode']}, {rounds} rounds, {len(shapes)} shapes; {m['nproc']} x {m['cpu_model']}, "
        f"load {meta['loadavg_start'][0]:.1f}",
        flush=True,
    )
    sampler = LoadSampler()
    sampler.start()
    small = payloads(4 * KiB, plan.pool_small)
    large = payloads(64 * MiB, plan.pool_large) if any(s.size == 64 * MiB for s in shapes) else []

    servers: list[Server] = []
    targets: list[Target] = []
    rows: list[Row] = []
    lists: dict[str, Any] = {}
    ckpt: dict[str, Any] = {}
    starts: dict[str, Any] = {}
    failures: dict[str, str] = {}
    exit_code = 0
    deferred_rm: list[Path] = []
    tmpdir = Path(tempfile.mkdtemp(prefix="bench-peers-"))
    try:
        todo: list[tuple[str, Any, str]] = [("tierstore", Tierstore, "tierstore")]
        if not args.no_workers:
            if workers_supported():
                todo.append((f"tierstore-w{args.workers}", lambda: Tierstore(args.workers), "tierstore"))
            else:
                print("bench_peers: `tierstore serve --workers` not available: variant skipped", flush=True)
        if not args.no_nginx:
            todo.append(("nginx", Nginx, "nginx"))
        for p in peer_names:
            todo.append((p, lambda p=p: Peer(p), "peer"))
        for name, factory, kind in todo:
            server = factory()
            servers.append(server)
            print(f"bench_peers: starting {name} ...", flush=True)
            try:
                server.start()
            except Exception as exc:  # noqa: BLE001 - a peer that does not start is reported, not fatal
                if name == "tierstore":
                    raise
                failures[name] = f"start failed: {exc}"[:500]
                print(f"bench_peers: {name} did not start: {str(exc)[:300]}", flush=True)
                continue
            starts[name] = {"start_s": round(server.start_s, 1), **server.info}
            print(
                f"bench_peers: {name} up at {server.endpoint} in {server.start_s:.1f}s {server.info}",
                flush=True,
            )
            t = Target(server, kind)
            try:
                setup_target(t, small, large, gpu=kind == "tierstore" and any(s.op == "gget" for s in shapes))
            except CheckError as exc:
                if name == "tierstore":
                    raise
                failures[name] = f"setup failed: {exc}"[:500]
                print(f"bench_peers: {name} setup failed: {exc}", flush=True)
                continue
            print(f"bench_peers: {name} setup {t.setup}", flush=True)
            targets.append(t)

        # ---- interleaved shapes
        for rnd in range(rounds):
            order = turns(targets, rnd)
            for shape in shapes:
                for t in order:
                    if shape.op == "gget" and t.kind != "tierstore":
                        continue
                    settled = None if args.no_settle else settle()
                    r = run_shape(t, shape, rnd, small, large)
                    rows.append(Row(t.name, shape.name, rnd, r))
                    flag = f"  ERRORS {r.errors}: {r.error_samples[:1]}" if r.errors else ""
                    print(
                        f"  r{rnd} {shape.name:<17} {t.name:<13} {r.ops:5d} ops {r.wall_s:5.2f}s {r.ops_s:9.1f} ops/s "
                        f"{r.mib_s:8.1f} MiB/s  P50 {r.p50_ms:8.2f}  P99 {r.p99_ms:8.2f} ms{flag}"
                        + (f"  [{settled.describe()}]" if settled is not None else ""),
                        flush=True,
                    )
                    if rawhttp.STOP.is_set():
                        raise KeyboardInterrupt

        # ---- LIST
        if not args.no_list:
            ltargets = [
                t
                for t in targets
                if t.is_s3
                and (t.name in list_targets or (t.kind == "tierstore" and "tierstore" in list_targets))
            ]
            for t in ltargets:
                budget = list_budget if t.kind == "tierstore" else list_peer_budget
                if t.name != "tierstore" and t.kind == "tierstore":
                    budget = list_peer_budget  # the workers variant: its own, smaller bucket
                print(f"bench_peers: filling {t.name}'s LIST bucket for up to {budget:.0f}s ...", flush=True)

                def mid(n: int, t: Target = t) -> dict[str, Any]:
                    pg = list_pages(t, n, max(5, plan.list_page_reps // 2)) if n >= PAGE else None
                    return {"keys": n, "pages": pg}

                fill = fill_list_bucket(t, budget, plan.list_max_keys, mid=mid)
                lists[t.name] = {"fill": fill, "rounds": []}
                print(f"bench_peers: {t.name} LIST bucket: {fill}", flush=True)
            for rnd in range(rounds):
                for t in turns(ltargets, rnd):
                    if not args.no_settle:
                        settle()
                    n = lists[t.name]["fill"]["keys"]
                    full = list_full_pass(t, n, plan.list_pass_budget_s)
                    pages = list_pages(t, n, plan.list_page_reps)
                    lists[t.name]["rounds"].append({"pass": full, "pages": pages})
                    print(
                        f"  r{rnd} list-{n}  {t.name:<13} {full['keys_s']:9,.0f} keys/s ({full['passes']} passes, page "
                        f"P50 {full['page_p50_ms']:.2f} ms)  first page P50 {pages['first']['p50_ms']:.2f} ms  "
                        f"last page P50 {pages['last']['p50_ms']:.2f} ms (client parse "
                        f"{pages['first']['client_parse_ms']:.2f} ms)",
                        flush=True,
                    )

        # ---- checkpoint
        if ckpt_mib:
            t = next(t for t in targets if t.name == "tierstore")
            print(
                f"bench_peers: checkpoint {ckpt_mib} MiB x {ckpt_rounds} rounds on {t.name} ...", flush=True
            )
            ckpt = checkpoint_bench(t, ckpt_mib, ckpt_rounds, tmpdir)
    except KeyboardInterrupt:
        rawhttp.STOP.set()
        print("\nbench_peers: interrupted; stopping servers", file=sys.stderr, flush=True)
        exit_code = 130
    except Exception as exc:  # noqa: BLE001
        rawhttp.STOP.set()
        import traceback

        traceback.print_exc()
        print(f"bench_peers: FAILED: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        for s in servers:
            if s.tmp is not None and s.log_path.exists():
                print(f"--- {s.name} log tail ---\n{s.log_tail()}", file=sys.stderr)
        exit_code = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        sampler.halt.set()
        for t in targets:
            t.close()
        for s in reversed(servers):
            if isinstance(s, (Tierstore, Nginx)) and s.tmp is not None:
                deferred_rm.append(s.tmp)  # tens of thousands of files: removed after the report
                s.tmp = None
                s.stop()
                s.tmp = None
            else:
                s.stop()
            if s.name in starts:
                starts[s.name]["stop_s"] = s.info.get("stop_s")
            print(f"bench_peers: {s.name} stopped ({s.info.get('stop_s')}s)", file=sys.stderr, flush=True)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    meta["loadavg_end"] = os.getloadavg()
    meta["loadavg_during"] = sampler.summary()
    meta["elapsed_s"] = round(time.monotonic() - t_start, 1)
    summary = summarize(rows)
    report = build_report(meta, summary, [s for s in shapes], lists, ckpt, starts, failures)
    print("\n" + report["text"], flush=True)
    if any(m["errors"] for sh in summary.values() for m in sh.values()):
        print("bench_peers: SOME SHAPES HAD ERRORS; their numbers are not valid.")
        exit_code = exit_code or 2
    if args.out:
        doc = {
            "meta": meta,
            "starts": starts,
            "failures": failures,
            "summary": summary,
            "list": lists,
            "checkpoint": ckpt,
            "targets_verdict": report["verdicts"],
            "runs": [{"target": r.target, "shape": r.shape, "round": r.round, **asdict(r.res)} for r in rows],
        }
        args.out.write_text(json.dumps(doc, indent=2, default=str))
        print(f"bench_peers: results written to {args.out}")
    t0 = time.monotonic()
    for d in [*deferred_rm, tmpdir]:
        shutil.rmtree(d, ignore_errors=True)
    print(f"bench_peers: temp dirs removed in {time.monotonic() - t0:.0f}s", file=sys.stderr)
    return exit_code


def build_report(
    meta: dict[str, Any],
    summary: dict[str, Any],
    shapes: list[Shape],
    lists: dict[str, Any],
    ckpt: dict[str, Any],
    starts: dict[str, Any],
    failures: dict[str, str],
) -> dict[str, Any]:
    lines: list[str] = []
    names = list(summary)
    ld = meta["loadavg_during"]
    lines.append(
        f"bench_peers: done in {meta['elapsed_s']:.0f}s; load average (1 min) during the run "
        f"min {ld['min']:.1f} / median {ld['median']:.1f} / max {ld['max']:.1f}"
    )
    lines.append("")
    lines.append("| target | start s | version / note |")
    lines.append("| --- | ---: | --- |")
    for n, s in starts.items():
        note = s.get("version") or s.get("tiers") or ""
        inst = f"; installed by start.sh: {s['installed']}" if "installed" in s else ""
        lines.append(f"| {n} | {s['start_s']} | {note}{inst} |")
    for n, f in failures.items():
        lines.append(f"| {n} | - | **{f[:200]}** |")
    lines.append("")
    # one table: rows shapes, columns targets: MiB/s (large) or ops/s (small), P50/P99
    lines.append("| shape | " + " | ".join(names) + " |")
    lines.append("| --- | " + " | ".join("---:" for _ in names) + " |")
    for s in shapes:
        cells = []
        for n in names:
            m = summary[n].get(s.name)
            if not m:
                cells.append("")
                continue
            thr = f"{fmt(m['mib_s'])} MiB/s" if s.size >= MiB else f"{fmt(m['ops_s'], 0)} ops/s"
            err = f" **ERR {m['errors']}**" if m["errors"] else ""
            cells.append(f"{thr}<br>P50 {fmt(m['p50_ms'], 2)} / P99 {fmt(m['p99_ms'], 2)} ms{err}")
        lines.append(f"| {s.name} | " + " | ".join(cells) + " |")
    lines.append("")
    if lists:
        lines.append(
            "| LIST target | keys filled | fill PUT/s (c32, 0 B) | keys/s (full pass) | page P50 ms (pass) "
            "| first page P50 / P99 ms | last page P50 / P99 ms | mid-fill (keys: first / last P50 ms) "
            "| client parse ms/page |"
        )
        lines.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |")
        for n, li in lists.items():
            rs = li["rounds"]
            if not rs:
                continue
            med = statistics.median
            ks = med(r["pass"]["keys_s"] for r in rs)
            pp = med(r["pass"]["page_p50_ms"] for r in rs)
            f50 = med(r["pages"]["first"]["p50_ms"] for r in rs)
            f99 = med(r["pages"]["first"]["p99_ms"] for r in rs)
            l50 = med(r["pages"]["last"]["p50_ms"] for r in rs)
            l99 = med(r["pages"]["last"]["p99_ms"] for r in rs)
            cp = med(r["pages"]["first"]["client_parse_ms"] for r in rs)
            li["median"] = {
                "keys_s": ks,
                "first_p50_ms": f50,
                "last_p50_ms": l50,
                "first_p99_ms": f99,
                "last_p99_ms": l99,
                "pass_page_p50_ms": pp,
            }
            mid = li["fill"].get("mid") or {}
            midtxt = "-"
            if mid.get("pages"):
                midtxt = (
                    f"{mid['keys']:,}: {mid['pages']['first']['p50_ms']:.2f} / "
                    f"{mid['pages']['last']['p50_ms']:.2f}"
                )
            lines.append(
                f"| {n} | {li['fill']['keys']:,} | {fmt(li['fill']['fill_puts_s'])} | {fmt(ks, 0)} | "
                f"{fmt(pp, 2)} | {fmt(f50, 2)} / {fmt(f99, 2)} | {fmt(l50, 2)} / {fmt(l99, 2)} | {midtxt} "
                f"| {cp:.2f} |"
            )
        lines.append("")
    if ckpt:
        lines.append(
            f"Checkpoint ({ckpt['mode']}, {ckpt['bytes'] / MiB:,.0f} MiB state dict, "
            f"{len(ckpt['rounds'])} round(s)): save {ckpt['s3_save_mib_s']:.1f} MiB/s vs local file "
            f"{ckpt['local_save_mib_s']:.1f} MiB/s (ratio {ckpt['s3_save_mib_s'] / ckpt['local_save_mib_s']:.2f}); "
            f"load {ckpt['s3_load_mib_s']:.1f} vs {ckpt['local_load_mib_s']:.1f} MiB/s "
            f"(ratio {ckpt['s3_load_mib_s'] / ckpt['local_load_mib_s']:.2f})"
        )
        lines.append("")

    # ---- verdicts
    verdicts: list[dict[str, Any]] = []

    def get(t: str, shape: str, key: str) -> float | None:
        m = summary.get(t, {}).get(shape)
        if not m or m["errors"]:
            return None
        return m[key]

    ts_names = [n for n in names if n.startswith("tierstore")]
    peers = [n for n in names if not n.startswith("tierstore") and n != "nginx"]

    def verdict(
        target: str, what: str, ratio: float | None, need: str, met: bool | None, detail: str
    ) -> None:
        shape = what.split(" ")[0]
        if shape.endswith(tuple(f"-c{c}" for c in (2, 4, 16, 32))) and shape not in summary.get(target, {}):
            return  # shape not run
        if what.startswith("gpu-direct") and f"gpu-get-4KiB-{what.split()[-1]}" not in summary.get(
            target, {}
        ):
            return
        verdicts.append(
            {"target": target, "what": what, "value": ratio, "need": need, "met": met, "detail": detail}
        )

    for ts in ts_names:
        for c in (2, 4):
            for op, need in (("get", 0.8), ("put", 0.75)):
                sh = f"{op}-64MiB-c{c}"
                a, b = get(ts, sh, "mib_s"), get("nginx", sh, "mib_s")
                r = a / b if a and b else None
                verdict(
                    ts,
                    f"{sh} vs nginx",
                    r,
                    f">= {need}x",
                    None if r is None else r >= need,
                    f"{fmt(a)} vs {fmt(b)} MiB/s",
                )
        for c in (16, 32):
            for op, need in (("get", 20.0), ("put", 10.0)):
                sh = f"{op}-4KiB-c{c}"
                a, b = get(ts, sh, "ops_s"), get("moto", sh, "ops_s")
                r = a / b if a and b else None
                verdict(
                    ts,
                    f"{sh} vs moto",
                    r,
                    f">= {need:.0f}x",
                    None if r is None else r >= need,
                    f"{fmt(a, 0)} vs {fmt(b, 0)} ops/s",
                )
                others = {p: get(p, sh, "ops_s") for p in peers}
                best = max(((v, p) for p, v in others.items() if v), default=(None, None))
                r2 = a / best[0] if a and best[0] else None
                verdict(
                    ts,
                    f"{sh} vs best peer ({best[1]})",
                    r2,
                    "> 1x (ahead of every peer)",
                    None if r2 is None else r2 > 1.0,
                    ", ".join(f"{p} {fmt(v, 0)}" for p, v in others.items()),
                )
        for c in (1, 16):
            p99 = get(ts, f"gpu-get-4KiB-c{c}", "p99_ms")
            verdict(
                ts,
                f"gpu-direct GET 4 KiB P99 at c{c}",
                p99,
                "< 2 ms" if c == 16 else "(info) < 2 ms",
                None if p99 is None else p99 < 2.0,
                f"P99 {fmt(p99, 2)} ms",
            )
        li = lists.get(ts, {}).get("median")
        if li:
            n = lists[ts]["fill"]["keys"]
            verdict(
                ts,
                f"LIST keys/s ({n:,} keys)",
                li["keys_s"],
                ">= 200,000",
                li["keys_s"] >= 200_000,
                f"{fmt(li['keys_s'], 0)} keys/s",
            )
            for side in ("first", "last"):
                v = li[f"{side}_p50_ms"]
                verdict(
                    ts,
                    f"LIST {side} page P50 ({n:,} keys, not 1M)",
                    v,
                    "< 20 ms",
                    v < 20.0,
                    f"{fmt(v, 2)} ms",
                )
    if ckpt:
        verdict(
            "tierstore",
            "checkpoint save vs local file",
            ckpt["s3_save_mib_s"] / ckpt["local_save_mib_s"],
            "(ratio reported)",
            None,
            f"{ckpt['s3_save_mib_s']:.1f} vs {ckpt['local_save_mib_s']:.1f} MiB/s",
        )
        verdict(
            "tierstore",
            "checkpoint load vs local file",
            ckpt["s3_load_mib_s"] / ckpt["local_load_mib_s"],
            "(ratio reported)",
            None,
            f"{ckpt['s3_load_mib_s']:.1f} vs {ckpt['local_load_mib_s']:.1f} MiB/s",
        )
    ng = summary.get("nginx", {})
    if ng:
        ceil = ", ".join(
            f"{s} {fmt(ng[s]['ops_s'], 0)} ops/s"
            for s in ("get-4KiB-c16", "get-4KiB-c32", "put-4KiB-c16", "put-4KiB-c32")
            if s in ng
        )
        lines.append(f"Load generator ceiling (what it gets from nginx): {ceil}")
        lines.append("")
    lines.append("| target | measure | value | needed | met |")
    lines.append("| --- | --- | ---: | --- | --- |")
    for v in verdicts:
        val = v["value"]
        sval = "-" if val is None else (f"{val:.2f}x" if "x" in v["need"] else fmt(val, 2))
        met = {True: "**met**", False: "**not met**", None: "-"}[v["met"]]
        lines.append(f"| {v['target']} | {v['what']} | {sval} ({v['detail']}) | {v['need']} | {met} |")
    return {"text": "\n".join(lines), "verdicts": verdicts}


if __name__ == "__main__":
    sys.exit(main())
