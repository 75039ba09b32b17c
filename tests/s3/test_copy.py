"""CopyObject and UploadPartCopy: directives, self-copy, conditions, cross-bucket, special keys."""

from __future__ import annotations

import hashlib
import os
import time
from datetime import timedelta
from pathlib import Path

import pytest

from tests.conftest import ServerProcess


def test_copy_with_copy_directive_keeps_metadata(s3, bucket) -> None:
    s3.put_object(
        Bucket=bucket,
        Key="src",
        Body=b"payload",
        ContentType="text/plain",
        Metadata={"a": "1"},
        CacheControl="no-cache",
        Tagging="t=1",
    )
    result = s3.copy_object(
        Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "src"}, Metadata={"ignored": "yes"}
    )
    assert result["CopyObjectResult"]["ETag"] == f'"{hashlib.md5(b"payload").hexdigest()}"'
    head = s3.head_object(Bucket=bucket, Key="dst")
    assert head["Metadata"] == {"a": "1"}
    assert head["ContentType"] == "text/plain"
    assert head["CacheControl"] == "no-cache"
    assert s3.get_object(Bucket=bucket, Key="dst")["Body"].read() == b"payload"
    assert s3.get_object_tagging(Bucket=bucket, Key="dst")["TagSet"] == [{"Key": "t", "Value": "1"}]


def test_copy_with_replace_directive(s3, bucket) -> None:
    s3.put_object(
        Bucket=bucket,
        Key="src",
        Body=b"payload",
        ContentType="text/plain",
        Metadata={"a": "1"},
        Tagging="t=1",
    )
    s3.copy_object(
        Bucket=bucket,
        Key="dst",
        CopySource={"Bucket": bucket, "Key": "src"},
        MetadataDirective="REPLACE",
        Metadata={"b": "2"},
        ContentType="application/json",
        TaggingDirective="REPLACE",
        Tagging="x=y",
    )
    head = s3.head_object(Bucket=bucket, Key="dst")
    assert head["Metadata"] == {"b": "2"}
    assert head["ContentType"] == "application/json"
    assert s3.get_object_tagging(Bucket=bucket, Key="dst")["TagSet"] == [{"Key": "x", "Value": "y"}]
    # The source is untouched.
    assert s3.head_object(Bucket=bucket, Key="src")["Metadata"] == {"a": "1"}


def data_files(server: ServerProcess) -> set[Path]:
    """Every file the tier backends hold (everything under the data directory but the catalog)."""
    return {
        p for root in server.data_roots() for p in root.rglob("*") if p.is_file() and "catalog" not in p.parts
    }


def test_self_copy_with_replace_changes_only_metadata(server: ServerProcess, s3, bucket) -> None:
    body = os.urandom(8 * 1024 * 1024)
    etag = s3.put_object(Bucket=bucket, Key="big", Body=body, Metadata={"v": "1"})["ETag"]
    before = s3.head_object(Bucket=bucket, Key="big")
    time.sleep(1.05)  # Last-Modified has whole seconds
    files_before = data_files(server)
    result = s3.copy_object(
        Bucket=bucket,
        Key="big",
        CopySource={"Bucket": bucket, "Key": "big"},
        MetadataDirective="REPLACE",
        Metadata={"v": "2"},
        ContentType="x/y",
    )
    # A metadata change is one catalog update: no byte of the object is written again.
    assert not data_files(server) - files_before, "the self-copy rewrote the data"
    after = s3.head_object(Bucket=bucket, Key="big")
    assert result["CopyObjectResult"]["ETag"] == etag
    assert after["ETag"] == etag
    assert after["Metadata"] == {"v": "2"}
    assert after["ContentType"] == "x/y"
    assert after["LastModified"] > before["LastModified"]
    # A real copy (the same check's control) does write new data.
    s3.copy_object(Bucket=bucket, Key="full-copy", CopySource={"Bucket": bucket, "Key": "big"})
    assert data_files(server) - files_before
    assert s3.get_object(Bucket=bucket, Key="big")["Body"].read() == body


def test_self_copy_without_change_is_invalid(s3, bucket, expect_error) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    with expect_error("InvalidRequest", 400):
        s3.copy_object(Bucket=bucket, Key="k", CopySource={"Bucket": bucket, "Key": "k"})


def test_self_copy_changing_storage_class_moves_the_data(s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"cool me", Metadata={"m": "1"})
    s3.copy_object(
        Bucket=bucket, Key="k", CopySource={"Bucket": bucket, "Key": "k"}, StorageClass="STANDARD_IA"
    )
    head = s3.head_object(Bucket=bucket, Key="k")
    assert head["StorageClass"] == "STANDARD_IA"
    assert head["ResponseMetadata"]["HTTPHeaders"]["x-tierstore-tier"] == "warm"
    assert head["Metadata"] == {"m": "1"}
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"cool me"


def test_conditional_copy(s3, bucket, expect_error) -> None:
    etag = s3.put_object(Bucket=bucket, Key="src", Body=b"x")["ETag"]
    modified = s3.head_object(Bucket=bucket, Key="src")["LastModified"]
    source = {"Bucket": bucket, "Key": "src"}
    failing = [
        {"CopySourceIfMatch": '"0123456789abcdef0123456789abcdef"'},
        {"CopySourceIfNoneMatch": etag},
        {"CopySourceIfModifiedSince": modified + timedelta(seconds=10)},
        {"CopySourceIfUnmodifiedSince": modified - timedelta(seconds=10)},
    ]
    for condition in failing:
        with expect_error("PreconditionFailed", 412):
            s3.copy_object(Bucket=bucket, Key="dst", CopySource=source, **condition)
    with expect_error("NoSuchKey", 404):
        s3.get_object(Bucket=bucket, Key="dst")
    passing = [
        {"CopySourceIfMatch": etag},
        {"CopySourceIfNoneMatch": '"0123456789abcdef0123456789abcdef"'},
        {"CopySourceIfModifiedSince": modified - timedelta(seconds=10)},
        {"CopySourceIfUnmodifiedSince": modified + timedelta(seconds=10)},
        {"CopySourceIfMatch": etag, "CopySourceIfUnmodifiedSince": modified - timedelta(seconds=10)},
    ]
    for condition in passing:
        s3.copy_object(Bucket=bucket, Key="dst", CopySource=source, **condition)
        assert s3.get_object(Bucket=bucket, Key="dst")["Body"].read() == b"x"


def test_copy_across_buckets(s3, bucket) -> None:
    other = f"{bucket}-other"
    s3.create_bucket(Bucket=other)
    try:
        s3.put_object(Bucket=bucket, Key="src", Body=b"travels", Metadata={"a": "b"})
        s3.copy_object(Bucket=other, Key="dst", CopySource={"Bucket": bucket, "Key": "src"})
        got = s3.get_object(Bucket=other, Key="dst")
        assert got["Body"].read() == b"travels"
        assert got["Metadata"] == {"a": "b"}
    finally:
        s3.delete_object(Bucket=other, Key="dst")
        s3.delete_bucket(Bucket=other)


def test_copy_errors(s3, bucket, expect_error) -> None:
    with expect_error("NoSuchKey", 404):
        s3.copy_object(Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "missing"})
    with expect_error("NoSuchBucket", 404):
        s3.copy_object(Bucket=bucket, Key="dst", CopySource={"Bucket": f"{bucket}-nope", "Key": "k"})
    s3.put_object(Bucket=bucket, Key="src", Body=b"x")
    with expect_error("NoSuchBucket", 404):
        s3.copy_object(Bucket=f"{bucket}-nope", Key="dst", CopySource={"Bucket": bucket, "Key": "src"})
    with expect_error("InvalidArgument", 400):
        s3.copy_object(
            Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "src"}, MetadataDirective="MERGE"
        )


def test_copy_of_multipart_object(s3, bucket) -> None:
    parts = [os.urandom(5 * 1024 * 1024), os.urandom(1000)]
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mp", Metadata={"m": "p"})["UploadId"]
    done = [
        {
            "PartNumber": n,
            "ETag": s3.upload_part(Bucket=bucket, Key="mp", UploadId=upload, PartNumber=n, Body=body)["ETag"],
        }
        for n, body in enumerate(parts, start=1)
    ]
    s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload, MultipartUpload={"Parts": done})
    result = s3.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "mp"})
    whole = b"".join(parts)
    # A copied multipart object becomes a single-part object: its ETag is the plain MD5.
    assert result["CopyObjectResult"]["ETag"] == f'"{hashlib.md5(whole).hexdigest()}"'
    got = s3.get_object(Bucket=bucket, Key="copy")
    assert got["Body"].read() == whole
    assert got["Metadata"] == {"m": "p"}


@pytest.mark.parametrize("key", ["sp ace/ü-😀", "plus+and%percent", "q?x=1&y", "//lead", "a:b#c"])
def test_copy_source_with_special_characters(s3, bucket, key: str) -> None:
    s3.put_object(Bucket=bucket, Key=key, Body=b"special")
    s3.copy_object(Bucket=bucket, Key=f"copy/{key}", CopySource={"Bucket": bucket, "Key": key})
    assert s3.get_object(Bucket=bucket, Key=f"copy/{key}")["Body"].read() == b"special"
    # The string form of x-amz-copy-source (what aws-cli sends) works too.
    s3.copy_object(Bucket=bucket, Key="copy2", CopySource=f"{bucket}/{key}")
    assert s3.get_object(Bucket=bucket, Key="copy2")["Body"].read() == b"special"


def test_copy_source_version_id_null(s3, bucket, expect_error) -> None:
    s3.put_object(Bucket=bucket, Key="src", Body=b"v")
    s3.copy_object(Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "src", "VersionId": "null"})
    assert s3.get_object(Bucket=bucket, Key="dst")["Body"].read() == b"v"
    with expect_error("NoSuchVersion", 404):
        s3.copy_object(
            Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "src", "VersionId": "abc"}
        )


def test_copy_to_storage_class(s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="src", Body=b"to cold", StorageClass="STANDARD_IA")
    s3.copy_object(
        Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "src"}, StorageClass="GLACIER"
    )
    head = s3.head_object(Bucket=bucket, Key="dst")
    assert head["StorageClass"] == "GLACIER"
    assert head["ResponseMetadata"]["HTTPHeaders"]["x-tierstore-tier"] == "cold"
    # Without a storage class a copy lands in STANDARD, as on AWS.
    s3.copy_object(Bucket=bucket, Key="dst2", CopySource={"Bucket": bucket, "Key": "src"})
    assert "StorageClass" not in s3.head_object(Bucket=bucket, Key="dst2")


def test_upload_part_copy_with_range(s3, bucket) -> None:
    source = os.urandom(6 * 1024 * 1024)
    s3.put_object(Bucket=bucket, Key="src", Body=source)
    upload = s3.create_multipart_upload(Bucket=bucket, Key="assembled")["UploadId"]
    first = s3.upload_part_copy(
        Bucket=bucket,
        Key="assembled",
        UploadId=upload,
        PartNumber=1,
        CopySource={"Bucket": bucket, "Key": "src"},
        CopySourceRange=f"bytes=0-{5 * 1024 * 1024 - 1}",
    )
    second = s3.upload_part_copy(
        Bucket=bucket,
        Key="assembled",
        UploadId=upload,
        PartNumber=2,
        CopySource={"Bucket": bucket, "Key": "src"},
        CopySourceRange="bytes=100-199",
    )
    assert first["CopyPartResult"]["ETag"] == f'"{hashlib.md5(source[: 5 * 1024 * 1024]).hexdigest()}"'
    assert second["CopyPartResult"]["ETag"] == f'"{hashlib.md5(source[100:200]).hexdigest()}"'
    s3.complete_multipart_upload(
        Bucket=bucket,
        Key="assembled",
        UploadId=upload,
        MultipartUpload={
            "Parts": [
                {"PartNumber": 1, "ETag": first["CopyPartResult"]["ETag"]},
                {"PartNumber": 2, "ETag": second["CopyPartResult"]["ETag"]},
            ]
        },
    )
    assert (
        s3.get_object(Bucket=bucket, Key="assembled")["Body"].read()
        == source[: 5 * 1024 * 1024] + source[100:200]
    )


def test_upload_part_copy_bad_range(s3, bucket, expect_error) -> None:
    s3.put_object(Bucket=bucket, Key="src", Body=b"0123456789")
    upload = s3.create_multipart_upload(Bucket=bucket, Key="dst")["UploadId"]
    with expect_error("InvalidRange", 416):
        s3.upload_part_copy(
            Bucket=bucket,
            Key="dst",
            UploadId=upload,
            PartNumber=1,
            CopySource={"Bucket": bucket, "Key": "src"},
            CopySourceRange="bytes=5-10",
        )
    with expect_error("InvalidArgument", 400):
        s3.upload_part_copy(
            Bucket=bucket,
            Key="dst",
            UploadId=upload,
            PartNumber=1,
            CopySource={"Bucket": bucket, "Key": "src"},
            CopySourceRange="bytes=5-",
        )
    # The whole source without a range.
    whole = s3.upload_part_copy(
        Bucket=bucket, Key="dst", UploadId=upload, PartNumber=1, CopySource={"Bucket": bucket, "Key": "src"}
    )
    assert whole["CopyPartResult"]["ETag"] == f'"{hashlib.md5(b"0123456789").hexdigest()}"'
    s3.abort_multipart_upload(Bucket=bucket, Key="dst", UploadId=upload)
