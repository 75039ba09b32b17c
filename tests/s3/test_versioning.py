"""Bucket versioning as S3 does it, through boto3 and the aws command line: states, version ids on
every write, reads / deletes / copies / tags / ACLs by version id, delete markers, the null
version, ListObjectVersions paging, DeleteObjects with version ids."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests
from botocore.exceptions import ClientError

from tests.conftest import ACCESS_KEY, REGION, SECRET_KEY, ServerProcess

AWS = str(Path(sys.executable).with_name("aws"))
_names = iter(range(1_000_000))


def empty_versioned(s3: Any, name: str) -> None:
    """Delete every version and marker of a bucket, then the bucket."""
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=name):
        for entry in page.get("Versions", []) + page.get("DeleteMarkers", []):
            s3.delete_object(Bucket=name, Key=entry["Key"], VersionId=entry["VersionId"])
    s3.delete_bucket(Bucket=name)


@pytest.fixture
def vbucket(s3: Any) -> Iterator[str]:
    """A fresh bucket with versioning Enabled, emptied of every version afterwards."""
    name = f"ver-{os.getpid()}-{next(_names)}"
    s3.create_bucket(Bucket=name)
    s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    yield name
    empty_versioned(s3, name)


def body(s3: Any, bucket: str, key: str, version: str | None = None) -> bytes:
    extra = {"VersionId": version} if version else {}
    return s3.get_object(Bucket=bucket, Key=key, **extra)["Body"].read()


def test_states_and_their_answers(s3: Any, vbucket: str, expect_error: Any) -> None:
    assert s3.get_bucket_versioning(Bucket=vbucket)["Status"] == "Enabled"
    s3.put_bucket_versioning(Bucket=vbucket, VersioningConfiguration={"Status": "Suspended"})
    assert s3.get_bucket_versioning(Bucket=vbucket)["Status"] == "Suspended"
    with expect_error("MalformedXML", 400):
        s3.put_bucket_versioning(Bucket=vbucket, VersioningConfiguration={"Status": "On"})
    with expect_error("NotImplemented", 501):
        s3.put_bucket_versioning(
            Bucket=vbucket, VersioningConfiguration={"Status": "Enabled", "MFADelete": "Enabled"}
        )
    assert s3.get_bucket_versioning(Bucket=vbucket)["Status"] == "Suspended"


def test_every_write_gets_a_version_and_old_ones_stay_readable(s3: Any, vbucket: str) -> None:
    v1 = s3.put_object(Bucket=vbucket, Key="ckpt", Body=b"one")["VersionId"]
    v2 = s3.put_object(Bucket=vbucket, Key="ckpt", Body=b"two")["VersionId"]
    assert v1 != v2 and "null" not in (v1, v2)
    upload = s3.create_multipart_upload(Bucket=vbucket, Key="ckpt")["UploadId"]
    part = s3.upload_part(Bucket=vbucket, Key="ckpt", UploadId=upload, PartNumber=1, Body=b"three")
    v3 = s3.complete_multipart_upload(
        Bucket=vbucket,
        Key="ckpt",
        UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
    )["VersionId"]
    copied = s3.copy_object(
        Bucket=vbucket, Key="ckpt", CopySource={"Bucket": vbucket, "Key": "ckpt", "VersionId": v1},
        MetadataDirective="REPLACE",
    )  # fmt: skip
    v4 = copied["VersionId"]
    assert copied["CopySourceVersionId"] == v1
    assert len({v1, v2, v3, v4}) == 4
    assert body(s3, vbucket, "ckpt") == b"one"  # the copy of v1 is current
    assert [body(s3, vbucket, "ckpt", v) for v in (v1, v2, v3, v4)] == [b"one", b"two", b"three", b"one"]
    head = s3.head_object(Bucket=vbucket, Key="ckpt", VersionId=v2)
    assert head["VersionId"] == v2 and head["ContentLength"] == 3
    assert s3.get_object(Bucket=vbucket, Key="ckpt")["VersionId"] == v4
    listed = s3.list_object_versions(Bucket=vbucket)["Versions"]
    assert [(v["VersionId"], v["IsLatest"]) for v in listed] == [
        (v4, True),
        (v3, False),
        (v2, False),
        (v1, False),
    ]
    # ListObjectsV2 shows the key once.
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=vbucket)["Contents"]] == ["ckpt"]


def test_concurrent_writes_of_one_key_each_get_a_version(s3: Any, vbucket: str) -> None:
    # Many clients overwrite one key of a versioned bucket at once (a checkpoint written by every
    # rank): each PUT is acknowledged with its own version, every version stays readable, and the
    # newest acknowledged one is current. On PostgreSQL the writes conflict on the key's versions
    # and must be retried, never answered with a 500.
    bodies = [f"rank {n}".encode() * (n + 1) for n in range(48)]
    with ThreadPoolExecutor(16) as pool:
        versions = list(
            pool.map(lambda b: s3.put_object(Bucket=vbucket, Key="ckpt", Body=b)["VersionId"], bodies)
        )
    assert len(set(versions)) == len(bodies)
    listed = s3.list_object_versions(Bucket=vbucket, Prefix="ckpt")["Versions"]
    assert sorted(v["VersionId"] for v in listed) == sorted(versions)
    assert [v["IsLatest"] for v in listed].count(True) == 1
    for version, expected in zip(versions, bodies, strict=True):
        assert body(s3, vbucket, "ckpt", version) == expected
    latest = next(v["VersionId"] for v in listed if v["IsLatest"])
    assert s3.get_object(Bucket=vbucket, Key="ckpt")["VersionId"] == latest == listed[0]["VersionId"]


def test_concurrent_writes_and_deletes_of_one_key_lose_nothing(s3: Any, vbucket: str) -> None:
    # Overwrites and deletes (delete markers) of one versioned key at once: every request is
    # answered with its own version id, and the versions listed are exactly those.
    def write_or_delete(n: int) -> tuple[str, bool]:
        if n % 3 == 2:
            answer = s3.delete_object(Bucket=vbucket, Key="k")
            assert answer["DeleteMarker"] is True
            return answer["VersionId"], True
        return s3.put_object(Bucket=vbucket, Key="k", Body=b"%d" % n)["VersionId"], False

    with ThreadPoolExecutor(16) as pool:
        done = list(pool.map(write_or_delete, range(48)))
    listed = s3.list_object_versions(Bucket=vbucket, Prefix="k")
    versions = {v["VersionId"] for v in listed.get("Versions", [])}
    markers = {m["VersionId"] for m in listed.get("DeleteMarkers", [])}
    assert versions == {v for v, marker in done if not marker}
    assert markers == {v for v, marker in done if marker}
    latest = [e for e in listed.get("Versions", []) + listed.get("DeleteMarkers", []) if e["IsLatest"]]
    assert len(latest) == 1


def test_post_object_returns_a_version_id(s3: Any, vbucket: str, server: ServerProcess) -> None:
    post = s3.generate_presigned_post(vbucket, "posted")
    response = requests.post(post["url"], data=post["fields"], files={"file": b"posted"}, timeout=30)
    assert response.status_code == 204, response.text
    version = response.headers["x-amz-version-id"]
    assert body(s3, vbucket, "posted", version) == b"posted"


def test_delete_markers(s3: Any, vbucket: str, expect_error: Any) -> None:
    v1 = s3.put_object(Bucket=vbucket, Key="k", Body=b"data")["VersionId"]
    deleted = s3.delete_object(Bucket=vbucket, Key="k")
    assert deleted["DeleteMarker"] is True
    marker = deleted["VersionId"]
    with pytest.raises(ClientError) as caught:
        s3.get_object(Bucket=vbucket, Key="k")
    headers = caught.value.response["ResponseMetadata"]["HTTPHeaders"]
    assert caught.value.response["Error"]["Code"] == "NoSuchKey"
    assert (headers["x-amz-delete-marker"], headers["x-amz-version-id"]) == ("true", marker)
    with pytest.raises(ClientError) as caught:
        s3.head_object(Bucket=vbucket, Key="k")
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    with expect_error("MethodNotAllowed", 405):
        s3.get_object(Bucket=vbucket, Key="k", VersionId=marker)
    assert body(s3, vbucket, "k", v1) == b"data"
    assert s3.list_objects_v2(Bucket=vbucket).get("Contents", []) == []
    listing = s3.list_object_versions(Bucket=vbucket)
    assert [(m["VersionId"], m["IsLatest"]) for m in listing["DeleteMarkers"]] == [(marker, True)]
    assert [(v["VersionId"], v["IsLatest"]) for v in listing["Versions"]] == [(v1, False)]
    # Deleting the marker brings the object back.
    removed = s3.delete_object(Bucket=vbucket, Key="k", VersionId=marker)
    assert removed["DeleteMarker"] is True and removed["VersionId"] == marker
    assert body(s3, vbucket, "k") == b"data"
    # Deleting a version by id removes it for good; the previous one becomes current.
    v2 = s3.put_object(Bucket=vbucket, Key="k", Body=b"newer")["VersionId"]
    assert s3.delete_object(Bucket=vbucket, Key="k", VersionId=v2)["VersionId"] == v2
    assert body(s3, vbucket, "k") == b"data"
    with expect_error("NoSuchVersion", 404):
        s3.get_object(Bucket=vbucket, Key="k", VersionId=v2)
    with expect_error("InvalidArgument", 400):
        s3.delete_object(Bucket=vbucket, Key="k", VersionId="not a version")


def test_a_versioned_bucket_with_versions_is_not_empty(s3: Any, vbucket: str, expect_error: Any) -> None:
    s3.put_object(Bucket=vbucket, Key="k", Body=b"data")
    s3.delete_object(Bucket=vbucket, Key="k")
    with expect_error("BucketNotEmpty", 409):
        s3.delete_bucket(Bucket=vbucket)


def test_suspended_writes_the_null_version(s3: Any, vbucket: str) -> None:
    v1 = s3.put_object(Bucket=vbucket, Key="k", Body=b"v1")["VersionId"]
    s3.put_bucket_versioning(Bucket=vbucket, VersioningConfiguration={"Status": "Suspended"})
    s3.put_object(Bucket=vbucket, Key="k", Body=b"n1")
    s3.put_object(Bucket=vbucket, Key="k", Body=b"n2")  # replaces the null version
    versions = s3.list_object_versions(Bucket=vbucket)["Versions"]
    assert [(v["VersionId"], v["IsLatest"]) for v in versions] == [("null", True), (v1, False)]
    assert body(s3, vbucket, "k", "null") == b"n2"
    deleted = s3.delete_object(Bucket=vbucket, Key="k")  # the null version goes behind a null marker
    assert deleted["DeleteMarker"] is True and deleted["VersionId"] == "null"
    listing = s3.list_object_versions(Bucket=vbucket)
    assert [(m["VersionId"], m["IsLatest"]) for m in listing["DeleteMarkers"]] == [("null", True)]
    assert [v["VersionId"] for v in listing["Versions"]] == [v1]


def test_tags_and_acls_by_version(s3: Any, vbucket: str) -> None:
    v1 = s3.put_object(Bucket=vbucket, Key="k", Body=b"1", Tagging="gen=one")["VersionId"]
    v2 = s3.put_object(Bucket=vbucket, Key="k", Body=b"2", Tagging="gen=two")["VersionId"]
    assert s3.get_object_tagging(Bucket=vbucket, Key="k", VersionId=v1)["TagSet"] == [
        {"Key": "gen", "Value": "one"}
    ]
    answer = s3.put_object_tagging(
        Bucket=vbucket, Key="k", VersionId=v1, Tagging={"TagSet": [{"Key": "gen", "Value": "old"}]}
    )
    assert answer["VersionId"] == v1
    assert s3.get_object_tagging(Bucket=vbucket, Key="k", VersionId=v1)["TagSet"] == [
        {"Key": "gen", "Value": "old"}
    ]
    current = s3.get_object_tagging(Bucket=vbucket, Key="k")
    assert current["TagSet"] == [{"Key": "gen", "Value": "two"}] and current["VersionId"] == v2
    # New buckets refuse ACLs (BucketOwnerEnforced): ObjectWriter enables them.
    s3.put_bucket_ownership_controls(
        Bucket=vbucket, OwnershipControls={"Rules": [{"ObjectOwnership": "ObjectWriter"}]}
    )
    s3.put_object_acl(Bucket=vbucket, Key="k", VersionId=v1, ACL="authenticated-read")
    grants = s3.get_object_acl(Bucket=vbucket, Key="k", VersionId=v1)["Grants"]
    assert any(g["Grantee"].get("URI", "").endswith("AuthenticatedUsers") for g in grants)
    current = s3.get_object_acl(Bucket=vbucket, Key="k")["Grants"]
    assert not any(g["Grantee"].get("URI", "").endswith("AuthenticatedUsers") for g in current)
    attributes = s3.get_object_attributes(
        Bucket=vbucket, Key="k", VersionId=v1, ObjectAttributes=["ObjectSize"]
    )
    assert attributes["ObjectSize"] == 1 and attributes["VersionId"] == v1


def test_list_object_versions_pages_prefixes_and_delimiters(s3: Any, vbucket: str) -> None:
    expected: list[tuple[str, str]] = []
    for key in ["a", "dir/x", "dir/y", "z"]:
        ids = [s3.put_object(Bucket=vbucket, Key=key, Body=b"%d" % n)["VersionId"] for n in range(3)]
        expected += [(key, v) for v in reversed(ids)]
    marker = s3.delete_object(Bucket=vbucket, Key="z")["VersionId"]
    expected.insert(expected.index(("z", expected[-3][1])), ("z", marker))
    seen: list[tuple[str, str]] = []
    for page in s3.get_paginator("list_object_versions").paginate(
        Bucket=vbucket, PaginationConfig={"PageSize": 2}
    ):
        entries = page.get("Versions", []) + page.get("DeleteMarkers", [])
        # Within a page the two lists are each in order; merge them back by listing order.
        order = {pair: i for i, pair in enumerate(expected)}
        seen += sorted(((e["Key"], e["VersionId"]) for e in entries), key=order.__getitem__)
    assert seen == expected
    grouped = s3.list_object_versions(Bucket=vbucket, Delimiter="/")
    assert [p["Prefix"] for p in grouped["CommonPrefixes"]] == ["dir/"]
    assert {v["Key"] for v in grouped["Versions"]} == {"a", "z"}
    under = s3.list_object_versions(Bucket=vbucket, Prefix="dir/", MaxKeys=4)
    assert [v["Key"] for v in under["Versions"]] == ["dir/x"] * 3 + ["dir/y"]
    assert under["IsTruncated"] is True and under["NextKeyMarker"] == "dir/y"
    rest = s3.list_object_versions(
        Bucket=vbucket,
        Prefix="dir/",
        KeyMarker=under["NextKeyMarker"],
        VersionIdMarker=under["NextVersionIdMarker"],
    )
    assert [v["Key"] for v in rest["Versions"]] == ["dir/y"] * 2 and rest["IsTruncated"] is False


def test_delete_objects_with_version_ids(s3: Any, vbucket: str) -> None:
    v1 = s3.put_object(Bucket=vbucket, Key="a", Body=b"1")["VersionId"]
    v2 = s3.put_object(Bucket=vbucket, Key="a", Body=b"2")["VersionId"]
    s3.put_object(Bucket=vbucket, Key="b", Body=b"b")
    result = s3.delete_objects(
        Bucket=vbucket,
        Delete={
            "Objects": [{"Key": "a", "VersionId": v2}, {"Key": "b"}, {"Key": "c", "VersionId": "bad id"}]
        },
    )
    deleted = {d["Key"]: d for d in result["Deleted"]}
    assert deleted["a"]["VersionId"] == v2 and "DeleteMarker" not in deleted["a"]
    assert deleted["b"]["DeleteMarker"] is True and deleted["b"]["DeleteMarkerVersionId"]
    assert [(e["Key"], e["Code"]) for e in result["Errors"]] == [("c", "NoSuchVersion")]
    assert body(s3, vbucket, "a") == b"1" and s3.head_object(Bucket=vbucket, Key="a")["VersionId"] == v1
    marker = deleted["b"]["DeleteMarkerVersionId"]
    again = s3.delete_objects(Bucket=vbucket, Delete={"Objects": [{"Key": "b", "VersionId": marker}]})
    assert again["Deleted"][0]["DeleteMarker"] is True
    assert body(s3, vbucket, "b") == b"b"


def test_a_self_copy_in_a_versioned_bucket_is_a_new_version(s3: Any, vbucket: str) -> None:
    v1 = s3.put_object(Bucket=vbucket, Key="k", Body=b"data", Metadata={"a": "1"})["VersionId"]
    copied = s3.copy_object(
        Bucket=vbucket, Key="k", CopySource={"Bucket": vbucket, "Key": "k"},
        Metadata={"a": "2"}, MetadataDirective="REPLACE",
    )  # fmt: skip
    assert copied["VersionId"] != v1
    assert s3.head_object(Bucket=vbucket, Key="k", VersionId=v1)["Metadata"] == {"a": "1"}
    assert s3.head_object(Bucket=vbucket, Key="k")["Metadata"] == {"a": "2"}
    # Deleting the old version leaves the new one's data alone (no shared blob was retired).
    s3.delete_object(Bucket=vbucket, Key="k", VersionId=v1)
    assert body(s3, vbucket, "k") == b"data"


def test_copying_an_old_version_onto_its_key_restores_it(s3: Any, vbucket: str) -> None:
    """S3's documented way to bring an earlier version back: copy it onto its own key, no other
    change needed (a self-copy naming no version must still change something)."""
    v1 = s3.put_object(Bucket=vbucket, Key="k", Body=b"good", Metadata={"step": "1"})["VersionId"]
    s3.put_object(Bucket=vbucket, Key="k", Body=b"bad")
    copied = s3.copy_object(
        Bucket=vbucket, Key="k", CopySource={"Bucket": vbucket, "Key": "k", "VersionId": v1}
    )
    assert copied["CopySourceVersionId"] == v1 and copied["VersionId"] != v1
    current = s3.get_object(Bucket=vbucket, Key="k")
    assert current["Body"].read() == b"good" and current["Metadata"] == {"step": "1"}
    assert current["VersionId"] == copied["VersionId"]
    assert len(s3.list_object_versions(Bucket=vbucket)["Versions"]) == 3


def aws_runner(server: ServerProcess, home: Path) -> Any:
    """`run(*args)`: the aws command line against `server`, its JSON answer parsed."""
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": str(home / "config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(home / "credentials"),
        "HOME": str(home),
    }
    env.pop("AWS_PROFILE", None)

    def run(*args: str) -> Any:
        result = subprocess.run(
            [AWS, "--endpoint-url", server.endpoint, "--output", "json", *args],
            env=env, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        assert result.returncode == 0, f"aws {' '.join(args)} exited {result.returncode}:\n{result.stderr}"
        return json.loads(result.stdout) if result.stdout.strip() else {}

    return run


@pytest.fixture(scope="module")
def aws(server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return aws_runner(server, tmp_path_factory.mktemp("aws-home"))


def test_aws_cli_versioning(aws: Any, s3: Any, tmp_path: Path) -> None:
    name = f"cli-ver-{os.getpid()}-{next(_names)}"
    aws("s3api", "create-bucket", "--bucket", name)
    try:
        aws(
            "s3api", "put-bucket-versioning", "--bucket", name, "--versioning-configuration", "Status=Enabled"
        )
        assert aws("s3api", "get-bucket-versioning", "--bucket", name)["Status"] == "Enabled"
        source = tmp_path / "ckpt"
        source.write_bytes(b"first")
        v1 = aws("s3api", "put-object", "--bucket", name, "--key", "ckpt", "--body", str(source))["VersionId"]
        source.write_bytes(b"second")
        v2 = aws("s3api", "put-object", "--bucket", name, "--key", "ckpt", "--body", str(source))["VersionId"]
        marker = aws("s3api", "delete-object", "--bucket", name, "--key", "ckpt")
        assert marker["DeleteMarker"] is True
        listed = aws("s3api", "list-object-versions", "--bucket", name)
        assert [v["VersionId"] for v in listed["Versions"]] == [v2, v1]
        assert [m["VersionId"] for m in listed["DeleteMarkers"]] == [marker["VersionId"]]
        out = tmp_path / "out"
        aws("s3api", "get-object", "--bucket", name, "--key", "ckpt", "--version-id", v1, str(out))
        assert out.read_bytes() == b"first"
        aws("s3api", "delete-object", "--bucket", name, "--key", "ckpt", "--version-id", marker["VersionId"])
        aws("s3api", "get-object", "--bucket", name, "--key", "ckpt", str(out))
        assert out.read_bytes() == b"second"
    finally:
        empty_versioned(s3, name)


def test_deleting_a_version_needs_delete_object_version(s3: Any, vbucket: str, server: ServerProcess) -> None:
    """A user allowed s3:DeleteObject (a marker) but not s3:DeleteObjectVersion loses nothing."""
    import boto3
    from botocore.config import Config

    from tests.support import admin

    name = f"marker-only-{os.getpid()}-{next(_names)}"
    created = admin(server.endpoint, "user", "add", name)
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"AWS": f"arn:aws:iam::000000000000:user/{name}"},
                "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
                "Resource": f"arn:aws:s3:::{vbucket}/*",
            }
        ],
    }
    s3.put_bucket_policy(Bucket=vbucket, Policy=json.dumps(policy))
    user = boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        aws_access_key_id=created["access_key"],
        aws_secret_access_key=created["secret_key"],
        region_name=REGION,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )
    v1 = user.put_object(Bucket=vbucket, Key="ckpt", Body=b"one")["VersionId"]
    for call in (
        lambda: user.delete_object(Bucket=vbucket, Key="ckpt", VersionId=v1),
        lambda: user.get_object(Bucket=vbucket, Key="ckpt", VersionId=v1),
        lambda: user.delete_objects(Bucket=vbucket, Delete={"Objects": [{"Key": "ckpt", "VersionId": v1}]}),
    ):
        try:
            answer = call()
        except ClientError as exc:
            assert exc.response["Error"]["Code"] == "AccessDenied"
        else:
            assert [e["Code"] for e in answer["Errors"]] == ["AccessDenied"]
    assert user.delete_object(Bucket=vbucket, Key="ckpt")["DeleteMarker"] is True  # allowed: a marker
    assert body(s3, vbucket, "ckpt", v1) == b"one"
    s3.delete_bucket_policy(Bucket=vbucket)


def test_conditional_deletes_in_a_versioned_bucket(s3: Any, vbucket: str, expect_error: Any) -> None:
    """If-Match on DELETE: without a versionId it is checked on the current version (and a
    marker is added when it holds); with one, on that version."""
    first = s3.put_object(Bucket=vbucket, Key="k", Body=b"v1")
    second = s3.put_object(Bucket=vbucket, Key="k", Body=b"v2")
    with expect_error("PreconditionFailed", 412):
        s3.delete_object(Bucket=vbucket, Key="k", IfMatch=first["ETag"])  # not the current one
    assert body(s3, vbucket, "k") == b"v2"
    with expect_error("PreconditionFailed", 412):
        s3.delete_object(Bucket=vbucket, Key="k", VersionId=first["VersionId"], IfMatch=second["ETag"])
    s3.delete_object(Bucket=vbucket, Key="k", VersionId=first["VersionId"], IfMatch=first["ETag"])
    with expect_error("NoSuchVersion", 404):
        s3.get_object(Bucket=vbucket, Key="k", VersionId=first["VersionId"])
    marker = s3.delete_object(Bucket=vbucket, Key="k", IfMatch=second["ETag"])
    assert marker["DeleteMarker"] is True
    assert body(s3, vbucket, "k", second["VersionId"]) == b"v2"
