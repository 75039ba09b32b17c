"""Uploads of one part number that overlap: the one whose body ends last on the wire is the part.

A slow-drip upload (raw SigV4, UNSIGNED-PAYLOAD, held mid-body) lets another upload of the same
number finish meanwhile; threads race plain uploads. Each time exactly one part stays, a
Complete naming a replaced ETag is InvalidPart, and every replaced part's data is collected:
once the object is deleted, nothing is left on the tiers' drives.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.clients.wire import sign_v4
from tests.conftest import ServerProcess, free_port, make_client
from tests.shards import shards_under

MIB = 1024 * 1024
GRACE = 0.5  # TIERSTORE_RETIRE_GRACE_SECONDS here: retired data is deleted soon after


@pytest.fixture(scope="module")
def own_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tmp_path_factory.mktemp("part-race") / "data",
        free_port(),
        env={"TIERSTORE_RETIRE_GRACE_SECONDS": str(GRACE)},
    ).start()
    yield proc
    proc.stop()


class DripUpload(threading.Thread):
    """UploadPart of `body`, sent in 64 KiB pieces; holds after `hold_at` bytes until `resume`."""

    def __init__(self, server: ServerProcess, path: str, body: bytes, hold_at: int) -> None:
        super().__init__(daemon=True)
        self.server, self.path, self.body, self.hold_at = server, path, body, hold_at
        self.held, self.resume = threading.Event(), threading.Event()
        self.status: int | None = None
        self.etag = ""

    def run(self) -> None:
        url = f"{self.server.endpoint}{self.path}"
        headers = sign_v4("PUT", url, {"Content-Length": str(len(self.body))}, "UNSIGNED-PAYLOAD").headers
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=120)
        try:
            conn.putrequest("PUT", self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in headers.items():
                conn.putheader(name, value)
            conn.endheaders()
            for offset in range(0, len(self.body), 64 * 1024):
                if offset >= self.hold_at and not self.resume.is_set():
                    self.held.set()
                    self.resume.wait(60)
                conn.send(self.body[offset : offset + 64 * 1024])
            response = conn.getresponse()
            self.status, self.etag = response.status, response.getheader("ETag") or ""
            response.read()
        finally:
            conn.close()


def _tier_bytes(data: Path) -> int:
    """Bytes of the shards on the tiers' drives: shard files and live records in pack files (the
    dead space a removed record leaves in its pack is the compactor's, not a leak)."""
    return sum(s.length for s in shards_under(data / "domains"))


def _settles_to_zero(data: Path) -> bool:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if _tier_bytes(data) == 0:
            return True
        time.sleep(0.2)
    return False


def test_the_part_that_ends_last_on_the_wire_wins(own_server: ServerProcess, expect_error) -> None:
    s3 = make_client(own_server.endpoint)
    s3.create_bucket(Bucket="drip")
    upload = s3.create_multipart_upload(Bucket="drip", Key="k")["UploadId"]
    slow_body, quick_body = os.urandom(3 * MIB), os.urandom(2 * MIB)
    slow = DripUpload(own_server, f"/drip/k?partNumber=1&uploadId={upload}", slow_body, hold_at=2 * MIB)
    slow.start()
    assert slow.held.wait(60)
    # Begun later, finished first: replaced once the slow one's last byte arrives.
    quick = s3.upload_part(Bucket="drip", Key="k", UploadId=upload, PartNumber=1, Body=quick_body)["ETag"]
    slow.resume.set()
    slow.join(120)
    assert (slow.status, slow.etag) == (200, f'"{hashlib.md5(slow_body).hexdigest()}"')
    assert [
        (p["PartNumber"], p["ETag"]) for p in s3.list_parts(Bucket="drip", Key="k", UploadId=upload)["Parts"]
    ] == [(1, slow.etag)]
    with expect_error("InvalidPart", 400):
        s3.complete_multipart_upload(
            Bucket="drip",
            Key="k",
            UploadId=upload,
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": quick}]},
        )
    s3.complete_multipart_upload(
        Bucket="drip",
        Key="k",
        UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": slow.etag}]},
    )
    assert s3.get_object(Bucket="drip", Key="k")["Body"].read() == slow_body
    s3.delete_object(Bucket="drip", Key="k")
    assert _settles_to_zero(own_server.data_dir), "the replaced part's data was left behind"


def test_racing_threads_leave_exactly_one_part(own_server: ServerProcess) -> None:
    s3 = make_client(own_server.endpoint)
    s3.create_bucket(Bucket="race")
    upload = s3.create_multipart_upload(Bucket="race", Key="k")["UploadId"]
    bodies: dict[str, bytes] = {}
    for _ in range(3):
        batch = [os.urandom(256 * 1024 + n) for n in range(8)]
        with ThreadPoolExecutor(8) as pool:
            etags = list(
                pool.map(
                    lambda body: s3.upload_part(
                        Bucket="race", Key="k", UploadId=upload, PartNumber=1, Body=body
                    )["ETag"],
                    batch,
                )
            )
        bodies.update(zip(etags, batch, strict=True))
        parts = s3.list_parts(Bucket="race", Key="k", UploadId=upload)["Parts"]
        assert len(parts) == 1 and parts[0]["ETag"] in etags
    live = parts[0]["ETag"]
    s3.complete_multipart_upload(
        Bucket="race", Key="k", UploadId=upload, MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": live}]}
    )
    assert s3.get_object(Bucket="race", Key="k")["Body"].read() == bodies[live]
    s3.delete_object(Bucket="race", Key="k")
    assert _settles_to_zero(own_server.data_dir), "a replaced part's data was left behind"
