"""Limits on each connection — time to send a request head, time between body bytes, a cap on
the connections one process holds — and the S3 answers they give. The protocol that enforces
them is server/http_protocol.py.

uvicorn closes idle keep-alive connections but has no deadline for a request head or a body: a
client that sends half a head, or stops halfway through a body, held its connection — a file
descriptor, a parser, an upload's buffers — for ever (3,000 such connections, all still open
after 38 s). Its `limit_concurrency` answers a plain-text 503, which no S3 client understands:
past `max_connections` the answer is S3's `SlowDown` instead (`slow_down`), and a stalled body
gets `RequestTimeout` (`error_response`).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from server import errors as s3

log = logging.getLogger("tierstore.server")

# Files a server holds besides its connections: catalog, logs, shards being read and written.
FILE_HEADROOM = 512
REFUSAL_LOG_INTERVAL = 10.0  # a flood past the cap logs one line per interval, not one per connection


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout: float = 10.0
    body_idle_timeout: float = 60.0
    max_connections: int = 1024


class ConnectionStats(Collector):
    """This process's connections: the count the cap checks, and why connections were closed.

    One per process (`STATS`): the cap is per process, so each `--workers` worker has its own.
    Also a Prometheus collector, read at scrape time.
    """

    def __init__(self) -> None:
        self.open = 0  # admitted and not yet closed
        self.closed = {"header_timeout": 0, "body_timeout": 0, "refused": 0}
        self._refused_unlogged = 0
        self._logged_at = -REFUSAL_LOG_INTERVAL

    def admit(self, limit: int) -> bool:
        if self.open >= limit:
            self.closed["refused"] += 1
            self._log_refusals(limit)
            return False
        self.open += 1
        return True

    def release(self) -> None:
        self.open -= 1

    def _log_refusals(self, limit: int) -> None:
        self._refused_unlogged += 1
        now = time.monotonic()
        if now - self._logged_at >= REFUSAL_LOG_INTERVAL:
            log.warning(
                "%d connection(s) refused with SlowDown: %d open, max_connections = %d",
                self._refused_unlogged,
                self.open,
                limit,
            )
            self._refused_unlogged, self._logged_at = 0, now

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "tierstore_http_connections_open",
            "Client connections open in this process (those under max_connections)",
            value=self.open,
        )
        closed = CounterMetricFamily(
            "tierstore_http_connections_closed",
            "Connections closed by a limit: header_timeout, body_timeout, refused (SlowDown past max_connections)",
            labels=["reason"],
        )
        for reason, count in self.closed.items():
            closed.add_metric([reason], count)
        yield closed


STATS = ConnectionStats()


def raise_file_limit(max_connections: int) -> None:
    """Lift the soft open-file limit to the hard one (as Go's runtime does at start-up).

    Past the soft limit (often 1024) `accept` fails with EMFILE and asyncio stops accepting for a
    second at a time: every new client times out, instead of the few past `max_connections`
    getting a SlowDown they can retry.
    """
    try:
        import resource
    except ImportError:  # not a Unix: nothing to raise
        return
    wanted = max_connections + FILE_HEADROOM
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    target = max(soft, wanted) if hard == resource.RLIM_INFINITY else hard
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        target = soft
    if target < wanted:
        log.warning(
            "open-file limit %d is below max_connections + %d (%d): past it, connections "
            "fail instead of getting SlowDown; raise `ulimit -n` or lower max_connections",
            target,
            FILE_HEADROOM,
            wanted,
        )


def error_response(
    error: s3.S3Error, method: str, resource: str
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """An S3 error as status, headers and body, closing the connection (as the gateway renders it)."""
    # 16 upper-case hex characters like the gateway's ids; these answers are rare, so a fresh
    # random one each time costs nothing.
    request_id = secrets.token_hex(8).upper().encode()
    headers = [
        (b"x-amz-request-id", request_id),
        (b"x-amz-id-2", request_id),
        (b"server", b"tierstore"),
        (b"connection", b"close"),
    ]
    if method == "HEAD":  # no body: the code goes in a header, as the gateway does
        return (
            error.status,
            [*headers, (b"x-amz-error-code", error.code.encode()), (b"content-length", b"0")],
            b"",
        )
    body = error.to_xml(resource=resource, request_id=request_id.decode())
    headers += [(b"content-type", b"application/xml"), (b"content-length", str(len(body)).encode())]
    return error.status, headers, body


async def slow_down(scope: Any, receive: Any, send: Any) -> None:
    """The app a connection past the cap gets: SlowDown for its request, then the connection closes."""
    raw_path = scope.get("raw_path", b"").decode("latin-1") or scope.get("path", "")
    status, headers, body = error_response(s3.SlowDown(), scope.get("method", ""), raw_path)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
