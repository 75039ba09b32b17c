"""AWS Signature Version 4: the Authorization header and presigned (query) forms.

Both forms build the same canonical request; they differ in where the parameters come from,
which time check applies (clock skew for headers, expiry for presigned URLs) and which error
code AWS uses for malformed parameters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import lru_cache

from server.errors import (
    AccessDenied,
    AuthorizationHeaderMalformed,
    AuthorizationQueryParametersError,
    InvalidAccessKeyId,
    InvalidArgument,
    InvalidRequest,
    RequestTimeTooSkewed,
    S3Error,
    SignatureDoesNotMatch,
)
from server.header_text import wire_text
from server.signature.canonical import (
    QueryParam,
    canonical_query,
    canonical_uri,
    first_values,
    trim_all,
)
from server.signature.context import AuthContext, AuthScheme, PayloadMode
from server.signature.dates import format_amz_date, parse_amz_date, parse_http_date
from server.signature.keys import hmac_sha256_hex, same, sha256_hex, signing_key
from server.signature.request import Credentials, RequestToVerify

ALGORITHM = "AWS4-HMAC-SHA256"
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
MAX_PRESIGNED_EXPIRES = 604800  # one week, AWS's limit for SigV4 presigned URLs

_PAYLOAD_LITERALS = {
    UNSIGNED_PAYLOAD: PayloadMode.UNSIGNED,
    "STREAMING-AWS4-HMAC-SHA256-PAYLOAD": PayloadMode.STREAMING_SIGNED,
    "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER": PayloadMode.STREAMING_SIGNED_TRAILER,
    "STREAMING-UNSIGNED-PAYLOAD-TRAILER": PayloadMode.STREAMING_UNSIGNED_TRAILER,
}
_HEX_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
_SCOPE_DATE = re.compile(r"\d{8}")
_QUERY_REQUIRED = (
    "X-Amz-Algorithm",
    "X-Amz-Credential",
    "X-Amz-Signature",
    "X-Amz-Date",
    "X-Amz-SignedHeaders",
    "X-Amz-Expires",
)


@dataclass(frozen=True, slots=True)
class CredentialScope:
    access_key: str
    date: str  # YYYYMMDD
    region: str
    service: str
    # "YYYYMMDD/region/service/aws4_request", built once (a scope is parsed once, then reused).
    text: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", f"{self.date}/{self.region}/{self.service}/aws4_request")


def _expires_out_of_range(message: str) -> AuthorizationQueryParametersError:
    """An X-Amz-Expires outside 0..604800. AWS names it a malformed parameter but answers 403
    (the URL can never be used), not the 400 of the other AuthorizationQueryParametersErrors."""
    error = AuthorizationQueryParametersError(message)
    error.status = 403
    return error


def payload_mode_for(content_sha256: str) -> tuple[PayloadMode, str | None]:
    """Classify an x-amz-content-sha256 value; the digest is returned for SIGNED_SHA256."""
    mode = _PAYLOAD_LITERALS.get(content_sha256)
    if mode is not None:
        return mode, None
    if _HEX_SHA256.fullmatch(content_sha256):
        return PayloadMode.SIGNED_SHA256, content_sha256.lower()
    raise InvalidArgument(
        "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-AWS4-HMAC-SHA256-PAYLOAD, "
        "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER, STREAMING-UNSIGNED-PAYLOAD-TRAILER "
        "or a valid sha256 value.",
        ArgumentName="x-amz-content-sha256",
        ArgumentValue=content_sha256,
    )


# A client signs every request of a day with the same Credential and SignedHeaders: their parse
# (immutable results; a malformed value raises and is never cached) is remembered. The secret and
# the identity behind the access key are still looked up per request (server.credentials).
@lru_cache(maxsize=256)
def parse_credential(
    value: str, error: type[S3Error], *, region: str | None, service: str
) -> CredentialScope:
    """Parse "AKID/20130524/us-east-1/s3/aws4_request" (split from the right: the key is free-form)."""
    parts = value.rsplit("/", 4)
    if len(parts) != 5 or not parts[0] or parts[4] != "aws4_request":
        raise error(
            f'The credential is malformed; expecting "<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request". ({value!r})'
        )
    access_key, date, scope_region, scope_service, _ = parts
    if not _SCOPE_DATE.fullmatch(date):
        raise error(f'Invalid credential date "{date}". This date is not in yyyyMMdd format.')
    if not scope_region:
        raise error("The credential is malformed; the region is empty.")
    if scope_service != service:
        raise error(
            f'The credential is malformed; incorrect service "{scope_service}". This endpoint belongs to "{service}".'
        )
    if region is not None and scope_region != region:
        raise error(
            f"The credential is malformed; the region '{scope_region}' is wrong; expecting '{region}'",
            Region=region,
        )
    return CredentialScope(access_key, date, scope_region, scope_service)


@lru_cache(maxsize=256)
def parse_signed_headers(value: str, error: type[S3Error]) -> tuple[str, ...]:
    names = tuple(value.split(";"))
    if not value or any(not name or name != name.strip().lower() for name in names):
        raise error(f"SignedHeaders is malformed: {value!r}")
    if "host" not in names:
        # An unsigned Host would let a signature be replayed against another endpoint.
        raise error("SignedHeaders must include the host header.")
    return names


def parse_authorization(value: str) -> dict[str, str]:
    """Split "AWS4-HMAC-SHA256 Credential=.., SignedHeaders=.., Signature=.." into its fields."""
    algorithm, _, rest = value.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise AuthorizationHeaderMalformed(f"Unsupported algorithm {algorithm!r}; expecting {ALGORITHM}.")
    fields: dict[str, str] = {}
    for item in rest.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, field_value = item.partition("=")
        if not sep:
            raise AuthorizationHeaderMalformed(
                f"The authorization header is malformed; {item!r} is not of the form name=value."
            )
        fields[name.strip()] = field_value.strip()
    for required in ("Credential", "SignedHeaders", "Signature"):
        if not fields.get(required):
            raise AuthorizationHeaderMalformed(f"The authorization header is malformed; missing {required}.")
    return fields


def secret_of(creds: Credentials, access_key: str) -> str:
    secret = creds.secret_for(access_key)
    if secret is None:
        raise InvalidAccessKeyId(AWSAccessKeyId=access_key)
    return secret


def canonical_request(
    req: RequestToVerify,
    uri: str,
    signed_headers: tuple[str, ...],
    payload_hash: str,
    *,
    exclude_query: frozenset[str],
    query: list[QueryParam],
) -> str:
    # A signed header the request lacks is signed as empty: the signature then simply fails.
    # Values are signed as the text the client sent (its bytes read as UTF-8, see wire_text).
    header_lines = "".join(
        f"{name}:{trim_all(wire_text(req.headers.get(name, '')))}\n" for name in signed_headers
    )
    return "\n".join(
        (
            req.method.upper(),
            uri,
            canonical_query(query, exclude=exclude_query),
            header_lines,
            ";".join(signed_headers),
            payload_hash,
        )
    )


def check_signature(
    req: RequestToVerify,
    query: list[QueryParam],
    *,
    key: bytes,
    scope: CredentialScope,
    amz_date: str,
    signed_headers: tuple[str, ...],
    payload_hash: str,
    provided: str,
    exclude_query: frozenset[str] = frozenset(),
) -> None:
    """Raise SignatureDoesNotMatch unless `provided` signs this request."""
    uris = [canonical_uri(req.raw_path)]
    if req.raw_path and req.raw_path != uris[0]:
        # A client that signs the path exactly as it sent it (not re-encoded) still means the
        # same resource, so accept that form too.
        uris.append(req.raw_path)
    first: tuple[str, str] | None = None
    for uri in uris:
        creq = canonical_request(
            req, uri, signed_headers, payload_hash, exclude_query=exclude_query, query=query
        )
        string_to_sign = "\n".join((ALGORITHM, amz_date, scope.text, sha256_hex(creq)))
        if same(hmac_sha256_hex(key, string_to_sign), provided):
            return
        first = first or (creq, string_to_sign)
    assert first is not None
    raise SignatureDoesNotMatch(
        AWSAccessKeyId=scope.access_key,
        StringToSign=first[1],
        SignatureProvided=provided,
        CanonicalRequest=first[0],
    )


def _header_date(req: RequestToVerify) -> tuple[str, datetime]:
    """The request time and its ISO 8601 basic form: x-amz-date, else the Date header."""
    amz = req.headers.get("x-amz-date")
    if amz is not None:
        moment = parse_amz_date(amz.strip())
        if moment is None:
            raise AccessDenied("AWS authentication requires a valid Date or x-amz-date header")
        return amz.strip(), moment
    date = req.headers.get("date")
    moment = parse_http_date(date) if date else None
    if moment is None:
        raise AccessDenied("AWS authentication requires a valid Date or x-amz-date header")
    return format_amz_date(moment), moment


def check_skew(moment: datetime, request_time: str, now: datetime, max_skew: timedelta) -> None:
    if abs(now - moment) > max_skew:
        raise RequestTimeTooSkewed(
            RequestTime=request_time,
            ServerTime=format_amz_date(now),
            MaxAllowedSkewMilliseconds=int(max_skew.total_seconds() * 1000),
        )


def _context(
    scheme: AuthScheme,
    scope: CredentialScope,
    key: bytes,
    amz_date: str,
    signature: str,
    payload_hash: str,
) -> AuthContext:
    mode, digest = payload_mode_for(payload_hash)
    return AuthContext(
        access_key=scope.access_key,
        payload_mode=mode,
        payload_sha256=digest,
        scheme=scheme,
        signing_key=key,
        scope=scope.text,
        amz_date=amz_date,
        seed_signature=signature.lower(),
        region=scope.region,
    )


def verify_header(
    req: RequestToVerify,
    query: list[QueryParam],
    creds: Credentials,
    *,
    now: datetime,
    max_skew: timedelta,
    region: str | None,
    service: str,
) -> AuthContext:
    """Verify `Authorization: AWS4-HMAC-SHA256 ...`."""
    fields = parse_authorization(req.headers["authorization"])
    scope = parse_credential(
        fields["Credential"], AuthorizationHeaderMalformed, region=region, service=service
    )
    signed_headers = parse_signed_headers(fields["SignedHeaders"], AuthorizationHeaderMalformed)
    amz_date, moment = _header_date(req)
    if scope.date != amz_date[:8]:
        raise AuthorizationHeaderMalformed(
            f'Invalid credential date "{scope.date}". Date is not the same as X-Amz-Date: "{amz_date[:8]}".'
        )
    check_skew(moment, amz_date, now, max_skew)
    payload_hash = req.headers.get("x-amz-content-sha256")
    if payload_hash is None:
        raise InvalidRequest("Missing required header for this request: x-amz-content-sha256")
    payload_hash = payload_hash.strip()
    payload_mode_for(payload_hash)  # reject a nonsense value before spending HMACs on it
    key = signing_key(secret_of(creds, scope.access_key), scope.date, scope.region, scope.service)
    check_signature(
        req,
        query,
        key=key,
        scope=scope,
        amz_date=amz_date,
        signed_headers=signed_headers,
        payload_hash=payload_hash,
        provided=fields["Signature"],
    )
    return _context("sigv4-header", scope, key, amz_date, fields["Signature"], payload_hash)


def verify_query(
    req: RequestToVerify,
    query: list[QueryParam],
    creds: Credentials,
    *,
    now: datetime,
    max_skew: timedelta,
    region: str | None,
    service: str,
) -> AuthContext:
    """Verify a presigned URL (X-Amz-Algorithm, X-Amz-Credential, ... X-Amz-Signature)."""
    values = first_values(query)
    if any(not values.get(name) for name in _QUERY_REQUIRED):
        raise AuthorizationQueryParametersError(
            "Query-string authentication version 4 requires the X-Amz-Algorithm, X-Amz-Credential, "
            "X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires parameters."
        )
    if values["X-Amz-Algorithm"] != ALGORITHM:
        raise AuthorizationQueryParametersError(f'X-Amz-Algorithm only supports "{ALGORITHM}"')
    scope = parse_credential(
        values["X-Amz-Credential"], AuthorizationQueryParametersError, region=region, service=service
    )
    amz_date = values["X-Amz-Date"]
    moment = parse_amz_date(amz_date)
    if moment is None:
        raise AuthorizationQueryParametersError(
            "X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\""
        )
    try:
        expires = int(values["X-Amz-Expires"])
    except ValueError:
        raise AuthorizationQueryParametersError("X-Amz-Expires should be a number") from None
    if expires < 0:
        raise _expires_out_of_range("X-Amz-Expires must be non-negative")
    if expires > MAX_PRESIGNED_EXPIRES:
        raise _expires_out_of_range(
            "X-Amz-Expires must be less than a week (in seconds); that is, the given X-Amz-Expires "
            f"must be less than {MAX_PRESIGNED_EXPIRES} seconds"
        )
    if scope.date != amz_date[:8]:
        raise AuthorizationQueryParametersError(
            f'Invalid credential date "{scope.date}". Date is not the same as X-Amz-Date: "{amz_date[:8]}".'
        )
    signed_headers = parse_signed_headers(values["X-Amz-SignedHeaders"], AuthorizationQueryParametersError)
    # Presigned URLs use their own validity window instead of the clock-skew check; only a URL
    # dated further in the future than the allowed skew is refused as not yet valid.
    if moment - now > max_skew:
        raise AccessDenied("Request is not valid yet")
    # ">=": a URL valid for zero seconds has expired by the time it arrives (AWS: 403).
    if now >= moment + timedelta(seconds=expires):
        raise AccessDenied(
            "Request has expired",
            **{"X-Amz-Expires": str(expires)},
            Expires=format_amz_date(moment + timedelta(seconds=expires)),
            ServerTime=format_amz_date(now),
        )
    # The payload hash only means something if the client signed it: a signed
    # x-amz-content-sha256 header, else an X-Amz-Content-Sha256 parameter, else UNSIGNED.
    if "x-amz-content-sha256" in signed_headers:
        payload_hash = req.headers.get("x-amz-content-sha256", "").strip()
    else:
        payload_hash = values.get("X-Amz-Content-Sha256") or UNSIGNED_PAYLOAD
    payload_mode_for(payload_hash)
    key = signing_key(secret_of(creds, scope.access_key), scope.date, scope.region, scope.service)
    check_signature(
        req,
        query,
        key=key,
        scope=scope,
        amz_date=amz_date,
        signed_headers=signed_headers,
        payload_hash=payload_hash,
        provided=values["X-Amz-Signature"],
        exclude_query=frozenset({"X-Amz-Signature"}),
    )
    return _context("sigv4-query", scope, key, amz_date, values["X-Amz-Signature"], payload_hash)
