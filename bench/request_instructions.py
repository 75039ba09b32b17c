"""Drive the S3 app in process with N signed 4 KiB GETs or PUTs, one at a time: no sockets, no load
generator, so that `valgrind --tool=callgrind` counts the instructions the server itself spends.

    for n in 100 400; do PYTHONPATH=TREE valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
        .venv/bin/python bench/request_instructions.py get $n 2>&1 | grep Collected; done

Instructions per request = (Collected at 400 - Collected at 100) / 300: start-up and set-up cancel
out, and the count does not depend on what else runs on the machine (unlike CPU time on a shared
box). All threads are counted (the worker-thread trip included); kernel time is not.

A third argument runs that many requests at a time (default 1): `put 400 8` lets the small-PUT
committer take batches of up to eight, so that its per-batch cost (the transaction, the flushes'
bookkeeping) is shared as it is in a loaded server. Measured on 96c1b7f, compiled: 2.02 M
instructions per PUT one at a time, 1.84 M eight at a time (bench/RESULTS.md, "The lifecycle's scan").
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

ACCESS_KEY, SECRET_KEY = "bench-access-key", "bench-secret-key-0123456789"
HOST = "127.0.0.1:9000"


def signed(method: str, path: str, body: bytes = b"") -> list[tuple[bytes, bytes]]:
    request = AWSRequest(
        method=method,
        url=f"http://{HOST}{path}",
        data=body,
        headers={"x-amz-content-sha256": "UNSIGNED-PAYLOAD"},
    )
    SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1").add_auth(request)
    headers = [(b"host", HOST.encode())]
    headers += [
        (k.lower().encode(), v.encode() if isinstance(v, str) else v) for k, v in request.headers.items()
    ]
    if body:
        headers.append((b"content-length", str(len(body)).encode()))
    return headers


async def call(
    app: Any, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes = b""
) -> int:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 5555),
        "server": ("127.0.0.1", 9000),
    }
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the client never disconnects
        raise AssertionError

    status: list[int] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])

    await app(scope, receive, send)
    return status[0]


async def main(op: str, n: int, concurrency: int) -> None:
    os.environ["TIERSTORE_ACCESS_KEY"], os.environ["TIERSTORE_SECRET_KEY"] = ACCESS_KEY, SECRET_KEY
    from server import runtime_dir
    from server.app import create_app
    from server.config import load_config

    scratch = Path(tempfile.mkdtemp(prefix="request-instructions-"))
    app = create_app(load_config(data_dir=scratch / "data"))
    store = app.app.gateway.store  # type: ignore[attr-defined]  # RequestObserver -> S3FastLane
    await store.start()
    try:
        assert await call(app, "PUT", "/bkt", signed("PUT", "/bkt")) == 200
        body = bytes(range(256)) * 16
        for i in range(16):
            assert await call(app, "PUT", f"/bkt/k{i}", signed("PUT", f"/bkt/k{i}", body), body) == 200
        if op == "get":
            requests = [("GET", f"/bkt/k{i % 16}", signed("GET", f"/bkt/k{i % 16}"), b"") for i in range(n)]
        else:
            requests = [("PUT", f"/bkt/p{i}", signed("PUT", f"/bkt/p{i}", body), body) for i in range(n)]
        # Signed beforehand: signing is the client's cost.
        for start in range(0, n, concurrency):
            statuses = await asyncio.gather(*(call(app, *r) for r in requests[start : start + concurrency]))
            assert statuses == [200] * len(statuses)
    finally:
        await store.close()
        # What `tierstore serve` removes when it stops: the runtime directory (in /dev/shm), the data.
        if store.runtime_dir is not None:
            await asyncio.to_thread(runtime_dir.remove_if_unused, store.runtime_dir)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    import uvloop

    uvloop.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 1))
