"""SSE-C the way S3 requires it: over HTTPS, with no configuration to allow plain HTTP."""

from __future__ import annotations

import base64
import hashlib
import os

import pytest
from botocore.exceptions import ClientError


def customer(key: bytes) -> dict[str, str]:
    return {
        "SSECustomerAlgorithm": "AES256",
        "SSECustomerKey": base64.b64encode(key).decode(),
        "SSECustomerKeyMD5": base64.b64encode(hashlib.md5(key).digest()).decode(),
    }


def test_sse_c_over_https(tls_s3, tls_bucket: str) -> None:
    key = os.urandom(32)
    body = os.urandom(200_000)
    put = tls_s3.put_object(Bucket=tls_bucket, Key="c", Body=body, **customer(key))
    assert put["SSECustomerAlgorithm"] == "AES256"
    assert tls_s3.get_object(Bucket=tls_bucket, Key="c", **customer(key))["Body"].read() == body
    assert (
        tls_s3.get_object(Bucket=tls_bucket, Key="c", Range="bytes=65530-65600", **customer(key))[
            "Body"
        ].read()
        == body[65530:65601]
    )
    with pytest.raises(ClientError) as err:
        tls_s3.get_object(Bucket=tls_bucket, Key="c", **customer(os.urandom(32)))
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
