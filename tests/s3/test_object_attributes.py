"""GetObjectAttributes: every attribute, ObjectParts paged by MaxParts / PartNumberMarker with
per-part sizes and checksums, and S3's errors for the x-amz-object-attributes header."""

from __future__ import annotations

import base64
import os
import zlib

from tests.s3.conftest import xml_error_code

MIB = 1024 * 1024
ALL = ["ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"]


def crc32(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def test_object_parts_are_paged_with_sizes_and_checksums(s3, bucket) -> None:
    parts = [os.urandom(5 * MIB), os.urandom(5 * MIB), b"the last part"]
    upload = s3.create_multipart_upload(
        Bucket=bucket, Key="mp", ChecksumAlgorithm="CRC32", StorageClass="STANDARD_IA"
    )["UploadId"]
    done = [
        {
            "PartNumber": n,
            "ETag": s3.upload_part(
                Bucket=bucket, Key="mp", UploadId=upload, PartNumber=n, Body=body, ChecksumAlgorithm="CRC32"
            )["ETag"],
            "ChecksumCRC32": crc32(body),
        }
        for n, body in enumerate(parts, start=1)
    ]
    etag = s3.complete_multipart_upload(
        Bucket=bucket, Key="mp", UploadId=upload, MultipartUpload={"Parts": done}
    )["ETag"]
    first = s3.get_object_attributes(Bucket=bucket, Key="mp", ObjectAttributes=ALL, MaxParts=2)
    assert first["ETag"] == etag.strip('"')
    assert first["ObjectSize"] == sum(len(p) for p in parts)
    assert first["StorageClass"] == "STANDARD_IA"
    assert first["Checksum"]["ChecksumType"] == "COMPOSITE"
    assert "ChecksumCRC32" in first["Checksum"]
    page = first["ObjectParts"]
    assert page["TotalPartsCount"] == 3
    assert page["MaxParts"] == 2
    assert page["IsTruncated"] is True
    assert page["NextPartNumberMarker"] == 2
    assert [(p["PartNumber"], p["Size"], p["ChecksumCRC32"]) for p in page["Parts"]] == [
        (1, 5 * MIB, crc32(parts[0])),
        (2, 5 * MIB, crc32(parts[1])),
    ]
    rest = s3.get_object_attributes(
        Bucket=bucket, Key="mp", ObjectAttributes=["ObjectParts"], MaxParts=2, PartNumberMarker=2
    )["ObjectParts"]
    assert rest["IsTruncated"] is False
    assert rest["PartNumberMarker"] == 2
    assert [(p["PartNumber"], p["Size"]) for p in rest["Parts"]] == [(3, len(parts[2]))]
    # Only what was asked for comes back.
    only = s3.get_object_attributes(Bucket=bucket, Key="mp", ObjectAttributes=["ObjectSize"])
    assert "ETag" not in only and "ObjectParts" not in only and only["ObjectSize"] == first["ObjectSize"]


def test_parts_without_checksums_still_list_their_sizes(s3, bucket) -> None:
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    bodies = [os.urandom(5 * MIB), b"tail"]
    done = [
        {
            "PartNumber": n,
            "ETag": s3.upload_part(Bucket=bucket, Key="mp", UploadId=upload, PartNumber=n, Body=body)["ETag"],
        }
        for n, body in enumerate(bodies, start=1)
    ]
    s3.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload, MultipartUpload={"Parts": done})
    got = s3.get_object_attributes(Bucket=bucket, Key="mp", ObjectAttributes=["ObjectParts"])["ObjectParts"]
    assert got["TotalPartsCount"] == 2 and got["IsTruncated"] is False and got["MaxParts"] == 1000
    assert [(p["PartNumber"], p["Size"]) for p in got["Parts"]] == [(1, 5 * MIB), (2, 4)]
    assert all("ChecksumCRC32" not in p for p in got["Parts"])


def test_single_put_object_attributes(s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="one", Body=b"hello", ChecksumAlgorithm="SHA256")
    got = s3.get_object_attributes(Bucket=bucket, Key="one", ObjectAttributes=ALL)
    assert got["ObjectSize"] == 5 and got["StorageClass"] == "STANDARD"
    assert got["Checksum"]["ChecksumType"] == "FULL_OBJECT" and "ChecksumSHA256" in got["Checksum"]
    assert "ObjectParts" not in got  # not a multipart object


def test_object_attributes_header_errors(raw, s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="one", Body=b"hello")
    missing = raw("GET", f"/{bucket}/one", query="attributes")
    assert missing.status_code == 400 and xml_error_code(missing) == "InvalidRequest"
    empty = raw("GET", f"/{bucket}/one", query="attributes", headers={"x-amz-object-attributes": ",,"})
    assert empty.status_code == 400 and xml_error_code(empty) == "InvalidRequest"
    bad = raw("GET", f"/{bucket}/one", query="attributes", headers={"x-amz-object-attributes": "ETag,Dummy"})
    assert bad.status_code == 400 and xml_error_code(bad) == "InvalidArgument"
    assert b"<ArgumentValue>Dummy</ArgumentValue>" in bad.content
    # S3 ignores a paging header that is not a number.
    fine = raw(
        "GET",
        f"/{bucket}/one",
        query="attributes",
        headers={"x-amz-object-attributes": "ETag, ObjectSize", "x-amz-max-parts": "lots"},
    )
    assert fine.status_code == 200 and b"<ObjectSize>5</ObjectSize>" in fine.content
