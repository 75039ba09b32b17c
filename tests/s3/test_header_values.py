"""Header values through a PUT and back: non-ASCII user metadata (signed by boto3, returned
RFC 2047-encoded as S3 does) and the stored system headers, returned byte for byte as sent."""

from __future__ import annotations

import socket
from email.header import decode_header, make_header

import botocore.handlers
import pytest
from botocore.auth import HmacV1Auth, S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from server.http_semantics import meta_from_headers
from server.request_headers import headers_from
from tests.conftest import ACCESS_KEY, REGION, SECRET_KEY, ServerProcess, make_client


def rfc2047_text(value: str) -> str:
    """What a mail-header decoder (and newer SDKs) make of a returned metadata value."""
    return str(make_header(decode_header(value)))


@pytest.fixture
def unicode_s3(server: ServerProcess):
    """A boto3 client that sends non-ASCII metadata. botocore refuses it before sending by
    default (an old reading of S3's docs); S3 accepts it, and so must we."""
    client = make_client(server.endpoint)
    for operation in ("PutObject", "CopyObject", "CreateMultipartUpload"):
        client.meta.events.unregister(
            f"before-parameter-build.s3.{operation}", botocore.handlers.validate_ascii_metadata
        )
    return client


@pytest.mark.parametrize("value", ["café ☕", "naïve_=?x?=", "日本語のメタデータ", "tab\there"])
def test_non_ascii_metadata_signed_by_boto3_round_trips(unicode_s3, bucket, value: str) -> None:
    unicode_s3.put_object(Bucket=bucket, Key="k", Body=b"x", Metadata={"name": value})
    for response in (
        unicode_s3.head_object(Bucket=bucket, Key="k"),
        unicode_s3.get_object(Bucket=bucket, Key="k"),
    ):
        returned = response["Metadata"]["name"]
        assert returned.isascii()  # mail-safe on the wire, as S3 returns it
        assert rfc2047_text(returned) == value


def test_non_ascii_metadata_signed_with_sigv2(server: ServerProcess, bucket) -> None:
    v2 = make_client(server.endpoint, signature_version="s3")
    v2.meta.events.unregister(
        "before-parameter-build.s3.PutObject", botocore.handlers.validate_ascii_metadata
    )
    v2.put_object(Bucket=bucket, Key="k", Body=b"x", Metadata={"name": "café ☕"})
    assert rfc2047_text(v2.head_object(Bucket=bucket, Key="k")["Metadata"]["name"]) == "café ☕"


def test_non_ascii_metadata_is_rfc2047_encoded_like_s3(unicode_s3, bucket) -> None:
    unicode_s3.put_object(Bucket=bucket, Key="k", Body=b"x", Metadata={"name": "café ☕", "plain": "a b_c"})
    metadata = unicode_s3.head_object(Bucket=bucket, Key="k")["Metadata"]
    assert metadata == {"name": "=?UTF-8?Q?caf=C3=A9_=E2=98=95?=", "plain": "a b_c"}


def test_rfc2047_metadata_sent_is_decoded_before_storing(unicode_s3, bucket) -> None:
    # S3 decodes encoded-words before storing: sending the encoded form is the same as the text.
    unicode_s3.put_object(Bucket=bucket, Key="k", Body=b"x", Metadata={"name": "=?UTF-8?B?Y2Fmw6kg4piV?="})
    returned = unicode_s3.head_object(Bucket=bucket, Key="k")["Metadata"]["name"]
    assert returned == "=?UTF-8?Q?caf=C3=A9_=E2=98=95?="


def test_non_ascii_metadata_counts_utf8_bytes(unicode_s3, bucket, expect_error) -> None:
    with expect_error("MetadataTooLarge", 400):
        unicode_s3.put_object(Bucket=bucket, Key="k", Body=b"x", Metadata={"k": "é" * 1100})


def test_non_ascii_metadata_through_copy(unicode_s3, bucket) -> None:
    unicode_s3.put_object(Bucket=bucket, Key="src", Body=b"x", Metadata={"name": "café"})
    unicode_s3.copy_object(Bucket=bucket, Key="kept", CopySource={"Bucket": bucket, "Key": "src"})
    unicode_s3.copy_object(
        Bucket=bucket,
        Key="replaced",
        CopySource={"Bucket": bucket, "Key": "src"},
        Metadata={"name": "thé"},
        MetadataDirective="REPLACE",
    )
    assert rfc2047_text(unicode_s3.head_object(Bucket=bucket, Key="kept")["Metadata"]["name"]) == "café"
    assert rfc2047_text(unicode_s3.head_object(Bucket=bucket, Key="replaced")["Metadata"]["name"]) == "thé"


# --- system headers: stored and returned exactly as sent ---------------------------------------------

SENT_AS_IS = {
    b"Content-Encoding": b"gzip, br",
    b"Content-Disposition": b"attachment; filename=\"r\xc3\xa9sum\xc3\xa9.txt\"; filename*=UTF-8''r%C3%A9sum%C3%A9.txt",
    b"Content-Language": b"en-US, fr-CA",
    b"Cache-Control": b"max-age=60,  must-revalidate",
    b"Expires": b"not a date, but kept",
    b"Content-Type": b'text/plain; charset="utf-8"; format=flowed',
}


def send_bytes(
    server: ServerProcess,
    method: str,
    url: str,
    headers: dict[bytes, bytes] | list[tuple[bytes, bytes]],
    body: bytes = b"",
) -> tuple[int, dict[bytes, bytes]]:
    """One request with these exact header bytes (a list may repeat a name; a presigned URL
    carries the signature, so the headers need not be signed); the status and the response
    headers exactly as received."""
    target = url.split(str(server.port), 1)[1].encode()
    lines = [method.encode() + b" " + target + b" HTTP/1.1", f"Host: 127.0.0.1:{server.port}".encode()]
    pairs = headers.items() if isinstance(headers, dict) else headers
    lines += [name + b": " + value for name, value in pairs]
    lines += [f"Content-Length: {len(body)}".encode(), b"Connection: close"]
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(b"\r\n".join(lines) + b"\r\n\r\n" + body)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            assert chunk, data
            data += chunk
    head = data.split(b"\r\n\r\n", 1)[0].split(b"\r\n")
    received = {
        name.strip().lower(): value.strip() for name, _, value in (line.partition(b":") for line in head[1:])
    }
    return int(head[0].split()[1]), received


@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_stored_headers_come_back_byte_for_byte(server, bucket, method: str) -> None:
    s3 = make_client(server.endpoint, signature_version="s3v4")  # signs the host header only
    put_url = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "k"})
    status, _ = send_bytes(server, "PUT", put_url, SENT_AS_IS, b"x")
    assert status == 200
    read_url = s3.generate_presigned_url(
        "get_object" if method == "GET" else "head_object", Params={"Bucket": bucket, "Key": "k"}
    )
    status, got = send_bytes(server, method, read_url, {})
    assert status == 200
    assert {name: got.get(name.lower()) for name in SENT_AS_IS} == SENT_AS_IS


def test_only_the_aws_chunked_token_is_dropped_from_content_encoding() -> None:
    # boto3 adds "aws-chunked" to Content-Encoding for a streamed upload: framing, not the object's.
    def stored(value: str) -> str | None:
        return meta_from_headers(headers_from({"content-encoding": value})).system.get("content-encoding")

    assert stored("gzip, br") == "gzip, br"
    assert stored("aws-chunked") is None
    assert stored("aws-chunked,gzip") == "gzip"
    assert stored("gzip, aws-chunked") == "gzip"
    assert stored("gzip,  br , aws-chunked") == "gzip,  br"


def test_signature_error_over_non_utf8_header_bytes_is_a_403(server, bucket) -> None:
    # The error echoes the canonical request; a header byte that is not UTF-8 must not turn the
    # SignatureDoesNotMatch into a 500.
    request = AWSRequest(
        method="PUT", url=f"{server.endpoint}/{bucket}/k", data=b"x", headers={"x-amz-meta-a": "e"}
    )
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", REGION).add_auth(request)
    headers = {
        name.encode(): value.encode() for name, value in request.headers.items() if name.lower() != "host"
    }
    headers[b"x-amz-meta-a"] = b"\xe9"
    status, received = send_bytes(server, "PUT", f"{server.endpoint}/{bucket}/k", headers, b"x")
    assert (status, received[b"content-type"]) == (403, b"application/xml")


@pytest.mark.parametrize("signer", [S3SigV4Auth, HmacV1Auth])
def test_a_repeated_signed_header_is_signed_as_its_values_joined(server, bucket, signer) -> None:
    # AWS (and botocore) sign a header sent twice as its values, each trimmed, joined with ","
    # (SigV4's CanonicalHeaders, SigV2's x-amz-* lines); signed as its first value alone, such a
    # request was refused with SignatureDoesNotMatch.
    request = AWSRequest(method="PUT", url=f"{server.endpoint}/{bucket}/k", data=b"x")
    request.headers["x-amz-meta-a"] = " one "
    request.headers["x-amz-meta-a"] = "two  three"  # a second header line, not a replacement
    credentials = Credentials(ACCESS_KEY, SECRET_KEY)
    auth = S3SigV4Auth(credentials, "s3", REGION) if signer is S3SigV4Auth else HmacV1Auth(credentials)
    auth.add_auth(request)
    assert request.headers.get_all("x-amz-meta-a") == [" one ", "two  three"]
    headers = [
        (name.encode(), value.encode()) for name, value in request.headers.items() if name.lower() != "host"
    ]
    status, _ = send_bytes(server, "PUT", f"{server.endpoint}/{bucket}/k", headers, b"x")
    assert status == 200


@pytest.mark.parametrize("name", ["authorization", "x-amz-date", "x-amz-content-sha256"])
def test_a_repeated_authentication_header_gets_an_s3_answer(server, bucket, name: str) -> None:
    # The verifier sees a repeated header as its values joined (above), the headers it parses
    # itself too: a request that repeats one is answered (here: accepted when the copies agree, or
    # refused with an S3 error), never a 500.
    request = AWSRequest(method="PUT", url=f"{server.endpoint}/{bucket}/k", data=b"x")
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", REGION).add_auth(request)
    headers = []
    for header, value in request.headers.items():
        if header.lower() != "host":
            headers += [(header.encode(), value.encode())] * (2 if header.lower() == name else 1)
    status, received = send_bytes(server, "PUT", f"{server.endpoint}/{bucket}/k", headers, b"x")
    assert status in (200, 400, 403), status
    assert status == 200 or received[b"content-type"] == b"application/xml"


@pytest.mark.parametrize(
    ("method", "header", "value", "status"),
    [
        # Byte 0xB2 is "²" once decoded as latin-1: str.isdigit() says yes, int() says no (was a 500).
        ("GET", b"Range", b"bytes=\xb2-", 200),  # a Range that is not one is ignored
        ("GET", b"Range", b"bytes=0-\xb9", 200),
        ("PUT", b"x-amz-decoded-content-length", b"\xb2", 400),
    ],
)
def test_non_ascii_digits_in_number_headers_are_not_a_500(
    server, bucket, method: str, header: bytes, value: bytes, status: int
) -> None:
    s3 = make_client(server.endpoint, signature_version="s3v4")
    s3.put_object(Bucket=bucket, Key="k", Body=b"0123456789")
    url = s3.generate_presigned_url(
        "get_object" if method == "GET" else "put_object", Params={"Bucket": bucket, "Key": "k"}
    )
    extra = {b"Content-Encoding": b"aws-chunked"} if method == "PUT" else {}
    got, _ = send_bytes(
        server, method, url, {header: value, **extra}, b"0\r\n\r\n" if method == "PUT" else b""
    )
    assert got == status
