"""Property tests for request bodies: aws-chunked framing (signed, signed with trailer, unsigned
with trailer) and plain bodies, decoded by `PayloadReader` from any split of the wire bytes.

Random chunkings of random payloads must decode to the payload; a body cut short or with a
changed byte must be refused with an S3 error (for signed chunks: never the payload, altered).
Bounded and repeatable by default; `pytest --soak` searches longer (tests/fuzzing.py)."""

from __future__ import annotations

import base64
import hashlib
import zlib

from hypothesis import assume, given
from hypothesis import strategies as st

from server.errors import IncompleteBody, S3Error, SignatureDoesNotMatch, XAmzContentSHA256Mismatch
from server.signature import AuthContext, PayloadMode, PayloadReader
from tests.fuzzing import fuzz
from tests.unit.test_signature import AKID, encode_signed, pieces_by, read_all, streaming_context

payloads = st.binary(max_size=3000)
chunk_sizes = st.lists(st.integers(1, 1200), min_size=1, max_size=8)
wire_splits = st.lists(st.integers(1, 700), min_size=1, max_size=30)
modes = st.sampled_from(
    [
        PayloadMode.STREAMING_SIGNED,
        PayloadMode.STREAMING_SIGNED_TRAILER,
        PayloadMode.STREAMING_UNSIGNED_TRAILER,
    ]
)


def chunked(data: bytes, sizes: list[int]) -> list[bytes]:
    """`data` cut into chunks of the given sizes, cycling through them (no empty chunk)."""
    chunks, start, i = [], 0, 0
    while start < len(data):
        size = sizes[i % len(sizes)]
        chunks.append(data[start : start + size])
        start, i = start + size, i + 1
    return chunks


def crc32_b64(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def encode(mode: PayloadMode, data: bytes, sizes: list[int]) -> tuple[bytes, AuthContext, dict[str, str]]:
    """An aws-chunked body for `mode`, its auth context and request headers."""
    headers = {"content-encoding": "aws-chunked", "x-amz-decoded-content-length": str(len(data))}
    chunks = chunked(data, sizes)
    if mode is PayloadMode.STREAMING_UNSIGNED_TRAILER:
        body = b"".join(f"{len(c):x}\r\n".encode() + c + b"\r\n" for c in chunks)
        body += f"0\r\nx-amz-checksum-crc32:{crc32_b64(data)}\r\n\r\n".encode()
        headers["x-amz-trailer"] = "x-amz-checksum-crc32"
        return body, AuthContext(AKID, mode, None), headers
    ctx = streaming_context(mode, seed="5eed" * 16)
    assert ctx.signing_key is not None and ctx.scope is not None and ctx.amz_date is not None
    trailers = None
    if mode is PayloadMode.STREAMING_SIGNED_TRAILER:
        trailers = {"x-amz-checksum-crc32": crc32_b64(data)}
        headers["x-amz-trailer"] = "x-amz-checksum-crc32"
    body, _ = encode_signed(
        chunks,
        key=ctx.signing_key,
        amz_date=ctx.amz_date,
        scope=ctx.scope,
        seed="5eed" * 16,
        trailers=trailers,
    )
    return body, ctx, headers


def decode(
    body: bytes, ctx: AuthContext, headers: dict[str, str], splits: list[int]
) -> tuple[bytes, PayloadReader]:
    reader = PayloadReader(pieces_by(body, splits * (len(body) // max(1, sum(splits)) + 1)), ctx, headers)
    return read_all(reader), reader


@fuzz(200)
@given(modes, payloads, chunk_sizes, wire_splits)
def test_any_chunking_of_any_payload_decodes_to_it(
    mode: PayloadMode, data: bytes, sizes: list[int], splits: list[int]
) -> None:
    body, ctx, headers = encode(mode, data, sizes)
    out, reader = decode(body, ctx, headers, splits)
    assert out == data
    if "x-amz-trailer" in headers:
        assert reader.trailers["x-amz-checksum-crc32"] == crc32_b64(data)


@fuzz(200)
@given(modes, payloads, chunk_sizes, wire_splits, st.data())
def test_a_body_cut_short_is_refused(
    mode: PayloadMode, data: bytes, sizes: list[int], splits: list[int], draw: st.DataObject
) -> None:
    body, ctx, headers = encode(mode, data, sizes)
    cut = draw.draw(st.integers(0, len(body) - 1))
    try:
        out, _ = decode(body[:cut], ctx, headers, splits)
    except S3Error as exc:
        assert isinstance(exc, IncompleteBody) or exc.status == 400, exc
        return
    # The one cut tolerated: the final blank line after the last chunk or trailer (some SDKs
    # omit it), when everything before it, signatures included, is complete.
    assert cut == len(body) - 2 and out == data, f"a body cut at {cut} of {len(body)} was accepted"


@fuzz(300)
@given(modes, payloads, chunk_sizes, wire_splits, st.data())
def test_a_changed_byte_is_refused_or_harmless(
    mode: PayloadMode, data: bytes, sizes: list[int], splits: list[int], draw: st.DataObject
) -> None:
    body, ctx, headers = encode(mode, data, sizes)
    at = draw.draw(st.integers(0, len(body) - 1))
    flipped = bytearray(body)
    flipped[at] ^= draw.draw(st.sampled_from([0x01, 0x20, 0x80, 0xFF]))
    try:
        out, reader = decode(bytes(flipped), ctx, headers, splits)
    except S3Error:
        return
    if mode is PayloadMode.STREAMING_UNSIGNED_TRAILER:
        # Nothing signs these chunks: the trailer's checksum is what catches a change, and the
        # PUT path compares it with the digest of what it stored (BadDigest, nothing committed).
        assert out == data or reader.trailers.get("x-amz-checksum-crc32") != crc32_b64(out)
        return
    # Signed: only a change that means the same thing (a hex digit's case) may pass, and the
    # payload must be the one that was sent.
    assert out == data, (mode, at, bytes(body[at : at + 1]), bytes(flipped[at : at + 1]))


@fuzz(200)
@given(payloads, chunk_sizes, wire_splits, st.data())
def test_signed_chunks_never_deliver_altered_data(
    data: bytes, sizes: list[int], splits: list[int], draw: st.DataObject
) -> None:
    assume(data)
    body, ctx, headers = encode(PayloadMode.STREAMING_SIGNED, data, sizes)
    # Change one byte of chunk *data*: the chunk signature must catch it before it is yielded.
    first_data = body.index(b"\r\n") + 2
    at = draw.draw(st.integers(first_data, first_data + len(chunked(data, sizes)[0]) - 1))
    flipped = bytearray(body)
    flipped[at] ^= 0x01
    delivered = bytearray()

    async def collect() -> None:
        async for piece in PayloadReader(pieces_by(bytes(flipped), splits * 50), ctx, headers):
            delivered.extend(piece)

    import asyncio

    try:
        asyncio.run(collect())
    except SignatureDoesNotMatch:
        assert data.startswith(bytes(delivered)) and len(delivered) < len(data) or not delivered
        return
    raise AssertionError("altered chunk data was accepted")


@fuzz(200)
@given(payloads, wire_splits, st.booleans())
def test_plain_signed_body_is_checked_against_its_sha256(
    data: bytes, splits: list[int], tamper: bool
) -> None:
    sent = data + b"x" if tamper else data
    ctx = AuthContext(AKID, PayloadMode.SIGNED_SHA256, hashlib.sha256(data).hexdigest())
    try:
        out, _ = decode(sent, ctx, {"content-length": str(len(sent))}, splits)
    except XAmzContentSHA256Mismatch:
        assert tamper
        return
    assert not tamper and out == data
