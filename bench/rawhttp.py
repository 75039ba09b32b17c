"""A lean S3 load generator: http.client on keep-alive connections, SigV4 headers made by botocore.

The point is to keep the client from being the bottleneck on a small box: every request a timed
loop sends is signed *before* the clock starts (botocore's S3SigV4Auth, with the payload's SHA-256
precomputed, so the server still verifies a signed payload hash), and the timed loop only writes
the request, reads the response into a reused buffer and compares it with what was sent.

    signer = Signer("127.0.0.1", port, "key", "secret")
    req = signer.request("GET", "/bucket/key")                     # Request(method, target, headers, body)
    res = run_load(LoadSpec(...), host, port, reqs, check)         # threads, one connection each
"""

from __future__ import annotations

import hashlib
import http.client
import math
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
UNSIGNED = "UNSIGNED-PAYLOAD"
STOP = threading.Event()  # set on Ctrl-C: workers finish their current op and return
MAX_ERRORS = 10


@dataclass(frozen=True)
class Request:
    method: str
    target: str  # path + "?" + query, as sent on the request line
    headers: dict[str, str]
    body: bytes | None = None


def qs(params: dict[str, str]) -> str:
    """A query string the way SigV4 wants it: sorted, RFC 3986 encoded."""
    return "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(params.items()))


class _PresetPayloadAuth(S3SigV4Auth):
    """S3SigV4Auth that signs the X-Amz-Content-SHA256 we set (precomputed) instead of hashing a body."""

    def payload(self, request: AWSRequest) -> str:
        preset = request.context.get("preset_sha256")
        return preset if preset else super().payload(request)


class Signer:
    """SigV4 (botocore) for one endpoint. `sign=False` (nginx): same headers, no Authorization check."""

    def __init__(
        self, host: str, port: int, access_key: str, secret_key: str, region: str = "us-east-1"
    ) -> None:
        self.host = f"{host}:{port}"
        self.auth = _PresetPayloadAuth(Credentials(access_key or "x", secret_key or "x"), "s3", region)

    def request(
        self,
        method: str,
        path: str,
        query: str = "",
        body: bytes | None = None,
        sha256: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Request:
        target = quote(path, safe="/-_.~") + (f"?{query}" if query else "")
        h = {"Host": self.host, **(headers or {})}
        if body is not None:
            h["Content-Length"] = str(len(body))
        elif method in ("PUT", "POST"):
            h["Content-Length"] = "0"
        req = AWSRequest(method=method, url=f"http://{self.host}{target}", headers=h)
        req.context["preset_sha256"] = sha256 or (hashlib.sha256(body).hexdigest() if body else EMPTY_SHA256)
        self.auth.add_auth(req)
        return Request(method, target, dict(req.headers.items()), body)


@dataclass
class Response:
    status: int
    headers: http.client.HTTPMessage
    body: bytes | bytearray
    length: int


class Conn:
    """One keep-alive connection; reopens after an error. Large bodies are read into a reused buffer."""

    def __init__(self, host: str, port: int, timeout: float = 600.0) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self.conn: http.client.HTTPConnection | None = None
        self.buf = bytearray(0)

    def _connection(self) -> http.client.HTTPConnection:
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            self.conn.connect()
        return self.conn

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def do(self, req: Request, expect_size: int = -1) -> Response:
        """Send `req`, read the whole response. `expect_size` >= 64 KiB: read into the reused buffer."""
        try:
            c = self._connection()
            body = req.body
            if body is not None and len(body) > 1 << 20:
                c.putrequest(req.method, req.target, skip_host=True, skip_accept_encoding=True)
                for k, v in req.headers.items():
                    c.putheader(k, v)
                c.endheaders()
                c.send(memoryview(body))  # no copy of the body into the header buffer
            else:
                c.request(req.method, req.target, body=body, headers=req.headers)
            resp = c.getresponse()
            if expect_size >= 65536 and resp.status == 200 and resp.length == expect_size:
                if len(self.buf) != expect_size:
                    self.buf = bytearray(expect_size)
                mv = memoryview(self.buf)
                got = 0
                while got < expect_size:
                    n = resp.readinto(mv[got:])
                    if not n:
                        break
                    got += n
                mv.release()
                resp.read()  # let http.client see the end of the body (keep-alive)
                return Response(resp.status, resp.headers, self.buf, got)
            data = resp.read()
            if resp.will_close:
                self.close()
            return Response(resp.status, resp.headers, data, len(data))
        except Exception:
            self.close()
            raise


class CheckError(Exception):
    """A response that does not match what was sent: the op counts as failed."""


@dataclass
class LoadResult:
    ops: int
    errors: int
    wall_s: float
    ops_s: float
    mib_s: float
    p50_ms: float
    p99_ms: float
    p999_ms: float
    keys_s: float = 0.0
    error_samples: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest rank (P99 of 100 samples is the 99th smallest)."""
    if not sorted_values:
        return float("nan")
    k = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[k - 1]


def run_load(
    host: str,
    port: int,
    conns: list[Conn],
    concurrency: int,
    max_ops: int,
    budget_s: float,
    make: Callable[[int], Request],
    check: Callable[[int, Request, Response], None],
    size: int = 0,
    expect_size: int = -1,
    warm: Request | None = None,
) -> LoadResult:
    """`concurrency` threads, each on its own connection, take op numbers 0..max_ops-1 until the budget
    is spent (no new op starts after it). `make(i)` must be cheap (a list lookup): sign beforehand."""
    while len(conns) < concurrency:
        conns.append(Conn(host, port))
    mine = conns[:concurrency]
    if warm is not None:  # (re)open every connection before the clock starts
        for c in mine:
            try:
                c.do(warm)
            except Exception:  # noqa: BLE001 - a closed idle connection is reopened by the real op
                c.close()
    lock = threading.Lock()
    lat: list[float] = []
    errors: list[str] = []
    counter = [0]
    moved = [0]
    deadline = time.perf_counter() + 1e9  # set just before the workers are released
    barrier = threading.Barrier(concurrency + 1)

    def worker(conn: Conn) -> None:
        barrier.wait()
        local: list[float] = []
        nbytes = 0
        try:
            while not STOP.is_set():
                with lock:
                    i = counter[0]
                    counter[0] += 1
                    if i >= max_ops or len(errors) >= MAX_ERRORS:
                        return
                if time.perf_counter() >= deadline:
                    return
                req = make(i)
                t0 = time.perf_counter()
                try:
                    res = conn.do(req, expect_size)
                    dt_s = time.perf_counter() - t0
                    check(i, req, res)
                except Exception as exc:  # noqa: BLE001 - any failure is a counted error
                    with lock:
                        errors.append(f"{type(exc).__name__}: {exc}"[:300])
                    continue
                local.append(dt_s)
                nbytes += size
        finally:
            with lock:
                lat.extend(local)
                moved[0] += nbytes

    threads = [threading.Thread(target=worker, args=(c,), daemon=True) for c in mine]
    for t in threads:
        t.start()
    start = time.perf_counter()
    deadline = start + budget_s
    barrier.wait()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    lat.sort()
    return LoadResult(
        ops=len(lat),
        errors=len(errors),
        wall_s=wall,
        ops_s=len(lat) / wall if wall > 0 else 0.0,
        mib_s=moved[0] / 2**20 / wall if wall > 0 else 0.0,
        p50_ms=percentile(lat, 50) * 1e3,
        p99_ms=percentile(lat, 99) * 1e3,
        p999_ms=percentile(lat, 99.9) * 1e3,
        error_samples=errors[:3],
    )


# ---------------------------------------------------------------- ListObjectsV2 without botocore's parser

KEY_RE = re.compile(rb"<Key>([^<]*)</Key>")
TOKEN_RE = re.compile(rb"<NextContinuationToken>([^<]*)</NextContinuationToken>")
TRUNC_RE = re.compile(rb"<IsTruncated>(true|false)</IsTruncated>")
KEYCOUNT_RE = re.compile(rb"<KeyCount>(\d+)</KeyCount>")


def parse_list(body: bytes) -> tuple[list[bytes], bool, str | None, int | None]:
    """(keys, truncated, next token, KeyCount) from a ListObjectsV2 XML body (regex, ~50x cheaper than
    botocore's parser; keys are ASCII in this benchmark, so no XML unescaping is needed)."""
    keys = KEY_RE.findall(body)
    t = TRUNC_RE.search(body)
    tok = TOKEN_RE.search(body)
    kc = KEYCOUNT_RE.search(body)
    return (
        keys,
        bool(t and t.group(1) == b"true"),
        tok.group(1).decode() if tok else None,
        int(kc.group(1)) if kc else None,
    )
