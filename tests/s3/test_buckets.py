"""Bucket operations over real boto3: create (names, regions), head, list, location, delete."""

from __future__ import annotations

import os
from itertools import count

import pytest
from botocore.exceptions import ClientError

_names = count()


def unique(prefix: str = "bkt") -> str:
    return f"{prefix}-{os.getpid()}-{next(_names)}"


@pytest.mark.parametrize(
    "name",
    [
        "ab",  # too short
        "a" * 64,  # too long
        "UpperCase",
        "192.168.5.4",  # formatted like an IP address
        "double..dot",
        "-leading-dash",
        "trailing-dash-",
        "under_score",
        "dot-.dash",
        "xn--prefixed",
    ],
)
def test_create_bucket_rejects_invalid_names(s3, expect_error, name: str) -> None:
    with expect_error("InvalidBucketName", 400):
        s3.create_bucket(Bucket=name)


@pytest.mark.parametrize("name", ["abc", "a" * 63, "with.dots.ok", "0-digits-9", "a-b.c-d"])
def test_create_bucket_accepts_valid_names(s3, name: str) -> None:
    s3.create_bucket(Bucket=name)
    try:
        assert s3.head_bucket(Bucket=name)["ResponseMetadata"]["HTTPStatusCode"] == 200
    finally:
        s3.delete_bucket(Bucket=name)


def test_create_existing_bucket_is_already_owned(s3, bucket, expect_error) -> None:
    with expect_error("BucketAlreadyOwnedByYou", 409):
        s3.create_bucket(Bucket=bucket)


def test_head_bucket(s3, bucket) -> None:
    response = s3.head_bucket(Bucket=bucket)
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert response["ResponseMetadata"]["HTTPHeaders"]["x-amz-bucket-region"] == "us-east-1"


def test_head_missing_bucket_is_404(s3) -> None:
    with pytest.raises(ClientError) as caught:
        s3.head_bucket(Bucket=unique("missing"))
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    assert caught.value.response["Error"]["Code"] in ("404", "NoSuchBucket")


def test_list_buckets_includes_new_bucket(s3, bucket) -> None:
    listed = s3.list_buckets()
    names = [b["Name"] for b in listed["Buckets"]]
    assert bucket in names
    assert names == sorted(names)
    assert listed["Owner"]["ID"]
    entry = next(b for b in listed["Buckets"] if b["Name"] == bucket)
    assert entry["CreationDate"].year >= 2024


def test_bucket_location_us_east_1_is_empty(s3, bucket) -> None:
    assert s3.get_bucket_location(Bucket=bucket)["LocationConstraint"] is None


def test_location_constraint_is_kept(s3) -> None:
    name = unique("eu")
    s3.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    try:
        assert s3.get_bucket_location(Bucket=name)["LocationConstraint"] == "eu-west-1"
        headers = s3.head_bucket(Bucket=name)["ResponseMetadata"]["HTTPHeaders"]
        assert headers["x-amz-bucket-region"] == "eu-west-1"
    finally:
        s3.delete_bucket(Bucket=name)


def test_create_bucket_with_canned_acl(s3) -> None:
    name = unique("acl")
    s3.create_bucket(Bucket=name, ACL="private")
    try:
        grants = s3.get_bucket_acl(Bucket=name)["Grants"]
        assert [g["Permission"] for g in grants] == ["FULL_CONTROL"]
    finally:
        s3.delete_bucket(Bucket=name)


def test_delete_bucket_not_empty(s3, bucket, expect_error) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    with expect_error("BucketNotEmpty", 409):
        s3.delete_bucket(Bucket=bucket)
    s3.delete_object(Bucket=bucket, Key="k")


def test_delete_bucket_then_it_is_gone(s3, expect_error) -> None:
    name = unique("gone")
    s3.create_bucket(Bucket=name)
    response = s3.delete_bucket(Bucket=name)
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 204
    with expect_error("NoSuchBucket", 404):
        s3.delete_bucket(Bucket=name)
    with expect_error("NoSuchBucket", 404):
        s3.list_objects_v2(Bucket=name)
    assert name not in [b["Name"] for b in s3.list_buckets()["Buckets"]]


def test_delete_bucket_drops_unfinished_uploads(s3) -> None:
    name = unique("mpu")
    s3.create_bucket(Bucket=name)
    s3.create_multipart_upload(Bucket=name, Key="k")
    s3.delete_bucket(Bucket=name)
    s3.create_bucket(Bucket=name)
    try:
        assert s3.list_multipart_uploads(Bucket=name).get("Uploads", []) == []
    finally:
        s3.delete_bucket(Bucket=name)


def test_invalid_location_constraint(s3, expect_error) -> None:
    name = unique("badloc")
    with expect_error("InvalidLocationConstraint", 400):
        s3.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": "Not A Region!"})
    assert name not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
