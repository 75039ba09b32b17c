"""PutObject: stream the body into a tier, check digests, commit atomically."""

from __future__ import annotations

import dataclasses

from starlette.responses import Response

from server.context import S3Request
from server.encryption import response_headers, write_request
from server.errors import EntityTooLarge, MissingContentLength
from server.handlers.access_api import object_acl_for_write
from server.handlers.common import MAX_PUT_SIZE, receive_body, version_headers
from server.handlers.object_lock import lock_for_write
from server.handlers.registry import handles
from server.http_semantics import (
    meta_from_headers,
    requested_checksum_algorithm,
    validate_key,
    write_conditions,
)
from server.operations import Operation
from server.responses import empty_response


def declared_size(req: S3Request) -> int | None:
    size = req.content_length
    if size is None and "chunked" not in (req.header("transfer-encoding") or ""):
        raise MissingContentLength()
    if size is not None and size > MAX_PUT_SIZE:
        raise EntityTooLarge(ProposedSize=size, MaxSizeAllowed=MAX_PUT_SIZE)
    return size


@handles(Operation.PutObject)
async def put_object(req: S3Request) -> Response:
    validate_key(req.key)
    encryption, ckey = write_request(req)
    meta = await object_acl_for_write(req, meta_from_headers(req.headers))
    lock = await lock_for_write(req)
    if lock is not None:
        meta = dataclasses.replace(meta, lock=lock)
    size = declared_size(req)
    algorithm = requested_checksum_algorithm(req.headers)
    if_match, if_none_match = write_conditions(req.headers)
    # A condition that fails from the start fails before the body is stored (412, not 409).
    await req.store.check_write_condition(req.bucket, req.key, if_match, if_none_match)
    pending = await req.store.begin_put(
        req.bucket, meta.storage_class, size_hint=size, checksum_algorithm=algorithm, encryption=encryption
    )
    try:
        await receive_body(req, pending)
        record = await pending.commit_object(
            req.bucket,
            req.key,
            meta,
            if_match=if_match,
            if_none_match=if_none_match,
        )
    except BaseException as exc:  # aborted outside the handler: see setup.py
        failure: BaseException | None = exc
    else:
        failure = None
    if failure is not None:
        await pending.abort()
        raise failure
    headers = {
        "etag": f'"{record.etag}"',
        "x-tierstore-tier": record.tier,
        **response_headers(record.meta.encryption, ckey),
        **version_headers(record.version_id),
    }
    if record.checksum and record.checksum_algorithm:
        headers[f"x-amz-checksum-{record.checksum_algorithm.lower()}"] = record.checksum
        headers["x-amz-checksum-type"] = "FULL_OBJECT"
    return empty_response(200, headers)
