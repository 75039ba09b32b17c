"""Bucket operations: list, create, delete, head, location."""

from __future__ import annotations

import re

from starlette.responses import Response

from server.context import S3Request
from server.errors import InvalidLocationConstraint
from server.handlers import access_api
from server.handlers.common import owner_of, owner_xml
from server.handlers.registry import handles
from server.http_semantics import validate_bucket_name
from server.operations import Operation
from server.responses import empty_response, xml_response
from server.xml_io import Value, child_text, document, iso_time, parse

_REGION_RE = re.compile(r"^[a-z0-9-]{1,32}$")


@handles(Operation.ListBuckets)
async def list_buckets(req: S3Request) -> Response:
    identity = req.identity
    # Users see their own buckets; administrators see every bucket.
    owner = None if identity is None or identity.is_admin else identity.owner_id
    buckets = await req.store.list_buckets(owner)
    entries: list[tuple[str, Value]] = [
        ("Bucket", [("Name", b.name), ("CreationDate", iso_time(b.created)), ("BucketRegion", b.region)])
        for b in buckets
    ]
    return xml_response(document("ListAllMyBucketsResult", [("Owner", owner_xml(req)), ("Buckets", entries)]))


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
