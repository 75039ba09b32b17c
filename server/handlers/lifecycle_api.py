"""Lifecycle and Intelligent-Tiering configuration, and RestoreObject.

The documents are parsed and validated by `lifecycle` (a pure library) and stored as its
rendering, which keeps the client's spelling (legacy Prefix or Filter, And, an empty Filter), so
GET answers what PUT sent; the lifecycle daemon enforces them.
"""

from __future__ import annotations

from starlette.responses import Response

from lifecycle.daemon import IT_CONFIG_PREFIX
from lifecycle.intelligent_tiering import (
    parse_intelligent_tiering,
    render_intelligent_tiering,
    render_intelligent_tiering_list,
)
from lifecycle.rules import RuleError, parse_lifecycle, render_lifecycle
from server import errors as s3
from server.context import S3Request
from server.handlers.common import int_param, version_param
from server.handlers.registry import handles
from server.http_semantics import is_number
from server.operations import Operation
from server.responses import empty_response, xml_response
from server.xml_io import child_text, parse

MAX_RESTORE_DAYS = 36500


def _refuse(exc: RuleError) -> s3.S3Error:
    error_class = getattr(s3, exc.s3_code, s3.InvalidArgument)
    return error_class(str(exc))


# --- lifecycle configuration -----------------------------------------------------------------------


@handles(Operation.PutBucketLifecycleConfiguration)
async def put_lifecycle(req: S3Request) -> Response:
    body = await req.small_body()
    try:
        config = parse_lifecycle(body)
    except RuleError as exc:
        raise _refuse(exc) from None
    await req.store.put_bucket_config(req.bucket, "lifecycle", render_lifecycle(config).decode())
    return empty_response(200)


@handles(Operation.GetBucketLifecycleConfiguration)
async def get_lifecycle(req: S3Request) -> Response:
    raw = await req.store.get_bucket_config(req.bucket, "lifecycle")
    if raw is None:
        raise s3.NoSuchLifecycleConfiguration(BucketName=req.bucket)
    return xml_response(raw.encode())


@handles(Operation.DeleteBucketLifecycle)
async def delete_lifecycle(req: S3Request) -> Response:
    await req.store.get_bucket(req.bucket)
    await req.store.put_bucket_config(req.bucket, "lifecycle", None)
    return empty_response(204)


# --- Intelligent-Tiering archive configurations ---------------------------------------------------------


def _config_id(req: S3Request) -> str:
    config_id = req.query.get("id", "")
    if not config_id:
        raise s3.InvalidArgument("An Id is required", ArgumentName="id")
    return config_id


@handles(Operation.PutBucketIntelligentTieringConfiguration)
async def put_intelligent_tiering(req: S3Request) -> Response:
    config_id = _config_id(req)
    try:
        config = parse_intelligent_tiering(await req.small_body())
    except RuleError as exc:
        raise _refuse(exc) from None
    if config.id != config_id:
        raise s3.InvalidArgument("The Id in the document must match the id parameter", ArgumentName="id")
    await req.store.put_bucket_config(
        req.bucket, IT_CONFIG_PREFIX + config_id, render_intelligent_tiering(config).decode()
    )
    return empty_response(204)


@handles(Operation.GetBucketIntelligentTieringConfiguration)
async def get_intelligent_tiering(req: S3Request) -> Response:
    raw = await req.store.get_bucket_config(req.bucket, IT_CONFIG_PREFIX + _config_id(req))
    if raw is None:
        raise s3.NoSuchConfiguration("The specified configuration does not exist.")
    return xml_response(raw.encode())


@handles(Operation.DeleteBucketIntelligentTieringConfiguration)
async def delete_intelligent_tiering(req: S3Request) -> Response:
    name = IT_CONFIG_PREFIX + _config_id(req)
    if await req.store.get_bucket_config(req.bucket, name) is None:
        raise s3.NoSuchConfiguration("The specified configuration does not exist.")
    await req.store.put_bucket_config(req.bucket, name, None)
    return empty_response(204)


@handles(Operation.ListBucketIntelligentTieringConfigurations)
async def list_intelligent_tiering(req: S3Request) -> Response:
    await req.store.get_bucket(req.bucket)
    documents = await req.store.bucket_configs_with_prefix(req.bucket, IT_CONFIG_PREFIX)
    configs = [parse_intelligent_tiering(value.encode()) for _, value in documents]
    return xml_response(render_intelligent_tiering_list(configs))


# --- RestoreObject -------------------------------------------------------------------------------------


@handles(Operation.RestoreObject)
async def restore_object(req: S3Request) -> Response:
    version = version_param(req)  # any version, current or not: the restore belongs to it
    body = await req.small_body()
    days = 1
    if body.strip():
        root = parse(body, "RestoreRequest")
        if root.find("SelectParameters") is not None or child_text(root, "Type") == "SELECT":
            raise s3.NotImplemented("Restore with SELECT is not supported")
        raw_days = child_text(root, "Days")
        if raw_days is not None:
            if not is_number(raw_days.strip()) or not 1 <= int(raw_days) <= MAX_RESTORE_DAYS:
                raise s3.InvalidArgument(
                    "Days must be a positive integer", ArgumentName="Days", ArgumentValue=raw_days
                )
            days = int(raw_days)
        params = root.find("GlacierJobParameters")
        tier = child_text(params, "Tier") if params is not None else None
        if tier is not None and tier not in ("Expedited", "Standard", "Bulk"):
            raise s3.MalformedXML()
    else:
        days = int_param(req, "days", 1, low=1)
    already = await req.store.request_restore(req.bucket, req.key, days, version)
    if req.lifecycle is not None and not already:
        req.lifecycle.daemon.wake()  # make the copy now rather than at the next scheduled pass
    return empty_response(200 if already else 202)
