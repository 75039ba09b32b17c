"""A multipart/form-data body read as it streams, for browser POST uploads.

python-multipart's push parser is fed each network chunk and reports parts through callbacks;
`FormReader` turns them into two pulls: the fields before the file (bounded, they are small),
then the file's bytes one chunk at a time, so an upload is never held whole in memory. As on
S3, the file is the `form-data` part named `file`, and the fields after it are ignored.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import ClientDisconnect

from server import errors as s3

MAX_FIELDS_BYTES = 20480  # S3's limit on the form's bytes before the file part


class MalformedPOSTRequest(s3.S3Error):
    status = 400
    message = "The body of your POST request is not well-formed multipart/form-data."


class MaxPostPreDataLengthExceeded(s3.S3Error):
    status = 400
    message = "Your POST request fields preceeding the upload file was too large."  # sic, as S3


@dataclass(frozen=True)
class FilePart:
    filename: str | None  # None when the part has no filename parameter
    content_type: str | None


def form_boundary(content_type: str | None) -> bytes:
    """The boundary of a multipart/form-data body; S3's errors for any other body."""
    kind, options = parse_options_header(content_type or "")
    if kind.lower() != b"multipart/form-data":
        raise s3.PreconditionFailed(
            "At least one of the pre-conditions you specified did not hold",
            Condition="Bucket POST must be of the enclosure-type multipart/form-data",
        )
    boundary = options.get(b"boundary")
    if not boundary:
        raise MalformedPOSTRequest()
    return boundary


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


class FormReader:
    """Pull the form's fields, then its file, from a streamed body."""

    def __init__(self, body: AsyncIterator[bytes], boundary: bytes) -> None:
        self._body = body
        self._events: deque[tuple[str, bytes]] = deque()
        self._header_name = b""
        self._header_value = b""
        self._finished = False
        self._in_file = False
        self._parser = MultipartParser(
            boundary,
            {
                "on_part_begin": lambda: self._events.append(("begin", b"")),
                "on_header_field": self._on_header_field,
                "on_header_value": self._on_header_value,
                "on_header_end": self._on_header_end,
                "on_headers_finished": lambda: self._events.append(("headers", b"")),
                "on_part_data": lambda data, start, end: self._events.append(
                    ("data", bytes(data[start:end]))
                ),
                "on_part_end": lambda: self._events.append(("end", b"")),
                "on_end": lambda: self._events.append(("finish", b"")),
            },
        )

    # python-multipart may hand a header's name or value over in pieces.
    def _on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_name += data[start:end]

    def _on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def _on_header_end(self) -> None:
        self._events.append(("header", self._header_name.lower() + b"\0" + self._header_value))
        self._header_name = self._header_value = b""

    async def _next(self) -> tuple[str, bytes]:
        while not self._events:
            if self._finished:
                return "eof", b""
            try:
                chunk = await anext(self._body)
            except StopAsyncIteration:
                self._finished = True
                self._parser.finalize()
                continue
            except ClientDisconnect:
                raise s3.IncompleteBody() from None
            try:
                self._parser.write(chunk)
            except MultipartParseError:
                raise MalformedPOSTRequest() from None
        return self._events.popleft()

    async def fields(self) -> tuple[list[tuple[str, str]], FilePart | None]:
        """The fields before the file part, in order, and the file part (None: the form has none)."""
        fields: list[tuple[str, str]] = []
        size = 0
        name: str | None = None
        filename: str | None = None
        content_type: str | None = None
        disposition = b""
        value: list[bytes] = []
        while True:
            kind, data = await self._next()
            size += len(data)
            if size > MAX_FIELDS_BYTES:
                raise MaxPostPreDataLengthExceeded(MaxPostPreDataLengthBytes=MAX_FIELDS_BYTES)
            if kind == "begin":
                name = filename = content_type = None
                disposition = b""
                value = []
            elif kind == "header":
                header, _, header_value = data.partition(b"\0")
                if header == b"content-disposition":
                    disposition, options = parse_options_header(header_value)
                    name = _text(options[b"name"]) if b"name" in options else None
                    filename = _text(options[b"filename"]) if b"filename" in options else None
                elif header == b"content-type":
                    content_type = _text(header_value)
            elif kind == "headers":
                if disposition.lower() == b"form-data" and name == "file":
                    self._in_file = True
                    return fields, FilePart(filename, content_type)
            elif kind == "data":
                value.append(data)
            elif kind == "end":
                if name is not None:
                    fields.append((name, _text(b"".join(value))))
            elif kind in ("finish", "eof"):
                return fields, None

    async def file(self) -> AsyncIterator[bytes]:
        """The file part's bytes (call after `fields` returned a file part)."""
        while self._in_file:
            kind, data = await self._next()
            if kind == "data":
                if data:
                    yield data
            elif kind == "end":
                self._in_file = False
            elif kind in ("finish", "eof"):
                raise s3.IncompleteBody()

    async def drain(self, limit: int = MAX_FIELDS_BYTES) -> None:
        """Read past the fields after the file (S3 ignores them), up to `limit` bytes."""
        size = 0
        while size <= limit:
            kind, data = await self._next()
            if kind in ("finish", "eof"):
                return
            size += len(data)
