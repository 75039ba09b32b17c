"""The frozen dataclasses whose `__init__` is written out (built on every request: see
tiering/records.py) take exactly their fields, in order, with the same defaults, set every one of
them, and stay frozen, comparable and hashable."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from erasure.location import Location
from erasure.pack import PackedRecord
from erasure.shard_format import ShardHeader
from erasure.stripe import StripeLayout
from server.access.decision import Decision
from server.credentials import Identity
from server.operations import Operation
from server.router import Route
from server.signature.context import AuthContext, PayloadMode
from tiering.backend import StoredData
from tiering.conditions import WriteCondition
from tiering.records import ObjectMeta, ObjectRecord, RestoreState, Segment

FROZEN: list[type] = [
    StoredData,
    Segment,
    ObjectMeta,
    ObjectRecord,
    AuthContext,
    ShardHeader,
    Route,
    PackedRecord,
    Identity,
    Decision,
    WriteCondition,
]
WRITTEN_OUT: list[type] = [*FROZEN, Location]


def _values(cls: type) -> dict[str, Any]:
    """A distinct value for every field of `cls`, by name, in field order."""
    meta = ObjectMeta(content_type="text/plain")
    segment = Segment(StoredData("id", 3, {"v": 1}))
    return {
        StoredData: {"data_id": "id", "size": 3, "location": {"v": 1}},
        Segment: {"stored": StoredData("id", 3, {"v": 1}), "part_number": 2, "etag": "e", "checksum": "ck"},
        ObjectMeta: {
            "content_type": "text/plain",
            "system": {"cache-control": "no"},
            "user": {"a": "1"},
            "tags": {"t": "v"},
            "storage_class": "GLACIER",
            "storage_class_explicit": True,
            "acl": "acl",
            "encryption": {"alg": "x"},
            "lock": {"hold": True},
        },
        ObjectRecord: {
            "bucket": "b",
            "key": "k",
            "size": 3,
            "etag": "e",
            "last_modified": 1.0,
            "tier": "hot",
            "meta": meta,
            "segments": (segment,),
            "checksum_algorithm": "CRC32",
            "checksum": "c",
            "generation": 7,
            "heat": 0.5,
            "heat_at": 2.0,
            "last_access": 3.0,
            "tier_since": 4.0,
            "restore": RestoreState(False, 9.0, 1),
            "version_id": "v1",
        },
        AuthContext: {
            "access_key": "AK",
            "payload_mode": PayloadMode.UNSIGNED,
            "payload_sha256": "sha",
            "scheme": "sigv4-query",
            "signing_key": b"key",
            "scope": "scope",
            "amz_date": "date",
            "seed_signature": "seed",
            "region": "region",
        },
        Route: {"operation": Operation.GetObject, "bucket": "b", "key": "k", "virtual_host_bucket": "v"},
        PackedRecord: {"pack": "p", "offset": 1, "length": 2, "digest": 3},
        Location: {
            "layout": "ec",
            "k": 2,
            "m": 1,
            "block_size": 4096,
            "shards": ["a", "b", None],
            "missing": {2},
            "placed_by": "first",
        },
        ShardHeader: {
            "data_id": "id",
            "layout": "ec",
            "k": 2,
            "m": 1,
            "index": 1,
            "block_size": 4096,
            "size": 10_000,
        },
        Identity: {"access_key": "AK", "name": "n", "is_admin": True, "anonymous": True},
        Decision: {"allowed": True, "reason": "allow:owner"},
        WriteCondition: {"if_match": "e", "if_none_match": True},
    }[cls]


@pytest.mark.parametrize("cls", WRITTEN_OUT, ids=lambda c: c.__name__)
def test_the_init_takes_the_fields_in_order_with_their_defaults(cls: type) -> None:
    fields = [f for f in dataclasses.fields(cls) if f.init]
    params = list(inspect.signature(cls).parameters.values())  # the class: without self
    assert [p.name for p in params] == [f.name for f in fields]
    for param, field in zip(params, fields, strict=True):
        if field.default is not dataclasses.MISSING:
            assert param.default == field.default, field.name
        elif field.default_factory is not dataclasses.MISSING:
            assert param.default is None, field.name  # None stands for "a new one"
        else:
            assert param.default is inspect.Parameter.empty, field.name


@pytest.mark.parametrize("cls", WRITTEN_OUT, ids=lambda c: c.__name__)
def test_every_field_is_set_from_its_own_argument_and_stays_frozen(cls: type) -> None:
    values = _values(cls)
    assert list(values) == [f.name for f in dataclasses.fields(cls)]
    one = cls(*values.values())
    assert {name: getattr(one, name) for name in values} == values
    assert one == dataclasses.replace(one) == cls(**values)
    if cls in FROZEN:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(one, next(iter(values)), None)


@pytest.mark.parametrize(
    "cls",
    [AuthContext, ShardHeader, Route, PackedRecord, Identity, Decision, WriteCondition],
    ids=lambda c: c.__name__,
)
def test_hashable_ones_hash_by_value(cls: type) -> None:
    values = _values(cls)
    assert hash(cls(*values.values())) == hash(cls(**values))


def test_fields_left_out_get_new_empty_containers() -> None:
    a, b = ObjectMeta(), ObjectMeta()
    assert a.system == a.user == a.tags == {} and a.system is not b.system and a.user is not a.tags
    one, two = Location("ec", 2, 1, 4096, ["a", "b", "c"]), Location("ec", 2, 1, 4096, ["a", "b", "c"])
    assert one.missing == set() and one.missing is not two.missing
    first, second = StoredData("a", 1), StoredData("a", 1)
    assert first.location == {} and first.location is not second.location


def test_a_stripe_layout_takes_its_three_fields_and_works_out_the_rest() -> None:
    """StripeLayout's two derived fields are not arguments (init=False): set from the three that are."""
    params = list(inspect.signature(StripeLayout).parameters)
    assert (
        params == [f.name for f in dataclasses.fields(StripeLayout) if f.init] == ["size", "k", "block_size"]
    )
    layout = StripeLayout(10_000, 4, 1024)
    assert (layout.size, layout.k, layout.block_size) == (10_000, 4, 1024)
    assert (layout.stripe_bytes, layout.stripe_count) == (4096, 3)
    assert layout == StripeLayout(size=10_000, k=4, block_size=1024) == dataclasses.replace(layout)
    assert hash(layout) == hash(StripeLayout(10_000, 4, 1024))
    assert StripeLayout(0, 2, 8).stripe_count == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        layout.k = 2  # type: ignore[misc]
    for size, k, block_size in [(-1, 2, 8), (1, 0, 8), (1, 2, 0)]:
        with pytest.raises(ValueError, match="bad layout"):
            StripeLayout(size, k, block_size)


def test_a_committed_record_is_the_record_with_its_commit_fields_replaced() -> None:
    record = ObjectRecord(*_values(ObjectRecord).values())
    committed = record.committed("v9", 11, 0.25, 99.0)
    assert committed == dataclasses.replace(
        record,
        version_id="v9",
        generation=11,
        heat=0.25,
        heat_at=99.0,
        last_access=99.0,
        tier_since=99.0,
        restore=None,
    )
    assert committed.meta is record.meta and committed.segments is record.segments
