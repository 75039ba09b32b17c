"""Authentication as real clients use it: presigned URLs through a plain HTTP client, SigV2
headers, UNSIGNED-PAYLOAD with Content-MD5 (rclone), and a skewed clock."""

from __future__ import annotations

import base64
import hashlib
import os
import time
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest
import requests

from tests.clients.wire import send, sign_v4
from tests.conftest import ServerProcess, make_client


def error_code(response: requests.Response) -> str | None:
    assert response.headers["content-type"].startswith("application/xml"), response.text
    return ET.fromstring(response.content).findtext("Code")


def tamper(url: str, param: str) -> str:
    """The URL with the last character of query parameter `param` changed."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    changed = [(n, (v[:-2] + ("A" if v[-2] != "A" else "B") + v[-1:]) if n == param else v) for n, v in query]
    assert changed != query
    return urlunsplit(parts._replace(query=urlencode(changed)))


@pytest.fixture(scope="module")
def v4(server: ServerProcess):
    return make_client(server.endpoint, signature_version="s3v4")


def test_default_presigned_urls_are_sigv2_and_work(s3, bucket: str) -> None:
    body = os.urandom(200_000)
    put_url = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "a b/ü.bin"})
    get_url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "a b/ü.bin"})
    # boto3's default for s3 in us-east-1: the SigV2 query form. The test relies on it.
    assert "AWSAccessKeyId=" in put_url and "Signature=" in put_url and "X-Amz-Signature" not in put_url
    response = requests.put(put_url, data=body, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["etag"] == f'"{hashlib.md5(body).hexdigest()}"'
    response = requests.get(get_url, timeout=30)
    assert response.status_code == 200, response.text
    assert response.content == body


def test_sigv4_presigned_urls_work(v4, bucket: str) -> None:
    body = os.urandom(300_000)
    put_url = v4.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "dir/x+y=z.bin"})
    get_url = v4.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "dir/x+y=z.bin"})
    assert "X-Amz-Algorithm=AWS4-HMAC-SHA256" in put_url
    response = requests.put(put_url, data=body, timeout=30)
    assert response.status_code == 200, response.text
    response = requests.get(get_url, timeout=30)
    assert response.status_code == 200, response.text
    assert response.content == body
    assert v4.head_object(Bucket=bucket, Key="dir/x+y=z.bin")["ContentLength"] == len(body)


def test_expired_presigned_urls_are_refused(s3, v4, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"data")
    urls = [
        client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"}, ExpiresIn=1)
        for client in (s3, v4)
    ]
    time.sleep(2.1)
    for url in urls:
        response = requests.get(url, timeout=30)
        assert response.status_code == 403, url
        assert error_code(response) == "AccessDenied"
        assert message_of(response) == "Request has expired"
        assert b"data" != response.content


def message_of(response: requests.Response) -> str | None:
    return ET.fromstring(response.content).findtext("Message")


@pytest.mark.parametrize(
    ("expires", "code", "message"),
    [
        # AWS's answers, as clients have reported them: the code says malformed, the status 403.
        (
            604801,
            "AuthorizationQueryParametersError",
            "X-Amz-Expires must be less than a week (in seconds); that is, the given X-Amz-Expires "
            "must be less than 604800 seconds",
        ),
        (10**12, "AuthorizationQueryParametersError", None),
        (-7, "AuthorizationQueryParametersError", "X-Amz-Expires must be non-negative"),
        (0, "AccessDenied", "Request has expired"),
    ],
)
def test_presigned_expires_out_of_range_is_403(
    v4, bucket: str, expires: int, code: str, message: str | None
) -> None:
    v4.put_object(Bucket=bucket, Key="k", Body=b"data")
    # The range is checked before the signature, so an edited URL shows it as well as a signed one
    # (botocore's CRT signer will not sign a negative or zero expiry).
    url = v4.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"}, ExpiresIn=600)
    assert "X-Amz-Expires=600&" in url
    response = requests.get(url.replace("X-Amz-Expires=600&", f"X-Amz-Expires={expires}&"), timeout=30)
    assert (response.status_code, error_code(response)) == (403, code), response.text
    if message is not None:
        assert message_of(response) == message


def test_tampered_presigned_signatures_are_refused(s3, v4, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"data")
    v2_url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"})
    v4_url = v4.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"})
    assert requests.get(v2_url, timeout=30).content == b"data"
    assert requests.get(v4_url, timeout=30).content == b"data"
    for url in (tamper(v2_url, "Signature"), tamper(v4_url, "X-Amz-Signature")):
        response = requests.get(url, timeout=30)
        assert response.status_code == 403
        assert error_code(response) == "SignatureDoesNotMatch"
    # A signature for another key is no signature for this one.
    other = v4_url.replace("/k?", "/k2?")
    assert requests.get(other, timeout=30).status_code == 403


def test_sigv2_header_auth(server: ServerProcess, bucket: str) -> None:
    v2 = make_client(server.endpoint, signature_version="s3")
    sent: list[bytes] = []
    v2.meta.events.register(
        "before-send.s3", lambda request, **_: sent.append(request.headers["Authorization"])
    )
    keys = ["plain.txt", "with space/and+plus.txt", "ünïcode/データ.bin"]
    bodies = {key: os.urandom(1000 + i) for i, key in enumerate(keys)}
    for key, body in bodies.items():
        v2.put_object(Bucket=bucket, Key=key, Body=body, Metadata={"color": "blue"}, ContentType="text/x")
    for key, body in bodies.items():
        got = v2.get_object(Bucket=bucket, Key=key)
        assert got["Body"].read() == body
        assert got["Metadata"] == {"color": "blue"}
    listed = v2.list_objects(Bucket=bucket)["Contents"]
    assert sorted(o["Key"] for o in listed) == sorted(keys)
    assert [o["Key"] for o in v2.list_objects_v2(Bucket=bucket, Prefix="with ")["Contents"]] == [keys[1]]
    assert sent and all(value.startswith(b"AWS ") for value in sent)


def test_sigv2_header_wrong_secret_is_refused(server: ServerProcess, bucket: str) -> None:
    import boto3
    from botocore.config import Config

    wrong = boto3.client(
        "s3", endpoint_url=server.endpoint, aws_access_key_id="test-access-key", aws_secret_access_key="nope",
        region_name="us-east-1", config=Config(signature_version="s3", retries={"max_attempts": 1}),
    )  # fmt: skip
    with pytest.raises(wrong.exceptions.ClientError) as caught:
        wrong.put_object(Bucket=bucket, Key="k", Body=b"x")
    assert caught.value.response["Error"]["Code"] == "SignatureDoesNotMatch"


@pytest.mark.parametrize("offset", [timedelta(minutes=-20), timedelta(minutes=20)], ids=["past", "future"])
def test_clock_skew_is_refused(server: ServerProcess, bucket: str, offset: timedelta) -> None:
    url = f"{server.endpoint}/{bucket}/skewed"
    signed = sign_v4("PUT", url, {"Content-Length": "4"}, hashlib.sha256(b"data").hexdigest(),
                     when=datetime.now(UTC) + offset)  # fmt: skip
    reply = send(server.endpoint, "PUT", f"/{bucket}/skewed", signed.headers, b"data")
    assert (reply.status, reply.code) == (403, "RequestTimeTooSkewed"), reply
    # The same request signed now goes through: only the time was wrong.
    signed = sign_v4("PUT", url, {"Content-Length": "4"}, hashlib.sha256(b"data").hexdigest())
    assert send(server.endpoint, "PUT", f"/{bucket}/skewed", signed.headers, b"data").status == 200


def _rclone_put(server: ServerProcess, bucket: str, key: str, body: bytes, md5: bytes):
    headers = {"Content-Length": str(len(body)), "Content-MD5": base64.b64encode(md5).decode()}
    signed = sign_v4("PUT", f"{server.endpoint}/{bucket}/{key}", headers, "UNSIGNED-PAYLOAD")
    return send(server.endpoint, "PUT", f"/{bucket}/{key}", signed.headers, body)


def test_unsigned_payload_with_content_md5(server: ServerProcess, s3, bucket: str) -> None:
    body = os.urandom(2 * 1024 * 1024 + 3)
    reply = _rclone_put(server, bucket, "r", body, hashlib.md5(body).digest())
    assert reply.status == 200, reply
    assert reply.headers["etag"] == f'"{hashlib.md5(body).hexdigest()}"'
    assert s3.get_object(Bucket=bucket, Key="r")["Body"].read() == body
    # A wrong MD5 is refused and the stored object stays as it was.
    other = os.urandom(len(body))
    reply = _rclone_put(server, bucket, "r", other, hashlib.md5(body).digest())
    assert (reply.status, reply.code) == (400, "BadDigest"), reply
    assert s3.get_object(Bucket=bucket, Key="r")["Body"].read() == body
    reply = _rclone_put(server, bucket, "new", other, hashlib.md5(b"x").digest())
    assert (reply.status, reply.code) == (400, "BadDigest"), reply
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["r"]
