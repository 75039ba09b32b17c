"""Bucket policies, ACLs, object ownership controls and Block Public Access: the APIs that
configure authorization (`server.access` decides with what they store).

Documents live in the bucket configuration under "authz/..." (deleted with the bucket); an
object's ACL lives in its metadata. Every change is followed by `authorizer.forget(bucket)`, so
this process's next decision sees it at once (other processes within a second).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json

from starlette.responses import Response

from server import errors as s3
from server.access import acl as acls
from server.access.decision import BUCKET_OWNER_ENFORCED, NONE_BLOCKED, BucketAccess, PublicAccessBlock
from server.access.policy import PolicyError, parse_policy
from server.authorization import ACL, OWNERSHIP, POLICY, PUBLIC_ACCESS_BLOCK, Authorizer
from server.context import S3Request
from server.handlers.common import version_headers, version_param
from server.handlers.registry import handles
from server.operations import Operation
from server.responses import empty_response, xml_response
from server.xml_io import child_text, document, parse
from tiering.records import ObjectMeta

OWNERSHIP_VALUES = ("BucketOwnerEnforced", "BucketOwnerPreferred", "ObjectWriter")
ANONYMOUS_OWNER = "65a011a29cdf8ec533ec3d1ccaae921c"  # the canonical id S3 gives anonymous writers
S3_NS = "http://s3.amazonaws.com/doc/2006-03-01/"


def _authorizer(req: S3Request) -> Authorizer:
    assert req.authorizer is not None
    return req.authorizer


async def _access(req: S3Request) -> BucketAccess:
    access = await _authorizer(req).bucket_access(req.bucket)
    if access is None:
        raise s3.NoSuchBucket(BucketName=req.bucket)
    return access


async def _store(req: S3Request, name: str, value: str | None) -> None:
    await req.store.put_bucket_config(req.bucket, name, value)
    _authorizer(req).forget(req.bucket)


def _block(req: S3Request, access: BucketAccess | None) -> PublicAccessBlock:
    server = _authorizer(req).server_block
    own = access.public_access_block if access is not None else None
    return server | (own or NONE_BLOCKED)


def _caller_id(req: S3Request) -> str:
    identity = req.identity
    if identity is None or identity.anonymous:
        return ANONYMOUS_OWNER
    return identity.owner_id


def _caller_name(req: S3Request) -> str:
    identity = req.identity
    return "" if identity is None or identity.anonymous else identity.access_key


# --- bucket policy ---------------------------------------------------------------------------------


def _key_exists(req: S3Request, key: str) -> bool:
    return key == req.config.access_key or req.store.catalog.get_user(key) is not None


@handles(Operation.PutBucketPolicy)
async def put_bucket_policy(req: S3Request) -> Response:
    body = await req.small_body(64 * 1024)
    access = await _access(req)
    try:
        policy = await asyncio.to_thread(
            parse_policy, body, bucket=req.bucket, check_key=lambda key: _key_exists(req, key)
        )
    except PolicyError as exc:
        raise s3.MalformedPolicy(str(exc)) from None
    if policy.is_public and _block(req, access).block_public_policy:
        raise s3.AccessDenied()
    await _store(req, POLICY, policy.text)
    return empty_response(204)


@handles(Operation.GetBucketPolicy)
async def get_bucket_policy(req: S3Request) -> Response:
    access = await _access(req)
    raw = await req.store.get_bucket_config(req.bucket, POLICY)
    if raw is None or access is None:
        raise s3.NoSuchBucketPolicy(BucketName=req.bucket)
    return Response(raw.encode(), media_type="application/json")


@handles(Operation.DeleteBucketPolicy)
async def delete_bucket_policy(req: S3Request) -> Response:
    await _access(req)
    await _store(req, POLICY, None)
    return empty_response(204)


@handles(Operation.GetBucketPolicyStatus)
async def get_bucket_policy_status(req: S3Request) -> Response:
    access = await _access(req)
    if access.policy is None:
        raise s3.NoSuchBucketPolicy(BucketName=req.bucket)
    public = "true" if access.policy.is_public else "false"
    return xml_response(document("PolicyStatus", [("IsPublic", public)]))


# --- object ownership controls --------------------------------------------------------------------


def _ownership_document(value: str) -> bytes:
    return document("OwnershipControls", [("Rule", [("ObjectOwnership", value)])])


@handles(Operation.PutBucketOwnershipControls)
async def put_ownership_controls(req: S3Request) -> Response:
    root = parse(await req.small_body(), "OwnershipControls")
    rules = root.findall("Rule")
    if len(rules) != 1:
        raise s3.MalformedXML()
    value = (child_text(rules[0], "ObjectOwnership") or "").strip()
    if value not in OWNERSHIP_VALUES:
        raise s3.MalformedXML()
    access = await _access(req)
    if (
        value == BUCKET_OWNER_ENFORCED
        and access.acl is not None
        and not acls.is_owner_full_control(access.acl, access.owner)
    ):
        raise s3.InvalidBucketAclWithObjectOwnership()
    await _store(req, OWNERSHIP, value)
    return empty_response(200)


@handles(Operation.GetBucketOwnershipControls)
async def get_ownership_controls(req: S3Request) -> Response:
    access = await _access(req)
    if access.ownership is None:
        raise s3.OwnershipControlsNotFoundError(BucketName=req.bucket)
    return xml_response(_ownership_document(access.ownership))


@handles(Operation.DeleteBucketOwnershipControls)
async def delete_ownership_controls(req: S3Request) -> Response:
    await _access(req)
    await _store(req, OWNERSHIP, None)
    return empty_response(204)


# --- Block Public Access ---------------------------------------------------------------------------

_BPA_FIELDS = ("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets")


@handles(Operation.PutPublicAccessBlock)
async def put_public_access_block(req: S3Request) -> Response:
    root = parse(await req.small_body(), "PublicAccessBlockConfiguration")
    values: dict[str, bool] = {}
    for name in _BPA_FIELDS:
        text = (child_text(root, name) or "false").strip().lower()
        if text not in ("true", "false"):
            raise s3.MalformedXML()
        values[name] = text == "true"
    await _access(req)
    await _store(req, PUBLIC_ACCESS_BLOCK, json.dumps(values))
    return empty_response(200)


@handles(Operation.GetPublicAccessBlock)
async def get_public_access_block(req: S3Request) -> Response:
    await _access(req)
    raw = await req.store.get_bucket_config(req.bucket, PUBLIC_ACCESS_BLOCK)
    if raw is None:
        raise s3.NoSuchPublicAccessBlockConfiguration(BucketName=req.bucket)
    values = json.loads(raw)
    return xml_response(
        document(
            "PublicAccessBlockConfiguration",
            [(name, "true" if values[name] else "false") for name in _BPA_FIELDS],
        )
    )


@handles(Operation.DeletePublicAccessBlock)
async def delete_public_access_block(req: S3Request) -> Response:
    await _access(req)
    await _store(req, PUBLIC_ACCESS_BLOCK, None)
    return empty_response(204)


# --- ACLs -----------------------------------------------------------------------------------------------


def _check_acl_allowed(
    req: S3Request, access: BucketAccess, acl: acls.Acl, canned: str | None, bucket_owner: str
) -> None:
    """Ownership controls and BlockPublicAcls: may this ACL be set at all?"""
    if not access.acls_enabled:
        if canned in ("private", "bucket-owner-full-control"):
            return
        if canned is None and acls.is_owner_full_control(acl, bucket_owner):
            return
        raise s3.AccessControlListNotSupported()
    if acl.is_public and _block(req, access).block_public_acls:
        raise s3.AccessDenied()


async def object_acl_for_write(req: S3Request, meta: ObjectMeta) -> ObjectMeta:
    """A new object's metadata with the ACL its write asks for (PutObject, CopyObject,
    CreateMultipartUpload): refused as S3 refuses it, owned as the bucket's ownership setting says."""
    access = await _authorizer(req).bucket_access(req.bucket)
    if access is None:
        return meta  # the store answers NoSuchBucket
    writer = _caller_id(req)
    requested, canned = acls.acl_from_request(req.headers, writer, access.owner, _caller_name(req))
    if requested is not None:
        _check_acl_allowed(req, access, requested, canned, access.owner)
    if not access.acls_enabled:
        # The bucket owner owns it; ACLs play no part.
        return meta if meta.acl is None else dataclasses.replace(meta, acl=None)
    owner = writer
    if access.ownership == "BucketOwnerPreferred" and canned == "bucket-owner-full-control":
        owner = access.owner
    if requested is None:
        acl = acls.private(owner, _caller_name(req) if owner == writer else "")
    elif owner != writer:
        acl = acls.canned(canned or "private", owner, access.owner)
    else:
        acl = requested
    return dataclasses.replace(meta, acl=acl.to_json())


async def bucket_acl_on_create(req: S3Request) -> None:
    """CreateBucket: its ownership setting (x-amz-object-ownership, BucketOwnerEnforced by
    default as in S3 since 2023) and its ACL (x-amz-acl / x-amz-grant-*)."""
    ownership = req.header("x-amz-object-ownership") or BUCKET_OWNER_ENFORCED
    if ownership not in OWNERSHIP_VALUES:
        raise s3.InvalidArgument(
            "Invalid x-amz-object-ownership header",
            ArgumentName="x-amz-object-ownership",
            ArgumentValue=ownership,
        )
    owner = _caller_id(req)
    requested, canned = acls.acl_from_request(req.headers, owner, owner, _caller_name(req))
    if (
        requested is not None
        and ownership == BUCKET_OWNER_ENFORCED
        and not (
            canned in ("private", "bucket-owner-full-control") or acls.is_owner_full_control(requested, owner)
        )
    ):
        raise s3.InvalidBucketAclWithObjectOwnership()
    if requested is not None and requested.is_public and _authorizer(req).server_block.block_public_acls:
        raise s3.AccessDenied()
    req.request.state.new_bucket_documents = {
        OWNERSHIP: ownership,
        ACL: requested.to_json() if requested is not None else None,
    }


async def store_bucket_documents(req: S3Request) -> None:
    """After CreateBucket succeeded: keep what `bucket_acl_on_create` chose."""
    documents = getattr(req.request.state, "new_bucket_documents", {})
    for name, value in documents.items():
        if value is not None:
            await req.store.put_bucket_config(req.bucket, name, value)
    _authorizer(req).forget(req.bucket)


async def _requested_acl(req: S3Request, owner: str, bucket_owner: str) -> tuple[acls.Acl, str | None]:
    """The ACL a PutBucketAcl / PutObjectAcl sets: its body, or its headers (not both)."""
    body = await req.small_body()
    headers_acl, canned = acls.acl_from_request(req.headers, owner, bucket_owner, _caller_name(req))
    if body.strip():
        if headers_acl is not None:
            raise s3.UnexpectedContent()
        try:
            root = parse(body)
        except s3.MalformedXML:
            raise s3.MalformedACLError() from None
        parsed = acls.parse_acl_xml(root)
        return acls.Acl(owner, parsed.grants, parsed.owner_name), None
    if headers_acl is None:
        return acls.private(owner, _caller_name(req)), "private"
    return headers_acl, canned


@handles(Operation.PutBucketAcl)
async def put_bucket_acl(req: S3Request) -> Response:
    access = await _access(req)
    acl, canned = await _requested_acl(req, access.owner, access.owner)
    _check_acl_allowed(req, access, acl, canned, access.owner)
    if access.acls_enabled:
        await _store(req, ACL, acl.to_json())
    return empty_response(200)


@handles(Operation.GetBucketAcl)
async def get_bucket_acl(req: S3Request) -> Response:
    access = await _access(req)
    name = _caller_name(req) if _caller_id(req) == access.owner else ""
    acl = access.acl if access.acl is not None and access.acls_enabled else acls.private(access.owner, name)
    if not acl.owner_name and acl.owner == _caller_id(req):
        acl = dataclasses.replace(acl, owner_name=name)
    return xml_response(acl.to_xml())


@handles(Operation.PutObjectAcl)
async def put_object_acl(req: S3Request) -> Response:
    version = version_param(req)
    access = await _access(req)
    record = await req.store.head_object(req.bucket, req.key, version)
    current = acls.Acl.from_json(record.meta.acl) if record.meta.acl else acls.private(access.owner)
    acl, canned = await _requested_acl(req, current.owner, access.owner)
    _check_acl_allowed(req, access, acl, canned, access.owner)
    if access.acls_enabled:
        if version is None:
            await req.store.put_object_acl(req.bucket, req.key, acl.to_json())
        else:
            await req.store.set_version_fields(req.bucket, req.key, version, acl=acl.to_json())
    return empty_response(200, version_headers(record.version_id, version is not None) or None)


@handles(Operation.GetObjectAcl)
async def get_object_acl(req: S3Request) -> Response:
    access = await _access(req)
    record = await req.store.head_object(req.bucket, req.key, version_param(req))
    owner_name = _caller_name(req) if _caller_id(req) == access.owner else ""
    if record.meta.acl and access.acls_enabled:
        acl = acls.Acl.from_json(record.meta.acl)
    else:
        acl = acls.private(access.owner, owner_name)
    if not acl.owner_name and acl.owner == _caller_id(req):
        acl = dataclasses.replace(acl, owner_name=_caller_name(req))
    return xml_response(acl.to_xml())
