"""Bucket and object sub-resources: tagging, versioning, and the
configuration APIs we answer honestly ("not configured") without implementing them."""

from __future__ import annotations

import json

from starlette.responses import Response

from server import errors as s3
from server.context import S3Request
from server.handlers.common import version_headers, version_param
from server.handlers.registry import handles
from server.http_semantics import validate_tags
from server.operations import Operation
from server.responses import empty_response, xml_response
from server.xml_io import Value, child_text, document, parse

# --- tagging -------------------------------------------------------------------------------------


def _tags_document(tags: dict[str, str]) -> bytes:
    tag_set: list[tuple[str, Value]] = [("Tag", [("Key", k), ("Value", v)]) for k, v in tags.items()]
    return document("Tagging", [("TagSet", tag_set)])


async def _parse_tags(req: S3Request, limit: int) -> dict[str, str]:
    return parse_tags(await req.small_body(), limit)


def parse_tags(body: bytes, limit: int) -> dict[str, str]:
    """A Tagging body (at most `limit` tags) as a dict. Only S3 errors, for any bytes."""
    root = parse(body, "Tagging")
    tag_set = root.find("TagSet")
    if tag_set is None:
        raise s3.MalformedXML()
    tags: dict[str, str] = {}
    for tag in tag_set.findall("Tag"):
        key, value = child_text(tag, "Key"), child_text(tag, "Value", "")
        if key is None or value is None:
            raise s3.MalformedXML()
        if key in tags:
            raise s3.InvalidTag("Cannot provide multiple Tags with the same key")
        tags[key] = value
    validate_tags(tags, limit)
    return tags


@handles(Operation.GetObjectTagging)
async def get_object_tagging(req: S3Request) -> Response:
    record = await req.store.head_object(req.bucket, req.key, version_param(req))
    headers = version_headers(record.version_id, "versionId" in req.query)
    return xml_response(_tags_document(record.meta.tags), headers=headers or None)


async def _set_tags(req: S3Request, tags: dict[str, str]) -> dict[str, str]:
    """Tags of the current version, or of the one `versionId` names; the answer's version header."""
    version = version_param(req)
    if version is None:
        await req.store.put_tags(req.bucket, req.key, tags)
        version = (await req.store.head_object(req.bucket, req.key)).version_id
    else:
        await req.store.set_version_fields(req.bucket, req.key, version, tags=tags)
    return version_headers(version, "versionId" in req.query)


@handles(Operation.PutObjectTagging)
async def put_object_tagging(req: S3Request) -> Response:
    tags = await _parse_tags(req, 10)
    return empty_response(200, await _set_tags(req, tags) or None)


@handles(Operation.DeleteObjectTagging)
async def delete_object_tagging(req: S3Request) -> Response:
    return empty_response(204, await _set_tags(req, {}) or None)


@handles(Operation.GetBucketTagging)
async def get_bucket_tagging(req: S3Request) -> Response:
    raw = await req.store.get_bucket_config(req.bucket, "tagging")
    if raw is None:
        raise s3.NoSuchTagSet(BucketName=req.bucket)
    return xml_response(_tags_document(json.loads(raw)))


@handles(Operation.PutBucketTagging)
async def put_bucket_tagging(req: S3Request) -> Response:
    tags = await _parse_tags(req, 50)
    await req.store.put_bucket_config(req.bucket, "tagging", json.dumps(tags))
    return empty_response(204)


@handles(Operation.DeleteBucketTagging)
async def delete_bucket_tagging(req: S3Request) -> Response:
    await req.store.get_bucket(req.bucket)
    await req.store.put_bucket_config(req.bucket, "tagging", None)
    return empty_response(204)


# --- versioning: Enabled or Suspended once set (tiering.catalog.versions) -------------------------


@handles(Operation.GetBucketVersioning)
async def get_bucket_versioning(req: S3Request) -> Response:
    state = await req.store.versioning(req.bucket)
    # A bucket never versioned answers an empty configuration, as S3 does.
    children: list[tuple[str, Value]] = [("Status", state)] if state else []
    return xml_response(document("VersioningConfiguration", children))


@handles(Operation.PutBucketVersioning)
async def put_bucket_versioning(req: S3Request) -> Response:
    root = parse(await req.small_body(), "VersioningConfiguration")
    status = child_text(root, "Status")
    mfa_delete = child_text(root, "MfaDelete")
    await req.store.get_bucket(req.bucket)
    if status not in ("Enabled", "Suspended") or mfa_delete not in (None, "Enabled", "Disabled"):
        raise s3.MalformedXML()
    if mfa_delete == "Enabled" or req.header("x-amz-mfa") is not None:
        # MFA delete needs the root account's MFA device: there is none here.
        raise s3.NotImplemented("MFA delete is not supported")
    await req.store.set_versioning(req.bucket, status)
    return empty_response(200)
