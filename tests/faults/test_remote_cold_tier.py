"""The cold tier in a remote S3 bucket: tierstore B archives into a bucket on tierstore A.

A plays "the cloud": an ordinary tierstore with its default config. B's `[tiers.cold]` uses the
"s3" backend pointed at a bucket on A. Everything runs as real processes over loopback; what B
stores is checked from A's side (its bucket listing), and A is finally stopped under B.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.conftest import ACCESS_KEY, SECRET_KEY, ServerProcess, free_port, make_client
from tests.faults.conftest import pattern
from tests.support import admin

MiB = 1024 * 1024
REMOTE_BUCKET = "remote-cold"
PREFIX = "b-cold/"
PART_SIZE = 8 * MiB
BUCKET = "archive"


def body(seed: int, size: int) -> bytes:
    return b"".join(pattern(seed, size))


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


@dataclass
class Pair:
    remote: ServerProcess  # A: "the cloud"
    local: ServerProcess  # B: its cold tier lives in A's bucket
    a: Any  # boto3 clients
    b: Any

    def admin(self, *args: str) -> Any:
        return admin(self.local.endpoint, *args, timeout=120)

    def remote_blobs(self) -> dict[str, int]:
        """Key → size of everything in A's bucket."""
        found: dict[str, int] = {}
        for page in self.a.get_paginator("list_objects_v2").paginate(Bucket=REMOTE_BUCKET):
            for obj in page.get("Contents", []):
                found[obj["Key"]] = obj["Size"]
        return found

    def wait_remote(self, predicate: Any, what: str, timeout: float = 20.0) -> dict[str, int]:
        deadline = time.monotonic() + timeout
        while True:
            blobs = self.remote_blobs()
            if predicate(blobs):
                return blobs
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; remote holds {blobs}")
            time.sleep(0.25)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    root = tmp_path_factory.mktemp("remote-cold")
    remote = ServerProcess(root / "a" / "data", free_port())
    local: ServerProcess | None = None
    (root / "a").mkdir()
    (root / "b").mkdir()
    try:
        remote.start()
        a = make_client(remote.endpoint)
        a.create_bucket(Bucket=REMOTE_BUCKET)
        config = root / "b.toml"
        config.write_text(
            "[lifecycle]\n"
            "interval_seconds = 3600\n"  # passes run when the test says so
            "[tiers.cold]\n"
            'backend = "s3"\n'
            f'endpoint = "{remote.endpoint}"\n'
            f'bucket = "{REMOTE_BUCKET}"\n'
            f'access_key = "{ACCESS_KEY}"\n'
            f'secret_key = "{SECRET_KEY}"\n'
            f'prefix = "{PREFIX}"\n'
            f"part_size = {PART_SIZE}\n"
            "connect_timeout = 2\n"
            "max_attempts = 2\n"
        )
        local = ServerProcess(
            root / "b" / "data",
            free_port(),
            extra_args=["--config", str(config), "--test-clock"],
            env={"TIERSTORE_RETIRE_GRACE_SECONDS": "0.5"},
        )
        local.start()
        b = make_client(local.endpoint, read_timeout=60, connect_timeout=5)
        b.create_bucket(Bucket=BUCKET)
        yield Pair(remote, local, a, b)
    finally:
        if local is not None:
            local.kill()
        remote.kill()


def _archived(pair: Pair, key: str) -> None:
    with pytest.raises(ClientError) as caught:
        pair.b.get_object(Bucket=BUCKET, Key=key)
    assert caught.value.response["Error"]["Code"] == "InvalidObjectState", caught.value.response


def _restore(pair: Pair, *keys: str) -> None:
    for key in keys:
        # 202 while the copy is made (the daemon may pick it up at once: no check of "true").
        reply = pair.b.restore_object(Bucket=BUCKET, Key=key, RestoreRequest={"Days": 5})
        assert reply["ResponseMetadata"]["HTTPStatusCode"] == 202
    pair.admin("lifecycle", "run", "--wait")
    for key in keys:
        assert 'ongoing-request="false"' in pair.b.head_object(Bucket=BUCKET, Key=key)["Restore"]


def test_glacier_objects_live_in_the_remote_bucket(pair: Pair) -> None:
    status = pair.admin("status")
    assert {t["name"]: t["backend"] for t in status["tiers"]}["cold"] == "s3"

    objects = {"g/empty": b"", "g/one-kib": body(1, 1024), "g/forty-mib": body(2, 40 * MiB)}
    before = pair.remote_blobs()
    for key, data in objects.items():
        pair.b.put_object(Bucket=BUCKET, Key=key, Body=data, StorageClass="GLACIER")
    # A B-side multipart upload into GLACIER: each part is its own blob on the remote.
    parts_data = [body(3, 5 * MiB), body(4, 5 * MiB), body(5, 123)]
    upload = pair.b.create_multipart_upload(Bucket=BUCKET, Key="g/multipart", StorageClass="GLACIER")
    parts = []
    for number, data in enumerate(parts_data, 1):
        reply = pair.b.upload_part(
            Bucket=BUCKET, Key="g/multipart", UploadId=upload["UploadId"], PartNumber=number, Body=data
        )
        parts.append({"PartNumber": number, "ETag": reply["ETag"]})
    pair.b.complete_multipart_upload(
        Bucket=BUCKET, Key="g/multipart", UploadId=upload["UploadId"], MultipartUpload={"Parts": parts}
    )
    objects["g/multipart"] = b"".join(parts_data)

    # The bytes are on A, under the prefix, named by data id (no user key ever reaches A).
    new = {k: s for k, s in pair.remote_blobs().items() if k not in before}
    assert all(k.startswith(PREFIX) and "/" not in k[len(PREFIX) :] for k in new), new
    assert sorted(new.values()) == sorted([0, 1024, 40 * MiB, 5 * MiB, 5 * MiB, 123])
    assert not any(part in k for k in new for part in ("empty", "kib", "mib", "multipart"))
    # The 40 MiB blob went up as a remote multipart upload of 8 MiB parts: A's ETag says 5 parts.
    (big,) = [k for k, s in new.items() if s == 40 * MiB]
    assert pair.a.head_object(Bucket=REMOTE_BUCKET, Key=big)["ETag"].strip('"').endswith("-5")

    for key in objects:
        head = pair.b.head_object(Bucket=BUCKET, Key=key)
        assert head["StorageClass"] == "GLACIER" and head["ContentLength"] == len(objects[key])
        _archived(pair, key)

    # Restore: B copies each object back from A into its restore tier; GETs are byte-exact.
    _restore(pair, *objects)
    for key, data in objects.items():
        got = pair.b.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        assert (len(got), md5(got)) == (len(data), md5(data)), key
    got = pair.b.get_object(Bucket=BUCKET, Key="g/forty-mib", Range="bytes=8388600-8388615")["Body"].read()
    assert got == objects["g/forty-mib"][8388600:8388616]

    # DELETE on B: the collector removes the remote blob (retire grace shortened for the test).
    (small,) = [k for k, s in new.items() if s == 1024]
    pair.b.delete_object(Bucket=BUCKET, Key="g/one-kib")
    pair.wait_remote(lambda blobs: small not in blobs, f"{small} to be deleted on the remote")
    pair.b.delete_object(Bucket=BUCKET, Key="g/multipart")
    pair.wait_remote(
        lambda blobs: not any(s == 5 * MiB for k, s in blobs.items() if k in new),
        "the multipart object's part blobs to be deleted on the remote",
    )


def test_lifecycle_transition_moves_hot_bytes_to_the_remote(pair: Pair) -> None:
    data = body(6, 3 * MiB + 7)
    pair.b.put_object(Bucket=BUCKET, Key="t/aging", Body=data, StorageClass="STANDARD")
    before = pair.remote_blobs()
    pair.b.put_bucket_lifecycle_configuration(
        Bucket=BUCKET,
        LifecycleConfiguration={
            "Rules": [
                {
                    "ID": "archive-t",
                    "Filter": {"Prefix": "t/"},
                    "Status": "Enabled",
                    "Transitions": [{"Days": 0, "StorageClass": "GLACIER"}],
                }
            ]
        },
    )
    pair.admin("clock", "advance", "2")
    pair.admin("lifecycle", "run", "--wait")
    head = pair.b.head_object(Bucket=BUCKET, Key="t/aging")
    assert head["StorageClass"] == "GLACIER"
    new = {k: s for k, s in pair.remote_blobs().items() if k not in before}
    assert list(new.values()) == [len(data)], new
    (key,) = new
    assert pair.a.get_object(Bucket=REMOTE_BUCKET, Key=key)["Body"].read() == data
    _archived(pair, "t/aging")
    pair.b.delete_bucket_lifecycle(Bucket=BUCKET)


def test_remote_down_restored_reads_work_and_new_archives_fail_cleanly(pair: Pair) -> None:
    data = body(7, 9 * MiB)
    pair.b.put_object(Bucket=BUCKET, Key="d/restored", Body=data, StorageClass="GLACIER")
    pair.b.put_object(Bucket=BUCKET, Key="d/archived", Body=b"still cold", StorageClass="GLACIER")
    _restore(pair, "d/restored")

    pair.remote.stop()  # the cloud goes away

    # The restored copy is local: reads of it, and HEADs, do not need the remote.
    got = pair.b.get_object(Bucket=BUCKET, Key="d/restored")["Body"].read()
    assert md5(got) == md5(data)
    assert pair.b.head_object(Bucket=BUCKET, Key="d/archived")["StorageClass"] == "GLACIER"
    _archived(pair, "d/archived")

    # A new archive write fails with an S3 error: no 500, and no hang (the client's read timeout
    # would end a hang with ReadTimeoutError, not the ClientError asked for here).
    with pytest.raises(ClientError) as caught:
        pair.b.put_object(Bucket=BUCKET, Key="d/new", Body=body(8, 2 * MiB), StorageClass="GLACIER")
    meta = caught.value.response["ResponseMetadata"]
    assert (meta["HTTPStatusCode"], caught.value.response["Error"]["Code"]) == (503, "ServiceUnavailable")
    with pytest.raises(ClientError) as missing:
        pair.b.head_object(Bucket=BUCKET, Key="d/new")
    assert missing.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404

    # Hot writes are unaffected; the server itself is fine.
    pair.b.put_object(Bucket=BUCKET, Key="d/hot", Body=b"hot")
    assert pair.b.get_object(Bucket=BUCKET, Key="d/hot")["Body"].read() == b"hot"
    assert pair.local.proc is not None and pair.local.proc.poll() is None
