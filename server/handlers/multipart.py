"""Multipart uploads: create, upload part, complete, abort, list parts."""

from __future__ import annotations

import dataclasses

from starlette.responses import Response

from server.context import S3Request
from server.encryption import customer_key, response_headers, write_request
from server.errors import InvalidArgument, InvalidRequest, MalformedXML
from server.handlers.access_api import object_acl_for_write
from server.handlers.common import int_param, owner_of, owner_xml, receive_body, version_headers
from server.handlers.object_lock import lock_for_write
from server.handlers.put import declared_size
from server.handlers.registry import handles
from server.http_semantics import (
    is_number,
    meta_from_headers,
    requested_checksum_algorithm,
    validate_key,
    write_conditions,
)
from server.operations import Operation
from server.responses import empty_response, xml_response
from server.xml_io import Value, child_text, document, iso_time, parse
from tiering.checksums import ALGORITHMS, CHECKSUM_TYPES, COMPOSITE, checksum_type_of, checksum_types_for

MAX_PART_NUMBER = 10_000


def part_number_param(req: S3Request) -> int:
    raw = req.query.get("partNumber", "")
    if not is_number(raw) or not 1 <= int(raw) <= MAX_PART_NUMBER:
        raise InvalidArgument(
            "Part number must be an integer between 1 and 10000, inclusive",
            ArgumentName="partNumber",
            ArgumentValue=raw,
        )
    return int(raw)


@handles(Operation.CreateMultipartUpload)
async def create_upload(req: S3Request) -> Response:
    validate_key(req.key)
    encryption, ckey = write_request(req)
    meta = await object_acl_for_write(req, meta_from_headers(req.headers))
    lock = await lock_for_write(req, carries_body=False)
    if lock is not None:  # kept with the upload, given to the version CompleteMultipartUpload makes
        meta = dataclasses.replace(meta, lock=lock)
    algorithm = req.header("x-amz-checksum-algorithm")
    if algorithm and algorithm.upper() not in ALGORITHMS:
        raise InvalidRequest("Checksum algorithm provided is unsupported.")
    checksum_type = _checksum_type(algorithm, req.header("x-amz-checksum-type"))
    owner_id, _ = owner_of(req)
    upload = await req.store.create_upload(
        req.bucket,
        req.key,
        meta,
        checksum_algorithm=algorithm,
        owner=owner_id,
        checksum_type=checksum_type,
        encryption=encryption,
    )
    headers = response_headers(upload.meta.encryption, ckey)
    if upload.checksum_algorithm:
        headers.update(
            {
                "x-amz-checksum-algorithm": upload.checksum_algorithm,
                "x-amz-checksum-type": upload.checksum_type or COMPOSITE,
            }
        )
    return xml_response(
        document(
            "InitiateMultipartUploadResult",
            [("Bucket", req.bucket), ("Key", req.key), ("UploadId", upload.upload_id)],
        ),
        headers=headers,
    )


def _checksum_type(algorithm: str | None, requested: str | None) -> str | None:
    """The upload's checksum type: the one asked for if S3 allows it with the algorithm, else
    the algorithm's default (COMPOSITE; FULL_OBJECT for CRC64NVME, which has no other)."""
    if requested is not None and requested.upper() not in CHECKSUM_TYPES:
        raise InvalidRequest("Value for x-amz-checksum-type header is invalid.")
    if not algorithm:
        if requested is not None:
            raise InvalidRequest(
                "The x-amz-checksum-type header can only be used with the x-amz-checksum-algorithm header."
            )
        return None
    allowed = checksum_types_for(algorithm)
    chosen = requested.upper() if requested is not None else allowed[0]
    if chosen not in allowed:
        raise InvalidRequest(
            f"The {chosen} checksum type cannot be used with the {algorithm.lower()} checksum algorithm."
        )
    return chosen


@handles(Operation.UploadPart)
async def upload_part(req: S3Request) -> Response:
    part_number = part_number_param(req)
    upload = await req.store.get_upload(req.bucket, req.key, req.query.get("uploadId", ""))
    size = declared_size(req)
    requested = requested_checksum_algorithm(req.headers)
    if requested and upload.checksum_algorithm and requested != upload.checksum_algorithm:
        # The object's checksum is made of its parts' ones: they must all be of its algorithm.
        raise InvalidRequest(
            f"Checksum Type mismatch occurred, expected checksum Type: "
            f"{upload.checksum_algorithm.lower()}, actual checksum Type: {requested.lower()}"
        )
    algorithm = requested or upload.checksum_algorithm
    ckey = customer_key(req)
    pending = await req.store.begin_part(
        upload,
        size_hint=size,
        checksum_algorithm=algorithm,
        part_number=part_number,
        customer_key=ckey.key if ckey else None,
    )
    try:
        await receive_body(req, pending)
        part = await pending.commit_part(upload, part_number)
    except BaseException:
        await pending.abort()
        raise
    headers = {"etag": f'"{part.etag}"', **response_headers(upload.meta.encryption, ckey)}
    if part.checksum and algorithm:
        headers[f"x-amz-checksum-{algorithm.lower()}"] = part.checksum
    return empty_response(200, headers)


@handles(Operation.CompleteMultipartUpload)
async def complete_upload(req: S3Request) -> Response:
    root = parse(await req.small_body(), "CompleteMultipartUpload")
    requested: list[tuple[int, str]] = []
    for part in root.findall("Part"):
        number = child_text(part, "PartNumber")
        etag = child_text(part, "ETag")
        if number is None or not is_number(number.strip()) or etag is None:
            raise MalformedXML()
        requested.append((int(number), etag))
    if not requested:
        # The schema requires at least one <Part>: AWS answers MalformedXML, not InvalidPart.
        raise MalformedXML()
    expected = next(((a, v) for a in ALGORITHMS if (v := req.header(f"x-amz-checksum-{a.lower()}"))), None)
    if_match, if_none_match = write_conditions(req.headers)
    record = await req.store.complete_upload(
        req.bucket,
        req.key,
        req.query.get("uploadId", ""),
        requested,
        if_match=if_match,
        if_none_match=if_none_match,
        expected_checksum=expected,
        expected_checksum_type=req.header("x-amz-checksum-type"),
    )
    children: list[tuple[str, Value]] = [
        ("Location", f"/{req.bucket}/{req.key}"),
        ("Bucket", req.bucket),
        ("Key", req.key),
        ("ETag", f'"{record.etag}"'),
    ]
    if record.checksum and record.checksum_algorithm:
        children.append((f"Checksum{record.checksum_algorithm}", record.checksum))
        children.append(("ChecksumType", checksum_type_of(record.checksum)))
    return xml_response(
        document("CompleteMultipartUploadResult", children),
        headers={**response_headers(record.meta.encryption), **version_headers(record.version_id)} or None,
    )


@handles(Operation.AbortMultipartUpload)
async def abort_upload(req: S3Request) -> Response:
    await req.store.abort_upload(req.bucket, req.key, req.query.get("uploadId", ""))
    return empty_response(204)


@handles(Operation.ListParts)
async def list_parts(req: S3Request) -> Response:
    upload = await req.store.get_upload(req.bucket, req.key, req.query.get("uploadId", ""))
    max_parts = int_param(req, "max-parts", 1000, high=1000)
    marker = int_param(req, "part-number-marker", 0)
    parts = await req.store.list_parts(upload, marker=marker, limit=max_parts + 1)
    truncated = len(parts) > max_parts
    parts = parts[:max_parts]
    children: list[tuple[str, Value]] = [
        ("Bucket", req.bucket),
        ("Key", req.key),
        ("UploadId", upload.upload_id),
        ("PartNumberMarker", marker),
        ("NextPartNumberMarker", parts[-1].part_number if parts else marker),
        ("MaxParts", max_parts),
        ("IsTruncated", truncated),
        ("Initiator", owner_xml(req)),
        ("Owner", owner_xml(req)),
        ("StorageClass", upload.meta.storage_class),
    ]
    if upload.checksum_algorithm:
        children.append(("ChecksumAlgorithm", upload.checksum_algorithm))
        children.append(("ChecksumType", upload.checksum_type or COMPOSITE))
    for part in parts:
        entry: list[tuple[str, Value]] = [
            ("PartNumber", part.part_number),
            ("LastModified", iso_time(part.last_modified)),
            ("ETag", f'"{part.etag}"'),
            ("Size", part.size),
        ]
        if part.checksum and upload.checksum_algorithm:
            entry.append((f"Checksum{upload.checksum_algorithm}", part.checksum))
        children.append(("Part", entry))
    return xml_response(document("ListPartsResult", children))
