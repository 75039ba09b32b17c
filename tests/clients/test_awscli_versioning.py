"""aws-cli (v1) on versioning: the bucket states, version ids on put / copy / multipart, GET, HEAD,
tagging and DELETE by version id, delete markers, list-object-versions paged the way aws-cli pages
(its own KeyMarker / VersionIdMarker loop), delete-objects with version ids, the null version of a
Suspended bucket, and MFA delete refused."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.clients.test_awscli import aws  # noqa: F401 - the fixture, run as a user runs aws


def cli_json(aws: Any, *args: str) -> Any:  # noqa: F811
    return json.loads(aws(*args).stdout)


@pytest.fixture
def versioned(aws: Any, s3: Any) -> Iterator[str]:  # noqa: F811
    """A bucket with versioning Enabled by aws-cli; every version and marker removed afterwards."""
    name = f"cli-versions-{os.getpid()}"
    aws("s3api", "create-bucket", "--bucket", name)
    aws("s3api", "put-bucket-versioning", "--bucket", name, "--versioning-configuration", "Status=Enabled")
    yield name
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=name):
        for entry in page.get("Versions", []) + page.get("DeleteMarkers", []):
            s3.delete_object(Bucket=name, Key=entry["Key"], VersionId=entry["VersionId"])
    for upload in s3.list_multipart_uploads(Bucket=name).get("Uploads", []):
        s3.abort_multipart_upload(Bucket=name, Key=upload["Key"], UploadId=upload["UploadId"])
    s3.delete_bucket(Bucket=name)


def md5_of(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def test_aws_versions_markers_and_version_ids(aws: Any, versioned: str, tmp_path: Path) -> None:  # noqa: F811
    b = versioned
    state = cli_json(aws, "s3api", "get-bucket-versioning", "--bucket", b)
    assert state["Status"] == "Enabled"

    bodies = []
    versions = []
    for step in range(3):
        body = tmp_path / f"ckpt{step}"
        body.write_bytes(os.urandom(1000 + step))
        bodies.append(body)
        put = cli_json(aws, "s3api", "put-object", "--bucket", b, "--key", "ckpt.pt", "--body", str(body))
        versions.append(put["VersionId"])
    assert len(set(versions)) == 3 and "null" not in versions

    # Every version readable by id, byte-exact; HEAD names the version it answered for.
    for body, version in zip(bodies, versions, strict=True):
        out = tmp_path / "out"
        got = cli_json(
            aws, "s3api", "get-object", "--bucket", b, "--key", "ckpt.pt", "--version-id", version, str(out)
        )
        assert got["VersionId"] == version and md5_of(out) == md5_of(body)
    head = cli_json(aws, "s3api", "head-object", "--bucket", b, "--key", "ckpt.pt")
    assert head["VersionId"] == versions[-1]

    # Tagging by version touches only that version.
    aws("s3api", "put-object-tagging", "--bucket", b, "--key", "ckpt.pt", "--version-id", versions[0],
        "--tagging", "TagSet=[{Key=step,Value=0}]")  # fmt: skip
    tags = cli_json(
        aws, "s3api", "get-object-tagging", "--bucket", b, "--key", "ckpt.pt", "--version-id", versions[0]
    )
    assert tags["TagSet"] == [{"Key": "step", "Value": "0"}] and tags["VersionId"] == versions[0]
    assert cli_json(aws, "s3api", "get-object-tagging", "--bucket", b, "--key", "ckpt.pt")["TagSet"] == []

    # A copy from an old version becomes the newest version, with the old bytes.
    copied = cli_json(aws, "s3api", "copy-object", "--bucket", b, "--key", "ckpt.pt",
                      "--copy-source", f"{b}/ckpt.pt?versionId={versions[0]}")  # fmt: skip
    assert copied["CopySourceVersionId"] == versions[0]
    versions.append(copied["VersionId"])
    out = tmp_path / "copied"
    aws("s3api", "get-object", "--bucket", b, "--key", "ckpt.pt", str(out))
    assert md5_of(out) == md5_of(bodies[0])

    # A plain DELETE leaves a marker: the key is gone, every version stays.
    deleted = cli_json(aws, "s3api", "delete-object", "--bucket", b, "--key", "ckpt.pt")
    assert deleted["DeleteMarker"] is True
    marker = deleted["VersionId"]
    missing = aws("s3api", "head-object", "--bucket", b, "--key", "ckpt.pt", check=False)
    assert missing.returncode != 0 and "404" in missing.stderr
    listed = cli_json(aws, "s3api", "list-object-versions", "--bucket", b, "--prefix", "ckpt")
    assert [v["VersionId"] for v in listed["Versions"]] == versions[::-1]
    assert [m["VersionId"] for m in listed["DeleteMarkers"]] == [marker]
    assert listed["DeleteMarkers"][0]["IsLatest"] is True
    # GET of the marker by its id: 405 MethodNotAllowed, as S3 answers.
    on_marker = aws("s3api", "get-object", "--bucket", b, "--key", "ckpt.pt", "--version-id", marker,
                    str(tmp_path / "x"), check=False)  # fmt: skip
    assert on_marker.returncode != 0 and "MethodNotAllowed" in on_marker.stderr

    # Deleting the marker brings the newest version back.
    aws("s3api", "delete-object", "--bucket", b, "--key", "ckpt.pt", "--version-id", marker)
    assert (
        cli_json(aws, "s3api", "head-object", "--bucket", b, "--key", "ckpt.pt")["VersionId"] == versions[-1]
    )

    # Deleting one version for good, by id.
    gone = cli_json(
        aws, "s3api", "delete-object", "--bucket", b, "--key", "ckpt.pt", "--version-id", versions[1]
    )
    assert gone["VersionId"] == versions[1]
    left = cli_json(aws, "s3api", "list-object-versions", "--bucket", b)
    assert [v["VersionId"] for v in left["Versions"]] == [versions[3], versions[2], versions[0]]


def test_aws_version_listing_pages_and_batch_delete(aws: Any, versioned: str, tmp_path: Path) -> None:  # noqa: F811
    b = versioned
    body = tmp_path / "body"
    body.write_bytes(b"x" * 10)
    expected = []
    for key in ("a/1", "a/2", "b/1"):
        for _ in range(3):
            put = cli_json(aws, "s3api", "put-object", "--bucket", b, "--key", key, "--body", str(body))
            expected.append((key, put["VersionId"]))
    # aws-cli follows KeyMarker / VersionIdMarker itself: pages of two, every version exactly once,
    # keys ascending, each key's versions newest first.
    paged = cli_json(aws, "s3api", "list-object-versions", "--bucket", b, "--page-size", "2")
    got = [(v["Key"], v["VersionId"]) for v in paged["Versions"]]
    want = [kv for key in ("a/1", "a/2", "b/1") for kv in reversed([kv for kv in expected if kv[0] == key])]
    assert got == want
    # One page by hand: the markers aws-cli would send next.
    first = cli_json(aws, "s3api", "list-object-versions", "--bucket", b, "--max-keys", "4", "--no-paginate")
    assert first["IsTruncated"] is True and len(first["Versions"]) == 4
    assert (first["NextKeyMarker"], first["NextVersionIdMarker"]) == want[3]
    # Delimiter: the common prefixes instead of the keys under them.
    rolled = cli_json(aws, "s3api", "list-object-versions", "--bucket", b, "--delimiter", "/")
    assert [p["Prefix"] for p in rolled["CommonPrefixes"]] == ["a/", "b/"]

    # delete-objects with version ids removes exactly those versions.
    doomed = [kv for kv in expected if kv[0] == "a/1"]
    request = {"Objects": [{"Key": k, "VersionId": v} for k, v in doomed], "Quiet": False}
    result = cli_json(aws, "s3api", "delete-objects", "--bucket", b, "--delete", json.dumps(request))
    assert sorted((d["Key"], d["VersionId"]) for d in result["Deleted"]) == sorted(doomed)
    remaining = cli_json(aws, "s3api", "list-object-versions", "--bucket", b)
    assert {v["Key"] for v in remaining["Versions"]} == {"a/2", "b/1"}
    assert "DeleteMarkers" not in remaining


def test_aws_suspended_bucket_writes_the_null_version(aws: Any, versioned: str, tmp_path: Path) -> None:  # noqa: F811
    b = versioned
    body = tmp_path / "body"
    body.write_bytes(b"kept")
    kept = cli_json(aws, "s3api", "put-object", "--bucket", b, "--key", "k", "--body", str(body))["VersionId"]
    aws("s3api", "put-bucket-versioning", "--bucket", b, "--versioning-configuration", "Status=Suspended")
    assert cli_json(aws, "s3api", "get-bucket-versioning", "--bucket", b)["Status"] == "Suspended"
    for text in (b"null one", b"null two"):  # the second overwrites the null version in place
        body.write_bytes(text)
        put = json.loads(aws("s3api", "put-object", "--bucket", b, "--key", "k", "--body", str(body)).stdout)
        assert put.get("VersionId", "null") == "null"
    listed = cli_json(aws, "s3api", "list-object-versions", "--bucket", b)
    assert [v["VersionId"] for v in listed["Versions"]] == ["null", kept]
    out = tmp_path / "out"
    aws("s3api", "get-object", "--bucket", b, "--key", "k", "--version-id", "null", str(out))
    assert out.read_bytes() == b"null two"
    aws("s3api", "get-object", "--bucket", b, "--key", "k", "--version-id", kept, str(out))
    assert out.read_bytes() == b"kept"

    # MFA delete is not supported: refused, and the bucket's state unchanged.
    mfa = aws("s3api", "put-bucket-versioning", "--bucket", b, "--versioning-configuration",
              "Status=Enabled,MFADelete=Enabled", "--mfa", "arn:aws:iam::123456789012:mfa/root 123456",
              check=False)  # fmt: skip
    assert mfa.returncode != 0
    assert cli_json(aws, "s3api", "get-bucket-versioning", "--bucket", b)["Status"] == "Suspended"
