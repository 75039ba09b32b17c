"""DeleteObject and DeleteObjects (quiet and verbose)."""

from __future__ import annotations

import hashlib

from starlette.responses import Response

from server.context import S3Request
from server.error_map import to_s3_error
from server.errors import BadDigest, MalformedXML, S3Error
from server.handlers.common import only_null_version
from server.handlers.registry import handles
from server.http_semantics import content_md5
from server.operations import Operation
from server.responses import empty_response, xml_response
from server.xml_io import Value, child_text, document, parse
from tiering.errors import TieringError

MAX_DELETE_KEYS = 1000


@handles(Operation.DeleteObject)
async def delete_object(req: S3Request) -> Response:
    only_null_version(req)
    await req.store.delete_object(req.bucket, req.key)
    headers = {"x-amz-version-id": "null"} if req.query.get("versionId") == "null" else None
    return empty_response(204, headers)


def parse_delete(body: bytes) -> tuple[bool, list[tuple[str, str | None]]]:
    """A DeleteObjects body: (quiet, [(key, version id or None)]). Only S3 errors, for any bytes."""
    root = parse(body, "Delete")
    quiet = (child_text(root, "Quiet") or "").strip().lower() == "true"
    entries = root.findall("Object")
    if not entries or len(entries) > MAX_DELETE_KEYS:
        raise MalformedXML()
    objects: list[tuple[str, str | None]] = []
    for entry in entries:
        key = child_text(entry, "Key")
        if not key:
            raise MalformedXML()
        objects.append((key, child_text(entry, "VersionId")))
    return quiet, objects


@handles(Operation.DeleteObjects)
async def delete_objects(req: S3Request) -> Response:
    body = await req.small_body()
    declared = content_md5(req.headers)
    if declared is not None and hashlib.md5(body).hexdigest() != declared:
        raise BadDigest()
    quiet, objects = parse_delete(body)
    await req.store.get_bucket(req.bucket)
    results: list[tuple[str, Value]] = []
    for key, version in objects:
        try:
            if version is not None and version != "null":
                results.append(
                    (
                        "Error",
                        [
                            ("Key", key),
                            ("VersionId", version),
                            ("Code", "NoSuchVersion"),
                            ("Message", "The specified version does not exist."),
                        ],
                    )
                )
                continue
            if req.authorizer is not None and req.identity is not None:
                await req.authorizer.check(
                    req.identity,
                    Operation.DeleteObject,
                    req.bucket,
                    key=key,
                    request=req.request,
                    query=req.query,
                )
            await req.store.delete_object(req.bucket, key)
        except (S3Error, TieringError) as exc:
            error = exc if isinstance(exc, S3Error) else to_s3_error(exc)
            results.append(("Error", [("Key", key), ("Code", error.code), ("Message", error.detail)]))
            continue
        if not quiet:
            deleted: list[tuple[str, Value]] = [("Key", key)]
            if version is not None:
                deleted.append(("VersionId", version))
            results.append(("Deleted", deleted))
    return xml_response(document("DeleteResult", results))
