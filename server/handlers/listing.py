"""ListObjects (v1), ListObjectsV2, ListObjectVersions and ListMultipartUploads."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable

from starlette.responses import Response

from server.context import S3Request
from server.errors import InvalidArgument
from server.handlers.common import int_param, owner_of, owner_xml
from server.handlers.registry import handles
from server.http_semantics import encode_key
from server.operations import Operation
from server.responses import xml_response
from server.xml_io import Value, document, escape_text, iso_time
from tiering.catalog.versions import VersionEntry
from tiering.records import ListEntry, ListPage, UploadRecord

MAX_KEYS = 1000


def _encoding(req: S3Request) -> str | None:
    value = req.query.get("encoding-type")
    if value is not None and value != "url":
        raise InvalidArgument(
            "Invalid Encoding Method specified in Request", ArgumentName="encoding-type", ArgumentValue=value
        )
    return value


def _owner_text(req: S3Request) -> str:
    owner_id, name = owner_of(req)
    return f"<Owner><ID>{escape_text(owner_id)}</ID><DisplayName>{escape_text(name)}</DisplayName></Owner>"


# A page's entries are rendered straight to text, one f-string each: building (name, value) pairs
# for a thousand entries and walking them again cost more than the catalog query. Storage classes
# and checksum algorithms come from fixed vocabularies (checked on the way in) and ETags are hex,
# so only keys and prefixes need escaping.


def _key_text(encoding: str | None) -> Callable[[str], str]:
    """How a key or prefix is written: escaped, and URL-encoded first with encoding-type=url."""
    if encoding is None:
        return escape_text
    return lambda key: escape_text(encode_key(key, encoding))


def _key_texts(keys: list[str], encoding: str | None) -> list[str]:
    """`_key_text` for a page of keys at once: one scan of the page finds whether any key needs
    escaping at all (most pages have none), instead of three scans per key."""
    if encoding is not None:
        keys = [encode_key(key, encoding) for key in keys]
    page = "\n".join(keys)
    if "&" in page or "<" in page or ">" in page:
        return [escape_text(key) for key in keys]
    return keys


def _contents(entries: list[ListEntry], encoding: str | None, owner: str) -> str:
    """`<Contents>` per entry; `owner` is the rendered `<Owner>` element, or "" to leave it out."""
    keys = _key_texts([entry[0] for entry in entries], encoding)
    times = list(map(iso_time, [entry[3] for entry in entries]))
    rows = zip(keys, times, entries, strict=True)
    return "".join(
        [
            f"<Contents><Key>{key}</Key>"
            f'<LastModified>{modified}</LastModified><ETag>"{etag}"</ETag><Size>{size}</Size>'
            f"<StorageClass>{storage_class}</StorageClass>"
            f"{f'<ChecksumAlgorithm>{algorithm}</ChecksumAlgorithm>' if algorithm else ''}{owner}</Contents>"
            for key, modified, (_, size, etag, _, storage_class, algorithm) in rows
        ]
    )


def _prefixes(prefixes: list[str], encoding: str | None) -> str:
    return "".join(
        [f"<CommonPrefixes><Prefix>{p}</Prefix></CommonPrefixes>" for p in _key_texts(prefixes, encoding)]
    )


async def _render_page(
    req: S3Request, render: Callable[[ListPage], bytes], start_after: str, max_keys: int
) -> Response:
    """Query the page and render it in one worker-thread trip (see ObjectStore.render_listing)."""
    body = await req.store.render_listing(
        render,
        req.bucket,
        prefix=req.query.get("prefix", ""),
        delimiter=req.query.get("delimiter", ""),
        start_after=start_after,
        max_keys=max_keys,
    )
    return xml_response(body)


@handles(Operation.ListObjects)
async def list_objects_v1(req: S3Request) -> Response:
    encoding = _encoding(req)
    max_keys = int_param(req, "max-keys", MAX_KEYS, high=MAX_KEYS)
    marker = req.query.get("marker", "")
    prefix = req.query.get("prefix", "")
    delimiter = req.query.get("delimiter", "")
    owner = _owner_text(req)

    def render(page: ListPage) -> bytes:
        children: list[tuple[str, Value]] = [
            ("Name", req.bucket),
            ("Prefix", encode_key(prefix, encoding)),
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
        entries = _contents(page.objects, encoding, owner) + _prefixes(page.common_prefixes, encoding)
        return document("ListBucketResult", children, trailer=entries)

    return await _render_page(req, render, marker, max_keys)


def _encode_token(marker: str) -> str:
    return base64.urlsafe_b64encode(marker.encode()).decode()


def _decode_token(token: str) -> str:
    try:
        # validate=True: a token with stray characters is refused, not silently read as "" (page 1).
        return base64.b64decode(token.encode(), altchars=b"-_", validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise InvalidArgument(
            "The continuation token provided is incorrect",
            ArgumentName="continuation-token",
            ArgumentValue=token,
        ) from None


@handles(Operation.ListObjectsV2)
async def list_objects_v2(req: S3Request) -> Response:
    encoding = _encoding(req)
    max_keys = int_param(req, "max-keys", MAX_KEYS, high=MAX_KEYS)
    token = req.query.get("continuation-token")
    start_after = req.query.get("start-after", "")
    position = _decode_token(token) if token else start_after
    prefix = req.query.get("prefix", "")
    delimiter = req.query.get("delimiter", "")
    owner = _owner_text(req) if req.query.get("fetch-owner", "").lower() == "true" else ""

    def render(page: ListPage) -> bytes:
        children: list[tuple[str, Value]] = [
            ("Name", req.bucket),
            ("Prefix", encode_key(prefix, encoding)),
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
        entries = _contents(page.objects, encoding, owner) + _prefixes(page.common_prefixes, encoding)
        return document("ListBucketResult", children, trailer=entries)

    return await _render_page(req, render, position, max_keys)


@handles(Operation.ListObjectVersions)
async def list_object_versions(req: S3Request) -> Response:
    """Versions and delete markers, keys in order and each key's versions newest first."""
    encoding = _encoding(req)
    max_keys = int_param(req, "max-keys", MAX_KEYS, high=MAX_KEYS)
    key_marker = req.query.get("key-marker", "")
    version_marker = req.query.get("version-id-marker", "")
    prefix = req.query.get("prefix", "")
    delimiter = req.query.get("delimiter", "")
    if version_marker and not key_marker:
        raise InvalidArgument(
            "A version-id marker cannot be specified without a key marker.",
            ArgumentName="version-id-marker",
            ArgumentValue=version_marker,
        )
    owner = _owner_text(req)
    page = await req.store.list_versions(
        req.bucket,
        prefix=prefix,
        delimiter=delimiter,
        key_marker=key_marker,
        version_id_marker=version_marker,
        max_keys=max_keys,
    )
    children: list[tuple[str, Value]] = [
        ("Name", req.bucket),
        ("Prefix", encode_key(prefix, encoding)),
        ("KeyMarker", encode_key(key_marker, encoding)),
        ("VersionIdMarker", version_marker),
        ("MaxKeys", max_keys),
    ]
    if delimiter:
        children.append(("Delimiter", encode_key(delimiter, encoding)))
    children.append(("IsTruncated", page.is_truncated))
    if page.is_truncated and page.next_key_marker:
        children.append(("NextKeyMarker", encode_key(page.next_key_marker, encoding)))
        if page.next_version_id_marker:
            children.append(("NextVersionIdMarker", page.next_version_id_marker))
    if encoding:
        children.append(("EncodingType", encoding))
    entries = _version_entries(page.entries, encoding, owner) + _prefixes(page.common_prefixes, encoding)
    return xml_response(document("ListVersionsResult", children, trailer=entries))


def _version_entries(entries: list[VersionEntry], encoding: str | None, owner: str) -> str:
    """`<Version>` and `<DeleteMarker>` elements, in the listing's order."""
    text = _key_text(encoding)
    out: list[str] = []
    for entry in entries:
        head = (
            f"<Key>{text(entry.key)}</Key><VersionId>{escape_text(entry.version_id)}</VersionId>"
            f"<IsLatest>{'true' if entry.is_latest else 'false'}</IsLatest>"
            f"<LastModified>{iso_time(entry.last_modified)}</LastModified>"
        )
        if entry.is_marker:
            out.append(f"<DeleteMarker>{head}{owner}</DeleteMarker>")
            continue
        out.append(
            f'<Version>{head}<ETag>"{entry.etag}"</ETag><Size>{entry.size}</Size>'
            f"<StorageClass>{entry.storage_class}</StorageClass>{owner}</Version>"
        )
    return "".join(out)


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
        children.append(
            (
                "Upload",
                [
                    ("Key", encode_key(upload.key, encoding)),
                    ("UploadId", upload.upload_id),
                    ("Initiator", owner_xml(req)),
                    ("Owner", owner_xml(req)),
                    ("StorageClass", upload.meta.storage_class),
                    ("Initiated", iso_time(upload.initiated)),
                ],
            )
        )
    children += [("CommonPrefixes", [("Prefix", encode_key(p, encoding))]) for p in prefixes]
    return xml_response(document("ListMultipartUploadsResult", children))
