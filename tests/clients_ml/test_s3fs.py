"""fsspec / s3fs as notebooks and data pipelines use it: put, get, ls, glob, open, seek, rm."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tests.conftest import ACCESS_KEY, REGION, SECRET_KEY, ServerProcess

s3fs = pytest.importorskip("s3fs")
MiB = 1024 * 1024


@pytest.fixture
def fs(server: ServerProcess):
    return s3fs.S3FileSystem(
        key=ACCESS_KEY, secret=SECRET_KEY, skip_instance_cache=True, use_listings_cache=False,
        client_kwargs={"endpoint_url": server.endpoint, "region_name": REGION},
    )  # fmt: skip


def test_put_get_ls_glob_rm(fs, bucket: str, tmp_path: Path) -> None:
    local = tmp_path / "local"
    rng = random.Random(3)
    for i in range(12):
        path = local / f"shard-{i % 3}" / f"part-{i:03d}.{'json' if i % 4 == 0 else 'bin'}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.randbytes(rng.randrange(0, 50_000)))
    fs.put(str(local) + "/", f"{bucket}/data/", recursive=True)

    assert sorted(fs.ls(f"{bucket}/data", detail=False)) == [f"{bucket}/data/shard-{i}" for i in range(3)]
    assert fs.isdir(f"{bucket}/data/shard-1") and not fs.isfile(f"{bucket}/data/shard-1")
    assert len(fs.glob(f"{bucket}/data/*/*.bin")) == 9
    assert sorted(fs.glob(f"{bucket}/data/**/*.json")) == [
        f"{bucket}/data/shard-0/part-000.json", f"{bucket}/data/shard-1/part-004.json",
        f"{bucket}/data/shard-2/part-008.json",
    ]  # fmt: skip
    assert fs.du(f"{bucket}/data") == sum(p.stat().st_size for p in local.rglob("*") if p.is_file())
    info = fs.info(f"{bucket}/data/shard-0/part-003.bin")
    assert info["size"] == (local / "shard-0" / "part-003.bin").stat().st_size and info["type"] == "file"

    back = tmp_path / "back"
    fs.get(f"{bucket}/data/", str(back) + "/", recursive=True)
    for path in local.rglob("*"):
        if path.is_file():
            assert (back / path.relative_to(local)).read_bytes() == path.read_bytes(), path

    fs.mv(f"{bucket}/data/shard-2/part-002.bin", f"{bucket}/moved/part-002.bin")
    assert fs.cat(f"{bucket}/moved/part-002.bin") == (local / "shard-2" / "part-002.bin").read_bytes()
    assert not fs.exists(f"{bucket}/data/shard-2/part-002.bin")
    fs.rm(f"{bucket}/data/shard-1", recursive=True)
    assert not fs.exists(f"{bucket}/data/shard-1")
    fs.rm(f"{bucket}/data", recursive=True)
    fs.rm(f"{bucket}/moved", recursive=True)
    assert fs.ls(bucket, detail=False) == []


def test_open_random_access_and_multipart_write(fs, s3, bucket: str) -> None:
    body = os.urandom(12 * MiB + 12345)
    with fs.open(f"{bucket}/big/blob.bin", "wb", block_size=5 * MiB) as f:  # a 3-part multipart upload
        for start in range(0, len(body), 1_000_000):
            f.write(body[start : start + 1_000_000])
    assert s3.head_object(Bucket=bucket, Key="big/blob.bin")["ETag"].endswith('-3"')

    with fs.open(f"{bucket}/big/blob.bin", "rb", block_size=256 * 1024, cache_type="bytes") as f:
        assert f.size == len(body)
        for offset in [0, 7 * MiB + 3, len(body) - 10, 5 * MiB - 1, 123]:
            f.seek(offset)
            assert f.read(4096) == body[offset : offset + 4096], offset
        f.seek(-100, os.SEEK_END)
        assert f.read() == body[-100:]
    assert (
        fs.cat_file(f"{bucket}/big/blob.bin", start=10 * MiB, end=10 * MiB + 17)
        == body[10 * MiB : 10 * MiB + 17]
    )
    ranges = fs.cat_ranges([f"{bucket}/big/blob.bin"] * 3, [0, 100, 12 * MiB], [10, 200, 12 * MiB + 50])
    assert ranges == [body[0:10], body[100:200], body[12 * MiB : 12 * MiB + 50]]
    fs.rm(f"{bucket}/big/blob.bin")
    assert not fs.exists(f"{bucket}/big/blob.bin")
