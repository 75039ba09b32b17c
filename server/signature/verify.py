"""`authenticate`: pick the signing scheme a request uses and verify it.

Exactly one mechanism may be present (AWS refuses a request that carries two); a request with
none is anonymous, which this function refuses: callers that allow anonymous access decide so
before calling it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from server.errors import AccessDenied, InvalidArgument
from server.signature import sigv2, sigv4
from server.signature.canonical import split_query
from server.signature.context import AuthContext
from server.signature.dates import utc_now
from server.signature.request import Credentials, RequestToVerify


def has_credentials(req: RequestToVerify) -> bool:
    """True when the request carries any signature (header or query), valid or not."""
    names = {param.name for param in split_query(req.query_string)}
    return bool(req.headers.get("authorization", "").strip()) or bool(
        names & {"X-Amz-Algorithm", "X-Amz-Signature", "AWSAccessKeyId", "Signature"}
    )


def authenticate(
    req: RequestToVerify,
    creds: Credentials,
    *,
    now: datetime | None = None,
    max_skew: timedelta = timedelta(minutes=15),
    region: str | None = None,
    service: str = "s3",
) -> AuthContext:
    """Verify the request's signature and return who signed it and how to read its body.

    `region`, when given, is the only region SigV4 scopes may name; None accepts any region
    (the region is still covered by the signature). Raises only `S3Error` subclasses.
    """
    moment = utc_now(now)
    query = split_query(req.query_string)
    names = {param.name for param in query}
    authorization = req.headers.get("authorization", "").strip()
    v4_query = "X-Amz-Algorithm" in names or "X-Amz-Signature" in names
    v2_query = "AWSAccessKeyId" in names or "Signature" in names
    if sum((bool(authorization), v4_query, v2_query)) > 1:
        raise InvalidArgument(
            "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, Signature "
            "query string parameter or the Authorization header should be specified",
            ArgumentName="Authorization",
        )
    if authorization:
        scheme = authorization.split(" ", 1)[0]
        if scheme == sigv4.ALGORITHM:
            return sigv4.verify_header(
                req, query, creds, now=moment, max_skew=max_skew, region=region, service=service
            )
        if scheme == "AWS":
            return sigv2.verify_header(req, query, creds, now=moment, max_skew=max_skew)
        raise InvalidArgument(
            "Unsupported Authorization Type", ArgumentName="Authorization", ArgumentValue=authorization[:64]
        )
    if v4_query:
        return sigv4.verify_query(
            req, query, creds, now=moment, max_skew=max_skew, region=region, service=service
        )
    if v2_query:
        return sigv2.verify_query(req, query, creds, now=moment)
    raise AccessDenied()
