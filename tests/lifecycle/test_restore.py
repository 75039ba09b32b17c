"""RestoreObject on archived objects: the whole life of a restored copy, against a real server."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from tests.conftest import catalog_query
from tests.lifecycle.conftest import Tiered, error_code
from tests.shards import Shard, shards_under

COLLECT_WAIT = 75.0  # retired data waits 30 s (readers may still hold it), then the collector runs


def archived(ts: Tiered, bucket: str, key: str, body: bytes) -> None:
    """PUT straight into GLACIER: the object lives on the cold tier."""
    ts.s3.put_object(Bucket=bucket, Key=key, Body=body, StorageClass="GLACIER")
    assert ts.tier(bucket, key) == "cold"
    assert ts.storage_class(bucket, key) == "GLACIER"


def restore_copy_ids(ts: Tiered, bucket: str, key: str) -> list[str]:
    """Data ids of the restored copy, read from the catalog file (read-only)."""
    ((raw,),) = catalog_query(
        ts.server.data_dir, "SELECT restore FROM objects WHERE bucket = ? AND key = ?", (bucket, key)
    )
    return [segment["id"] for segment in json.loads(raw)["segments"]] if raw else []


def shard_files(data_dir: Path, data_id: str) -> list[Shard]:
    """The blob's shards: files, or records in pack files."""
    return shards_under(data_dir / "domains", data_id)


def get_error(ts: Tiered, bucket: str, key: str) -> str:
    with pytest.raises(ClientError) as err:
        ts.get(bucket, key)
    return error_code(err.value)


def test_restore_lifecycle_of_an_archived_object(spawn: Callable[..., Tiered]) -> None:
    # The restore must still be running when the next requests arrive (RestoreObject wakes the
    # daemon at once): the mover is throttled to 50 kB/s past its 1 MiB burst, so the last
    # ~150 kB of this 1.2 MB object take about 3 s. (Unthrottled, a restore of packed shards can
    # finish before the HEAD that follows the 202.)
    ts = spawn(env={"TIERSTORE_LIFECYCLE_MOVER_BYTES_PER_SECOND": "50000"})
    b = "restore-lifecycle"
    ts.s3.create_bucket(Bucket=b)
    body = os.urandom(1_200_000)
    archived(ts, b, "frozen", body)
    assert get_error(ts, b, "frozen") == "InvalidObjectState"
    assert "Restore" not in ts.s3.head_object(Bucket=b, Key="frozen")

    answer = ts.s3.restore_object(Bucket=b, Key="frozen", RestoreRequest={"Days": 2})
    assert answer["ResponseMetadata"]["HTTPStatusCode"] == 202
    head = ts.s3.head_object(Bucket=b, Key="frozen")
    assert head["Restore"] == 'ongoing-request="true"'
    assert get_error(ts, b, "frozen") == "InvalidObjectState", "not readable before the copy is made"
    with pytest.raises(ClientError) as err:
        ts.s3.restore_object(Bucket=b, Key="frozen", RestoreRequest={"Days": 2})
    assert error_code(err.value) == "RestoreAlreadyInProgress"

    ts.run_pass()  # RestoreObject also woke the daemon: this pass starts after that one, if it ran
    assert ts.admin("lifecycle", "status")["mover"]["restores"] >= 1
    head = ts.s3.head_object(Bucket=b, Key="frozen")
    assert head["Restore"].startswith('ongoing-request="false", expiry-date="')
    assert head["StorageClass"] == "GLACIER"
    assert head["ResponseMetadata"]["HTTPHeaders"]["x-tierstore-tier"] == "cold", (
        "the object itself stays archived"
    )
    info = ts.obj(b, "frozen")
    assert info["tier"] == "cold" and info["restore"]["tier"] == "warm" and not info["restore"]["ongoing"]
    assert info["moves"][0]["reason"] == "restore"
    assert hashlib.md5(ts.get(b, "frozen")).hexdigest() == hashlib.md5(body).hexdigest()
    assert ts.get(b, "frozen", Range="bytes=1000-199999") == body[1000:200000]
    assert ts.get(b, "frozen", Range="bytes=-10") == body[-10:]
    first_expiry = info["restore"]["expiry"]

    # Asking again for a finished restore extends it: 200, a later expiry, same bytes.
    answer = ts.s3.restore_object(Bucket=b, Key="frozen", RestoreRequest={"Days": 3})
    assert answer["ResponseMetadata"]["HTTPStatusCode"] == 200
    extended = ts.obj(b, "frozen")["restore"]["expiry"]
    assert extended == first_expiry + 86400
    assert ts.s3.head_object(Bucket=b, Key="frozen")["Restore"] != head["Restore"]
    copy_ids = restore_copy_ids(ts, b, "frozen")
    assert copy_ids and all(shard_files(ts.server.data_dir, i) for i in copy_ids)

    ts.advance(3)  # past the first expiry, not the extended one
    ts.run_pass()
    assert ts.get(b, "frozen") == body, "the extension holds"

    ts.advance(1)
    report = ts.run_pass()
    assert report["restores_expired"] >= 1
    assert "Restore" not in ts.s3.head_object(Bucket=b, Key="frozen")
    assert get_error(ts, b, "frozen") == "InvalidObjectState"
    assert ts.obj(b, "frozen")["restore"] is None
    deadline = time.monotonic() + COLLECT_WAIT
    while any(shard_files(ts.server.data_dir, i) for i in copy_ids) and time.monotonic() < deadline:
        time.sleep(1)
    assert not any(shard_files(ts.server.data_dir, i) for i in copy_ids), (
        "the expired copy's bytes are collected"
    )
    # The archived object itself is intact and can be restored again.
    ts.s3.restore_object(Bucket=b, Key="frozen", RestoreRequest={"Days": 1})
    ts.run_pass()
    assert ts.get(b, "frozen") == body


def test_restore_is_refused_for_objects_that_are_not_archived(shared: Tiered, new_bucket) -> None:
    ts = shared
    b = new_bucket()
    for key, storage_class in (("std", "STANDARD"), ("ia", "STANDARD_IA"), ("express", "EXPRESS_ONEZONE")):
        ts.s3.put_object(Bucket=b, Key=key, Body=b"x" * 100, StorageClass=storage_class)
        with pytest.raises(ClientError) as err:
            ts.s3.restore_object(Bucket=b, Key=key, RestoreRequest={"Days": 1})
        assert error_code(err.value) == "InvalidObjectState", key
    with pytest.raises(ClientError) as err:
        ts.s3.restore_object(Bucket=b, Key="missing", RestoreRequest={"Days": 1})
    assert error_code(err.value) == "NoSuchKey"
    archived(ts, b, "frozen", b"f" * 100)
    with pytest.raises(ClientError) as err:
        ts.s3.restore_object(Bucket=b, Key="frozen", RestoreRequest={"Days": 0})
    assert error_code(err.value) in ("InvalidArgument", "MalformedXML")


def test_overwrite_of_a_restored_object_drops_the_copy(shared: Tiered, new_bucket) -> None:
    ts = shared
    b = new_bucket()
    archived(ts, b, "k", b"old" * 1000)
    ts.s3.restore_object(Bucket=b, Key="k", RestoreRequest={"Days": 5})
    ts.run_pass()
    assert ts.get(b, "k") == b"old" * 1000
    ts.s3.put_object(Bucket=b, Key="k", Body=b"new" * 1000)
    assert ts.tier(b, "k") == "hot"
    assert "Restore" not in ts.s3.head_object(Bucket=b, Key="k")
    assert ts.get(b, "k") == b"new" * 1000
    ts.run_pass()
    assert ts.get(b, "k") == b"new" * 1000 and ts.obj(b, "k")["restore"] is None


def test_restore_of_a_transitioned_object_and_deep_archive(shared: Tiered, new_bucket) -> None:
    """An object a rule archived restores like one written to GLACIER; DEEP_ARCHIVE too."""
    ts = shared
    b = new_bucket()
    body = os.urandom(50_000)
    ts.s3.put_object(Bucket=b, Key="rule/k", Body=body)
    ts.s3.put_object(Bucket=b, Key="deep", Body=body, StorageClass="DEEP_ARCHIVE")
    ts.s3.put_bucket_lifecycle_configuration(
        Bucket=b,
        LifecycleConfiguration={
            "Rules": [
                {
                    "ID": "g",
                    "Filter": {"Prefix": "rule/"},
                    "Status": "Enabled",
                    "Transitions": [{"Days": 1, "StorageClass": "GLACIER"}],
                }
            ]
        },
    )
    ts.advance(2)
    ts.run_pass()
    assert ts.tier(b, "rule/k") == "cold" and ts.storage_class(b, "rule/k") == "GLACIER"
    assert ts.tier(b, "deep") == "cold" and ts.storage_class(b, "deep") == "DEEP_ARCHIVE"
    for key in ("rule/k", "deep"):
        assert get_error(ts, b, key) == "InvalidObjectState"
        ts.s3.restore_object(
            Bucket=b, Key=key, RestoreRequest={"Days": 1, "GlacierJobParameters": {"Tier": "Bulk"}}
        )
    ts.run_pass()
    for key in ("rule/k", "deep"):
        assert ts.get(b, key) == body
        assert ts.tier(b, key) == "cold"


def test_a_restored_copy_is_healed(shared: Tiered, new_bucket) -> None:
    """A restored copy lives for days on an erasure-coded tier: a lost shard of it is rebuilt by
    heal like any other blob's (heal once skipped it: the catalog's blob lookup did not look at
    restored copies, so heal took the copy for deleted)."""
    ts = shared
    b = new_bucket()
    body = os.urandom(900_000)
    archived(ts, b, "k", body)
    ts.s3.restore_object(Bucket=b, Key="k", RestoreRequest={"Days": 5})
    ts.run_pass()
    (copy,) = restore_copy_ids(ts, b, "k")
    shards = shard_files(ts.server.data_dir, copy)
    whole = len(shards)
    victim = next((s for s in shards if not s.packed), shards[0])
    victim.destroy()
    if not victim.packed:
        assert len(shard_files(ts.server.data_dir, copy)) == whole - 1
    ts.admin("heal", "--wait")
    shards = shard_files(ts.server.data_dir, copy)
    assert len(shards) == whole
    if not victim.packed:
        assert victim.file.exists() or any(s.index == victim.index for s in shards)
    assert ts.obj(b, "k")["restore"]["tier"] and ts.get(b, "k") == body
