"""DeleteObject and DeleteObjects (quiet and verbose)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from starlette.responses import Response

from server.context import S3Request
from server.error_map import to_s3_error
from server.errors import BadDigest, InvalidArgument, MalformedXML, NoSuchVersion, S3Error
from server.handlers.common import version_param
from server.handlers.object_lock import may_bypass_governance, require_integrity
from server.handlers.registry import handles
from server.http_semantics import content_md5, is_number
from server.operations import Operation
from server.responses import empty_response, xml_response
from server.xml_io import Value, child_text, document, parse
from tiering.catalog.versions import DeleteOutcome, well_formed_version_id
from tiering.conditions import DeleteCondition
from tiering.errors import TieringError

MAX_DELETE_KEYS = 1000


def _timestamp(value: str, name: str) -> int:
    """Whole seconds of a conditional delete's time: RFC 822 as the SDKs send it (ISO 8601 too)."""
    try:
        return int(parsedate_to_datetime(value).timestamp())
    except (TypeError, ValueError, IndexError):
        pass
    try:
        moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(f"Invalid {name}", ArgumentName=name, ArgumentValue=value) from None
    return int((moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp())


def _size(value: str, name: str) -> int:
    if not is_number(value.strip()):
        raise InvalidArgument(f"Invalid {name}", ArgumentName=name, ArgumentValue=value)
    return int(value)


def delete_condition(etag: str | None, last_modified: str | None, size: str | None) -> DeleteCondition:
    """A conditional delete's condition: If-Match / ETag, last-modified time, size (any of them)."""
    return DeleteCondition(
        etag=None if etag is None else etag.strip().strip('"'),
        last_modified=None if last_modified is None else _timestamp(last_modified, "LastModifiedTime"),
        size=None if size is None else _size(size, "Size"),
    )


def _outcome_headers(outcome: DeleteOutcome) -> dict[str, str]:
    """x-amz-delete-marker / x-amz-version-id: the marker a delete added, or the version it removed."""
    headers: dict[str, str] = {}
    if outcome.delete_marker:
        headers["x-amz-delete-marker"] = "true"
    if outcome.version_id is not None:
        headers["x-amz-version-id"] = outcome.version_id
    return headers


@handles(Operation.DeleteObject)
async def delete_object(req: S3Request) -> Response:
    version = version_param(req)
    if version is not None and not well_formed_version_id(version):
        raise InvalidArgument("Invalid version id specified", ArgumentName="versionId", ArgumentValue=version)
    condition = delete_condition(
        req.header("if-match"),
        req.header("x-amz-if-match-last-modified-time"),
        req.header("x-amz-if-match-size"),
    )
    bypass = version is not None and await may_bypass_governance(req)
    outcome = await req.store.delete_version(
        req.bucket, req.key, version, bypass_governance=bypass, condition=condition or None
    )
    return empty_response(204, _outcome_headers(outcome) or None)


def parse_delete(body: bytes) -> tuple[bool, list[tuple[str, str | None, DeleteCondition]]]:
    """A DeleteObjects body: (quiet, [(key, version id or None, condition)]). Only S3 errors,
    for any bytes."""
    root = parse(body, "Delete")
    quiet = (child_text(root, "Quiet") or "").strip().lower() == "true"
    entries = root.findall("Object")
    if not entries or len(entries) > MAX_DELETE_KEYS:
        raise MalformedXML()
    objects: list[tuple[str, str | None, DeleteCondition]] = []
    for entry in entries:
        key = child_text(entry, "Key")
        if not key:
            raise MalformedXML()
        condition = delete_condition(
            child_text(entry, "ETag"), child_text(entry, "LastModifiedTime"), child_text(entry, "Size")
        )
        objects.append((key, child_text(entry, "VersionId"), condition))
    return quiet, objects


@handles(Operation.DeleteObjects)
async def delete_objects(req: S3Request) -> Response:
    body = await req.small_body()
    declared = content_md5(req.headers)
    if declared is not None and hashlib.md5(body).hexdigest() != declared:
        raise BadDigest()
    quiet, objects = parse_delete(body)
    await req.store.get_bucket(req.bucket)
    if await req.store.object_lock_config(req.bucket) is not None:
        require_integrity(req)  # S3 refuses an unproven delete list on a lock-enabled bucket
    results: list[tuple[str, Value]] = []
    for key, version, condition in objects:
        try:
            if req.authorizer is not None and req.identity is not None:
                await req.authorizer.check(
                    req.identity,
                    Operation.DeleteObject,
                    req.bucket,
                    key=key,
                    action="s3:DeleteObjectVersion" if version is not None else None,
                    request=req.request,
                    query=req.query,
                )
            if version is not None and not well_formed_version_id(version):
                raise NoSuchVersion()
            bypass = version is not None and await may_bypass_governance(req, key)
            outcome = await req.store.delete_version(
                req.bucket, key, version, bypass_governance=bypass, condition=condition or None
            )
        except (S3Error, TieringError) as exc:
            error = exc if isinstance(exc, S3Error) else to_s3_error(exc)
            failed: list[tuple[str, Value]] = [("Key", key)]
            if version is not None:
                failed.append(("VersionId", version))
            results.append(("Error", [*failed, ("Code", error.code), ("Message", error.detail)]))
            continue
        if not quiet:
            deleted: list[tuple[str, Value]] = [("Key", key)]
            if version is not None:
                deleted.append(("VersionId", version))
            if outcome.delete_marker:
                # A marker this delete added (no version named), or the marker it removed.
                deleted.append(("DeleteMarker", "true"))
                if outcome.version_id is not None:
                    deleted.append(("DeleteMarkerVersionId", outcome.version_id))
            results.append(("Deleted", deleted))
    return xml_response(document("DeleteResult", results))
