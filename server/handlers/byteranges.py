"""A multipart/byteranges body: several byte ranges of one object in one answer (RFC 9110, 14.6).

An async generator, in a module of its own: mypyc compiles no async generators, and the GET
handler that uses it (server/handlers/get.py) runs compiled in the compiled build (setup.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from server.http_semantics import ByteRange
from tiering.store import OpenedObject


async def multirange_body(
    opened: OpenedObject, ranges: list[ByteRange], boundary: str, content_type: str
) -> AsyncIterator[bytes | memoryview]:
    size = opened.record.size
    for r in ranges:
        yield part_header(boundary, content_type, r, size)
        async for chunk in opened.stream(r.start, r.end):
            yield chunk
        yield b"\r\n"
    yield f"--{boundary}--\r\n".encode()


def part_header(boundary: str, content_type: str, r: ByteRange, size: int) -> bytes:
    return (
        f"--{boundary}\r\nContent-Type: {content_type}\r\nContent-Range: {r.content_range(size)}\r\n\r\n"
    ).encode()
