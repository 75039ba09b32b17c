"""Users and bucket ownership: a user cannot touch another user's buckets."""

from __future__ import annotations

import json
import subprocess
import time

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.conftest import ACCESS_KEY, REGION, SECRET_KEY, ServerProcess
from tests.support import run_admin


def admin(
    server: ServerProcess, *args: str, keys: tuple[str, str] = (ACCESS_KEY, SECRET_KEY)
) -> subprocess.CompletedProcess[str]:
    return run_admin(server.endpoint, *args, keys=keys, timeout=120)


def client(server: ServerProcess, access: str, secret: str):
    return boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        aws_access_key_id=access,
        aws_secret_access_key=secret,
        region_name=REGION,
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


def code(exc: pytest.ExceptionInfo[ClientError]) -> str:
    return exc.value.response["Error"]["Code"]


@pytest.fixture(scope="module")
def users(server: ServerProcess):
    made = []
    for name in ("alice", "bob"):
        out = admin(server, "user", "add", name)
        assert out.returncode == 0, out.stderr
        made.append(json.loads(out.stdout))
    yield made
    for user in made:
        admin(server, "user", "remove", user["access_key"])


def test_users_are_listed_and_can_sign(server: ServerProcess, users: list[dict]) -> None:
    listed = json.loads(admin(server, "user", "list").stdout)
    assert {"alice", "bob"} <= {u["name"] for u in listed}
    alice = client(server, users[0]["access_key"], users[0]["secret_key"])
    assert alice.list_buckets()["Buckets"] == []


def test_a_user_cannot_touch_another_users_bucket(server: ServerProcess, users: list[dict]) -> None:
    alice = client(server, users[0]["access_key"], users[0]["secret_key"])
    bob = client(server, users[1]["access_key"], users[1]["secret_key"])
    alice.create_bucket(Bucket="alice-private")
    alice.put_object(Bucket="alice-private", Key="secret.txt", Body=b"alice's")
    bob.create_bucket(Bucket="bob-bucket")
    try:
        for call in (
            lambda: bob.get_object(Bucket="alice-private", Key="secret.txt"),
            lambda: bob.put_object(Bucket="alice-private", Key="x", Body=b"bob was here"),
            lambda: bob.list_objects_v2(Bucket="alice-private"),
            lambda: bob.delete_object(Bucket="alice-private", Key="secret.txt"),
            lambda: bob.delete_bucket(Bucket="alice-private"),
            lambda: bob.copy_object(
                Bucket="bob-bucket", Key="stolen", CopySource={"Bucket": "alice-private", "Key": "secret.txt"}
            ),
        ):
            with pytest.raises(ClientError) as exc:
                call()
            assert code(exc) == "AccessDenied"
        with pytest.raises(ClientError) as exc:
            bob.create_bucket(Bucket="alice-private")
        assert code(exc) == "BucketAlreadyExists"
        assert [b["Name"] for b in bob.list_buckets()["Buckets"]] == ["bob-bucket"]
        assert [b["Name"] for b in alice.list_buckets()["Buckets"]] == ["alice-private"]
        assert alice.get_object(Bucket="alice-private", Key="secret.txt")["Body"].read() == b"alice's"
        # Users are not administrators.
        out = admin(server, "status", keys=(users[1]["access_key"], users[1]["secret_key"]))
        assert out.returncode != 0 and "AccessDenied" in out.stderr
    finally:
        alice.delete_object(Bucket="alice-private", Key="secret.txt")
        alice.delete_bucket(Bucket="alice-private")
        bob.delete_bucket(Bucket="bob-bucket")


def test_removed_user_can_no_longer_sign(server: ServerProcess) -> None:
    made = json.loads(admin(server, "user", "add", "carol").stdout)
    carol = client(server, made["access_key"], made["secret_key"])
    carol.list_buckets()
    assert admin(server, "user", "remove", made["access_key"]).returncode == 0
    time.sleep(1.2)  # credentials are cached for a second
    with pytest.raises(ClientError) as exc:
        carol.list_buckets()
    assert code(exc) == "InvalidAccessKeyId"
