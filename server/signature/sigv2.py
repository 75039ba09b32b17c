"""AWS Signature Version 2 (HMAC-SHA1): `Authorization: AWS AKID:sig` and query presigning.

SigV2 is still what boto3's `generate_presigned_url` emits for s3 with a us-east-1 client, so
it has to work. The body is never covered (Content-MD5 is the handler's business). Clients
disagree on a few details (which sub-resources to sign, whether x-amz-date blanks the Date
line, whether the path is re-encoded), so we accept each variant a mainstream SDK produces;
every variant still signs the same method, resource, headers and time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import UTC, datetime, timedelta
from itertools import product

from server.errors import (
    AccessDenied,
    AuthorizationHeaderMalformed,
    AuthorizationQueryParametersError,
    SignatureDoesNotMatch,
)
from server.header_text import wire_text
from server.signature.canonical import QueryParam, canonical_uri, decode_component, first_values
from server.signature.context import AuthContext, PayloadMode
from server.signature.dates import format_amz_date, parse_any_date
from server.signature.keys import same
from server.signature.request import Credentials, RequestToVerify
from server.signature.sigv4 import check_skew, secret_of

# Sub-resources botocore's HmacV1Auth signs: the reference, since it is what most clients use.
SUBRESOURCES = frozenset(
    {
        "accelerate", "acl", "analytics", "cors", "defaultObjectAcl", "delete", "inventory",
        "lifecycle", "location", "logging", "metrics", "notification", "object-lock", "partNumber",
        "policy", "replication", "requestPayment", "response-cache-control",
        "response-content-disposition", "response-content-encoding", "response-content-language",
        "response-content-type", "response-expires", "restore", "select", "select-type",
        "storageClass", "tagging", "torrent", "uploadId", "uploads", "versionId", "versioning",
        "versions", "website",
    }
)  # fmt: skip
# Further sub-resources other SDKs (MinIO's, the Java SDK) sign and botocore does not.
EXTRA_SUBRESOURCES = frozenset(
    {"encryption", "legal-hold", "retention", "ownershipControls", "publicAccessBlock", "intelligent-tiering"}
)


def _sign(secret: str, string_to_sign: str) -> str:
    digest = hmac.new(
        secret.encode("utf-8"), string_to_sign.encode("utf-8", "surrogateescape"), hashlib.sha1
    ).digest()
    return base64.b64encode(digest).decode("ascii")


def _resource(path: str, query: list[QueryParam], names: frozenset[str]) -> str:
    # botocore matches the name as sent and decodes only the value; "acl" and "acl=" differ.
    picked = [p for p in query if p.raw_name in names]
    if not picked:
        return path
    picked.sort(key=lambda p: p.raw_name)  # stable: repeated names keep their order
    rendered = [
        p.raw_name
        if p.raw_value is None
        else f"{p.raw_name}={decode_component(p.raw_value, plus_is_space=False).decode('utf-8', 'replace')}"
        for p in picked
    ]
    return path + "?" + "&".join(rendered)


def _resources(req: RequestToVerify, query: list[QueryParam]) -> list[str]:
    prefix = f"/{req.virtual_host_bucket}" if req.virtual_host_bucket else ""
    raw = req.raw_path or "/"
    paths = [prefix + raw]
    if not prefix and raw.count("/") == 1 and len(raw) > 1:
        # A path-style bucket request ("/bkt"): botocore and AWS sign the resource as "/bkt/".
        paths.insert(0, raw + "/")
    reencoded = prefix + canonical_uri(raw)
    if reencoded not in paths:
        paths.append(reencoded)
    name_sets = [SUBRESOURCES]
    if any(p.raw_name in EXTRA_SUBRESOURCES for p in query):
        name_sets.append(SUBRESOURCES | EXTRA_SUBRESOURCES)
    return [_resource(path, query, names) for path, names in product(paths, name_sets)]


def _amz_headers(req: RequestToVerify, query_values: dict[str, str] | None) -> str:
    found: dict[str, str] = {}
    if query_values:
        # Query presigning moves x-amz-* headers into the URL; the browser then sends none.
        found.update({k.lower(): v for k, v in query_values.items() if k.lower().startswith("x-amz-")})
    for name, value in req.headers.items():
        if name.startswith("x-amz-"):
            found[name] = wire_text(value).strip()
    return "".join(f"{name}:{found[name]}\n" for name in sorted(found))


def _check(
    req: RequestToVerify,
    query: list[QueryParam],
    *,
    access_key: str,
    secret: str,
    provided: str,
    date_lines: list[str],
    query_values: dict[str, str] | None,
) -> None:
    def standard(name: str) -> str:
        value = req.headers.get(name)
        if value is None and query_values is not None:
            value = query_values.get(name)
        return wire_text(value or "").strip()

    head = f"{req.method.upper()}\n{standard('content-md5')}\n{standard('content-type')}\n"
    amz = _amz_headers(req, query_values)
    candidates = [
        f"{head}{date}\n{amz}{resource}" for date in date_lines for resource in _resources(req, query)
    ]
    for string_to_sign in candidates:
        if same(_sign(secret, string_to_sign), provided):
            return
    raise SignatureDoesNotMatch(
        AWSAccessKeyId=access_key, StringToSign=candidates[0], SignatureProvided=provided
    )


def verify_header(
    req: RequestToVerify,
    query: list[QueryParam],
    creds: Credentials,
    *,
    now: datetime,
    max_skew: timedelta,
) -> AuthContext:
    """Verify `Authorization: AWS AKID:base64(hmac-sha1)`."""
    _, _, credential = req.headers["authorization"].strip().partition(" ")
    access_key, sep, provided = credential.strip().partition(":")
    if not sep or not access_key or not provided:
        raise AuthorizationHeaderMalformed(
            'The authorization header is malformed; expecting "AWS AKID:signature".'
        )
    amz_date = req.headers.get("x-amz-date")
    date = req.headers.get("date")
    stamp = amz_date if amz_date is not None else date
    moment = parse_any_date(stamp) if stamp else None
    if moment is None:
        raise AccessDenied("AWS authentication requires a valid Date or x-amz-date header")
    check_skew(moment, stamp or "", now, max_skew)
    secret = secret_of(creds, access_key)
    # AWS: with x-amz-date present the Date line is empty; some clients still put Date there.
    date_lines = [(date or "").strip()]
    if amz_date is not None:
        date_lines.insert(0, "")
    _check(
        req, query, access_key=access_key, secret=secret, provided=provided,
        date_lines=list(dict.fromkeys(date_lines)), query_values=None,
    )  # fmt: skip
    return AuthContext(
        access_key=access_key, payload_mode=PayloadMode.UNSIGNED, payload_sha256=None, scheme="sigv2-header"
    )


def verify_query(
    req: RequestToVerify,
    query: list[QueryParam],
    creds: Credentials,
    *,
    now: datetime,
) -> AuthContext:
    """Verify `?AWSAccessKeyId=..&Signature=..&Expires=..` (boto3's default s3 presigning)."""
    values = first_values(query)
    access_key = values.get("AWSAccessKeyId", "")
    provided = values.get("Signature", "")
    expires = values.get("Expires", "")
    if not (access_key and provided and expires):
        raise AuthorizationQueryParametersError(
            "Query-string authentication requires the Signature, Expires and AWSAccessKeyId parameters"
        )
    # base64 uses "+": a client that did not escape it sent a raw "+", which decoding made a space.
    provided = provided.replace(" ", "+")
    try:
        expiry = datetime.fromtimestamp(int(expires), UTC)
    except (ValueError, OverflowError, OSError):
        raise AuthorizationQueryParametersError(
            "Expires must be an integer number of seconds since the epoch"
        ) from None
    if now > expiry:
        raise AccessDenied(
            "Request has expired", Expires=format_amz_date(expiry), ServerTime=format_amz_date(now)
        )
    secret = secret_of(creds, access_key)
    _check(
        req, query, access_key=access_key, secret=secret, provided=provided,
        date_lines=[expires], query_values=values,
    )  # fmt: skip
    return AuthContext(
        access_key=access_key, payload_mode=PayloadMode.UNSIGNED, payload_sha256=None, scheme="sigv2-query"
    )
