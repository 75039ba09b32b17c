"""aws-cli (v1) on Object Lock headers of CreateMultipartUpload and CopyObject: the version that
CompleteMultipartUpload makes, and a copy's destination, carry the lock the request named, as
get-object-retention / get-object-legal-hold report it and deletes by version id obey it."""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.clients.test_awscli import aws  # noqa: F401 - the fixture, run as a user runs aws


def cli_json(aws: Any, *args: str) -> Any:  # noqa: F811
    return json.loads(aws(*args).stdout)


def refused(aws: Any, *args: str) -> str:  # noqa: F811
    """The stderr of an aws command that must fail."""
    result = aws(*args, check=False)
    assert result.returncode != 0, f"aws {' '.join(args)} succeeded"
    return str(result.stderr)


def iso(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def lock_bucket(aws: Any, s3: Any) -> Iterator[str]:  # noqa: F811
    """A bucket with Object Lock on, made by aws-cli; GOVERNANCE versions and holds are cleared
    afterwards (the tests here lock nothing with COMPLIANCE, so it is removed too)."""
    name = f"cli-lockmp-{os.getpid()}"
    aws("s3api", "create-bucket", "--bucket", name, "--object-lock-enabled-for-bucket")
    yield name
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=name):
        for entry in page.get("Versions", []) + page.get("DeleteMarkers", []):
            key, version = entry["Key"], entry["VersionId"]
            s3.put_object_legal_hold(Bucket=name, Key=key, VersionId=version, LegalHold={"Status": "OFF"})
            s3.delete_object(Bucket=name, Key=key, VersionId=version, BypassGovernanceRetention=True)
    for upload in s3.list_multipart_uploads(Bucket=name).get("Uploads", []):
        s3.abort_multipart_upload(Bucket=name, Key=upload["Key"], UploadId=upload["UploadId"])
    s3.delete_bucket(Bucket=name)


def test_aws_multipart_upload_with_lock_headers(aws: Any, lock_bucket: str, tmp_path: Path) -> None:  # noqa: F811
    b = lock_bucket
    until = dt.datetime.now(dt.UTC).replace(microsecond=0) + dt.timedelta(days=2)
    upload = cli_json(
        aws, "s3api", "create-multipart-upload", "--bucket", b, "--key", "big.pt",
        "--object-lock-mode", "GOVERNANCE", "--object-lock-retain-until-date", iso(until),
        "--object-lock-legal-hold-status", "ON",
    )["UploadId"]  # fmt: skip
    parts = []
    for number, size in ((1, 5 * 1024 * 1024), (2, 1000)):
        data = tmp_path / f"part{number}"
        data.write_bytes(os.urandom(size))
        etag = cli_json(
            aws, "s3api", "upload-part", "--bucket", b, "--key", "big.pt", "--upload-id", upload,
            "--part-number", str(number), "--body", str(data),
        )["ETag"]  # fmt: skip
        parts.append({"PartNumber": number, "ETag": etag})
    done = cli_json(
        aws, "s3api", "complete-multipart-upload", "--bucket", b, "--key", "big.pt", "--upload-id", upload,
        "--multipart-upload", json.dumps({"Parts": parts}),
    )  # fmt: skip
    version = done["VersionId"]
    retention = cli_json(
        aws, "s3api", "get-object-retention", "--bucket", b, "--key", "big.pt", "--version-id", version
    )["Retention"]
    assert retention["Mode"] == "GOVERNANCE"
    assert dt.datetime.fromisoformat(retention["RetainUntilDate"].replace("Z", "+00:00")) == until
    hold = cli_json(
        aws, "s3api", "get-object-legal-hold", "--bucket", b, "--key", "big.pt", "--version-id", version
    )
    assert hold["LegalHold"]["Status"] == "ON"
    head = cli_json(aws, "s3api", "head-object", "--bucket", b, "--key", "big.pt", "--version-id", version)
    assert head["ObjectLockMode"] == "GOVERNANCE" and head["ObjectLockLegalHoldStatus"] == "ON"
    assert head["ContentLength"] == 5 * 1024 * 1024 + 1000

    delete = ("s3api", "delete-object", "--bucket", b, "--key", "big.pt", "--version-id", version)
    assert "AccessDenied" in refused(aws, *delete)
    assert "AccessDenied" in refused(
        aws, *delete, "--bypass-governance-retention"
    )  # the hold yields to no one
    aws("s3api", "put-object-legal-hold", "--bucket", b, "--key", "big.pt", "--version-id", version,
        "--legal-hold", "Status=OFF")  # fmt: skip
    assert "AccessDenied" in refused(aws, *delete)  # GOVERNANCE still holds without the bypass
    aws(*delete, "--bypass-governance-retention")
    gone = aws("s3api", "head-object", "--bucket", b, "--key", "big.pt", "--version-id", version, check=False)
    assert gone.returncode != 0


def test_aws_copy_object_with_lock_headers(aws: Any, lock_bucket: str, tmp_path: Path) -> None:  # noqa: F811
    b = lock_bucket
    source = tmp_path / "src"
    source.write_bytes(b"weights v1")
    src_version = cli_json(
        aws, "s3api", "put-object", "--bucket", b, "--key", "src", "--body", str(source),
        "--object-lock-legal-hold-status", "ON",
    )["VersionId"]  # fmt: skip
    until = dt.datetime.now(dt.UTC).replace(microsecond=0) + dt.timedelta(days=3)
    copied = cli_json(
        aws, "s3api", "copy-object", "--bucket", b, "--key", "dst",
        "--copy-source", f"{b}/src?versionId={src_version}",
        "--object-lock-mode", "GOVERNANCE", "--object-lock-retain-until-date", iso(until),
    )  # fmt: skip
    version = copied["VersionId"]
    assert copied["CopySourceVersionId"] == src_version
    retention = cli_json(
        aws, "s3api", "get-object-retention", "--bucket", b, "--key", "dst", "--version-id", version
    )["Retention"]
    assert retention["Mode"] == "GOVERNANCE"
    assert dt.datetime.fromisoformat(retention["RetainUntilDate"].replace("Z", "+00:00")) == until
    # The source's legal hold stays the source's: the copy has none.
    hold = cli_json(
        aws, "s3api", "get-object-legal-hold", "--bucket", b, "--key", "dst", "--version-id", version
    )
    assert hold["LegalHold"]["Status"] == "OFF"
    delete = ("s3api", "delete-object", "--bucket", b, "--key", "dst", "--version-id", version)
    assert "AccessDenied" in refused(aws, *delete)
    # A copy without lock headers in a bucket without a default retention is not locked.
    plain = cli_json(
        aws, "s3api", "copy-object", "--bucket", b, "--key", "plain", "--copy-source", f"{b}/src"
    )
    assert "NoSuchObjectLockConfiguration" in refused(
        aws,
        "s3api",
        "get-object-retention",
        "--bucket",
        b,
        "--key",
        "plain",
        "--version-id",
        plain["VersionId"],
    )
    # A retain-until date in the past is refused, as for PutObject.
    past = iso(dt.datetime.now(dt.UTC) - dt.timedelta(days=1))
    assert "InvalidArgument" in refused(
        aws, "s3api", "copy-object", "--bucket", b, "--key", "late", "--copy-source", f"{b}/src",
        "--object-lock-mode", "GOVERNANCE", "--object-lock-retain-until-date", past,
    )  # fmt: skip
    aws(*delete, "--bypass-governance-retention")
