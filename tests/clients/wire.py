"""Hand-built S3 requests for what no SDK sends on demand: signed aws-chunked bodies, wrong
trailers, skewed clocks, a Host header of our choosing.

The SigV4 header signature comes from botocore's own signer (so it is the reference, not a copy
of the server's code); the chunk and trailer signatures follow the AWS documentation
("Signature calculations for the Authorization header: transferring payload in multiple
chunks") and are written out here.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import socket
import ssl
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.conftest import ACCESS_KEY, REGION, SECRET_KEY

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
AMZ_DATE = "%Y%m%dT%H%M%SZ"


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def code(self) -> str | None:
        """The S3 error code of an XML error body."""
        if not self.body:
            return self.headers.get("x-amz-error-code")
        return ET.fromstring(self.body).findtext("Code")


@dataclass
class Signed:
    """A signed request: headers to send, plus what chunk signatures chain from."""

    headers: dict[str, str]
    amz_date: str
    scope: str
    seed_signature: str
    key: bytes


def signing_key(date: str, secret: str = SECRET_KEY) -> bytes:
    key = f"AWS4{secret}".encode()
    for part in (date, REGION, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def sign_v4(
    method: str,
    url: str,
    headers: Mapping[str, str],
    payload_hash: str,
    *,
    when: datetime | None = None,
) -> Signed:
    """SigV4-sign a request with botocore's signer at `when` (default now); all headers signed."""
    moment = (when or datetime.now(UTC)).astimezone(UTC)
    request = AWSRequest(method=method, url=url, headers={**headers, "X-Amz-Content-SHA256": payload_hash})
    request.context["timestamp"] = moment.strftime(AMZ_DATE)
    auth = SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", REGION)
    # add_auth() would stamp the current time; these are its steps with our own timestamp.
    auth._modify_request_before_signing(request)
    canonical = auth.canonical_request(request)
    signature = auth.signature(auth.string_to_sign(request, canonical), request)
    auth._inject_signature_to_request(request, signature)
    amz_date = request.context["timestamp"]
    scope = f"{amz_date[:8]}/{REGION}/s3/aws4_request"
    sent = dict(request.headers.items())
    sent.setdefault("Host", urlsplit(url).netloc)
    return Signed(sent, amz_date, scope, signature, signing_key(amz_date[:8]))


def chunk_signature(signed: Signed, previous: str, data: bytes) -> str:
    string_to_sign = "\n".join(
        ("AWS4-HMAC-SHA256-PAYLOAD", signed.amz_date, signed.scope, previous, EMPTY_SHA256,
         hashlib.sha256(data).hexdigest())
    )  # fmt: skip
    return hmac.new(signed.key, string_to_sign.encode(), hashlib.sha256).hexdigest()


def trailer_signature(signed: Signed, previous: str, trailers: Mapping[str, str]) -> str:
    canonical = "".join(f"{name}:{trailers[name]}\n" for name in sorted(trailers))
    string_to_sign = "\n".join(
        ("AWS4-HMAC-SHA256-TRAILER", signed.amz_date, signed.scope, previous,
         hashlib.sha256(canonical.encode()).hexdigest())
    )  # fmt: skip
    return hmac.new(signed.key, string_to_sign.encode(), hashlib.sha256).hexdigest()


def signed_chunked_body(
    signed: Signed,
    chunks: Iterable[bytes],
    trailers: Mapping[str, str] | None = None,
    *,
    tamper_chunk: int | None = None,
) -> bytes:
    """STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER] framing; `tamper_chunk` flips a byte after signing."""
    out = bytearray()
    previous = signed.seed_signature
    for index, data in enumerate([*chunks, b""]):
        previous = chunk_signature(signed, previous, data)
        sent = data
        if index == tamper_chunk and data:
            sent = bytes([data[0] ^ 0xFF]) + data[1:]
        out += f"{len(data):x};chunk-signature={previous}\r\n".encode() + sent
        if data or trailers is None:
            out += b"\r\n"
    if trailers is not None:
        for name, value in trailers.items():
            out += f"{name}:{value}\r\n".encode()
        out += f"x-amz-trailer-signature:{trailer_signature(signed, previous, trailers)}\r\n\r\n".encode()
    return bytes(out)


def unsigned_chunked_body(chunks: Iterable[bytes], trailers: Mapping[str, str]) -> bytes:
    """STREAMING-UNSIGNED-PAYLOAD-TRAILER framing, as botocore and the other SDKs send it."""
    out = bytearray()
    for data in chunks:
        out += f"{len(data):x}\r\n".encode() + data + b"\r\n"
    out += b"0\r\n"
    for name, value in trailers.items():
        out += f"{name}:{value}\r\n".encode()
    out += b"\r\n"
    return bytes(out)


def connect(endpoint: str, cafile: str | None = None, timeout: float = 60.0) -> http.client.HTTPConnection:
    parts = urlsplit(endpoint)
    assert parts.hostname and parts.port
    if parts.scheme == "https":
        context = ssl.create_default_context(cafile=cafile)
        return http.client.HTTPSConnection(parts.hostname, parts.port, context=context, timeout=timeout)
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)


def send(
    endpoint: str,
    method: str,
    path: str,
    headers: Mapping[str, str],
    body: bytes | Iterable[bytes] | None = None,
    *,
    cafile: str | None = None,
    chunked: bool = False,
) -> Reply:
    """One request over a fresh connection, exactly as given (`chunked`: HTTP chunked transfer)."""
    conn = connect(endpoint, cafile)
    try:
        conn.request(method, path, body=body, headers=dict(headers), encode_chunked=chunked)
        response = conn.getresponse()
        data = response.read()
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, data)
    finally:
        conn.close()


def read_response(sock: socket.socket, *, bodiless: bool = False) -> tuple[int, dict[str, str], bytes]:
    """One response off a raw socket, read exactly (the connection may stay open): status, headers
    (lower-case names) and the Content-Length body; `bodiless` for the answer to a HEAD, whose
    Content-Length announces a body that is not sent."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return parse_head(head, body, sock, bodiless=bodiless)


def parse_head(
    head: bytes, body: bytes, sock: socket.socket | None = None, *, bodiless: bool = False
) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of a response head and the bytes after it, reading the rest of the
    Content-Length body from `sock` when given."""
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = 0 if bodiless else int(headers.get("content-length", "0"))
    while sock is not None and len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "closed in the middle of a response body"
        body += chunk
    return int(lines[0].split()[1]), headers, body[:length]
