"""The HTTP protocol's own cost per request: a 4 KiB PUT request (s3bench's five headers) fed to one
protocol instance at a time, a five-line ASGI app answering 200, a transport that only counts writes.
No sockets and no store: what is left is the protocol (parser callbacks, scope, receive, send) plus
this harness and the app, the same for every protocol measured.

    for n in 500 2500; do valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        .venv/bin/python bench/protocol_instructions.py server.http_protocol:HttpProtocol $n 2>&1 | grep Collected; done

Instructions per request = (Collected at 2500 - Collected at 500) / 2000. Another tree's protocol:
`PYTHONPATH=TREE`, e.g. uvicorn's with our guards at 2cc2872:
`server.connection_limits:GuardedHttpToolsProtocol`. Without valgrind it prints CPU µs per request
(noisy on a shared box). bench/RESULTS.md, "uvicorn's protocol compiled", has the figures.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
import time
from typing import Any

import uvicorn
import uvloop
from uvicorn.server import ServerState

BODY = b"x" * 4096
SIGNATURE = b"a" * 64
REQUEST = (
    b"PUT /bucket/obj-000001 HTTP/1.1\r\nHost: 127.0.0.1:9000\r\nX-Amz-Date: 20261207T000000Z\r\n"
    b"X-Amz-Content-SHA256: UNSIGNED-PAYLOAD\r\nAuthorization: AWS4-HMAC-SHA256 "
    b"Credential=tierstore/20261207/us-east-1/s3/aws4_request, "
    b"SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=" + SIGNATURE + b"\r\n"
    b"Content-Length: 4096\r\n\r\n" + BODY
)
WARM_UP = 2000


class CountingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0
        self.closing = False

    def write(self, data: Any) -> None:
        self.writes += 1

    def writelines(self, list_of_data: Any) -> None:
        self.writes += 1

    def is_closing(self) -> bool:
        return self.closing

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 9000), "peername": ("127.0.0.1", 5555)}.get(name, default)

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = True

    def get_write_buffer_size(self) -> int:
        return 0


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    while (await receive()).get("more_body"):
        pass
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"etag", b'"abc"'), (b"content-length", b"0")],
        }
    )
    await send({"type": "http.response.body", "body": b""})


async def main(protocol_class: Any, requests: int) -> None:
    config = uvicorn.Config(
        app=app, http=protocol_class, log_level="warning", access_log=False, lifespan="off"
    )
    config.load()
    protocol = protocol_class(
        config=config, server_state=ServerState(), app_state={}, _loop=asyncio.get_running_loop()
    )
    transport = CountingTransport()
    protocol.connection_made(transport)

    async def run(count: int) -> None:
        for _ in range(count):
            protocol.data_received(REQUEST)
            while protocol.cycle is not None and not protocol.cycle.response_complete:
                await asyncio.sleep(0)
            await asyncio.sleep(0)  # the request task's done callbacks

    await run(WARM_UP)
    started = time.process_time()
    await run(requests)
    cpu = time.process_time() - started
    # One write per request, or the protocol answered something else (a 400 closes the connection).
    assert transport.writes == WARM_UP + requests and not transport.closing, transport.writes
    print(
        f"{protocol_class.__module__}.{protocol_class.__name__}: {cpu / requests * 1e6:.1f} µs CPU per request"
    )


if __name__ == "__main__":
    module, _, name = sys.argv[1].partition(":")
    uvloop.run(main(getattr(importlib.import_module(module), name), int(sys.argv[2])))
