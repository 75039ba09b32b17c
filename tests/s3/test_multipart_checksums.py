"""Multipart checksum types: FULL_OBJECT (a CRC of the whole object) and COMPOSITE, through boto3.

The full-object value is checked against a CRC computed over the concatenated bytes (see
test_checksums.raw_digest), not against the server's own way of combining the part CRCs.
"""

from __future__ import annotations

import os

import pytest

from tests.s3.test_checksums import checksum

MIB = 1024 * 1024
PARTS = [os.urandom(5 * MIB), b"the last part"]
CRCS = ["CRC32", "CRC32C", "CRC64NVME"]


def _upload_parts(s3, bucket: str, key: str, upload: str, algorithm: str) -> list[dict[str, object]]:
    done = []
    for number, body in enumerate(PARTS, start=1):
        response = s3.upload_part(
            Bucket=bucket, Key=key, UploadId=upload, PartNumber=number, Body=body, ChecksumAlgorithm=algorithm
        )
        done.append(
            {
                "PartNumber": number,
                "ETag": response["ETag"],
                f"Checksum{algorithm}": response[f"Checksum{algorithm}"],
            }
        )
    return done


@pytest.mark.parametrize("algorithm", CRCS)
def test_full_object_crc(s3, bucket, algorithm: str) -> None:
    created = s3.create_multipart_upload(
        Bucket=bucket, Key="full", ChecksumAlgorithm=algorithm, ChecksumType="FULL_OBJECT"
    )
    assert (created["ChecksumAlgorithm"], created["ChecksumType"]) == (algorithm, "FULL_OBJECT")
    upload = created["UploadId"]
    done = _upload_parts(s3, bucket, "full", upload, algorithm)
    listed = s3.list_parts(Bucket=bucket, Key="full", UploadId=upload)
    assert (listed["ChecksumAlgorithm"], listed["ChecksumType"]) == (algorithm, "FULL_OBJECT")
    whole = checksum(algorithm, b"".join(PARTS))
    result = s3.complete_multipart_upload(
        Bucket=bucket,
        Key="full",
        UploadId=upload,
        MultipartUpload={"Parts": done},
        ChecksumType="FULL_OBJECT",
        **{f"Checksum{algorithm}": whole},
    )
    assert (result[f"Checksum{algorithm}"], result["ChecksumType"]) == (whole, "FULL_OBJECT")
    head = s3.head_object(Bucket=bucket, Key="full", ChecksumMode="ENABLED")
    assert (head[f"Checksum{algorithm}"], head["ChecksumType"]) == (whole, "FULL_OBJECT")
    attributes = s3.get_object_attributes(Bucket=bucket, Key="full", ObjectAttributes=["Checksum"])
    assert attributes["Checksum"] == {f"Checksum{algorithm}": whole, "ChecksumType": "FULL_OBJECT"}
    assert s3.get_object(Bucket=bucket, Key="full")["Body"].read() == b"".join(PARTS)


def test_crc64nvme_is_full_object_by_default(s3, bucket) -> None:
    created = s3.create_multipart_upload(Bucket=bucket, Key="nvme", ChecksumAlgorithm="CRC64NVME")
    assert created["ChecksumType"] == "FULL_OBJECT"
    done = _upload_parts(s3, bucket, "nvme", created["UploadId"], "CRC64NVME")
    result = s3.complete_multipart_upload(
        Bucket=bucket, Key="nvme", UploadId=created["UploadId"], MultipartUpload={"Parts": done}
    )
    assert (result["ChecksumCRC64NVME"], result["ChecksumType"]) == (
        checksum("CRC64NVME", b"".join(PARTS)),
        "FULL_OBJECT",
    )


@pytest.mark.parametrize("algorithm", ["CRC32", "SHA256"])
def test_composite_by_default(s3, bucket, algorithm: str) -> None:
    created = s3.create_multipart_upload(Bucket=bucket, Key="comp", ChecksumAlgorithm=algorithm)
    assert created["ChecksumType"] == "COMPOSITE"
    done = _upload_parts(s3, bucket, "comp", created["UploadId"], algorithm)
    assert (
        s3.list_parts(Bucket=bucket, Key="comp", UploadId=created["UploadId"])["ChecksumType"] == "COMPOSITE"
    )
    result = s3.complete_multipart_upload(
        Bucket=bucket, Key="comp", UploadId=created["UploadId"], MultipartUpload={"Parts": done}
    )
    assert result["ChecksumType"] == "COMPOSITE"
    assert result[f"Checksum{algorithm}"].endswith("-2")
    attributes = s3.get_object_attributes(Bucket=bucket, Key="comp", ObjectAttributes=["Checksum"])
    # GetObjectAttributes gives the composite value without its "-<parts>" suffix.
    assert attributes["Checksum"] == {
        f"Checksum{algorithm}": result[f"Checksum{algorithm}"][:-2],
        "ChecksumType": "COMPOSITE",
    }


@pytest.mark.parametrize("algorithm", CRCS)
def test_wrong_full_object_checksum_is_bad_digest(s3, bucket, expect_error, algorithm: str) -> None:
    upload = s3.create_multipart_upload(
        Bucket=bucket, Key="bad", ChecksumAlgorithm=algorithm, ChecksumType="FULL_OBJECT"
    )["UploadId"]
    done = _upload_parts(s3, bucket, "bad", upload, algorithm)
    with expect_error("BadDigest", 400):
        s3.complete_multipart_upload(
            Bucket=bucket,
            Key="bad",
            UploadId=upload,
            MultipartUpload={"Parts": done},
            ChecksumType="FULL_OBJECT",
            **{f"Checksum{algorithm}": checksum(algorithm, b"other bytes")},
        )
    # Nothing was made, and the upload is still there to complete with the right value.
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    s3.complete_multipart_upload(
        Bucket=bucket,
        Key="bad",
        UploadId=upload,
        MultipartUpload={"Parts": done},
        ChecksumType="FULL_OBJECT",
        **{f"Checksum{algorithm}": checksum(algorithm, b"".join(PARTS))},
    )


@pytest.mark.parametrize(
    ("algorithm", "kind"), [("SHA1", "FULL_OBJECT"), ("SHA256", "FULL_OBJECT"), ("CRC64NVME", "COMPOSITE")]
)
def test_checksum_type_the_algorithm_lacks_is_refused(
    s3, bucket, expect_error, algorithm: str, kind: str
) -> None:
    with expect_error("InvalidRequest", 400):
        s3.create_multipart_upload(Bucket=bucket, Key="no", ChecksumAlgorithm=algorithm, ChecksumType=kind)
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_checksum_type_without_algorithm_is_refused(s3, bucket, expect_error) -> None:
    with expect_error("InvalidRequest", 400):
        s3.create_multipart_upload(Bucket=bucket, Key="no", ChecksumType="FULL_OBJECT")


def test_part_of_another_algorithm_is_refused(s3, bucket, expect_error) -> None:
    upload = s3.create_multipart_upload(
        Bucket=bucket, Key="mix", ChecksumAlgorithm="CRC32C", ChecksumType="FULL_OBJECT"
    )["UploadId"]
    with expect_error("InvalidRequest", 400):
        s3.upload_part(
            Bucket=bucket, Key="mix", UploadId=upload, PartNumber=1, Body=b"x", ChecksumAlgorithm="CRC32"
        )
    assert s3.list_parts(Bucket=bucket, Key="mix", UploadId=upload).get("Parts", []) == []


@pytest.mark.parametrize(
    ("created", "completed"), [("COMPOSITE", "FULL_OBJECT"), ("FULL_OBJECT", "COMPOSITE")]
)
def test_complete_with_another_checksum_type_is_refused(
    s3, bucket, expect_error, created: str, completed: str
) -> None:
    upload = s3.create_multipart_upload(
        Bucket=bucket, Key="kind", ChecksumAlgorithm="CRC32", ChecksumType=created
    )["UploadId"]
    done = _upload_parts(s3, bucket, "kind", upload, "CRC32")
    with expect_error("InvalidRequest", 400):
        s3.complete_multipart_upload(
            Bucket=bucket,
            Key="kind",
            UploadId=upload,
            MultipartUpload={"Parts": done},
            ChecksumType=completed,
        )
    result = s3.complete_multipart_upload(
        Bucket=bucket, Key="kind", UploadId=upload, MultipartUpload={"Parts": done}, ChecksumType=created
    )
    assert result["ChecksumType"] == created
