"""Byte ranges (single, suffix, multi), partNumber reads, conditional GET/HEAD/PUT, response-* overrides."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

BODY = bytes(range(256)) * 4  # 1024 distinct-ish bytes


@pytest.fixture
def obj(s3, bucket) -> tuple[str, str]:
    s3.put_object(Bucket=bucket, Key="r", Body=BODY)
    return bucket, "r"


@pytest.mark.parametrize(
    ("header", "start", "end"),
    [
        ("bytes=0-0", 0, 0),
        ("bytes=10-19", 10, 19),
        ("bytes=1000-", 1000, 1023),
        ("bytes=-24", 1000, 1023),
        ("bytes=1020-5000", 1020, 1023),  # past the end: clamped
        ("bytes=-5000", 0, 1023),  # suffix longer than the object: all of it
        ("bytes=0-1023", 0, 1023),
    ],
)
def test_single_range(s3, obj, header: str, start: int, end: int) -> None:
    bucket, key = obj
    got = s3.get_object(Bucket=bucket, Key=key, Range=header)
    assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert got["ContentRange"] == f"bytes {start}-{end}/1024"
    assert got["ContentLength"] == end - start + 1
    assert got["Body"].read() == BODY[start : end + 1]


@pytest.mark.parametrize("header", ["bytes=1024-", "bytes=5000-6000", "bytes=1024-1030"])
def test_unsatisfiable_range(s3, obj, expect_error, header: str) -> None:
    bucket, key = obj
    with expect_error("InvalidRange", 416):
        s3.get_object(Bucket=bucket, Key=key, Range=header)


@pytest.mark.parametrize("header", ["bytes=0-0", "bytes=0-", "bytes=-1"])
def test_any_range_on_empty_object_is_416(s3, bucket, expect_error, header: str) -> None:
    s3.put_object(Bucket=bucket, Key="empty", Body=b"")
    with expect_error("InvalidRange", 416):
        s3.get_object(Bucket=bucket, Key="empty", Range=header)
    assert s3.get_object(Bucket=bucket, Key="empty")["Body"].read() == b""


@pytest.mark.parametrize("header", ["bytes=abc", "bytes=5-2", "items=0-1", "bytes=", "bytes=1-2-3", "0-5"])
def test_invalid_range_syntax_returns_everything(s3, obj, header: str) -> None:
    bucket, key = obj
    got = s3.get_object(Bucket=bucket, Key=key, Range=header)
    assert got["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert "ContentRange" not in got
    assert got["Body"].read() == BODY


def test_head_with_range(s3, obj) -> None:
    bucket, key = obj
    head = s3.head_object(Bucket=bucket, Key=key, Range="bytes=2-5")
    assert head["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert head["ContentLength"] == 4
    assert head["ContentRange"] == "bytes 2-5/1024"


def _parse_byteranges(content_type: str, body: bytes) -> list[tuple[str, str, bytes]]:
    match = re.fullmatch(r"multipart/byteranges; ?boundary=(\S+)", content_type)
    assert match, content_type
    boundary = match.group(1).encode()
    assert body.endswith(b"--" + boundary + b"--\r\n")
    parts = []
    for piece in body.split(b"--" + boundary)[1:-1]:
        assert piece.startswith(b"\r\n") and piece.endswith(b"\r\n")
        head, _, data = piece[2:-2].partition(b"\r\n\r\n")
        fields = dict(line.split(": ", 1) for line in head.decode().split("\r\n"))
        parts.append((fields["Content-Type"], fields["Content-Range"], data))
    return parts


def test_multi_range_is_multipart_byteranges(raw, s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="m", Body=BODY, ContentType="text/x-test")
    response = raw("GET", f"/{bucket}/m", headers={"Range": "bytes=0-9,100-109,-4"})
    assert response.status_code == 206
    parts = _parse_byteranges(response.headers["content-type"], response.content)
    assert int(response.headers["content-length"]) == len(response.content)
    assert parts == [
        ("text/x-test", "bytes 0-9/1024", BODY[0:10]),
        ("text/x-test", "bytes 100-109/1024", BODY[100:110]),
        ("text/x-test", "bytes 1020-1023/1024", BODY[1020:]),
    ]


def test_multi_range_with_one_satisfiable_range_is_plain_206(raw, s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="m", Body=BODY)
    response = raw("GET", f"/{bucket}/m", headers={"Range": "bytes=5000-6000,3-4"})
    assert response.status_code == 206
    assert response.headers["content-range"] == "bytes 3-4/1024"
    assert response.content == BODY[3:5]


# --- partNumber reads -------------------------------------------------------------------------


def test_get_by_part_number(s3, bucket, expect_error) -> None:
    part1 = os.urandom(5 * 1024 * 1024)
    part2 = b"tail of the object"
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    etags = [
        s3.upload_part(Bucket=bucket, Key="mp", UploadId=upload, PartNumber=n, Body=body)["ETag"]
        for n, body in ((1, part1), (2, part2))
    ]
    s3.complete_multipart_upload(
        Bucket=bucket,
        Key="mp",
        UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e} for n, e in zip((1, 2), etags, strict=True)]},
    )
    size = len(part1) + len(part2)
    second = s3.get_object(Bucket=bucket, Key="mp", PartNumber=2)
    assert second["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert second["PartsCount"] == 2
    assert second["ContentRange"] == f"bytes {len(part1)}-{size - 1}/{size}"
    assert second["Body"].read() == part2
    head = s3.head_object(Bucket=bucket, Key="mp", PartNumber=1)
    assert head["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert head["ContentLength"] == len(part1)
    assert head["PartsCount"] == 2
    with expect_error("InvalidPartNumber", 416):
        s3.get_object(Bucket=bucket, Key="mp", PartNumber=3)


def test_part_number_with_range_is_invalid(s3, obj, expect_error) -> None:
    bucket, key = obj
    with expect_error("InvalidRequest", 400):
        s3.get_object(Bucket=bucket, Key=key, PartNumber=1, Range="bytes=0-1")


def test_part_number_on_single_put_object(s3, obj, expect_error) -> None:
    bucket, key = obj
    got = s3.get_object(Bucket=bucket, Key=key, PartNumber=1)
    assert got["Body"].read() == BODY
    with expect_error("InvalidPartNumber", 416):
        s3.get_object(Bucket=bucket, Key=key, PartNumber=2)


@pytest.mark.parametrize("value", ["0", "-1", "abc", "10001"])
def test_bad_part_number_is_invalid_argument(raw, obj, error_code, value: str) -> None:
    bucket, key = obj
    response = raw("GET", f"/{bucket}/{key}", query=f"partNumber={value}")
    assert response.status_code == 400
    assert error_code(response) == "InvalidArgument"


# --- conditional reads --------------------------------------------------------------------------


def _status(call: Callable[[], Any]) -> int:
    try:
        return int(call()["ResponseMetadata"]["HTTPStatusCode"])
    except ClientError as exc:
        return int(exc.response["ResponseMetadata"]["HTTPStatusCode"])


@pytest.mark.parametrize("method", ["get_object", "head_object"])
def test_conditional_reads(s3, obj, method: str) -> None:
    bucket, key = obj
    call = getattr(s3, method)
    head = s3.head_object(Bucket=bucket, Key=key)
    etag, modified = head["ETag"], head["LastModified"]
    before, after = modified - timedelta(seconds=10), modified + timedelta(seconds=10)

    def status(**conditions: object) -> int:
        return _status(lambda: call(Bucket=bucket, Key=key, **conditions))

    assert status(IfMatch=etag) == 200
    assert status(IfMatch=etag.strip('"')) == 200
    assert status(IfMatch="*") == 200
    assert status(IfMatch=f'"nope", {etag}') == 200
    assert status(IfMatch='"nope"') == 412
    assert status(IfNoneMatch='"nope"') == 200
    assert status(IfNoneMatch=etag) == 304
    assert status(IfNoneMatch="*") == 304
    assert status(IfModifiedSince=before) == 200
    assert status(IfModifiedSince=modified) == 304
    assert status(IfModifiedSince=after) == 304
    assert status(IfUnmodifiedSince=after) == 200
    assert status(IfUnmodifiedSince=modified) == 200
    assert status(IfUnmodifiedSince=before) == 412
    # Precedence (RFC 9110 §13.2.2, as S3 does it): If-Match wins over If-Unmodified-Since,
    # If-None-Match wins over If-Modified-Since, and a failed If-Match is 412 before any 304.
    assert status(IfMatch=etag, IfUnmodifiedSince=before) == 200
    assert status(IfNoneMatch=etag, IfModifiedSince=before) == 304
    assert status(IfNoneMatch='"nope"', IfModifiedSince=after) == 200
    assert status(IfMatch='"nope"', IfNoneMatch=etag) == 412
    assert status(IfMatch=etag, IfNoneMatch=etag) == 304
    assert status(IfMatch='"nope"', IfModifiedSince=after) == 412


def test_not_modified_carries_etag_and_no_body(raw, obj) -> None:
    bucket, key = obj
    response = raw("GET", f"/{bucket}/{key}", headers={"If-None-Match": "*"})
    assert response.status_code == 304
    assert response.content == b""
    assert response.headers["etag"] == f'"{hashlib.md5(BODY).hexdigest()}"'
    assert "last-modified" in response.headers


def test_precondition_failed_body(raw, obj, error_code) -> None:
    bucket, key = obj
    response = raw("GET", f"/{bucket}/{key}", headers={"If-Match": '"nope"'})
    assert response.status_code == 412
    assert error_code(response) == "PreconditionFailed"


def test_unparseable_dates_are_ignored(raw, obj) -> None:
    bucket, key = obj
    for name in ("If-Modified-Since", "If-Unmodified-Since"):
        response = raw("GET", f"/{bucket}/{key}", headers={name: "not a date"})
        assert response.status_code == 200
        assert response.content == BODY


# --- response-* overrides -----------------------------------------------------------------------


def test_response_header_overrides(s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="o", Body=b"data", ContentType="text/plain")
    expires = datetime(2031, 5, 6, 7, 8, 9, tzinfo=UTC)
    got = s3.get_object(
        Bucket=bucket,
        Key="o",
        ResponseContentType="application/x-special",
        ResponseContentDisposition='attachment; filename="x.bin"',
        ResponseContentLanguage="fr",
        ResponseContentEncoding="identity",
        ResponseCacheControl="no-store",
        ResponseExpires=expires,
    )
    assert got["ContentType"] == "application/x-special"
    assert got["ContentDisposition"] == 'attachment; filename="x.bin"'
    assert got["ContentLanguage"] == "fr"
    assert got["ContentEncoding"] == "identity"
    assert got["CacheControl"] == "no-store"
    assert got["ResponseMetadata"]["HTTPHeaders"]["expires"] == "Tue, 06 May 2031 07:08:09 GMT"
    assert got["Body"].read() == b"data"
    # Overrides change one answer only, never the stored object.
    assert s3.head_object(Bucket=bucket, Key="o")["ContentType"] == "text/plain"
