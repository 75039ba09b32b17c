"""server.signature against requests that botocore itself signs, and the AWS documentation's
known answers for the streaming (aws-chunked) forms. No server: requests are captured from a
real botocore client just before they would be sent."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import io
import zlib
from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import boto3
import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials as BotoCredentials
from botocore.httpchecksum import AwsChunkedWrapper, Crc32Checksum
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server.errors import (
    AccessDenied,
    AuthorizationHeaderMalformed,
    AuthorizationQueryParametersError,
    IncompleteBody,
    InvalidAccessKeyId,
    InvalidArgument,
    InvalidRequest,
    RequestTimeTooSkewed,
    S3Error,
    SignatureDoesNotMatch,
    XAmzContentSHA256Mismatch,
)
from server.signature import (
    AuthContext,
    PayloadMode,
    PayloadReader,
    RequestToVerify,
    authenticate,
    has_credentials,
)
from server.signature import payload as payload_module
from server.signature.keys import signing_key
from server.signature.request import HeaderLookup
from server.signature.streaming import trailer_signature

AKID = "AKIDTIERSTORE"
SECRET = "tier/Store+Secret=Key0123456789abcdefghij"
DOC_AKID = "AKIAIOSFODNN7EXAMPLE"
DOC_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
ENDPOINT = "http://localhost:9000"

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class KeyStore:
    def __init__(self, keys: dict[str, str]) -> None:
        self.keys = keys

    def secret_for(self, access_key: str) -> str | None:
        return self.keys.get(access_key)


CREDS = KeyStore({AKID: SECRET, DOC_AKID: DOC_SECRET})
WRONG = KeyStore({AKID: SECRET + "x"})


# --- capturing what botocore would send ----------------------------------------------------------


class Captured(Exception):
    """Raised from botocore's before-send hook: the prepared request, never sent."""


def make_client(endpoint: str = ENDPOINT, *, secret: str = SECRET, **config: Any) -> Any:
    config.setdefault("signature_version", "s3v4")
    config.setdefault("s3", {"addressing_style": "path"})
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=AKID,
        aws_secret_access_key=secret,
        config=Config(retries={"max_attempts": 1}, **config),
    )

    def capture(request: Any, **_: Any) -> None:
        raise Captured(request)

    client.meta.events.register("before-send.s3.*", capture)
    return client


_CLIENTS: dict[tuple[str, str], Any] = {}


def client_for(endpoint: str = ENDPOINT, signature_version: str = "s3v4", addressing: str = "path") -> Any:
    key = (endpoint, signature_version + addressing)
    if key not in _CLIENTS:
        _CLIENTS[key] = make_client(
            endpoint, signature_version=signature_version, s3={"addressing_style": addressing}
        )
    return _CLIENTS[key]


def _text(value: str | bytes) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


def to_verify(prepared: Any, virtual_host_bucket: str | None = None) -> RequestToVerify:
    parts = urlsplit(prepared.url)
    headers: dict[str, str] = {}
    for name, value in prepared.headers.items():
        lname = name.lower()
        headers[lname] = f"{headers[lname]},{_text(value)}" if lname in headers else _text(value)
    headers.setdefault("host", parts.netloc)
    return RequestToVerify(prepared.method, parts.path or "/", parts.query, headers, virtual_host_bucket)


def capture(client: Any, operation: str, **params: Any) -> tuple[RequestToVerify, bytes]:
    with pytest.raises(Captured) as caught:
        getattr(client, operation)(**params)
    prepared = caught.value.args[0]
    body = prepared.body
    if hasattr(body, "read"):
        body = body.read()
    vhost = None
    host = urlsplit(prepared.url).hostname or ""
    if host.endswith(".localhost") or (host.endswith(".amazonaws.com") and host.count(".") > 2):
        vhost = host.split(".", 1)[0]
    return to_verify(prepared, vhost), body or b""


def from_url(url: str, method: str = "GET", headers: dict[str, str] | None = None) -> RequestToVerify:
    parts = urlsplit(url)
    return RequestToVerify(method, parts.path, parts.query, {"host": parts.netloc, **(headers or {})})


# --- async body helpers ------------------------------------------------------------------------------


async def pieces(data: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def pieces_by(data: bytes, sizes: Iterable[int]) -> AsyncIterator[bytes]:
    start = 0
    for size in sizes:
        if start >= len(data):
            break
        yield data[start : start + size]
        start += size
    if start < len(data):
        yield data[start:]


def read_all(reader: PayloadReader) -> bytes:
    async def go() -> bytes:
        out = bytearray()
        async for piece in reader:
            assert piece, "PayloadReader must never yield empty pieces"
            out += piece
        return bytes(out)

    return asyncio.run(go())


def decode(
    body: bytes, auth: AuthContext, headers: HeaderLookup, size: int = 65536
) -> tuple[bytes, PayloadReader]:
    reader = PayloadReader(pieces(body, size), auth, headers)
    return read_all(reader), reader


# --- an independent aws-chunked encoder, following the AWS docs ----------------------------------

EMPTY = hashlib.sha256(b"").hexdigest()


def derive_key(secret: str, date: str, region: str = "us-east-1", service: str = "s3") -> bytes:
    key = ("AWS4" + secret).encode()
    for part in (date, region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def encode_signed(
    chunks: list[bytes],
    *,
    key: bytes,
    amz_date: str,
    scope: str,
    seed: str,
    trailers: dict[str, str] | None = None,
) -> tuple[bytes, list[str]]:
    """STREAMING-AWS4-HMAC-SHA256-PAYLOAD[-TRAILER] body; returns it and the chunk signatures."""
    out = bytearray()
    previous = seed
    signatures = []
    for chunk in [*chunks, b""]:
        sts = "\n".join(
            ("AWS4-HMAC-SHA256-PAYLOAD", amz_date, scope, previous, EMPTY, hashlib.sha256(chunk).hexdigest())
        )
        previous = hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()
        signatures.append(previous)
        out += f"{len(chunk):x};chunk-signature={previous}\r\n".encode()
        if chunk:
            out += chunk + b"\r\n"
    if trailers is None:
        out += b"\r\n"
    else:
        canonical = "".join(f"{name}:{trailers[name]}\n" for name in sorted(trailers))
        sts = "\n".join(
            (
                "AWS4-HMAC-SHA256-TRAILER",
                amz_date,
                scope,
                previous,
                hashlib.sha256(canonical.encode()).hexdigest(),
            )
        )
        trailer_sig = hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()
        for name, value in trailers.items():
            out += f"{name}:{value}\r\n".encode()
        out += f"x-amz-trailer-signature:{trailer_sig}\r\n\r\n".encode()
    return bytes(out), signatures


def streaming_context(
    mode: PayloadMode, seed: str = "0" * 64, amz_date: str = "20130524T000000Z"
) -> AuthContext:
    scope = f"{amz_date[:8]}/us-east-1/s3/aws4_request"
    return AuthContext(
        access_key=DOC_AKID,
        payload_mode=mode,
        payload_sha256=None,
        signing_key=derive_key(DOC_SECRET, amz_date[:8]),
        scope=scope,
        amz_date=amz_date,
        seed_signature=seed,
    )


# =====================================================================================================
# authenticate: SigV4 header
# =====================================================================================================

TRICKY_KEYS = [
    "plain.txt",
    "with space/and more  spaces.txt",
    "ünïcødé/日本語/ファイル.bin",
    "colon:key:here",
    "double//slash///end/",
    "dot/./segments/../kept",
    "plus+sign+key",
    "percent%20literal%2F%",
    "equals=and&amp;?question",
    "tilde~under_score-dash.dot",
    "*star'(paren)!@$,;",
    "emoji 🎉 key",
]


@pytest.mark.parametrize("key", TRICKY_KEYS)
@pytest.mark.parametrize("operation", ["get_object", "put_object"])
def test_sigv4_header_tricky_keys(key: str, operation: str) -> None:
    params: dict[str, Any] = {"Bucket": "bkt", "Key": key}
    if operation == "put_object":
        params["Body"] = b"some data"
    req, body = capture(client_for(), operation, **params)
    ctx = authenticate(req, CREDS)
    assert ctx.access_key == AKID
    assert ctx.scheme == "sigv4-header"
    if operation == "put_object":
        assert ctx.payload_mode is PayloadMode.SIGNED_SHA256
        assert ctx.payload_sha256 == hashlib.sha256(b"some data").hexdigest()
        data, _ = decode(body, ctx, req.headers)
        assert data == b"some data"


def test_sigv4_query_string_canonicalisation() -> None:
    client = client_for()
    for operation, params in [
        ("list_objects_v2", {"Bucket": "bkt", "Prefix": "a b+c/ü=&", "Delimiter": "/", "StartAfter": "x~y"}),
        ("list_multipart_uploads", {"Bucket": "bkt", "Prefix": "p"}),  # ?uploads (no "=")
        (
            "get_object",
            {"Bucket": "bkt", "Key": "k", "VersionId": "v+1/2", "ResponseContentType": "text/plain; x=y"},
        ),
        ("get_object_acl", {"Bucket": "bkt", "Key": "k k"}),
    ]:
        req, _ = capture(client, operation, **params)
        assert authenticate(req, CREDS).access_key == AKID, operation


def test_sigv4_streaming_unsigned_trailer_from_botocore() -> None:
    """Over https botocore sends PutObject as aws-chunked with a CRC32 trailer."""
    req, body = capture(
        client_for("https://localhost:9000"), "put_object", Bucket="b", Key="k", Body=b"hello world"
    )
    assert req.headers["x-amz-content-sha256"] == "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
    ctx = authenticate(req, CREDS)
    assert ctx.payload_mode is PayloadMode.STREAMING_UNSIGNED_TRAILER
    for size in (1, 7, 65536):
        data, reader = decode(body, ctx, req.headers, size)
        assert data == b"hello world"
        expected = base64.b64encode(zlib.crc32(b"hello world").to_bytes(4, "big")).decode()
        assert reader.trailers == {"x-amz-checksum-crc32": expected}
        assert reader.decoded_length == 11


def test_sigv4_with_date_header_instead_of_x_amz_date() -> None:
    request = AWSRequest(
        method="GET",
        url=f"{ENDPOINT}/bkt/key%20x",
        headers={"Date": "placeholder", "host": "localhost:9000"},
    )
    S3SigV4Auth(BotoCredentials(AKID, SECRET), "s3", "eu-west-3").add_auth(request)
    req = to_verify(request.prepare())
    assert "x-amz-date" not in req.headers
    ctx = authenticate(req, CREDS, region="eu-west-3")
    assert ctx.region == "eu-west-3"
    with pytest.raises(AuthorizationHeaderMalformed):
        authenticate(req, CREDS, region="us-east-1")


def test_signing_keys_are_cached() -> None:
    req, _ = capture(client_for(), "head_bucket", Bucket="cachebkt")
    authenticate(req, CREDS)
    hits = signing_key.cache_info().hits
    authenticate(req, CREDS)
    assert signing_key.cache_info().hits == hits + 1


def test_aws_docs_streaming_seed_request() -> None:
    """The AWS docs' chunked-upload example: the seed signature verifies as a header request."""
    req = RequestToVerify(
        "PUT",
        "/examplebucket/chunkObject.txt",
        "",
        {
            "host": "s3.amazonaws.com",
            "x-amz-date": "20130524T000000Z",
            "x-amz-storage-class": "REDUCED_REDUNDANCY",
            "authorization": f"AWS4-HMAC-SHA256 Credential={DOC_AKID}/20130524/us-east-1/s3/aws4_request,"
            "SignedHeaders=content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;"
            "x-amz-decoded-content-length;x-amz-storage-class,"
            "Signature=4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9",
            "x-amz-content-sha256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
            "content-encoding": "aws-chunked",
            "x-amz-decoded-content-length": "66560",
            "content-length": "66824",
        },
    )
    ctx = authenticate(req, CREDS, now=datetime(2013, 5, 24, 0, 5, tzinfo=UTC))
    assert ctx.payload_mode is PayloadMode.STREAMING_SIGNED
    assert ctx.seed_signature == "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"
    assert ctx.scope == "20130524/us-east-1/s3/aws4_request"

    body, sigs = encode_signed(
        [b"a" * 65536, b"a" * 1024],
        key=derive_key(DOC_SECRET, "20130524"),
        amz_date="20130524T000000Z",
        scope=ctx.scope,
        seed=ctx.seed_signature,
    )
    assert sigs == [
        "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
        "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
        "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9",
    ]
    assert len(body) == 66824
    for size in (1, 7, 4096, 65536, len(body)):
        data, reader = decode(body, ctx, req.headers, size)
        assert data == b"a" * 66560
        assert reader.decoded_length == 66560
        assert reader.trailers == {}


def test_aws_docs_trailer_signature() -> None:
    """Known answer from the AWS docs' trailing-header example (final chunk -> trailer)."""
    sig = trailer_signature(
        derive_key(DOC_SECRET, "20130524"),
        "20130524T000000Z",
        "20130524/us-east-1/s3/aws4_request",
        "e05ab64fe1dfdbf0b5870abbaabdb063c371d4e96f2767e6934d90529c5ae850",
        {"x-amz-checksum-crc32c": "wdBDMA=="},
    )
    assert sig == "41e14ac611e27a8bb3d66c3bad6856f209297767d5dd4fc87d8fa9e422e03faf"


# =====================================================================================================
# authenticate: presigned URLs
# =====================================================================================================


@pytest.mark.parametrize("operation", ["get_object", "put_object"])
def test_presigned_v4(operation: str) -> None:
    client = client_for()
    url = client.generate_presigned_url(operation, Params={"Bucket": "bkt", "Key": "a b/ü+c"}, ExpiresIn=600)
    assert "X-Amz-Signature=" in url
    method = "GET" if operation == "get_object" else "PUT"
    ctx = authenticate(from_url(url, method), CREDS)
    assert (ctx.access_key, ctx.scheme, ctx.payload_mode) == (AKID, "sigv4-query", PayloadMode.UNSIGNED)
    with pytest.raises(SignatureDoesNotMatch):
        authenticate(from_url(url, "DELETE"), CREDS)
    with pytest.raises(SignatureDoesNotMatch):
        authenticate(from_url(url.replace("/bkt/", "/bkt2/")), CREDS)


def test_presigned_v4_expiry() -> None:
    url = client_for().generate_presigned_url("get_object", Params={"Bucket": "b", "Key": "k"}, ExpiresIn=60)
    req = from_url(url)
    now = datetime.now(UTC)
    authenticate(req, CREDS, now=now + timedelta(seconds=30))
    with pytest.raises(AccessDenied, match="Request has expired"):
        authenticate(req, CREDS, now=now + timedelta(seconds=120))
    with pytest.raises(AccessDenied, match="not valid yet"):
        authenticate(req, CREDS, now=now - timedelta(hours=1))
    week = client_for().generate_presigned_url(
        "get_object", Params={"Bucket": "b", "Key": "k"}, ExpiresIn=604801
    )
    with pytest.raises(AuthorizationQueryParametersError, match="must be less than a week") as caught:
        authenticate(from_url(week), CREDS)
    assert caught.value.status == 403  # as AWS answers: the URL can never work


@pytest.mark.parametrize(
    "edit",
    [
        lambda q: {k: v for k, v in q.items() if k != "X-Amz-Credential"},
        lambda q: {**q, "X-Amz-Algorithm": "AWS4-HMAC-SHA1"},
        lambda q: {**q, "X-Amz-Date": "2024-01-01"},
        lambda q: {**q, "X-Amz-Expires": "soon"},
        lambda q: {**q, "X-Amz-Expires": "-5"},
        lambda q: {**q, "X-Amz-Credential": "AKID/bad"},
        lambda q: {**q, "X-Amz-SignedHeaders": "x-amz-date"},
    ],
)
def test_presigned_v4_malformed(edit: Any) -> None:
    url = client_for().generate_presigned_url("get_object", Params={"Bucket": "b", "Key": "k"})
    parts = urlsplit(url)
    query = "&".join(f"{k}={v}" for k, v in edit(dict(parse_qsl(parts.query))).items())
    with pytest.raises(AuthorizationQueryParametersError):
        authenticate(RequestToVerify("GET", parts.path, query, {"host": parts.netloc}), CREDS)


def test_boto3_default_presign_is_sigv2_query() -> None:
    client = boto3.client(
        "s3",
        region_name="us-east-1",
        endpoint_url=ENDPOINT,
        aws_access_key_id=AKID,
        aws_secret_access_key=SECRET,
    )
    url = client.generate_presigned_url(
        "get_object",
        Params={
            "Bucket": "bkt",
            "Key": "dir/a b+c.txt",
            "ResponseContentDisposition": "attachment; filename=x y",
        },
        ExpiresIn=300,
    )
    assert "AWSAccessKeyId=" in url and "Expires=" in url
    ctx = authenticate(from_url(url), CREDS)
    assert (ctx.access_key, ctx.scheme, ctx.payload_mode) == (AKID, "sigv2-query", PayloadMode.UNSIGNED)
    with pytest.raises(SignatureDoesNotMatch):
        authenticate(from_url(url.replace("a%20b", "a%20c")), CREDS)
    with pytest.raises(SignatureDoesNotMatch):
        authenticate(from_url(url), WRONG)
    with pytest.raises(AccessDenied, match="expired"):
        authenticate(from_url(url), CREDS, now=datetime.now(UTC) + timedelta(seconds=600))
    with pytest.raises(AuthorizationQueryParametersError):
        authenticate(from_url(url.replace("Expires=", "Expired=")), CREDS)


# =====================================================================================================
# authenticate: SigV2 header
# =====================================================================================================


@pytest.mark.parametrize("addressing", ["path", "virtual"])
@pytest.mark.parametrize(
    ("operation", "params"),
    [
        (
            "put_object",
            {"Key": "a b/ü:c+d", "Body": b"x", "ContentType": "text/plain", "Metadata": {"k": "v, w"}},
        ),
        ("get_object", {"Key": "k", "VersionId": "3/4", "ResponseCacheControl": "no-cache"}),
        ("list_objects", {"Prefix": "p q"}),
        ("get_object_tagging", {"Key": "k"}),
        ("list_multipart_uploads", {}),
        ("get_bucket_acl", {}),
    ],
)
def test_sigv2_header(addressing: str, operation: str, params: dict[str, Any]) -> None:
    req, _ = capture(
        client_for(signature_version="s3", addressing=addressing), operation, Bucket="bkt", **params
    )
    assert req.headers["authorization"].startswith("AWS ")
    if addressing == "virtual":
        assert req.virtual_host_bucket == "bkt"
    ctx = authenticate(req, CREDS)
    assert (ctx.access_key, ctx.scheme, ctx.payload_mode) == (AKID, "sigv2-header", PayloadMode.UNSIGNED)
    with pytest.raises(SignatureDoesNotMatch):
        authenticate(req, WRONG)
    with pytest.raises(SignatureDoesNotMatch):
        authenticate(
            RequestToVerify("DELETE", req.raw_path, req.query_string, req.headers, req.virtual_host_bucket),
            CREDS,
        )


def test_sigv2_skew() -> None:
    req, _ = capture(client_for(signature_version="s3"), "head_object", Bucket="b", Key="k")
    authenticate(req, CREDS, now=datetime.now(UTC) + timedelta(minutes=10))
    with pytest.raises(RequestTimeTooSkewed):
        authenticate(req, CREDS, now=datetime.now(UTC) + timedelta(minutes=20))
    no_date = {k: v for k, v in req.headers.items() if k != "date"}
    with pytest.raises(AccessDenied):
        authenticate(RequestToVerify(req.method, req.raw_path, req.query_string, no_date), CREDS)


# =====================================================================================================
# authenticate: failures
# =====================================================================================================


def test_wrong_secret_and_unknown_key() -> None:
    req, _ = capture(client_for(), "get_object", Bucket="b", Key="k")
    with pytest.raises(SignatureDoesNotMatch) as caught:
        authenticate(req, WRONG)
    assert "CanonicalRequest" in caught.value.fields
    with pytest.raises(InvalidAccessKeyId):
        authenticate(req, KeyStore({}))
    url = client_for().generate_presigned_url("get_object", Params={"Bucket": "b", "Key": "k"})
    with pytest.raises(SignatureDoesNotMatch):
        authenticate(from_url(url), WRONG)
    with pytest.raises(InvalidAccessKeyId):
        authenticate(from_url(url), KeyStore({}))


def test_sigv4_skew() -> None:
    req, _ = capture(client_for(), "get_object", Bucket="b", Key="k")
    authenticate(req, CREDS, now=datetime.now(UTC) - timedelta(minutes=10))
    for delta in (timedelta(minutes=20), -timedelta(minutes=20)):
        with pytest.raises(RequestTimeTooSkewed):
            authenticate(req, CREDS, now=datetime.now(UTC) + delta)
    authenticate(req, CREDS, now=datetime.now(UTC) + timedelta(minutes=20), max_skew=timedelta(hours=1))


def test_anonymous() -> None:
    req = RequestToVerify("GET", "/bkt/key", "", {"host": "localhost"})
    assert not has_credentials(req)
    with pytest.raises(AccessDenied):
        authenticate(req, CREDS)


GOOD_CRED = f"Credential={AKID}/20260101/us-east-1/s3/aws4_request"


@pytest.mark.parametrize(
    ("authorization", "error"),
    [
        ("AWS4-HMAC-SHA256", AuthorizationHeaderMalformed),
        ("AWS4-HMAC-SHA256 Credential=x", AuthorizationHeaderMalformed),
        ("AWS4-HMAC-SHA256 garbage, more garbage", AuthorizationHeaderMalformed),
        (f"AWS4-HMAC-SHA256 {GOOD_CRED}, SignedHeaders=host", AuthorizationHeaderMalformed),
        (
            f"AWS4-HMAC-SHA256 Credential={AKID}/2026/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=ab",
            AuthorizationHeaderMalformed,
        ),
        (
            f"AWS4-HMAC-SHA256 Credential={AKID}/20260101/us-east-1/ec2/aws4_request, SignedHeaders=host, Signature=ab",
            AuthorizationHeaderMalformed,
        ),
        (
            f"AWS4-HMAC-SHA256 {GOOD_CRED}, SignedHeaders=x-amz-date, Signature=ab",
            AuthorizationHeaderMalformed,
        ),
        (
            f"AWS4-HMAC-SHA256 {GOOD_CRED}, SignedHeaders=Host;X-Amz-Date, Signature=ab",
            AuthorizationHeaderMalformed,
        ),
        (
            f"AWS4-HMAC-SHA256 {GOOD_CRED}, SignedHeaders=host, Signature=ab",
            AuthorizationHeaderMalformed,
        ),  # date
        ("AWS nocolon", AuthorizationHeaderMalformed),
        ("AWS :sig", AuthorizationHeaderMalformed),
        ("Bearer token", InvalidArgument),
        ("AWS4-ECDSA-P256-SHA256 Credential=x", InvalidArgument),
    ],
)
def test_malformed_authorization(authorization: str, error: type[S3Error]) -> None:
    headers = {
        "host": "h",
        "authorization": authorization,
        "x-amz-date": "20260102T000000Z",
        "x-amz-content-sha256": EMPTY,
    }
    with pytest.raises(error):
        authenticate(RequestToVerify("GET", "/", "", headers), CREDS, now=datetime(2026, 1, 2, tzinfo=UTC))


def test_content_sha256_header_rules() -> None:
    req, _ = capture(client_for(), "get_object", Bucket="b", Key="k")
    missing = {k: v for k, v in req.headers.items() if k != "x-amz-content-sha256"}
    with pytest.raises(InvalidRequest):
        authenticate(RequestToVerify("GET", req.raw_path, "", missing), CREDS)
    with pytest.raises(InvalidArgument):
        authenticate(
            RequestToVerify("GET", req.raw_path, "", {**req.headers, "x-amz-content-sha256": "nonsense"}),
            CREDS,
        )


def test_two_auth_mechanisms_refused() -> None:
    req, _ = capture(client_for(), "get_object", Bucket="b", Key="k")
    url = client_for().generate_presigned_url("get_object", Params={"Bucket": "b", "Key": "k"})
    both = RequestToVerify("GET", req.raw_path, urlsplit(url).query, req.headers)
    with pytest.raises(InvalidArgument):
        authenticate(both, CREDS)


@FAST
@given(
    method=st.sampled_from(["GET", "PUT", "get", ""]),
    path=st.text(max_size=30),
    query=st.one_of(
        st.text(max_size=60),
        st.lists(
            st.tuples(
                st.sampled_from(
                    [
                        "X-Amz-Algorithm",
                        "X-Amz-Credential",
                        "X-Amz-Date",
                        "X-Amz-Expires",
                        "X-Amz-SignedHeaders",
                        "X-Amz-Signature",
                        "AWSAccessKeyId",
                        "Signature",
                        "Expires",
                        "acl",
                        "X-Amz-Content-Sha256",
                    ]
                ),
                st.text(max_size=40),
            ),
            max_size=7,
        ).map(lambda pairs: "&".join(f"{k}={v}" for k, v in pairs)),
    ),
    authorization=st.one_of(
        st.none(),
        st.text(max_size=80),
        st.builds(lambda s: "AWS4-HMAC-SHA256 " + s, st.text(max_size=120)),
        st.builds(
            lambda s: f"AWS4-HMAC-SHA256 {GOOD_CRED}, SignedHeaders=host;{s}, Signature={s}",
            st.text(max_size=30),
        ),
        st.builds(lambda s: "AWS " + s, st.text(max_size=60)),
    ),
    date=st.one_of(
        st.none(), st.text(max_size=30), st.just("20260101T000000Z"), st.just("Thu, 01 Jan 2026 00:00:00 GMT")
    ),
    sha=st.one_of(st.none(), st.text(max_size=70), st.just(EMPTY), st.just("UNSIGNED-PAYLOAD")),
)
def test_garbage_only_raises_s3_errors(
    method: str, path: str, query: str, authorization: str | None, date: str | None, sha: str | None
) -> None:
    headers = {"host": "localhost"}
    for name, value in (
        ("authorization", authorization),
        ("x-amz-date", date),
        ("date", date),
        ("x-amz-content-sha256", sha),
    ):
        if value is not None:
            headers[name] = value
    with pytest.raises(S3Error):
        authenticate(
            RequestToVerify(method, path, query, headers), CREDS, now=datetime(2026, 1, 1, tzinfo=UTC)
        )


# =====================================================================================================
# PayloadReader
# =====================================================================================================

SIGNED_DATA = bytes(range(256)) * 700  # 179,200 bytes: several chunks of odd sizes


def signed_body(trailers: dict[str, str] | None = None, chunk: int = 65536) -> tuple[bytes, AuthContext]:
    mode = PayloadMode.STREAMING_SIGNED if trailers is None else PayloadMode.STREAMING_SIGNED_TRAILER
    ctx = streaming_context(mode, seed="5eed" * 16)
    assert ctx.signing_key is not None and ctx.scope is not None and ctx.amz_date is not None
    chunks = [SIGNED_DATA[i : i + chunk] for i in range(0, len(SIGNED_DATA), chunk)]
    body, _ = encode_signed(
        chunks,
        key=ctx.signing_key,
        amz_date=ctx.amz_date,
        scope=ctx.scope,
        seed="5eed" * 16,
        trailers=trailers,
    )
    return body, ctx


CHUNKED_HEADERS = {"content-encoding": "aws-chunked", "x-amz-decoded-content-length": str(len(SIGNED_DATA))}
TRAILER = {"x-amz-checksum-crc32": base64.b64encode(zlib.crc32(SIGNED_DATA).to_bytes(4, "big")).decode()}
TRAILER_HEADERS = {**CHUNKED_HEADERS, "x-amz-trailer": "x-amz-checksum-crc32"}


@FAST
@given(
    sizes=st.lists(st.sampled_from([1, 2, 7, 13, 100, 4096, 65536, 65537, 300_000]), min_size=1, max_size=40)
)
def test_signed_chunks_any_split(sizes: list[int]) -> None:
    body, ctx = signed_body(chunk=50_000)
    reader = PayloadReader(pieces_by(body, sizes), ctx, CHUNKED_HEADERS)
    assert read_all(reader) == SIGNED_DATA
    assert reader.decoded_length == len(SIGNED_DATA)


@FAST
@given(split=st.sampled_from([1, 7, 64, 65536, 1 << 20]), chunk=st.sampled_from([1000, 65536]))
def test_signed_trailer_any_split(split: int, chunk: int) -> None:
    body, ctx = signed_body(TRAILER, chunk=chunk)
    data, reader = decode(body, ctx, TRAILER_HEADERS, split)
    assert data == SIGNED_DATA
    assert reader.trailers == TRAILER


@FAST
@given(
    chunk_size=st.sampled_from([1, 7, 1000, 65536, 1 << 20]),
    split=st.sampled_from([1, 7, 64, 65536]),
    length_known=st.booleans(),
)
def test_unsigned_trailer_from_botocore_wrapper(chunk_size: int, split: int, length_known: bool) -> None:
    data = SIGNED_DATA[: 3_000 if chunk_size < 1000 else None]
    body = AwsChunkedWrapper(io.BytesIO(data), Crc32Checksum, "x-amz-checksum-crc32", chunk_size).read()
    headers = {"content-encoding": "aws-chunked", "x-amz-trailer": "x-amz-checksum-crc32"}
    if length_known:
        headers["x-amz-decoded-content-length"] = str(len(data))
    ctx = AuthContext(AKID, PayloadMode.STREAMING_UNSIGNED_TRAILER, None)
    out, reader = decode(body, ctx, headers, split)
    assert out == data
    assert (
        reader.trailers["x-amz-checksum-crc32"]
        == base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
    )


def test_tampered_chunk_data_and_signatures() -> None:
    body, ctx = signed_body(chunk=50_000)
    flipped = bytearray(body)
    flipped[body.index(b"\r\n") + 100] ^= 1
    with pytest.raises(SignatureDoesNotMatch):
        decode(bytes(flipped), ctx, CHUNKED_HEADERS)
    first_sig = body.index(b"chunk-signature=") + len(b"chunk-signature=")
    bad_sig = (
        body[:first_sig] + (b"0" if body[first_sig : first_sig + 1] != b"0" else b"1") + body[first_sig + 1 :]
    )
    with pytest.raises(SignatureDoesNotMatch):
        decode(bad_sig, ctx, CHUNKED_HEADERS)
    # The seed binds the chain to this request: same body, other request signature.
    with pytest.raises(SignatureDoesNotMatch):
        decode(body, streaming_context(PayloadMode.STREAMING_SIGNED, seed="f" * 64), CHUNKED_HEADERS)


def test_no_unverified_bytes_are_yielded() -> None:
    body, ctx = signed_body(chunk=50_000)
    flipped = bytearray(body)
    flipped[body.index(b"\r\n") + 100] ^= 1

    async def go() -> int:
        got = 0
        with pytest.raises(SignatureDoesNotMatch):
            async for piece in PayloadReader(pieces(bytes(flipped), 1000), ctx, CHUNKED_HEADERS):
                got += len(piece)
        return got

    assert asyncio.run(go()) == 0


def test_tampered_trailer() -> None:
    body, ctx = signed_body(TRAILER)
    forged = body.replace(TRAILER["x-amz-checksum-crc32"].encode(), b"AAAAAA==")
    with pytest.raises(SignatureDoesNotMatch):
        decode(forged, ctx, TRAILER_HEADERS)
    unsigned = body[: body.index(b"x-amz-trailer-signature")] + b"\r\n"
    with pytest.raises(SignatureDoesNotMatch):
        decode(unsigned, ctx, TRAILER_HEADERS)


@FAST
@given(cut=st.integers(min_value=0, max_value=len(signed_body(chunk=50_000)[0]) - 3))
def test_truncated_signed_body(cut: int) -> None:
    body, ctx = signed_body(chunk=50_000)
    with pytest.raises(IncompleteBody):
        decode(body[:cut], ctx, CHUNKED_HEADERS, 4096)


def test_decoded_length_checks() -> None:
    body, ctx = signed_body()
    with pytest.raises(IncompleteBody):
        decode(body, ctx, {**CHUNKED_HEADERS, "x-amz-decoded-content-length": str(len(SIGNED_DATA) + 1)})
    with pytest.raises(InvalidRequest):
        decode(body, ctx, {**CHUNKED_HEADERS, "x-amz-decoded-content-length": str(len(SIGNED_DATA) - 1)})
    data, _ = decode(body, ctx, {"content-encoding": "aws-chunked"})  # length not declared: tolerated
    assert data == SIGNED_DATA


def test_declared_trailer_missing() -> None:
    ctx = AuthContext(AKID, PayloadMode.STREAMING_UNSIGNED_TRAILER, None)
    with pytest.raises(InvalidRequest):
        decode(b"3\r\nabc\r\n0\r\n\r\n", ctx, {"x-amz-trailer": "x-amz-checksum-crc32"})


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"zz\r\nabc\r\n0\r\n\r\n", InvalidRequest),
        (b"0x3\r\nabc\r\n0\r\n\r\n", InvalidRequest),
        (b"1_0\r\n", InvalidRequest),
        (b"3\r\nabcdef\r\n0\r\n\r\n", InvalidRequest),
        (b"3\r\nab", IncompleteBody),
        (b"3\r\nabc", IncompleteBody),
        (b"3\r\nabc\r\n", IncompleteBody),
        (b"", IncompleteBody),
        (b"f" * 10_000, InvalidRequest),
        (b"3\r\nabc\r\n0\r\nno-colon-here\r\n\r\n", InvalidRequest),
        (b"3\r\nabc\r\n0\r\n\r\ntrailing junk", InvalidRequest),
        (b"3\r\nabc\r\n0\r\nx-amz-checksum-crc32:\xff\r\n\r\n", InvalidRequest),
    ],
)
def test_malformed_framing(body: bytes, error: type[S3Error]) -> None:
    ctx = AuthContext(AKID, PayloadMode.UNSIGNED, None)
    with pytest.raises(error):
        decode(body, ctx, {"content-encoding": "aws-chunked"}, 3)


@FAST
@given(body=st.binary(max_size=300), split=st.integers(min_value=1, max_value=50), signed=st.booleans())
def test_random_framing_only_raises_s3_errors(body: bytes, split: int, signed: bool) -> None:
    ctx = (
        streaming_context(PayloadMode.STREAMING_SIGNED_TRAILER)
        if signed
        else AuthContext(AKID, PayloadMode.STREAMING_UNSIGNED_TRAILER, None)
    )
    try:
        decode(body, ctx, {}, split)
    except S3Error:
        pass


def test_signed_stream_needs_sigv4_context() -> None:
    with pytest.raises(InvalidRequest):
        decode(b"0\r\n\r\n", AuthContext(AKID, PayloadMode.STREAMING_SIGNED, None), {})


# --- plain bodies -----------------------------------------------------------------------------------


def test_plain_signed_sha256() -> None:
    data = b"x" * 300_000 + b"tail"
    ctx = AuthContext(AKID, PayloadMode.SIGNED_SHA256, hashlib.sha256(data).hexdigest())
    for size in (1 << 20, 65536, 7):
        out, reader = decode(data, ctx, {"content-length": str(len(data))}, size)
        assert out == data and reader.decoded_length == len(data)


def test_plain_sha256_mismatch_raised_before_the_end() -> None:
    data = b"payload" * 1000
    ctx = AuthContext(AKID, PayloadMode.SIGNED_SHA256, hashlib.sha256(b"other").hexdigest())

    async def go() -> int:
        got = 0
        with pytest.raises(XAmzContentSHA256Mismatch):
            async for piece in PayloadReader(pieces(data, 1000), ctx, {"content-length": str(len(data))}):
                got += len(piece)
        return got

    assert asyncio.run(go()) == len(data)


def test_plain_short_body_and_unsigned() -> None:
    ctx = AuthContext(AKID, PayloadMode.UNSIGNED, None)
    with pytest.raises(IncompleteBody):
        decode(b"abc", ctx, {"content-length": "10"})
    out, reader = decode(b"abc", ctx, {}, 1)
    assert out == b"abc" and reader.decoded_length == 3
    empty, _ = decode(b"", AuthContext(AKID, PayloadMode.SIGNED_SHA256, EMPTY), {"content-length": "0"})
    assert empty == b""


def test_large_pieces_are_hashed_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = asyncio.to_thread

    async def spy(func: Any, *args: Any) -> Any:
        calls.append(len(args[0]))
        return await real(func, *args)

    monkeypatch.setattr(payload_module.asyncio, "to_thread", spy)
    data = b"y" * (512 * 1024)
    ctx = AuthContext(AKID, PayloadMode.SIGNED_SHA256, hashlib.sha256(data).hexdigest())
    decode(data, ctx, {}, len(data))
    assert calls == [len(data)]
    calls.clear()
    decode(data, ctx, {}, 1024)
    assert calls == []


# --- a small plain body read whole (PayloadReader.read_whole) --------------------------------------


def read_whole(
    messages: list[dict[str, Any]], auth: AuthContext, headers: dict[str, str], limit: int = 1 << 17
) -> tuple[bytes | None, PayloadReader]:
    """`read_whole` over these ASGI messages (the source iteration would read is never used)."""
    queue = list(messages)

    async def receive() -> dict[str, Any]:
        return queue.pop(0)

    async def never() -> AsyncIterator[bytes]:
        raise AssertionError("iterated")
        yield b""

    reader = PayloadReader(never(), auth, headers, receive)
    return asyncio.run(reader.read_whole(limit)), reader


def body_messages(*pieces: bytes) -> list[dict[str, Any]]:
    return [
        {"type": "http.request", "body": piece, "more_body": i < len(pieces) - 1}
        for i, piece in enumerate(pieces)
    ]


def test_read_whole_joins_the_messages_and_checks_the_digest() -> None:
    data = b"payload" * 1000
    ctx = AuthContext(AKID, PayloadMode.SIGNED_SHA256, hashlib.sha256(data).hexdigest())
    whole, reader = read_whole(
        body_messages(data[:10], b"", data[10:]), ctx, {"content-length": str(len(data))}
    )
    assert whole == data and reader.decoded_length == len(data)
    with pytest.raises(RuntimeError):  # read once
        asyncio.run(reader.read_whole(1 << 17))
    wrong = AuthContext(AKID, PayloadMode.SIGNED_SHA256, hashlib.sha256(b"other").hexdigest())
    with pytest.raises(XAmzContentSHA256Mismatch):
        read_whole(body_messages(data), wrong, {"content-length": str(len(data))})


def test_read_whole_refuses_what_iteration_refuses() -> None:
    ctx = AuthContext(AKID, PayloadMode.UNSIGNED, None)
    with pytest.raises(IncompleteBody):  # less than declared
        read_whole(body_messages(b"abc"), ctx, {"content-length": "4"})
    with pytest.raises(IncompleteBody):  # the client hung up mid-body
        read_whole(
            [*body_messages(b"ab", b"c")[:1], {"type": "http.disconnect"}], ctx, {"content-length": "4"}
        )
    with pytest.raises(InvalidRequest):  # more than declared
        read_whole(body_messages(b"abcde"), ctx, {"content-length": "4"})
    empty, _ = read_whole(body_messages(b""), ctx, {"content-length": "0"})
    assert empty == b""


def test_read_whole_leaves_other_bodies_to_iteration() -> None:
    ctx = AuthContext(AKID, PayloadMode.UNSIGNED, None)
    assert read_whole(body_messages(b"abcd"), ctx, {"content-length": "4"}, limit=3)[0] is None  # too large
    assert read_whole(body_messages(b"abcd"), ctx, {})[0] is None  # no declared length (HTTP chunked)
    chunked = {"content-encoding": "aws-chunked", "x-amz-decoded-content-length": "4"}
    assert read_whole(body_messages(b"4\r\nabcd\r\n0\r\n\r\n"), ctx, chunked)[0] is None
    reader = PayloadReader(pieces(b"abcd", 2), ctx, {"content-length": "4"})  # no ASGI receive given
    assert asyncio.run(reader.read_whole(1 << 17)) is None
    assert read_all(reader) == b"abcd"
