"""`tierstore admin restore BUCKET --prefix P --wait` restores every archived object under P."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from botocore.exceptions import ClientError

from tests.conftest import ACCESS_KEY, SECRET_KEY, ServerProcess


def test_bulk_restore_makes_every_archived_object_readable(server: ServerProcess, s3, bucket: str) -> None:
    bodies = {f"archive/{i:03d}": os.urandom(1000 + i) for i in range(12)}
    for key, body in bodies.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body, StorageClass="GLACIER")
    s3.put_object(Bucket=bucket, Key="archive/plain", Body=b"not archived")
    with pytest.raises(ClientError) as exc:
        s3.get_object(Bucket=bucket, Key="archive/000")
    assert exc.value.response["Error"]["Code"] == "InvalidObjectState"

    env = {**os.environ, "TIERSTORE_ACCESS_KEY": ACCESS_KEY, "TIERSTORE_SECRET_KEY": SECRET_KEY}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "server.cli",
            "admin",
            "--endpoint",
            server.endpoint,
            "restore",
            bucket,
            "--prefix",
            "archive/",
            "--days",
            "3",
            "--wait",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=True,
    )
    result = json.loads(out.stdout)
    # Only objects of an archive class are looked at: "archive/plain" (STANDARD) is not counted.
    assert result["requested"] == {"requested": 12, "already": 0, "skipped": 0}
    assert result["state"] == {"archived": 12, "restored": 12, "ongoing": 0}
    for key, body in bodies.items():
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body
        assert 'ongoing-request="false"' in s3.head_object(Bucket=bucket, Key=key)["Restore"]


def test_malformed_admin_numbers_are_400_not_500(server: ServerProcess, bucket: str) -> None:
    env = {**os.environ, "TIERSTORE_ACCESS_KEY": ACCESS_KEY, "TIERSTORE_SECRET_KEY": SECRET_KEY}
    for days in ("0", "-3"):
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "server.cli",
                "admin",
                "--endpoint",
                server.endpoint,
                "restore",
                bucket,
                "--days",
                days,
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert out.returncode != 0 and "InvalidArgument" in out.stderr, (days, out.stderr)
