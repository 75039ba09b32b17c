"""Probe tests: kill the real server mid-write, restart it on the same data, look at what is left.

A crash before the catalog commit must leave the previous version intact, nothing half-written
visible, and only garbage behind, which the server removes once it is back.
"""

from __future__ import annotations

import hashlib
import signal
import time
from collections.abc import Callable
from pathlib import Path

from tests.conftest import ServerProcess, make_client
from tests.faults.conftest import MiB, StreamingPut, data_bytes, pattern, pattern_md5
from tests.reliability import Recorder
from tests.support import wait_for

Spawn = Callable[..., ServerProcess]
SETTLE = 30.0  # how long the restarted server may take to collect what the crash left


def get_md5(s3, bucket: str, key: str) -> str:
    body = s3.get_object(Bucket=bucket, Key=key)["Body"]
    digest = hashlib.md5()
    for piece in iter(lambda: body.read(MiB), b""):
        digest.update(piece)
    return digest.hexdigest()


def test_sigkill_during_large_put_keeps_old_version(
    spawn: Spawn, tmp_path: Path, reliability: Recorder
) -> None:
    data = tmp_path / "data"
    server = spawn(data)
    s3 = make_client(server.endpoint)
    s3.create_bucket(Bucket="crash")
    v1_size = 6 * MiB + 123
    s3.put_object(Bucket="crash", Key="big", Body=b"".join(pattern(1, v1_size)))
    baseline = data_bytes(data)

    upload = StreamingPut(server, "/crash/big", seed=2, size=200 * MiB)
    upload.start()
    # Kill only once the server has stored a good part of v2, so there is garbage to collect.
    wait_for(lambda: data_bytes(data) > baseline + 40 * MiB or not upload.is_alive(), 60, "v2 bytes on disk")
    assert upload.is_alive(), f"the upload ended before the kill: {upload.status} {upload.error}"
    server.kill()
    upload.join(30)
    assert upload.status is None and upload.error is not None
    assert data_bytes(data) > baseline + 40 * MiB

    server = spawn(data)
    s3 = make_client(server.endpoint)
    assert get_md5(s3, "crash", "big") == pattern_md5(1, v1_size)
    listed = s3.list_objects_v2(Bucket="crash")["Contents"]
    assert [(o["Key"], o["Size"]) for o in listed] == [("big", v1_size)]
    assert "Uploads" not in s3.list_multipart_uploads(Bucket="crash")
    wait_for(lambda: data_bytes(data) <= baseline, SETTLE, f"orphaned v2 bytes to be collected "
             f"(baseline {baseline}, now {data_bytes(data)})")  # fmt: skip
    assert get_md5(s3, "crash", "big") == pattern_md5(1, v1_size)
    reliability.record(inputs=2, faults=1, operations=5, verified=2)


def test_sigkill_during_multipart_part(spawn: Spawn, tmp_path: Path, reliability: Recorder) -> None:
    data = tmp_path / "data"
    server = spawn(data)
    s3 = make_client(server.endpoint)
    s3.create_bucket(Bucket="mpu")
    kept = s3.create_multipart_upload(Bucket="mpu", Key="kept")["UploadId"]
    dropped = s3.create_multipart_upload(Bucket="mpu", Key="dropped")["UploadId"]
    part1 = b"".join(pattern(11, 5 * MiB))
    etag1 = s3.upload_part(Bucket="mpu", Key="kept", UploadId=kept, PartNumber=1, Body=part1)["ETag"]
    s3.upload_part(Bucket="mpu", Key="dropped", UploadId=dropped, PartNumber=1, Body=part1)
    baseline = data_bytes(data)

    upload = StreamingPut(server, f"/mpu/kept?partNumber=2&uploadId={kept}", seed=12, size=150 * MiB)
    upload.start()
    wait_for(
        lambda: data_bytes(data) > baseline + 30 * MiB or not upload.is_alive(), 60, "part 2 bytes on disk"
    )
    assert upload.is_alive(), f"the part upload ended before the kill: {upload.status} {upload.error}"
    server.kill()
    upload.join(30)

    server = spawn(data)
    s3 = make_client(server.endpoint)
    uploads = {u["UploadId"]: u["Key"] for u in s3.list_multipart_uploads(Bucket="mpu")["Uploads"]}
    assert uploads == {kept: "kept", dropped: "dropped"}
    parts = s3.list_parts(Bucket="mpu", Key="kept", UploadId=kept)["Parts"]
    assert [(p["PartNumber"], p["Size"], p["ETag"]) for p in parts] == [(1, 5 * MiB, etag1)]
    wait_for(lambda: data_bytes(data) <= baseline, SETTLE, "the half-written part to be collected")

    part2 = b"".join(pattern(13, 3 * MiB))
    etag2 = s3.upload_part(Bucket="mpu", Key="kept", UploadId=kept, PartNumber=2, Body=part2)["ETag"]
    s3.complete_multipart_upload(
        Bucket="mpu", Key="kept", UploadId=kept,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag1}, {"PartNumber": 2, "ETag": etag2}]},
    )  # fmt: skip
    assert get_md5(s3, "mpu", "kept") == hashlib.md5(part1 + part2).hexdigest()
    s3.abort_multipart_upload(Bucket="mpu", Key="dropped", UploadId=dropped)
    assert "Uploads" not in s3.list_multipart_uploads(Bucket="mpu")
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="mpu")["Contents"]] == ["kept"]
    reliability.record(inputs=2, faults=1, operations=14, verified=2)


def test_sigterm_drains_an_upload_in_flight(spawn: Spawn, tmp_path: Path, reliability: Recorder) -> None:
    data = tmp_path / "data"
    server = spawn(data)
    s3 = make_client(server.endpoint)
    s3.create_bucket(Bucket="drain")
    size = 48 * MiB
    upload = StreamingPut(server, "/drain/obj", seed=3, size=size, pause_at=16 * MiB)
    upload.start()
    assert upload.paused.wait(30), "the upload never got going"
    assert server.proc is not None
    server.proc.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    assert server.proc.poll() is None, "the server exited with a request in flight"
    upload.resume.set()
    upload.join(60)
    assert upload.error is None, upload.error
    assert upload.status == 200, upload.reply
    code = server.proc.wait(30)
    assert code == 0, server.log()

    server = spawn(data)
    s3 = make_client(server.endpoint)
    assert s3.head_object(Bucket="drain", Key="obj")["ETag"] == f'"{upload.md5.hexdigest()}"'
    assert get_md5(s3, "drain", "obj") == upload.md5.hexdigest()
    reliability.record(inputs=1, faults=1, operations=4, verified=1)
