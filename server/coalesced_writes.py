"""A transport that sends a response's head and the body that follows it in one system call.

uvicorn writes a response head and its body with two `transport.write` calls. On an idle
socket each write goes straight to the kernel, so a small GET costs two `write` system calls
and, often, two TCP segments (the client's read wakes up twice). `HeadHoldingTransport` keeps a
complete final response head (status 2xx-5xx, ending in the blank line) back until the next
write, the close, or the response's end, and then hands both to `writelines`: one `writev`.

Nothing is held longer than that: a streamed body's first chunk releases the head, a response
without a body releases it when the protocol ends the response (`flush`), a `100 Continue` (an
interim head the client waits for before it sends a body) is never held, and `abort` drops the
held head together with everything else the transport has not sent.
"""

from __future__ import annotations

import asyncio
from typing import Any

# A response head is what uvicorn writes first: the status line, the headers, the blank line.
_HEAD_START = b"HTTP/1.1 "
_HEAD_END = b"\r\n\r\n"


def _is_final_head(data: bytes) -> bool:
    """A complete response head with a final (not 1xx) status."""
    return (
        data.startswith(_HEAD_START)
        and data.endswith(_HEAD_END)
        and data[len(_HEAD_START) : len(_HEAD_START) + 1] in (b"2", b"3", b"4", b"5")
    )


class HeadHoldingTransport(asyncio.Transport):
    """Wraps the connection's transport; every call but `write` passes straight through."""

    def __init__(self, transport: asyncio.Transport) -> None:
        super().__init__()
        self._transport = transport
        self._held: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._held is not None:
            held, self._held = self._held, None
            self._transport.writelines((held, data))
        elif isinstance(data, bytes) and _is_final_head(data):
            self._held = data
        else:
            self._transport.write(data)

    def writelines(self, list_of_data: Any) -> None:
        self.flush()
        self._transport.writelines(list_of_data)

    def flush(self) -> None:
        """Send a held head now (the response ended without a body, or the connection closes)."""
        if self._held is not None:
            held, self._held = self._held, None
            self._transport.write(held)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._held = None  # as the transport drops its own unsent buffer
        self._transport.abort()

    # --- passed through --------------------------------------------------------------------------

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + (len(self._held) if self._held else 0)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)
