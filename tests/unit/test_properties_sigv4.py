"""Property tests for SigV4: whatever botocore signs, we verify, and a changed byte we refuse.

Random keys, query parameters and headers (non-ASCII included) are signed by botocore's own
signers (Authorization header and presigned URL), then handed to `authenticate` the way the
gateway would: the path and query as sent, header values as Starlette decodes the wire bytes
(latin-1 of the UTF-8 botocore sends). Bounded and repeatable by default; `pytest --soak`
searches longer (tests/fuzzing.py)."""

from __future__ import annotations

from urllib.parse import quote, unquote_to_bytes, urlsplit

import pytest
from botocore.auth import S3SigV4Auth, S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials
from hypothesis import given
from hypothesis import strategies as st

from server.errors import SignatureDoesNotMatch
from server.signature import RequestToVerify, authenticate
from tests.fuzzing import fuzz
from tests.unit.test_signature import AKID, CREDS, SECRET

ENDPOINT = "http://127.0.0.1:9000"
BOTO_CREDS = BotoCredentials(AKID, SECRET)

text_chars = st.characters(exclude_categories=["Cs"])
# What a header value can carry over HTTP/1.1: no control characters (CR/LF least of all).
header_chars = st.characters(exclude_categories=["Cs", "Cc", "Zl", "Zp"])
keys = st.text(text_chars, min_size=1, max_size=40)
query_names = st.sampled_from(
    ["prefix", "delimiter", "marker", "uploadId", "partNumber", "tagging", "x", "ü"]
) | st.text(st.characters(exclude_categories=["Cs"], exclude_characters="&="), min_size=1, max_size=8).filter(
    lambda n: not n.lower().startswith(("x-amz-", "awsaccesskeyid", "signature"))
)
queries = st.dictionaries(query_names, st.text(text_chars, max_size=20), max_size=4)
meta_names = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz0123456789-"), min_size=1, max_size=12)
header_values = st.text(header_chars, max_size=30).map(str.strip)
metadata = st.dictionaries(meta_names, header_values, max_size=4)
methods = st.sampled_from(["GET", "PUT", "HEAD", "DELETE", "POST"])


def as_received(prepared_headers: object) -> dict[str, str]:
    """Header values as Starlette hands them over: the UTF-8 wire bytes decoded as latin-1."""
    received: dict[str, str] = {}
    for name, value in prepared_headers.items():  # type: ignore[attr-defined]
        text = value.decode("utf-8") if isinstance(value, bytes) else value
        # HTTP strips only spaces and tabs around a value (RFC 9110 OWS), never other bytes.
        received[name.lower()] = text.encode("utf-8").decode("latin-1").strip(" \t")
    received.setdefault("host", urlsplit(ENDPOINT).netloc)
    return received


def signed(
    method: str, key: str, query: dict[str, str], meta: dict[str, str], *, presign: bool
) -> RequestToVerify:
    headers = {f"x-amz-meta-{name}": value for name, value in meta.items()}
    request = AWSRequest(
        method=method, url=f"{ENDPOINT}/bkt/{quote(key, safe='/~')}", params=query, headers=headers
    )
    if presign:
        S3SigV4QueryAuth(BOTO_CREDS, "s3", "us-east-1", expires=600).add_auth(request)
    else:
        request.headers["x-amz-content-sha256"] = "UNSIGNED-PAYLOAD"
        S3SigV4Auth(BOTO_CREDS, "s3", "us-east-1").add_auth(request)
    prepared = request.prepare()
    parts = urlsplit(prepared.url)
    return RequestToVerify(method, parts.path, parts.query, as_received(prepared.headers))


@fuzz(250)
@given(methods, keys, queries, metadata, st.booleans())
def test_whatever_botocore_signs_verifies(
    method: str, key: str, query: dict[str, str], meta: dict[str, str], presign: bool
) -> None:
    ctx = authenticate(signed(method, key, query, meta, presign=presign), CREDS)
    assert ctx.access_key == AKID


@fuzz(150)
@given(methods, keys, queries, metadata.filter(bool), st.data())
def test_a_changed_metadata_value_is_refused(
    method: str, key: str, query: dict[str, str], meta: dict[str, str], data: st.DataObject
) -> None:
    req = signed(method, key, query, meta, presign=False)
    name = f"x-amz-meta-{data.draw(st.sampled_from(sorted(meta)))}"
    original = req.headers[name]
    changed = data.draw(
        header_values.map(lambda v: v.encode("utf-8").decode("latin-1")).filter(
            lambda v: " ".join(v.split()) != " ".join(original.split())
        )
    )
    with pytest.raises(SignatureDoesNotMatch):
        authenticate(
            RequestToVerify(req.method, req.raw_path, req.query_string, {**req.headers, name: changed}), CREDS
        )


@fuzz(150)
@given(methods, keys, queries, st.data())
def test_a_changed_key_or_query_is_refused(
    method: str, key: str, query: dict[str, str], data: st.DataObject
) -> None:
    req = signed(method, key, query, {}, presign=data.draw(st.booleans()))
    other_key = data.draw(keys.filter(lambda k: k != key))
    moved = RequestToVerify(req.method, f"/bkt/{quote(other_key, safe='/~')}", req.query_string, req.headers)
    with pytest.raises(SignatureDoesNotMatch):
        authenticate(moved, CREDS)
    added = RequestToVerify(req.method, req.raw_path, req.query_string + "&extra=1", req.headers)
    with pytest.raises(SignatureDoesNotMatch):
        authenticate(added, CREDS)


# Raw paths as a gateway may hand them over: plain keys (the fast paths' case), percent escapes
# (valid, invalid, lower-case hex), reserved and non-ASCII characters.
raw_paths = st.lists(
    st.sampled_from(list("abcXYZ019-_.~/"))
    | st.sampled_from(["%2F", "%20", "%zz", "%e2%82%ac", "%ff", "+", " ", "é", "?", "%"]),
    max_size=30,
).map(lambda pieces: "/" + "".join(pieces))


@fuzz(300)
@given(raw_paths)
def test_plain_paths_skip_decoding_with_the_same_answers(raw_path: str) -> None:
    """canonical_uri and decode_path answer a path that needs no decoding without decoding it:
    the answer is the one decoding and encoding give (checked against that, every path)."""
    from server.errors import InvalidArgument
    from server.router import decode_path
    from server.signature.canonical import canonical_uri, decode_component, uri_encode

    assert canonical_uri(raw_path) == uri_encode(
        decode_component(raw_path, plus_is_space=False), keep_slash=True
    )
    try:
        slow = unquote_to_bytes(raw_path).decode("utf-8")
    except UnicodeDecodeError:
        with pytest.raises(InvalidArgument):
            decode_path(raw_path)
    else:
        assert decode_path(raw_path) == slow
