"""Virtual-hosted-style requests: the bucket in the Host header (`bucket.localhost:PORT`).

`*.localhost` does not resolve on every machine (it does not on the CI box), so boto3 signs
for `http://bucket.localhost:PORT` as a user's client would and a `before-send` hook only
redirects the connection to 127.0.0.1, keeping the Host header it signed.
"""

from __future__ import annotations

import hashlib
import os
from urllib.parse import urlsplit, urlunsplit

import pytest
import requests

from tests.clients.wire import send, sign_v4
from tests.conftest import ServerProcess, make_client


def _via_loopback(request, **_: object) -> None:
    parts = urlsplit(request.url)
    assert parts.hostname and parts.hostname.endswith(".localhost"), request.url
    request.headers["Host"] = parts.netloc
    request.url = urlunsplit(parts._replace(netloc=f"127.0.0.1:{parts.port}"))


@pytest.fixture(scope="module", params=["s3v4", "s3"])
def virtual(server: ServerProcess, request: pytest.FixtureRequest):
    client = make_client(f"http://localhost:{server.port}", addressing="virtual",
                         signature_version=request.param)  # fmt: skip
    client.meta.events.register("before-send.s3", _via_loopback)
    return client


def test_virtual_hosted_round_trip(virtual, s3) -> None:
    name = f"vhost-{os.getpid()}-{virtual.meta.config.signature_version}".lower()
    virtual.create_bucket(Bucket=name)
    try:
        assert name in [b["Name"] for b in s3.list_buckets()["Buckets"]]
        body = os.urandom(150_000)
        virtual.put_object(Bucket=name, Key="dir/obj one.bin", Body=body)
        assert s3.get_object(Bucket=name, Key="dir/obj one.bin")["Body"].read() == body  # path style sees it
        assert virtual.get_object(Bucket=name, Key="dir/obj one.bin")["Body"].read() == body
        assert (
            virtual.get_object(Bucket=name, Key="dir/obj one.bin", Range="bytes=10-19")["Body"].read()
            == body[10:20]
        )
        listed = virtual.list_objects_v2(Bucket=name, Prefix="dir/", Delimiter="/")
        assert [o["Key"] for o in listed["Contents"]] == ["dir/obj one.bin"]
        virtual.delete_object(Bucket=name, Key="dir/obj one.bin")
        assert "Contents" not in s3.list_objects_v2(Bucket=name)
    finally:
        for obj in s3.list_objects_v2(Bucket=name).get("Contents", []):
            s3.delete_object(Bucket=name, Key=obj["Key"])
        s3.delete_bucket(Bucket=name)


def test_virtual_hosted_raw_host_header(server: ServerProcess, s3, bucket: str) -> None:
    body = b"hello from a hand-made Host header"
    host = f"{bucket}.localhost:{server.port}"
    signed = sign_v4("PUT", f"http://{host}/greeting", {"Content-Length": str(len(body))},
                     hashlib.sha256(body).hexdigest())  # fmt: skip
    assert signed.headers["Host"] == host
    reply = send(server.endpoint, "PUT", "/greeting", signed.headers, body)
    assert reply.status == 200, reply
    assert s3.get_object(Bucket=bucket, Key="greeting")["Body"].read() == body
    signed = sign_v4("GET", f"http://{host}/greeting", {}, hashlib.sha256(b"").hexdigest())
    reply = send(server.endpoint, "GET", "/greeting", signed.headers)
    assert (reply.status, reply.body) == (200, body)
    # The same path without the bucket in the Host header names a bucket called "greeting".
    signed = sign_v4("GET", f"{server.endpoint}/greeting", {}, hashlib.sha256(b"").hexdigest())
    reply = send(server.endpoint, "GET", "/greeting", signed.headers)
    assert (reply.status, reply.code) == (404, "NoSuchBucket"), reply


def test_virtual_hosted_presigned_sigv2(server: ServerProcess, s3, bucket: str) -> None:
    """SigV2 signs "/bucket/key" even though the path on the wire is only "/key"."""
    s3.put_object(Bucket=bucket, Key="p", Body=b"presigned")
    client = make_client(f"http://localhost:{server.port}", addressing="virtual")
    url = client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "p"})
    parts = urlsplit(url)
    assert parts.hostname == f"{bucket}.localhost" and "Signature=" in parts.query
    response = requests.get(urlunsplit(parts._replace(netloc=f"127.0.0.1:{server.port}")),
                            headers={"Host": parts.netloc}, timeout=30)  # fmt: skip
    assert (response.status_code, response.content) == (200, b"presigned"), response.text
