"""HTTPS with boto3's defaults, and the aws-chunked forms clients send over it.

Over HTTPS boto3 does not sign the body: it sends `STREAMING-UNSIGNED-PAYLOAD-TRAILER`, an
aws-chunked body with an `x-amz-checksum-crc32` trailer. Signed chunks
(`STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER]`) and aws-chunked inside HTTP chunked transfer
(the JS SDK, pyarrow) are built by hand in `wire.py`.
"""

from __future__ import annotations

import base64
import hashlib
import os
import zlib
from pathlib import Path

import pytest
from awscrt import checksums
from botocore.exceptions import ClientError

from tests.clients.conftest import TlsServer
from tests.clients.wire import (
    Reply,
    send,
    sign_v4,
    signed_chunked_body,
    unsigned_chunked_body,
)

MiB = 1024 * 1024


def b64_int(value: int, size: int) -> str:
    return base64.b64encode(value.to_bytes(size, "big")).decode()


def crc32_b64(data: bytes) -> str:
    return b64_int(zlib.crc32(data), 4)


def crc64nvme_b64(data: bytes) -> str:
    return b64_int(checksums.crc64nvme(data), 8)


def capture_headers(client, event: str) -> list[dict[str, str]]:
    """Record the headers of every request botocore sends for `event` (e.g. PutObject)."""
    seen: list[dict[str, str]] = []

    def hook(request, **_: object) -> None:
        seen.append(
            {k.lower(): (v.decode() if isinstance(v, bytes) else v) for k, v in request.headers.items()}
        )

    client.meta.events.register(f"before-send.s3.{event}", hook)
    return seen


def assert_stored(s3, bucket: str, key: str, body: bytes) -> None:
    head = s3.head_object(Bucket=bucket, Key=key)
    assert head["ContentLength"] == len(body)
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=key)["Contents"]
    assert [(o["Key"], o["Size"]) for o in listed] == [(key, len(body))]
    got = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    assert len(got) == len(body)
    assert hashlib.md5(got).digest() == hashlib.md5(body).digest()


@pytest.mark.parametrize("size", [0, 1024, 9 * MiB], ids=["0B", "1KiB", "9MiB"])
def test_default_boto3_put_object(tls_s3, tls_bucket: str, size: int) -> None:
    body = os.urandom(size)
    sent = capture_headers(tls_s3, "PutObject")
    reply = tls_s3.put_object(Bucket=tls_bucket, Key="obj", Body=body)
    assert reply["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'
    if size:
        # The point of this test: the default over HTTPS is an aws-chunked body with a trailer.
        assert sent[-1]["x-amz-content-sha256"] == "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
        assert sent[-1]["x-amz-trailer"] == "x-amz-checksum-crc32"
        assert reply["ChecksumCRC32"] == crc32_b64(body)
    assert_stored(tls_s3, tls_bucket, "obj", body)


def test_default_boto3_upload_file_multipart(tls_s3, tls_bucket: str, tmp_path: Path) -> None:
    body = os.urandom(20 * MiB)  # over boto3's 8 MiB multipart threshold: 3 parts
    path = tmp_path / "upload.bin"
    path.write_bytes(body)
    sent = capture_headers(tls_s3, "UploadPart")
    tls_s3.upload_file(str(path), tls_bucket, "multi")
    assert len(sent) == 3
    assert {h["x-amz-content-sha256"] for h in sent} == {"STREAMING-UNSIGNED-PAYLOAD-TRAILER"}
    assert tls_s3.head_object(Bucket=tls_bucket, Key="multi")["ETag"].endswith('-3"')
    assert_stored(tls_s3, tls_bucket, "multi", body)
    target = tmp_path / "download.bin"
    tls_s3.download_file(tls_bucket, "multi", str(target))
    assert target.read_bytes() == body


@pytest.mark.parametrize(
    ("algorithm", "expected"),
    [
        ("SHA256", lambda b: base64.b64encode(hashlib.sha256(b).digest()).decode()),
        ("CRC32C", lambda b: b64_int(checksums.crc32c(b), 4)),
        ("CRC64NVME", crc64nvme_b64),
    ],
)
def test_explicit_checksum_algorithm(tls_s3, tls_bucket: str, algorithm: str, expected) -> None:
    body = os.urandom(3 * MiB + 17)
    sent = capture_headers(tls_s3, "PutObject")
    reply = tls_s3.put_object(Bucket=tls_bucket, Key="sum", Body=body, ChecksumAlgorithm=algorithm)
    assert sent[-1]["x-amz-trailer"] == f"x-amz-checksum-{algorithm.lower()}"
    assert reply[f"Checksum{algorithm}"] == expected(body)
    got = tls_s3.get_object(Bucket=tls_bucket, Key="sum", ChecksumMode="ENABLED")
    assert got[f"Checksum{algorithm}"] == expected(body)
    assert got["Body"].read() == body  # botocore also validates the checksum while reading
    assert_stored(tls_s3, tls_bucket, "sum", body)


def _unsigned_trailer_put(
    tls: TlsServer,
    bucket: str,
    key: str,
    chunks: list[bytes],
    trailer: str,
    value: str,
    *,
    chunked_transfer: bool = False,
) -> Reply:
    body = unsigned_chunked_body(chunks, {trailer: value})
    headers = {
        "Content-Encoding": "aws-chunked",
        "x-amz-decoded-content-length": str(sum(map(len, chunks))),
        "x-amz-trailer": trailer,
    }
    if chunked_transfer:
        headers["Transfer-Encoding"] = "chunked"
    else:
        headers["Content-Length"] = str(len(body))
    signed = sign_v4("PUT", f"{tls.endpoint}/{bucket}/{key}", headers, "STREAMING-UNSIGNED-PAYLOAD-TRAILER")
    # HTTP chunked transfer: send the aws-chunked bytes in pieces that cut across its framing.
    payload = [body[i : i + 7777] for i in range(0, len(body), 7777)] if chunked_transfer else body
    return send(tls.endpoint, "PUT", f"/{bucket}/{key}", signed.headers, payload,
                cafile=tls.cafile, chunked=chunked_transfer)  # fmt: skip


def test_wrong_trailer_checksum_is_bad_digest(tls_server: TlsServer, tls_s3, tls_bucket: str) -> None:
    old = b"the old version"
    tls_s3.put_object(Bucket=tls_bucket, Key="k", Body=old)
    chunks = [os.urandom(65536), os.urandom(1000)]
    good = crc32_b64(b"".join(chunks))
    wrong = crc32_b64(b"something else")
    reply = _unsigned_trailer_put(tls_server, tls_bucket, "k", chunks, "x-amz-checksum-crc32", wrong)
    assert (reply.status, reply.code) == (400, "BadDigest"), reply
    assert tls_s3.get_object(Bucket=tls_bucket, Key="k")["Body"].read() == old
    reply = _unsigned_trailer_put(tls_server, tls_bucket, "k", chunks, "x-amz-checksum-crc32", good)
    assert reply.status == 200, reply
    assert_stored(tls_s3, tls_bucket, "k", b"".join(chunks))


def test_wrong_trailer_checksum_via_botocore_hook(tls_s3, tls_bucket: str) -> None:
    """boto3's own aws-chunked request, with the trailer value swapped just before sending."""
    body = os.urandom(100_000)

    def corrupt_trailer(request, **_: object) -> None:
        source = request.body
        if hasattr(source, "seek"):
            source.seek(0)  # a retry or an earlier hook may have read the stream already
        raw = source.read() if hasattr(source, "read") else source
        good = crc32_b64(body).encode()
        assert good in raw
        request.body = raw.replace(good, crc32_b64(body + b"!").encode())

    tls_s3.meta.events.register("before-send.s3.PutObject", corrupt_trailer)
    try:
        with pytest.raises(ClientError) as caught:
            tls_s3.put_object(Bucket=tls_bucket, Key="hooked", Body=body)
    finally:
        tls_s3.meta.events.unregister("before-send.s3.PutObject", corrupt_trailer)
    assert caught.value.response["Error"]["Code"] == "BadDigest"
    assert "Contents" not in tls_s3.list_objects_v2(Bucket=tls_bucket)


def _signed_put(
    tls: TlsServer,
    bucket: str,
    key: str,
    chunks: list[bytes],
    *,
    trailer: bool,
    tamper_chunk: int | None = None,
    tamper_trailer: bool = False,
) -> Reply:
    decoded = b"".join(chunks)
    headers = {
        "Content-Encoding": "aws-chunked",
        "x-amz-decoded-content-length": str(len(decoded)),
    }
    mode = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
    if trailer:
        mode += "-TRAILER"
        headers["x-amz-trailer"] = "x-amz-checksum-crc32"
    # The encoded length is known before signing: the framing's size does not depend on the
    # signatures' values, only on their (fixed) length.
    probe = sign_v4("PUT", f"{tls.endpoint}/{bucket}/{key}", headers, mode)
    trailers = {"x-amz-checksum-crc32": crc32_b64(decoded)} if trailer else None
    headers["Content-Length"] = str(len(signed_chunked_body(probe, chunks, trailers)))
    signed = sign_v4("PUT", f"{tls.endpoint}/{bucket}/{key}", headers, mode)
    body = signed_chunked_body(signed, chunks, trailers, tamper_chunk=tamper_chunk)
    if tamper_trailer:
        assert trailers is not None
        body = body.replace(trailers["x-amz-checksum-crc32"].encode(), crc32_b64(decoded + b"x").encode())
    assert len(body) == int(headers["Content-Length"])
    return send(tls.endpoint, "PUT", f"/{bucket}/{key}", signed.headers, body, cafile=tls.cafile)


@pytest.mark.parametrize("trailer", [False, True], ids=["payload", "payload-trailer"])
def test_signed_chunks(tls_server: TlsServer, tls_s3, tls_bucket: str, trailer: bool) -> None:
    chunks = [os.urandom(64 * 1024), os.urandom(64 * 1024), os.urandom(12345)]
    reply = _signed_put(tls_server, tls_bucket, "signed", chunks, trailer=trailer)
    assert reply.status == 200, reply
    assert reply.headers["etag"] == f'"{hashlib.md5(b"".join(chunks)).hexdigest()}"'
    assert_stored(tls_s3, tls_bucket, "signed", b"".join(chunks))


@pytest.mark.parametrize("trailer", [False, True], ids=["payload", "payload-trailer"])
def test_tampered_chunk_is_refused(tls_server: TlsServer, tls_s3, tls_bucket: str, trailer: bool) -> None:
    chunks = [os.urandom(64 * 1024), os.urandom(64 * 1024), os.urandom(100)]
    reply = _signed_put(tls_server, tls_bucket, "tampered", chunks, trailer=trailer, tamper_chunk=1)
    assert (reply.status, reply.code) == (403, "SignatureDoesNotMatch"), reply
    assert "Contents" not in tls_s3.list_objects_v2(Bucket=tls_bucket)


def test_tampered_trailer_is_refused(tls_server: TlsServer, tls_s3, tls_bucket: str) -> None:
    chunks = [os.urandom(70_000)]
    reply = _signed_put(tls_server, tls_bucket, "tampered", chunks, trailer=True, tamper_trailer=True)
    assert (reply.status, reply.code) == (403, "SignatureDoesNotMatch"), reply
    assert "Contents" not in tls_s3.list_objects_v2(Bucket=tls_bucket)


def test_aws_chunked_inside_http_chunked_transfer(tls_server: TlsServer, tls_s3, tls_bucket: str) -> None:
    """No Content-Length at all: only x-amz-decoded-content-length says how big the object is."""
    chunks = [os.urandom(65536) for _ in range(5)] + [os.urandom(4321)]
    decoded = b"".join(chunks)
    reply = _unsigned_trailer_put(tls_server, tls_bucket, "js-sdk", chunks, "x-amz-checksum-crc64nvme",
                                  crc64nvme_b64(decoded), chunked_transfer=True)  # fmt: skip
    assert reply.status == 200, reply
    assert reply.headers["x-amz-checksum-crc64nvme"] == crc64nvme_b64(decoded)
    assert_stored(tls_s3, tls_bucket, "js-sdk", decoded)
    # And a wrong CRC64NVME in the same framing is refused, leaving the object as it was.
    reply = _unsigned_trailer_put(tls_server, tls_bucket, "js-sdk", chunks, "x-amz-checksum-crc64nvme",
                                  crc64nvme_b64(b"nope"), chunked_transfer=True)  # fmt: skip
    assert (reply.status, reply.code) == (400, "BadDigest"), reply
    assert_stored(tls_s3, tls_bucket, "js-sdk", decoded)
