"""Which IAM action each S3 operation is, and the resource (ARN) it acts on.

A policy names actions (`s3:GetObject`) and resources (`arn:aws:s3:::bucket/key`); a request
names an `Operation`. This table is the one translation between them, as AWS documents it per
API ("Permissions" in each operation's reference). An operation whose action is None (the
sub-resources we do not implement) is left to the bucket owner and administrators.
"""

from __future__ import annotations

from server.operations import Operation as Op

ARN_PREFIX = "arn:aws:s3:::"

# Operation → the action a policy must allow. HEAD needs what GET needs; multipart parts are
# writes of the object; a copy also needs s3:GetObject on its source (checked by its handler).
ACTIONS: dict[Op, str | None] = {
    Op.ListBuckets: "s3:ListAllMyBuckets",
    Op.CreateBucket: "s3:CreateBucket",
    Op.DeleteBucket: "s3:DeleteBucket",
    Op.HeadBucket: "s3:ListBucket",
    Op.GetBucketLocation: "s3:GetBucketLocation",
    Op.GetBucketVersioning: "s3:GetBucketVersioning",
    Op.PutBucketVersioning: "s3:PutBucketVersioning",
    Op.GetBucketAcl: "s3:GetBucketAcl",
    Op.PutBucketAcl: "s3:PutBucketAcl",
    Op.GetBucketLifecycleConfiguration: "s3:GetLifecycleConfiguration",
    Op.PutBucketLifecycleConfiguration: "s3:PutLifecycleConfiguration",
    Op.DeleteBucketLifecycle: "s3:PutLifecycleConfiguration",
    Op.GetBucketIntelligentTieringConfiguration: "s3:GetIntelligentTieringConfiguration",
    Op.PutBucketIntelligentTieringConfiguration: "s3:PutIntelligentTieringConfiguration",
    Op.DeleteBucketIntelligentTieringConfiguration: "s3:PutIntelligentTieringConfiguration",
    Op.ListBucketIntelligentTieringConfigurations: "s3:GetIntelligentTieringConfiguration",
    Op.GetBucketTagging: "s3:GetBucketTagging",
    Op.PutBucketTagging: "s3:PutBucketTagging",
    Op.DeleteBucketTagging: "s3:PutBucketTagging",
    Op.GetBucketPolicy: "s3:GetBucketPolicy",
    Op.PutBucketPolicy: "s3:PutBucketPolicy",
    Op.DeleteBucketPolicy: "s3:DeleteBucketPolicy",
    Op.GetBucketPolicyStatus: "s3:GetBucketPolicyStatus",
    Op.GetBucketCors: "s3:GetBucketCORS",
    Op.PutBucketCors: "s3:PutBucketCORS",
    Op.DeleteBucketCors: "s3:PutBucketCORS",
    Op.GetBucketEncryption: "s3:GetEncryptionConfiguration",
    Op.PutBucketEncryption: "s3:PutEncryptionConfiguration",
    Op.DeleteBucketEncryption: "s3:PutEncryptionConfiguration",
    Op.GetBucketOwnershipControls: "s3:GetBucketOwnershipControls",
    Op.PutBucketOwnershipControls: "s3:PutBucketOwnershipControls",
    Op.DeleteBucketOwnershipControls: "s3:PutBucketOwnershipControls",
    Op.GetObjectLockConfiguration: "s3:GetBucketObjectLockConfiguration",
    Op.PutObjectLockConfiguration: "s3:PutBucketObjectLockConfiguration",
    Op.GetObjectRetention: "s3:GetObjectRetention",
    Op.PutObjectRetention: "s3:PutObjectRetention",
    Op.GetObjectLegalHold: "s3:GetObjectLegalHold",
    Op.PutObjectLegalHold: "s3:PutObjectLegalHold",
    Op.GetPublicAccessBlock: "s3:GetBucketPublicAccessBlock",
    Op.PutPublicAccessBlock: "s3:PutBucketPublicAccessBlock",
    Op.DeletePublicAccessBlock: "s3:PutBucketPublicAccessBlock",
    Op.OtherBucketSubresource: None,
    Op.ListObjects: "s3:ListBucket",
    Op.ListObjectsV2: "s3:ListBucket",
    Op.ListObjectVersions: "s3:ListBucketVersions",
    Op.ListMultipartUploads: "s3:ListBucketMultipartUploads",
    Op.DeleteObjects: "s3:DeleteObject",  # decided per key by the handler
    Op.PostObject: "s3:PutObject",
    Op.PutObject: "s3:PutObject",
    Op.GetObject: "s3:GetObject",
    Op.HeadObject: "s3:GetObject",
    Op.DeleteObject: "s3:DeleteObject",
    Op.CopyObject: "s3:PutObject",
    Op.GetObjectTagging: "s3:GetObjectTagging",
    Op.PutObjectTagging: "s3:PutObjectTagging",
    Op.DeleteObjectTagging: "s3:DeleteObjectTagging",
    Op.GetObjectAcl: "s3:GetObjectAcl",
    Op.PutObjectAcl: "s3:PutObjectAcl",
    Op.GetObjectAttributes: "s3:GetObjectAttributes",
    Op.RestoreObject: "s3:RestoreObject",
    Op.SelectObjectContent: "s3:GetObject",
    Op.OtherObjectSubresource: None,
    Op.CreateMultipartUpload: "s3:PutObject",
    Op.UploadPart: "s3:PutObject",
    Op.UploadPartCopy: "s3:PutObject",
    Op.CompleteMultipartUpload: "s3:PutObject",
    Op.AbortMultipartUpload: "s3:AbortMultipartUpload",
    Op.ListParts: "s3:ListMultipartUploadParts",
}
assert set(ACTIONS) == set(Op), "every operation has an action (or None)"

# Actions that act on an object (resource arn:aws:s3:::bucket/key); all others act on a bucket
# (arn:aws:s3:::bucket) or on the service ("*").
OBJECT_ACTIONS = frozenset({
    "s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:GetObjectTagging", "s3:PutObjectTagging",
    "s3:DeleteObjectTagging", "s3:GetObjectAcl", "s3:PutObjectAcl", "s3:GetObjectAttributes",
    "s3:RestoreObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts",
    "s3:GetObjectVersion", "s3:DeleteObjectVersion", "s3:GetObjectVersionTagging",
    "s3:PutObjectVersionTagging", "s3:DeleteObjectVersionTagging", "s3:GetObjectVersionAcl",
    "s3:PutObjectVersionAcl", "s3:GetObjectVersionAttributes", "s3:GetObjectRetention",
    "s3:PutObjectRetention", "s3:GetObjectLegalHold", "s3:PutObjectLegalHold", "s3:BypassGovernanceRetention",
    "s3:GetObjectTorrent", "s3:ReplicateObject", "s3:ReplicateDelete", "s3:ReplicateTags",
})  # fmt: skip
SERVICE_ACTIONS = frozenset({"s3:ListAllMyBuckets", "s3:CreateBucket"})

# Every S3 action a policy may name (a policy naming another is refused: "Policy has invalid action").
KNOWN_ACTIONS = frozenset(a for a in ACTIONS.values() if a) | OBJECT_ACTIONS | frozenset({
    "s3:GetBucketWebsite", "s3:PutBucketWebsite", "s3:DeleteBucketWebsite", "s3:GetBucketLogging",
    "s3:PutBucketLogging", "s3:GetBucketNotification", "s3:PutBucketNotification",
    "s3:GetReplicationConfiguration", "s3:PutReplicationConfiguration", "s3:GetAccelerateConfiguration",
    "s3:PutAccelerateConfiguration", "s3:GetBucketRequestPayment", "s3:PutBucketRequestPayment",
    "s3:GetAnalyticsConfiguration", "s3:PutAnalyticsConfiguration", "s3:GetMetricsConfiguration",
    "s3:PutMetricsConfiguration", "s3:GetInventoryConfiguration", "s3:PutInventoryConfiguration",
    "s3:PutBucketObjectLockConfiguration", "s3:GetBucketObjectLockConfiguration", "s3:ListAllMyBuckets",
    "s3:PutBucketOwnershipControls", "s3:GetBucketOwnershipControls", "s3:GetAccountPublicAccessBlock",
    "s3:PutAccountPublicAccessBlock",
})  # fmt: skip


def action_of(operation: Op) -> str | None:
    return ACTIONS[operation]


# A request naming a version (`versionId`) needs the version's own action, as on S3: a policy may
# allow s3:DeleteObject (which only adds a delete marker) and not s3:DeleteObjectVersion.
VERSION_ACTIONS = {
    "s3:GetObject": "s3:GetObjectVersion",
    "s3:DeleteObject": "s3:DeleteObjectVersion",
    "s3:GetObjectTagging": "s3:GetObjectVersionTagging",
    "s3:PutObjectTagging": "s3:PutObjectVersionTagging",
    "s3:DeleteObjectTagging": "s3:DeleteObjectVersionTagging",
    "s3:GetObjectAcl": "s3:GetObjectVersionAcl",
    "s3:PutObjectAcl": "s3:PutObjectVersionAcl",
    "s3:GetObjectAttributes": "s3:GetObjectVersionAttributes",
}


def version_action(action: str | None) -> str | None:
    return VERSION_ACTIONS.get(action, action) if action is not None else None


def resource_arn(bucket: str | None, key: str | None = None) -> str:
    if not bucket:
        return "*"
    if key is None:
        return ARN_PREFIX + bucket
    return f"{ARN_PREFIX}{bucket}/{key}"


def is_object_action(action: str) -> bool:
    return action in OBJECT_ACTIONS
