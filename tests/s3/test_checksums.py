"""Additional checksums (CRC32, CRC32C, CRC64NVME, SHA1, SHA256) and Content-MD5, through boto3.

Expected values come from zlib / hashlib and, for CRC32C and CRC64NVME, from awscrt, which
`test_reference_crcs` first checks against a bit-by-bit pure-Python CRC (too slow for MiBs).
"""

from __future__ import annotations

import base64
import hashlib
import os
import zlib

import pytest
from awscrt import checksums as crt

from tests.conftest import make_client

ALGORITHMS = ["CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256"]


def _reflected_crc(data: bytes, poly: int, width: int) -> int:
    mask = (1 << width) - 1
    crc = mask
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ poly if crc & 1 else crc >> 1
    return crc ^ mask


def raw_digest(algorithm: str, data: bytes) -> bytes:
    if algorithm == "CRC32":
        return zlib.crc32(data).to_bytes(4, "big")
    if algorithm == "CRC32C":
        return crt.crc32c(data).to_bytes(4, "big")
    if algorithm == "CRC64NVME":
        return crt.crc64nvme(data).to_bytes(8, "big")
    return hashlib.new(algorithm.lower(), data).digest()


def checksum(algorithm: str, data: bytes) -> str:
    return base64.b64encode(raw_digest(algorithm, data)).decode()


def test_reference_crcs() -> None:
    """The pure-Python CRCs match their published check values."""
    assert _reflected_crc(b"123456789", 0x82F63B78, 32) == 0xE3069283
    assert _reflected_crc(b"123456789", 0x9A6C9329AC4BC9B5, 64) == 0xAE8B14860A799888
    assert raw_digest("CRC32", b"123456789").hex() == "cbf43926"
    for data in (b"", b"123456789", os.urandom(1000)):
        assert raw_digest("CRC32C", data) == _reflected_crc(data, 0x82F63B78, 32).to_bytes(4, "big")
        assert raw_digest("CRC64NVME", data) == _reflected_crc(data, 0x9A6C9329AC4BC9B5, 64).to_bytes(
            8, "big"
        )


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_put_object_with_checksum(s3, bucket, algorithm: str) -> None:
    body = os.urandom(3000)
    expected = checksum(algorithm, body)
    put = s3.put_object(Bucket=bucket, Key="c", Body=body, ChecksumAlgorithm=algorithm)
    assert put[f"Checksum{algorithm}"] == expected
    head = s3.head_object(Bucket=bucket, Key="c", ChecksumMode="ENABLED")
    assert head[f"Checksum{algorithm}"] == expected
    assert head["ResponseMetadata"]["HTTPHeaders"]["x-amz-checksum-type"] == "FULL_OBJECT"
    got = s3.get_object(Bucket=bucket, Key="c", ChecksumMode="ENABLED")
    assert got[f"Checksum{algorithm}"] == expected
    assert got["Body"].read() == body
    # Without ChecksumMode the checksum is not sent.
    plain = s3.head_object(Bucket=bucket, Key="c")
    assert f"Checksum{algorithm}" not in plain
    listed = s3.list_objects_v2(Bucket=bucket)["Contents"][0]
    assert listed["ChecksumAlgorithm"] == [algorithm]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_put_object_with_explicit_checksum_value(s3, bucket, expect_error, algorithm: str) -> None:
    body = b"explicit checksum body"
    good = checksum(algorithm, body)
    s3.put_object(Bucket=bucket, Key="ok", Body=body, **{f"Checksum{algorithm}": good})
    assert s3.head_object(Bucket=bucket, Key="ok", ChecksumMode="ENABLED")[f"Checksum{algorithm}"] == good
    wrong = checksum(algorithm, b"something else")
    with expect_error("BadDigest", 400):
        s3.put_object(Bucket=bucket, Key="bad", Body=body, **{f"Checksum{algorithm}": wrong})
    with expect_error("NoSuchKey", 404):
        s3.get_object(Bucket=bucket, Key="bad")


def test_failed_checksum_keeps_the_old_object(s3, bucket, expect_error) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"old")
    with expect_error("BadDigest", 400):
        s3.put_object(Bucket=bucket, Key="k", Body=b"new", ChecksumSHA256=checksum("SHA256", b"other"))
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"old"


def test_range_reads_carry_no_whole_object_checksum(s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"0123456789", ChecksumAlgorithm="SHA256")
    got = s3.get_object(Bucket=bucket, Key="k", Range="bytes=0-3", ChecksumMode="ENABLED")
    assert got["Body"].read() == b"0123"
    assert "ChecksumSHA256" not in got


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_multipart_composite_checksum(s3, bucket, algorithm: str) -> None:
    parts = [os.urandom(5 * 1024 * 1024), b"last part"]
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mp", ChecksumAlgorithm=algorithm)
    assert upload["ChecksumAlgorithm"] == algorithm
    completed = []
    for number, body in enumerate(parts, start=1):
        response = s3.upload_part(
            Bucket=bucket,
            Key="mp",
            UploadId=upload["UploadId"],
            PartNumber=number,
            Body=body,
            ChecksumAlgorithm=algorithm,
        )
        assert response[f"Checksum{algorithm}"] == checksum(algorithm, body)
        completed.append(
            {
                "PartNumber": number,
                "ETag": response["ETag"],
                f"Checksum{algorithm}": response[f"Checksum{algorithm}"],
            }
        )
    listed = s3.list_parts(Bucket=bucket, Key="mp", UploadId=upload["UploadId"])
    assert [p[f"Checksum{algorithm}"] for p in listed["Parts"]] == [checksum(algorithm, b) for b in parts]
    done = s3.complete_multipart_upload(
        Bucket=bucket, Key="mp", UploadId=upload["UploadId"], MultipartUpload={"Parts": completed}
    )
    if algorithm == "CRC64NVME":  # S3 has only the full-object kind of CRC64NVME
        combined, kind = checksum(algorithm, b"".join(parts)), "FULL_OBJECT"
    else:
        combined = (
            base64.b64encode(
                raw_digest(algorithm, b"".join(raw_digest(algorithm, b) for b in parts))
            ).decode()
            + "-2"
        )
        kind = "COMPOSITE"
    assert (done[f"Checksum{algorithm}"], done["ChecksumType"]) == (combined, kind)
    head = s3.head_object(Bucket=bucket, Key="mp", ChecksumMode="ENABLED")
    assert head[f"Checksum{algorithm}"] == combined
    assert head["ResponseMetadata"]["HTTPHeaders"]["x-amz-checksum-type"] == kind
    part = s3.get_object(Bucket=bucket, Key="mp", PartNumber=2)
    assert part["Body"].read() == parts[1]


def test_upload_part_wrong_checksum(s3, bucket, expect_error) -> None:
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mp", ChecksumAlgorithm="CRC32C")["UploadId"]
    with expect_error("BadDigest", 400):
        s3.upload_part(
            Bucket=bucket,
            Key="mp",
            UploadId=upload,
            PartNumber=1,
            Body=b"part",
            ChecksumCRC32C=checksum("CRC32C", b"not the part"),
        )
    assert s3.list_parts(Bucket=bucket, Key="mp", UploadId=upload).get("Parts", []) == []
    s3.abort_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload)


@pytest.mark.parametrize("calculation", ["when_supported", "when_required"])
def test_boto3_default_checksum_settings(server, bucket, calculation: str) -> None:
    client = make_client(
        server.endpoint, request_checksum_calculation=calculation, response_checksum_validation=calculation
    )
    body = os.urandom(200_000)
    client.put_object(Bucket=bucket, Key="d", Body=body)
    got = client.get_object(Bucket=bucket, Key="d", ChecksumMode="ENABLED")
    assert got["Body"].read() == body
    if calculation == "when_supported":
        # boto3 sends a CRC32 by default: the server keeps it and answers it.
        assert got["ChecksumCRC32"] == checksum("CRC32", body)


def test_default_client_upload_file_round_trip(s3, bucket, tmp_path) -> None:
    path = tmp_path / "f.bin"
    data = os.urandom(300_000)
    path.write_bytes(data)
    s3.upload_file(str(path), bucket, "uploaded")
    out = tmp_path / "out.bin"
    s3.download_file(bucket, "uploaded", str(out))
    assert out.read_bytes() == data


# --- Content-MD5 --------------------------------------------------------------------------------


def test_content_md5_match(s3, bucket) -> None:
    body = b"md5 me"
    md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
    s3.put_object(Bucket=bucket, Key="m", Body=body, ContentMD5=md5)
    assert s3.get_object(Bucket=bucket, Key="m")["Body"].read() == body


def test_content_md5_mismatch_is_bad_digest(s3, bucket, expect_error) -> None:
    wrong = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    with expect_error("BadDigest", 400):
        s3.put_object(Bucket=bucket, Key="m", Body=b"md5 me", ContentMD5=wrong)
    with expect_error("NoSuchKey", 404):
        s3.get_object(Bucket=bucket, Key="m")


@pytest.mark.parametrize("value", ["not-base64!!", "AAAA", base64.b64encode(b"x" * 20).decode()])
def test_malformed_content_md5_is_invalid_digest(raw, bucket, error_code, value: str) -> None:
    response = raw("PUT", f"/{bucket}/m", body=b"md5 me", headers={"Content-MD5": value})
    assert response.status_code == 400
    assert error_code(response) == "InvalidDigest"


def test_content_md5_on_upload_part(s3, bucket, expect_error) -> None:
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    wrong = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    with expect_error("BadDigest", 400):
        s3.upload_part(Bucket=bucket, Key="mp", UploadId=upload, PartNumber=1, Body=b"p", ContentMD5=wrong)
    s3.abort_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload)
