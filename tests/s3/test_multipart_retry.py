"""A re-sent CompleteMultipartUpload (a client retrying after a timeout) gets the first answer.

While the object the upload made is still the key's current one, S3 answers a repeated
completion with the same result; once that object is overwritten or deleted, NoSuchUpload.
The memory of completed uploads lives in the catalog, so another gateway process, or the same
one after a restart, answers alike.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.conftest import ServerProcess, free_port, make_client

MIB = 1024 * 1024
PARTS = [os.urandom(5 * MIB), b"tail"]
RESULT_FIELDS = ("Location", "Bucket", "Key", "ETag", "ChecksumCRC32C", "ChecksumType")


def _prepare(s3, bucket: str, key: str) -> tuple[str, list[dict[str, object]]]:
    upload = s3.create_multipart_upload(Bucket=bucket, Key=key, ChecksumAlgorithm="CRC32C")["UploadId"]
    done = [
        {
            "PartNumber": n,
            "ETag": s3.upload_part(
                Bucket=bucket, Key=key, UploadId=upload, PartNumber=n, Body=body, ChecksumAlgorithm="CRC32C"
            )["ETag"],
        }
        for n, body in enumerate(PARTS, start=1)
    ]
    return upload, done


def _complete(s3, bucket: str, key: str, upload: str, parts: list[dict[str, object]]) -> dict[str, object]:
    result = s3.complete_multipart_upload(
        Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": parts}
    )
    return {name: result.get(name) for name in RESULT_FIELDS}


def test_resent_complete_gets_the_same_answer(s3, bucket) -> None:
    upload, done = _prepare(s3, bucket, "mp")
    first = _complete(s3, bucket, "mp", upload, done)
    assert first["ChecksumCRC32C"] and first["ChecksumType"] == "COMPOSITE"
    assert _complete(s3, bucket, "mp", upload, done) == first
    # Still a completed upload, not an open one.
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert s3.get_object(Bucket=bucket, Key="mp")["Body"].read() == b"".join(PARTS)


def test_concurrent_completes_all_get_the_object(s3, bucket) -> None:
    upload, done = _prepare(s3, bucket, "race")
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: _complete(s3, bucket, "race", upload, done), range(4)))
    assert all(r == results[0] for r in results), results
    assert s3.get_object(Bucket=bucket, Key="race")["Body"].read() == b"".join(PARTS)


def test_resent_complete_after_overwrite_or_delete_is_no_such_upload(s3, bucket, expect_error) -> None:
    upload, done = _prepare(s3, bucket, "over")
    assert _complete(s3, bucket, "over", upload, done) == _complete(s3, bucket, "over", upload, done)
    s3.put_object(Bucket=bucket, Key="over", Body=b"a newer object")
    with expect_error("NoSuchUpload", 404):
        _complete(s3, bucket, "over", upload, done)
    assert s3.get_object(Bucket=bucket, Key="over")["Body"].read() == b"a newer object"

    upload, done = _prepare(s3, bucket, "gone")
    assert _complete(s3, bucket, "gone", upload, done) == _complete(s3, bucket, "gone", upload, done)
    s3.delete_object(Bucket=bucket, Key="gone")
    with expect_error("NoSuchUpload", 404):
        _complete(s3, bucket, "gone", upload, done)


def test_resent_complete_with_other_parts_is_no_such_upload(s3, bucket, expect_error) -> None:
    upload, done = _prepare(s3, bucket, "other")
    assert _complete(s3, bucket, "other", upload, done) == _complete(s3, bucket, "other", upload, done)
    with expect_error("NoSuchUpload", 404):
        _complete(s3, bucket, "other", upload, done[:1])
    with expect_error("NoSuchUpload", 404):  # the same upload id under another key
        _complete(s3, bucket, "elsewhere", upload, done)


def test_resent_complete_reaches_another_process_and_survives_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = ServerProcess(data, free_port()).start()
    second: ServerProcess | None = None
    try:
        s3 = make_client(first.endpoint)
        s3.create_bucket(Bucket="retry")
        upload, done = _prepare(s3, "retry", "k")
        answer = _complete(s3, "retry", "k", upload, done)
        # Another gateway on the same catalog, as behind a load balancer.
        second = ServerProcess(data, free_port()).start()
        assert _complete(make_client(second.endpoint), "retry", "k", upload, done) == answer
        first.stop()
        second.stop()
        first = ServerProcess(data, free_port()).start()
        assert _complete(make_client(first.endpoint), "retry", "k", upload, done) == answer
    finally:
        first.stop()
        if second is not None:
            second.stop()
