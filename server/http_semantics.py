"""HTTP details S3 leans on: byte ranges, conditional requests, and object headers in and out."""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from urllib.parse import quote, unquote

from server import errors as s3
from server.errors import (
    InvalidArgument,
    InvalidBucketName,
    InvalidDigest,
    InvalidStorageClass,
    InvalidTag,
    KeyTooLongError,
    MetadataTooLarge,
    NotModified,
    PreconditionFailed,
)
from server.header_text import encode_rfc2047, metadata_text
from server.request_headers import RequestHeaders
from server.xml_io import http_date
from tiering.checksums import ALGORITHMS
from tiering.records import ObjectMeta, ObjectRecord
from tiering.tiers import STORAGE_CLASS_TIERS

MAX_KEY_BYTES = 1024
MAX_USER_METADATA_BYTES = 2048
SYSTEM_HEADERS = ("content-encoding", "content-disposition", "content-language", "cache-control", "expires")

# --- names ---------------------------------------------------------------------------------------

_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def validate_bucket_name(name: str) -> None:
    if not _BUCKET_RE.match(name) or ".." in name or ".-" in name or "-." in name:
        raise InvalidBucketName(BucketName=name)
    if name.startswith(("xn--", "sthree-")) or name.endswith(("-s3alias", "--ol-s3", "--x-s3")):
        raise InvalidBucketName(BucketName=name)
    try:
        ipaddress.IPv4Address(name)
    except ValueError:
        return
    raise InvalidBucketName(BucketName=name)


def validate_key(key: str) -> None:
    if len(key.encode("utf-8")) > MAX_KEY_BYTES:
        raise KeyTooLongError(Size=len(key.encode("utf-8")), MaxSizeAllowed=MAX_KEY_BYTES)


# --- numbers in headers ---------------------------------------------------------------------------


def is_number(text: str) -> bool:
    """ASCII digits only. str.isdigit() also accepts "²" and other digits int() refuses, and a
    header byte 0xB2 arrives as "²": that was a 500 instead of an S3 answer."""
    return text.isascii() and text.isdigit()


# --- byte ranges ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ByteRange:
    start: int
    end: int  # exclusive

    @property
    def length(self) -> int:
        return self.end - self.start

    def content_range(self, size: int) -> str:
        return f"bytes {self.start}-{self.end - 1}/{size}"


class RangeNotSatisfiable(Exception):
    pass


def parse_range(header: str | None, size: int) -> list[ByteRange] | None:
    """The ranges a Range header asks for, or None to send the whole object.

    A syntactically invalid header is ignored (RFC 9110: serve the full representation); a valid
    one that selects nothing raises RangeNotSatisfiable (416).
    """
    if not header:
        return None
    unit, _, spec = header.strip().partition("=")
    if unit.strip().lower() != "bytes" or not spec.strip():
        return None
    ranges: list[ByteRange] = []
    for piece in spec.split(","):
        piece = piece.strip()
        first, dash, last = piece.partition("-")
        if not dash:
            return None
        first, last = first.strip(), last.strip()
        if not first:
            if not is_number(last):
                return None
            suffix = int(last)
            if suffix == 0:
                continue
            ranges.append(ByteRange(max(0, size - suffix), size))
            continue
        if not is_number(first) or (last and not is_number(last)):
            return None
        start = int(first)
        end = int(last) + 1 if last else size
        if last and int(last) < start:
            return None
        if start >= size:
            continue
        ranges.append(ByteRange(start, min(end, size)))
    if not ranges:
        raise RangeNotSatisfiable()
    ranges = [r for r in ranges if r.length > 0]
    if not ranges:
        raise RangeNotSatisfiable()
    return ranges


# --- conditional requests --------------------------------------------------------------------------


def _etag_list(value: str) -> list[str]:
    return [tag.strip().removeprefix("W/").strip('"') for tag in value.split(",")]


def _parse_date(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        return None  # an unparseable date is ignored, as S3 does


def check_read_conditions(headers: RequestHeaders, record: ObjectRecord, *, for_copy: bool = False) -> None:
    """If-Match / If-Unmodified-Since → 412; If-None-Match / If-Modified-Since → 304 (412 on copy)."""
    prefix = "x-amz-copy-source-" if for_copy else ""
    if_match = headers.get(prefix + "if-match")
    if_none_match = headers.get(prefix + "if-none-match")
    if_modified = _parse_date(headers.get(prefix + "if-modified-since"))
    if_unmodified = _parse_date(headers.get(prefix + "if-unmodified-since"))
    mtime = int(record.last_modified)  # HTTP dates have whole seconds
    if if_match is not None:
        tags = _etag_list(if_match)
        if "*" not in tags and record.etag not in tags:
            raise PreconditionFailed(Condition=prefix + "If-Match")
    elif if_unmodified is not None and mtime > if_unmodified:
        raise PreconditionFailed(Condition=prefix + "If-Unmodified-Since")
    if if_none_match is not None:
        tags = _etag_list(if_none_match)
        if "*" in tags or record.etag in tags:
            _not_modified(for_copy, prefix + "If-None-Match", record)
    elif if_modified is not None and mtime <= if_modified:
        _not_modified(for_copy, prefix + "If-Modified-Since", record)


def write_conditions(headers: RequestHeaders) -> tuple[str | None, str | None]:
    """(If-Match, If-None-Match) of a conditional write (PutObject, CompleteMultipartUpload,
    CopyObject's destination), as S3 takes them: If-None-Match only as "*", and never both
    at once (NotImplemented otherwise, as AWS answers)."""
    if_match, if_none_match = headers.get("if-match"), headers.get("if-none-match")
    if if_none_match is not None and if_none_match.strip() != "*":
        raise s3.NotImplemented(Header="If-None-Match")
    if if_match is not None and if_none_match is not None:
        raise s3.NotImplemented(Header="If-Match")
    return if_match, if_none_match


def _not_modified(for_copy: bool, condition: str, record: ObjectRecord) -> None:
    # A copy has no "not modified" answer: its failed conditions are all 412.
    if for_copy:
        raise PreconditionFailed(Condition=condition)
    raise NotModified({"etag": f'"{record.etag}"', "last-modified": http_date(record.last_modified)})


# --- object metadata in and out -----------------------------------------------------------------------


def parse_tagging(value: str) -> dict[str, str]:
    """The URL-encoded tag set of x-amz-tagging (k1=v1&k2=v2)."""
    tags: dict[str, str] = {}
    for piece in value.split("&"):
        if not piece:
            continue
        name, _, tag_value = piece.partition("=")
        tags[unquote(name.replace("+", " "))] = unquote(tag_value.replace("+", " "))
    validate_tags(tags)
    return tags


def validate_tags(tags: dict[str, str], limit: int = 10) -> None:
    if len(tags) > limit:
        raise InvalidTag("Object tags cannot be greater than 10")
    for name, value in tags.items():
        if not name or len(name) > 128 or len(value) > 256:
            raise InvalidTag("The TagKey or TagValue you have provided is invalid")


def storage_class_from(headers: RequestHeaders) -> tuple[str, bool]:
    value = headers.get("x-amz-storage-class")
    if not value:
        return "STANDARD", False
    value = value.strip().upper()
    if value not in STORAGE_CLASS_TIERS:
        raise InvalidStorageClass(StorageClassRequested=value)
    return value, True


def without_aws_chunked(content_encoding: str) -> str | None:
    """Content-Encoding less the "aws-chunked" token (transfer framing, not the object's own
    encoding); None when nothing else is left. Any other value is kept byte for byte as sent:
    S3 returns stored headers exactly, and clients compare them."""
    tokens = content_encoding.split(",")
    kept = [token for token in tokens if token.strip().lower() != "aws-chunked"]
    if len(kept) == len(tokens):
        return content_encoding
    return ",".join(kept).strip() or None


def meta_from_headers(headers: RequestHeaders) -> ObjectMeta:
    """Everything a PUT / CreateMultipartUpload / CopyObject(REPLACE) says about the object
    (request headers, or a browser form's fields: names in lower case either way)."""
    user: dict[str, str] = {}
    size = 0
    for name, value in headers.items():
        if name.startswith("x-amz-meta-"):
            short = name[len("x-amz-meta-") :]
            value = metadata_text(value)
            user[short] = value if short not in user else f"{user[short]},{value}"
            size += len(short) + len(value.encode("utf-8"))
    if size > MAX_USER_METADATA_BYTES:
        raise MetadataTooLarge(Size=size, MaxSizeAllowed=MAX_USER_METADATA_BYTES)
    system = {name: headers[name] for name in SYSTEM_HEADERS if name in headers}
    if "content-encoding" in system:
        encoding = without_aws_chunked(system["content-encoding"])
        if encoding is None:
            del system["content-encoding"]
        else:
            system["content-encoding"] = encoding
    redirect = headers.get("x-amz-website-redirect-location")
    if redirect:
        system["x-amz-website-redirect-location"] = redirect
    storage_class, explicit = storage_class_from(headers)
    tagging = headers.get("x-amz-tagging")
    return ObjectMeta(
        content_type=headers.get("content-type") or "binary/octet-stream",
        system=system,
        user=user,
        tags=parse_tagging(tagging) if tagging else {},
        storage_class=storage_class,
        storage_class_explicit=explicit,
    )


def object_headers(record: ObjectRecord, *, checksum_mode: bool = False) -> dict[str, str]:
    """Response headers describing an object (GET and HEAD share them)."""
    meta = record.meta
    headers = {
        "etag": f'"{record.etag}"',
        "last-modified": http_date(record.last_modified),
        "content-type": meta.content_type,
        "accept-ranges": "bytes",
        "x-tierstore-tier": record.tier,
    }
    headers.update(meta.system)
    for name, value in meta.user.items():
        headers[f"x-amz-meta-{name}"] = encode_rfc2047(value)
    if meta.storage_class != "STANDARD":
        headers["x-amz-storage-class"] = meta.storage_class
    if meta.tags:
        headers["x-amz-tagging-count"] = str(len(meta.tags))
    if checksum_mode and record.checksum and record.checksum_algorithm:
        headers[f"x-amz-checksum-{record.checksum_algorithm.lower()}"] = record.checksum
        headers["x-amz-checksum-type"] = "COMPOSITE" if "-" in record.checksum else "FULL_OBJECT"
    if record.restore is not None:
        if record.restore.ongoing:
            headers["x-amz-restore"] = 'ongoing-request="true"'
        else:
            headers["x-amz-restore"] = (
                f'ongoing-request="false", expiry-date="{http_date(record.restore.expiry)}"'
            )
    return headers


RESPONSE_OVERRIDES = {
    "response-content-type": "content-type",
    "response-content-language": "content-language",
    "response-expires": "expires",
    "response-cache-control": "cache-control",
    "response-content-disposition": "content-disposition",
    "response-content-encoding": "content-encoding",
}


def apply_response_overrides(headers: dict[str, str], query: dict[str, str]) -> None:
    for param, header in RESPONSE_OVERRIDES.items():
        if param in query:
            headers[header] = query[param]


# --- digests the client declared -----------------------------------------------------------------


def content_md5(headers: RequestHeaders) -> str | None:
    """The Content-MD5 header as hex, validated (InvalidDigest if it is not a base64 MD5)."""
    value = headers.get("content-md5")
    if value is None:
        return None
    try:
        raw = base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidDigest() from None
    if len(raw) != 16:
        raise InvalidDigest()
    return raw.hex()


# Each algorithm's header, named once rather than on every PUT.
_CHECKSUM_HEADERS = tuple((algorithm, f"x-amz-checksum-{algorithm.lower()}") for algorithm in ALGORITHMS)


def requested_checksum_algorithm(headers: RequestHeaders) -> str | None:
    """The additional checksum a client asks for (header value, trailer name, or SDK hint)."""
    for algorithm, header in _CHECKSUM_HEADERS:
        if headers.get(header) is not None:
            return algorithm
    trailer = headers.get("x-amz-trailer")
    if trailer:
        for name in trailer.split(","):
            name = name.strip().lower()
            if name.startswith("x-amz-checksum-"):
                algorithm = name[len("x-amz-checksum-") :].upper()
                if algorithm in ALGORITHMS:
                    return algorithm
                raise InvalidArgument(f"Unsupported checksum trailer {name}")
    hint = headers.get("x-amz-sdk-checksum-algorithm") or headers.get("x-amz-checksum-algorithm")
    if hint:
        if hint.upper() not in ALGORITHMS:
            raise InvalidArgument("Checksum algorithm provided is unsupported.")
        return hint.upper()
    return None


def encode_key(key: str, encoding_type: str | None) -> str:
    return quote(key, safe="/") if encoding_type == "url" else key
