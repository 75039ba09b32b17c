"""An object whose data is gone for good: a clean, non-retryable error, and the loss stays visible.

Shard files of more than m failure domains are deleted on disk (for real), a heal pass confirms
that fewer than k shards survive, and then a GET with boto3's *default* retry settings must
fail at once with 410 ObjectDataLost — one request in the server's access log, where the old
503 made the SDK retry it four more times. The key still lists, and `tierstore admin status`
and the metrics name the loss. Domains that are merely offline are not a loss: that object is
degraded, answers the retryable 503, and reads again once they return.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.conftest import ACCESS_KEY, REGION, SECRET_KEY, ServerProcess, make_client
from tests.shards import Shard, shards_under

pytestmark = pytest.mark.timeout(300)

TIER, STORAGE_CLASS, K, M = "hot", "STANDARD", 4, 2  # server/config.py DEFAULT_TIERS
SIZE = 300_000  # above the small-object threshold (64 KiB): striped over k+m domains


def _tierstore_cmd() -> list[str]:
    script = Path(sys.executable).with_name("tierstore")
    return [str(script)] if script.exists() else [sys.executable, "-m", "server.cli"]


def admin(server: ServerProcess, *args: str, json_out: bool = True) -> Any:
    env = {**os.environ, "TIERSTORE_ACCESS_KEY": ACCESS_KEY, "TIERSTORE_SECRET_KEY": SECRET_KEY}
    done = subprocess.run(
        [*_tierstore_cmd(), "admin", *args, "--endpoint", server.endpoint, *(["--json"] if json_out else [])],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"tierstore admin {' '.join(args)} failed: {done.stderr}"
    return json.loads(done.stdout) if json_out else done.stdout


def default_client(server: ServerProcess):
    """boto3 as a user has it: no retry settings of ours (legacy mode, 5 attempts)."""
    return boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name=REGION,
        config=Config(s3={"addressing_style": "path"}),
    )


def shard_files(server: ServerProcess, data_id: str) -> dict[str, Shard]:
    """Drive id ("hot-n3-d1") → the blob's shard on it (a file, or a record in a pack)."""
    root = server.data_dir / "domains" / TIER
    return {s.domain_id: s for s in shards_under(root, data_id)}


def put_striped(server: ServerProcess, s3: Any, bucket: str, key: str) -> tuple[bytes, dict[str, Shard]]:
    root = server.data_dir / "domains" / TIER
    before = {s.data_id for s in shards_under(root)}
    body = os.urandom(SIZE)
    s3.put_object(Bucket=bucket, Key=key, Body=body, StorageClass=STORAGE_CLASS)
    (data_id,) = {s.data_id for s in shards_under(root)} - before
    shards = shard_files(server, data_id)
    assert len(shards) == K + M
    return body, shards


def get_requests(server: ServerProcess, bucket: str) -> int:
    """GetObject lines in the access log for `bucket`."""
    lines = [json.loads(line) for line in server.log().splitlines() if line.startswith('{"time"')]
    return sum(1 for line in lines if line["operation"] == "GetObject" and line["bucket"] == bucket)


def lost_metric(server: ServerProcess) -> float:
    with urllib.request.urlopen(f"{server.endpoint}/metrics", timeout=30) as reply:
        text = reply.read().decode()
    (line,) = [x for x in text.splitlines() if x.startswith("tierstore_lost_objects ")]
    return float(line.split()[1])


def test_a_lost_object_answers_a_non_retryable_error_and_stays_visible(
    spawn: Callable[..., ServerProcess],
    tmp_path: Path,
) -> None:
    server = spawn(env={"TIERSTORE_SERVER_ACCESS_LOG": "true"})
    s3 = default_client(server)
    bucket, key = "lost-data", "dir/gone.bin"
    s3.create_bucket(Bucket=bucket)
    _, shards = put_striped(server, s3, bucket, key)
    s3.put_object(Bucket=bucket, Key="fine.txt", Body=b"still here")
    for domain in sorted(shards)[: M + 1]:  # one domain more than the code can stand
        shards[domain].destroy()  # (75 KB shards: records in packs, zeroed in place)

    healed = admin(server, "heal", "--wait")
    assert (healed["lost_objects"], healed["degraded_objects"]) == (1, 0)

    before = get_requests(server, bucket)
    with pytest.raises(ClientError) as lost:
        s3.get_object(Bucket=bucket, Key=key)
    error = lost.value.response
    assert (error["ResponseMetadata"]["HTTPStatusCode"], error["Error"]["Code"]) == (410, "ObjectDataLost")
    assert error["ResponseMetadata"]["RetryAttempts"] == 0
    with pytest.raises(ClientError) as ranged:
        s3.get_object(Bucket=bucket, Key=key, Range="bytes=0-99")
    assert ranged.value.response["Error"]["Code"] == "ObjectDataLost"
    # The aws command line, as a user runs it (its own retry settings, none of ours).
    home = tmp_path / "aws-home"
    aws_env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": str(home / "config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(home / "credentials"),
        "HOME": str(home),
    }
    aws_env.pop("AWS_PROFILE", None)
    cli = subprocess.run(
        [
            str(Path(sys.executable).with_name("aws")),
            "--endpoint-url",
            server.endpoint,
            "s3api",
            "get-object",
            "--bucket",
            bucket,
            "--key",
            key,
            str(tmp_path / "out"),
        ],
        env=aws_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode != 0 and "(ObjectDataLost)" in cli.stderr, cli.stderr
    assert get_requests(server, bucket) - before == 3, "one request per GET: no client retried"

    # The loss is visible, never hidden: listed, HEAD answers, status and metrics name it.
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == [key, "fine.txt"]
    assert s3.head_object(Bucket=bucket, Key=key)["ContentLength"] == SIZE
    status = admin(server, "status")
    assert status["lost_objects"] == 1
    assert [(e["bucket"], e["key"]) for e in status["heal"]["lost"]] == [(bucket, key)]
    assert f"LOST: {TIER} {bucket}/{key}" in admin(server, "status", json_out=False)
    assert lost_metric(server) == 1
    assert s3.get_object(Bucket=bucket, Key="fine.txt")["Body"].read() == b"still here"

    # Overwritten: readable again, and no longer reported lost after the next pass.
    s3.put_object(Bucket=bucket, Key=key, Body=b"new data")
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == b"new data"
    assert admin(server, "heal", "--wait")["lost_objects"] == 0
    assert lost_metric(server) == 0


def test_domains_offline_are_not_a_loss(spawn: Callable[..., ServerProcess]) -> None:
    server = spawn()
    s3 = make_client(server.endpoint)
    bucket, key = "offline-data", "waits.bin"
    s3.create_bucket(Bucket=bucket)
    body, shards = put_striped(server, s3, bucket, key)
    down = sorted(shards)[: M + 1]
    for drive in down:
        admin(server, "domain", "offline", drive)
    healed = admin(server, "heal", "--wait")
    assert (healed["lost_objects"], healed["degraded_objects"]) == (0, 1)
    with pytest.raises(ClientError) as unavailable:
        s3.get_object(Bucket=bucket, Key=key)
    assert unavailable.value.response["Error"]["Code"] == "ServiceUnavailable"  # retryable: it may come back
    for drive in down:
        admin(server, "domain", "online", drive)
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body
    healed = admin(server, "heal", "--wait")
    assert (healed["lost_objects"], healed["degraded_objects"]) == (0, 0)
