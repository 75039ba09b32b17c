"""GetObject, HeadObject, GetObjectAttributes: one catalog lookup, then a streamed byte range."""

from __future__ import annotations

import secrets

from starlette.responses import Response

from server.context import S3Request
from server.encryption import SSE, CustomerKey, customer_key, response_headers
from server.errors import InvalidArgument, InvalidPartNumber, InvalidRange, InvalidRequest
from server.handlers.byteranges import multirange_body, part_header
from server.handlers.common import version_headers, version_param
from server.handlers.multipart import part_number_param
from server.handlers.object_lock import lock_headers
from server.handlers.registry import handles
from server.http_semantics import (
    ByteRange,
    RangeNotSatisfiable,
    apply_response_overrides,
    check_read_conditions,
    object_headers,
    parse_range,
)
from server.operations import Operation
from server.responses import StreamedBody, xml_response
from server.xml_io import Value, document, http_date
from tiering.checksums import checksum_type_of
from tiering.records import ObjectRecord
from tiering.store import OpenedObject

# Objects up to this size are looked up and read whole — on the event loop when their row and
# bytes are at hand, else in one worker-thread trip — and answered from one buffer. No more memory
# than a streamed read holds anyway: the erasure reader buffers a stripe.
SMALL_GET_BYTES = 1 << 20


def part_range(record: ObjectRecord, part_number: int) -> ByteRange:
    """Bytes of part N of a multipart object (a single-PUT object is one part)."""
    if not record.parts_count:
        if part_number != 1:
            raise InvalidPartNumber()
        return ByteRange(0, record.size)
    offset = 0
    for segment, size in zip(record.segments, record.segment_sizes(), strict=True):
        if segment.part_number == part_number:
            return ByteRange(offset, offset + size)
        offset += size
    raise InvalidPartNumber()


@handles(Operation.GetObject, Operation.HeadObject)
async def get_object(req: S3Request) -> Response:
    version = version_param(req)
    send_body = req.operation is Operation.GetObject
    if req.header(SSE) is not None:  # a read names no encryption of its own (SSE-C keys aside)
        raise InvalidArgument("x-amz-server-side-encryption header is not supported for this operation.")
    ckey = customer_key(req)
    # HEAD describes an archived object; only GET needs its bytes (and so a restore).
    opened = await req.store.open_object(
        req.bucket,
        req.key,
        allow_archived=not send_body,
        read_up_to=SMALL_GET_BYTES if send_body else 0,
        customer_key=ckey.key if ckey else None,
        check_customer_key=True,
        version_id=version,
    )
    if send_body and req.lifecycle is not None:
        req.lifecycle.record_access(req.bucket, req.key, version)  # HEAD does not warm an object
    try:
        response = _respond(req, opened, send_body, ckey)
        if send_body and isinstance(response, StreamedBody):
            await response.prime()  # data that cannot be read fails as an S3 error, not a cut body
        return response
    except BaseException:
        opened.close()
        raise


def _respond(req: S3Request, opened: OpenedObject, send_body: bool, ckey: CustomerKey | None) -> Response:
    record = opened.record
    check_read_conditions(req.headers, record)
    headers = object_headers(
        record, checksum_mode=(req.header("x-amz-checksum-mode") or "").upper() == "ENABLED"
    )
    headers.update(response_headers(record.meta.encryption, ckey))
    headers.update(version_headers(record.version_id, "versionId" in req.query))
    headers.update(lock_headers(record.meta.lock))
    apply_response_overrides(headers, req.query)
    part_number = part_number_param(req) if "partNumber" in req.query else 0
    if part_number:
        if req.header("range"):
            raise InvalidRequest("Cannot specify both Range header and partNumber query parameter")
        selected = part_range(record, part_number)
        # No byte range can name the one (empty) part of an empty object: it is answered whole.
        ranges: list[ByteRange] | None = [selected] if selected.length else None
        if record.parts_count:
            headers["x-amz-mp-parts-count"] = str(record.parts_count)
    else:
        try:
            ranges = parse_range(req.header("range"), record.size)
        except RangeNotSatisfiable:
            raise InvalidRange(ActualObjectSize=record.size, RangeRequested=req.header("range")) from None
    if ranges is None:
        if opened.data is not None and send_body:
            return _in_memory(opened, opened.data, 200, headers)
        return StreamedBody(
            opened.stream(0, record.size),
            status_code=200,
            headers=headers,
            content_length=record.size,
            on_close=opened.close,
            send_body=send_body,
        )
    # A checksum describes the whole object: it must not travel with a part of it.
    for name in [h for h in headers if h.startswith("x-amz-checksum-")]:
        del headers[name]
    if len(ranges) == 1:
        # A part is a range, even part 1 of a single-PUT object (all of it): AWS answers 206 with
        # its Content-Range (and x-amz-mp-parts-count only for a multipart object).
        selected = ranges[0]
        headers["content-range"] = selected.content_range(record.size)
        if opened.data is not None and send_body:
            return _in_memory(opened, opened.data[selected.start : selected.end], 206, headers)
        return StreamedBody(
            opened.stream(selected.start, selected.end),
            status_code=206,
            headers=headers,
            content_length=selected.length,
            on_close=opened.close,
            send_body=send_body,
        )
    boundary = secrets.token_hex(12)
    content_type = record.meta.content_type
    length = sum(len(part_header(boundary, content_type, r, record.size)) + r.length + 2 for r in ranges)
    length += len(f"--{boundary}--\r\n")
    headers["content-type"] = f"multipart/byteranges; boundary={boundary}"
    return StreamedBody(
        multirange_body(opened, ranges, boundary, content_type),
        status_code=206,
        headers=headers,
        content_length=length,
        on_close=opened.close,
        send_body=send_body,
    )


def _in_memory(
    opened: OpenedObject, body: bytes | memoryview, status: int, headers: dict[str, str]
) -> Response:
    """An answer for bytes already read: one body message, and the pin released at once."""
    opened.close()
    headers["content-length"] = str(len(body))
    return Response(body, status_code=status, headers=headers)


OBJECT_ATTRIBUTES = ("ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize")
DEFAULT_MAX_PARTS = 1000


def object_attributes(req: S3Request) -> set[str]:
    """x-amz-object-attributes: a comma-separated list (the header may also come more than once)."""
    wanted = {a.strip() for value in req.headers.getlist("x-amz-object-attributes") for a in value.split(",")}
    wanted.discard("")
    if not wanted:
        raise InvalidRequest(
            "The x-amz-object-attributes header specifying the attributes to be retrieved is either missing or empty"
        )
    for name in sorted(wanted):
        if name not in OBJECT_ATTRIBUTES:
            raise InvalidArgument(
                "Invalid attribute name specified.",
                ArgumentName="x-amz-object-attributes",
                ArgumentValue=name,
            )
    return wanted


def _header_int(req: S3Request, name: str, default: int) -> int:
    """A paging header of GetObjectAttributes; S3 ignores a value that is not a number."""
    value = (req.header(name) or "").strip()
    return int(value) if value.isdigit() else default


def _object_parts(req: S3Request, record: ObjectRecord) -> list[tuple[str, Value]]:
    """ObjectParts: the parts after x-amz-part-number-marker, x-amz-max-parts of them."""
    marker = _header_int(req, "x-amz-part-number-marker", 0)
    max_parts = _header_int(req, "x-amz-max-parts", DEFAULT_MAX_PARTS)
    parts = [
        (segment, size)
        for segment, size in zip(record.segments, record.segment_sizes(), strict=True)
        if segment.part_number > marker
    ]
    page, truncated = parts[:max_parts], len(parts) > max_parts
    children: list[tuple[str, Value]] = [
        ("PartsCount", record.parts_count),  # TotalPartsCount in the SDKs
        ("PartNumberMarker", marker),
        ("NextPartNumberMarker", page[-1][0].part_number if page else marker),
        ("MaxParts", max_parts),
        ("IsTruncated", "true" if truncated else "false"),
    ]
    for segment, size in page:
        part: list[tuple[str, Value]] = [("PartNumber", segment.part_number), ("Size", size)]
        if segment.checksum and record.checksum_algorithm:
            part.append((f"Checksum{record.checksum_algorithm}", segment.checksum))
        children.append(("Part", part))
    return children


@handles(Operation.GetObjectAttributes)
async def get_object_attributes(req: S3Request) -> Response:
    wanted = object_attributes(req)
    record = await req.store.head_object(req.bucket, req.key, version_param(req))
    children: list[tuple[str, Value]] = []
    if "ETag" in wanted:
        children.append(("ETag", record.etag))
    if "Checksum" in wanted and record.checksum and record.checksum_algorithm:
        # Here AWS gives a composite checksum without its "-<parts>" suffix, and its type beside it.
        children.append(
            (
                "Checksum",
                [
                    (f"Checksum{record.checksum_algorithm}", record.checksum.split("-")[0]),
                    ("ChecksumType", checksum_type_of(record.checksum)),
                ],
            )
        )
    if "ObjectParts" in wanted and record.parts_count:
        children.append(("ObjectParts", _object_parts(req, record)))
    if "StorageClass" in wanted:
        children.append(("StorageClass", record.meta.storage_class))
    if "ObjectSize" in wanted:
        children.append(("ObjectSize", record.size))
    headers = {"last-modified": http_date(record.last_modified)}
    headers.update(version_headers(record.version_id, "versionId" in req.query))
    return xml_response(document("GetObjectAttributesResponse", children), headers=headers)
