"""Capacity watermarks: a full tier sheds its coldest objects; promotions respect capacity."""

from __future__ import annotations

from collections.abc import Callable

from tests.lifecycle.conftest import Tiered

HOT_CAPACITY = 4_000_000
GPU_CAPACITY = 1_000_000
HIGH, LOW = 0.9, 0.75
SIZE = 100_000
ENV = {
    "TIERSTORE_TIERS_HOT_CAPACITY_BYTES": str(HOT_CAPACITY),
    "TIERSTORE_TIERS_GPU_DIRECT_CAPACITY_BYTES": str(GPU_CAPACITY),
    "TIERSTORE_LIFECYCLE_HIGH_WATERMARK": str(HIGH),
    "TIERSTORE_LIFECYCLE_LOW_WATERMARK": str(LOW),
    "TIERSTORE_LIFECYCLE_PROMOTE_TO_GPU_HEAT": "5",
}


def tier_bytes(ts: Tiered) -> dict[str, int]:
    return {name: int(t["bytes"]) for name, t in ts.tiers().items()}


def tiers_of(ts: Tiered, bucket: str) -> dict[str, str]:
    """key → tier for every object of the bucket, from `admin object` (one call per key)."""
    keys = [o["Key"] for o in ts.s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    return {k: ts.obj(bucket, k)["tier"] for k in keys}


def test_hot_over_high_watermark_sheds_its_coldest_objects(spawn: Callable[..., Tiered]) -> None:
    ts = spawn(env=ENV)
    s3 = ts.s3
    s3.create_bucket(Bucket="fill")
    assert ts.tiers()["hot"]["capacity_bytes"] == HOT_CAPACITY
    keys = [f"obj-{i:02d}" for i in range(40)]  # 4,000,000 bytes: 100 % of hot
    for key in keys:
        s3.put_object(
            Bucket="fill", Key=key, Body=key.encode() * (SIZE // len(key)) + b"." * (SIZE % len(key))
        )
    pinned = [f"pinned-{i}" for i in range(3)]  # explicit STANDARD: never a watermark candidate
    for key in pinned:
        s3.put_object(Bucket="fill", Key=key, Body=b"p" * SIZE, StorageClass="STANDARD")
    read = keys[::3]  # every third object is read (heat 3): these must stay
    for key in read:
        ts.heat_up("fill", key, 2)
    used = tier_bytes(ts)["hot"]
    assert used == 43 * SIZE > HIGH * HOT_CAPACITY

    report = ts.run_pass()
    after = tier_bytes(ts)
    assert after["hot"] <= LOW * HOT_CAPACITY, after
    need = used - int(LOW * HOT_CAPACITY)
    expected_moves = -(-need // SIZE)  # exactly enough to reach the low watermark, not more
    assert report["watermark_moves"] == expected_moves
    assert after["warm"] == expected_moves * SIZE
    placed = tiers_of(ts, "fill")
    demoted = sorted(k for k, t in placed.items() if t == "warm")
    assert len(demoted) == expected_moves
    assert not set(demoted) & set(read), "read objects are hotter than unread ones"
    assert not set(demoted) & set(pinned), "objects with an explicit class are not evicted"
    unread = [k for k in keys if k not in read]
    # Among equally unread objects, the longest idle (written first) go first.
    assert demoted == unread[:expected_moves]
    for key in demoted:
        assert ts.obj("fill", key)["moves"][0]["reason"] == "watermark"
        body = ts.get("fill", key)
        assert len(body) == SIZE and body.startswith(key.encode())

    report = ts.run_pass()
    assert report["watermark_moves"] == 0, "at the low watermark nothing more moves"
    for i in range(5):  # 3.5 MB: above low, below high
        s3.put_object(Bucket="fill", Key=f"late-{i}", Body=b"l" * SIZE, StorageClass="STANDARD")
    report = ts.run_pass()
    assert report["watermark_moves"] == 0, "between the watermarks nothing moves (no flapping)"
    assert tier_bytes(ts)["hot"] == after["hot"] + 5 * SIZE


def test_promotions_into_gpu_direct_never_exceed_its_capacity(spawn: Callable[..., Tiered]) -> None:
    ts = spawn(env=ENV)
    s3 = ts.s3
    s3.create_bucket(Bucket="gpu")
    keys = [f"g-{i:02d}" for i in range(15)]  # 1.5 MB of hot objects for 1 MB of gpu-direct
    for key in keys:
        s3.put_object(Bucket="gpu", Key=key, Body=key.encode() * (SIZE // 4))
    limit = HIGH * GPU_CAPACITY
    for round_ in range(3):
        for key in keys:
            ts.heat_up("gpu", key, 6 if round_ == 0 else 2)
        ts.run_pass()
        used = tier_bytes(ts)["gpu-direct"]
        assert 0 < used <= limit, (round_, used)
    placed = tiers_of(ts, "gpu")
    on_gpu = [k for k, t in placed.items() if t == "gpu-direct"]
    assert len(on_gpu) == int(limit // SIZE)
    assert {t for k, t in placed.items() if k not in on_gpu} == {"hot"}
    for key in keys:
        assert ts.get("gpu", key) == key.encode() * (SIZE // 4)


def test_noncurrent_versions_are_evicted_first_when_they_are_the_coldest(
    spawn: Callable[..., Tiered],
) -> None:
    """A hot tier filled by a versioned bucket sheds old versions: they hold hot bytes like
    current objects and are colder (never read, older). They move one tier down by version id,
    keep their class and bytes, and no current object moves while they suffice."""
    ts = spawn(env=ENV)
    s3 = ts.s3
    s3.create_bucket(Bucket="ckpt")
    s3.put_bucket_versioning(Bucket="ckpt", VersioningConfiguration={"Status": "Enabled"})
    keys = [f"step-{i:02d}" for i in range(20)]
    old: dict[str, str] = {}
    for key in keys:  # 20 noncurrent versions, then 20 current ones: 4,000,000 bytes, 100 % of hot
        old[key] = s3.put_object(Bucket="ckpt", Key=key, Body=b"o" * SIZE)["VersionId"]
    for key in keys:
        s3.put_object(Bucket="ckpt", Key=key, Body=b"n" * SIZE)
    for key in keys:
        ts.heat_up("ckpt", key, 1)  # the current versions are read; the old ones never
    used = tier_bytes(ts)["hot"]
    assert used == 40 * SIZE > HIGH * HOT_CAPACITY

    report = ts.run_pass()
    expected_moves = -(-(used - int(LOW * HOT_CAPACITY)) // SIZE)
    assert report["watermark_moves"] == expected_moves == 10
    assert tier_bytes(ts)["hot"] == used - expected_moves * SIZE <= LOW * HOT_CAPACITY
    assert set(tiers_of(ts, "ckpt").values()) == {"hot"}, "no current object moved"
    moved = []
    for key in keys:
        head = s3.head_object(Bucket="ckpt", Key=key, VersionId=old[key])
        if head["ResponseMetadata"]["HTTPHeaders"]["x-tierstore-tier"] == "warm":
            moved.append(key)
            assert head.get("StorageClass", "STANDARD") == "STANDARD", "the version keeps its class"
        assert ts.get("ckpt", key, VersionId=old[key]) == b"o" * SIZE
        assert ts.get("ckpt", key) == b"n" * SIZE
    assert moved == keys[:expected_moves], "the longest idle versions go first"
    assert ts.obj("ckpt", keys[0])["moves"][0]["reason"] == "watermark (noncurrent version)"
    assert ts.run_pass()["watermark_moves"] == 0, "at the low watermark nothing more moves"
