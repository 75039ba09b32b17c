"""pyarrow.fs.S3FileSystem + pyarrow.dataset: a hive-partitioned Parquet dataset written and scanned.

pyarrow's AWS C++ SDK uploads every file as a multipart upload whose parts are aws-chunked with an
x-amz-checksum-crc64nvme trailer inside HTTP chunked transfer (no Content-Length); reads are ranged
GETs of footers and column chunks, so a projected, filtered scan must move far fewer bytes than
the files hold.
"""

from __future__ import annotations

import random

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyarrow.dataset")
pytest.importorskip("pyarrow.fs")

import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.dataset as ds  # noqa: E402
import pyarrow.fs as pafs  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from tests.clients_ml.conftest import access_log  # noqa: E402
from tests.conftest import ACCESS_KEY, REGION, SECRET_KEY, ServerProcess  # noqa: E402

ROWS = 60_000
PAYLOAD = 800  # bytes of incompressible payload per row: partition "a" is ~29 MiB


def s3_filesystem(server: ServerProcess) -> pafs.S3FileSystem:
    return pafs.S3FileSystem(
        endpoint_override=server.endpoint, scheme="http", access_key=ACCESS_KEY, secret_key=SECRET_KEY, region=REGION,
    )  # fmt: skip


def source_table() -> pa.Table:
    rng = random.Random(5)
    blob = rng.randbytes(ROWS * PAYLOAD)
    return pa.table({
        "id": pa.array(range(ROWS), pa.int64()),
        "split": pa.array([("a", "a", "a", "b", "c")[i % 5] for i in range(ROWS)]),
        "label": pa.array([rng.randrange(1000) for _ in range(ROWS)], pa.int32()),
        "score": pa.array([rng.random() for _ in range(ROWS)], pa.float64()),
        "payload": pa.array([blob[i * PAYLOAD : (i + 1) * PAYLOAD] for i in range(ROWS)], pa.binary()),
    })  # fmt: skip


def test_partitioned_parquet_roundtrip(server: ServerProcess, bucket: str) -> None:
    fs = s3_filesystem(server)
    table = source_table()
    root = f"{bucket}/datasets/train"
    ds.write_dataset(
        table, root, filesystem=fs, format="parquet", partitioning=["split"], partitioning_flavor="hive",
        max_rows_per_file=16_000, max_rows_per_group=4_000,
    )  # fmt: skip

    files = {info.path: info.size for info in fs.get_file_info(pafs.FileSelector(root, recursive=True))
             if info.type == pafs.FileType.File}  # fmt: skip
    assert {path.rsplit("/", 2)[1] for path in files} == {"split=a", "split=b", "split=c"}
    assert len(files) >= 5
    big = [path for path, size in files.items() if size > 10 * 1024 * 1024]
    assert len(big) >= 2, files  # these went up in several parts
    uploads = [e for e in access_log(server, bucket) if e["operation"] == "CompleteMultipartUpload"]
    assert len(uploads) >= len(big) and all(e["status"] == 200 for e in uploads)
    parts = [e for e in access_log(server, bucket) if e["operation"] == "UploadPart"]
    assert len(parts) > len(uploads)  # the big files had more than one part each

    # Every file on its own is valid Parquet with the rows it should hold.
    whole = ds.dataset(root, filesystem=fs, format="parquet", partitioning="hive").to_table()
    assert whole.num_rows == ROWS
    assert whole.sort_by("id").select(table.column_names).equals(table)
    first = sorted(files)[0]
    assert pq.ParquetFile(fs.open_input_file(first)).metadata.num_rows > 0

    # Projection + filter: ranged GETs of footers and only the needed column chunks.
    before = len(access_log(server, bucket))
    dataset = ds.dataset(root, filesystem=fs, format="parquet", partitioning="hive")
    got = dataset.to_table(columns=["id", "label", "score"],
                           filter=(ds.field("split") == "a") & (ds.field("label") < 100))  # fmt: skip
    gets = [e for e in access_log(server, bucket)[before:] if e["operation"] == "GetObject"]
    assert gets and all(e["status"] in (200, 206) for e in gets)
    assert any(e["status"] == 206 for e in gets)
    read_bytes = sum(e["bytes_out"] for e in gets)
    partition_a = sum(size for path, size in files.items() if "/split=a/" in path)
    assert read_bytes < partition_a / 10, (read_bytes, partition_a)  # payload chunks never fetched

    mask = pc.and_(pc.equal(table["split"], "a"), pc.less(table["label"], 100))
    expected = table.filter(mask).select(["id", "label", "score"]).sort_by("id")
    assert got.sort_by("id").equals(expected)
    assert got.num_rows > 1000


def test_filesystem_basics(server: ServerProcess, bucket: str) -> None:
    fs = s3_filesystem(server)
    with fs.open_output_stream(f"{bucket}/raw/blob.bin") as out:
        out.write(b"x" * 1000 + bytes(range(256)))
    with fs.open_input_file(f"{bucket}/raw/blob.bin") as f:
        assert f.size() == 1256
        f.seek(1000)
        assert f.read(256) == bytes(range(256))
        assert f.read_at(3, 998) == b"xx\x00"
    fs.copy_file(f"{bucket}/raw/blob.bin", f"{bucket}/raw/copy.bin")
    fs.move(f"{bucket}/raw/copy.bin", f"{bucket}/raw/moved.bin")
    names = sorted(i.base_name for i in fs.get_file_info(pafs.FileSelector(f"{bucket}/raw")))
    assert names == ["blob.bin", "moved.bin"]
    fs.delete_dir_contents(f"{bucket}/raw")
    assert fs.get_file_info(f"{bucket}/raw/blob.bin").type == pafs.FileType.NotFound
