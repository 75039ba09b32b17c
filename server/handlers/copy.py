"""CopyObject and UploadPartCopy: server-side copies from a pinned source object."""

from __future__ import annotations

import dataclasses
from urllib.parse import unquote

from starlette.responses import Response

from server.context import S3Request
from server.encryption import COPY_SOURCE_CUSTOMER, customer_key, response_headers, write_request
from server.errors import InvalidArgument, InvalidRange, InvalidRequest
from server.handlers.access_api import object_acl_for_write
from server.handlers.common import version_headers
from server.handlers.multipart import part_number_param
from server.handlers.object_lock import lock_for_write
from server.handlers.registry import handles
from server.http_semantics import (
    check_read_conditions,
    is_number,
    meta_from_headers,
    parse_tagging,
    storage_class_from,
    validate_key,
    write_conditions,
)
from server.operations import Operation
from server.responses import xml_response
from server.xml_io import Value, document, iso_time
from tiering.records import ObjectMeta, ObjectRecord


def copy_source(req: S3Request) -> tuple[str, str]:
    """Parse x-amz-copy-source: "bucket/key" or "/bucket/key", URL-encoded, maybe ?versionId=."""
    raw = req.header("x-amz-copy-source") or ""
    path, _, _ = raw.partition("?")
    path = unquote(path).lstrip("/")
    bucket, sep, key = path.partition("/")
    if not bucket or not sep or not key:
        raise InvalidArgument(
            "Copy Source must mention the source bucket and key: sourcebucket/sourcekey",
            ArgumentName="x-amz-copy-source",
            ArgumentValue=raw,
        )
    return bucket, key


def copy_source_version(req: S3Request) -> str | None:
    """The source version x-amz-copy-source names with `?versionId=` (None: the current one)."""
    _, _, query = (req.header("x-amz-copy-source") or "").partition("?")
    name, _, value = query.partition("=")
    if name != "versionId":
        return None
    if not value:
        raise InvalidArgument(
            "Version id cannot be the empty string", ArgumentName="versionId", ArgumentValue=""
        )
    return unquote(value)


def _source_headers(req: S3Request, source: ObjectRecord) -> dict[str, str]:
    """x-amz-copy-source-version-id: the version copied, when it has one (or was named)."""
    named = copy_source_version(req) is not None
    return {"x-amz-copy-source-version-id": source.version_id} if source.version_id != "null" or named else {}


def _copy_meta(req: S3Request, source: ObjectRecord) -> ObjectMeta:
    directive = (req.header("x-amz-metadata-directive") or "COPY").upper()
    tagging_directive = (req.header("x-amz-tagging-directive") or "COPY").upper()
    if directive not in ("COPY", "REPLACE") or tagging_directive not in ("COPY", "REPLACE"):
        raise InvalidArgument("Unknown metadata or tagging directive")
    if directive == "REPLACE":
        meta = meta_from_headers(req.headers)
    else:
        storage_class, explicit = storage_class_from(req.headers)
        meta = ObjectMeta(
            content_type=source.meta.content_type,
            system=dict(source.meta.system),
            user=dict(source.meta.user),
            tags=source.meta.tags,
            storage_class=storage_class if explicit else "STANDARD",
            storage_class_explicit=explicit,
        )
    tags = (
        parse_tagging(req.header("x-amz-tagging") or "")
        if tagging_directive == "REPLACE"
        else source.meta.tags
    )
    return ObjectMeta(
        content_type=meta.content_type,
        system=meta.system,
        user=meta.user,
        tags=tags,
        storage_class=meta.storage_class,
        storage_class_explicit=meta.storage_class_explicit,
    )


def _result(
    tag: str,
    record_etag: str,
    mtime: float,
    checksum: tuple[str | None, str | None],
    headers: dict[str, str] | None = None,
) -> Response:
    children: list[tuple[str, Value]] = [("ETag", f'"{record_etag}"'), ("LastModified", iso_time(mtime))]
    algorithm, value = checksum
    if algorithm and value:
        children.append((f"Checksum{algorithm}", value))
    return xml_response(document(tag, children), headers=headers or None)


@handles(Operation.CopyObject)
async def copy_object(req: S3Request) -> Response:
    validate_key(req.key)
    encryption, ckey = write_request(req)
    src_bucket, src_key = copy_source(req)
    if_match, if_none_match = write_conditions(req.headers)  # on the destination
    source_key = customer_key(req, COPY_SOURCE_CUSTOMER)
    if req.authorizer is not None and req.identity is not None:
        await req.authorizer.check_read(req.identity, src_bucket, src_key, request=req.request)
    source = await req.store.open_object(
        src_bucket,
        src_key,
        customer_key=source_key.key if source_key else None,
        check_customer_key=True,
        version_id=copy_source_version(req),
    )
    if req.lifecycle is not None:
        # A copy reads its source: an access (of the version it names, if it names one).
        req.lifecycle.record_access(src_bucket, src_key, copy_source_version(req))
    try:
        check_read_conditions(req.headers, source.record, for_copy=True)
        meta = await object_acl_for_write(req, _copy_meta(req, source.record))
        # The destination's lock comes from this request's headers (or the bucket's default), never
        # from the source version.
        lock = await lock_for_write(req, carries_body=False)
        meta = dataclasses.replace(meta, lock=lock)
        await req.store.check_write_condition(req.bucket, req.key, if_match, if_none_match)
        # Copying a named version onto its own key is how S3 users restore an earlier version (it
        # becomes the newest one), so only an unversioned self-copy must change something.
        same_object = (src_bucket, src_key) == (req.bucket, req.key) and copy_source_version(req) is None
        if same_object:
            changes = (
                (req.header("x-amz-metadata-directive") or "").upper() == "REPLACE"
                or (req.header("x-amz-tagging-directive") or "").upper() == "REPLACE"
                or meta.storage_class != source.record.meta.storage_class
                or encryption is not None
            )
            if not changes:
                raise InvalidRequest(
                    "This copy request is illegal because it is trying to copy an object to itself without "
                    "changing the object's metadata, storage class, website redirect location or encryption "
                    "attributes."
                )
            if (
                req.store.tier_for(meta.storage_class) == source.record.tier
                and encryption is None
                and source.record.version_id == "null"
                and await req.store.versioning(req.bucket) == ""
            ):
                # (In a versioned bucket a self-copy is a new version with its own data: no two
                # versions ever share a blob, see tiering.catalog.versions.)
                # chmod/touch through a FUSE mount: only metadata changes, no byte is copied.
                record = await req.store.replace_metadata(
                    req.bucket, req.key, meta, if_etag=source.record.etag
                )
                return _result(
                    "CopyObjectResult",
                    record.etag,
                    record.last_modified,
                    (record.checksum_algorithm, record.checksum),
                    {**response_headers(record.meta.encryption), **_source_headers(req, source.record)},
                )
        await req.store.get_bucket(req.bucket)
        pending = await req.store.begin_put(
            req.bucket,
            meta.storage_class,
            size_hint=source.record.size,
            checksum_algorithm=req.header("x-amz-checksum-algorithm") or source.record.checksum_algorithm,
            encryption=encryption,
        )
        try:
            await req.store.copy_data(source, pending)
            record = await pending.commit_object(
                req.bucket, req.key, meta, if_match=if_match, if_none_match=if_none_match
            )
        except BaseException:
            await pending.abort()
            raise
    finally:
        source.close()
    return _result(
        "CopyObjectResult",
        record.etag,
        record.last_modified,
        (record.checksum_algorithm, record.checksum),
        {
            **response_headers(record.meta.encryption, ckey),
            **_source_headers(req, source.record),
            **version_headers(record.version_id),
        },
    )


def _copy_range(req: S3Request, size: int) -> tuple[int, int]:
    value = req.header("x-amz-copy-source-range")
    if not value:
        return 0, size
    unit, _, spec = value.partition("=")
    first, dash, last = spec.partition("-")
    if unit.strip() != "bytes" or not dash or not is_number(first.strip()) or not is_number(last.strip()):
        raise InvalidArgument(
            "The x-amz-copy-source-range value must be of the form bytes=first-last",
            ArgumentName="x-amz-copy-source-range",
            ArgumentValue=value,
        )
    start, end = int(first), int(last) + 1
    if start >= end or end > size:
        raise InvalidRange(ActualObjectSize=size, RangeRequested=value)
    return start, end


@handles(Operation.UploadPartCopy)
async def upload_part_copy(req: S3Request) -> Response:
    part_number = part_number_param(req)
    upload = await req.store.get_upload(req.bucket, req.key, req.query.get("uploadId", ""))
    src_bucket, src_key = copy_source(req)
    source_key = customer_key(req, COPY_SOURCE_CUSTOMER)
    ckey = customer_key(req)
    if req.authorizer is not None and req.identity is not None:
        await req.authorizer.check_read(req.identity, src_bucket, src_key, request=req.request)
    source = await req.store.open_object(
        src_bucket,
        src_key,
        customer_key=source_key.key if source_key else None,
        check_customer_key=True,
        version_id=copy_source_version(req),
    )
    try:
        check_read_conditions(req.headers, source.record, for_copy=True)
        start, end = _copy_range(req, source.record.size)
        pending = await req.store.begin_part(
            upload,
            size_hint=end - start,
            checksum_algorithm=None,
            part_number=part_number,
            customer_key=ckey.key if ckey else None,
        )
        try:
            await req.store.copy_data(source, pending, start, end)
            part = await pending.commit_part(upload, part_number)
        except BaseException:
            await pending.abort()
            raise
    finally:
        source.close()
    return _result(
        "CopyPartResult",
        part.etag,
        part.last_modified,
        (upload.checksum_algorithm, part.checksum),
        {**response_headers(upload.meta.encryption, ckey), **_source_headers(req, source.record)},
    )
