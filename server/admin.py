"""The admin HTTP API under /_tierstore/admin/: status, domains, heal.

Authenticated like S3 requests (SigV4 with the admin credentials, which `tierstore admin` signs
with); answers JSON. Bucket names cannot contain "_", so these paths never shadow a bucket.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import secrets
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from lifecycle.temperature import heat_histogram
from server import admin_topology
from server import errors as s3
from server.access.policy import PolicyError, parse_policy
from server.error_map import to_s3_error
from server.router import bucket_from_host
from tiering import nodes
from tiering.clock import ClockLocked
from tiering.domains import UnknownDomain, list_domains, set_domain_state
from tiering.errors import RestoreInProgress, TieringError
from tiering.fsck import ORPHAN_AGE, fsck
from tiering.heat import decayed
from tiering.records import ObjectRecord

if TYPE_CHECKING:
    from server.app import Gateway

ADMIN_PREFIX = "/_tierstore/admin/"

log = logging.getLogger("tierstore.admin")


def json_response(value: Any, status: int = 200) -> Response:
    return Response(
        json.dumps(value, indent=2, default=str), status_code=status, media_type="application/json"
    )


def _flag(value: str | None) -> bool:
    return (value or "").lower() in ("1", "true", "yes")


# Classes whose objects may sit in the archive tier (bulk restore looks only at these).
ARCHIVE_CLASSES = {"GLACIER", "DEEP_ARCHIVE", "COLD"}


class AdminApi:
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    async def handle(self, request: Request) -> Response:
        if bucket_from_host(request.headers.get("host", ""), self.gateway.config.virtual_host_domains):
            # bucket.localhost/_tierstore/admin/... is an object key in that bucket, not admin.
            return await self.gateway.handle(request)
        try:
            auth = self.gateway.authenticate_request(request)
            if not self.gateway.credentials.identity(auth.access_key).is_admin:
                raise s3.AccessDenied("Only administrators may use the admin API")
            response = await self._dispatch(
                request, request.url.path[len(ADMIN_PREFIX) :].strip("/").split("/")
            )
            if request.method != "GET":
                # Users, policies, the clock, domains...: every other worker on this data
                # directory catches up before its next request (tiering/changes.py); what this
                # command did (a heal pass, a lifecycle pass) is on the workers' board.
                self.gateway.store.changes.bump()
                if self.gateway.progress is not None:
                    await self.gateway.progress.publish_async()
            # Several workers: what this command changed here (heal, restores...) is in the
            # shared metrics before the caller can scrape any worker.
            await asyncio.to_thread(self.gateway.metrics.sync_own)
            return response
        except s3.S3Error as exc:
            return json_response({"error": exc.code, "message": exc.detail}, exc.status)
        except ValueError as exc:  # a malformed number in the query: the caller's mistake, not a 500
            return json_response({"error": "InvalidArgument", "message": str(exc)}, 400)
        except TieringError as exc:  # e.g. the catalog database unreachable: 503, as for S3 requests
            error = to_s3_error(exc)
            if error.status >= 500:
                self.gateway.faults.record(request.method, request.url.path, error.status, error.code, exc)
            return json_response({"error": error.code, "message": error.detail}, error.status)
        except Exception as exc:
            # Answered in JSON like every other admin error (the CLI reads it), and logged with
            # its traceback: Starlette's default is a bare-text 500 and nothing in the log.
            log.exception("internal error on admin %s %s", request.method, request.url.path)
            return json_response({"error": "InternalError", "message": f"{type(exc).__name__}: {exc}"}, 500)

    async def _dispatch(self, request: Request, parts: list[str]) -> Response:
        store = self.gateway.store
        method = request.method
        match method, parts:
            case "GET", ["status"]:
                status = await store.status()
                heal = await self.gateway.heal_report()
                status.update(heal=heal, degraded_objects=heal["degraded_objects"])
                status["lost_objects"] = heal["lost_objects"]
                return json_response(status)
            case "GET", ["domains"]:
                return json_response(list_domains(store))
            case "GET", ["nodes"]:  # storage nodes registered in the catalog (tiering.nodes)
                return json_response(await asyncio.to_thread(nodes.node_status, store.catalog))
            case "POST", ["domains", target, ("offline" | "online") as state]:
                try:
                    changed = set_domain_state(store, target, state == "online")
                except UnknownDomain:
                    return json_response({"error": "NoSuchDomain", "message": f"no domain {target!r}"}, 404)
                return json_response({"target": target, "state": state, "domains": changed})
            case "POST", ["heal"]:
                heal_pass = store.maintenance.run_pass(force=True)
                if request.query_params.get("wait", "").lower() in ("1", "true", "yes"):
                    await asyncio.shield(heal_pass)
                return json_response(await self.gateway.heal_report())
            case "POST", ["fsck"]:
                return json_response(await self._fsck(request))
            case "GET", ["heal"]:
                return json_response(await self.gateway.heal_report())
            case "POST", ["clock", "advance"]:
                return self._advance_clock(request)
            case "GET", ["clock"]:
                clock = self.gateway.lifecycle.clock
                return json_response(
                    {"now": clock(), "offset_seconds": clock.offset, "adjustable": clock.adjustable}
                )
            case "POST", ["lifecycle", "run"]:
                if request.query_params.get("wait", "").lower() in ("1", "true", "yes"):
                    ran = await self.gateway.run_lifecycle_pass()  # by the lease holder
                    return json_response({**ran, **await self.gateway.lifecycle_report()})
                self.gateway.lifecycle.daemon.run_pass()
                return json_response(await self.gateway.lifecycle_report())
            case "GET", ["lifecycle"]:
                return json_response(await self.gateway.lifecycle_report())
            case "POST", ["restore"]:
                return json_response(await self._bulk_restore(request))
            case "GET", ["restore"]:
                return json_response(await self._restore_state(request))
            case "GET", ["users"]:
                return json_response(await asyncio.to_thread(store.catalog.list_users))
            case "POST", ["users"]:
                return await self._add_user(request)
            case ("PUT" | "GET" | "DELETE") as verb, ["users", name, "policy"]:
                return await self._user_policy(request, verb, name)
            case "DELETE", ["users", access_key]:
                if not await asyncio.to_thread(store.catalog.remove_user, access_key):
                    return json_response({"error": "NoSuchUser", "message": f"no user {access_key!r}"}, 404)
                await asyncio.to_thread(self.gateway.credentials.reload)
                return json_response({"removed": access_key})
            case (
                "POST",
                ["domains", "add"]
                | ["domains", _, "drain" | "remove"]
                | ["tiers", _, "recode"]
                | ["rebalance"]
                | ["nodes", _, "drain" | "remove"],
            ) | ("GET", ["rebalance"] | ["domains", _, "drain"]):
                return await admin_topology.handle(store, request, parts)
            case "DELETE", ["domains", target]:
                return await admin_topology.handle(store, request, ["domains", target, "remove"])
            case "GET", ["tiers"]:
                return json_response(await self._tiers())
            case "GET", ["object"]:
                return await self._object(request)
            case "POST", ["encryption", "rotate"]:
                # A new master key (or the configured one) wraps every SSE-S3 data key from now on.
                return json_response(await store.rewrap_keys(rotate=True))
            case "GET", ["encryption"]:
                return json_response({"current_key_id": store.keys.current_key_id})
        return json_response(
            {"error": "NotFound", "message": f"no admin endpoint {method} {'/'.join(parts)}"}, 404
        )

    def _advance_clock(self, request: Request) -> Response:
        clock = self.gateway.lifecycle.clock
        try:
            days = float(request.query_params.get("days", "0"))
            clock.advance(days * 86400)
        except ClockLocked as exc:
            return json_response({"error": "ClockLocked", "message": str(exc)}, 403)
        except ValueError as exc:
            return json_response({"error": "InvalidArgument", "message": str(exc)}, 400)
        return json_response({"now": clock(), "offset_seconds": clock.offset})

    async def _fsck(self, request: Request) -> dict[str, Any]:
        params = request.query_params
        orphan_age = float(params.get("orphan_age", ORPHAN_AGE))
        if orphan_age < 0:
            raise ValueError("orphan_age must not be negative")
        report = await fsck(
            self.gateway.store,
            verify=_flag(params.get("verify")),
            repair=_flag(params.get("repair")),
            orphan_age=orphan_age,
        )
        return report.to_json()

    async def _tiers(self) -> list[dict[str, Any]]:
        lifecycle = self.gateway.lifecycle
        tiers = await self.gateway.store.tier_report(lifecycle.settings.temperature.half_life_s)
        pending: dict[str, int] = {}
        for order_tier, count in lifecycle.daemon.pending_by_tier().items():
            pending[order_tier] = count
        for tier in tiers:
            heats = tier.pop("heats")
            assert isinstance(heats, list)  # decayed heats, one per object (ObjectStore.tier_report)
            tier["heat_histogram"] = heat_histogram(heats)
            tier["pending_moves"] = pending.get(str(tier["name"]), 0)
        return tiers

    async def _object(self, request: Request) -> Response:
        bucket = request.query_params.get("bucket", "")
        key = request.query_params.get("key", "")
        store = self.gateway.store
        try:
            record = await store.head_object(bucket, key)
            history = await store.move_history(bucket, key)
        except TieringError as exc:
            return json_response({"error": type(exc).__name__, "message": str(exc)}, 404)
        half_life = self.gateway.lifecycle.settings.temperature.half_life_s
        now = store.clock()
        return json_response(
            {
                "bucket": bucket,
                "key": key,
                "size": record.size,
                "etag": record.etag,
                "storage_class": record.meta.storage_class,
                "tier": record.tier,
                "tier_since": record.tier_since,
                "heat": decayed(record.heat, record.heat_at, now, half_life),
                "last_access": record.last_access,
                "last_modified": record.last_modified,
                "restore": record.restore.to_json() | {"segments": len(record.restore.segments)}
                if record.restore
                else None,
                "moves": [dataclasses.asdict(m) for m in history],
            }
        )

    async def _add_user(self, request: Request) -> Response:
        params = request.query_params
        name = params.get("name", "")
        if not name:
            return json_response({"error": "InvalidArgument", "message": "a user needs a name"}, 400)
        access_key = params.get("access_key") or "TS" + secrets.token_hex(9).upper()
        secret_key = params.get("secret_key") or secrets.token_urlsafe(30)
        is_admin = params.get("admin", "").lower() in ("1", "true", "yes")
        try:
            await asyncio.to_thread(
                self.gateway.store.catalog.add_user, access_key, secret_key, name, is_admin
            )
        except ValueError as exc:
            return json_response({"error": "UserAlreadyExists", "message": str(exc)}, 409)
        await asyncio.to_thread(self.gateway.credentials.reload)
        return json_response(
            {"name": name, "access_key": access_key, "secret_key": secret_key, "admin": is_admin}
        )

    async def _user_policy(self, request: Request, verb: str, name: str) -> Response:
        """A user's policy (IAM policy language, no Principal): what it may do besides its own buckets."""
        catalog = self.gateway.store.catalog
        users = await asyncio.to_thread(catalog.list_users)
        if not any(user["name"] == name for user in users):
            return json_response(
                {"error": "NoSuchEntity", "message": f"The user with name {name} cannot be found."}, 404
            )
        authorizer = self.gateway.authorizer
        if verb == "GET":
            text = (await asyncio.to_thread(catalog.user_policies)).get(name)
            if text is None:
                return json_response(
                    {"error": "NoSuchEntity", "message": f"The user policy of {name} cannot be found."}, 404
                )
            return json_response({"name": name, "policy": json.loads(text)})
        if verb == "DELETE":
            if not await asyncio.to_thread(catalog.put_user_policy, name, None):
                return json_response(
                    {"error": "NoSuchEntity", "message": f"The user policy of {name} cannot be found."}, 404
                )
            await authorizer.reload_user_policies()
            return json_response({"name": name, "deleted": True})
        body = await self._signed_body(request)
        try:
            policy = parse_policy(body, user_policy=True)
        except PolicyError as exc:
            return json_response({"error": "MalformedPolicyDocument", "message": str(exc)}, 400)
        await asyncio.to_thread(catalog.put_user_policy, name, policy.text)
        await authorizer.reload_user_policies()
        return json_response({"name": name, "policy": json.loads(policy.text)})

    async def _signed_body(self, request: Request) -> bytes:
        """The request body, which must be what the signature covers (x-amz-content-sha256)."""
        body = await request.body()
        declared = request.headers.get("x-amz-content-sha256", "")
        if declared != "UNSIGNED-PAYLOAD" and hashlib.sha256(body).hexdigest() != declared:
            raise s3.XAmzContentSHA256Mismatch()
        return body

    async def _archived(self, request: Request) -> AsyncIterator[ObjectRecord]:
        """Every object under bucket/prefix, page by page (an index scan, never the whole bucket)."""
        store = self.gateway.store
        bucket = request.query_params.get("bucket", "")
        prefix = request.query_params.get("prefix", "")
        marker = ""
        while True:
            page = await store.list_objects(bucket, prefix=prefix, start_after=marker, max_keys=1000)
            for entry in page.objects:
                if entry.storage_class in ARCHIVE_CLASSES or entry.storage_class == "INTELLIGENT_TIERING":
                    yield await store.head_object(bucket, entry.key)
            if not page.is_truncated or not page.next_marker:
                return
            marker = page.next_marker

    async def _bulk_restore(self, request: Request) -> dict[str, int]:
        days = int(request.query_params.get("days", "1") or 1)
        if days < 1:
            raise ValueError("days must be a positive integer")
        counts = {"requested": 0, "already": 0, "skipped": 0}
        try:
            async for record in self._archived(request):
                if record.tier != "cold":
                    counts["skipped"] += 1
                    continue
                try:
                    already = await self.gateway.store.request_restore(record.bucket, record.key, days)
                except RestoreInProgress:
                    already = True
                counts["already" if already else "requested"] += 1
        except TieringError as exc:
            raise s3.NoSuchBucket(str(exc)) from exc
        if counts["requested"]:
            self.gateway.lifecycle.daemon.wake()
        return counts

    async def _restore_state(self, request: Request) -> dict[str, int]:
        state = {"archived": 0, "restored": 0, "ongoing": 0}
        now = self.gateway.store.clock()
        async for record in self._archived(request):
            if record.tier != "cold":
                continue
            state["archived"] += 1
            if record.restore is not None and record.restore.ongoing:
                state["ongoing"] += 1
            elif record.restore is not None and record.restore.expiry > now:
                state["restored"] += 1
        return state
