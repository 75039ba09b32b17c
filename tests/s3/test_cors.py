"""Bucket CORS: the configuration through boto3, preflights and response headers on the wire."""

from __future__ import annotations

from typing import Any

import pytest
import requests

from tests.conftest import ServerProcess

ORIGIN = "https://app.example.com"
VARY = "Origin, Access-Control-Request-Headers, Access-Control-Request-Method"
NOT_ALLOWED = (
    "CORSResponse: This CORS request is not allowed. This is usually because the evalution of Origin, "
    "request method / Access-Control-Request-Method or Access-Control-Request-Headers are not "
    "whitelisted by the resource's CORS spec."
)
SITE_RULE = {
    "ID": "site",
    "AllowedHeaders": ["x-amz-*", "content-type"],
    "AllowedMethods": ["GET", "PUT"],
    "AllowedOrigins": ["https://*.example.com"],
    "ExposeHeaders": ["ETag", "x-amz-request-id"],
    "MaxAgeSeconds": 600,
}
EVERYONE_RULE = {"AllowedMethods": ["HEAD"], "AllowedOrigins": ["*"]}
SITE_HEADERS = {
    "access-control-allow-origin": ORIGIN,
    "access-control-allow-credentials": "true",
    "access-control-allow-methods": "GET, PUT",
    "access-control-expose-headers": "ETag, x-amz-request-id",
    "access-control-max-age": "600",
    "vary": VARY,
}
EVERYONE_HEADERS = {"access-control-allow-origin": "*", "access-control-allow-methods": "HEAD", "vary": VARY}


def cors_headers(response: requests.Response) -> dict[str, str]:
    return {
        k.lower(): v
        for k, v in response.headers.items()
        if k.lower().startswith("access-control-") or k.lower() == "vary"
    }


def error_fields(response: requests.Response) -> dict[str, str]:
    from xml.etree import ElementTree

    root = ElementTree.fromstring(response.content)
    return {child.tag: child.text or "" for child in root if child.tag not in ("RequestId", "Resource")}


@pytest.fixture
def cors_bucket(s3, bucket: str) -> str:
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": [SITE_RULE, EVERYONE_RULE]})
    return bucket


def test_configuration_reads_back_and_deletes(s3, bucket, expect_error) -> None:
    with expect_error("NoSuchCORSConfiguration", 404):
        s3.get_bucket_cors(Bucket=bucket)
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": [SITE_RULE, EVERYONE_RULE]})
    assert s3.get_bucket_cors(Bucket=bucket)["CORSRules"] == [SITE_RULE, EVERYONE_RULE]
    s3.delete_bucket_cors(Bucket=bucket)
    with expect_error("NoSuchCORSConfiguration", 404):
        s3.get_bucket_cors(Bucket=bucket)
    s3.delete_bucket_cors(Bucket=bucket)  # deleting nothing is fine, as on S3
    with expect_error("NoSuchBucket", 404):
        s3.put_bucket_cors(Bucket=bucket + "-none", CORSConfiguration={"CORSRules": [EVERYONE_RULE]})


def rule(**fields: Any) -> dict[str, Any]:
    return {"AllowedMethods": ["GET"], "AllowedOrigins": ["*"], **fields}


@pytest.mark.parametrize(
    ("rules", "code", "message"),
    [
        ([], "MalformedXML", None),
        (
            [rule(AllowedMethods=["PATCH"])],
            "InvalidRequest",
            "Found unsupported HTTP method in CORS config. Unsupported method is PATCH",
        ),
        (
            [rule(AllowedMethods=["get"])],
            "InvalidRequest",
            "Found unsupported HTTP method in CORS config. Unsupported method is get",
        ),
        (
            [rule(AllowedOrigins=["https://*.example.*"])],
            "InvalidRequest",
            'AllowedOrigin "https://*.example.*" can not have more than one wildcard.',
        ),
        (
            [rule(AllowedHeaders=["x-*-meta-*"])],
            "InvalidRequest",
            'AllowedHeader "x-*-meta-*" can not have more than one wildcard.',
        ),
        (
            [rule(ExposeHeaders=["x-amz-*"])],
            "InvalidRequest",
            'ExposeHeader "x-amz-*" contains wildcard. We currently do not support wildcard for ExposeHeader.',
        ),
        (
            [rule()] * 101,
            "InvalidRequest",
            "The number of CORS rules should not exceed allowed limit of 100 rules.",
        ),
        ([rule(MaxAgeSeconds=-1)], "MalformedXML", None),
        ([rule(MaxAgeSeconds=2**31)], "MalformedXML", None),
        ([rule(ID="x" * 256)], "MalformedXML", None),
    ],
)
def test_bad_configurations_are_refused(s3, bucket, rules, code: str, message: str | None) -> None:
    from botocore.exceptions import ClientError

    with pytest.raises(ClientError) as caught:
        s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": rules})
    error = caught.value.response["Error"]
    assert (error["Code"], caught.value.response["ResponseMetadata"]["HTTPStatusCode"]) == (code, 400)
    if message:
        assert error["Message"] == message
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": [rule()] * 100})  # the limit itself


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"", "MissingRequestBodyError"),
        (
            b"<CORSConfiguration><CORSRule><AllowedMethod>GET</AllowedMethod></CORSRule></CORSConfiguration>",
            "MalformedXML",
        ),
        (
            b"<CORSConfiguration><CORSRule><AllowedOrigin>*</AllowedOrigin></CORSRule></CORSConfiguration>",
            "MalformedXML",
        ),
        (
            b"<CORSConfiguration><CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod>"
            b"<AllowedHeaders>*</AllowedHeaders></CORSRule></CORSConfiguration>",
            "MalformedXML",
        ),
        (
            b"<CORSConfiguration><CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod>"
            b"<MaxAgeSeconds>1</MaxAgeSeconds><MaxAgeSeconds>2</MaxAgeSeconds></CORSRule></CORSConfiguration>",
            "MalformedXML",
        ),
        (b"<CORSConfig/>", "MalformedXML"),
        (b"<CORSConfiguration><CORSRule>", "MalformedXML"),
    ],
)
def test_malformed_documents_are_refused(raw, bucket, error_code, body: bytes, code: str) -> None:
    response = raw("PUT", f"/{bucket}", query="cors", body=body)
    assert (response.status_code, error_code(response)) == (400, code)


def preflight(
    server: ServerProcess, path: str, origin: str | None, method: str | None, headers: str | None = None
) -> requests.Response:
    sent = {}
    if origin is not None:
        sent["Origin"] = origin
    if method is not None:
        sent["Access-Control-Request-Method"] = method
    if headers is not None:
        sent["Access-Control-Request-Headers"] = headers
    return requests.options(server.endpoint + path, headers=sent, timeout=30)


def test_preflights_are_answered_from_the_rules(server, s3, cors_bucket: str) -> None:
    key = f"/{cors_bucket}/some/key"
    no_cors = cors_bucket + "-plain"
    s3.create_bucket(Bucket=no_cors)
    try:
        check_preflights(server, cors_bucket, key, no_cors)
    finally:
        s3.delete_bucket(Bucket=no_cors)


def check_preflights(server: ServerProcess, cors_bucket: str, key: str, no_cors: str) -> None:

    def forbidden(message: str, method: str, resource: str) -> tuple[int, dict[str, str], dict[str, str]]:
        return (
            403,
            {},
            {"Code": "AccessForbidden", "Message": message, "Method": method, "ResourceType": resource},
        )

    def bad(message: str) -> tuple[int, dict[str, str], dict[str, str]]:
        return 400, {}, {"Code": "BadRequest", "Message": message}

    allowed_put = {**SITE_HEADERS, "access-control-allow-headers": "content-type, x-amz-meta-name"}
    cases = [
        (f"/{cors_bucket}", (ORIGIN, "GET"), (200, SITE_HEADERS, {})),
        (key, (ORIGIN, "PUT", "Content-Type, X-Amz-Meta-Name"), (200, allowed_put, {})),
        (f"/{cors_bucket}/no/such/key", ("null", "HEAD"), (200, EVERYONE_HEADERS, {})),
        (key, (ORIGIN, "DELETE"), forbidden(NOT_ALLOWED, "DELETE", "OBJECT")),
        (f"/{cors_bucket}", ("https://example.org", "GET"), forbidden(NOT_ALLOWED, "GET", "BUCKET")),
        (key, ("http://app.example.com", "GET"), forbidden(NOT_ALLOWED, "GET", "OBJECT")),
        (key, (ORIGIN, "GET", "authorization"), forbidden(NOT_ALLOWED, "GET", "OBJECT")),
        (
            f"/{no_cors}/key",
            (ORIGIN, "GET"),
            forbidden("CORSResponse: CORS is not enabled for this bucket.", "GET", "OBJECT"),
        ),
        (
            f"/{no_cors}",
            (ORIGIN, "PUT"),
            forbidden("CORSResponse: CORS is not enabled for this bucket.", "PUT", "BUCKET"),
        ),
        (
            "/missing-bucket-xyz/key",
            (ORIGIN, "GET"),
            forbidden("CORSResponse: Bucket not found", "GET", "OBJECT"),
        ),
        (key, (None, "GET"), bad("Insufficient information. Origin request header needed.")),
        (key, (ORIGIN, None), bad("Invalid Access-Control-Request-Method: null")),
        (key, (ORIGIN, "PATCH"), bad("Invalid Access-Control-Request-Method: PATCH")),
    ]
    for path, sent, expected in cases:
        response = preflight(server, path, *sent)
        got = (
            response.status_code,
            cors_headers(response),
            error_fields(response) if response.content else {},
        )
        assert got == expected, (path, sent)


def test_responses_carry_the_cors_headers_also_when_they_fail(server, s3, raw, cors_bucket: str) -> None:
    s3.put_object(Bucket=cors_bucket, Key="key", Body=b"data")
    cases = [
        ("GET", "/key", {"Origin": ORIGIN}, True, 200, SITE_HEADERS),
        ("HEAD", "/key", {"Origin": "https://example.org"}, True, 200, EVERYONE_HEADERS),
        ("GET", "/key", {"Origin": "https://example.org"}, True, 200, {}),
        ("GET", "/key", {}, True, 200, {}),
        ("GET", "/missing-key", {"Origin": ORIGIN}, True, 404, SITE_HEADERS),
        ("PUT", "/key", {"Origin": ORIGIN}, False, 403, SITE_HEADERS),  # anonymous: AccessDenied
        ("DELETE", "/key", {"Origin": ORIGIN}, False, 403, {}),
        # S3 takes the method from Access-Control-Request-Method when the request has it.
        (
            "DELETE",
            "/key",
            {"Origin": ORIGIN, "Access-Control-Request-Method": "GET"},
            False,
            403,
            SITE_HEADERS,
        ),
        ("GET", "/key", {"Origin": ORIGIN, "Access-Control-Request-Method": "DELETE"}, True, 200, {}),
    ]
    for method, key, headers, sign, status, expected in cases:
        response = raw(method, f"/{cors_bucket}{key}", headers=headers, sign=sign)
        assert (response.status_code, cors_headers(response)) == (status, expected), (method, key, headers)


def test_a_changed_configuration_applies_at_once(server, s3, bucket) -> None:
    assert preflight(server, f"/{bucket}/k", ORIGIN, "GET").status_code == 403
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": [rule()]})
    assert preflight(server, f"/{bucket}/k", ORIGIN, "GET").status_code == 200
    s3.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": [rule(AllowedMethods=["PUT"])]})
    assert preflight(server, f"/{bucket}/k", ORIGIN, "GET").status_code == 403
    assert preflight(server, f"/{bucket}/k", ORIGIN, "PUT").status_code == 200
    s3.delete_bucket_cors(Bucket=bucket)
    response = preflight(server, f"/{bucket}/k", ORIGIN, "PUT")
    assert (response.status_code, error_fields(response)["Message"]) == (
        403,
        "CORSResponse: CORS is not enabled for this bucket.",
    )
