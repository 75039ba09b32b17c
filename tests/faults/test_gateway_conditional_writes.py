"""Conditional writes across gateways: writers racing on one key through two gateways on one
PostgreSQL catalog — exactly one wins, every round (the check is in the catalog's transaction,
not in a gateway's memory)."""

from __future__ import annotations

import pytest

from tests.conftest import make_client
from tests.faults.conftest import Gateways
from tests.s3.test_conditional_writes import race, race_rounds

pytestmark = pytest.mark.postgresql


def test_racing_conditional_writers_through_two_gateways(gateways: Gateways) -> None:
    a, b = gateways(2)
    s3 = make_client(a.endpoint)
    s3.create_bucket(Bucket="race")
    # Writers alternate between the gateways: four through each.
    race_rounds([a.endpoint, b.endpoint], s3, "race", rounds=5, writers=8)
    # What won is what both gateways serve.
    other = make_client(b.endpoint)
    for n in range(5):
        assert other.get_object(Bucket="race", Key=f"race-{n}")["Body"].read() == (
            s3.get_object(Bucket="race", Key=f"race-{n}")["Body"].read()
        )


def test_conditional_delete_and_write_through_two_gateways(gateways: Gateways) -> None:
    a, b = gateways(2)
    s3 = make_client(a.endpoint)
    s3.create_bucket(Bucket="race")
    for n in range(5):
        etag = s3.put_object(Bucket="race", Key="k", Body=b"old")["ETag"]

        def act(client, i: int, etag: str = etag, n: int = n) -> None:
            if i == 0:
                client.delete_object(Bucket="race", Key="k", IfMatch=etag)
            else:
                client.put_object(Bucket="race", Key="k", Body=f"new {n}".encode(), IfMatch=etag)

        outcome = race([a.endpoint, b.endpoint], 2, act)
        assert list(outcome.values()).count("ok") == 1, outcome
        listed = [o["Key"] for o in s3.list_objects_v2(Bucket="race").get("Contents", [])]
        assert listed == ([] if outcome[0] == "ok" else ["k"])
        if listed:
            s3.delete_object(Bucket="race", Key="k")
