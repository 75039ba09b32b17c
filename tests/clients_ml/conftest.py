"""Fixtures for the ML-client tests: each client configured the way its own docs say, nothing more.

The clients here (s3torchconnector, pyarrow, s3fs, aws-cli, rclone and s3fs-fuse mounts) talk to
the session's `server`; a missing optional client skips its tests rather than failing them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ACCESS_KEY, REGION, SECRET_KEY, ServerProcess
from tests.shards import Shard, shards_under


def training_job_env(endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    """Set the environment a training job gets: credentials, region and AWS_ENDPOINT_URL (the only
    place DCP's CRT client finds the endpoint), no AWS config files."""
    env = {
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
    }
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@pytest.fixture
def aws_env(server: ServerProcess, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    """The environment a training job gets, for the session's server."""
    return training_job_env(server.endpoint, monkeypatch, tmp_path)


def access_log(server: ServerProcess, bucket: str) -> list[dict]:
    """The server's access-log lines (one JSON object per request) for one bucket."""
    lines = []
    for line in server.log().splitlines():
        if line.startswith("{") and f'"bucket":"{bucket}"' in line:
            lines.append(json.loads(line))
    return lines


def shard_files(server: ServerProcess) -> set[Shard]:
    """Every erasure shard the server holds (shard files and records in pack files); the catalog is not data."""
    root = server.data_dir / "domains"
    return set(shards_under(root)) if root.exists() else set()


@pytest.fixture
def objects_of(s3) -> Iterator:
    """`objects_of(bucket, prefix)`: {key: bytes} of everything under a prefix, read with boto3."""

    def read(bucket: str, prefix: str = "") -> dict[str, bytes]:
        out = {}
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                out[obj["Key"]] = s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
        return out

    yield read
