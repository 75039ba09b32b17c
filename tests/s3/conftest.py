"""Helpers for the S3 protocol tests: raw SigV4-signed requests and S3 error assertions.

boto3 covers most of the protocol; a few requests (multi-range GETs, malformed digests and XML
bodies) need exact control of the bytes on the wire, so `raw` signs them with botocore's own
SigV4 signer and sends them with `requests`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

import pytest
import requests
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from tests.conftest import ACCESS_KEY, REGION, SECRET_KEY, ServerProcess

RawSender = Callable[..., requests.Response]


@pytest.fixture(scope="session")
def raw(server: ServerProcess) -> RawSender:
    """Send one SigV4-signed request exactly as given: `raw("PUT", "/bkt/key", body=b"..")`.

    `path` is the decoded path (it is percent-encoded here), `query` a raw query string.
    `secret` signs with another secret key; `sign=False` sends the request anonymously.
    """
    session = requests.Session()

    def send(
        method: str,
        path: str,
        *,
        query: str = "",
        headers: dict[str, str] | None = None,
        body: bytes = b"",
        secret: str = SECRET_KEY,
        access_key: str = ACCESS_KEY,
        sign: bool = True,
    ) -> requests.Response:
        url = server.endpoint + quote(path, safe="/~") + (f"?{query}" if query else "")
        request = AWSRequest(method=method, url=url, data=body, headers=dict(headers or {}))
        if sign:
            S3SigV4Auth(Credentials(access_key, secret), "s3", REGION).add_auth(request)
        prepared = request.prepare()
        return session.send(
            requests.Request(method, prepared.url, headers=dict(prepared.headers), data=body).prepare(),
            timeout=30,
        )

    return send


@contextmanager
def s3_error(code: str, status: int) -> Iterator[dict[str, Any]]:
    """Expect a boto3 ClientError with this S3 code and HTTP status; yields the parsed error."""
    with pytest.raises(ClientError) as caught:
        yield {}
    response = caught.value.response
    assert (response["Error"]["Code"], response["ResponseMetadata"]["HTTPStatusCode"]) == (code, status), (
        response
    )


@pytest.fixture(scope="session")
def expect_error() -> Callable[[str, int], Any]:
    return s3_error


def xml_error_code(response: requests.Response) -> str:
    """The <Code> of an S3 XML error body (asserting it is one)."""
    from xml.etree import ElementTree

    root = ElementTree.fromstring(response.content)
    assert root.tag == "Error", response.content
    code = root.findtext("Code")
    assert code, response.content
    return code


@pytest.fixture(scope="session")
def error_code() -> Callable[[requests.Response], str]:
    return xml_error_code
