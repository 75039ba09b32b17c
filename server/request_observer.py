"""The ASGI middleware that counts every HTTP request's bytes and times and writes the access log.

Compiled in the optional build (setup.py): it wraps every request, and in server/metrics.py
(which holds prometheus_client's collector subclasses, and so stays interpreted) its closures
and lookups were a dozen interpreted calls per request.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from datetime import UTC, datetime
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.metrics import Metrics

access_log = logging.getLogger("tierstore.access")


class RequestObserver:
    """ASGI middleware: body bytes in and out, time to first byte, in-flight count, access log.

    It reads what the gateway records in the request state (`operation`, `bucket`, `error_code`)
    and the `x-amz-request-id` header it sets; routes outside the S3 gateway are named by path.
    """

    def __init__(self, app: ASGIApp, metrics: Metrics, access_log_enabled: bool = True) -> None:
        self.app = app
        self.metrics = metrics
        self.log = access_log_enabled
        # (family, operation) -> its labelled child: `Metrics.child`'s answers, kept here too so
        # that a request asks a dict rather than an interpreted method.
        self._children: dict[tuple[str, str], Any] = {}
        if access_log_enabled:
            _setup_access_log()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        state: dict[str, Any] = scope.setdefault("state", {})
        seen = {"in": 0, "out": 0, "status": 0, "first": 0.0}
        request_id = ""
        log_this = self.log  # the request id is read from the response head only for the access log

        async def counting_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                seen["in"] += len(message.get("body", b""))
            return message

        async def counting_send(message: Message) -> None:
            nonlocal request_id
            if message["type"] == "http.response.start":
                seen["status"] = message["status"]
                if log_this:
                    for name, value in message.get("headers", ()):
                        if name.lower() == b"x-amz-request-id":
                            request_id = value.decode("latin-1")
            elif message["type"] == "http.response.body":
                body = message.get("body", b"")
                if body and not seen["first"]:
                    seen["first"] = time.perf_counter()
                seen["out"] += len(body)
            await send(message)

        self.metrics.in_flight.count += 1
        try:
            await self.app(scope, counting_receive, counting_send)
        finally:
            self.metrics.in_flight.count -= 1
            operation = str(state.get("operation") or _path_operation(scope["path"]))
            metrics = self.metrics
            tally = metrics.tally
            if seen["in"]:
                tally.count(self._child("received", operation), seen["in"])
            if seen["out"]:
                tally.count(self._child("sent", operation), seen["out"])
            if (
                seen["first"]
                and scope["method"] == "GET"
                and seen["status"] in (200, 206)
                and operation == "GetObject"
            ):
                tally.observe(self._child("first_byte", operation), seen["first"] - started)
            if self.log:
                client = scope.get("client")
                access_log.info(
                    json.dumps(
                        {
                            "time": datetime.now(UTC).isoformat(timespec="milliseconds"),
                            "request_id": request_id or None,
                            "remote_addr": client[0] if client else None,
                            "method": scope["method"],
                            "operation": operation,
                            "bucket": state.get("bucket"),
                            "status": seen["status"] or None,
                            "bytes_in": seen["in"],
                            "bytes_out": seen["out"],
                            "duration_ms": round((time.perf_counter() - started) * 1000, 3),
                            "error_code": state.get("error_code"),
                            # Which rule decided (server.access.decision): allow:bucket-policy:Sid, deny:implicit, ...
                            "authz": state.get("authz"),
                        },
                        separators=(",", ":"),
                    )
                )

    def _child(self, family: str, operation: str) -> Any:
        key = (family, operation)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = self.metrics.child(getattr(self.metrics, family), operation)
        return found


def _setup_access_log() -> None:
    """Access lines go to stderr as bare JSON, whatever format the rest of the log uses."""
    if not access_log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        access_log.addHandler(handler)
    access_log.setLevel(logging.INFO)
    access_log.propagate = False


def _path_operation(path: str) -> str:
    if path.startswith("/_tierstore/admin/"):
        return "Admin"
    if path.startswith("/_tierstore/"):
        return "Tierstore"
    return "Unrouted"
