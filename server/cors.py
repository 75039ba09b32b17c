"""CORS as S3 has it: the bucket's CORSConfiguration, preflight answers and response headers.

A pure part — parse, validate and render the document (`parse_cors`, `render_cors`), pick the
rule that allows a request (`match_rule`), the headers it grants (`allow_headers`) — and a small
per-process cache (`CorsRules`), so that a request only pays a catalog read for the bucket's
rules when it carries an Origin header, and then at most once a second per bucket.

S3's behaviour, followed here: the first rule whose AllowedOrigin, AllowedMethod and (for a
preflight) every requested header match wins; origins and methods compare case-sensitively,
headers case-insensitively, and a pattern holds at most one `*`. The matched rule's origin `*`
answers `Access-Control-Allow-Origin: *` without credentials; any other echoes the Origin and
allows credentials. A response to a request whose origin no rule allows carries no CORS headers.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from xml.etree.ElementTree import Element

from server import errors as s3
from server.request_headers import RequestHeaders
from server.router import bucket_from_host, decode_path
from server.xml_io import Value, document, parse
from tiering.errors import BucketNotFound
from tiering.store import ObjectStore

CONFIG_NAME = "cors"  # the bucket configuration document's name in the catalog
MAX_RULES = 100
METHODS = ("GET", "PUT", "POST", "DELETE", "HEAD")
MAX_ID_LENGTH = 255
MAX_AGE_LIMIT = 2**31 - 1
VARY = "Origin, Access-Control-Request-Headers, Access-Control-Request-Method"
CACHE_SECONDS = 1.0

NOT_ALLOWED = (
    "CORSResponse: This CORS request is not allowed. This is usually because the evalution of Origin, "
    "request method / Access-Control-Request-Method or Access-Control-Request-Headers are not "
    "whitelisted by the resource's CORS spec."
)  # sic: "evalution" is S3's spelling
NOT_ENABLED = "CORSResponse: CORS is not enabled for this bucket."
NO_BUCKET = "CORSResponse: Bucket not found"

_RULE_ELEMENTS = {"ID", "AllowedOrigin", "AllowedMethod", "AllowedHeader", "ExposeHeader", "MaxAgeSeconds"}


class AccessForbidden(s3.S3Error):
    """A preflight that no rule allows (S3's code for CORS refusals; AccessDenied is for auth)."""

    status = 403
    message = NOT_ALLOWED


class BadRequest(s3.S3Error):
    status = 400
    message = "Bad Request"


class MissingRequestBodyError(s3.S3Error):
    status = 400
    message = "Request Body is empty"


@dataclass(frozen=True)
class CorsRule:
    allowed_origins: tuple[str, ...]
    allowed_methods: tuple[str, ...]
    allowed_headers: tuple[str, ...] = ()
    expose_headers: tuple[str, ...] = ()
    max_age: int | None = None
    id: str | None = None


# --- the document ----------------------------------------------------------------------------------


def _single(rule: Element, name: str) -> str | None:
    found = rule.findall(name)
    if len(found) > 1:
        raise s3.MalformedXML()
    return (found[0].text or "") if found else None


def _rule_structure(rule: Element) -> CorsRule:
    """The rule's elements; anything S3's schema refuses is MalformedXML (checked before values)."""
    if any(child.tag not in _RULE_ELEMENTS for child in rule):
        raise s3.MalformedXML()
    origins = tuple(e.text or "" for e in rule.findall("AllowedOrigin"))
    methods = tuple(e.text or "" for e in rule.findall("AllowedMethod"))
    if not origins or not methods:
        raise s3.MalformedXML()
    rule_id = _single(rule, "ID")
    if rule_id is not None and len(rule_id) > MAX_ID_LENGTH:
        raise s3.MalformedXML()
    raw_age = _single(rule, "MaxAgeSeconds")
    max_age: int | None = None
    if raw_age is not None:
        if not (raw_age.isascii() and raw_age.isdigit()) or int(raw_age) > MAX_AGE_LIMIT:
            raise s3.MalformedXML()
        max_age = int(raw_age)
    return CorsRule(
        allowed_origins=origins,
        allowed_methods=methods,
        allowed_headers=tuple(e.text or "" for e in rule.findall("AllowedHeader")),
        expose_headers=tuple(e.text or "" for e in rule.findall("ExposeHeader")),
        max_age=max_age,
        id=rule_id,
    )


def _check_values(rule: CorsRule) -> None:
    for method in rule.allowed_methods:
        if method not in METHODS:
            raise s3.InvalidRequest(
                f"Found unsupported HTTP method in CORS config. Unsupported method is {method}"
            )
    for origin in rule.allowed_origins:
        if origin.count("*") > 1:
            raise s3.InvalidRequest(f'AllowedOrigin "{origin}" can not have more than one wildcard.')
    for header in rule.allowed_headers:
        if header.count("*") > 1:
            raise s3.InvalidRequest(f'AllowedHeader "{header}" can not have more than one wildcard.')
    for header in rule.expose_headers:
        if "*" in header:
            raise s3.InvalidRequest(
                f'ExposeHeader "{header}" contains wildcard. We currently do not support wildcard for ExposeHeader.'
            )


def parse_cors(body: bytes) -> list[CorsRule]:
    """A CORSConfiguration body as rules. Raises MalformedXML / InvalidRequest as S3 does."""
    root = parse(body, "CORSConfiguration")
    if any(child.tag != "CORSRule" for child in root):
        raise s3.MalformedXML()
    elements = root.findall("CORSRule")
    if not elements:
        raise s3.MalformedXML()
    rules = [_rule_structure(element) for element in elements]  # the whole structure first
    if len(rules) > MAX_RULES:
        raise s3.InvalidRequest(
            f"The number of CORS rules should not exceed allowed limit of {MAX_RULES} rules."
        )
    for rule in rules:
        _check_values(rule)
    return rules


def render_cors(rules: list[CorsRule]) -> bytes:
    """GetBucketCors's document, elements in S3's order."""
    out: list[tuple[str, Value]] = []
    for rule in rules:
        children: list[tuple[str, Value]] = [("ID", rule.id)]
        children += [("AllowedMethod", m) for m in rule.allowed_methods]
        children += [("AllowedOrigin", o) for o in rule.allowed_origins]
        children += [("AllowedHeader", h) for h in rule.allowed_headers]
        children.append(("MaxAgeSeconds", rule.max_age))
        children += [("ExposeHeader", h) for h in rule.expose_headers]
        out.append(("CORSRule", children))
    return document("CORSConfiguration", out)


# --- matching --------------------------------------------------------------------------------------


def wildcard_match(pattern: str, text: str) -> bool:
    """`pattern` with at most one `*` (any run of characters, possibly empty) against `text`."""
    head, star, tail = pattern.partition("*")
    if not star:
        return pattern == text
    return len(text) >= len(head) + len(tail) and text.startswith(head) and text.endswith(tail)


def requested_headers(value: str | None) -> list[str]:
    """Access-Control-Request-Headers as lower-case names ("Content-Type, X-Amz-Date")."""
    if not value:
        return []
    return [name.strip().lower() for name in value.split(",") if name.strip()]


def match_rule(
    rules: list[CorsRule], origin: str, method: str, headers: Sequence[str] = ()
) -> CorsRule | None:
    """The first rule allowing `origin` to use `method` with (lower-case) `headers`."""
    for rule in rules:
        if method not in rule.allowed_methods:
            continue
        if not any(wildcard_match(pattern, origin) for pattern in rule.allowed_origins):
            continue
        allowed = [pattern.lower() for pattern in rule.allowed_headers]
        if all(any(wildcard_match(pattern, name) for pattern in allowed) for name in headers):
            return rule
    return None


def allow_headers(rule: CorsRule, origin: str, request_headers: list[str] | None = None) -> dict[str, str]:
    """The CORS headers a response gets under `rule`; `request_headers` only for a preflight."""
    headers: dict[str, str] = {}
    if "*" in rule.allowed_origins and not any(
        pattern != "*" and wildcard_match(pattern, origin) for pattern in rule.allowed_origins
    ):
        headers["access-control-allow-origin"] = "*"
    else:
        headers["access-control-allow-origin"] = origin
        headers["access-control-allow-credentials"] = "true"
    headers["access-control-allow-methods"] = ", ".join(rule.allowed_methods)
    if request_headers:
        headers["access-control-allow-headers"] = ", ".join(request_headers)
    if rule.expose_headers:
        headers["access-control-expose-headers"] = ", ".join(rule.expose_headers)
    if rule.max_age is not None:
        headers["access-control-max-age"] = str(rule.max_age)
    headers["vary"] = VARY
    return headers


def preflight_target(raw_path: str, host: str, domains: list[str]) -> tuple[str | None, bool]:
    """(bucket, names an object?) of an OPTIONS request, path- or virtual-host-style."""
    path = decode_path(raw_path.split("?", 1)[0])
    path = path[1:] if path.startswith("/") else path
    vhost_bucket = bucket_from_host(host, domains) if host else None
    if vhost_bucket is not None:
        return vhost_bucket, bool(path)
    bucket, _, key = path.partition("/")
    return bucket or None, bool(key)


# --- the rules of a bucket, cached -----------------------------------------------------------------


class CorsRules:
    """Each bucket's rules, read from the catalog at most once a `ttl` per bucket.

    A bucket without a configuration is cached as None, a missing bucket as the BucketNotFound it
    raised. Put/DeleteBucketCors call `forget`, so this process sees its own change at once;
    another worker process sees it within `ttl` seconds.
    """

    def __init__(self, store: ObjectStore, ttl: float = CACHE_SECONDS) -> None:
        self.store = store
        self.ttl = ttl
        self._cache: dict[str, tuple[float, list[CorsRule] | None | BucketNotFound]] = {}

    def forget(self, bucket: str) -> None:
        self._cache.pop(bucket, None)

    def forget_all(self) -> None:
        self._cache.clear()

    async def rules(self, bucket: str) -> list[CorsRule] | None:
        """The bucket's rules, None when it has none. Raises BucketNotFound."""
        now = time.monotonic()
        cached = self._cache.get(bucket)
        if cached is None or now - cached[0] >= self.ttl:
            value: list[CorsRule] | None | BucketNotFound
            try:
                raw = await self.store.get_bucket_config(bucket, CONFIG_NAME)
                value = parse_cors(raw.encode()) if raw is not None else None
            except BucketNotFound as exc:
                value = exc
            if len(self._cache) > 10_000:
                self._cache.clear()
            cached = (now, value)
            self._cache[bucket] = cached
        if isinstance(cached[1], BucketNotFound):
            raise cached[1]
        return cached[1]

    async def preflight(self, bucket: str | None, is_object: bool, headers: RequestHeaders) -> dict[str, str]:
        """Answer an OPTIONS request: the headers to grant, or the S3 error that refuses it.

        `headers` are the request's (lower-case names). No signature is needed: a browser sends
        none with a preflight.
        """
        origin = headers.get("origin")
        if not origin:
            raise BadRequest("Insufficient information. Origin request header needed.")
        method = headers.get("access-control-request-method")
        if method not in METHODS:
            raise BadRequest(
                f"Invalid Access-Control-Request-Method: {method if method is not None else 'null'}"
            )
        resource = {"Method": method, "ResourceType": "OBJECT" if is_object else "BUCKET"}
        if not bucket:
            raise AccessForbidden(NOT_ALLOWED, **resource)
        try:
            rules = await self.rules(bucket)
        except BucketNotFound:
            raise AccessForbidden(NO_BUCKET, **resource) from None
        if rules is None:
            raise AccessForbidden(NOT_ENABLED, **resource)
        wanted = requested_headers(headers.get("access-control-request-headers"))
        rule = match_rule(rules, origin, method, wanted)
        if rule is None:
            raise AccessForbidden(NOT_ALLOWED, **resource)
        return allow_headers(rule, origin, wanted)

    async def actual(self, bucket: str, method: str, headers: RequestHeaders) -> dict[str, str]:
        """The CORS headers for a (non-preflight) request carrying an Origin header; {} when none.

        As S3: the method matched is Access-Control-Request-Method when the request has it.
        """
        origin = headers.get("origin")
        if not origin:
            return {}
        try:
            rules = await self.rules(bucket)
        except BucketNotFound:
            return {}
        if not rules:
            return {}
        method = headers.get("access-control-request-method") or method
        rule = match_rule(rules, origin, method)
        return allow_headers(rule, origin) if rule is not None else {}
