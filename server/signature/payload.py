"""`PayloadReader`: the request body as the handler should see it, verified on the way through.

One pass over the body as the ASGI server delivers it: aws-chunked framing removed, chunk and
trailer signatures checked, x-amz-content-sha256 and the declared length enforced. Memory stays
bounded: plain bodies stream piece by piece; a signed chunk is held only until its signature is
checked (and chunks are capped), so nothing unverified ever reaches the handler.

Errors are raised from inside the iteration, *before* it ends, so a writer consuming the body
never sees a clean end of a body that failed verification and can abort instead of committing.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import AsyncIterable, AsyncIterator
from typing import TYPE_CHECKING

from starlette.requests import ClientDisconnect
from starlette.types import Receive

from server.errors import (
    IncompleteBody,
    InvalidArgument,
    InvalidRequest,
    SignatureDoesNotMatch,
    XAmzContentSHA256Mismatch,
)
from server.signature.context import AuthContext, PayloadMode
from server.signature.keys import EMPTY_SHA256, same
from server.signature.request import HeaderLookup
from server.signature.streaming import chunk_signature, trailer_signature

if TYPE_CHECKING:
    from hashlib import _Hash

# hashlib releases the GIL for large updates: hashing a big piece in a worker thread keeps the
# event loop serving other requests; below this size the thread hop costs more than it saves.
HASH_OFFLOAD_BYTES = 256 * 1024
MAX_LINE_BYTES = 4096  # a chunk header is ~90 bytes; anything this long is not aws-chunked
MAX_TRAILER_BYTES = 16 * 1024
# A signed chunk must be held until its signature is checked; SDKs use 64 KiB-1 MiB chunks.
MAX_SIGNED_CHUNK_BYTES = 16 * 1024 * 1024
MAX_JUNK_AFTER_BODY = 1024

_HEX_SIZE = re.compile(rb"[0-9a-fA-F]{1,16}")
TRAILER_SIGNATURE = "x-amz-trailer-signature"


async def hash_update(hasher: _Hash, data: bytes) -> None:
    """Update `hasher` without stalling the event loop on large buffers."""
    if len(data) >= HASH_OFFLOAD_BYTES:
        await asyncio.to_thread(hasher.update, data)
    else:
        hasher.update(data)


def _declared_length(value: str | None, header: str) -> int | None:
    if value is None or not value.strip():
        return None
    text = value.strip()
    if not (text.isascii() and text.isdigit()):  # isdigit alone takes "²", which int() refuses
        raise InvalidArgument(
            f"{header} must be a non-negative integer", ArgumentName=header, ArgumentValue=text
        )
    return int(text)


class _Wire:
    """The raw body as a byte stream: CRLF lines and exact-length reads over arbitrary pieces.

    Parsing keeps one bytearray of not-yet-consumed bytes and an offset into it; consumed bytes
    are dropped only when more are appended, so each byte is copied a bounded number of times.
    """

    def __init__(self, source: AsyncIterable[bytes], raw_hasher: _Hash | None) -> None:
        self._source = source.__aiter__()
        self._raw_hasher = raw_hasher
        self._buf = bytearray()
        self._pos = 0
        self._eof = False

    async def _next_piece(self) -> bytes | None:
        """The next non-empty piece of the body, or None at its end."""
        while not self._eof:
            try:
                piece = await anext(self._source)
            except StopAsyncIteration:
                self._eof = True
                break
            if piece:
                piece = bytes(piece)
                if self._raw_hasher is not None:
                    await hash_update(self._raw_hasher, piece)
                return piece
        return None

    async def _pull(self) -> bool:
        piece = await self._next_piece()
        if piece is None:
            return False
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += piece
        return True

    @property
    def _buffered(self) -> int:
        return len(self._buf) - self._pos

    async def read_line(self, limit: int = MAX_LINE_BYTES) -> bytes | None:
        """The next line without its CRLF; None when the body ends cleanly before it."""
        scanned = 0  # bytes past _pos already known to hold no CRLF
        while True:
            end = self._buf.find(b"\r\n", self._pos + scanned)
            if end >= 0:
                line = bytes(self._buf[self._pos : end])
                self._pos = end + 2
                return line
            if self._buffered > limit:
                raise InvalidRequest(
                    "Malformed aws-chunked body: a chunk header or trailer line is too long."
                )
            scanned = max(self._buffered - 1, 0)  # a CR may be the last byte so far
            if not await self._pull():
                if self._buffered == 0:
                    return None
                raise IncompleteBody()

    async def read_exact(self, size: int) -> AsyncIterator[bytes]:
        """Exactly `size` bytes, in pieces; IncompleteBody when the body ends first."""
        if self._buffered:
            take = min(self._buffered, size)
            yield bytes(self._buf[self._pos : self._pos + take])
            self._pos += take
            size -= take
        while size > 0:
            piece = await self._next_piece()
            if piece is None:
                raise IncompleteBody()
            if len(piece) <= size:
                size -= len(piece)
                yield piece
            else:
                # The piece also holds what follows the chunk: keep that for the parser.
                del self._buf[: self._pos]
                self._pos = 0
                self._buf += memoryview(piece)[size:]
                yield piece[:size]
                size = 0

    async def expect_crlf(self) -> None:
        while self._buffered < 2:
            if not await self._pull():
                raise IncompleteBody()
        if self._buf[self._pos : self._pos + 2] != b"\r\n":
            raise InvalidRequest("Malformed aws-chunked body: chunk data is not followed by CRLF.")
        self._pos += 2

    async def finish(self) -> None:
        """Consume the rest of the body, which may only be stray line ends."""
        junk = bytes(self._buf[self._pos :])
        self._buf.clear()
        self._pos = 0
        while (piece := await self._next_piece()) is not None:
            junk += piece
            if len(junk) > MAX_JUNK_AFTER_BODY:
                break
        if junk.strip(b"\r\n"):
            raise InvalidRequest("Malformed aws-chunked body: data after the final chunk.")


def _parse_chunk_header(line: bytes, signed: bool) -> tuple[int, str | None]:
    """Parse `hex-size[;chunk-signature=sig]`."""
    size_part, _, extensions = line.partition(b";")
    size_part = size_part.strip()
    if not _HEX_SIZE.fullmatch(size_part):
        raise InvalidRequest("Malformed aws-chunked body: invalid chunk size.")
    signature: str | None = None
    for extension in extensions.split(b";"):
        name, _, value = extension.partition(b"=")
        if name.strip() == b"chunk-signature":
            try:
                signature = value.strip().decode("ascii")
            except UnicodeDecodeError:
                raise InvalidRequest("Malformed aws-chunked body: invalid chunk signature.") from None
    if signed and not signature:
        raise InvalidRequest("Malformed aws-chunked body: missing chunk-signature.")
    return int(size_part, 16), signature


async def body_chunks(source: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """A request body's non-empty pieces (from Starlette's `Request.stream`). A client that hangs
    up mid-body sent less than it declared: that is its error (IncompleteBody, 400), not an
    internal one with a stack trace in the log."""
    try:
        async for chunk in source:
            if chunk:
                yield chunk
    except ClientDisconnect:
        raise IncompleteBody() from None


class PayloadReader:
    """Async iterator over the decoded, verified request body.

    `trailers` (lower-case names) and `decoded_length` are complete once iteration has ended.
    """

    def __init__(
        self,
        source: AsyncIterable[bytes],
        auth: AuthContext,
        headers: HeaderLookup,
        receive: Receive | None = None,
    ) -> None:
        self._source = source
        self._receive = receive  # the ASGI messages `source` is made of, for `read_whole`
        self._auth = auth
        self.trailers: dict[str, str] = {}
        self.decoded_length = 0
        encodings = {token.strip().lower() for token in headers.get("content-encoding", "").split(",")}
        self._chunked = auth.payload_mode.is_streaming or "aws-chunked" in encodings
        # aws-chunked bodies declare their decoded size separately; some clients omit it when
        # they stream inside HTTP chunked transfer, so its absence is tolerated.
        self._expected = (
            _declared_length(headers.get("x-amz-decoded-content-length"), "x-amz-decoded-content-length")
            if self._chunked
            else _declared_length(headers.get("content-length"), "Content-Length")
        )
        self._declared_trailers = [
            name.strip().lower() for name in headers.get("x-amz-trailer", "").split(",") if name.strip()
        ]
        self._started = False

    def __aiter__(self) -> AsyncIterator[bytes]:
        if self._started:
            raise RuntimeError("a request body can be read only once")
        self._started = True
        return self._chunked_body() if self._chunked else self._plain_body()

    async def read_whole(self, limit: int) -> bytes | None:
        """The whole body in one piece, checked as iteration checks it, when it is plain (not
        aws-chunked) and declares at most `limit` bytes; None otherwise (iterate instead).

        Read straight from the ASGI messages: iterating goes through three async generators
        (Starlette's stream, `body_chunks`, `_plain_body`), each an interpreted frame per step and
        a registration with the event loop, for what is one message from the server."""
        receive = self._receive
        if receive is None or self._chunked or self._expected is None or self._expected > limit:
            return None
        if self._started:
            raise RuntimeError("a request body can be read only once")
        self._started = True
        parts: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # http.disconnect: the client hung up mid-body
                raise IncompleteBody()
            piece = message.get("body", b"")
            if piece:
                self._count(piece)
                parts.append(piece)
            if not message.get("more_body", False):
                break
        whole = parts[0] if len(parts) == 1 else b"".join(parts)
        hasher = self._body_hasher()
        if hasher is not None:
            hasher.update(whole)  # at most `limit` bytes: cheaper here than a thread trip
        self._check_end(hasher)
        return whole

    # --- shared checks ---------------------------------------------------------------------

    def _body_hasher(self) -> _Hash | None:
        return hashlib.sha256() if self._auth.payload_mode is PayloadMode.SIGNED_SHA256 else None

    def _count(self, piece: bytes) -> None:
        self.decoded_length += len(piece)
        if self._expected is not None and self.decoded_length > self._expected:
            raise InvalidRequest("The request body is longer than its declared length.")

    def _check_end(self, hasher: _Hash | None) -> None:
        if self._expected is not None and self.decoded_length < self._expected:
            raise IncompleteBody()
        if hasher is not None:
            computed = hasher.hexdigest()
            if computed != self._auth.payload_sha256:
                raise XAmzContentSHA256Mismatch(
                    ClientComputedContentSHA256=self._auth.payload_sha256,
                    S3ComputedContentSHA256=computed,
                )

    # --- plain bodies ----------------------------------------------------------------------

    async def _plain_body(self) -> AsyncIterator[bytes]:
        hasher = self._body_hasher()
        async for raw in self._source:
            if not raw:
                continue
            piece = bytes(raw)
            self._count(piece)
            if hasher is not None:
                await hash_update(hasher, piece)
            yield piece
        self._check_end(hasher)

    # --- aws-chunked bodies ----------------------------------------------------------------

    async def _chunked_body(self) -> AsyncIterator[bytes]:
        auth = self._auth
        mode = auth.payload_mode
        signed = mode.has_chunk_signatures
        if signed and (
            auth.signing_key is None
            or auth.scope is None
            or auth.amz_date is None
            or auth.seed_signature is None
        ):
            raise InvalidRequest("Chunk signatures need a SigV4-signed request.")
        # x-amz-content-sha256 being a digest covers the body as sent, framing included.
        raw_hasher = self._body_hasher()
        wire = _Wire(self._source, raw_hasher)
        previous = auth.seed_signature or ""

        while True:
            line = await wire.read_line()
            if line is None:
                raise IncompleteBody()
            size, provided = _parse_chunk_header(line, signed)
            if size == 0:
                break
            if not signed:
                async for piece in wire.read_exact(size):
                    self._count(piece)
                    yield piece
                await wire.expect_crlf()
                continue
            if size > MAX_SIGNED_CHUNK_BYTES:
                raise InvalidRequest("aws-chunked chunk too large.")
            chunk_hasher = hashlib.sha256()
            held: list[bytes] = []
            async for piece in wire.read_exact(size):
                await hash_update(chunk_hasher, piece)
                held.append(piece)
            await wire.expect_crlf()
            previous = self._verify_chunk(previous, chunk_hasher.hexdigest(), provided)
            for piece in held:
                self._count(piece)
                yield piece

        if signed:
            previous = self._verify_chunk(previous, EMPTY_SHA256, provided)
        trailer_sig = await self._read_trailers(wire)
        if mode is PayloadMode.STREAMING_SIGNED_TRAILER:
            self._verify_trailers(previous, trailer_sig)
        elif mode is PayloadMode.STREAMING_SIGNED and self.trailers:
            raise InvalidRequest("Trailers are not allowed with STREAMING-AWS4-HMAC-SHA256-PAYLOAD.")
        await wire.finish()
        missing = [name for name in self._declared_trailers if name not in self.trailers]
        if missing:
            raise InvalidRequest(f"The trailer {missing[0]} declared in x-amz-trailer was not sent.")
        self._check_end(raw_hasher)

    def _verify_chunk(self, previous: str, chunk_sha256: str, provided: str | None) -> str:
        auth = self._auth
        assert auth.signing_key is not None and auth.scope is not None and auth.amz_date is not None
        expected = chunk_signature(auth.signing_key, auth.amz_date, auth.scope, previous, chunk_sha256)
        if provided is None or not same(expected, provided):
            raise SignatureDoesNotMatch(
                "The chunk signature we calculated does not match the one you provided."
            )
        return expected

    def _verify_trailers(self, previous: str, provided: str | None) -> None:
        auth = self._auth
        assert auth.signing_key is not None and auth.scope is not None and auth.amz_date is not None
        if provided is None:
            raise SignatureDoesNotMatch("The trailer signature is missing.")
        expected = trailer_signature(auth.signing_key, auth.amz_date, auth.scope, previous, self.trailers)
        if not same(expected, provided):
            raise SignatureDoesNotMatch(
                "The trailer signature we calculated does not match the one you provided."
            )

    async def _read_trailers(self, wire: _Wire) -> str | None:
        """Read `name:value` lines up to the blank line; returns x-amz-trailer-signature."""
        signature: str | None = None
        total = 0
        while True:
            line = await wire.read_line()
            if not line:
                # A blank line ends the section; so does the body ending right after a complete
                # line (some SDKs omit the final CRLF).
                return signature
            total += len(line)
            if total > MAX_TRAILER_BYTES:
                raise InvalidRequest("The trailer section is too large.")
            name, sep, value = line.partition(b":")
            try:
                key, text = name.strip().lower().decode("ascii"), value.strip().decode("ascii")
            except UnicodeDecodeError:
                raise InvalidRequest("Malformed trailer: not ASCII.") from None
            if not sep or not key:
                raise InvalidRequest("Malformed trailer: expecting name:value.")
            if key == TRAILER_SIGNATURE:
                signature = text
            else:
                self.trailers[key] = text
