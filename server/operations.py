"""Every S3 operation has a name — implemented or not — and one access class.

The router turns a request into one `Operation`; handlers are registered per operation; an
operation without a handler answers NotImplemented. Auditing who may do what is reading
`ACCESS` below.
"""

from __future__ import annotations

import enum


class Access(enum.Enum):
    READ = "read"  # reads objects or bucket contents
    WRITE = "write"  # changes objects in a bucket
    OWNER = "owner"  # changes the bucket itself or its configuration
    SERVICE = "service"  # not tied to one bucket (ListBuckets, CreateBucket)


class Operation(enum.Enum):
    # Members are singletons, equal only to themselves: the identity hash serves as well as
    # Enum's own, which is Python code (`hash(self._name_)`) run for every dict lookup by
    # operation — its handler, its action, its metrics: an interpreted call each, per request.
    __hash__ = object.__hash__

    # service
    ListBuckets = "ListBuckets"
    # buckets
    CreateBucket = "CreateBucket"
    DeleteBucket = "DeleteBucket"
    HeadBucket = "HeadBucket"
    GetBucketLocation = "GetBucketLocation"
    GetBucketVersioning = "GetBucketVersioning"
    PutBucketVersioning = "PutBucketVersioning"
    GetBucketAcl = "GetBucketAcl"
    PutBucketAcl = "PutBucketAcl"
    GetBucketLifecycleConfiguration = "GetBucketLifecycleConfiguration"
    PutBucketLifecycleConfiguration = "PutBucketLifecycleConfiguration"
    DeleteBucketLifecycle = "DeleteBucketLifecycle"
    GetBucketIntelligentTieringConfiguration = "GetBucketIntelligentTieringConfiguration"
    PutBucketIntelligentTieringConfiguration = "PutBucketIntelligentTieringConfiguration"
    DeleteBucketIntelligentTieringConfiguration = "DeleteBucketIntelligentTieringConfiguration"
    ListBucketIntelligentTieringConfigurations = "ListBucketIntelligentTieringConfigurations"
    GetBucketTagging = "GetBucketTagging"
    PutBucketTagging = "PutBucketTagging"
    DeleteBucketTagging = "DeleteBucketTagging"
    GetBucketPolicy = "GetBucketPolicy"
    PutBucketPolicy = "PutBucketPolicy"
    DeleteBucketPolicy = "DeleteBucketPolicy"
    GetBucketCors = "GetBucketCors"
    PutBucketCors = "PutBucketCors"
    DeleteBucketCors = "DeleteBucketCors"
    GetBucketEncryption = "GetBucketEncryption"
    PutBucketEncryption = "PutBucketEncryption"
    DeleteBucketEncryption = "DeleteBucketEncryption"
    GetBucketOwnershipControls = "GetBucketOwnershipControls"
    GetObjectLockConfiguration = "GetObjectLockConfiguration"
    PutObjectLockConfiguration = "PutObjectLockConfiguration"
    GetPublicAccessBlock = "GetPublicAccessBlock"
    PutPublicAccessBlock = "PutPublicAccessBlock"
    DeletePublicAccessBlock = "DeletePublicAccessBlock"
    PutBucketOwnershipControls = "PutBucketOwnershipControls"
    DeleteBucketOwnershipControls = "DeleteBucketOwnershipControls"
    GetBucketPolicyStatus = "GetBucketPolicyStatus"
    OtherBucketSubresource = "OtherBucketSubresource"  # website, logging, replication, ...
    ListObjects = "ListObjects"
    ListObjectsV2 = "ListObjectsV2"
    ListObjectVersions = "ListObjectVersions"
    ListMultipartUploads = "ListMultipartUploads"
    DeleteObjects = "DeleteObjects"
    PostObject = "PostObject"  # browser-based form upload
    # objects
    PutObject = "PutObject"
    GetObject = "GetObject"
    HeadObject = "HeadObject"
    DeleteObject = "DeleteObject"
    CopyObject = "CopyObject"
    GetObjectTagging = "GetObjectTagging"
    PutObjectTagging = "PutObjectTagging"
    DeleteObjectTagging = "DeleteObjectTagging"
    GetObjectAcl = "GetObjectAcl"
    PutObjectAcl = "PutObjectAcl"
    GetObjectAttributes = "GetObjectAttributes"
    RestoreObject = "RestoreObject"
    GetObjectRetention = "GetObjectRetention"
    PutObjectRetention = "PutObjectRetention"
    GetObjectLegalHold = "GetObjectLegalHold"
    PutObjectLegalHold = "PutObjectLegalHold"
    SelectObjectContent = "SelectObjectContent"
    OtherObjectSubresource = "OtherObjectSubresource"  # retention, legal-hold, torrent
    # multipart
    CreateMultipartUpload = "CreateMultipartUpload"
    UploadPart = "UploadPart"
    UploadPartCopy = "UploadPartCopy"
    CompleteMultipartUpload = "CompleteMultipartUpload"
    AbortMultipartUpload = "AbortMultipartUpload"
    ListParts = "ListParts"


_READ = {
    Operation.HeadBucket, Operation.GetBucketLocation, Operation.GetBucketVersioning,
    Operation.ListObjects, Operation.ListObjectsV2, Operation.ListObjectVersions,
    Operation.ListMultipartUploads, Operation.GetObject, Operation.HeadObject,
    Operation.GetObjectTagging, Operation.GetObjectAcl, Operation.GetObjectAttributes,
    Operation.ListParts, Operation.SelectObjectContent, Operation.GetObjectRetention,
    Operation.GetObjectLegalHold,
}  # fmt: skip
_SERVICE = {Operation.ListBuckets, Operation.CreateBucket}
_WRITE = {
    Operation.PutObject, Operation.DeleteObject, Operation.CopyObject, Operation.DeleteObjects,
    Operation.PutObjectTagging, Operation.DeleteObjectTagging, Operation.PutObjectAcl,
    Operation.RestoreObject, Operation.CreateMultipartUpload, Operation.UploadPart,
    Operation.UploadPartCopy, Operation.CompleteMultipartUpload, Operation.AbortMultipartUpload,
    Operation.PostObject, Operation.OtherObjectSubresource, Operation.PutObjectRetention,
    Operation.PutObjectLegalHold,
}  # fmt: skip

# The one authorization table: every operation's access class.
ACCESS: dict[Operation, Access] = {
    op: Access.READ if op in _READ else Access.SERVICE if op in _SERVICE else Access.WRITE if op in _WRITE
    else Access.OWNER
    for op in Operation
}  # fmt: skip
