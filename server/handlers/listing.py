"""ListObjects (v1), ListObjectsV2, ListObjectVersions and ListMultipartUploads."""

from __future__ import annotations

import base64
import binascii

from starlette.responses import Response

from server.context import S3Request
from server.errors import InvalidArgument
from server.handlers.common import int_param, owner_xml
from server.handlers.registry import handles
from server.http_semantics import encode_key
from server.operations import Operation
from server.responses import xml_response
from server.xml_io import Value, document, iso_time
from tiering.records import ListEntry, ListPage, UploadRecord

MAX_KEYS = 1000


def _encoding(req: S3Request) -> str | None:
    value = req.query.get("encoding-type")
    if value is not None and value != "url":
        raise InvalidArgument("Invalid Encoding Method specified in Request",
                              ArgumentName="encoding-type", ArgumentValue=value)
    return value


def _content(req: S3Request, record: ListEntry, encoding: str | None, with_owner: bool) -> Value:
    entry: list[tuple[str, Value]] = [
        ("Key", encode_key(record.key, encoding)),
        ("LastModified", iso_time(record.last_modified)),
        ("ETag", f'"{record.etag}"'),
        ("Size", record.size),
        ("StorageClass", record.storage_class),
    ]
    if record.checksum_algorithm:
        entry.append(("ChecksumAlgorithm", record.checksum_algorithm))
    if with_owner:
        entry.append(("Owner", owner_xml(req)))  # type: ignore[arg-type]
    return entry


def _prefixes(page: ListPage, encoding: str | None) -> list[tuple[str, Value]]:
    return [("CommonPrefixes", [("Prefix", encode_key(p, encoding))]) for p in page.common_prefixes]


async def _page(req: S3Request, start_after: str, max_keys: int) -> ListPage:
    return await req.store.list_objects(
        req.bucket,
        prefix=req.query.get("prefix", ""),
        delimiter=req.query.get("delimiter", ""),
        start_after=start_after,
        max_keys=max_keys,
    )


@handles(Operation.ListObjects)
async def list_objects_v1(req: S3Request) -> Response:
    encoding = _encoding(req)
    max_keys = int_param(req, "max-keys", MAX_KEYS, high=MAX_KEYS)
    marker = req.query.get("marker", "")
    page = await _page(req, marker, max_keys)
    delimiter = req.query.get("delimiter", "")
    children: list[tuple[str, Value]] = [
        ("Name", req.bucket),
        ("Prefix", encode_key(req.query.get("prefix", ""), encoding)),
        ("Marker", encode_key(marker, encoding)),
        ("MaxKeys", max_keys),
    ]
    if delimiter:
        children.append(("Delimiter", encode_key(delimiter, encoding)))
    children.append(("IsTruncated", page.is_truncated))
    if page.is_truncated and delimiter and page.next_marker:
        children.append(("NextMarker", encode_key(page.next_marker, encoding)))
    if encoding:
        children.append(("EncodingType", encoding))
    children += [("Contents", _content(req, r, encoding, True)) for r in page.objects]
    children += _prefixes(page, encoding)
    return xml_response(document("ListBucketResult", children))


def _encode_token(marker: str) -> str:
    return base64.urlsafe_b64encode(marker.encode()).decode()


def _decode_token(token: str) -> str:
    try:
        # validate=True: a token with stray characters is refused, not silently read as "" (page 1).
        return base64.b64decode(token.encode(), altchars=b"-_", validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise InvalidArgument("The continuation token provided is incorrect",
                              ArgumentName="continuation-token", ArgumentValue=token) from None


@handles(Operation.ListObjectsV2)
async def list_objects_v2(req: S3Request) -> Response:
    encoding = _encoding(req)
    max_keys = int_param(req, "max-keys", MAX_KEYS, high=MAX_KEYS)
    token = req.query.get("continuation-token")
    start_after = req.query.get("start-after", "")
    position = _decode_token(token) if token else start_after
    page = await _page(req, position, max_keys)
    delimiter = req.query.get("delimiter", "")
    fetch_owner = req.query.get("fetch-owner", "").lower() == "true"
    children: list[tuple[str, Value]] = [
        ("Name", req.bucket),
        ("Prefix", encode_key(req.query.get("prefix", ""), encoding)),
        ("MaxKeys", max_keys),
        ("KeyCount", len(page.objects) + len(page.common_prefixes)),
    ]
    if delimiter:
        children.append(("Delimiter", encode_key(delimiter, encoding)))
    children.append(("IsTruncated", page.is_truncated))
    if token is not None:
        children.append(("ContinuationToken", token))
    if page.is_truncated and page.next_marker is not None:
        children.append(("NextContinuationToken", _encode_token(page.next_marker)))
    if start_after:
        children.append(("StartAfter", encode_key(start_after, encoding)))
    if encoding:
        children.append(("EncodingType", encoding))
    children += [("Contents", _content(req, r, encoding, fetch_owner)) for r in page.objects]
    children += _prefixes(page, encoding)
    return xml_response(document("ListBucketResult", children))


@handles(Operation.ListObjectVersions)
async def list_object_versions(req: S3Request) -> Response:
    """Unversioned buckets: every object is its one version, `null`, and the latest."""
    encoding = _encoding(req)
    max_keys = int_param(req, "max-keys", MAX_KEYS, high=MAX_KEYS)
    key_marker = req.query.get("key-marker", "")
    page = await _page(req, key_marker, max_keys)
    delimiter = req.query.get("delimiter", "")
    children: list[tuple[str, Value]] = [
        ("Name", req.bucket),
        ("Prefix", encode_key(req.query.get("prefix", ""), encoding)),
        ("KeyMarker", encode_key(key_marker, encoding)),
        ("VersionIdMarker", req.query.get("version-id-marker", "")),
        ("MaxKeys", max_keys),
    ]
    if delimiter:
        children.append(("Delimiter", encode_key(delimiter, encoding)))
    children.append(("IsTruncated", page.is_truncated))
    if page.is_truncated and page.next_marker:
        children.append(("NextKeyMarker", encode_key(page.next_marker, encoding)))
        children.append(("NextVersionIdMarker", "null"))
    if encoding:
        children.append(("EncodingType", encoding))
    for record in page.objects:
        children.append(("Version", [
            ("Key", encode_key(record.key, encoding)),
            ("VersionId", "null"),
            ("IsLatest", True),
            ("LastModified", iso_time(record.last_modified)),
            ("ETag", f'"{record.etag}"'),
            ("Size", record.size),
            ("StorageClass", record.storage_class),
            ("Owner", owner_xml(req)),  # type: ignore[list-item]
        ]))
    children += _prefixes(page, encoding)
    return xml_response(document("ListVersionsResult", children))


async def _uploads_page(
    req: S3Request, prefix: str, delimiter: str, key_marker: str, upload_marker: str, max_uploads: int
) -> tuple[list[UploadRecord], list[str], bool]:
    """Uploads and common prefixes (rolled up at the delimiter) after the markers, up to the limit."""
    uploads: list[UploadRecord] = []
    prefixes: list[str] = []
    while True:
        batch = await req.store.list_uploads(
            req.bucket, prefix=prefix, key_marker=key_marker, upload_id_marker=upload_marker, limit=MAX_KEYS
        )
        for upload in batch:
            cut = upload.key.find(delimiter, len(prefix)) if delimiter else -1
            common = upload.key[: cut + len(delimiter)] if cut >= 0 else None
            if common is not None and (common in prefixes[-1:] or common <= req.query.get("key-marker", "")):
                continue
            if len(uploads) + len(prefixes) >= max_uploads:
                return uploads, prefixes, True
            if common is not None:
                prefixes.append(common)
            else:
                uploads.append(upload)
        if len(batch) < MAX_KEYS:
            return uploads, prefixes, False
        key_marker, upload_marker = batch[-1].key, batch[-1].upload_id


@handles(Operation.ListMultipartUploads)
async def list_uploads(req: S3Request) -> Response:
    encoding = _encoding(req)
    max_uploads = int_param(req, "max-uploads", 1000, high=1000)
    key_marker = req.query.get("key-marker", "")
    upload_marker = req.query.get("upload-id-marker", "")
    prefix = req.query.get("prefix", "")
    delimiter = req.query.get("delimiter", "")
    uploads, prefixes, truncated = await _uploads_page(
        req, prefix, delimiter, key_marker, upload_marker, max_uploads
    )
    # The next page starts after the last entry: an upload (key and id) or a common prefix (key only).
    last_upload = uploads[-1] if uploads else None
    if prefixes and (last_upload is None or prefixes[-1] > last_upload.key):
        next_key, next_id = prefixes[-1], ""
    else:
        next_key, next_id = (last_upload.key, last_upload.upload_id) if last_upload else ("", "")
    children: list[tuple[str, Value]] = [
        ("Bucket", req.bucket),
        ("KeyMarker", encode_key(key_marker, encoding)),
        ("UploadIdMarker", upload_marker),
        ("NextKeyMarker", encode_key(next_key, encoding)),
        ("NextUploadIdMarker", next_id),
        ("MaxUploads", max_uploads),
        ("IsTruncated", truncated),
        ("Prefix", encode_key(prefix, encoding)),
    ]
    if delimiter:
        children.append(("Delimiter", encode_key(delimiter, encoding)))
    if encoding:
        children.append(("EncodingType", encoding))
    for upload in uploads:
        children.append(("Upload", [
            ("Key", encode_key(upload.key, encoding)),
            ("UploadId", upload.upload_id),
            ("Initiator", owner_xml(req)),  # type: ignore[list-item]
            ("Owner", owner_xml(req)),  # type: ignore[list-item]
            ("StorageClass", upload.meta.storage_class),
            ("Initiated", iso_time(upload.initiated)),
        ]))
    children += [("CommonPrefixes", [("Prefix", encode_key(p, encoding))]) for p in prefixes]
    return xml_response(document("ListMultipartUploadsResult", children))
