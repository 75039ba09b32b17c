"""Authorization as S3 has it, through real clients: user policies, bucket policies, anonymous
callers, conditions, ACLs, object ownership controls, Block Public Access and the access log."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import requests
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.conftest import REGION, ServerProcess, free_port, make_client
from tests.support import admin

AWS = str(Path(sys.executable).with_name("aws"))
_names = iter(range(1_000_000))


def user_client(server: ServerProcess, user: dict[str, Any]):
    return boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        aws_access_key_id=user["access_key"],
        aws_secret_access_key=user["secret_key"],
        region_name=REGION,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


def anonymous_client(server: ServerProcess):
    return boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        region_name=REGION,
        config=Config(
            signature_version=UNSIGNED, s3={"addressing_style": "path"}, retries={"max_attempts": 1}
        ),
    )


def denied(call: Callable[[], object], code: str = "AccessDenied", status: int = 403) -> dict[str, Any]:
    with pytest.raises(ClientError) as caught:
        call()
    error = caught.value.response
    assert (error["Error"]["Code"], error["ResponseMetadata"]["HTTPStatusCode"]) == (code, status), error
    return error


@pytest.fixture(scope="module")
def users(server: ServerProcess) -> Iterator[dict[str, dict[str, Any]]]:
    made = {
        name: admin(server.endpoint, "user", "add", f"{name}-{os.getpid()}") for name in ("trainer", "other")
    }
    yield made
    for user in made.values():
        admin(server.endpoint, "user", "remove", user["access_key"])


@pytest.fixture
def new_bucket(s3) -> Iterator[Callable[..., str]]:
    made: list[str] = []

    def create(**kwargs: Any) -> str:
        name = f"authz-{os.getpid()}-{next(_names)}"
        s3.create_bucket(Bucket=name, **kwargs)
        made.append(name)
        return name

    yield create
    for name in made:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
            for obj in page.get("Contents", []):
                s3.delete_object(Bucket=name, Key=obj["Key"])
        s3.delete_bucket(Bucket=name)


def policy(*statements: dict[str, Any]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": list(statements)})


def _tls_only(bucket: str) -> dict[str, Any]:
    """A statement refusing everything on `bucket` over plain HTTP (aws:SecureTransport false)."""
    return {
        "Sid": "TlsOnly",
        "Effect": "Deny",
        "Principal": "*",
        "Action": "s3:*",
        "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
    }


def set_user_policy(server: ServerProcess, user: dict[str, Any], document: str, tmp_path: Path) -> None:
    path = tmp_path / "policy.json"
    path.write_text(document)
    admin(server.endpoint, "user", "policy", "set", user["name"], str(path))


# --- user policies: a training job's read-only keys ------------------------------------------------


def test_training_job_reads_one_prefix_and_nothing_else(server, s3, users, new_bucket, tmp_path) -> None:
    bucket = new_bucket()
    for key in ("imagenet/train/0.tar", "imagenet/val/0.tar", "private/weights.pt"):
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    trainer = users["trainer"]
    job = user_client(server, trainer)
    denied(lambda: job.get_object(Bucket=bucket, Key="imagenet/train/0.tar"))  # nothing granted yet
    set_user_policy(
        server,
        trainer,
        policy(
            {
                "Sid": "ReadImagenet",
                "Effect": "Allow",
                "Action": "s3:GetObject",
                "Resource": f"arn:aws:s3:::{bucket}/imagenet/*",
            },
            {
                "Sid": "ListImagenet",
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": f"arn:aws:s3:::{bucket}",
                "Condition": {"StringLike": {"s3:prefix": ["imagenet/*"]}},
            },
        ),
        tmp_path,
    )
    shown = admin(server.endpoint, "user", "policy", "get", trainer["name"])
    assert shown["policy"]["Statement"][0]["Sid"] == "ReadImagenet"
    try:
        assert (
            job.get_object(Bucket=bucket, Key="imagenet/train/0.tar")["Body"].read()
            == b"imagenet/train/0.tar"
        )
        listed = job.list_objects_v2(Bucket=bucket, Prefix="imagenet/")
        assert [o["Key"] for o in listed["Contents"]] == ["imagenet/train/0.tar", "imagenet/val/0.tar"]
        denied(lambda: job.get_object(Bucket=bucket, Key="private/weights.pt"))
        denied(
            lambda: job.get_object(Bucket=bucket, Key="imagenet/absent"), "NoSuchKey", 404
        )  # it may list there
        denied(lambda: job.get_object(Bucket=bucket, Key="private/absent"))  # ... not here
        denied(lambda: job.list_objects_v2(Bucket=bucket))  # no prefix: not within imagenet/
        denied(lambda: job.list_objects_v2(Bucket=bucket, Prefix="private/"))
        denied(lambda: job.put_object(Bucket=bucket, Key="imagenet/train/1.tar", Body=b"x"))
        denied(lambda: job.delete_object(Bucket=bucket, Key="imagenet/train/0.tar"))
        denied(lambda: job.put_bucket_policy(Bucket=bucket, Policy=policy()))
        # The same keys through aws-cli.
        env = {
            **os.environ,
            "AWS_ACCESS_KEY_ID": trainer["access_key"],
            "AWS_SECRET_ACCESS_KEY": trainer["secret_key"],
            "AWS_DEFAULT_REGION": REGION,
            "AWS_CONFIG_FILE": str(tmp_path / "none"),
            "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        }

        def aws(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [AWS, "--endpoint-url", server.endpoint, *args],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )

        listed_cli = aws("s3", "ls", f"s3://{bucket}/imagenet/train/")
        assert listed_cli.returncode == 0 and "0.tar" in listed_cli.stdout, listed_cli.stderr
        copied = aws("s3", "cp", f"s3://{bucket}/imagenet/val/0.tar", str(tmp_path / "val.tar"))
        assert copied.returncode == 0, copied.stderr
        assert (tmp_path / "val.tar").read_bytes() == b"imagenet/val/0.tar"
        (tmp_path / "new.tar").write_bytes(b"new")
        refused = aws("s3", "cp", str(tmp_path / "new.tar"), f"s3://{bucket}/imagenet/new.tar")
        assert refused.returncode != 0 and "AccessDenied" in refused.stderr
        refused = aws("s3", "cp", f"s3://{bucket}/private/weights.pt", str(tmp_path / "w.pt"))
        assert refused.returncode != 0 and ("403" in refused.stderr or "Forbidden" in refused.stderr)
    finally:
        admin(server.endpoint, "user", "policy", "delete", trainer["name"])
    denied(lambda: job.get_object(Bucket=bucket, Key="imagenet/train/0.tar"))


def test_a_user_policy_with_a_principal_is_refused(server, users, tmp_path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(policy({"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "*"}))
    done = subprocess.run(
        [
            *_tierstore(),
            "admin",
            "user",
            "policy",
            "set",
            users["other"]["name"],
            str(path),
            "--endpoint",
            server.endpoint,
        ],
        env=_admin_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "MalformedPolicyDocument" in done.stderr


def _tierstore() -> list[str]:
    script = Path(sys.executable).with_name("tierstore")
    return [str(script)] if script.exists() else [sys.executable, "-m", "server.cli"]


def _admin_env() -> dict[str, str]:
    from tests.conftest import ACCESS_KEY, SECRET_KEY

    return {**os.environ, "TIERSTORE_ACCESS_KEY": ACCESS_KEY, "TIERSTORE_SECRET_KEY": SECRET_KEY}


# --- bucket policies and anonymous callers ------------------------------------------------------------


def test_public_read_policy_lets_anonymous_get(server, s3, new_bucket) -> None:
    bucket = new_bucket()
    s3.put_object(Bucket=bucket, Key="site/index.html", Body=b"<h1>hi</h1>")
    url = f"{server.endpoint}/{bucket}/site/index.html"
    before = requests.get(url, timeout=30)
    assert before.status_code == 403 and b"<Code>AccessDenied</Code>" in before.content
    denied(lambda: s3.get_bucket_policy(Bucket=bucket), "NoSuchBucketPolicy", 404)
    document = policy(
        {
            "Sid": "PublicRead",
            "Effect": "Allow",
            "Principal": "*",
            "Action": ["s3:GetObject"],
            "Resource": [f"arn:aws:s3:::{bucket}/*"],
        }
    )
    s3.put_bucket_policy(Bucket=bucket, Policy=document)
    assert s3.get_bucket_policy(Bucket=bucket)["Policy"] == document
    assert s3.get_bucket_policy_status(Bucket=bucket)["PolicyStatus"]["IsPublic"] is True
    after = requests.get(url, timeout=30)
    assert after.status_code == 200 and after.content == b"<h1>hi</h1>"
    anonymous = anonymous_client(server)
    assert anonymous.head_object(Bucket=bucket, Key="site/index.html")["ContentLength"] == 11
    denied(lambda: anonymous.list_objects_v2(Bucket=bucket))  # the policy grants reads, not listing
    denied(lambda: anonymous.put_object(Bucket=bucket, Key="site/evil.html", Body=b"x"))
    # A missing key is 403 to whoever may not list the bucket (S3 hides which keys exist), 404 to the owner.
    missing = requests.get(f"{server.endpoint}/{bucket}/absent", timeout=30)
    assert missing.status_code == 403 and b"<Code>AccessDenied</Code>" in missing.content
    denied(lambda: s3.get_object(Bucket=bucket, Key="absent"), "NoSuchKey", 404)
    s3.delete_bucket_policy(Bucket=bucket)
    assert requests.get(url, timeout=30).status_code == 403
    denied(lambda: s3.get_bucket_policy_status(Bucket=bucket), "NoSuchBucketPolicy", 404)


def test_anonymous_writes_where_a_policy_allows(server, s3, new_bucket) -> None:
    bucket = new_bucket()
    s3.put_bucket_policy(
        Bucket=bucket,
        Policy=policy(
            {
                "Sid": "DropBox",
                "Effect": "Allow",
                "Principal": "*",
                "Action": "s3:PutObject",
                "Resource": f"arn:aws:s3:::{bucket}/inbox/*",
            }
        ),
    )
    anonymous = anonymous_client(server)
    body = os.urandom(100_000)
    anonymous.put_object(Bucket=bucket, Key="inbox/upload.bin", Body=body)
    assert (
        requests.put(f"{server.endpoint}/{bucket}/inbox/raw.bin", data=b"raw bytes", timeout=30).status_code
        == 200
    )
    assert s3.get_object(Bucket=bucket, Key="inbox/upload.bin")["Body"].read() == body
    assert s3.get_object(Bucket=bucket, Key="inbox/raw.bin")["Body"].read() == b"raw bytes"
    denied(lambda: anonymous.put_object(Bucket=bucket, Key="elsewhere", Body=b"x"))
    denied(lambda: anonymous.get_object(Bucket=bucket, Key="inbox/upload.bin"))


def test_explicit_deny_beats_allow(server, s3, users, new_bucket) -> None:
    bucket = new_bucket()
    for key in ("shared/a", "secret/b"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"data")
    other = users["other"]
    s3.put_bucket_policy(
        Bucket=bucket,
        Policy=policy(
            {
                "Sid": "EveryoneReads",
                "Effect": "Allow",
                "Principal": {"AWS": "*"},
                "Action": "s3:GetObject",
                "Resource": f"arn:aws:s3:::{bucket}/*",
            },
            {
                "Sid": "NoSecrets",
                "Effect": "Deny",
                "Principal": {"AWS": f"arn:aws:iam::000000000000:user/{other['name']}"},
                "Action": "s3:*",
                "Resource": f"arn:aws:s3:::{bucket}/secret/*",
            },
        ),
    )
    client = user_client(server, other)
    assert client.get_object(Bucket=bucket, Key="shared/a")["Body"].read() == b"data"
    denied(lambda: client.get_object(Bucket=bucket, Key="secret/b"))
    trainer = user_client(server, users["trainer"])
    assert trainer.get_object(Bucket=bucket, Key="secret/b")["Body"].read() == b"data"
    assert _authz_of(server, "GetObject", bucket, 403) == "deny:bucket-policy:NoSecrets"


def test_conditions_source_ip_and_secure_transport(server, s3, users, new_bucket) -> None:
    bucket = new_bucket()
    s3.put_object(Bucket=bucket, Key="k", Body=b"v")
    url = f"{server.endpoint}/{bucket}/k"
    s3.put_bucket_policy(
        Bucket=bucket,
        Policy=policy(
            {
                "Sid": "FromTheLab",
                "Effect": "Allow",
                "Principal": "*",
                "Action": "s3:GetObject",
                "Resource": f"arn:aws:s3:::{bucket}/*",
                "Condition": {"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}},
            }
        ),
    )
    assert requests.get(url, timeout=30).status_code == 403  # we call from 127.0.0.1
    assert s3.get_bucket_policy_status(Bucket=bucket)["PolicyStatus"]["IsPublic"] is False
    s3.put_bucket_policy(
        Bucket=bucket,
        Policy=policy(
            {
                "Sid": "FromHere",
                "Effect": "Allow",
                "Principal": "*",
                "Action": "s3:GetObject",
                "Resource": f"arn:aws:s3:::{bucket}/*",
                "Condition": {"IpAddress": {"aws:SourceIp": ["127.0.0.0/8", "::1"]}},
            }
        ),
    )
    assert requests.get(url, timeout=30).status_code == 200
    # TLS only: plain HTTP is refused even to a user the policy otherwise allows.
    s3.put_bucket_policy(
        Bucket=bucket,
        Policy=policy(
            {
                "Sid": "Read",
                "Effect": "Allow",
                "Principal": {"AWS": "*"},
                "Action": "s3:GetObject",
                "Resource": f"arn:aws:s3:::{bucket}/*",
            },
            _tls_only(bucket),
        ),
    )
    mark = _log_mark(server)  # the 403 to the first policy's GET above has the same operation and status
    denied(lambda: user_client(server, users["other"]).get_object(Bucket=bucket, Key="k"))
    assert _authz_of(server, "GetObject", bucket, 403, since=mark) == "deny:bucket-policy:TlsOnly"
    # The owner may still remove the policy that locks it out (as AWS's root user may).
    s3.delete_bucket_policy(Bucket=bucket)


def test_conditions_on_object_tags(server, s3, users, new_bucket) -> None:
    bucket = new_bucket()
    s3.put_object(Bucket=bucket, Key="shared", Body=b"s", Tagging="share=yes")
    s3.put_object(Bucket=bucket, Key="kept", Body=b"k", Tagging="share=no")
    other = users["other"]
    principal = {"AWS": f"arn:aws:iam::000000000000:user/{other['name']}"}
    s3.put_bucket_policy(
        Bucket=bucket,
        Policy=policy(
            {
                "Sid": "ReadShared",
                "Effect": "Allow",
                "Principal": principal,
                "Action": "s3:GetObject",
                "Resource": f"arn:aws:s3:::{bucket}/*",
                "Condition": {"StringEquals": {"s3:ExistingObjectTag/share": "yes"}},
            },
            {
                "Sid": "WriteTagged",
                "Effect": "Allow",
                "Principal": principal,
                "Action": "s3:PutObject",
                "Resource": f"arn:aws:s3:::{bucket}/*",
                "Condition": {"StringEquals": {"s3:RequestObjectTag/team": "ml"}},
            },
        ),
    )
    client = user_client(server, other)
    assert client.get_object(Bucket=bucket, Key="shared")["Body"].read() == b"s"
    denied(lambda: client.get_object(Bucket=bucket, Key="kept"))
    client.put_object(Bucket=bucket, Key="new", Body=b"n", Tagging="team=ml")
    denied(lambda: client.put_object(Bucket=bucket, Key="new2", Body=b"n", Tagging="team=web"))
    denied(lambda: client.put_object(Bucket=bucket, Key="new3", Body=b"n"))


def test_conditions_on_auth_type_max_keys_and_acl_header(server, s3, users, new_bucket) -> None:
    bucket = new_bucket()
    s3.put_object(Bucket=bucket, Key="k", Body=b"v")
    other = users["other"]
    principal = {"AWS": f"arn:aws:iam::000000000000:user/{other['name']}"}
    s3.put_bucket_policy(
        Bucket=bucket,
        Policy=policy(
            {
                "Sid": "Use",
                "Effect": "Allow",
                "Principal": principal,
                "Action": ["s3:GetObject", "s3:ListBucket"],
                "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
            },
            {
                "Sid": "NoPresigned",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:GetObject",
                "Resource": f"arn:aws:s3:::{bucket}/*",
                "Condition": {"StringEquals": {"s3:authType": "REST-QUERY-STRING"}},
            },
            {
                "Sid": "SmallPages",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:ListBucket",
                "Resource": f"arn:aws:s3:::{bucket}",
                "Condition": {"NumericGreaterThan": {"s3:max-keys": "100"}},
            },
            {
                "Sid": "SigV4Only",
                "Effect": "Deny",
                "Principal": "*",
                "Action": "s3:*",
                "Resource": f"arn:aws:s3:::{bucket}/*",
                "Condition": {"StringNotEquals": {"s3:signatureversion": "AWS4-HMAC-SHA256"}},
            },
        ),
    )
    client = user_client(server, other)
    assert client.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v"
    url = client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"})
    presigned = requests.get(url, timeout=30)
    assert presigned.status_code == 403 and b"AccessDenied" in presigned.content
    assert client.list_objects_v2(Bucket=bucket, MaxKeys=10)["KeyCount"] == 1
    denied(lambda: client.list_objects_v2(Bucket=bucket, MaxKeys=1000))
    assert _authz_of(server, "ListObjectsV2", bucket, 403) == "deny:bucket-policy:SmallPages"
    # Administrators (the test's own keys) are not bound by bucket policies.
    assert (
        requests.get(
            s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"}), timeout=30
        ).status_code
        == 200
    )


def test_malformed_policies_are_refused_with_s3s_reasons(s3, new_bucket) -> None:
    bucket = new_bucket()
    good = {
        "Effect": "Allow",
        "Principal": "*",
        "Action": "s3:GetObject",
        "Resource": f"arn:aws:s3:::{bucket}/*",
    }
    cases = [
        ("not json", "Policies must be valid JSON and the first byte must be '{'"),
        (json.dumps({"Version": "2012-10-17"}), "Missing required field Statement"),
        (
            json.dumps({"Version": "2001-01-01", "Statement": [good]}),
            "The policy must contain a valid version string",
        ),
        (policy({**good, "Effect": "Maybe"}), "Invalid effect: Maybe"),
        (policy({k: v for k, v in good.items() if k != "Principal"}), "Missing required field Principal"),
        (policy({**good, "Action": "s3:FlyToTheMoon"}), "Policy has invalid action"),
        (policy({**good, "Resource": "arn:aws:s3:::another-bucket/*"}), "Policy has invalid resource"),
        (policy({**good, "Principal": {"AWS": "nobody-we-know"}}), "Invalid principal in policy"),
        (policy({**good, "Principle": "*"}), "Unknown field Principle"),
        (
            policy({**good, "Resource": f"arn:aws:s3:::{bucket}"}),
            "Action does not apply to any resource(s) in statement",
        ),
        (
            policy({**good, "Condition": {"StringEquals": {"aws:NoSuchKey": "x"}}}),
            "Policy has an invalid condition key",
        ),
    ]
    for document, reason in cases:
        error = denied(
            functools.partial(s3.put_bucket_policy, Bucket=bucket, Policy=document), "MalformedPolicy", 400
        )
        assert error["Error"]["Message"] == reason, (document, error["Error"]["Message"])
    denied(lambda: s3.get_bucket_policy(Bucket=bucket), "NoSuchBucketPolicy", 404)


# --- ACLs and object ownership --------------------------------------------------------------------------


def test_acl_grants_are_honoured_when_acls_are_enabled(server, s3, users, new_bucket) -> None:
    bucket = new_bucket(ObjectOwnership="ObjectWriter")
    anonymous = anonymous_client(server)
    s3.put_object(Bucket=bucket, Key="public", Body=b"for all", ACL="public-read")
    s3.put_object(Bucket=bucket, Key="private", Body=b"mine")
    assert requests.get(f"{server.endpoint}/{bucket}/public", timeout=30).content == b"for all"
    assert _authz_of(server, "GetObject", bucket, 200) == "allow:object-acl:READ"
    denied(lambda: anonymous.get_object(Bucket=bucket, Key="private"))
    grants = s3.get_object_acl(Bucket=bucket, Key="public")["Grants"]
    assert {
        "Grantee": {"Type": "Group", "URI": "http://acs.amazonaws.com/groups/global/AllUsers"},
        "Permission": "READ",
    } in grants
    # A grant to one user by canonical id (x-amz-grant-read), and read back.
    other = users["other"]
    other_id = user_client(server, other).list_buckets()["Owner"]["ID"]
    client = user_client(server, other)
    denied(lambda: client.get_object(Bucket=bucket, Key="private"))
    s3.put_object_acl(Bucket=bucket, Key="private", GrantRead=f'id="{other_id}"')
    assert client.get_object(Bucket=bucket, Key="private")["Body"].read() == b"mine"
    assert any(
        g["Grantee"].get("ID") == other_id and g["Permission"] == "READ"
        for g in s3.get_object_acl(Bucket=bucket, Key="private")["Grants"]
    )
    denied(lambda: anonymous.get_object(Bucket=bucket, Key="private"))
    # CopyObject and multipart uploads take an ACL too (a copy does not inherit its source's).
    s3.copy_object(
        Bucket=bucket, Key="copied", CopySource={"Bucket": bucket, "Key": "private"}, ACL="public-read"
    )
    s3.copy_object(Bucket=bucket, Key="copied-plain", CopySource={"Bucket": bucket, "Key": "public"})
    upload = s3.create_multipart_upload(Bucket=bucket, Key="multi", ACL="public-read")["UploadId"]
    part = s3.upload_part(Bucket=bucket, Key="multi", UploadId=upload, PartNumber=1, Body=b"parts")
    s3.complete_multipart_upload(
        Bucket=bucket,
        Key="multi",
        UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
    )
    assert requests.get(f"{server.endpoint}/{bucket}/copied", timeout=30).content == b"mine"
    assert requests.get(f"{server.endpoint}/{bucket}/multi", timeout=30).content == b"parts"
    assert requests.get(f"{server.endpoint}/{bucket}/copied-plain", timeout=30).status_code == 403
    # Bucket ACL: public-read lets anyone list; an AccessControlPolicy document sets it back.
    denied(lambda: anonymous.list_objects_v2(Bucket=bucket))
    s3.put_bucket_acl(Bucket=bucket, ACL="public-read")
    assert {o["Key"] for o in anonymous.list_objects_v2(Bucket=bucket)["Contents"]} == {
        "public",
        "private",
        "copied",
        "copied-plain",
        "multi",
    }
    owner = s3.get_bucket_acl(Bucket=bucket)["Owner"]
    s3.put_bucket_acl(
        Bucket=bucket,
        AccessControlPolicy={
            "Owner": owner,
            "Grants": [
                {"Grantee": {"Type": "CanonicalUser", "ID": owner["ID"]}, "Permission": "FULL_CONTROL"}
            ],
        },
    )
    denied(lambda: anonymous.list_objects_v2(Bucket=bucket))
    denied(
        lambda: s3.put_bucket_acl(
            Bucket=bucket,
            AccessControlPolicy={
                "Owner": owner,
                "Grants": [
                    {"Grantee": {"Type": "Group", "URI": "http://example.com/nobody"}, "Permission": "READ"}
                ],
            },
        ),
        "MalformedACLError",
        400,
    )
    denied(
        lambda: s3.put_object(
            Bucket=bucket, Key="x", Body=b"x", ACL="public-read", GrantRead=f'id="{other_id}"'
        ),
        "InvalidArgument",
        400,
    )


def test_ownership_controls_refuse_acls(server, s3, new_bucket) -> None:
    bucket = new_bucket()
    rules = s3.get_bucket_ownership_controls(Bucket=bucket)["OwnershipControls"]["Rules"]
    assert rules == [{"ObjectOwnership": "BucketOwnerEnforced"}]
    denied(
        lambda: s3.put_object(Bucket=bucket, Key="k", Body=b"x", ACL="public-read"),
        "AccessControlListNotSupported",
        400,
    )
    denied(lambda: s3.put_bucket_acl(Bucket=bucket, ACL="public-read"), "AccessControlListNotSupported", 400)
    s3.put_object(Bucket=bucket, Key="k", Body=b"x", ACL="bucket-owner-full-control")
    s3.put_object(Bucket=bucket, Key="k", Body=b"x", ACL="private")
    denied(
        lambda: s3.put_object_acl(Bucket=bucket, Key="k", ACL="public-read"),
        "AccessControlListNotSupported",
        400,
    )
    assert len(s3.get_object_acl(Bucket=bucket, Key="k")["Grants"]) == 1
    denied(
        lambda: s3.create_bucket(Bucket=f"authz-acl-{os.getpid()}", ACL="public-read"),
        "InvalidBucketAclWithObjectOwnership",
        400,
    )
    s3.put_bucket_ownership_controls(
        Bucket=bucket, OwnershipControls={"Rules": [{"ObjectOwnership": "ObjectWriter"}]}
    )
    s3.put_object(Bucket=bucket, Key="k", Body=b"x", ACL="public-read")
    assert requests.get(f"{server.endpoint}/{bucket}/k", timeout=30).status_code == 200
    s3.put_bucket_acl(Bucket=bucket, ACL="public-read")
    denied(
        lambda: s3.put_bucket_ownership_controls(
            Bucket=bucket, OwnershipControls={"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
        ),
        "InvalidBucketAclWithObjectOwnership",
        400,
    )
    s3.delete_bucket_ownership_controls(Bucket=bucket)
    denied(lambda: s3.get_bucket_ownership_controls(Bucket=bucket), "OwnershipControlsNotFoundError", 404)
    denied(
        lambda: s3.put_bucket_ownership_controls(
            Bucket=bucket, OwnershipControls={"Rules": [{"ObjectOwnership": "Whoever"}]}
        ),
        "MalformedXML",
        400,
    )


# --- Block Public Access -----------------------------------------------------------------------------


def test_block_public_access(server, s3, new_bucket) -> None:
    bucket = new_bucket(ObjectOwnership="ObjectWriter")
    denied(lambda: s3.get_public_access_block(Bucket=bucket), "NoSuchPublicAccessBlockConfiguration", 404)
    public = policy(
        {
            "Sid": "Public",
            "Effect": "Allow",
            "Principal": "*",
            "Action": "s3:GetObject",
            "Resource": f"arn:aws:s3:::{bucket}/*",
        }
    )
    s3.put_object(Bucket=bucket, Key="acl-public", Body=b"x", ACL="public-read")
    url = f"{server.endpoint}/{bucket}/acl-public"
    assert requests.get(url, timeout=30).status_code == 200
    s3.put_public_access_block(
        Bucket=bucket,
        PublicAccessBlockConfiguration={
            "BlockPublicAcls": True,
            "IgnorePublicAcls": True,
            "BlockPublicPolicy": True,
            "RestrictPublicBuckets": False,
        },
    )
    assert s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "IgnorePublicAcls": True,
        "BlockPublicPolicy": True,
        "RestrictPublicBuckets": False,
    }
    assert requests.get(url, timeout=30).status_code == 403  # the public grant is ignored now
    denied(lambda: s3.put_bucket_policy(Bucket=bucket, Policy=public))
    denied(lambda: s3.put_object(Bucket=bucket, Key="more", Body=b"x", ACL="public-read"))
    # A policy restricted to an address range is not public: allowed.
    s3.put_bucket_policy(
        Bucket=bucket,
        Policy=policy(
            {
                "Effect": "Allow",
                "Principal": "*",
                "Action": "s3:GetObject",
                "Resource": f"arn:aws:s3:::{bucket}/*",
                "Condition": {"IpAddress": {"aws:SourceIp": "192.0.2.0/24"}},
            }
        ),
    )
    # RestrictPublicBuckets: a public policy already in place serves no anonymous caller.
    s3.put_object(Bucket=bucket, Key="plain", Body=b"x")
    plain = f"{server.endpoint}/{bucket}/plain"
    s3.put_public_access_block(Bucket=bucket, PublicAccessBlockConfiguration={"RestrictPublicBuckets": True})
    s3.put_bucket_policy(Bucket=bucket, Policy=public)
    assert requests.get(plain, timeout=30).status_code == 403
    s3.delete_public_access_block(Bucket=bucket)
    assert requests.get(plain, timeout=30).status_code == 200


def _lab_only_and_tls_only(bucket: str) -> str:
    """Anonymous reads from 203.0.113.0/24 over TLS only: what a forged header would unlock."""
    return policy(
        {
            "Sid": "FromTheLab",
            "Effect": "Allow",
            "Principal": "*",
            "Action": "s3:GetObject",
            "Resource": f"arn:aws:s3:::{bucket}/*",
            "Condition": {"IpAddress": {"aws:SourceIp": "203.0.113.0/24"}},
        },
        _tls_only(bucket),
    )


FORGED = {"X-Forwarded-For": "203.0.113.7", "X-Forwarded-Proto": "https"}


def test_forwarded_headers_are_not_believed_by_default(server, s3, new_bucket) -> None:
    """A client cannot claim another address or TLS with X-Forwarded-* headers: aws:SourceIp and
    aws:SecureTransport are the connection's own unless [server] trusted_proxies names the peer
    (uvicorn believed them from 127.0.0.1, so any local process could)."""
    bucket = new_bucket()
    s3.put_object(Bucket=bucket, Key="k", Body=b"v")
    s3.put_bucket_policy(Bucket=bucket, Policy=_lab_only_and_tls_only(bucket))
    url = f"{server.endpoint}/{bucket}/k"
    assert requests.get(url, timeout=30).status_code == 403
    assert requests.get(url, headers=FORGED, timeout=30).status_code == 403


def test_forwarded_headers_from_a_trusted_proxy_name_the_client(tmp_path: Path) -> None:
    server = ServerProcess(
        tmp_path / "data", free_port(), env={"TIERSTORE_SERVER_TRUSTED_PROXIES": '["127.0.0.1/32"]'}
    ).start()
    try:
        s3 = make_client(server.endpoint)
        s3.create_bucket(Bucket="behind-proxy")
        s3.put_object(Bucket="behind-proxy", Key="k", Body=b"v")
        s3.put_bucket_policy(Bucket="behind-proxy", Policy=_lab_only_and_tls_only("behind-proxy"))
        url = f"{server.endpoint}/behind-proxy/k"
        assert requests.get(url, timeout=30).status_code == 403  # the proxy's own request
        reply = requests.get(url, headers=FORGED, timeout=30)  # the client the proxy speaks for
        assert (reply.status_code, reply.content) == (200, b"v")
    finally:
        server.stop()


def test_server_wide_block_public_access(tmp_path: Path) -> None:
    server = ServerProcess(
        tmp_path / "data", free_port(), env={"TIERSTORE_AUTHORIZATION_BLOCK_PUBLIC_ACCESS": "true"}
    ).start()
    try:
        s3 = make_client(server.endpoint)
        s3.create_bucket(Bucket="open", ObjectOwnership="ObjectWriter")
        denied(
            lambda: s3.put_bucket_policy(
                Bucket="open",
                Policy=policy(
                    {
                        "Effect": "Allow",
                        "Principal": "*",
                        "Action": "s3:GetObject",
                        "Resource": "arn:aws:s3:::open/*",
                    }
                ),
            )
        )
        denied(lambda: s3.put_object(Bucket="open", Key="k", Body=b"x", ACL="public-read"))
        s3.put_object(Bucket="open", Key="k", Body=b"x")
        assert requests.get(f"{server.endpoint}/open/k", timeout=30).status_code == 403
    finally:
        server.stop()


# --- the access log -----------------------------------------------------------------------------------------


def _log_mark(server: ServerProcess) -> int:
    """How many access-log entries the server (and its sibling gateways) hold now:
    `_authz_of(..., since=mark)` reads only newer ones (the entries are in time order)."""
    return len(server.access_log())


def _authz_of(server: ServerProcess, operation: str, bucket: str, status: int, since: int = 0) -> str | None:
    """The authz field of the latest access-log line for this operation, bucket and status (among
    the lines after `since`). The line is written once the response is sent, so it may come a
    little after the client has its answer: wait for it, rather than read an older line's."""
    deadline = time.monotonic() + 10
    while True:
        for entry in reversed(server.access_log()[since:]):  # with --cluster, every gateway's
            if (entry.get("operation"), entry.get("bucket"), entry.get("status")) == (
                operation,
                bucket,
                status,
            ):
                return entry.get("authz")
        if time.monotonic() > deadline:
            return None
        time.sleep(0.1)


def test_access_log_says_which_statement_decided(server, s3, users, new_bucket, tmp_path) -> None:
    bucket = new_bucket()
    s3.put_object(Bucket=bucket, Key="k", Body=b"v")
    assert _authz_of(server, "PutObject", bucket, 200) == "allow:admin"
    s3.put_bucket_policy(
        Bucket=bucket,
        Policy=policy(
            {
                "Sid": "AnyoneReads",
                "Effect": "Allow",
                "Principal": "*",
                "Action": "s3:GetObject",
                "Resource": f"arn:aws:s3:::{bucket}/*",
            }
        ),
    )
    requests.get(f"{server.endpoint}/{bucket}/k", timeout=30)
    assert _authz_of(server, "GetObject", bucket, 200) == "allow:bucket-policy:AnyoneReads"
    requests.put(f"{server.endpoint}/{bucket}/k", data=b"x", timeout=30)
    assert _authz_of(server, "PutObject", bucket, 403) == "deny:implicit"
    other = users["other"]
    set_user_policy(
        server,
        other,
        policy(
            {
                "Sid": "Lister",
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": f"arn:aws:s3:::{bucket}",
            }
        ),
        tmp_path,
    )
    try:
        user_client(server, other).list_objects_v2(Bucket=bucket)
        assert _authz_of(server, "ListObjectsV2", bucket, 200) == "allow:user-policy:Lister"
    finally:
        admin(server.endpoint, "user", "policy", "delete", other["name"])
    assert users["other"]["secret_key"] not in server.log()
