"""Object and bucket tagging, canned ACLs and ACL reads, versioning answers of an unversioned bucket
(versioned ones: test_versioning.py)."""

from __future__ import annotations

import pytest

CANNED = [
    "private",
    "public-read",
    "public-read-write",
    "authenticated-read",
    "bucket-owner-read",
    "bucket-owner-full-control",
]


def tag_set(tags: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def as_dict(tag_list: list[dict[str, str]]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in tag_list}


def test_object_tagging_round_trip(s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="t", Body=b"x")
    assert s3.get_object_tagging(Bucket=bucket, Key="t")["TagSet"] == []
    tags = {"project": "alpha", "with space": "a value/with+chars", "empty": "", "ü": "😀"}
    s3.put_object_tagging(Bucket=bucket, Key="t", Tagging={"TagSet": tag_set(tags)})
    assert as_dict(s3.get_object_tagging(Bucket=bucket, Key="t")["TagSet"]) == tags
    head = s3.head_object(Bucket=bucket, Key="t")
    assert head["ResponseMetadata"]["HTTPHeaders"]["x-amz-tagging-count"] == "4"
    assert s3.get_object(Bucket=bucket, Key="t")["TagCount"] == 4
    response = s3.delete_object_tagging(Bucket=bucket, Key="t")
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert s3.get_object_tagging(Bucket=bucket, Key="t")["TagSet"] == []
    # Tagging never touches the data.
    assert s3.get_object(Bucket=bucket, Key="t")["Body"].read() == b"x"


def test_tagging_header_on_put(s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="t", Body=b"x", Tagging="a=1&b=two%20words&c=")
    assert as_dict(s3.get_object_tagging(Bucket=bucket, Key="t")["TagSet"]) == {
        "a": "1",
        "b": "two words",
        "c": "",
    }
    # Overwriting the object replaces its tags.
    s3.put_object(Bucket=bucket, Key="t", Body=b"y")
    assert s3.get_object_tagging(Bucket=bucket, Key="t")["TagSet"] == []


def test_tagging_header_on_multipart(s3, bucket) -> None:
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mp", Tagging="k=v")["UploadId"]
    etag = s3.upload_part(Bucket=bucket, Key="mp", UploadId=upload, PartNumber=1, Body=b"p")["ETag"]
    s3.complete_multipart_upload(
        Bucket=bucket, Key="mp", UploadId=upload, MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]}
    )
    assert as_dict(s3.get_object_tagging(Bucket=bucket, Key="mp")["TagSet"]) == {"k": "v"}


def test_too_many_tags(s3, bucket, expect_error) -> None:
    s3.put_object(Bucket=bucket, Key="t", Body=b"x")
    eleven = {f"k{i}": "v" for i in range(11)}
    with expect_error("InvalidTag", 400):
        s3.put_object_tagging(Bucket=bucket, Key="t", Tagging={"TagSet": tag_set(eleven)})
    with expect_error("InvalidTag", 400):
        s3.put_object(
            Bucket=bucket, Key="t2", Body=b"x", Tagging="&".join(f"{k}={v}" for k, v in eleven.items())
        )
    ten = {f"k{i}": "v" for i in range(10)}
    s3.put_object_tagging(Bucket=bucket, Key="t", Tagging={"TagSet": tag_set(ten)})
    assert as_dict(s3.get_object_tagging(Bucket=bucket, Key="t")["TagSet"]) == ten


@pytest.mark.parametrize(
    "tags",
    [
        [{"Key": "k" * 129, "Value": "v"}],
        [{"Key": "k", "Value": "v" * 257}],
        [{"Key": "dup", "Value": "1"}, {"Key": "dup", "Value": "2"}],
    ],
)
def test_invalid_tags(s3, bucket, expect_error, tags: list[dict[str, str]]) -> None:
    s3.put_object(Bucket=bucket, Key="t", Body=b"x")
    with expect_error("InvalidTag", 400):
        s3.put_object_tagging(Bucket=bucket, Key="t", Tagging={"TagSet": tags})


def test_tagging_missing_object(s3, bucket, expect_error) -> None:
    with expect_error("NoSuchKey", 404):
        s3.get_object_tagging(Bucket=bucket, Key="absent")
    with expect_error("NoSuchKey", 404):
        s3.put_object_tagging(Bucket=bucket, Key="absent", Tagging={"TagSet": []})


def test_bucket_tagging(s3, bucket, expect_error) -> None:
    with expect_error("NoSuchTagSet", 404):
        s3.get_bucket_tagging(Bucket=bucket)
    tags = {"team": "storage", "cost-center": "42"}
    s3.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": tag_set(tags)})
    assert as_dict(s3.get_bucket_tagging(Bucket=bucket)["TagSet"]) == tags
    s3.delete_bucket_tagging(Bucket=bucket)
    with expect_error("NoSuchTagSet", 404):
        s3.get_bucket_tagging(Bucket=bucket)


@pytest.mark.parametrize("acl", CANNED)
def test_canned_acls_accepted_on_put(s3, bucket, acl: str) -> None:
    # New buckets refuse ACLs (BucketOwnerEnforced, as S3's since 2023): ObjectWriter enables them.
    s3.put_bucket_ownership_controls(
        Bucket=bucket, OwnershipControls={"Rules": [{"ObjectOwnership": "ObjectWriter"}]}
    )
    s3.put_object(Bucket=bucket, Key="a", Body=b"x", ACL=acl)
    s3.put_object_acl(Bucket=bucket, Key="a", ACL=acl)
    s3.put_bucket_acl(Bucket=bucket, ACL=acl)
    assert s3.get_object(Bucket=bucket, Key="a")["Body"].read() == b"x"


def test_acls_answer_owner_full_control(s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="a", Body=b"x", ACL="private")
    owner = s3.list_buckets()["Owner"]
    for acl in (s3.get_bucket_acl(Bucket=bucket), s3.get_object_acl(Bucket=bucket, Key="a")):
        assert acl["Owner"]["ID"] == owner["ID"]
        assert len(acl["Grants"]) == 1
        grant = acl["Grants"][0]
        assert grant["Permission"] == "FULL_CONTROL"
        assert grant["Grantee"]["Type"] == "CanonicalUser"
        assert grant["Grantee"]["ID"] == owner["ID"]


def test_acl_errors(s3, bucket, expect_error, raw, error_code) -> None:
    with expect_error("NoSuchKey", 404):
        s3.get_object_acl(Bucket=bucket, Key="absent")
    s3.put_object(Bucket=bucket, Key="a", Body=b"x")
    response = raw("PUT", f"/{bucket}/a", query="acl=", headers={"x-amz-acl": "everyone-rules"})
    assert response.status_code == 400
    assert error_code(response) == "InvalidArgument"


def test_bucket_versioning_is_unconfigured(s3, bucket) -> None:
    response = s3.get_bucket_versioning(Bucket=bucket)
    assert "Status" not in response
    assert "MFADelete" not in response
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Suspended"})


def test_mfa_delete_is_not_implemented(s3, bucket, expect_error) -> None:
    with expect_error("NotImplemented", 501):
        s3.put_bucket_versioning(
            Bucket=bucket, VersioningConfiguration={"Status": "Enabled", "MFADelete": "Enabled"}
        )
    assert "Status" not in s3.get_bucket_versioning(Bucket=bucket)


def test_list_object_versions_null(s3, bucket) -> None:
    for key in ("a", "b/c", "d"):
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    versions = s3.list_object_versions(Bucket=bucket)
    assert [(v["Key"], v["VersionId"], v["IsLatest"], v["Size"]) for v in versions["Versions"]] == [
        ("a", "null", True, 1),
        ("b/c", "null", True, 3),
        ("d", "null", True, 1),
    ]
    page = s3.list_object_versions(Bucket=bucket, MaxKeys=2)
    assert page["IsTruncated"] is True
    assert (page["NextKeyMarker"], page["NextVersionIdMarker"]) == ("b/c", "null")
    rest = s3.list_object_versions(
        Bucket=bucket, KeyMarker=page["NextKeyMarker"], VersionIdMarker=page["NextVersionIdMarker"]
    )
    assert [v["Key"] for v in rest["Versions"]] == ["d"]
    assert rest["IsTruncated"] is False


def test_delete_with_version_id_null(s3, bucket, expect_error) -> None:
    s3.put_object(Bucket=bucket, Key="v", Body=b"x")
    response = s3.delete_object(Bucket=bucket, Key="v", VersionId="null")
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 204
    with expect_error("NoSuchKey", 404):
        s3.get_object(Bucket=bucket, Key="v")
    s3.put_object(Bucket=bucket, Key="w", Body=b"x")
    result = s3.delete_objects(
        Bucket=bucket,
        Delete={"Objects": [{"Key": "w", "VersionId": "null"}, {"Key": "w", "VersionId": "abc"}]},
    )
    assert [(d["Key"], d.get("VersionId")) for d in result["Deleted"]] == [("w", "null")]
    assert [(e["Key"], e["Code"]) for e in result["Errors"]] == [("w", "NoSuchVersion")]
