"""Browser POST uploads: boto3's generate_presigned_post sent with requests, as a web page would."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any
from urllib.parse import parse_qs, urlsplit
from xml.etree import ElementTree

import boto3
import pytest
import requests
from botocore.config import Config

from tests.conftest import REGION, ServerProcess, make_client


@pytest.fixture(scope="module")
def signer(server: ServerProcess):
    """A client that signs POST policies with SigV4 (boto3's default for them is SigV2)."""
    return make_client(server.endpoint, signature_version="s3v4")


def post(
    server: ServerProcess,
    presigned: dict[str, Any],
    *,
    extra: dict[str, str] | None = None,
    drop: tuple[str, ...] = (),
    file: tuple[str, bytes] | None = ("photo.jpg", b"hello world"),
    bucket: str | None = None,
) -> requests.Response:
    fields = {k: v for k, v in presigned["fields"].items() if k not in drop}
    fields.update(extra or {})
    url = presigned["url"] if bucket is None else f"{server.endpoint}/{bucket}"
    files = {"file": file} if file is not None else {"other": ("x", b"")}
    return requests.post(url, data=fields, files=files, allow_redirects=False, timeout=60)


def quoted_md5(data: bytes) -> str:
    return f'"{hashlib.md5(data).hexdigest()}"'


def error(response: requests.Response) -> dict[str, str]:
    root = ElementTree.fromstring(response.content)
    assert root.tag == "Error", response.content
    return {child.tag: child.text or "" for child in root if child.tag not in ("RequestId", "Resource")}


def test_an_upload_lands_with_204_and_can_be_read(server, s3, signer, bucket) -> None:
    presigned = signer.generate_presigned_post(bucket, "uploads/${filename}", ExpiresIn=300)
    response = post(server, presigned, file=("photo.jpg", b"hello world"))
    assert response.status_code == 204, response.content
    assert response.headers["etag"] == quoted_md5(b"hello world")
    assert response.headers["location"] == f"{server.endpoint}/{bucket}/uploads%2Fphoto.jpg"
    got = s3.get_object(Bucket=bucket, Key="uploads/photo.jpg")
    assert got["Body"].read() == b"hello world"
    assert got["ContentType"] == "binary/octet-stream"


def test_201_answers_the_post_response_document(server, s3, signer, bucket) -> None:
    presigned = signer.generate_presigned_post(
        bucket,
        "doc.txt",
        Fields={"success_action_status": "201"},
        Conditions=[{"success_action_status": "201"}],
    )
    response = post(server, presigned, file=("doc.txt", b"body"))
    assert response.status_code == 201, response.content
    etag = quoted_md5(b"body")
    assert (
        response.content
        == (
            '<?xml version="1.0" encoding="UTF-8"?>\n<PostResponse>'
            f"<Location>{server.endpoint}/{bucket}/doc.txt</Location><Bucket>{bucket}</Bucket>"
            f"<Key>doc.txt</Key><ETag>{etag}</ETag></PostResponse>"
        ).encode()
    )
    assert response.headers["etag"] == etag


def test_200_and_redirect(server, s3, signer, bucket) -> None:
    presigned = signer.generate_presigned_post(
        bucket, "a", Fields={"success_action_status": "200"}, Conditions=[{"success_action_status": "200"}]
    )
    response = post(server, presigned)
    assert (response.status_code, response.content) == (200, b"")
    target = "http://127.0.0.1:9/done?from=form"
    presigned = signer.generate_presigned_post(
        bucket,
        "dir/b c",
        Fields={"success_action_redirect": target},
        Conditions=[["starts-with", "$success_action_redirect", "http://127.0.0.1"]],
    )
    response = post(server, presigned, file=("x", b"redirected"))
    assert response.status_code == 303, response.content
    location = response.headers["location"]
    assert location.startswith(target + "&bucket=")
    assert "key=dir%2Fb+c" in location
    query = parse_qs(urlsplit(location).query)
    assert query == {
        "from": ["form"],
        "bucket": [bucket],
        "key": ["dir/b c"],
        "etag": [quoted_md5(b"redirected")],
    }
    assert s3.get_object(Bucket=bucket, Key="dir/b c")["Body"].read() == b"redirected"


def test_fields_become_the_objects_metadata(server, s3, signer, bucket) -> None:
    fields = {
        "Content-Type": "text/plain",
        "x-amz-meta-color": "blue",
        "Cache-Control": "max-age=60",
        "acl": "private",
        "tagging": "<Tagging><TagSet><Tag><Key>k</Key><Value>v</Value></Tag></TagSet></Tagging>",
    }
    conditions: list[Any] = [
        ["starts-with", "$Content-Type", "text/"],
        {"x-amz-meta-color": "blue"},
        ["eq", "$cache-control", "max-age=60"],
        {"acl": "private"},
        ["starts-with", "$tagging", ""],
    ]
    presigned = signer.generate_presigned_post(bucket, "meta", Fields=fields, Conditions=conditions)
    assert post(server, presigned).status_code == 204
    head = s3.head_object(Bucket=bucket, Key="meta")
    assert (head["ContentType"], head["Metadata"], head["CacheControl"]) == (
        "text/plain",
        {"color": "blue"},
        "max-age=60",
    )
    assert s3.get_object_tagging(Bucket=bucket, Key="meta")["TagSet"] == [{"Key": "k", "Value": "v"}]


def failed(condition: list[Any]) -> str:
    return "Invalid according to Policy: Policy Condition failed: " + json.dumps(condition)


@pytest.mark.parametrize(
    ("fields", "conditions", "extra", "drop", "message"),
    [
        (
            {"Content-Type": "text/plain"},
            [["eq", "$Content-Type", "text/plain"]],
            {"Content-Type": "text/html"},
            (),
            failed(["eq", "$Content-Type", "text/plain"]),
        ),
        (
            {"Content-Type": "text/plain"},
            [{"Content-Type": "text/plain"}],
            {"Content-Type": "TEXT/PLAIN"},
            (),
            failed(["eq", "$Content-Type", "text/plain"]),
        ),
        (
            {},
            [["starts-with", "$x-amz-meta-tag", "ok-"]],
            {"x-amz-meta-tag": "bad"},
            (),
            failed(["starts-with", "$x-amz-meta-tag", "ok-"]),
        ),
        (
            {"x-amz-meta-tag": "ok-1"},
            [["starts-with", "$x-amz-meta-tag", ""]],
            {},
            ("x-amz-meta-tag",),
            failed(["starts-with", "$x-amz-meta-tag", ""]),
        ),
        ({}, [], {"key": "elsewhere"}, (), failed(["eq", "$key", "k"])),
        (
            {},
            [],
            {"x-amz-meta-extra": "1"},
            (),
            "Invalid according to Policy: Extra input fields: x-amz-meta-extra",
        ),
        ({}, [["eq", "Content-Type", "a"]], {"Content-Type": "a"}, (), failed(["eq", "Content-Type", "a"])),
        (
            {},
            [["content-length-range", "test", "10"]],
            {},
            (),
            failed(["content-length-range", "test", "10"]),
        ),
    ],
)
def test_each_violated_condition_is_refused(
    server, s3, signer, bucket, fields, conditions, extra, drop, message
) -> None:
    presigned = signer.generate_presigned_post(bucket, "k", Fields=fields, Conditions=conditions)
    response = post(server, presigned, extra=extra, drop=drop)
    assert (response.status_code, error(response)) == (403, {"Code": "AccessDenied", "Message": message})


def test_a_policy_for_another_bucket_is_refused(server, s3, signer, bucket) -> None:
    presigned = signer.generate_presigned_post(bucket + "-other", "k")
    response = post(server, presigned, bucket=bucket)
    assert response.status_code == 403
    assert error(response)["Message"] == failed(["eq", "$bucket", bucket + "-other"])


def test_an_expired_policy_is_refused(server, s3, signer, bucket) -> None:
    presigned = signer.generate_presigned_post(bucket, "k", ExpiresIn=-5)
    response = post(server, presigned)
    assert (response.status_code, error(response)) == (
        403,
        {"Code": "AccessDenied", "Message": "Invalid according to Policy: Policy expired."},
    )


@pytest.mark.parametrize(
    ("size", "status", "fields"),
    [
        (
            4,
            400,
            {
                "Code": "EntityTooSmall",
                "Message": "Your proposed upload is smaller than the minimum allowed size",
                "ProposedSize": "4",
                "MinSizeAllowed": "5",
            },
        ),
        (5, 204, None),
        (10, 204, None),
        (
            11,
            400,
            {
                "Code": "EntityTooLarge",
                "Message": "Your proposed upload exceeds the maximum allowed size",
                "ProposedSize": "11",
                "MaxSizeAllowed": "10",
            },
        ),
        (
            3 * 1024 * 1024,
            400,
            {
                "Code": "EntityTooLarge",
                "Message": "Your proposed upload exceeds the maximum allowed size",
                "ProposedSize": str(3 * 1024 * 1024),
                "MaxSizeAllowed": "10",
            },
        ),
    ],
)
def test_content_length_range_bounds_are_inclusive(server, s3, signer, bucket, size, status, fields) -> None:
    presigned = signer.generate_presigned_post(bucket, "sized", Conditions=[["content-length-range", 5, 10]])
    response = post(server, presigned, file=("f", b"x" * size))
    assert response.status_code == status, response.content
    if fields:
        assert error(response) == fields
        with pytest.raises(s3.exceptions.ClientError):
            s3.head_object(Bucket=bucket, Key="sized")
    else:
        assert s3.head_object(Bucket=bucket, Key="sized")["ContentLength"] == size


def test_a_large_file_streams_in(server, s3, signer, bucket) -> None:
    data = bytes(range(256)) * (32 * 1024 + 7)  # ~8 MiB
    presigned = signer.generate_presigned_post(
        bucket, "big", Conditions=[["content-length-range", 0, 64 * 1024 * 1024]]
    )
    response = post(server, presigned, file=("big.bin", data))
    assert response.status_code == 204, response.content
    assert response.headers["etag"] == quoted_md5(data)
    assert s3.get_object(Bucket=bucket, Key="big")["Body"].read() == data


def test_checksum_fields_are_verified(server, s3, signer, bucket) -> None:
    good = base64.b64encode(hashlib.sha256(b"hello world").digest()).decode()

    def conditions() -> list[Any]:  # a fresh list each time: botocore appends to the one it is given
        return [["starts-with", "$x-amz-checksum-sha256", ""]]

    presigned = signer.generate_presigned_post(
        bucket, "sum", Fields={"x-amz-checksum-sha256": good}, Conditions=conditions()
    )
    assert post(server, presigned).status_code == 204
    assert s3.head_object(Bucket=bucket, Key="sum", ChecksumMode="ENABLED")["ChecksumSHA256"] == good
    bad = base64.b64encode(hashlib.sha256(b"other").digest()).decode()
    presigned = signer.generate_presigned_post(
        bucket, "sum2", Fields={"x-amz-checksum-sha256": bad}, Conditions=conditions()
    )
    response = post(server, presigned)
    assert (response.status_code, error(response)["Code"]) == (400, "BadDigest")


def test_bad_forms_get_s3s_errors(server, s3, signer, bucket) -> None:
    presigned = signer.generate_presigned_post(bucket, "k")
    response = post(server, presigned, extra={"x-amz-signature": "0" * 64})
    body = error(response)
    assert (response.status_code, body["Code"], body["StringToSign"]) == (
        403,
        "SignatureDoesNotMatch",
        presigned["fields"]["policy"],
    )
    response = post(server, presigned, drop=("x-amz-signature",))
    assert (response.status_code, error(response)) == (
        400,
        {
            "Code": "InvalidArgument",
            "Message": "Bucket POST must contain a field named 'X-Amz-Signature'.  If it is specified, please check "
            "the order of the fields.",
            "ArgumentName": "X-Amz-Signature",
            "ArgumentValue": "",
        },
    )
    response = post(server, presigned, drop=("key",))
    assert (response.status_code, error(response)["ArgumentName"]) == (400, "key")
    response = post(server, presigned, file=None)
    assert (response.status_code, error(response)["Message"]) == (
        400,
        "POST requires exactly one file upload per request.",
    )
    response = requests.post(
        presigned["url"],
        data=b"key=k",
        timeout=30,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert (response.status_code, error(response)) == (
        412,
        {
            "Code": "PreconditionFailed",
            "Message": "At least one of the pre-conditions you specified did not hold",
            "Condition": "Bucket POST must be of the enclosure-type multipart/form-data",
        },
    )
    response = post(server, presigned, drop=tuple(presigned["fields"]) + ("policy",), extra={"key": "k"})
    assert (response.status_code, error(response)["Code"]) == (
        403,
        "AccessDenied",
    )  # anonymous, private bucket
    presigned_bad_policy = dict(presigned, fields={**presigned["fields"], "policy": "not base64!"})
    response = post(server, presigned_bad_policy)
    assert (response.status_code, error(response)["Code"]) == (403, "SignatureDoesNotMatch")


def test_an_unknown_access_key_is_refused(server, s3, signer, bucket) -> None:
    presigned = signer.generate_presigned_post(bucket, "k")
    credential = presigned["fields"]["x-amz-credential"]
    response = post(
        server, presigned, extra={"x-amz-credential": "AKIDONTKNOWYOU/" + credential.split("/", 1)[1]}
    )
    assert (response.status_code, error(response)) == (
        403,
        {
            "Code": "InvalidAccessKeyId",
            "Message": "The AWS Access Key Id you provided does not exist in our records.",
            "AWSAccessKeyId": "AKIDONTKNOWYOU",
        },
    )


def test_sigv2_policies_are_accepted_too(server, s3, bucket) -> None:
    presigned = s3.generate_presigned_post(bucket, "v2/${filename}")  # boto3 signs POST policies with SigV2
    assert "signature" in presigned["fields"] and "x-amz-signature" not in presigned["fields"]
    assert post(server, presigned, file=("f.txt", b"two")).status_code == 204
    assert s3.get_object(Bucket=bucket, Key="v2/f.txt")["Body"].read() == b"two"
    response = post(server, presigned, extra={"signature": "AAAA"})
    assert (response.status_code, error(response)["Code"]) == (403, "SignatureDoesNotMatch")


@pytest.mark.parametrize(
    ("field", "value", "status", "code"),
    [
        ("acl", "public-read", 400, "AccessControlListNotSupported"),
        ("acl", "no-such-acl", 400, "InvalidArgument"),
        ("x-amz-server-side-encryption", "AES512", 400, "InvalidArgument"),
        ("x-amz-storage-class", "FAKE", 400, "InvalidStorageClass"),
    ],
)
def test_unsupported_or_invalid_fields(server, s3, signer, bucket, field, value, status, code) -> None:
    presigned = signer.generate_presigned_post(
        bucket, "k", Fields={field: value}, Conditions=[{field: value}]
    )
    response = post(server, presigned)
    assert (response.status_code, error(response)["Code"]) == (status, code)


def test_the_signer_must_be_allowed_to_write_the_bucket(server, s3, bucket) -> None:
    from tests.ops.test_bucket_privacy import add_user

    access_key, secret_key = add_user(server, "poster")
    user = boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        region_name=REGION,
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )
    response = post(server, user.generate_presigned_post(bucket, "k"))  # the administrator's bucket
    assert (response.status_code, error(response)["Code"]) == (403, "AccessDenied")
    own = bucket + "-poster"
    user.create_bucket(Bucket=own)
    try:
        assert post(server, user.generate_presigned_post(own, "k")).status_code == 204
        user.delete_object(Bucket=own, Key="k")
    finally:
        user.delete_bucket(Bucket=own)


def test_an_anonymous_form_writes_only_where_a_policy_lets_everyone_write(server, s3, bucket) -> None:
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "drop-box",
                "Effect": "Allow",
                "Principal": "*",
                "Action": "s3:PutObject",
                "Resource": f"arn:aws:s3:::{bucket}/drop/*",
            }
        ],
    }
    s3.put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy))
    url = f"{server.endpoint}/{bucket}"
    response = requests.post(
        url,
        data={"key": "drop/${filename}"},
        files={"file": ("a.txt", b"anonymous")},
        timeout=60,
        allow_redirects=False,
    )
    assert response.status_code == 204, response.content
    assert s3.get_object(Bucket=bucket, Key="drop/a.txt")["Body"].read() == b"anonymous"
    response = requests.post(
        url, data={"key": "elsewhere/a.txt"}, files={"file": ("a.txt", b"no")}, timeout=60
    )
    assert (response.status_code, error(response)["Code"]) == (403, "AccessDenied")
    s3.delete_bucket_policy(Bucket=bucket)
    response = requests.post(url, data={"key": "drop/b.txt"}, files={"file": ("b.txt", b"no")}, timeout=60)
    assert (response.status_code, error(response)["Code"]) == (403, "AccessDenied")


def test_a_form_asking_for_encryption_is_stored_encrypted(server, s3, signer, bucket) -> None:
    fields = {"x-amz-server-side-encryption": "AES256"}
    presigned = signer.generate_presigned_post(bucket, "sealed", Fields=fields, Conditions=[fields])
    response = post(server, presigned, file=("f.bin", b"secret form body"))
    assert response.status_code == 204, response.content
    assert response.headers["x-amz-server-side-encryption"] == "AES256"
    got = s3.get_object(Bucket=bucket, Key="sealed")
    assert (got["ServerSideEncryption"], got["Body"].read()) == ("AES256", b"secret form body")
