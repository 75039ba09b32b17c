"""RestoreObject of a noncurrent version (by versionId), against a real server on a test clock.

The restored copy belongs to the version named: HEAD/GET of that version show and read it until
its expiry, the lifecycle daemon makes and expires it, and the key's current version is never
touched. Runs on SQLite and with `--catalog=postgresql`.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.conftest import catalog_query
from tests.lifecycle.conftest import Tiered, error_code

POLL_SECONDS = 60.0


def version_error(ts: Tiered, bucket: str, key: str, version_id: str) -> str:
    with pytest.raises(ClientError) as err:
        ts.get(bucket, key, VersionId=version_id)
    return error_code(err.value)


def head_version(ts: Tiered, bucket: str, key: str, version_id: str) -> dict[str, Any]:
    head: dict[str, Any] = ts.s3.head_object(Bucket=bucket, Key=key, VersionId=version_id)
    return head


def version_restore_column(ts: Tiered, bucket: str, key: str, version_id: str) -> Any:
    """The noncurrent version's restore state as the catalog holds it (read-only query)."""
    ((raw,),) = catalog_query(
        ts.server.data_dir,
        "SELECT restore FROM object_versions WHERE bucket = ? AND key = ? AND version_id = ?",
        (bucket, key, version_id),
    )
    return json.loads(raw) if raw else None


def test_restore_of_a_noncurrent_version(spawn: Callable[..., Tiered]) -> None:
    ts = spawn()
    b = "restore-versions"
    ts.s3.create_bucket(Bucket=b)
    ts.s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
    old = os.urandom(300_000)
    new = os.urandom(1000)
    v1 = ts.s3.put_object(Bucket=b, Key="ckpt", Body=old, StorageClass="GLACIER")["VersionId"]
    assert ts.tier(b, "ckpt") == "cold"
    v2 = ts.s3.put_object(Bucket=b, Key="ckpt", Body=new)["VersionId"]
    assert v1 != v2

    def current_untouched() -> None:
        head = ts.s3.head_object(Bucket=b, Key="ckpt")
        assert head["VersionId"] == v2 and "Restore" not in head
        assert head["ResponseMetadata"]["HTTPHeaders"]["x-tierstore-tier"] == "hot"
        assert ts.get(b, "ckpt") == new
        assert ts.obj(b, "ckpt")["restore"] is None

    # v1 is noncurrent and archived: not readable, and HEAD says nothing about a restore.
    assert version_error(ts, b, "ckpt", v1) == "InvalidObjectState"
    assert "Restore" not in head_version(ts, b, "ckpt", v1)
    with pytest.raises(ClientError) as err:
        ts.s3.restore_object(Bucket=b, Key="ckpt", VersionId=v2, RestoreRequest={"Days": 1})
    assert error_code(err.value) == "InvalidObjectState", "the current version is not archived"
    with pytest.raises(ClientError) as err:
        ts.s3.restore_object(Bucket=b, Key="ckpt", VersionId="A" * 32, RestoreRequest={"Days": 1})
    assert error_code(err.value) == "NoSuchVersion"

    answer = ts.s3.restore_object(Bucket=b, Key="ckpt", VersionId=v1, RestoreRequest={"Days": 2})
    assert answer["ResponseMetadata"]["HTTPStatusCode"] == 202
    current_untouched()
    # RestoreObject woke the daemon: the copy appears without anyone running a pass.
    deadline = time.monotonic() + POLL_SECONDS
    head = head_version(ts, b, "ckpt", v1)
    while head.get("Restore", "").startswith('ongoing-request="true"') and time.monotonic() < deadline:
        time.sleep(0.2)
        head = head_version(ts, b, "ckpt", v1)
    assert head["Restore"].startswith('ongoing-request="false", expiry-date="'), head.get("Restore")
    assert head["VersionId"] == v1 and head["StorageClass"] == "GLACIER"
    assert head["ResponseMetadata"]["HTTPHeaders"]["x-tierstore-tier"] == "cold", "the version stays archived"
    got = ts.get(b, "ckpt", VersionId=v1)
    assert hashlib.md5(got).hexdigest() == hashlib.md5(old).hexdigest() and got == old
    assert ts.get(b, "ckpt", VersionId=v1, Range="bytes=1000-1999") == old[1000:2000]
    first = version_restore_column(ts, b, "ckpt", v1)
    assert first["tier"] == "warm" and not first["ongoing"] and first["segments"]
    current_untouched()
    checked = ts.admin("fsck")  # the version's data, its restored copy and the current version's data
    assert checked["clean"] and checked["blobs"] == 2 + len(first["segments"]), checked

    # Asking again while restored: 200 and a later expiry, same bytes.
    answer = ts.s3.restore_object(Bucket=b, Key="ckpt", VersionId=v1, RestoreRequest={"Days": 3})
    assert answer["ResponseMetadata"]["HTTPStatusCode"] == 200
    extended = version_restore_column(ts, b, "ckpt", v1)
    assert extended["expiry"] == first["expiry"] + 86400
    assert extended["segments"] == first["segments"], "the copy is kept, not made again"
    assert head_version(ts, b, "ckpt", v1)["Restore"] != head["Restore"]

    ts.advance(3)  # past the first expiry, not the extended one
    ts.run_pass()
    assert ts.get(b, "ckpt", VersionId=v1) == old, "the extension holds"
    current_untouched()

    ts.advance(1.5)
    report = ts.run_pass()
    assert report["restores_expired"] == 1
    assert "Restore" not in head_version(ts, b, "ckpt", v1)
    assert version_error(ts, b, "ckpt", v1) == "InvalidObjectState"
    assert version_restore_column(ts, b, "ckpt", v1) is None
    # The copy's blobs were handed to the collector; the version's own data was not.
    copy_ids = [s["id"] for s in first["segments"]]
    assert not catalog_query(
        ts.server.data_dir,
        f"SELECT data_id FROM blobs WHERE data_id IN ({','.join('?' * len(copy_ids))})",
        tuple(copy_ids),
    )
    assert len(catalog_query(
        ts.server.data_dir,
        f"SELECT data_id FROM garbage WHERE data_id IN ({','.join('?' * len(copy_ids))})",
        tuple(copy_ids),
    )) == len(copy_ids)  # fmt: skip
    current_untouched()

    # The archived version itself is intact and can be restored again.
    ts.s3.restore_object(Bucket=b, Key="ckpt", VersionId=v1, RestoreRequest={"Days": 1})
    ts.run_pass()
    assert ts.get(b, "ckpt", VersionId=v1) == old
    current_untouched()


def test_a_restored_current_version_keeps_its_copy_when_overwritten(spawn: Callable[..., Tiered]) -> None:
    """The restore follows the version: demoted to noncurrent by an overwrite, it stays readable
    by versionId until its expiry, and then the daemon expires it from the version's row."""
    ts = spawn()
    b = "restore-demoted"
    ts.s3.create_bucket(Bucket=b)
    ts.s3.put_bucket_versioning(Bucket=b, VersioningConfiguration={"Status": "Enabled"})
    old = os.urandom(50_000)
    v1 = ts.s3.put_object(Bucket=b, Key="k", Body=old, StorageClass="GLACIER")["VersionId"]
    ts.s3.restore_object(Bucket=b, Key="k", RestoreRequest={"Days": 1})
    ts.run_pass()
    assert ts.get(b, "k") == old
    ts.s3.put_object(Bucket=b, Key="k", Body=b"new")
    assert head_version(ts, b, "k", v1)["Restore"].startswith('ongoing-request="false"')
    assert ts.get(b, "k", VersionId=v1) == old
    assert ts.get(b, "k") == b"new" and "Restore" not in ts.s3.head_object(Bucket=b, Key="k")
    ts.advance(2.5)
    assert ts.run_pass()["restores_expired"] == 1
    assert version_error(ts, b, "k", v1) == "InvalidObjectState"
    assert ts.get(b, "k") == b"new"
