"""One authorization decision, from everything that bears on it. Pure: no I/O.

S3's evaluation, for a caller on one action and resource:

1. Administrators may do everything (the server's root credentials and `--admin` users).
2. An explicit Deny in the bucket policy or in the caller's user policies refuses the request
   (the bucket owner keeps Get/Put/DeleteBucketPolicy, as AWS's root user does, so an owner
   can never lock itself out of its own bucket).
3. Otherwise it is allowed when the caller owns the bucket (or the object, when ACLs are
   enabled), when an Allow of the bucket policy or of a user policy matches, or when an ACL
   grant gives the permission the action needs (ACLs enabled, public grants not ignored).
4. Anything else is the implicit deny.

Block Public Access: IgnorePublicAcls drops grants to AllUsers / AuthenticatedUsers;
RestrictPublicBuckets makes a public bucket policy serve only this server's own users (never
anonymous callers). The reason of every decision ("allow:bucket-policy:Sid", "deny:implicit")
goes to the access log.
"""

from __future__ import annotations

from dataclasses import dataclass

from server.access.acl import BUCKET_PERMISSION, OBJECT_PERMISSION, Acl
from server.access.conditions import Context
from server.access.policy import Caller, Policy, Statement

OWNER_ONLY_ACTIONS = frozenset({"s3:GetBucketPolicy", "s3:PutBucketPolicy", "s3:DeleteBucketPolicy"})
BUCKET_OWNER_ENFORCED = "BucketOwnerEnforced"


@dataclass(frozen=True)
class PublicAccessBlock:
    block_public_acls: bool = False
    ignore_public_acls: bool = False
    block_public_policy: bool = False
    restrict_public_buckets: bool = False

    def __or__(self, other: PublicAccessBlock) -> PublicAccessBlock:
        return PublicAccessBlock(
            self.block_public_acls or other.block_public_acls,
            self.ignore_public_acls or other.ignore_public_acls,
            self.block_public_policy or other.block_public_policy,
            self.restrict_public_buckets or other.restrict_public_buckets,
        )


ALL_BLOCKED = PublicAccessBlock(True, True, True, True)
NONE_BLOCKED = PublicAccessBlock()


@dataclass(frozen=True)
class BucketAccess:
    """What a bucket says about access: its owner and the documents that grant or refuse."""

    owner: str
    policy: Policy | None = None
    acl: Acl | None = None
    ownership: str | None = None  # None: no OwnershipControls (ACLs enabled, ObjectWriter)
    public_access_block: PublicAccessBlock | None = None

    @property
    def acls_enabled(self) -> bool:
        return self.ownership != BUCKET_OWNER_ENFORCED


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str  # for the access log: allow:owner, allow:bucket-policy:Sid, deny:implicit, ...

    def __init__(self, allowed: bool, reason: str) -> None:
        # Written out, not generated: built once a request (see tiering/records.py on why).
        object.__setattr__(self, "allowed", allowed)
        object.__setattr__(self, "reason", reason)


@dataclass(frozen=True)
class Request:
    """The question: may this caller do this action on this resource?"""

    caller: Caller
    caller_id: str | None  # canonical id (None: anonymous)
    is_admin: bool
    action: str | None  # None: an action no policy can name (owner and admins only)
    resource: str
    context: Context
    object_owner: str | None = None  # when known: the object's owner (ACLs enabled)
    object_acl: Acl | None = None


def _matching(
    statements: tuple[Statement, ...], request: Request, owner_ids: tuple[str, ...], skip_public: bool = False
) -> tuple[Statement | None, Statement | None]:
    """(first matching Deny, first matching Allow) among the statements."""
    deny: Statement | None = None
    allow: Statement | None = None
    assert request.action is not None
    for statement in statements:
        if statement.allow and allow is not None:
            continue
        if skip_public and statement.is_public:
            continue
        if not statement.applies_to_action(request.action):  # cheapest first
            continue
        if not statement.applies_to_caller(request.caller, owner_ids):
            continue
        if not statement.applies_to(request.action, request.resource, request.caller):
            continue
        if not statement.conditions_hold(request.context, request.caller):
            continue
        if statement.allow:
            allow = statement
        else:
            return statement, allow
    return deny, allow


def decide(
    request: Request,
    bucket: BucketAccess | None,
    user_policies: tuple[Policy, ...] = (),
    server_block: PublicAccessBlock = NONE_BLOCKED,
) -> Decision:
    if request.is_admin:
        return Decision(True, "allow:admin")
    is_owner = bucket is not None and request.caller_id is not None and request.caller_id == bucket.owner
    if request.action is None:
        return Decision(True, "allow:owner") if is_owner else Decision(False, "deny:implicit")
    block = (
        server_block | (bucket.public_access_block or NONE_BLOCKED) if bucket is not None else server_block
    )
    owner_ids = (request.caller_id,) if request.caller_id else ()
    bucket_allow = user_allow = None
    if bucket is not None and bucket.policy is not None:
        # RestrictPublicBuckets: a public policy serves no anonymous caller.
        skip_public = block.restrict_public_buckets and request.caller.anonymous and bucket.policy.is_public
        deny, bucket_allow = _matching(bucket.policy.statements, request, owner_ids, skip_public)
        if deny is not None and not (is_owner and request.action in OWNER_ONLY_ACTIONS):
            return Decision(False, f"deny:bucket-policy:{deny.label}")
    if not request.caller.anonymous:
        for policy in user_policies:
            deny, allow = _matching(policy.statements, request, owner_ids)
            if deny is not None and not (is_owner and request.action in OWNER_ONLY_ACTIONS):
                return Decision(False, f"deny:user-policy:{deny.label}")
            user_allow = user_allow or allow
    if is_owner:
        return Decision(True, "allow:owner")
    acls = bucket is not None and bucket.acls_enabled
    if acls and request.caller_id is not None and request.object_owner == request.caller_id:
        return Decision(True, "allow:object-owner")
    if bucket_allow is not None:
        return Decision(True, f"allow:bucket-policy:{bucket_allow.label}")
    if user_allow is not None:
        return Decision(True, f"allow:user-policy:{user_allow.label}")
    if acls and bucket is not None:
        grant = None
        object_permission = OBJECT_PERMISSION.get(request.action)
        if object_permission and request.object_acl is not None:
            grant = request.object_acl.allows(
                object_permission, request.caller_id, ignore_public=block.ignore_public_acls
            )
            where = "object-acl"
        bucket_permission = BUCKET_PERMISSION.get(request.action)
        if grant is None and bucket_permission and bucket.acl is not None:
            grant = bucket.acl.allows(
                bucket_permission, request.caller_id, ignore_public=block.ignore_public_acls
            )
            where = "bucket-acl"
        if grant is not None:
            return Decision(True, f"allow:{where}:{grant.permission}")
    return Decision(False, "deny:implicit")
