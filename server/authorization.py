"""Who may do what: every request's one authorization decision (`server.access.decision`).

The gateway calls `check` once per request, after authentication (an unsigned request comes as
the anonymous identity); handlers call it again for a second resource (a copy's source) or per
key (DeleteObjects). What a decision needs is cached here, so that the hot path reads no
catalog row: each bucket's owner, policy, ACL, ownership controls and Public Access Block for a
second, the user policies for a second (reloaded in a worker thread, like the credentials), and
parsed policies by their text. A change made through this process is seen at once (`forget`).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from server.access import acl as acls
from server.access.actions import action_of, is_object_action, resource_arn, version_action
from server.access.context import RequestContext
from server.access.decision import (
    ALL_BLOCKED,
    NONE_BLOCKED,
    BucketAccess,
    Decision,
    PublicAccessBlock,
    Request,
    decide,
)
from server.access.policy import Caller, Policy, PolicyError, parse_policy
from server.credentials import Identity
from server.errors import AccessDenied
from server.operations import Operation
from tiering.errors import BucketNotFound, TieringError
from tiering.records import ObjectRecord
from tiering.store import ObjectStore

OWNER_CACHE_SECONDS = 1.0
USER_POLICY_SECONDS = 1.0
CONFIG_PREFIX = "authz/"  # bucket configuration names: authz/policy, authz/acl, ...
POLICY = CONFIG_PREFIX + "policy"
ACL = CONFIG_PREFIX + "acl"
OWNERSHIP = CONFIG_PREFIX + "ownership"
PUBLIC_ACCESS_BLOCK = CONFIG_PREFIX + "public-access-block"
# Object actions whose decision may depend on the object itself (its ACL, owner or tags).
_OBJECT_ACL_ACTIONS = frozenset(acls.OBJECT_PERMISSION)


def public_access_block_from_json(raw: str) -> PublicAccessBlock:
    data = json.loads(raw)
    return PublicAccessBlock(
        data["BlockPublicAcls"],
        data["IgnorePublicAcls"],
        data["BlockPublicPolicy"],
        data["RestrictPublicBuckets"],
    )


class Authorizer:
    def __init__(
        self, store: ObjectStore, *, account_id: str = "000000000000", block_public_access: bool = False
    ) -> None:
        self.store = store
        self.account_id = account_id
        self.server_block = ALL_BLOCKED if block_public_access else NONE_BLOCKED
        # bucket → (when looked up, its access documents or None when it does not exist): HEAD-every-path
        # mount tools must not cost catalog reads each just for this check.
        self._buckets: dict[str, tuple[float, BucketAccess | None]] = {}
        self._parsed: dict[str, Policy] = {}
        self._user_policies: dict[str, tuple[Policy, ...]] = {}
        self._user_policies_loaded = -1e9
        self._reloading = False

    # --- what a decision reads ---------------------------------------------------------------

    def parsed(self, text: str, *, bucket: str | None = None, user_policy: bool = False) -> Policy:
        cache_key = f"{bucket or ''}\x00{int(user_policy)}\x00{text}"
        policy = self._parsed.get(cache_key)
        if policy is None:
            policy = parse_policy(text, bucket=bucket, user_policy=user_policy, check_key=lambda _k: True)
            if len(self._parsed) > 10_000:
                self._parsed.clear()
            self._parsed[cache_key] = policy
        return policy

    async def bucket_access(self, bucket: str) -> BucketAccess | None:
        now = time.monotonic()
        cached = self._buckets.get(bucket)
        if cached is not None and now - cached[0] < OWNER_CACHE_SECONDS:
            return cached[1]
        try:
            record = await self.store.get_bucket(bucket)
            documents = dict(await self.store.bucket_configs_with_prefix(bucket, CONFIG_PREFIX))
        except BucketNotFound:
            access = None
        else:
            policy = None
            if POLICY in documents:
                try:
                    policy = self.parsed(documents[POLICY], bucket=bucket)
                except PolicyError:
                    policy = None  # stored by an older version with other rules: ignored, not a 500
            access = BucketAccess(
                owner=record.owner,
                policy=policy,
                acl=acls.Acl.from_json(documents[ACL]) if ACL in documents else None,
                ownership=documents.get(OWNERSHIP),
                public_access_block=public_access_block_from_json(documents[PUBLIC_ACCESS_BLOCK])
                if PUBLIC_ACCESS_BLOCK in documents
                else None,
            )
        if len(self._buckets) > 10_000:
            self._buckets.clear()
        self._buckets[bucket] = (now, access)
        return access

    def forget(self, bucket: str) -> None:
        """A bucket's access documents changed (through this process): read them afresh."""
        self._buckets.pop(bucket, None)

    def forget_all(self) -> None:
        """Something changed through another process: read every bucket's documents afresh."""
        self._buckets.clear()

    async def bucket_owner(self, bucket: str) -> str | None:
        access = await self.bucket_access(bucket)
        return access.owner if access is not None else None

    def _load_user_policies(self) -> None:
        """Blocking: read every user policy (a worker thread on a running server)."""
        loaded: dict[str, tuple[Policy, ...]] = {}
        for name, text in self.store.catalog.user_policies().items():
            try:
                loaded[name] = (self.parsed(text, user_policy=True),)
            except PolicyError:
                continue
        self._user_policies = loaded
        self._user_policies_loaded = time.monotonic()

    async def reload_user_policies(self) -> None:
        await asyncio.to_thread(self._load_user_policies)

    async def user_policies(self, name: str) -> tuple[Policy, ...]:
        age = time.monotonic() - self._user_policies_loaded
        if age > 30 * USER_POLICY_SECONDS:
            await self.reload_user_policies()  # first use, or long idle: read now
        elif age > USER_POLICY_SECONDS and not self._reloading:
            self._reloading = True
            task = asyncio.get_running_loop().run_in_executor(None, self._load_user_policies)
            task.add_done_callback(lambda _: setattr(self, "_reloading", False))
        return self._user_policies.get(name, ())

    # --- the decision --------------------------------------------------------------------------

    async def decide(
        self,
        identity: Identity,
        operation: Operation,
        bucket: str | None,
        *,
        key: str | None = None,
        action: str | None = None,
        request: Any = None,
        query: dict[str, str] | None = None,
        auth_scheme: str | None = None,
        record: ObjectRecord | None = None,
    ) -> Decision:
        action = action or action_of(operation)
        if query is not None and "versionId" in query:
            action = version_action(action)
        if identity.is_admin:
            return Decision(True, "allow:admin")
        if action in ("s3:ListAllMyBuckets", "s3:CreateBucket") or not bucket:
            # Any signed user may list its buckets and create new ones, unless a user policy says no.
            if identity.anonymous:
                return Decision(False, "deny:implicit")
            policies = await self.user_policies(identity.name)
            if not policies or action is None:
                return Decision(True, "allow:user")
            verdict = decide(
                self._request(identity, action, resource_arn(bucket), None, None),
                None,
                policies,
                self.server_block,
            )
            return (
                verdict
                if not verdict.allowed and verdict.reason.startswith("deny:user")
                else Decision(True, "allow:user")
            )
        access = await self.bucket_access(bucket)
        if access is None:
            return Decision(True, "allow:no-such-bucket")  # the handler answers NoSuchBucket
        object_level = action is not None and is_object_action(action)
        resource = resource_arn(bucket, (key or "") if object_level else None)
        caller_id = None if identity.anonymous else identity.owner_id
        user_policies = await self.user_policies(identity.name) if not identity.anonymous else ()
        # The object itself is read only when the decision can depend on it: its ACL (a caller
        # other than the owner, ACLs enabled) or its tags (s3:ExistingObjectTag in a policy).
        if (
            record is None
            and object_level
            and key
            and (
                (caller_id != access.owner and access.acls_enabled and action in _OBJECT_ACL_ACTIONS)
                or (access.policy is not None and access.policy.reads_object_tags)
                or any(policy.reads_object_tags for policy in user_policies)
            )
        ):
            record = await self._object(bucket, key)
        context = RequestContext(
            identity, action, request=request, query=query, auth_scheme=auth_scheme, record=record
        )
        object_acl = None
        if record is not None and access.acls_enabled:
            object_acl = (
                acls.Acl.from_json(record.meta.acl) if record.meta.acl else acls.private(access.owner)
            )
        question = Request(
            caller=self._caller(identity),
            caller_id=caller_id,
            is_admin=False,
            action=action,
            resource=resource,
            context=context,
            object_owner=object_acl.owner if object_acl is not None else None,
            object_acl=object_acl,
        )
        return decide(question, access, user_policies, self.server_block)

    async def check(
        self,
        identity: Identity,
        operation: Operation,
        bucket: str | None,
        *,
        key: str | None = None,
        action: str | None = None,
        request: Any = None,
        query: dict[str, str] | None = None,
        auth_scheme: str | None = None,
        record: ObjectRecord | None = None,
    ) -> Decision:
        """Raise AccessDenied unless `identity` may run `operation` on `bucket` (and `key`).

        The decision's reason is kept in the request's state for the access log."""
        decision = await self.decide(
            identity,
            operation,
            bucket,
            key=key,
            action=action,
            request=request,
            query=query,
            auth_scheme=auth_scheme,
            record=record,
        )
        if request is not None:
            # The state dict itself (what `request.state` wraps): starlette's State raises and
            # formats an AttributeError for a name not set yet, which every request's first
            # check would pay for.
            state = request.scope.setdefault("state", {})
            if not decision.allowed or not state.get("authz"):
                state["authz"] = decision.reason
        if not decision.allowed:
            raise AccessDenied()
        return decision

    async def check_read(
        self, identity: Identity, bucket: str, key: str | None = None, *, request: Any = None
    ) -> None:
        """A copy's source: reading it needs s3:GetObject on it."""
        await self.check(identity, Operation.GetObject, bucket, key=key, request=request)

    # --- pieces ------------------------------------------------------------------------------

    def _caller(self, identity: Identity) -> Caller:
        if identity.anonymous:
            return Caller(anonymous=True, account=self.account_id)
        return Caller(
            anonymous=False, name=identity.name, access_key=identity.access_key, account=self.account_id
        )

    def _request(
        self, identity: Identity, action: str, resource: str, request: Any, query: dict[str, str] | None
    ) -> Request:
        return Request(
            self._caller(identity),
            None if identity.anonymous else identity.owner_id,
            False,
            action,
            resource,
            RequestContext(identity, action, request=request, query=query),
        )

    async def _object(self, bucket: str, key: str) -> ObjectRecord | None:
        try:
            return await self.store.head_object(bucket, key)
        except TieringError:
            return None
