"""Bucket default encryption: Put/Get/DeleteBucketEncryption (one default rule per bucket)."""

from __future__ import annotations

from starlette.responses import Response

from server import errors as s3
from server.context import S3Request
from server.encryption import bucket_encryption_document, parse_bucket_encryption
from server.handlers.registry import handles
from server.operations import Operation
from server.responses import empty_response, xml_response
from tiering.encryption import EncryptionRequest
from tiering.encryption.descriptor import BUCKET_DEFAULT


@handles(Operation.PutBucketEncryption)
async def put_bucket_encryption(req: S3Request) -> Response:
    value = parse_bucket_encryption(await req.small_body())
    await req.store.get_bucket(req.bucket)
    default = EncryptionRequest.bucket_default(value)
    if default is not None and default.kms_key_id:
        req.store.keys.kms_key(default.kms_key_id)  # an unknown key: KMS.NotFoundException now, not at PUT
    await req.store.put_bucket_config(req.bucket, BUCKET_DEFAULT, value)
    return empty_response(200)


@handles(Operation.GetBucketEncryption)
async def get_bucket_encryption(req: S3Request) -> Response:
    value = await req.store.get_bucket_config(req.bucket, BUCKET_DEFAULT)
    if value is None:
        raise s3.ServerSideEncryptionConfigurationNotFoundError(BucketName=req.bucket)
    return xml_response(bucket_encryption_document(value))


@handles(Operation.DeleteBucketEncryption)
async def delete_bucket_encryption(req: S3Request) -> Response:
    await req.store.get_bucket(req.bucket)
    await req.store.put_bucket_config(req.bucket, BUCKET_DEFAULT, None)
    return empty_response(204)
