"""Catalog.complete_upload against a rebalance: a part whose shards moved after the client listed
the parts must be committed with its new location, not the retired one (which would leave the
object naming a draining domain: `drain --wait` done, `remove` refused, and the moved copy orphaned)."""

from __future__ import annotations

from pathlib import Path

from tiering.backend import StoredData
from tiering.catalog import Catalog
from tiering.records import ObjectMeta, ObjectRecord, PartRecord, Segment, UploadRecord


def _loc(*domains: str) -> dict[str, object]:
    return {
        "v": 1,
        "layout": "replica",
        "k": 1,
        "m": 2,
        "block_size": 1 << 20,
        "shards": list(domains),
        "missing": [],
        "size": 10,
    }


def test_complete_upload_takes_the_parts_current_locations(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "catalog.db", durable=False)
    catalog.create_bucket("b", "owner", "us-east-1")
    upload = UploadRecord("u1", "b", "k", 1.0, "hot", ObjectMeta(), None, "owner")
    catalog.create_upload(upload)
    before = _loc("hot-n1-d1", "hot-n3-d1", "hot-n4-d1")
    catalog.put_part("u1", PartRecord(1, 10, "e1", 1.0, StoredData("blob1", 10, before), None))
    listed = catalog.list_parts("u1")  # what CompleteMultipartUpload builds the object from
    after = _loc("hot-n1-d1", "hot-n5-d2", "hot-n4-d1")
    assert catalog.relocate_blob_if("blob1", before, after)  # the rebalancer moves the part meanwhile
    record = ObjectRecord(
        bucket="b",
        key="k",
        size=10,
        etag="x-1",
        last_modified=2.0,
        tier="hot",
        meta=ObjectMeta(),
        segments=tuple(Segment(p.stored, p.part_number, p.etag) for p in listed),
    )
    committed = catalog.complete_upload(upload, record)
    assert committed.segments[0].stored.location == after
    assert catalog.get_object("b", "k").segments[0].stored.location == after
    assert catalog.blobs_on_domain("hot", "hot-n3-d1") == []
