"""PostObject: a browser form upload (multipart/form-data to the bucket's URL).

The request carries no Authorization header: its signature is a form field over the policy
(`server/post_policy.py`). The gateway therefore skips header authentication for this one
operation and this handler does it instead, in S3's order, once the fields before the file are
read (`server/form_data.py`); only then is the caller authorized and the file streamed into the
store, its size held to the policy's content-length-range as it flows.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from urllib.parse import quote, urlencode, urlsplit

from starlette.responses import Response

from server import errors as s3
from server.access.acl import CANNED_ACLS
from server.context import S3Request
from server.credentials import ANONYMOUS
from server.encryption import response_headers, write_request
from server.form_data import FilePart, FormReader, form_boundary
from server.handlers.access_api import object_acl_for_write
from server.handlers.common import MAX_PUT_SIZE, version_headers
from server.handlers.registry import handles
from server.handlers.subresources import parse_tags
from server.http_semantics import content_md5, meta_from_headers, requested_checksum_algorithm, validate_key
from server.operations import Operation
from server.post_policy import check_form, check_size, parse_policy, size_limit, verify_signature
from server.request_headers import headers_from
from server.responses import empty_response, xml_response
from server.xml_io import document


def _form_request(req: S3Request, values: dict[str, str]) -> S3Request:
    """The request as the PutObject helpers read it: the form's `acl` field as x-amz-acl and its
    x-amz-server-side-encryption* fields as those headers (object_acl_for_write, write_request)."""
    acl = values.get("acl")
    if acl is not None and acl not in CANNED_ACLS:
        raise s3.InvalidArgument(ArgumentName="acl", ArgumentValue=acl)
    headers = {"x-amz-acl": acl} if acl is not None else {}
    for name, value in values.items():
        if name.startswith("x-amz-server-side-encryption"):
            if not value.isascii():
                raise s3.InvalidArgument(ArgumentName=name, ArgumentValue=value)
            headers[name] = value
    return dataclasses.replace(req, headers=headers_from(headers))


def _object_key(values: dict[str, str], part: FilePart) -> str:
    key = values.get("key")
    if key is None:
        raise s3.InvalidArgument(
            "Bucket POST must contain a field named 'key'.  If it is specified, please check the order of the fields.",
            ArgumentName="key",
            ArgumentValue="",
        )
    if part.filename is not None:  # without a filename parameter S3 keeps "${filename}" as is
        key = key.replace("${filename}", part.filename)
    if not key:
        raise s3.InvalidArgument(
            "User key must have a length greater than 0.", ArgumentName="key", ArgumentValue=""
        )
    validate_key(key)
    return key


def _object_url(req: S3Request, key: str) -> str:
    url = req.request.url
    host = req.header("host") or url.netloc
    path_style = url.path.strip("/") != ""  # virtual-hosted forms post to "/"
    prefix = f"/{quote(req.bucket, safe='')}" if path_style else ""
    return f"{url.scheme}://{host}{prefix}/{quote(key, safe='')}"


def _redirect(target: str | None) -> str | None:
    """success_action_redirect when it is an absolute http(s) URL (S3 ignores any other)."""
    if not target:
        return None
    parts = urlsplit(target)
    return target if parts.scheme in ("http", "https") and parts.netloc else None


@handles(Operation.PostObject)
async def post_object(req: S3Request) -> Response:
    form = FormReader(aiter(req.request.stream()), form_boundary(req.header("content-type")))
    fields, part = await form.fields()
    values: dict[str, str] = {}
    for name, value in fields:
        values.setdefault(name.lower(), value)
    if part is None:
        raise s3.InvalidArgument(
            "POST requires exactly one file upload per request.", ArgumentName="file", ArgumentValue="0"
        )
    key = _object_key(values, part)
    assert req.credentials is not None
    signer = verify_signature(values, req.credentials)
    # A signed form is bound by its policy (verify_signature required one); an anonymous form
    # that carries a policy is bound by it too.
    policy = parse_policy(values["policy"]) if "policy" in values else None
    if policy is not None:
        check_form(policy, fields, req.bucket, datetime.now(UTC))
    # An anonymous form (no signature fields) writes only where a bucket policy or ACL lets
    # everyone write, as S3 decides it.
    identity = ANONYMOUS if signer is None else req.credentials.identity(signer.access_key)
    req.identity = identity
    assert req.authorizer is not None
    await req.authorizer.check(
        identity,
        Operation.PutObject,
        req.bucket,
        key=key,
        request=req.request,
        auth_scheme=None if signer is None else "post",
    )
    form_request = _form_request(req, values)
    encryption, ckey = write_request(form_request)  # encrypted as a PUT with these headers would be
    fields_as_headers = headers_from(values)
    meta = meta_from_headers(fields_as_headers)  # Content-Type, Cache-Control, x-amz-meta-*, ... as fields
    # Refused or owned as the bucket's ownership controls say, as for a PutObject with x-amz-acl.
    meta = await object_acl_for_write(form_request, meta)
    if "tagging" in values:
        meta = dataclasses.replace(meta, tags=parse_tags(values["tagging"].encode(), 10))
    algorithm = requested_checksum_algorithm(fields_as_headers)
    declared_md5 = content_md5(fields_as_headers)

    limit = size_limit(policy) if policy is not None else None
    pending = await req.store.begin_put(
        req.bucket, meta.storage_class, checksum_algorithm=algorithm, encryption=encryption
    )
    try:
        size = 0
        async for chunk in form.file():
            size += len(chunk)
            if size > MAX_PUT_SIZE:
                raise s3.EntityTooLarge(ProposedSize=size, MaxSizeAllowed=MAX_PUT_SIZE)
            if limit is None or size <= limit:
                await pending.write(chunk)
            # Past the policy's limit the rest is only counted: S3 reports the whole size.
        if policy is not None:
            check_size(policy, size)
        await form.drain()
        await pending.end_body()
        digests = pending.digests
        if declared_md5 is not None and declared_md5 != digests.md5_hex:
            raise s3.BadDigest(ExpectedDigest=declared_md5, CalculatedDigest=digests.md5_hex)
        if algorithm and values.get(f"x-amz-checksum-{algorithm.lower()}", "").strip() not in (
            "",
            digests.checksum_b64,
        ):
            raise s3.BadDigest(f"The {algorithm} you specified did not match the calculated checksum.")
        record = await pending.commit_object(req.bucket, key, meta)
    except BaseException:
        await pending.abort()
        raise
    headers = {**response_headers(record.meta.encryption, ckey), **version_headers(record.version_id)}
    return _answer(req, values, key, record.etag, headers)


def _answer(
    req: S3Request, values: dict[str, str], key: str, etag: str, encryption: dict[str, str]
) -> Response:
    location = _object_url(req, key)
    headers = {"etag": f'"{etag}"', "location": location, **encryption}
    redirect = _redirect(values.get("success_action_redirect") or values.get("redirect"))
    if redirect is not None:
        query = urlencode([("bucket", req.bucket), ("key", key), ("etag", f'"{etag}"')])
        headers["location"] = redirect + ("&" if "?" in redirect else "?") + query
        return empty_response(303, headers)
    status = values.get("success_action_status")
    if status == "201":
        body = document(
            "PostResponse",
            [("Location", location), ("Bucket", req.bucket), ("Key", key), ("ETag", f'"{etag}"')],
            namespace=None,
        )
        return xml_response(body, 201, headers)
    return empty_response(200 if status == "200" else 204, headers)
