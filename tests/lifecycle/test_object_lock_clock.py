"""Object Lock retention judged on the store's clock: the one PUT's checks of a retain-until date
read, and the one lifecycle ages versions by. On a `--test-clock` server, running the clock past
a version's RetainUntilDate unlocks it for DeleteObject, DeleteObjects and PutObjectRetention; a
production server's clock is wall time and cannot be advanced (tiering/clock.py)."""

from __future__ import annotations

import datetime as dt
import os

import pytest
from botocore.exceptions import ClientError

from tests.lifecycle.conftest import DAY, Tiered, error_code


def locked_bucket(ts: Tiered, name: str) -> str:
    bucket = f"{name}-{os.getpid()}"
    ts.s3.create_bucket(Bucket=bucket, ObjectLockEnabledForBucket=True)
    return bucket


def store_now(ts: Tiered) -> float:
    return float(ts.admin("lifecycle", "status")["clock"]["now"])


def until(ts: Tiered, days: float) -> dt.datetime:
    """A retain-until date `days` after the store's now (not the wall clock's)."""
    return dt.datetime.fromtimestamp(store_now(ts) + days * DAY, dt.UTC)


def refused(ts: Tiered, **kwargs: object) -> str:
    with pytest.raises(ClientError) as err:
        ts.s3.delete_object(**kwargs)
    return error_code(err.value)


def test_deletes_are_refused_until_the_store_clock_passes_retain_until(shared: Tiered) -> None:
    ts = shared
    bucket = locked_bucket(ts, "lock-clock")
    ts.s3.put_object_lock_configuration(
        Bucket=bucket,
        ObjectLockConfiguration={
            "ObjectLockEnabled": "Enabled",
            "Rule": {"DefaultRetention": {"Mode": "COMPLIANCE", "Days": 2}},
        },
    )
    by_default = ts.s3.put_object(Bucket=bucket, Key="default", Body=b"d")["VersionId"]
    governed = ts.s3.put_object(
        Bucket=bucket,
        Key="gov",
        Body=b"g",
        ObjectLockMode="GOVERNANCE",
        ObjectLockRetainUntilDate=until(ts, 3),
    )["VersionId"]
    in_batch = ts.s3.put_object(Bucket=bucket, Key="batch", Body=b"b")["VersionId"]

    assert refused(ts, Bucket=bucket, Key="default", VersionId=by_default) == "AccessDenied"
    assert refused(ts, Bucket=bucket, Key="gov", VersionId=governed) == "AccessDenied"
    with pytest.raises(ClientError) as err:  # COMPLIANCE cannot be shortened while in force
        ts.s3.put_object_retention(
            Bucket=bucket,
            Key="default",
            VersionId=by_default,
            Retention={"Mode": "COMPLIANCE", "RetainUntilDate": until(ts, 1)},
        )
    assert error_code(err.value) == "AccessDenied"

    ts.advance(2.5)  # past the default retention (2 days), not the GOVERNANCE one (3 days)
    ts.s3.delete_object(Bucket=bucket, Key="default", VersionId=by_default)
    assert refused(ts, Bucket=bucket, Key="gov", VersionId=governed) == "AccessDenied"
    answer = ts.s3.delete_objects(
        Bucket=bucket, Delete={"Objects": [{"Key": "batch", "VersionId": in_batch}]}
    )
    assert [d["VersionId"] for d in answer.get("Deleted", [])] == [in_batch] and not answer.get("Errors")

    ts.advance(1)
    ts.s3.delete_object(Bucket=bucket, Key="gov", VersionId=governed)
    assert "Versions" not in ts.s3.list_object_versions(Bucket=bucket)


def test_a_retention_that_ran_out_on_the_store_clock_can_be_replaced(shared: Tiered) -> None:
    ts = shared
    bucket = locked_bucket(ts, "lock-clock-retention")
    version = ts.s3.put_object(
        Bucket=bucket,
        Key="k",
        Body=b"k",
        ObjectLockMode="COMPLIANCE",
        ObjectLockRetainUntilDate=until(ts, 1),
    )["VersionId"]
    ts.advance(1.5)
    # A date between the wall clock and the store's now is in the past for PUT's check...
    with pytest.raises(ClientError) as err:
        ts.s3.put_object_retention(
            Bucket=bucket,
            Key="k",
            VersionId=version,
            Retention={"Mode": "GOVERNANCE", "RetainUntilDate": until(ts, -0.2)},
        )
    assert error_code(err.value) == "InvalidArgument"
    # ...and the expired COMPLIANCE retention no longer binds: it may become a GOVERNANCE one.
    ts.s3.put_object_retention(
        Bucket=bucket,
        Key="k",
        VersionId=version,
        Retention={"Mode": "GOVERNANCE", "RetainUntilDate": until(ts, 1)},
    )
    assert (
        ts.s3.get_object_retention(Bucket=bucket, Key="k", VersionId=version)["Retention"]["Mode"]
        == "GOVERNANCE"
    )
    ts.s3.delete_object(Bucket=bucket, Key="k", VersionId=version, BypassGovernanceRetention=True)
