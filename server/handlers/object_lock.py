"""Object Lock: the bucket's configuration, a version's retention and legal hold, the lock headers
of PUT, and who may bypass GOVERNANCE. The rules live in tiering.object_lock; the catalog applies
them in the transaction that deletes or changes a version."""

from __future__ import annotations

import datetime as dt
from typing import Any

from starlette.responses import Response

from server import errors as s3
from server.context import S3Request
from server.handlers.common import version_headers, version_param
from server.handlers.registry import handles
from server.http_semantics import content_md5
from server.operations import Operation
from server.responses import empty_response, xml_response
from server.xml_io import Value, child_text, document, iso_time, parse
from tiering.object_lock import MODES, LockConfiguration, default_period_refused

MISSING_CONFIGURATION = "Bucket is missing Object Lock Configuration"
BYPASS_HEADER = "x-amz-bypass-governance-retention"


def _date(raw: str, name: str) -> float:
    try:
        moment = dt.datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
    except ValueError:
        raise s3.InvalidArgument(
            f"The {name} value is not a valid date", ArgumentName=name, ArgumentValue=raw
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.timestamp()


def _has_integrity_header(req: S3Request) -> bool:
    """Content-MD5 or an additional checksum (header, SDK algorithm or trailer): S3 requires one on
    every request that sets Object Lock parameters."""
    return (
        content_md5(req.headers) is not None
        or any(name.lower().startswith("x-amz-checksum-") for name in req.headers)
        or req.header("x-amz-sdk-checksum-algorithm") is not None
        or req.header("x-amz-trailer") is not None
    )


def require_integrity(
    req: S3Request, message: str = "Missing required header for this request: Content-MD5"
) -> None:
    if not _has_integrity_header(req):
        raise s3.InvalidRequest(message)


async def may_bypass_governance(req: S3Request, key: str | None = None) -> bool:
    """x-amz-bypass-governance-retention: true, from a caller allowed s3:BypassGovernanceRetention."""
    if (req.header(BYPASS_HEADER) or "").strip().lower() != "true":
        return False
    if req.authorizer is None or req.identity is None:
        return True  # authorization off: every caller may everything
    decision = await req.authorizer.decide(
        req.identity,
        req.operation,
        req.bucket,
        key=key if key is not None else req.key,
        action="s3:BypassGovernanceRetention",
        request=req.request,
    )
    return decision.allowed


async def lock_for_write(req: S3Request, *, carries_body: bool = True) -> dict[str, Any] | None:
    """The lock a write's headers ask for (x-amz-object-lock-mode / -retain-until-date /
    -legal-hold), checked as S3 checks them; None when they name none. Only a request that carries
    the object's bytes (PutObject) must prove them with Content-MD5 or a checksum:
    CreateMultipartUpload and CopyObject carry none."""
    mode = req.header("x-amz-object-lock-mode")
    until = req.header("x-amz-object-lock-retain-until-date")
    hold = req.header("x-amz-object-lock-legal-hold")
    if mode is None and until is None and hold is None:
        return None
    if (mode is None) != (until is None):
        raise s3.InvalidArgument(
            "x-amz-object-lock-retain-until-date and x-amz-object-lock-mode must both be supplied"
        )
    if mode is not None and mode not in MODES:
        raise s3.InvalidArgument("Unknown wormMode directive.", ArgumentName="x-amz-object-lock-mode")
    if hold is not None and hold not in ("ON", "OFF"):
        raise s3.InvalidArgument("Legal Hold must be either of 'ON' or 'OFF'")
    if await req.store.object_lock_config(req.bucket) is None:
        raise s3.InvalidRequest(MISSING_CONFIGURATION)
    if carries_body:
        require_integrity(
            req,
            "Content-MD5 OR x-amz-checksum- HTTP header is required for Put Object requests with Object Lock parameters",
        )
    lock: dict[str, Any] = {}
    if mode is not None and until is not None:
        when = _date(until, "x-amz-object-lock-retain-until-date")
        if when <= req.store.clock():
            raise s3.InvalidArgument("The retain until date must be in the future!")
        lock.update(mode=mode, until=when)
    if hold == "ON":
        lock["hold"] = True
    return lock or None


def lock_headers(lock: dict[str, Any] | None) -> dict[str, str]:
    """GET/HEAD headers of a version's lock."""
    headers: dict[str, str] = {}
    if lock and lock.get("mode"):
        headers["x-amz-object-lock-mode"] = lock["mode"]
        headers["x-amz-object-lock-retain-until-date"] = iso_time(float(lock["until"]))
    if lock and lock.get("hold"):
        headers["x-amz-object-lock-legal-hold"] = "ON"
    return headers


# --- the bucket's configuration ------------------------------------------------------------------


@handles(Operation.GetObjectLockConfiguration)
async def get_object_lock_configuration(req: S3Request) -> Response:
    config = await req.store.object_lock_config(req.bucket)
    if config is None:
        raise s3.ObjectLockConfigurationNotFoundError(BucketName=req.bucket)
    children: list[tuple[str, Value]] = [("ObjectLockEnabled", "Enabled")]
    if config.mode is not None:
        span: tuple[str, Value] = ("Days", config.days) if config.days else ("Years", config.years)
        children.append(("Rule", [("DefaultRetention", [("Mode", config.mode), span])]))
    return xml_response(document("ObjectLockConfiguration", children))


@handles(Operation.PutObjectLockConfiguration)
async def put_object_lock_configuration(req: S3Request) -> Response:
    body = await req.small_body()
    require_integrity(req)
    root = parse(body, "ObjectLockConfiguration")
    if child_text(root, "ObjectLockEnabled") != "Enabled":
        raise s3.MalformedXML()
    config = LockConfiguration()
    rule = root.find("Rule")
    if rule is not None:
        retention = rule.find("DefaultRetention")
        if retention is None:
            raise s3.MalformedXML()
        mode, days, years = (child_text(retention, n) for n in ("Mode", "Days", "Years"))
        if mode not in MODES or (days is None) == (years is None):
            raise s3.MalformedXML()
        refused = default_period_refused(days, years)
        if refused is not None:
            name = "Days" if days is not None else "Years"
            raise s3.InvalidArgument(
                refused, ArgumentName=name, ArgumentValue=days if days is not None else years
            )
        span = int((days if days is not None else years or "").strip())
        config = LockConfiguration(
            mode, span if days is not None else None, span if years is not None else None
        )
    await req.store.set_object_lock_config(req.bucket, config)
    return empty_response(200)


# --- one version's retention and legal hold ---------------------------------------------------------


async def _lock_of(req: S3Request) -> tuple[dict[str, Any] | None, str]:
    if await req.store.object_lock_config(req.bucket) is None:
        raise s3.InvalidRequest(MISSING_CONFIGURATION)
    record = await req.store.head_object(req.bucket, req.key, version_param(req))
    return record.meta.lock, record.version_id


@handles(Operation.GetObjectRetention)
async def get_object_retention(req: S3Request) -> Response:
    lock, _ = await _lock_of(req)
    if not lock or not lock.get("mode"):
        raise s3.NoSuchObjectLockConfiguration()
    return xml_response(
        document("Retention", [("Mode", lock["mode"]), ("RetainUntilDate", iso_time(float(lock["until"])))])
    )


@handles(Operation.GetObjectLegalHold)
async def get_object_legal_hold(req: S3Request) -> Response:
    lock, _ = await _lock_of(req)
    if not lock or "hold" not in lock and not lock.get("mode"):
        raise s3.NoSuchObjectLockConfiguration()
    return xml_response(document("LegalHold", [("Status", "ON" if lock.get("hold") else "OFF")]))


@handles(Operation.PutObjectRetention)
async def put_object_retention(req: S3Request) -> Response:
    body = await req.small_body()
    require_integrity(req)
    root = parse(body, "Retention")
    mode, until = child_text(root, "Mode"), child_text(root, "RetainUntilDate")
    if (mode is None) != (until is None) or (mode is not None and mode not in MODES):
        raise s3.MalformedXML()
    when = _date(until, "RetainUntilDate") if until is not None else None
    if when is not None and when <= req.store.clock():
        raise s3.InvalidArgument("The retain until date must be in the future!")
    if await req.store.object_lock_config(req.bucket) is None:
        raise s3.InvalidRequest(MISSING_CONFIGURATION)
    version = await req.store.set_lock(
        req.bucket,
        req.key,
        version_param(req),
        retention=(mode, when),
        bypass_governance=await may_bypass_governance(req),
    )
    return empty_response(200, version_headers(version, "versionId" in req.query) or None)


@handles(Operation.PutObjectLegalHold)
async def put_object_legal_hold(req: S3Request) -> Response:
    body = await req.small_body()
    require_integrity(req)
    status = child_text(parse(body, "LegalHold"), "Status")
    if status not in ("ON", "OFF"):
        raise s3.MalformedXML()
    if await req.store.object_lock_config(req.bucket) is None:
        raise s3.InvalidRequest(MISSING_CONFIGURATION)
    version = await req.store.set_lock(req.bucket, req.key, version_param(req), hold=status == "ON")
    return empty_response(200, version_headers(version, "versionId" in req.query) or None)
