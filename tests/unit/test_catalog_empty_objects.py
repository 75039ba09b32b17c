"""Catalog.create_empty_objects: bulk zero-byte objects, the same rows a PUT of no bytes commits."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiering.catalog import EMPTY_ETAG, Catalog
from tiering.errors import BucketNotFound
from tiering.records import ObjectMeta


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    catalog = Catalog(tmp_path / "catalog.db", durable=False)
    catalog.create_bucket("b", "owner", "us-east-1")
    return catalog


def test_created_objects_are_empty_listed_and_readable(catalog: Catalog) -> None:
    meta = ObjectMeta(storage_class="STANDARD_IA")
    created = catalog.create_empty_objects(
        "b", (f"k/{i:04d}" for i in range(2500)), tier="warm", meta=meta, now=1e9
    )
    assert created == 2500
    record = catalog.get_object("b", "k/0042")
    assert (record.size, record.etag, record.segments, record.tier) == (0, EMPTY_ETAG, (), "warm")
    assert record.meta.storage_class == "STANDARD_IA" and record.last_modified == 1e9
    assert record.generation >= 1 and record.heat == 1.0
    # More than one page's worth in one call: the no-delimiter path fetches max_keys + 1 rows.
    page = catalog.list_objects("b", max_keys=2000)
    assert [e.key for e in page.objects] == [f"k/{i:04d}" for i in range(2000)]
    assert page.is_truncated and page.next_marker == "k/1999"
    assert page.objects[0].size == 0 and page.objects[0].storage_class == "STANDARD_IA"
    assert catalog.count_objects("b") == (2500, 0)
    # Nothing to retire on delete: the object has no data.
    assert catalog.delete_object("b", "k/0042") is not None
    assert catalog.due_garbage(now=2e9) == []


def test_existing_objects_are_left_alone(catalog: Catalog) -> None:
    catalog.create_empty_objects("b", ["a", "b"], tier="hot", meta=ObjectMeta(), now=1.0)
    catalog.update_object_meta("b", "a", ObjectMeta(content_type="text/plain"))
    created = catalog.create_empty_objects("b", ["a", "b", "c"], tier="hot", meta=ObjectMeta(), now=2.0)
    assert created == 1
    assert catalog.get_object("b", "a").meta.content_type == "text/plain"
    assert catalog.get_object("b", "b").last_modified == 1.0


def test_missing_bucket_is_refused(catalog: Catalog) -> None:
    with pytest.raises(BucketNotFound):
        catalog.create_empty_objects("nope", ["a"], tier="hot", meta=ObjectMeta(), now=1.0)
