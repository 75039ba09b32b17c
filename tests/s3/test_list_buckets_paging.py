"""ListBuckets with MaxBuckets / ContinuationToken / Prefix / BucketRegion, as S3 pages it."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.s3.conftest import xml_error_code


@pytest.fixture
def named(s3) -> Iterator[tuple[str, list[str]]]:
    """Seven buckets under one fresh prefix (one of them in eu-west-1); removed afterwards."""
    prefix = f"page-{os.getpid()}-{os.urandom(3).hex()}-"
    names = [f"{prefix}{i:02d}" for i in range(7)]
    for i, name in enumerate(names):
        config = {"CreateBucketConfiguration": {"LocationConstraint": "eu-west-1"}} if i == 3 else {}
        s3.create_bucket(Bucket=name, **config)
    yield prefix, names
    for name in names:
        s3.delete_bucket(Bucket=name)


def test_pages_of_max_buckets_cover_the_prefix(s3, named) -> None:
    prefix, names = named
    seen: list[str] = []
    kwargs: dict[str, object] = {"MaxBuckets": 3, "Prefix": prefix}
    for _ in range(10):
        page = s3.list_buckets(**kwargs)
        assert page["Prefix"] == prefix
        assert len(page["Buckets"]) <= 3
        seen += [b["Name"] for b in page["Buckets"]]
        if "ContinuationToken" not in page:
            break
        kwargs["ContinuationToken"] = page["ContinuationToken"]
    assert seen == names
    # The exact last page has no token; everything fits in one page of 7.
    whole = s3.list_buckets(MaxBuckets=7, Prefix=prefix)
    assert [b["Name"] for b in whole["Buckets"]] == names and "ContinuationToken" not in whole
    assert s3.list_buckets(Prefix=prefix + "zz")["Buckets"] == []
    # Without paging parameters, every bucket, as before.
    everything = [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert set(names) <= set(everything) and "ContinuationToken" not in s3.list_buckets()


def test_bucket_region_filters(s3, named) -> None:
    prefix, names = named
    page = s3.list_buckets(Prefix=prefix, BucketRegion="eu-west-1", MaxBuckets=100)
    assert [(b["Name"], b["BucketRegion"]) for b in page["Buckets"]] == [(names[3], "eu-west-1")]
    others = s3.list_buckets(Prefix=prefix, BucketRegion="us-east-1", MaxBuckets=100)["Buckets"]
    assert [b["Name"] for b in others] == names[:3] + names[4:]


@pytest.mark.parametrize(
    "query", ["max-buckets=0", "max-buckets=10001", "max-buckets=x", "continuation-token=%25%25%25"]
)
def test_bad_paging_parameters(raw, query: str) -> None:
    response = raw("GET", "/", query=query)
    assert response.status_code == 400
    assert xml_error_code(response) == "InvalidArgument"
