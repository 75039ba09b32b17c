"""Zero-byte objects made in bulk through the catalog (the listing benchmark's filler) behave like
zero-byte PUTs over S3: listed, readable, copyable and deletable, although no tier holds data for them."""

from __future__ import annotations

import time

from tests.conftest import ServerProcess, catalog_location
from tiering.catalog import EMPTY_ETAG, Catalog
from tiering.records import ObjectMeta


def test_bulk_empty_objects_list_and_read_like_zero_byte_puts(server: ServerProcess, s3, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="put/0500", Body=b"")
    catalog = Catalog(catalog_location(server.data_dir))
    try:
        keys = [f"put/{i:04d}" for i in range(1200)]
        assert (
            catalog.create_empty_objects(bucket, keys, tier="hot", meta=ObjectMeta(), now=time.time()) == 1199
        )
    finally:
        catalog.close()
    listed = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, FetchOwner=True):
        listed += page["Contents"]
    assert [o["Key"] for o in listed] == keys
    assert {(o["Size"], o["ETag"], o["StorageClass"]) for o in listed} == {(0, f'"{EMPTY_ETAG}"', "STANDARD")}
    v1 = s3.list_objects(Bucket=bucket, Prefix="put/11", Delimiter="/", MaxKeys=1000)
    assert [o["Key"] for o in v1["Contents"]] == keys[1100:1200]
    got = s3.get_object(Bucket=bucket, Key="put/0001")
    assert got["Body"].read() == b"" and got["ETag"] == f'"{EMPTY_ETAG}"' and got["ContentLength"] == 0
    s3.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "put/0001"})
    assert s3.get_object(Bucket=bucket, Key="copy")["Body"].read() == b""
    s3.delete_object(Bucket=bucket, Key="put/0002")
    assert s3.list_objects_v2(Bucket=bucket, Prefix="put/000", MaxKeys=3)["KeyCount"] == 3
