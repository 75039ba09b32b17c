"""Bucket lifecycle configuration through boto3: read back as written, out-of-range values refused."""

from __future__ import annotations

from typing import Any

import pytest


def rule(**fields: Any) -> dict[str, Any]:
    return {"ID": "r", "Status": "Enabled", "Expiration": {"Days": 30}, **fields}


@pytest.mark.parametrize(
    "selector",
    [
        {"Prefix": "legacy/"},  # the rule-level Prefix of the 2006 API, still what some tools send
        {"Filter": {}},
        {"Filter": {"Prefix": ""}},
        {"Filter": {"Prefix": "logs/"}},
        {"Filter": {"And": {"Prefix": "a/", "Tags": [{"Key": "k", "Value": "v"}]}}},
        {"Filter": {"ObjectSizeGreaterThan": 1024}},
    ],
)
def test_lifecycle_reads_back_as_written(s3, bucket, selector: dict[str, Any]) -> None:
    sent = [rule(**selector)]
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": sent})
    assert s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"] == sent


@pytest.mark.parametrize(
    ("action", "code"),
    [
        ({"Expiration": {"Days": 10**23}}, "MalformedXML"),
        ({"Expiration": {"Days": 2**31}}, "MalformedXML"),
        ({"Expiration": {"Days": 0}}, "InvalidArgument"),
        ({"Expiration": {"Days": -1}}, "InvalidArgument"),
        ({"Transitions": [{"Days": 10**23, "StorageClass": "GLACIER"}], "Expiration": None}, "MalformedXML"),
        ({"Transitions": [{"Days": -1, "StorageClass": "GLACIER"}], "Expiration": None}, "InvalidArgument"),
        (
            {"AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 10**23}, "Expiration": None},
            "MalformedXML",
        ),
    ],
)
def test_lifecycle_values_out_of_range_are_refused(
    s3, bucket, expect_error, action: dict[str, Any], code: str
) -> None:
    sent = {k: v for k, v in rule(Filter={}, **action).items() if v is not None}
    with expect_error(code, 400):
        s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": [sent]})
