"""Put/Get/DeleteBucketCors: the bucket's CORS rules (server/cors.py), kept in the catalog as
the bucket configuration document "cors", rendered as GET answers it."""

from __future__ import annotations

from starlette.responses import Response

from server import errors as s3
from server.context import S3Request
from server.cors import CONFIG_NAME, MissingRequestBodyError, parse_cors, render_cors
from server.handlers.registry import handles
from server.operations import Operation
from server.responses import empty_response, xml_response


def _forget(req: S3Request) -> None:
    if req.cors is not None:
        req.cors.forget(req.bucket)  # this process answers with the new rules at once


@handles(Operation.PutBucketCors)
async def put_bucket_cors(req: S3Request) -> Response:
    body = await req.small_body()
    if not body:
        raise MissingRequestBodyError()
    rules = parse_cors(body)
    await req.store.put_bucket_config(req.bucket, CONFIG_NAME, render_cors(rules).decode())
    _forget(req)
    return empty_response(200)


@handles(Operation.GetBucketCors)
async def get_bucket_cors(req: S3Request) -> Response:
    raw = await req.store.get_bucket_config(req.bucket, CONFIG_NAME)
    if raw is None:
        raise s3.NoSuchCORSConfiguration(BucketName=req.bucket)
    return xml_response(raw.encode())


@handles(Operation.DeleteBucketCors)
async def delete_bucket_cors(req: S3Request) -> Response:
    await req.store.get_bucket(req.bucket)
    await req.store.put_bucket_config(req.bucket, CONFIG_NAME, None)
    _forget(req)
    return empty_response(204)
