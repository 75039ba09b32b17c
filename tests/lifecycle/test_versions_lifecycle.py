"""Lifecycle in versioned buckets: NoncurrentVersionTransition / NoncurrentVersionExpiration
(NoncurrentDays, NewerNoncurrentVersions), ExpiredObjectDeleteMarker, Expiration adding a delete
marker; and a noncurrent version that moved tiers surviving the loss of shard files."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.lifecycle.conftest import Tiered
from tests.shards import shards_under


def versioned(ts: Tiered, name: str) -> str:
    ts.s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    return name


def versions(ts: Tiered, bucket: str) -> tuple[list[tuple[str, str, bool]], list[tuple[str, str, bool]]]:
    listing = ts.s3.list_object_versions(Bucket=bucket)
    return (
        [(v["Key"], v["VersionId"], v["IsLatest"]) for v in listing.get("Versions", [])],
        [(m["Key"], m["VersionId"], m["IsLatest"]) for m in listing.get("DeleteMarkers", [])],
    )


def rules(ts: Tiered, bucket: str, *rules: dict[str, Any]) -> None:
    ts.s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": list(rules)})


def test_noncurrent_rules_keep_the_newest_and_move_the_rest(
    shared: Tiered, new_bucket: Callable[[], str]
) -> None:
    ts = shared
    bucket = versioned(ts, new_bucket())
    ids = [ts.s3.put_object(Bucket=bucket, Key="ckpt", Body=b"v%d" % n)["VersionId"] for n in range(4)]
    rules(
        ts,
        bucket,
        {
            "ID": "versions",
            "Filter": {"Prefix": ""},
            "Status": "Enabled",
            "NoncurrentVersionTransitions": [{"NoncurrentDays": 2, "StorageClass": "WARM"}],
            "NoncurrentVersionExpiration": {"NoncurrentDays": 10, "NewerNoncurrentVersions": 1},
        },
    )
    document = ts.s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"][0]
    assert document["NoncurrentVersionExpiration"] == {"NoncurrentDays": 10, "NewerNoncurrentVersions": 1}
    assert ts.run_pass()["noncurrent_transitions"] == 0  # nothing is old enough yet
    ts.advance(3)
    report = ts.run_pass()
    assert report["noncurrent_transitions"] == 3
    for version in ids[:3]:
        head = ts.s3.head_object(Bucket=bucket, Key="ckpt", VersionId=version)
        assert head["StorageClass"] == "WARM"
        assert ts.get(bucket, "ckpt", VersionId=version) == b"v%d" % ids.index(version)
    assert ts.s3.head_object(Bucket=bucket, Key="ckpt").get("StorageClass", "STANDARD") == "STANDARD"
    ts.advance(10)
    report = ts.run_pass()
    # One newer noncurrent version is kept whatever its age: v2 stays, v1 and v0 go.
    assert report["noncurrent_expired"] == 2
    assert [v[1] for v in versions(ts, bucket)[0]] == [ids[3], ids[2]]
    assert ts.get(bucket, "ckpt") == b"v3"


def test_expiration_adds_a_marker_and_lone_markers_go(shared: Tiered, new_bucket: Callable[[], str]) -> None:
    ts = shared
    bucket = versioned(ts, new_bucket())
    old = ts.s3.put_object(Bucket=bucket, Key="logs/a", Body=b"a")["VersionId"]
    ts.s3.put_object(Bucket=bucket, Key="gone", Body=b"x")
    ts.s3.delete_object(
        Bucket=bucket, Key="gone", VersionId=ts.s3.head_object(Bucket=bucket, Key="gone")["VersionId"]
    )
    marker = ts.s3.delete_object(Bucket=bucket, Key="gone")["VersionId"]  # a marker with nothing behind it
    rules(
        ts,
        bucket,
        {"ID": "expire", "Filter": {"Prefix": "logs/"}, "Status": "Enabled", "Expiration": {"Days": 1}},
        {
            "ID": "markers",
            "Filter": {"Prefix": ""},
            "Status": "Enabled",
            "Expiration": {"ExpiredObjectDeleteMarker": True},
        },
    )
    ts.advance(2)
    report = ts.run_pass()
    assert report["expired"] == 1 and report["markers_removed"] == 1
    found, markers = versions(ts, bucket)
    # Expiring the current version of a versioned key adds a marker: the data stays, noncurrent.
    assert found == [("logs/a", old, False)]
    assert [(k, latest) for k, _, latest in markers] == [("logs/a", True)]
    assert marker not in {m for _, m, _ in markers}
    assert ts.get(bucket, "logs/a", VersionId=old) == b"a"


def test_a_noncurrent_version_survives_a_tier_move_and_a_domain_loss(spawn: Callable[..., Tiered]) -> None:
    ts = spawn()
    bucket = "keep-versions"
    ts.s3.create_bucket(Bucket=bucket)
    versioned(ts, bucket)
    first = os.urandom(300_000)  # striped: above the small-object threshold
    v1 = ts.s3.put_object(Bucket=bucket, Key="ckpt", Body=first)["VersionId"]
    ts.s3.put_object(Bucket=bucket, Key="ckpt", Body=b"second")
    rules(
        ts,
        bucket,
        {
            "ID": "cool",
            "Filter": {"Prefix": ""},
            "Status": "Enabled",
            "NoncurrentVersionTransitions": [{"NoncurrentDays": 1, "StorageClass": "WARM"}],
        },
    )
    warm: Path = ts.server.data_dir / "domains" / "warm"
    before = set(shards_under(warm))
    ts.advance(2)
    assert ts.run_pass()["noncurrent_transitions"] == 1
    shards = [s for s in shards_under(warm) if s not in before]  # shard files or packed records
    assert len(shards) == 11  # k=8 + m=3 on distinct warm domains
    assert len({s.domain for s in shards}) == 11
    assert ts.s3.head_object(Bucket=bucket, Key="ckpt", VersionId=v1)["StorageClass"] == "WARM"
    for shard in shards[:3]:  # m domains lose the version's data
        shard.destroy()
    assert ts.get(bucket, "ckpt", VersionId=v1) == first  # rebuilt on the fly
    healed = ts.admin("heal", "--wait")
    assert (healed["lost_objects"], healed["degraded_objects"]) == (0, 0)
    assert {s.domain for s in shards_under(warm, shards[0].data_id)} == {s.domain for s in shards}
    checked = ts.admin("fsck")  # fsck checks the noncurrent version's data too: two blobs
    assert checked["clean"] and checked["blobs"] == 2
    assert ts.get(bucket, "ckpt", VersionId=v1) == first
    assert ts.get(bucket, "ckpt") == b"second"


def test_lifecycle_never_expires_a_locked_version(shared: Tiered) -> None:
    ts = shared
    bucket = f"lc-locked-{os.getpid()}"
    ts.s3.create_bucket(Bucket=bucket, ObjectLockEnabledForBucket=True)
    ts.s3.put_object_lock_configuration(
        Bucket=bucket,
        ObjectLockConfiguration={
            "ObjectLockEnabled": "Enabled",
            "Rule": {"DefaultRetention": {"Mode": "COMPLIANCE", "Days": 5}},
        },
    )
    v1 = ts.s3.put_object(Bucket=bucket, Key="ckpt", Body=b"one")["VersionId"]
    ts.s3.put_object(Bucket=bucket, Key="ckpt", Body=b"two")
    rules(
        ts,
        bucket,
        {
            "ID": "drop-old",
            "Filter": {"Prefix": ""},
            "Status": "Enabled",
            "NoncurrentVersionExpiration": {"NoncurrentDays": 1},
        },
    )
    ts.advance(2)
    report = ts.run_pass()
    # Due by the rule, but its retention (5 days, judged on the same clock) still holds.
    assert report["noncurrent_expired"] == 0
    assert ts.get(bucket, "ckpt", VersionId=v1) == b"one"
    ts.advance(4)  # past the retain-until date: the rule may act now
    assert ts.run_pass()["noncurrent_expired"] == 1
    assert [v for _, v, _ in versions(ts, bucket)[0]] != [] and v1 not in {
        v for _, v, _ in versions(ts, bucket)[0]
    }


def version_tier(ts: Tiered, bucket: str, key: str, version_id: str) -> str:
    head = ts.s3.head_object(Bucket=bucket, Key=key, VersionId=version_id)
    return str(head["ResponseMetadata"]["HTTPHeaders"]["x-tierstore-tier"])


def test_noncurrent_versions_follow_temperature_like_unclassed_objects(
    shared: Tiered, new_bucket: Callable[[], str]
) -> None:
    """No rule at all: temperature alone sends an idle noncurrent version to warm, as it does a
    current object without a class; the bucket's opt-out tag and a named class keep it hot. Reads
    by versionId warm that version, not the current one."""
    ts = shared
    on, off = versioned(ts, new_bucket()), versioned(ts, new_bucket())
    ts.s3.put_bucket_tagging(
        Bucket=off, Tagging={"TagSet": [{"Key": "tierstore:temperature", "Value": "off"}]}
    )
    body = os.urandom(300_000)
    old: dict[str, str] = {}
    for b in (on, off):
        old[b] = ts.s3.put_object(Bucket=b, Key="ckpt", Body=body)["VersionId"]
        ts.s3.put_object(Bucket=b, Key="ckpt", Body=b"newer")
    named = ts.s3.put_object(Bucket=on, Key="named", Body=b"n1", StorageClass="STANDARD")["VersionId"]
    ts.s3.put_object(Bucket=on, Key="named", Body=b"n2")
    read = ts.s3.put_object(Bucket=on, Key="read", Body=b"r1")["VersionId"]
    ts.s3.put_object(Bucket=on, Key="read", Body=b"r2")
    assert version_tier(ts, on, "ckpt", old[on]) == "hot"
    ts.advance(20)
    assert ts.get(on, "read", VersionId=read) == b"r1"  # its own read: idle 11 days, not 31, below
    ts.advance(11)  # past the idle time after which temperature demotes hot data to warm
    report = ts.run_pass()
    assert report["noncurrent_cooled"] >= 1
    assert version_tier(ts, on, "ckpt", old[on]) == "warm"
    head = ts.s3.head_object(Bucket=on, Key="ckpt", VersionId=old[on])
    assert head.get("StorageClass", "STANDARD") == "STANDARD", "temperature moves data, never the class"
    assert ts.get(on, "ckpt", VersionId=old[on]) == body
    assert version_tier(ts, on, "read", read) == "hot", "read by versionId 11 days ago: not idle enough"
    assert ts.tier(on, "read") == "warm", "reading the old version did not warm the current one"
    assert version_tier(ts, off, "ckpt", old[off]) == "hot", "the bucket opted out of temperature"
    assert ts.get(off, "ckpt", VersionId=old[off]) == body
    assert version_tier(ts, on, "named", named) == "hot", "a class the writer named stays on its tier"
    # Reads by versionId heat the cooled version back up to hot; the current one stays warm.
    assert ts.tier(on, "ckpt") == "warm"
    for _ in range(3):
        assert ts.get(on, "ckpt", VersionId=old[on]) == body
    ts.run_pass()
    assert version_tier(ts, on, "ckpt", old[on]) == "hot"
    assert ts.get(on, "ckpt", VersionId=old[on]) == body
    assert ts.tier(on, "ckpt") == "warm"
