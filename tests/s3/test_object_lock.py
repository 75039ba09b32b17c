"""Object Lock through boto3: a bucket created with ObjectLockEnabledForBucket, default retention,
per-version GOVERNANCE / COMPLIANCE retention, legal holds, the governance bypass, and every
delete of a locked version refused (S3 API, DeleteObjects, bucket delete, lifecycle expiry)."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import hashlib
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.conftest import ServerProcess
from tests.s3.test_versioning import aws_runner, body

_names = iter(range(1_000_000))


def in_days(days: float) -> dt.datetime:
    return dt.datetime.now(dt.UTC) + dt.timedelta(days=days)


@pytest.fixture(scope="module")
def aws(server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return aws_runner(server, tmp_path_factory.mktemp("aws-home"))


@pytest.fixture
def locked_bucket(s3: Any) -> Iterator[str]:
    """A bucket created with Object Lock on; its versions are left behind (as S3 would have to)."""
    name = f"lock-{os.getpid()}-{next(_names)}"
    s3.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
    yield name
    # Release holds and bypass GOVERNANCE; COMPLIANCE versions stay (that is the point).
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=name):
        for entry in page.get("Versions", []) + page.get("DeleteMarkers", []):
            key, version = entry["Key"], entry["VersionId"]
            with contextlib.suppress(ClientError):
                s3.put_object_legal_hold(Bucket=name, Key=key, VersionId=version, LegalHold={"Status": "OFF"})
            with contextlib.suppress(ClientError):
                s3.delete_object(Bucket=name, Key=key, VersionId=version, BypassGovernanceRetention=True)


def test_a_lock_enabled_bucket_is_versioned_for_good(s3: Any, locked_bucket: str, expect_error: Any) -> None:
    assert s3.get_bucket_versioning(Bucket=locked_bucket)["Status"] == "Enabled"
    config = s3.get_object_lock_configuration(Bucket=locked_bucket)["ObjectLockConfiguration"]
    assert config == {"ObjectLockEnabled": "Enabled"}
    with expect_error("InvalidBucketState", 409):
        s3.put_bucket_versioning(Bucket=locked_bucket, VersioningConfiguration={"Status": "Suspended"})


def test_lock_apis_on_a_bucket_without_lock(s3: Any, bucket: str, expect_error: Any) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    with expect_error("ObjectLockConfigurationNotFoundError", 404):
        s3.get_object_lock_configuration(Bucket=bucket)
    with expect_error("InvalidRequest", 400):
        s3.put_object(
            Bucket=bucket,
            Key="k",
            Body=b"x",
            ObjectLockMode="GOVERNANCE",
            ObjectLockRetainUntilDate=in_days(1),
        )
    with expect_error("InvalidRequest", 400):
        s3.get_object_retention(Bucket=bucket, Key="k")
    with expect_error("InvalidBucketState", 409):  # versioning is not Enabled
        s3.put_object_lock_configuration(
            Bucket=bucket, ObjectLockConfiguration={"ObjectLockEnabled": "Enabled"}
        )


def test_default_governance_retention_and_the_bypass(s3: Any, locked_bucket: str, expect_error: Any) -> None:
    s3.put_object_lock_configuration(
        Bucket=locked_bucket,
        ObjectLockConfiguration={
            "ObjectLockEnabled": "Enabled",
            "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}},
        },
    )
    rule = s3.get_object_lock_configuration(Bucket=locked_bucket)["ObjectLockConfiguration"]["Rule"]
    assert rule == {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 1}}
    v1 = s3.put_object(Bucket=locked_bucket, Key="ckpt", Body=b"weights")["VersionId"]
    head = s3.head_object(Bucket=locked_bucket, Key="ckpt", VersionId=v1)
    assert head["ObjectLockMode"] == "GOVERNANCE" and head["ObjectLockRetainUntilDate"] > in_days(0.9)
    assert (
        s3.get_object_retention(Bucket=locked_bucket, Key="ckpt", VersionId=v1)["Retention"]["Mode"]
        == "GOVERNANCE"
    )
    with expect_error("AccessDenied", 403):
        s3.delete_object(Bucket=locked_bucket, Key="ckpt", VersionId=v1)
    result = s3.delete_objects(Bucket=locked_bucket, Delete={"Objects": [{"Key": "ckpt", "VersionId": v1}]})
    assert [e["Code"] for e in result["Errors"]] == ["AccessDenied"]
    # A DELETE without a version id only adds a marker: allowed, and the version stays.
    assert s3.delete_object(Bucket=locked_bucket, Key="ckpt")["DeleteMarker"] is True
    assert body(s3, locked_bucket, "ckpt", v1) == b"weights"
    with expect_error("BucketNotEmpty", 409):
        s3.delete_bucket(Bucket=locked_bucket)
    # GOVERNANCE yields to a caller allowed to bypass it (the root credentials here).
    s3.delete_object(Bucket=locked_bucket, Key="ckpt", VersionId=v1, BypassGovernanceRetention=True)
    with expect_error("NoSuchVersion", 404):
        s3.get_object(Bucket=locked_bucket, Key="ckpt", VersionId=v1)


def test_compliance_retention_only_extends_and_yields_to_nobody(
    s3: Any, locked_bucket: str, expect_error: Any
) -> None:
    v1 = s3.put_object(
        Bucket=locked_bucket,
        Key="ckpt",
        Body=b"w",
        ObjectLockMode="COMPLIANCE",
        ObjectLockRetainUntilDate=in_days(2),
    )["VersionId"]
    with expect_error("AccessDenied", 403):
        s3.delete_object(Bucket=locked_bucket, Key="ckpt", VersionId=v1, BypassGovernanceRetention=True)
    with expect_error("AccessDenied", 403):  # shortening
        s3.put_object_retention(
            Bucket=locked_bucket, Key="ckpt", VersionId=v1,
            Retention={"Mode": "COMPLIANCE", "RetainUntilDate": in_days(1)}, BypassGovernanceRetention=True,
        )  # fmt: skip
    with expect_error("AccessDenied", 403):  # weakening to GOVERNANCE
        s3.put_object_retention(
            Bucket=locked_bucket, Key="ckpt", VersionId=v1,
            Retention={"Mode": "GOVERNANCE", "RetainUntilDate": in_days(3)},
        )  # fmt: skip
    s3.put_object_retention(
        Bucket=locked_bucket,
        Key="ckpt",
        VersionId=v1,
        Retention={"Mode": "COMPLIANCE", "RetainUntilDate": in_days(5)},
    )
    until = s3.get_object_retention(Bucket=locked_bucket, Key="ckpt", VersionId=v1)["Retention"][
        "RetainUntilDate"
    ]
    assert until > in_days(4.9)
    assert body(s3, locked_bucket, "ckpt", v1) == b"w"


def test_legal_hold_blocks_every_delete_until_released(
    s3: Any, locked_bucket: str, expect_error: Any
) -> None:
    v1 = s3.put_object(Bucket=locked_bucket, Key="data", Body=b"d", ObjectLockLegalHoldStatus="ON")[
        "VersionId"
    ]
    assert (
        s3.get_object_legal_hold(Bucket=locked_bucket, Key="data", VersionId=v1)["LegalHold"]["Status"]
        == "ON"
    )
    assert s3.head_object(Bucket=locked_bucket, Key="data")["ObjectLockLegalHoldStatus"] == "ON"
    with expect_error("AccessDenied", 403):
        s3.delete_object(Bucket=locked_bucket, Key="data", VersionId=v1, BypassGovernanceRetention=True)
    s3.put_object_legal_hold(Bucket=locked_bucket, Key="data", VersionId=v1, LegalHold={"Status": "OFF"})
    s3.delete_object(Bucket=locked_bucket, Key="data", VersionId=v1)
    assert s3.list_object_versions(Bucket=locked_bucket).get("Versions", []) == []


def test_a_user_without_bypass_permission_cannot_bypass(
    s3: Any, locked_bucket: str, expect_error: Any, server: Any
) -> None:
    import boto3
    from botocore.config import Config

    from tests.conftest import REGION
    from tests.support import admin

    name = f"deleter{os.getpid()}x{next(_names)}"
    created = admin(server.endpoint, "user", "add", name)
    # May delete any version of the bucket, but not bypass governance retention.
    statements = [
        {"Effect": "Allow", "Action": "s3:*", "Resource": f"arn:aws:s3:::{locked_bucket}/*"},
        {"Effect": "Deny", "Action": "s3:BypassGovernanceRetention", "Resource": "*"},
    ]
    principal = {"AWS": f"arn:aws:iam::000000000000:user/{name}"}
    s3.put_bucket_policy(
        Bucket=locked_bucket,
        Policy=json.dumps(
            {"Version": "2012-10-17", "Statement": [{**st, "Principal": principal} for st in statements]}
        ),
    )
    v1 = s3.put_object(
        Bucket=locked_bucket,
        Key="k",
        Body=b"x",
        ObjectLockMode="GOVERNANCE",
        ObjectLockRetainUntilDate=in_days(1),
    )["VersionId"]
    user = boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        aws_access_key_id=created["access_key"],
        aws_secret_access_key=created["secret_key"],
        region_name=REGION,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )
    with expect_error("AccessDenied", 403):
        user.delete_object(Bucket=locked_bucket, Key="k", VersionId=v1, BypassGovernanceRetention=True)
    assert body(s3, locked_bucket, "k", v1) == b"x"
    s3.delete_bucket_policy(Bucket=locked_bucket)


def test_aws_cli_object_lock_as_the_readme_shows(aws: Any, s3: Any, tmp_path: Any, expect_error: Any) -> None:
    name = f"cli-lock-{os.getpid()}-{next(_names)}"
    aws("s3api", "create-bucket", "--bucket", name, "--object-lock-enabled-for-bucket")
    aws(
        "s3api", "put-object-lock-configuration", "--bucket", name, "--object-lock-configuration",
        '{"ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 30}}}',
    )  # fmt: skip
    source = tmp_path / "model.pt"
    source.write_bytes(b"weights")
    version = aws("s3api", "put-object", "--bucket", name, "--key", "run1/model.pt", "--body", str(source))[
        "VersionId"
    ]
    aws(
        "s3api",
        "put-object-legal-hold",
        "--bucket",
        name,
        "--key",
        "run1/model.pt",
        "--legal-hold",
        "Status=ON",
    )
    held = aws("s3api", "get-object-legal-hold", "--bucket", name, "--key", "run1/model.pt")
    assert held["LegalHold"]["Status"] == "ON"
    retention = aws("s3api", "get-object-retention", "--bucket", name, "--key", "run1/model.pt")["Retention"]
    assert retention["Mode"] == "GOVERNANCE"
    with expect_error("AccessDenied", 403):
        s3.delete_object(Bucket=name, Key="run1/model.pt", VersionId=version, BypassGovernanceRetention=True)
    aws(
        "s3api",
        "put-object-legal-hold",
        "--bucket",
        name,
        "--key",
        "run1/model.pt",
        "--legal-hold",
        "Status=OFF",
    )
    s3.delete_object(Bucket=name, Key="run1/model.pt", VersionId=version, BypassGovernanceRetention=True)
    s3.delete_bucket(Bucket=name)


def test_multipart_upload_takes_its_lock_headers_at_complete(
    s3: Any, locked_bucket: str, expect_error: Any
) -> None:
    until = in_days(1).replace(microsecond=0)
    upload = s3.create_multipart_upload(
        Bucket=locked_bucket,
        Key="big.pt",
        ObjectLockMode="GOVERNANCE",
        ObjectLockRetainUntilDate=until,
        ObjectLockLegalHoldStatus="ON",
    )["UploadId"]
    part = s3.upload_part(Bucket=locked_bucket, Key="big.pt", UploadId=upload, PartNumber=1, Body=b"p" * 1024)
    version = s3.complete_multipart_upload(
        Bucket=locked_bucket,
        Key="big.pt",
        UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
    )["VersionId"]
    retention = s3.get_object_retention(Bucket=locked_bucket, Key="big.pt", VersionId=version)["Retention"]
    assert (retention["Mode"], retention["RetainUntilDate"]) == ("GOVERNANCE", until)
    hold = s3.get_object_legal_hold(Bucket=locked_bucket, Key="big.pt", VersionId=version)["LegalHold"]
    assert hold["Status"] == "ON"
    with expect_error("AccessDenied", 403):
        s3.delete_object(Bucket=locked_bucket, Key="big.pt", VersionId=version)
    with expect_error("InvalidArgument", 400):  # a mode without a date, as for PutObject
        s3.create_multipart_upload(Bucket=locked_bucket, Key="x", ObjectLockMode="GOVERNANCE")


def test_copy_destination_takes_the_requests_lock_not_the_sources(
    s3: Any, locked_bucket: str, expect_error: Any
) -> None:
    source = s3.put_object(Bucket=locked_bucket, Key="src", Body=b"s", ObjectLockLegalHoldStatus="ON")
    until = in_days(2).replace(microsecond=0)
    copied = s3.copy_object(
        Bucket=locked_bucket,
        Key="dst",
        CopySource={"Bucket": locked_bucket, "Key": "src", "VersionId": source["VersionId"]},
        ObjectLockMode="COMPLIANCE",
        ObjectLockRetainUntilDate=until,
    )["VersionId"]
    head = s3.head_object(Bucket=locked_bucket, Key="dst", VersionId=copied)
    assert (head["ObjectLockMode"], head["ObjectLockRetainUntilDate"]) == ("COMPLIANCE", until)
    assert "ObjectLockLegalHoldStatus" not in head  # the source's hold is the source's
    with expect_error("AccessDenied", 403):
        s3.delete_object(Bucket=locked_bucket, Key="dst", VersionId=copied, BypassGovernanceRetention=True)
    plain = s3.copy_object(
        Bucket=locked_bucket, Key="plain", CopySource={"Bucket": locked_bucket, "Key": "src"}
    )
    assert "ObjectLockMode" not in s3.head_object(
        Bucket=locked_bucket, Key="plain", VersionId=plain["VersionId"]
    )


def test_delete_objects_on_a_locked_bucket_needs_content_md5(
    s3: Any, locked_bucket: str, bucket: str, server: ServerProcess
) -> None:
    import requests
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    from tests.conftest import ACCESS_KEY, REGION, SECRET_KEY

    def delete_objects(name: str, extra: dict[str, str]) -> requests.Response:
        body = b"<Delete><Object><Key>k</Key></Object></Delete>"
        url = f"{server.endpoint}/{name}?delete"
        request = AWSRequest(method="POST", url=url, data=body, headers=extra)
        S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", REGION).add_auth(request)
        return requests.post(url, data=body, headers=dict(request.headers.items()), timeout=30)

    s3.put_object(Bucket=locked_bucket, Key="k", Body=b"x")
    refused = delete_objects(locked_bucket, {})
    assert refused.status_code == 400 and b"<Code>InvalidRequest</Code>" in refused.content
    assert b"Content-MD5" in refused.content
    assert s3.head_object(Bucket=locked_bucket, Key="k")["ContentLength"] == 1
    body = b"<Delete><Object><Key>k</Key></Object></Delete>"
    md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
    assert delete_objects(locked_bucket, {"Content-MD5": md5}).status_code == 200  # adds a delete marker
    assert delete_objects(bucket, {}).status_code == 200  # without Object Lock, none is needed


def test_default_retention_must_be_a_positive_integer_within_bounds(
    s3: Any, locked_bucket: str, expect_error: Any, raw: Any, error_code: Any
) -> None:
    """Days and Years: positive integers (AWS), at most 36500 days or 100 years (ours: AWS names
    no maximum; past ours the date math overflowed and answered 500). Each refusal is a 400
    InvalidArgument and leaves the configuration as it was."""

    def put(span: dict[str, Any]) -> None:
        s3.put_object_lock_configuration(
            Bucket=locked_bucket,
            ObjectLockConfiguration={
                "ObjectLockEnabled": "Enabled",
                "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", **span}},
            },
        )

    for span in ({"Days": 0}, {"Days": -1}, {"Days": 36501}, {"Days": 10**30}, {"Years": 0}, {"Years": 101},
                 {"Years": 10**20}):  # fmt: skip
        with expect_error("InvalidArgument", 400):
            put(span)
    assert s3.get_object_lock_configuration(Bucket=locked_bucket)["ObjectLockConfiguration"] == {
        "ObjectLockEnabled": "Enabled"
    }
    for text in ("1.5", "abc", "\u00b2", "1" * 5000, " "):
        document = (
            "<ObjectLockConfiguration><ObjectLockEnabled>Enabled</ObjectLockEnabled><Rule><DefaultRetention>"
            f"<Mode>GOVERNANCE</Mode><Days>{text}</Days></DefaultRetention></Rule></ObjectLockConfiguration>"
        ).encode()
        md5 = base64.b64encode(hashlib.md5(document).digest()).decode()
        answer = raw(
            "PUT", f"/{locked_bucket}", query="object-lock", body=document, headers={"Content-MD5": md5}
        )
        assert (answer.status_code, error_code(answer)) == (400, "InvalidArgument"), text[:20]
    # The largest periods are accepted, and a version written under them gets a real date.
    now = dt.datetime.now(dt.UTC)
    for span, expected in (
        ({"Days": 36500}, dt.timedelta(days=36500)),
        ({"Years": 100}, dt.timedelta(days=36500)),
    ):
        put(span)
        rule = s3.get_object_lock_configuration(Bucket=locked_bucket)["ObjectLockConfiguration"]["Rule"]
        assert rule["DefaultRetention"] == {"Mode": "GOVERNANCE", **span}
        version = s3.put_object(Bucket=locked_bucket, Key="far", Body=b"x")["VersionId"]
        retention = s3.get_object_retention(Bucket=locked_bucket, Key="far", VersionId=version)["Retention"]
        assert abs(retention["RetainUntilDate"] - (now + expected)) < dt.timedelta(hours=1)
