"""Checkpoints nobody can lose: a PyTorch run writes S3Checkpoint and torch.distributed.checkpoint
steps into an Object Lock bucket (default COMPLIANCE retention), then a user allowed s3:* on the
bucket tries every way S3 offers to destroy them — DeleteObject and DeleteObjects by version id,
overwrites, a lifecycle Expiration + NoncurrentVersionExpiration rule with the clock run forward,
DeleteBucket. Every attempt is refused and every step still loads back byte-exact by version id.
The same attack on a versioned bucket without the lock succeeds, so the refusals are the lock's.

The server here runs on a test clock, which lifecycle ages and Object Lock retention are both
judged on: the rule is made due by running it 30 days forward, and the 60-day retention still
holds then.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

torch = pytest.importorskip("torch")
s3torchconnector = pytest.importorskip("s3torchconnector")

import torch.distributed.checkpoint as dcp  # noqa: E402
from s3torchconnector import S3Checkpoint, S3ClientConfig  # noqa: E402
from s3torchconnector.dcp import S3StorageWriter  # noqa: E402

from tests.clients_ml.conftest import training_job_env  # noqa: E402
from tests.conftest import REGION  # noqa: E402
from tests.lifecycle.conftest import Tiered, clocked_server  # noqa: E402
from tests.s3.test_authorization import user_client  # noqa: E402
from tests.support import admin  # noqa: E402

CONFIG = S3ClientConfig(force_path_style=True, max_attempts=2)
STEPS = 3
MODEL_KEY = "run/model.pt"
DCP_PREFIX = "run/dcp"
_names = iter(range(1_000_000))

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


@pytest.fixture(scope="module")
def clocked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tiered]:
    """A server on a test clock, so a lifecycle rule can be made due without waiting days."""
    yield from clocked_server(tmp_path_factory, "locked-ckpt")


@pytest.fixture
def job_env(clocked: Tiered, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    training_job_env(clocked.endpoint, monkeypatch, tmp_path)


def make_bucket(ts: Tiered, *, locked: bool) -> str:
    name = f"ckpt-{'locked' if locked else 'open'}-{os.getpid()}-{next(_names)}"
    if locked:
        ts.s3.create_bucket(Bucket=name, ObjectLockEnabledForBucket=True)
        ts.s3.put_object_lock_configuration(
            Bucket=name,
            ObjectLockConfiguration={
                "ObjectLockEnabled": "Enabled",
                "Rule": {"DefaultRetention": {"Mode": "COMPLIANCE", "Days": 60}},
            },
        )
    else:
        ts.s3.create_bucket(Bucket=name)
        ts.s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    return name


def deleter(ts: Tiered, bucket: str, tmp_path: Path) -> Any:
    """A new user whose policy allows every S3 action on the bucket and its objects."""
    name = f"deleter{os.getpid()}x{next(_names)}"
    user = admin(ts.endpoint, "user", "add", name)
    document = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": "s3:*",
                "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
            }
        ],
    }
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(document))
    admin(ts.endpoint, "user", "policy", "set", name, str(path))
    return user_client(ts.server, user)


def train_and_checkpoint(ts: Tiered, bucket: str) -> list[dict[str, Any]]:
    """STEPS training steps, each saved with S3Checkpoint and with DCP onto the same keys.

    Returns, per step, the state saved and {key: (version id, sha256)} of what that step wrote.
    """
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
    optimizer = torch.optim.AdamW(model.parameters())
    checkpoint = S3Checkpoint(region=REGION, endpoint=ts.endpoint, s3client_config=CONFIG)
    steps = []
    for step in range(STEPS):
        model(torch.randn(16, 64)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        state = {"model": {k: v.clone() for k, v in model.state_dict().items()}, "step": step}
        with checkpoint.writer(f"s3://{bucket}/{MODEL_KEY}") as writer:
            torch.save(state, writer)
        # DCP: one tensor over the CRT's 8 MiB part size, so each step is also a multipart upload.
        sharded = {"embedding": torch.randn(2500, 1024) + step, "model": state["model"]}
        dcp.save(
            sharded,
            storage_writer=S3StorageWriter(
                region=REGION, path=f"s3://{bucket}/{DCP_PREFIX}", s3client_config=CONFIG, thread_count=2
            ),
        )
        written = {}
        for obj in ts.s3.list_objects_v2(Bucket=bucket, Prefix="run/")["Contents"]:
            got = ts.s3.get_object(Bucket=bucket, Key=obj["Key"])
            written[obj["Key"]] = (got["VersionId"], hashlib.sha256(got["Body"].read()).hexdigest())
        steps.append({"state": state, "sharded": sharded, "written": written})
    return steps


def all_versions(ts: Tiered, bucket: str) -> set[tuple[str, str]]:
    found = set()
    for page in ts.s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        found |= {(v["Key"], v["VersionId"]) for v in page.get("Versions", [])}
    return found


def error_of(call: Any) -> tuple[str, int] | None:
    """(code, status) of the S3 error a call got; None if it succeeded."""
    try:
        call()
    except ClientError as exc:
        return str(exc.response["Error"]["Code"]), int(exc.response["ResponseMetadata"]["HTTPStatusCode"])
    return None


def attack(ts: Tiered, bucket: str, user: Any, versions: set[tuple[str, str]]) -> dict[str, Any]:
    """Everything a user allowed s3:* can try on the bucket; what each attempt got."""
    outcome: dict[str, Any] = {}
    ordered = sorted(versions)
    half = len(ordered) // 2
    outcome["delete_object"] = [
        error_of(lambda k=k, v=v: user.delete_object(Bucket=bucket, Key=k, VersionId=v))
        for k, v in ordered[:half]
    ]
    answer = user.delete_objects(
        Bucket=bucket, Delete={"Objects": [{"Key": k, "VersionId": v} for k, v in ordered[half:]]}
    )
    outcome["delete_objects"] = (
        sorted((e["Key"], e["VersionId"]) for e in answer.get("Deleted", [])),
        sorted((e["Key"], e["VersionId"], e["Code"]) for e in answer.get("Errors", [])),
    )
    # Overwrite every key and hide it behind a delete marker: both allowed, neither loses a version.
    for key in {k for k, _ in ordered}:
        user.put_object(Bucket=bucket, Key=key, Body=b"ransom note")
        user.delete_object(Bucket=bucket, Key=key)
    user.put_bucket_lifecycle_configuration(
        Bucket=bucket,
        LifecycleConfiguration={
            "Rules": [
                {
                    "ID": "wipe",
                    "Filter": {"Prefix": ""},
                    "Status": "Enabled",
                    "Expiration": {"Days": 1},
                    "NoncurrentVersionExpiration": {"NoncurrentDays": 1},
                }
            ]
        },
    )
    ts.advance(30)
    outcome["lifecycle"] = ts.run_pass()
    outcome["delete_bucket"] = error_of(lambda: user.delete_bucket(Bucket=bucket))
    return outcome


def load_step_by_version(ts: Tiered, bucket: str, step: dict[str, Any], tmp_path: Path) -> None:
    """Read back what one step wrote, by version id; byte-exact, and the tensors equal."""
    local = tmp_path / f"dcp-step-{step['state']['step']}"
    local.mkdir()
    for key, (version, digest) in step["written"].items():
        data = ts.s3.get_object(Bucket=bucket, Key=key, VersionId=version)["Body"].read()
        assert hashlib.sha256(data).hexdigest() == digest, (key, version)
        if key == MODEL_KEY:
            loaded = torch.load(io.BytesIO(data), weights_only=True)
            assert loaded["step"] == step["state"]["step"]
            for name, tensor in step["state"]["model"].items():
                assert torch.equal(loaded["model"][name], tensor), name
        else:
            (local / key.removeprefix(f"{DCP_PREFIX}/")).write_bytes(data)
    # The DCP files are the layout FileSystemWriter makes: a local reader loads that version's step.
    target = {
        "embedding": torch.zeros(2500, 1024),
        "model": {k: torch.zeros_like(v) for k, v in step["state"]["model"].items()},
    }
    dcp.load(target, storage_reader=dcp.FileSystemReader(str(local)))
    assert torch.equal(target["embedding"], step["sharded"]["embedding"])
    for name, tensor in step["state"]["model"].items():
        assert torch.equal(target["model"][name], tensor), name


def test_locked_checkpoints_survive_a_user_with_delete_rights(
    clocked: Tiered, job_env: None, tmp_path: Path
) -> None:
    ts = clocked
    bucket = make_bucket(ts, locked=True)
    steps = train_and_checkpoint(ts, bucket)
    versions = all_versions(ts, bucket)
    written = {kv for step in steps for kv in ((k, v[0]) for k, v in step["written"].items())}
    # DCP writes .metadata.tmp and renames it (copy + delete): its versions stay too, behind markers.
    assert written <= versions and {k for k, _ in versions - written} == {f"{DCP_PREFIX}/.metadata.tmp"}
    assert len(written) == STEPS * len(steps[0]["written"]) >= STEPS * 3
    for key, version in versions:  # every version took the bucket's default retention
        retention = ts.s3.get_object_retention(Bucket=bucket, Key=key, VersionId=version)["Retention"]
        assert retention["Mode"] == "COMPLIANCE"

    outcome = attack(ts, bucket, deleter(ts, bucket, tmp_path), versions)

    ordered = sorted(versions)
    half = len(ordered) // 2
    assert outcome["delete_object"] == [("AccessDenied", 403)] * half
    deleted, errors = outcome["delete_objects"]
    assert deleted == []
    assert errors == [(k, v, "AccessDenied") for k, v in ordered[half:]]
    assert outcome["lifecycle"]["noncurrent_expired"] == 0
    assert outcome["delete_bucket"] == ("BucketNotEmpty", 409)
    assert versions <= all_versions(ts, bucket)  # overwrites only added versions
    for step in steps:
        load_step_by_version(ts, bucket, step, tmp_path)


def test_the_same_attack_destroys_an_unlocked_bucket(clocked: Tiered, job_env: None, tmp_path: Path) -> None:
    """The control: without Object Lock, the same user and calls do delete every version."""
    ts = clocked
    bucket = make_bucket(ts, locked=False)
    steps = train_and_checkpoint(ts, bucket)
    versions = all_versions(ts, bucket)
    assert len(versions) >= STEPS * len(steps[0]["written"])

    outcome = attack(ts, bucket, deleter(ts, bucket, tmp_path), versions)

    half = len(versions) // 2
    assert outcome["delete_object"] == [None] * half
    deleted, errors = outcome["delete_objects"]
    assert (deleted, errors) == (sorted(versions)[half:], [])
    assert outcome["lifecycle"]["noncurrent_expired"] > 0
    assert not versions & all_versions(ts, bucket)
    for key, version in sorted(versions)[:1]:
        with pytest.raises(ClientError):
            ts.s3.get_object(Bucket=bucket, Key=key, VersionId=version)
