"""HTTP/1.1 on a client connection: httptools parses, this module runs the ASGI request cycle and
the connection's limits. uvicorn still runs the server (sockets, workers' start, lifespan,
signals, graceful shutdown); it builds one `HttpProtocol` per connection through `factory`.

Why not uvicorn's own httptools protocol: every small request spent a fifth of its event loop's
time in it, interpreted (a dozen Python calls per request: the parser's callbacks, the scope, the
request cycle's `receive` and `send`, an `asyncio.Event`; bench/RESULTS.md, "uvicorn's protocol
compiled"). This is the same protocol — its code is uvicorn 0.55's `httptools_impl` (BSD-3-Clause,
Copyright © 2017-present, Encode OSS Ltd.; the license is in server/UVICORN-LICENSE.md), its
behaviour on the wire unchanged but where said below — written so that
the compiled build (setup.py) can compile it, with what server/connection_limits.py added to it
folded in:

- a header timeout: a request head not complete `header_timeout` after the connection opened
  (or, on a keep-alive connection, after the first byte of the next request arrived) closes the
  connection without an answer, as nginx and S3 do;
- a body idle timeout: no body byte for `body_idle_timeout` while the request waits for one is
  answered with S3's `RequestTimeout` (400, XML, `Connection: close`) if no response has started,
  and the connection is closed. The handler sees a disconnect and aborts its write: nothing is
  committed, the old object stays. Time the *server* is behind — reading paused because the
  handler has not taken what came, a `100 Continue` not yet sent — does not count;
- keep-alive: an idle connection is closed after `timeout_keep_alive`, without waiting on a TLS
  client's close_notify for 30 s meanwhile (`_close`);
- a cap on open connections per process: a connection past `max_connections` is still read up
  to its request head (a client that sent a request expects an answer to it, and one closed with
  the request unread often sees a reset instead) and answered with S3's `SlowDown` (503, XML,
  `Connection: close`), which SDKs retry with back-off. uvicorn's `limit_concurrency` (a
  plain-text 503 no S3 client understands) is not honoured;
- bytes the parser cannot read as HTTP get S3's `BadRequest` (400, XML, `Connection: close`) —
  uvicorn's answer was plain text no S3 client parses — and the connection is closed;
- one write per small response: a final response head is held until the body's first bytes (or
  the response's end, or the close) and leaves with them in one `writelines` — one `writev`, one
  TCP segment for a small GET. A `100 Continue` is never held.

Timers are `loop.call_later` handles, armed only when a read leaves a head or a body incomplete
(and once per connection, for its first head): a keep-alive request that arrives whole arms
none. The body timer re-arms itself from the time of the last read, so an upload costs one
timer, not one per read.

A slow client holds a connection, never a thread: the body is read on the event loop and handed
to the app through `receive`; worker threads only hash, encode and write whole batches
(`tiering.store.PendingWrite`). WebSocket upgrades are refused (S3 has none), as uvicorn's
`ws="none"` did: the request is served as plain HTTP and a warning logged.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import re
import urllib.parse
from asyncio import TimerHandle
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import httptools
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import STATUS_LINE
from uvicorn.protocols.utils import get_local_addr, get_remote_addr, is_ssl

from server import errors as s3
from server.connection_limits import STATS, ConnectionLimits, error_response, slow_down

Message = dict[str, Any]
Buffer = bytes | bytearray | memoryview  # what a response body chunk may be (streams send memoryviews)
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[dict[str, Any], Receive, Send], Awaitable[object]]  # None, or a bug uvicorn logs

log = logging.getLogger("tierstore.server")
uvicorn_log = logging.getLogger("uvicorn.error")  # where uvicorn's protocol logged app failures

# After the timeout answer is written, a TLS close waits for the client's close_notify, which a
# stalled client never sends: drop the connection after this long anyway.
CLOSE_GRACE_SECONDS = 2.0

# Header names and values an app may not send (uvicorn's checks): they would split the response.
_BAD_NAME = re.compile(b'[\x00-\x1f\x7f()<>@,;:\\[\\]={} \t\\\\"]')
_BAD_VALUE = re.compile(b"[\x00-\x08\x0a-\x1f\x7f]")
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_SERVER_ERROR = [
    (b"content-type", b"text/plain; charset=utf-8"),
    (b"content-length", b"21"),
    (b"connection", b"close"),
]


def factory(limits: ConnectionLimits) -> Callable[..., HttpProtocol]:
    """What uvicorn's `http=` takes: it calls it with `config`, `server_state`, `app_state`, `_loop`."""
    return functools.partial(HttpProtocol, limits=limits)


class HttpProtocol:
    """One client connection (an asyncio protocol): parser callbacks, pipelining, flow control,
    keep-alive, and the limits above."""

    transport: asyncio.Transport  # set by connection_made, before any other call
    client: tuple[str, int] | None
    cycle: RequestCycle | None

    def __init__(
        self,
        config: Any,
        server_state: Any,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
        limits: ConnectionLimits = ConnectionLimits(),  # noqa: B008 (frozen: one shared default)
    ) -> None:
        if not config.loaded:
            config.load()
        self.config = config
        self.limits = limits
        self.app: App = config.loaded_app
        self.loop: asyncio.AbstractEventLoop = _loop or asyncio.get_event_loop()
        self.parser: Any = httptools.HttpRequestParser(self)
        # Answer the first of pipelined requests even if a later one is malformed (uvicorn's setting).
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
        self.root_path: str = config.root_path
        self.asgi_version: str = config.asgi_version
        self.reset_contextvars: bool = bool(getattr(config, "reset_contextvars", False))
        self.timeout_keep_alive = float(config.timeout_keep_alive)
        self.app_state = app_state
        self.server_state = server_state
        self.connections: set[Any] = server_state.connections
        self.tasks: set[asyncio.Task[None]] = server_state.tasks

        self.server: tuple[str, int | None] | None = None
        self.client = None
        self.scheme = "http"
        self.pipeline: deque[tuple[RequestCycle, App]] = deque()
        # Flow control: reading paused while the app has not taken what came; writing paused
        # while the transport's buffer is over its high-water mark.
        self.read_paused = False
        self.write_paused = False
        self.writable = asyncio.Event()
        self.writable.set()
        self.held_head: bytes | None = None  # a final response head waiting for its body

        # The request being parsed.
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.scope: dict[str, Any] = {}
        self.expect_100_continue = False
        self.cycle = None

        # Limits.
        self.admitted = False
        self.partial_head = False  # a request head has begun and is not complete
        self.in_body = False  # a head is complete, its body is not
        self.completed_in_read = False  # the current read completed a request
        self.unparsable = False  # bytes the parser could not read came: BadRequest, then close
        self.last_read = 0.0  # loop time of the last bytes received
        self.keep_alive_timer: TimerHandle | None = None
        self.head_timer: TimerHandle | None = None
        self.body_timer: TimerHandle | None = None
        self.abort_timer: TimerHandle | None = None

    # --- connection ------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.connections.add(self)
        self.transport = transport
        self.server = get_local_addr(transport)
        self.client = get_remote_addr(transport)
        self.scheme = "https" if is_ssl(transport) else "http"
        self.admitted = STATS.admit(self.limits.max_connections)
        if not self.admitted:
            self.app = slow_down  # read the request head, answer SlowDown, close
        # Even a client that sends nothing at all must send a head in time.
        self.head_timer = self.loop.call_later(self.limits.header_timeout, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        if self.admitted:
            self.admitted = False
            STATS.release()
        for timer in (self.head_timer, self.body_timer, self.abort_timer, self.keep_alive_timer):
            if timer is not None:
                timer.cancel()
        self.head_timer = self.body_timer = self.abort_timer = self.keep_alive_timer = None
        self.held_head = None
        cycle = self.cycle
        if cycle is not None:
            if not cycle.response_complete:
                cycle.disconnected = True
            cycle.notify()
        self.resume_writing()
        if exc is None:
            self.transport.close()
        self.parser = None  # it refers to us: let both go

    def eof_received(self) -> None:
        pass

    def pause_writing(self) -> None:
        """The transport's write buffer is over its high-water mark."""
        if not self.write_paused:
            self.write_paused = True
            self.writable.clear()

    def resume_writing(self) -> None:
        if self.write_paused:
            self.write_paused = False
            self.writable.set()

    def pause_reading(self) -> None:
        if not self.read_paused:
            self.read_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.read_paused:
            self.read_paused = False
            self.transport.resume_reading()

    def shutdown(self) -> None:
        """The server is stopping: close an idle connection, let a request in flight finish."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            self._close_transport()
        else:
            cycle.keep_alive = False

    # --- writing ---------------------------------------------------------------------------------

    def write(self, data: Buffer) -> None:
        """Write `data`, after a held response head (both in one system call)."""
        held = self.held_head
        if held is not None:
            self.held_head = None
            if data:
                self.transport.writelines((held, data))
            else:
                self.transport.write(held)
        elif data:
            self.transport.write(data)

    def flush(self) -> None:
        """Send a held head now (the response ended without a body, or the connection closes)."""
        held = self.held_head
        if held is not None:
            self.held_head = None
            self.transport.write(held)

    def _close_transport(self) -> None:
        self.flush()
        self.transport.close()

    def _abort(self) -> None:
        self.held_head = None  # as the transport drops its own unsent buffer
        self.transport.abort()

    def _close(self) -> None:
        """Close after what is written has gone out, but do not wait on the client for long: a TLS
        close waits for the client's close_notify (up to 30 s), which an idle or stalled client
        does not send, and the connection holds its file descriptor meanwhile."""
        self._close_transport()
        self.abort_timer = self.loop.call_later(CLOSE_GRACE_SECONDS, self._abort)

    # --- reading ---------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self.unparsable:
            return  # the parser stopped at bytes it could not read: nothing after them counts
        self.last_read = self.loop.time()
        self.completed_in_read = False
        if self.keep_alive_timer is not None:  # bytes came: the connection is not idle
            self.keep_alive_timer.cancel()
            self.keep_alive_timer = None
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            log.info("closing %s: unparsable request (%s)", self.client, exc)
            self.unparsable = True
            cycle = self.cycle
            if cycle is not None and not cycle.more_body and not cycle.response_complete:
                # Whole requests before the bad bytes are still being answered (pipelined):
                # written now, the 400 would land inside their responses and the close cut them
                # off. It goes out after the last of them (`on_response_complete`).
                self.pause_reading()
                return
            if cycle is not None and not cycle.response_complete:
                # Its body broke off: as if the client had gone, so that the handler aborts (its
                # next `receive` gets `http.disconnect`) and what it sends then is dropped, not
                # written to the closed transport.
                cycle.disconnected = True
                cycle.notify()
            self._send_bad_request()
            return
        except httptools.HttpParserUpgrade:
            uvicorn_log.warning("Unsupported upgrade request.")
        if self.transport.is_closing():
            return
        # Timers are armed after the parser has seen the bytes, so that the usual read — a whole
        # head, often a whole request — arms none. Bytes that began no request (blank lines
        # before one) leave the connection neither idle nor in a request: they start the head
        # timer too, or a client could hold the connection with a line feed now and then.
        stray_bytes = not self.in_body and not self.completed_in_read
        if self.head_timer is None and (self.partial_head or stray_bytes):
            self.head_timer = self.loop.call_later(self.limits.header_timeout, self._head_timed_out)
        elif self.in_body and self.body_timer is None:
            self.body_timer = self.loop.call_later(self.limits.body_idle_timeout, self._body_idle)

    def _send_bad_request(self) -> None:
        """S3's answer to bytes that are not an HTTP request: `BadRequest` (400, XML), then close.
        uvicorn answered a plain-text 400 that no S3 client parses. What came is unknowable (the
        parser stopped partway), so the error names no method or resource."""
        self.write(self._error_answer(s3.BadRequest(), "", ""))
        self.transport.close()

    def _error_answer(self, error: s3.S3Error, method: str, resource: str) -> bytes:
        """A whole response carrying `error`, with the server's default headers (date)."""
        status, headers, body = error_response(error, method, resource)
        head = b"".join(
            name + b": " + value + b"\r\n" for name, value in [*self.server_state.default_headers, *headers]
        )
        return STATUS_LINE[status] + head + b"\r\n" + body

    # --- parser callbacks (httptools calls these from feed_data) ---------------------------------

    def on_message_begin(self) -> None:
        self.partial_head = True
        self.url = b""
        self.expect_100_continue = False
        self.headers = []
        self.scope = {
            "type": "http",
            "asgi": {"version": self.asgi_version, "spec_version": "2.3"},
            "http_version": "1.1",
            "server": self.server,
            "client": self.client,
            "scheme": self.scheme,
            "root_path": self.root_path,
            "headers": self.headers,
            "state": self.app_state.copy(),
        }

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        # llhttp keeps trailing whitespace, which RFC 9110 section 5.5 excludes from the value.
        value = value.rstrip(b" \t")
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.partial_head = False
        self.in_body = True
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None
        parser = self.parser
        http_version: str = parser.get_http_version()
        scope = self.scope
        scope["method"] = parser.get_method().decode("ascii")
        if http_version != "1.1":
            scope["http_version"] = http_version
        # Any: httptools' stubs say bytes, but a URL without a query has None there (and a
        # compiled module would check the stub's type and fail the request).
        parsed_url: Any = httptools.parse_url(self.url)
        raw_path: bytes = parsed_url.path
        path = raw_path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        scope["path"] = self.root_path + path
        scope["raw_path"] = self.root_path.encode("ascii") + raw_path
        scope["query_string"] = parsed_url.query or b""

        previous = self.cycle
        cycle = RequestCycle(
            self,
            scope,
            self.expect_100_continue,
            http_version != "1.0" and bool(parser.should_keep_alive()),
        )
        self.cycle = cycle
        if previous is None or previous.response_complete:
            self._start(cycle, self.app)
        else:  # pipelined: answered in order, after the one before
            self.pause_reading()
            self.pipeline.appendleft((cycle, self.app))

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            return
        cycle.body.append(body)
        cycle.body_size += len(body)
        if cycle.body_size > HIGH_WATER_LIMIT:
            self.pause_reading()
        cycle.notify()

    def on_message_complete(self) -> None:
        self.in_body = False
        self.completed_in_read = True
        if self.body_timer is not None:
            self.body_timer.cancel()
            self.body_timer = None
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            return
        cycle.more_body = False
        cycle.notify()

    # --- requests --------------------------------------------------------------------------------

    def _start(self, cycle: RequestCycle, app: App) -> None:
        if self.reset_contextvars:
            # uvicorn's opt-in workaround for asyncio leaking context variables between tasks.
            task = self.loop.create_task(cycle.run_asgi(app), context=contextvars.Context())
        else:
            task = self.loop.create_task(cycle.run_asgi(app))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)

    def on_response_complete(self) -> None:
        """A response has been written whole: start the next pipelined request, or wait idle."""
        self.flush()  # a response without a body: its head goes out now
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        if self.unparsable and not self.pipeline:
            self._send_bad_request()  # the requests before the bad bytes are answered
            return
        if self.keep_alive_timer is not None:
            self.keep_alive_timer.cancel()
            self.keep_alive_timer = None
        self.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start(cycle, app)
        else:
            self.keep_alive_timer = self.loop.call_later(self.timeout_keep_alive, self._keep_alive_expired)

    # --- timeouts --------------------------------------------------------------------------------

    def _keep_alive_expired(self) -> None:
        self.keep_alive_timer = None
        if not self.transport.is_closing():
            self._close()

    def _head_timed_out(self) -> None:
        self.head_timer = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            # We are still answering the previous request; the client may wait for that first.
            self.head_timer = self.loop.call_later(self.limits.header_timeout, self._head_timed_out)
            return
        log.debug("closing %s: no complete request head in %.1fs", self.client, self.limits.header_timeout)
        STATS.closed["header_timeout"] += 1
        self._abort()  # nothing to say, and a TLS close would wait for the client

    def _server_is_behind(self, cycle: RequestCycle) -> bool:
        """The body waits on us, not on the client: bytes not yet taken by the handler (reading
        is then paused, so the client cannot send), or a `100 Continue` the handler has not yet
        asked for (the client waits for it before it sends the body)."""
        return self.read_paused or cycle.body_size > 0 or cycle.waiting_for_100_continue

    def _body_idle(self) -> None:
        self.body_timer = None
        cycle = self.cycle
        if cycle is None or not self.in_body or self.transport.is_closing():
            return
        now = self.loop.time()
        if self._server_is_behind(cycle):
            self.last_read = now
        idle = now - self.last_read
        if idle < self.limits.body_idle_timeout:
            self.body_timer = self.loop.call_later(self.limits.body_idle_timeout - idle, self._body_idle)
            return
        log.info("closing %s: no request body bytes in %.1fs", self.client, self.limits.body_idle_timeout)
        STATS.closed["body_timeout"] += 1
        answer = not cycle.response_started
        # As if the client had gone: the handler's next `receive` gets `http.disconnect` (it
        # aborts the write) and whatever it sends then is dropped, so our answer stays the only one.
        cycle.disconnected = True
        cycle.notify()
        if answer:
            raw_path = self.scope.get("raw_path", b"").decode("latin-1")
            self.write(self._error_answer(s3.RequestTimeout(), self.scope["method"], raw_path))
            self._close()
        else:
            self._abort()


class RequestCycle:
    """One request and its response: the ASGI `receive` and `send` the app is called with."""

    def __init__(
        self, conn: HttpProtocol, scope: dict[str, Any], expect_100_continue: bool, keep_alive: bool
    ) -> None:
        self.conn = conn
        self.scope = scope
        self.is_head = scope["method"] == "HEAD"
        self.disconnected = False
        self.keep_alive = keep_alive
        self.waiting_for_100_continue = expect_100_continue
        # Request body: chunks the parser gave and the app has not taken yet.
        self.body: list[bytes] = []
        self.body_size = 0
        self.more_body = True
        # Something for `receive` to look at (a body chunk, the body's end, a disconnect): a
        # flag and a future made only when `receive` has to wait, instead of an asyncio.Event.
        self.signalled = False
        self.waiter: asyncio.Future[None] | None = None
        # Response.
        self.response_started = False
        self.response_complete = False
        self.finished = False  # the app has returned: a late `send` ends nothing more
        self.chunked_encoding: bool | None = None
        self.expected_content_length = 0

    def notify(self) -> None:
        self.signalled = True
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def run_asgi(self, app: App) -> None:
        # No await while an exception is being handled (what a compiled coroutine may not do,
        # setup.py): the failure is caught, then answered after the `except` block.
        failure: BaseException | None = None
        result: object = None
        try:
            result = await app(self.scope, self.receive, self.send)
        except BaseException as exc:
            failure = exc
        if failure is not None:
            uvicorn_log.error("Exception in ASGI application\n", exc_info=failure)
            if not self.response_started:
                await self._send_500()
            else:
                self.conn._close_transport()
        elif result is not None:
            uvicorn_log.error("ASGI callable should return None, but returned '%s'.", result)
            self.conn._close_transport()
        elif not self.response_started and not self.disconnected:
            uvicorn_log.error("ASGI callable returned without starting response.")
            await self._send_500()
        elif not self.response_complete and not self.disconnected:
            uvicorn_log.error("ASGI callable returned without completing response.")
            self.conn._close_transport()
        self.finished = True

    async def _send_500(self) -> None:
        await self.send({"type": "http.response.start", "status": 500, "headers": _SERVER_ERROR})
        await self.send({"type": "http.response.body", "body": b"Internal Server Error", "more_body": False})

    async def send(self, message: Message) -> None:
        conn = self.conn
        if conn.write_paused and not self.disconnected:
            await conn.writable.wait()
        if self.disconnected:
            return
        if not self.response_started:
            if message["type"] != "http.response.start":
                raise RuntimeError(
                    f"Expected ASGI message 'http.response.start', but got '{message['type']}'."
                )
            self._start_response(message)
        elif not self.response_complete:
            if message["type"] != "http.response.body":
                raise RuntimeError(
                    f"Expected ASGI message 'http.response.body', but got '{message['type']}'."
                )
            self._send_body(message.get("body", b""), bool(message.get("more_body", False)))
        else:
            raise RuntimeError(
                f"Unexpected ASGI message '{message['type']}' sent, after response already completed."
            )

    def _start_response(self, message: Message) -> None:
        # Checked whole before anything changes: an invalid header fails the app's `send` with
        # the response not started, so the client gets a 500 (uvicorn closed the connection
        # without an answer).
        status: int = message["status"]
        content = [STATUS_LINE[status]]
        keep_alive = self.keep_alive
        has_connection_close = False
        chunked: bool | None = None
        expected_length = 0
        for headers in (self.conn.server_state.default_headers, message.get("headers", ())):
            for name, value in headers:
                if _BAD_NAME.search(name):
                    raise RuntimeError("Invalid HTTP header name.")
                if _BAD_VALUE.search(value):
                    raise RuntimeError("Invalid HTTP header value.")
                name = name.lower()
                if name == b"content-length" and chunked is None:
                    expected_length = int(value.decode())
                    chunked = False
                elif name == b"transfer-encoding" and value.lower() == b"chunked":
                    expected_length = 0
                    chunked = True
                elif name == b"connection":
                    if b"close" in [token.lower().strip() for token in value.split(b",")]:
                        keep_alive = False
                        has_connection_close = True
                content.extend([name, b": ", value, b"\r\n"])
        if not keep_alive and not has_connection_close:
            content.append(b"connection: close\r\n")
        if chunked is None and not self.is_head and status != 204 and status != 304:
            # Neither content-length nor transfer-encoding given.
            chunked = True
            content.append(b"transfer-encoding: chunked\r\n")
        content.append(b"\r\n")
        self.response_started = True
        self.waiting_for_100_continue = False
        self.keep_alive = keep_alive
        self.chunked_encoding = chunked
        self.expected_content_length = expected_length
        if status >= 200:
            self.conn.held_head = b"".join(content)  # sent with the body's first bytes
        else:
            self.conn.write(b"".join(content))

    def _send_body(self, body: Buffer, more_body: bool) -> None:
        conn = self.conn
        if self.is_head:
            self.expected_content_length = 0
        elif self.chunked_encoding:
            chunk = b"%x\r\n" % len(body) + body + b"\r\n" if body else b""
            conn.write(chunk if more_body else chunk + b"0\r\n\r\n")
        else:
            if len(body) > self.expected_content_length:
                raise RuntimeError("Response content longer than Content-Length")
            self.expected_content_length -= len(body)
            conn.write(body)
        if more_body:
            return
        if self.expected_content_length != 0:
            raise RuntimeError("Response content shorter than Content-Length")
        self.response_complete = True
        self.notify()
        if not self.keep_alive:
            conn._close_transport()
        if not self.finished:
            conn.on_response_complete()

    async def receive(self) -> Message:
        conn = self.conn
        if self.waiting_for_100_continue and not conn.transport.is_closing():
            conn.write(_CONTINUE)
            self.waiting_for_100_continue = False
        if not self.disconnected and not self.response_complete:
            conn.resume_reading()
            if not self.signalled:
                waiter = conn.loop.create_future()
                self.waiter = waiter
                try:
                    await waiter
                finally:
                    self.waiter = None
            self.signalled = False
        if self.disconnected or self.response_complete:
            return {"type": "http.disconnect"}
        chunks = self.body
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self.body = []
        self.body_size = 0
        return {"type": "http.request", "body": body, "more_body": self.more_body}
