"""Turn an HTTP request into one value naming the S3 operation and its target.

Path-style (`/bucket/key`) and virtual-hosted-style (`bucket.<domain>/key`) both resolve here;
the sub-resource query parameters (`?uploads`, `?tagging`, ...) pick the operation.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import unquote_plus, unquote_to_bytes

from server.errors import InvalidArgument, MethodNotAllowed
from server.operations import Operation as Op


@dataclass(frozen=True)
class Route:
    operation: Op
    bucket: str | None
    key: str | None
    virtual_host_bucket: str | None  # set when the bucket came from the Host header

    def __init__(
        self, operation: Op, bucket: str | None, key: str | None, virtual_host_bucket: str | None
    ) -> None:
        # Written out, not generated: one per request (tiering/records.py says why).
        object.__setattr__(self, "operation", operation)
        object.__setattr__(self, "bucket", bucket)
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "virtual_host_bucket", virtual_host_bucket)


def parse_query(query_string: str) -> dict[str, str]:
    """Decode a raw query string; the first value wins. Form rules: "+" is a space, as in SigV4."""
    params: dict[str, str] = {}
    if not query_string:
        return params
    for piece in query_string.split("&"):
        if not piece:
            continue
        name, _, value = piece.partition("=")
        params.setdefault(unquote_plus(name), unquote_plus(value))
    return params


def decode_path(raw_path: str) -> str:
    if "%" not in raw_path and raw_path.isascii():
        return raw_path  # nothing to decode (most keys): the same text, without unquote's calls
    try:
        return unquote_to_bytes(raw_path).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArgument("Object keys and bucket names must be valid UTF-8") from None


def bucket_from_host(host: str, domains: list[str]) -> str | None:
    hostname = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    hostname = hostname.lower()
    for domain in domains:
        suffix = "." + domain.lower()
        if hostname.endswith(suffix) and len(hostname) > len(suffix):
            return hostname[: -len(suffix)]
    return None


_BUCKET_GET = [
    ("location", Op.GetBucketLocation),
    ("versioning", Op.GetBucketVersioning),
    ("acl", Op.GetBucketAcl),
    ("lifecycle", Op.GetBucketLifecycleConfiguration),
    ("intelligent-tiering", None),  # Get vs List depends on ?id
    ("tagging", Op.GetBucketTagging),
    ("policy", Op.GetBucketPolicy),
    ("cors", Op.GetBucketCors),
    ("encryption", Op.GetBucketEncryption),
    ("ownershipControls", Op.GetBucketOwnershipControls),
    ("object-lock", Op.GetObjectLockConfiguration),
    ("publicAccessBlock", Op.GetPublicAccessBlock),
    ("policyStatus", Op.GetBucketPolicyStatus),
    ("uploads", Op.ListMultipartUploads),
    ("versions", Op.ListObjectVersions),
]
_BUCKET_PUT = [
    ("versioning", Op.PutBucketVersioning),
    ("object-lock", Op.PutObjectLockConfiguration),
    ("acl", Op.PutBucketAcl),
    ("lifecycle", Op.PutBucketLifecycleConfiguration),
    ("intelligent-tiering", Op.PutBucketIntelligentTieringConfiguration),
    ("tagging", Op.PutBucketTagging),
    ("policy", Op.PutBucketPolicy),
    ("cors", Op.PutBucketCors),
    ("encryption", Op.PutBucketEncryption),
    ("ownershipControls", Op.PutBucketOwnershipControls),
    ("publicAccessBlock", Op.PutPublicAccessBlock),
]
_BUCKET_DELETE = [
    ("lifecycle", Op.DeleteBucketLifecycle),
    ("intelligent-tiering", Op.DeleteBucketIntelligentTieringConfiguration),
    ("tagging", Op.DeleteBucketTagging),
    ("policy", Op.DeleteBucketPolicy),
    ("cors", Op.DeleteBucketCors),
    ("encryption", Op.DeleteBucketEncryption),
    ("ownershipControls", Op.DeleteBucketOwnershipControls),
    ("publicAccessBlock", Op.DeletePublicAccessBlock),
]
# Sub-resources we know by name but do not implement: a clean NotImplemented, not a listing.
_OTHER_BUCKET = {
    "website", "logging", "notification", "replication", "accelerate", "requestPayment",
    "analytics", "metrics", "inventory", "policyStatus", "ownershipControls", "object-lock",
    "publicAccessBlock", "encryption", "cors", "policy",
}  # fmt: skip
_OTHER_OBJECT = {"retention", "legal-hold", "torrent"}


def _bucket_operation(method: str, query: dict[str, str]) -> Op:
    if method == "HEAD":
        return Op.HeadBucket
    if method == "GET":
        for name, op in _BUCKET_GET:
            if name in query:
                if name == "intelligent-tiering":
                    return (
                        Op.GetBucketIntelligentTieringConfiguration
                        if "id" in query
                        else Op.ListBucketIntelligentTieringConfigurations
                    )
                assert op is not None
                return op
        if query.get("list-type") == "2":
            return Op.ListObjectsV2
        if _OTHER_BUCKET & query.keys():
            return Op.OtherBucketSubresource
        return Op.ListObjects
    if method == "PUT":
        for name, op in _BUCKET_PUT:
            if name in query:
                return op
        if _OTHER_BUCKET & query.keys():
            return Op.OtherBucketSubresource
        return Op.CreateBucket
    if method == "DELETE":
        for name, op in _BUCKET_DELETE:
            if name in query:
                return op
        if _OTHER_BUCKET & query.keys():
            return Op.OtherBucketSubresource
        return Op.DeleteBucket
    if method == "POST":
        if "delete" in query:
            return Op.DeleteObjects
        return Op.PostObject
    raise MethodNotAllowed()


def _object_operation(method: str, query: dict[str, str], has_copy_source: bool) -> Op:
    if method == "GET":
        if "uploadId" in query:
            return Op.ListParts
        if "tagging" in query:
            return Op.GetObjectTagging
        if "acl" in query:
            return Op.GetObjectAcl
        if "attributes" in query:
            return Op.GetObjectAttributes
        if "retention" in query:
            return Op.GetObjectRetention
        if "legal-hold" in query:
            return Op.GetObjectLegalHold
        if _OTHER_OBJECT & query.keys():
            return Op.OtherObjectSubresource
        return Op.GetObject
    if method == "HEAD":
        return Op.HeadObject
    if method == "PUT":
        if "uploadId" in query or "partNumber" in query:
            return Op.UploadPartCopy if has_copy_source else Op.UploadPart
        if "tagging" in query:
            return Op.PutObjectTagging
        if "acl" in query:
            return Op.PutObjectAcl
        if "retention" in query:
            return Op.PutObjectRetention
        if "legal-hold" in query:
            return Op.PutObjectLegalHold
        if _OTHER_OBJECT & query.keys():
            return Op.OtherObjectSubresource
        return Op.CopyObject if has_copy_source else Op.PutObject
    if method == "DELETE":
        if "uploadId" in query:
            return Op.AbortMultipartUpload
        if "tagging" in query:
            return Op.DeleteObjectTagging
        return Op.DeleteObject
    if method == "POST":
        if "uploads" in query:
            return Op.CreateMultipartUpload
        if "uploadId" in query:
            return Op.CompleteMultipartUpload
        if "restore" in query:
            return Op.RestoreObject
        if "select" in query:
            return Op.SelectObjectContent
        raise MethodNotAllowed()
    raise MethodNotAllowed()


def route(
    method: str, path: str, query: dict[str, str], host: str, has_copy_source: bool, domains: list[str]
) -> Route:
    """`path` is the decoded request path (it may hold '//' inside a key: keep it)."""
    vhost_bucket = bucket_from_host(host, domains) if host else None
    if vhost_bucket is not None:
        bucket: str | None = vhost_bucket
        key = path[1:] if path.startswith("/") else path
    else:
        rest = path[1:] if path.startswith("/") else path
        bucket, sep, key = rest.partition("/")
        if not bucket:
            if method == "GET":
                return Route(Op.ListBuckets, None, None, None)
            raise MethodNotAllowed()
        if not sep:
            key = ""
    if not key:
        return Route(_bucket_operation(method, query), bucket, None, vhost_bucket)
    return Route(_object_operation(method, query, has_copy_source), bucket, key, vhost_bucket)
