"""Response helpers: XML documents, empty answers and streamed object bodies."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

log = logging.getLogger("tierstore.server")


def xml_response(body: bytes, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(body, status_code=status, headers=headers, media_type="application/xml")


def empty_response(status: int = 200, headers: dict[str, str] | None = None) -> Response:
    # Starlette leaves Content-Length off 204 and 304 answers, as HTTP requires.
    return Response(b"", status_code=status, headers=headers)


class StreamedBody(Response):
    """Stream an async iterator with a known length; always run `on_close`, even on disconnect.

    If the source fails after the headers are out, the connection is dropped: the client sees a
    short body (and its length check fails) rather than wrong bytes.
    """

    def __init__(
        self,
        chunks: AsyncIterator[bytes | memoryview],
        *,
        status_code: int,
        headers: dict[str, str],
        content_length: int,
        on_close: Callable[[], Awaitable[None] | None],
        send_body: bool = True,
    ) -> None:
        super().__init__(status_code=status_code, headers=headers)
        self.headers["content-length"] = str(content_length)
        self._chunks = chunks
        self._on_close = on_close
        self._send_body = send_body

    async def prime(self) -> None:
        """Produce the first chunk before the status line goes out.

        A source that fails at once (an object whose data cannot be read) then raises here, while
        the caller can still answer with an S3 error instead of a 200 and a dropped connection.
        """
        source = self._chunks
        try:
            first: bytes | memoryview | None = await anext(source)
        except StopAsyncIteration:
            first = None

        async def primed() -> AsyncIterator[bytes | memoryview]:
            try:
                if first is not None:
                    yield first
                async for chunk in source:
                    yield chunk
            finally:
                closing = getattr(source, "aclose", None)
                if closing is not None:
                    await closing()

        self._chunks = primed()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send(
                {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
            )
            if self._send_body:
                async for chunk in self._chunks:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            closing = getattr(self._chunks, "aclose", None)
            if closing is not None:
                try:
                    await closing()
                except Exception:  # the stream already failed; closing it must not mask that
                    log.debug("closing a response stream failed", exc_info=True)
            result = self._on_close()
            if result is not None:
                await result
