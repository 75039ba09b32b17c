"""server/http_protocol.py in process: requests fed to the protocol as bytes, the app a small ASGI
function, the transport one that records what is written. What the app may send (memoryview
chunks, chunked bodies, no body, an exception) reaches the wire as uvicorn wrote it; on the
compiled build this also holds the compiled class to the types apps really pass.

The real server's wire behaviour (pipelining, timeouts, the connection cap, one segment per small
response) is tested against a running server: tests/s3/test_response_writes.py and
tests/faults/test_slow_clients.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from server.connection_limits import ConnectionLimits
from server.http_protocol import HttpProtocol, factory

App = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


class RecordingTransport(asyncio.Transport):
    """What the protocol writes, one entry per write call (a `writelines` is one entry)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False
        self.reading = True

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        self.writes.append(b"".join(bytes(part) for part in list_of_data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 9000)}.get(name, default)

    @property
    def wire(self) -> bytes:
        return b"".join(self.writes)


def _request(method: str, path: str, body: bytes = b"", *extra: str, version: str = "1.1") -> bytes:
    head = [f"{method} {path} HTTP/{version}", "Host: example", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def _serve(app: App, *requests: bytes, settle: int = 20) -> tuple[HttpProtocol, RecordingTransport]:
    config = uvicorn.Config(app=app, lifespan="off", log_config=None, timeout_keep_alive=5)
    config.load()
    protocol = factory(ConnectionLimits())(
        config=config, server_state=ServerState(), app_state={}, _loop=asyncio.get_running_loop()
    )
    transport = RecordingTransport()
    protocol.connection_made(transport)
    for data in requests:
        protocol.data_received(data)
        for _ in range(settle):  # let the request's task run
            await asyncio.sleep(0)
    for _ in range(20):  # and to its end
        await asyncio.sleep(0)
    return protocol, transport


def _echo(chunks: list[Any], headers: list[tuple[bytes, bytes]] | None = None) -> App:
    """An app that reads the whole body, then answers with `chunks` (one body message each)."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        received = b""
        while True:
            message = await receive()
            received += message.get("body", b"")
            if not message.get("more_body"):
                break
        scope["state"]["received"] = received
        await send({"type": "http.response.start", "status": 200, "headers": headers or []})
        for index, chunk in enumerate(chunks):
            await send({"type": "http.response.body", "body": chunk, "more_body": index < len(chunks) - 1})

    return app


def _parse(wire: bytes) -> tuple[str, dict[str, str], bytes]:
    head, _, body = wire.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {name.lower(): value.strip() for name, _, value in (line.partition(":") for line in lines[1:])}
    return lines[0], headers, body


def test_a_small_response_is_one_write_with_its_head() -> None:
    app = _echo([b"hello"], [(b"content-length", b"5")])
    _, transport = asyncio.run(_serve(app, _request("PUT", "/b/k", b"x" * 5000)))
    assert len(transport.writes) == 1
    status, headers, body = _parse(transport.wire)
    assert (status, headers["content-length"], body) == ("HTTP/1.1 200 OK", "5", b"hello")


def test_memoryview_and_bytearray_chunks_without_a_length_go_out_chunked() -> None:
    app = _echo([memoryview(b"abc"), bytearray(b"de"), b""])
    _, transport = asyncio.run(_serve(app, _request("GET", "/b/k")))
    status, headers, body = _parse(transport.wire)
    assert headers["transfer-encoding"] == "chunked"
    assert body == b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"


def test_a_memoryview_body_with_a_length_goes_out_as_is() -> None:
    app = _echo([memoryview(b"0123456789")[2:6], memoryview(b"xy")], [(b"content-length", b"6")])
    _, transport = asyncio.run(_serve(app, _request("GET", "/b/k")))
    assert _parse(transport.wire)[2] == b"2345xy"


def test_a_head_answer_sends_no_body_and_the_next_request_is_served() -> None:
    app = _echo([b"12345"], [(b"content-length", b"5")])
    _, transport = asyncio.run(_serve(app, _request("HEAD", "/b/k"), _request("GET", "/b/k")))
    first, _, rest = transport.wire.partition(b"\r\n\r\n")
    assert b"content-length: 5" in first
    assert rest.startswith(b"HTTP/1.1 200 OK") and rest.endswith(b"\r\n\r\n12345")


def test_a_body_in_pieces_reaches_the_app_whole() -> None:
    received: list[bytes] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message["body"]
            if not message["more_body"]:
                break
        received.append(body)
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    payload = bytes(range(256)) * 400  # past the read pause's 64 KiB
    request = _request("PUT", "/b/k", payload)
    pieces = [request[start : start + 7_000] for start in range(0, len(request), 7_000)]
    for settle in (20, 0):  # the app takes each piece as it comes; all pieces wait for the app
        received.clear()
        _, transport = asyncio.run(_serve(app, *pieces, settle=settle))
        assert received == [payload]
        assert transport.wire.startswith(b"HTTP/1.1 204 No Content\r\n") and transport.reading


def test_pipelined_requests_are_answered_in_order() -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        await asyncio.sleep(0.01 if scope["path"] == "/first" else 0)  # the first answers last, if not queued
        body = scope["path"].encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-length", b"%d" % len(body))],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def run() -> RecordingTransport:
        _, transport = await _serve(app, _request("GET", "/first") + _request("GET", "/second"))
        await asyncio.sleep(0.05)
        return transport

    wire = asyncio.run(run()).wire
    assert wire.index(b"/first") < wire.index(b"/second")


def test_an_app_failure_before_its_answer_is_a_500_and_a_close() -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        raise ValueError("broken handler")

    _, transport = asyncio.run(_serve(app, _request("GET", "/b/k")))
    status, headers, body = _parse(transport.wire)
    assert (status, headers["connection"], body) == (
        "HTTP/1.1 500 Internal Server Error",
        "close",
        b"Internal Server Error",
    )
    assert transport.closed


def test_an_app_that_never_answers_gets_a_500() -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()

    _, transport = asyncio.run(_serve(app, _request("GET", "/b/k")))
    assert transport.wire.startswith(b"HTTP/1.1 500 ")


@pytest.mark.parametrize(
    ("name", "value"),
    [(b"x-ok", b"split\r\nset-cookie: evil=1"), (b"bad name", b"v"), (b"x-ok", b"nul\x00")],
)
def test_headers_that_would_split_the_response_are_refused(name: bytes, value: bytes) -> None:
    app = _echo([b""], [(name, value)])
    _, transport = asyncio.run(_serve(app, _request("GET", "/b/k")))
    assert b"evil" not in transport.wire and b"bad name" not in transport.wire
    assert transport.wire.startswith(b"HTTP/1.1 500 ")


def test_http_1_0_and_connection_close_end_the_connection() -> None:
    for request in (
        _request("GET", "/b/k", version="1.0"),
        _request("GET", "/b/k", b"", "Connection: close"),
    ):
        _, transport = asyncio.run(_serve(_echo([b"ok"], [(b"content-length", b"2")]), request))
        assert _parse(transport.wire)[1]["connection"] == "close"
        assert transport.closed


def test_the_scope_is_uvicorns() -> None:
    scopes: list[dict[str, Any]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        scopes.append(scope)
        await _echo([b""])(scope, receive, send)

    asyncio.run(_serve(app, _request("GET", "/b/a%20key?list-type=2&prefix=x", b"", "X-Amz-Date: 1  ")))
    scope = scopes[0]
    assert (scope["method"], scope["path"], scope["raw_path"]) == ("GET", "/b/a key", b"/b/a%20key")
    assert scope["query_string"] == b"list-type=2&prefix=x"
    assert (b"x-amz-date", b"1") in scope["headers"]  # names lower-cased, trailing blanks gone
    assert (scope["client"], scope["server"], scope["scheme"]) == (
        ("127.0.0.1", 40000),
        ("127.0.0.1", 9000),
        "http",
    )
    assert scope["http_version"] == "1.1" and scope["asgi"]["version"] == "3.0"


def test_a_url_without_a_query_has_an_empty_query_string() -> None:
    scopes: list[dict[str, Any]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        scopes.append(scope)
        await _echo([b""])(scope, receive, send)

    _, transport = asyncio.run(_serve(app, _request("GET", "/b/k")))
    assert scopes[0]["query_string"] == b"" and transport.wire.startswith(b"HTTP/1.1 200 ")
