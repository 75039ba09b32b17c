"""Which function answers which S3 operation."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.responses import Response

from server.context import S3Request
from server.operations import Operation

Handler = Callable[[S3Request], Awaitable[Response]]
HANDLERS: dict[Operation, Handler] = {}


def handles(*operations: Operation) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        for operation in operations:
            if operation in HANDLERS:
                raise RuntimeError(f"two handlers for {operation.name}")
            HANDLERS[operation] = handler
        return handler

    return register
