"""Bucket operations: list, create, delete, head, location."""

from __future__ import annotations

import base64
import re

from starlette.responses import Response

from server.context import S3Request
from server.errors import InvalidArgument, InvalidLocationConstraint
from server.handlers import access_api
from server.handlers.common import int_param, owner_of, owner_xml
from server.handlers.registry import handles
from server.http_semantics import validate_bucket_name
from server.operations import Operation
from server.responses import empty_response, xml_response
from server.xml_io import Value, child_text, document, iso_time, parse
from tiering.object_lock import LockConfiguration

_REGION_RE = re.compile(r"^[a-z0-9-]{1,32}$")


MAX_BUCKETS = 10_000


def _continuation_token(name: str) -> str:
    """ListBuckets' ContinuationToken: opaque to clients; here the last name listed, encoded."""
    return base64.urlsafe_b64encode(name.encode()).decode()


def _after(token: str) -> str:
    try:
        name = base64.urlsafe_b64decode(token.encode()).decode()
    except (ValueError, UnicodeError):
        name = ""
    if not name:
        raise InvalidArgument(
            "The continuation token provided is incorrect",
            ArgumentName="continuation-token",
            ArgumentValue=token,
        )
    return name


@handles(Operation.ListBuckets)
async def list_buckets(req: S3Request) -> Response:
    identity = req.identity
    # Users see their own buckets; administrators see every bucket.
    owner = None if identity is None or identity.is_admin else identity.owner_id
    prefix = req.query.get("prefix", "")
    token = req.query.get("continuation-token")
    paged = "max-buckets" in req.query or token is not None
    max_buckets = int_param(req, "max-buckets", MAX_BUCKETS, low=1)
    if max_buckets > MAX_BUCKETS:
        raise InvalidArgument(
            f"Argument max-buckets must be an integer between 1 and {MAX_BUCKETS}",
            ArgumentName="max-buckets",
            ArgumentValue=req.query["max-buckets"],
        )
    # One more than the page: whether another page follows, without a second query.
    buckets = await req.store.list_buckets(
        owner,
        prefix=prefix,
        after=_after(token) if token else "",
        region=req.query.get("bucket-region") or None,
        limit=max_buckets + 1 if paged else None,
    )
    more = paged and len(buckets) > max_buckets
    buckets = buckets[:max_buckets] if paged else buckets
    entries: list[tuple[str, Value]] = [
        ("Bucket", [("Name", b.name), ("CreationDate", iso_time(b.created)), ("BucketRegion", b.region)])
        for b in buckets
    ]
    children: list[tuple[str, Value]] = [("Owner", owner_xml(req)), ("Buckets", entries)]
    if more:
        children.append(("ContinuationToken", _continuation_token(buckets[-1].name)))
    if "prefix" in req.query:
        children.append(("Prefix", prefix))
    return xml_response(document("ListAllMyBucketsResult", children))


@handles(Operation.CreateBucket)
async def create_bucket(req: S3Request) -> Response:
    validate_bucket_name(req.bucket)
    region = req.config.region
    body = await req.small_body()
    if body.strip():
        constraint = child_text(parse(body, "CreateBucketConfiguration"), "LocationConstraint")
        if constraint:
            if not _REGION_RE.match(constraint):
                raise InvalidLocationConstraint(LocationConstraint=constraint)
            region = constraint
    owner_id, _ = owner_of(req)
    await access_api.bucket_acl_on_create(req)  # refuses before anything exists
    await req.store.create_bucket(req.bucket, owner_id, region)
    await access_api.store_bucket_documents(req)
    if (req.header("x-amz-bucket-object-lock-enabled") or "").strip().lower() == "true":
        # ObjectLockEnabledForBucket: versioning on and Object Lock on, both for good.
        await req.store.set_versioning(req.bucket, "Enabled")
        await req.store.set_object_lock_config(req.bucket, LockConfiguration())
    return empty_response(200, {"location": f"/{req.bucket}"})


@handles(Operation.DeleteBucket)
async def delete_bucket(req: S3Request) -> Response:
    await req.store.delete_bucket(req.bucket)
    return empty_response(204)


@handles(Operation.HeadBucket)
async def head_bucket(req: S3Request) -> Response:
    bucket = await req.store.get_bucket(req.bucket)
    return empty_response(200, {"x-amz-bucket-region": bucket.region})


@handles(Operation.GetBucketLocation)
async def get_bucket_location(req: S3Request) -> Response:
    bucket = await req.store.get_bucket(req.bucket)
    # AWS answers an empty constraint for us-east-1, and clients expect exactly that.
    region = "" if bucket.region == "us-east-1" else bucket.region
    return xml_response(
        document("LocationConstraint", []).replace(
            b"></LocationConstraint>", f">{region}</LocationConstraint>".encode()
        )
    )
