"""Limits on each connection: time to send a request head, time between body bytes, and a cap
on the connections one process holds.

uvicorn closes idle keep-alive connections (`timeout_keep_alive`, which `serve` sets from
`keep_alive_timeout_seconds`) but has no deadline for a request head or a body: a client that
sends half a head, or stops halfway through a body, held its connection — a file descriptor,
a parser, an upload's buffers — for ever (3,000 such connections, all still open after 38 s).
Its `limit_concurrency` answers a plain-text 503, which no S3 client understands.
`GuardedHttpToolsProtocol` is uvicorn's httptools protocol with:

- a header timeout: a request head not complete `header_timeout` after the connection opened
  (or, on a keep-alive connection, after the first byte of the next request arrived) closes the
  connection without an answer, as nginx and S3 do;
- a body idle timeout: no body byte for `body_idle_timeout` while the request waits for one is
  answered with S3's `RequestTimeout` (400, XML, `Connection: close`) if no response has started,
  and the connection is closed. The handler sees a disconnect and aborts its write: nothing is
  committed, the old object stays. Time the *server* is behind — reading paused because the
  handler has not taken what came, a `100 Continue` not yet sent — does not count;
- keep-alive: uvicorn's own timer closes an idle connection, but without waiting on a TLS
  client's close_notify for 30 s meanwhile (`_close`);
- a cap on open connections per process: a connection past `max_connections` is still read up
  to its request head (a client that sent a request expects an answer to it, and one closed
  with the request unread often sees a reset instead) and answered with S3's `SlowDown` (503,
  XML, `Connection: close`), which SDKs retry with back-off;
- one write per small response: a response head goes out with the body's first bytes
  (`server.coalesced_writes`).

Timers are `loop.call_later` handles, armed only when a read leaves a head or a body incomplete
(and once per connection, for its first head): a keep-alive request that arrives whole arms
none. The body timer re-arms itself from the time of the last read, so an upload costs one
timer, not one per read.

A slow client holds a connection, never a thread: the body is read on the event loop (uvicorn
hands it to the app through `receive`) and worker threads only hash, encode and write whole
batches (`tiering.store.PendingWrite`).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from asyncio import TimerHandle
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from server import errors as s3
from server.coalesced_writes import HeadHoldingTransport

log = logging.getLogger("tierstore.server")

# After the timeout answer is written, a TLS close waits for the client's close_notify, which a
# stalled client never sends: drop the connection after this long anyway.
CLOSE_GRACE_SECONDS = 2.0
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


def _error_response(
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


async def _slow_down(scope: Any, receive: Any, send: Any) -> None:
    """The app a connection past the cap gets: SlowDown for its request, then the connection closes."""
    raw_path = scope.get("raw_path", b"").decode("latin-1") or scope.get("path", "")
    status, headers, body = _error_response(s3.SlowDown(), scope.get("method", ""), raw_path)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the header and body timeouts and the connection cap.

    Use `with_limits` to get a class bound to one set of limits.
    """

    limits: ClassVar[ConnectionLimits] = ConnectionLimits()

    @classmethod
    def with_limits(cls, limits: ConnectionLimits) -> type[GuardedHttpToolsProtocol]:
        """A protocol class for uvicorn's `http=` (which takes a class, not an instance) with `limits`."""
        return type(cls.__name__, (cls,), {"limits": limits})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._admitted = False
        self._partial_head = False  # a request head has begun and is not complete
        self._in_body = False  # a head is complete, its body is not
        self._completed_in_read = False  # the current read completed a request
        self._last_read = 0.0  # loop time of the last bytes received
        self._head_timer: TimerHandle | None = None
        self._body_timer: TimerHandle | None = None
        self._abort_timer: TimerHandle | None = None

    # --- connection ------------------------------------------------------------------------------

    # uvicorn's protocols take the stream transport asyncio hands them; typeshed says BaseTransport.
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # Responses are written through it (head and body in one system call); flow control
        # keeps the connection's own transport.
        self.transport = self._writer = HeadHoldingTransport(transport)
        self._admitted = STATS.admit(self.limits.max_connections)
        if not self._admitted:
            self.app = _slow_down  # read the request head, answer SlowDown, close
        # Even a client that sends nothing at all must send a head in time.
        self._head_timer = self.loop.call_later(self.limits.header_timeout, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._admitted:
            self._admitted = False
            STATS.release()
        for timer in (self._head_timer, self._body_timer, self._abort_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = self._abort_timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._last_read = self.loop.time()
        self._completed_in_read = False
        super().data_received(data)  # uvicorn stops its keep-alive timer: bytes came
        if self.transport.is_closing():
            return
        # Timers are armed after the parser has seen the bytes, so that the usual read — a whole
        # head, often a whole request — arms none. Bytes that began no request (blank lines
        # before one) leave the connection neither idle nor in a request: they start the head
        # timer too, or a client could hold the connection with a line feed now and then.
        stray_bytes = not self._in_body and not self._completed_in_read
        if self._head_timer is None and (self._partial_head or stray_bytes):
            self._head_timer = self.loop.call_later(self.limits.header_timeout, self._head_timed_out)
        elif self._in_body and self._body_timer is None:
            self._body_timer = self.loop.call_later(self.limits.body_idle_timeout, self._body_idle)

    # --- parser callbacks ------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._partial_head = True

    def on_headers_complete(self) -> None:
        self._partial_head = False
        self._in_body = True
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_body = False
        self._completed_in_read = True
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def on_response_complete(self) -> None:
        self._writer.flush()  # a response without a body: its head goes out now
        super().on_response_complete()

    # --- timeouts --------------------------------------------------------------------------------

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # We are still answering the previous request; the client may wait for that first.
            self._head_timer = self.loop.call_later(self.limits.header_timeout, self._head_timed_out)
            return
        log.debug("closing %s: no complete request head in %.1fs", self.client, self.limits.header_timeout)
        STATS.closed["header_timeout"] += 1
        self.transport.abort()  # nothing to say, and a TLS close would wait for the client

    def _server_is_behind(self) -> bool:
        """The body waits on us, not on the client: bytes not yet taken by the handler (reading
        is then paused, so the client cannot send), or a `100 Continue` the handler has not yet
        asked for (the client waits for it before it sends the body)."""
        cycle = self.cycle
        return self.flow.read_paused or bool(cycle.body) or cycle.waiting_for_100_continue

    def _body_idle(self) -> None:
        self._body_timer = None
        if not self._in_body or self.transport.is_closing():
            return
        now = self.loop.time()
        if self._server_is_behind():
            self._last_read = now
        idle = now - self._last_read
        if idle < self.limits.body_idle_timeout:
            self._body_timer = self.loop.call_later(self.limits.body_idle_timeout - idle, self._body_idle)
            return
        log.info("closing %s: no request body bytes in %.1fs", self.client, self.limits.body_idle_timeout)
        STATS.closed["body_timeout"] += 1
        cycle = self.cycle
        answer = not cycle.response_started
        # As if the client had gone: the handler's next `receive` gets `http.disconnect` (it
        # aborts the write) and whatever it sends then is dropped, so our answer stays the only one.
        cycle.disconnected = True
        cycle.message_event.set()
        if answer:
            status, headers, body = _error_response(
                s3.RequestTimeout(), self.scope["method"], self.scope.get("raw_path", b"").decode("latin-1")
            )
            head = b"".join(
                name + b": " + value + b"\r\n"
                for name, value in [*self.server_state.default_headers, *headers]
            )  # date
            self.transport.write(STATUS_LINE[status] + head + b"\r\n" + body)
            self._close()
        else:
            self.transport.abort()

    def timeout_keep_alive_handler(self) -> None:
        if not self.transport.is_closing():
            self._close()

    def _close(self) -> None:
        """Close after what is written has gone out, but do not wait on the client for long: a TLS
        close waits for the client's close_notify (up to 30 s), which an idle or stalled client
        does not send, and the connection holds its file descriptor meanwhile."""
        self.transport.close()
        self._abort_timer = self.loop.call_later(CLOSE_GRACE_SECONDS, self.transport.abort)
