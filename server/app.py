"""The S3 gateway as an ASGI app: route → authenticate → handler → response, errors in one place."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import os
import secrets
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route as StarletteRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from lifecycle.daemon import LEASE as LIFECYCLE_LEASE
from lifecycle.mover import TokenBucket
from lifecycle.runtime import Lifecycle
from server import errors as s3
from server import metrics_workers, path_convertor, runtime_dir
from server.admin import ADMIN_PREFIX, AdminApi
from server.authorization import Authorizer
from server.config import ServerConfig
from server.context import S3Request
from server.cors import CorsRules, preflight_target
from server.credentials import ANONYMOUS, Identity, UserCredentials
from server.error_map import to_s3_error
from server.fault_log import FaultLog
from server.handlers import HANDLERS
from server.metrics import Metrics
from server.operations import Operation
from server.request_headers import RequestHeaders, asgi_headers, headers_of
from server.request_observer import RequestObserver
from server.router import decode_path, parse_query, route
from server.signature import AuthContext, PayloadMode, RequestToVerify, authenticate, has_credentials
from server.signature.request import Credentials
from server.signature.sigv4 import payload_mode_for
from server.status import OpsEndpoints
from server.worker_progress import LifecycleRuns, ProgressBoard, merge_heal, merge_lifecycle
from tiering import domains, nodes
from tiering.catalog import Catalog
from tiering.clock import Clock
from tiering.encryption.keys import KeyService
from tiering.errors import ObjectNotFound, TieringError
from tiering.lease_holders import holder_pid as lease_holder_pid
from tiering.store import ObjectStore
from tiering.tiers import Tier

log = logging.getLogger("tierstore.server")

# Newer FastAPI wraps every request in OpenTelemetry spans and metrics; we keep our own
# Prometheus metrics and access log, and that wrapper costs time on every S3 request.
_NO_FRAMEWORK_TELEMETRY: dict[str, Any] = (
    {"telemetry": {"tracing": False, "metrics": False, "logs": False, "operation_spans": False}}
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters
    else {}
)

# What a PostObject request is "authenticated" as before its handler checks the form's signature.
FORM_UPLOAD_AUTH = AuthContext(access_key="", payload_mode=PayloadMode.UNSIGNED, payload_sha256=None)


def anonymous_auth(headers: object) -> AuthContext:
    """How to read an unsigned request's body: as x-amz-content-sha256 says (a digest is still
    checked; aws-chunked with an unsigned trailer still decoded), plain bytes without it."""
    declared = headers.get("x-amz-content-sha256")  # type: ignore[attr-defined]
    if not declared:
        return AuthContext(access_key="", payload_mode=PayloadMode.UNSIGNED, payload_sha256=None)
    mode, digest = payload_mode_for(declared)
    if mode.has_chunk_signatures:
        raise s3.InvalidRequest("Chunk signatures need a signed request")
    return AuthContext(access_key="", payload_mode=mode, payload_sha256=digest)


ALL_METHODS = ["GET", "HEAD", "PUT", "POST", "DELETE", "OPTIONS", "PATCH"]


def authenticate_request(request: Request, credentials: Credentials, max_skew: timedelta) -> AuthContext:
    """`Gateway.authenticate_request` without a gateway (the ops endpoints' tests use it with a
    stand-in: a compiled method does not take one as `self`)."""
    return authenticate(
        RequestToVerify(
            method=request.method,
            raw_path=request.scope.get("raw_path", b"").decode("latin-1") or request.url.path,
            query_string=request.scope.get("query_string", b"").decode("latin-1"),
            headers=headers_of(request).signed(),
        ),
        credentials,
        now=datetime.now(UTC),
        max_skew=max_skew,
    )


def build_store(config: ServerConfig) -> ObjectStore:
    assert config.catalog_path is not None
    catalog = Catalog(
        config.catalog_url or config.catalog_path,
        durable=config.catalog_durable,
        pool_size=config.catalog_pool_size,
    )
    # The state directory (this host's process checkpoints, tiering.peers) is the SQLite catalog's
    # folder, which a PostgreSQL catalog does not create.
    config.catalog_path.parent.mkdir(parents=True, exist_ok=True)
    tier_configs = config.tiers
    registered_nodes = nodes.registered(catalog)
    if registered_nodes:  # storage nodes found: the erasure-coded tiers live on their drives
        secret = nodes.cluster_secret(config.cluster_secret_file or None)
        tier_configs = nodes.place_on_nodes(
            tier_configs,
            registered_nodes,
            secret,
            config.node_timeout_seconds,
            nodes.node_ca(config.node_ca or None),
        )
    tiers = {tc.name: Tier.from_config(tc) for tc in tier_configs}
    clock = Clock(adjustable=config.test_clock, catalog=catalog)
    store = ObjectStore(
        catalog,
        tiers,
        state_dir=config.catalog_path.parent,
        runtime_dir=runtime_dir.for_data_dir(config.data_dir),
        clock=clock,
        keys=KeyService(config.encryption_keys),
    )
    store.rebalancer.configure(config.rebalance, TokenBucket(config.rebalance.bytes_per_second).take)
    return store


def build_lifecycle(config: ServerConfig, store: ObjectStore, *, run_daemon: bool) -> Lifecycle:
    assert isinstance(store.clock, Clock)
    return Lifecycle(store, config.lifecycle, store.clock, run_daemon=run_daemon)


class RequestIds:
    """Unique x-amz-request-id values: a random per-process prefix and a counter.

    16 upper-case hex characters, like S3's. Unique across restarts and workers by the prefix,
    and cheaper than a fresh `secrets.token_hex` (a getrandom call) per request.
    """

    def __init__(self) -> None:
        self._prefix = secrets.token_hex(4).upper()
        self._counter = itertools.count()

    def next(self) -> str:
        return f"{self._prefix}{next(self._counter) & 0xFFFFFFFF:08X}"


class Gateway:
    """Everything one request needs: config, credentials and the object store."""

    def __init__(self, config: ServerConfig, store: ObjectStore, lifecycle: Lifecycle) -> None:
        self.config = config
        self.store = store
        self.lifecycle = lifecycle
        self.credentials = UserCredentials({config.access_key: config.secret_key}, store.catalog)
        self.authorizer = Authorizer(
            store, account_id=config.account_id, block_public_access=config.block_public_access
        )
        self.cors = CorsRules(store)
        self.max_skew = timedelta(seconds=config.max_clock_skew_seconds)
        self.metrics = Metrics(store, lifecycle, per_bucket=config.metrics_per_bucket)
        self._request_ids = RequestIds()
        self.faults = FaultLog(log)  # the cause of each 5xx a storage error earned (S3 and admin API)
        self._changes_seen = store.changes.token()
        self._catching_up = asyncio.Lock()
        # Under a supervisor: every worker's background progress, for the admin API's answers.
        self.progress = (
            ProgressBoard(store.state_dir, self._progress_snapshot)
            if metrics_workers.multiprocess_dir() and store.state_dir is not None
            else None
        )
        self.lifecycle_runs = LifecycleRuns(self.progress) if self.progress is not None else None

    def background_tasks(self) -> list[asyncio.Task[None]]:
        """Under a supervisor: publish this worker's progress, answer lifecycle run requests."""
        if self.progress is None or self.lifecycle_runs is None:
            return []
        daemon = self.lifecycle.daemon
        return [
            asyncio.create_task(self.progress.run_forever()),
            asyncio.create_task(
                self.lifecycle_runs.watch(
                    self.lifecycle.tracker.flush, self._holds_lifecycle_lease, daemon.run_pass, self._refresh
                )
            ),
        ]

    async def _refresh(self) -> None:
        """This worker's metrics mirror and progress entry, as of now: after taking up what
        another worker changed."""
        await self.catch_up()
        self.metrics.tally.write()  # the requests of this turn of the loop (server/request_tally.py)
        await asyncio.to_thread(self.metrics.sync_own)
        if self.progress is not None:
            await self.progress.publish_async()

    async def sync_workers(self) -> None:
        """Under a supervisor: before an admin answer or a scrape, every worker's figures as of now."""
        if self.lifecycle_runs is not None:
            await self.lifecycle_runs.sync_all()

    def _progress_snapshot(self) -> dict[str, Any]:
        heal = self.store.maintenance.progress
        return {
            "heal": {**heal.to_json(), "degraded": sorted(heal.degraded)},
            "lifecycle": self.lifecycle.daemon.status(),
        }

    async def _peer_progress(self) -> list[dict[str, Any]]:
        if self.progress is None:
            return []
        await self.sync_workers()
        return await asyncio.to_thread(self.progress.peers)

    async def heal_report(self) -> dict[str, Any]:
        """Heal and scrub progress, of every worker (server/worker_progress.py); the lost blobs are
        the catalog's, found by any worker or gateway (tiering/maintenance.py)."""
        own = self._progress_snapshot()["heal"]
        merged = merge_heal(own, [p["heal"] for p in await self._peer_progress()])
        lost = await asyncio.to_thread(self.store.maintenance.lost_report)
        merged["lost"] = [
            {"tier": tier, "bucket": bucket, "key": key, "data_id": data_id}
            for data_id, (tier, bucket, key) in sorted(lost.items())
        ]
        merged["lost_objects"] = len(lost)
        return merged

    async def run_lifecycle_pass(self) -> dict[str, Any]:
        """`admin lifecycle run --wait`: a pass that sees every worker's accesses, run by the
        worker that holds the lifecycle lease, whichever worker asked (server/worker_progress.py)."""
        daemon = self.lifecycle.daemon
        runs = self.lifecycle_runs
        if runs is None:
            report = await asyncio.shield(daemon.run_pass())
            return {"pass": report.to_json()}
        held = await asyncio.to_thread(self.store.catalog.lease, LIFECYCLE_LEASE, time.time())
        holder_pid = lease_holder_pid(held[0]) if held else None
        live = await asyncio.to_thread(runs.live_pids)
        request = await asyncio.to_thread(runs.post)  # every worker flushes its accesses
        try:
            result = await self._lifecycle_pass_for(runs, request, holder_pid, live)
        except BaseException as exc:  # not `finally: await`, cleaned up outside the handler: see setup.py
            failure = exc
        else:
            await asyncio.to_thread(runs.forget, request)
            return result
        await asyncio.to_thread(runs.forget, request)
        raise failure

    async def _lifecycle_pass_for(
        self, runs: LifecycleRuns, request: str, holder_pid: int | None, live: set[int]
    ) -> dict[str, Any]:
        if holder_pid is not None and holder_pid != os.getpid() and holder_pid in live:
            done = await runs.wait_done(request, holder_pid)  # the holder runs it
            if done is not None:
                return done
        await runs.wait_acks(request)
        # Ours, or nobody's lease: run it here.
        report = await asyncio.shield(self.lifecycle.daemon.run_pass())
        return {"pass": report.to_json()}

    async def _holds_lifecycle_lease(self) -> bool:
        held = await asyncio.to_thread(self.store.catalog.lease, LIFECYCLE_LEASE, time.time())
        return held is not None and held[0] == self.lifecycle.daemon.holder

    async def lifecycle_report(self) -> dict[str, Any]:
        """The lifecycle daemon's and mover's status, of every worker."""
        own = self.lifecycle.daemon.status()
        return merge_lifecycle(own, [p["lifecycle"] for p in await self._peer_progress()])

    async def catch_up(self) -> None:
        """Before a request: if another process on this data directory changed users, policies,
        bucket configurations, the clock, domains or the topology (tiering/changes.py), reload what this one
        caches, so that whichever worker answers, it answers as the one that made the change."""
        if self.store.changes.token() == self._changes_seen:
            return  # the common case: one 8-byte read
        # Not `async with`: its exit would re-raise after an await (see setup.py); a lock's
        # release does not suspend.
        await self._catching_up.acquire()
        try:
            token = self.store.changes.token()
            if token != self._changes_seen:  # else a concurrent request caught up meanwhile
                await self._reload_changes()
                self._changes_seen = token
        finally:
            self._catching_up.release()

    async def _reload_changes(self) -> None:
        self.authorizer.forget_all()
        self.cors.forget_all()
        clock = self.lifecycle.clock

        def reload() -> None:
            self.credentials.reload()
            clock.reload()

        await asyncio.to_thread(reload)
        await self.authorizer.reload_user_policies()
        await domains.load_domain_state(self.store, reset=False)
        # A drain through another worker: no shard of ours is placed on it from now on, and our
        # writes still writing there are published for its `drain --wait` (tiering/rebalance.py).
        await self.store.rebalancer.follow()

    def authenticate_request(self, request: Request) -> AuthContext:
        """Check the signature of a non-S3 request (admin API, status page): same keys, same rules."""
        return authenticate_request(request, self.credentials, self.max_skew)

    async def handle(self, request: Request) -> Response:
        request_id = self._request_ids.next()
        started = time.perf_counter()
        headers = headers_of(request)
        scope = request.scope
        # What `request.state` wraps (RequestObserver and the access log read it), used as the
        # dict it is: Starlette's `State` costs an interpreted call per use.
        state: dict[str, Any] = scope.setdefault("state", {})
        method = request.method
        raw_path = scope.get("raw_path", b"").decode("latin-1") or scope["path"]
        try:
            if method == "OPTIONS":
                response = await self._preflight(request, headers, raw_path)
            else:
                response = await self._dispatch(request, headers, method, raw_path, request_id)
        except s3.S3Error as exc:
            state["error_code"] = exc.code
            response = self._error(exc, method, raw_path, request_id)
        except TieringError as exc:
            error = to_s3_error(exc)
            state["error_code"] = error.code
            if error.status >= 500:
                # The path alone: a presigned URL's query holds its credential and signature.
                self.faults.record(method, raw_path.split("?", 1)[0], error.status, error.code, exc)
            response = self._error(error, method, raw_path, request_id)
        except Exception:
            log.exception("internal error on %s %s", method, raw_path)
            state["error_code"] = "InternalError"
            response = self._error(s3.InternalError(), method, raw_path, request_id)
        if "origin" in headers and method != "OPTIONS":
            await self._add_cors_headers(request, headers, response)
        if response.status_code >= 300 and "100-continue" in headers.get("expect", "").lower():
            # A client waiting for "100 Continue" never sends the body when refused, but uvicorn
            # keeps the connection: its next request would be parsed as the unsent body.
            response.headers["connection"] = "close"
        # No handler sets these three: appended to the raw list rather than through MutableHeaders,
        # which scans and rebuilds the list once per header.
        rid = request_id.encode("latin-1")
        response.raw_headers += ((b"x-amz-request-id", rid), (b"x-amz-id-2", rid), (b"server", b"tierstore"))
        self.metrics.observe(state.get("operation", "Unrouted"), response.status_code, started)
        return response

    async def _dispatch(
        self, request: Request, headers: RequestHeaders, method: str, raw_path: str, request_id: str
    ) -> Response:
        query_string = request.scope.get("query_string", b"").decode("latin-1")
        query = parse_query(query_string)
        path = decode_path(raw_path.split("?", 1)[0])
        routed = route(
            method,
            path,
            query,
            headers.get("host", ""),
            "x-amz-copy-source" in headers,
            self.config.virtual_host_domains,
        )
        to_verify = RequestToVerify(
            method=method,
            raw_path=raw_path.split("?", 1)[0],
            query_string=query_string,
            headers=headers.signed(),
            virtual_host_bucket=routed.virtual_host_bucket,
        )
        state = request.scope["state"]  # see `handle`
        state["operation"] = routed.operation.value
        state["bucket"] = routed.bucket  # also for the CORS headers of an auth failure
        identity: Identity | None
        if routed.operation is Operation.PostObject:
            # A browser form upload is signed by fields of its body: the handler verifies and
            # authorizes it (server/handlers/post_object.py).
            auth, identity = FORM_UPLOAD_AUTH, None
        elif has_credentials(to_verify):
            auth = authenticate(to_verify, self.credentials, now=datetime.now(UTC), max_skew=self.max_skew)
            identity = self.credentials.identity(auth.access_key)
        else:
            # Unsigned: the anonymous principal, whom only a policy or an ACL lets in.
            auth, identity = anonymous_auth(headers), ANONYMOUS
        if identity is not None and routed.operation is not Operation.DeleteObjects:  # per key in its handler
            await self.authorizer.check(
                identity,
                routed.operation,
                routed.bucket,
                key=routed.key,
                request=request,
                query=query,
                auth_scheme=None if identity.anonymous else auth.scheme,
            )
        handler = HANDLERS.get(routed.operation)
        if handler is None:
            raise s3.NotImplemented(f"{routed.operation.value} is not implemented")
        req = S3Request(
            operation=routed.operation,
            bucket_name=routed.bucket,
            key_name=routed.key,
            query=query,
            headers=headers,
            request=request,
            auth=auth,
            store=self.store,
            config=self.config,
            lifecycle=self.lifecycle,
            identity=identity,
            authorizer=self.authorizer,
            cors=self.cors,
            credentials=self.credentials,
            request_id=request_id,
        )
        try:
            return await handler(req)
        except ObjectNotFound as exc:  # checked outside the handler: see setup.py
            missing = exc
        # S3 tells a missing key (404) only to a caller that may list the bucket; to anyone
        # else it answers 403, so that keys cannot be probed for.
        if routed.bucket and identity is not None and not identity.is_admin:
            await self.authorizer.check(
                identity,
                Operation.ListObjectsV2,
                routed.bucket,
                request=request,
                query={"prefix": routed.key or ""},
            )
        raise missing

    async def _preflight(self, request: Request, headers: RequestHeaders, raw_path: str) -> Response:
        """A CORS preflight (OPTIONS), answered from the bucket's rules: no signature needed."""
        request.scope["state"]["operation"] = "PreflightRequest"  # see `handle`
        bucket, is_object = preflight_target(
            raw_path, headers.get("host", ""), self.config.virtual_host_domains
        )
        return Response(b"", headers=await self.cors.preflight(bucket, is_object, headers))

    async def _add_cors_headers(self, request: Request, headers: RequestHeaders, response: Response) -> None:
        """The CORS headers the bucket's rules grant this Origin: on successes and errors alike."""
        bucket = request.scope["state"].get("bucket")  # see `handle`
        if not bucket:
            return
        try:
            response.headers.update(await self.cors.actual(bucket, request.method, headers))
        except Exception:  # the answer itself is ready: a failed rules lookup must not lose it
            log.exception("CORS rules of %r could not be read", bucket)

    @staticmethod
    def _error(exc: s3.S3Error, method: str, resource: str, request_id: str) -> Response:
        headers = exc.extra_headers()
        if exc.status == 304:
            return Response(status_code=304, headers=headers)
        if method == "HEAD":
            # A HEAD answer has no body; the status and the request id tell the client enough.
            headers["x-amz-error-code"] = exc.code
            return Response(status_code=exc.status, headers=headers)
        body = exc.to_xml(resource=resource, request_id=request_id)
        return Response(body, status_code=exc.status, headers=headers, media_type="application/xml")


class S3FastLane:
    """The ASGI entry point: S3 requests go straight to the gateway, the rest to the FastAPI app.

    All of S3 is one catch-all route anyway (its routing needs the query and the Host header, see
    `server.router`), so FastAPI's router and its exception, telemetry and body-limit middlewares
    would only add cost to the path that carries the data (about a sixth of a small GET's CPU).
    The FastAPI app keeps the lifespan (store start/stop), the admin API, metrics, health and the
    status page: every path under /_tierstore/, and /metrics (which itself hands a signed request
    for the bucket "metrics" back to the gateway).
    """

    def __init__(self, app: FastAPI, gateway: Gateway) -> None:
        self.app = app
        self.gateway = gateway

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http":
            await self.gateway.catch_up()
        if scope["type"] != "http" or path == "/metrics" or path.startswith("/_tierstore/"):
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        request._headers = asgi_headers(scope["headers"])  # type: ignore[assignment]  # see headers_of
        response = await self.gateway.handle(request)
        await response(scope, receive, send)


class Lifespan:
    """The app's lifespan: the store, the lifecycle and the gateway's background tasks run while
    the app serves. A class rather than an `asynccontextmanager` generator: this module runs
    compiled (setup.py), and mypyc compiles no async generators."""

    def __init__(self, store: ObjectStore, lifecycle: Lifecycle, gateway: Gateway) -> None:
        self.store = store
        self.lifecycle = lifecycle
        self.gateway = gateway
        self.tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> None:
        await self.store.start()
        await self.lifecycle.start()
        mirror = self.gateway.metrics.start_mirror()
        self.tasks = [*self.gateway.background_tasks(), *([mirror] if mirror else [])]

    async def __aexit__(self, *exc_info: object) -> None:
        for task in self.tasks:
            task.cancel()
        await self.lifecycle.close()
        await self.store.close()
        if self.store.runtime_dir is not None:
            await asyncio.to_thread(runtime_dir.remove_if_unused, self.store.runtime_dir)


def create_app(config: ServerConfig, store: ObjectStore | None = None) -> ASGIApp:
    """The ASGI app. The store starts and stops with the app (its collector runs meanwhile)."""
    store = store or build_store(config)
    lifecycle = build_lifecycle(config, store, run_daemon=config.lifecycle.enabled)
    gateway = Gateway(config, store, lifecycle)

    app = FastAPI(
        lifespan=lambda _: Lifespan(store, lifecycle, gateway),
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        **_NO_FRAMEWORK_TELEMETRY,
    )
    app.state.gateway = gateway
    # One catch-all route: S3 routing depends on query sub-resources and the Host header,
    # which path templates cannot express; `server.router` does it instead.
    admin = AdminApi(gateway)
    app.router.routes.append(StarletteRoute(ADMIN_PREFIX + "{rest:path}", admin.handle, methods=ALL_METHODS))
    OpsEndpoints(gateway).install(app)  # /metrics, /_tierstore/health, the status page
    # Reached only through the fast lane's hand-offs (e.g. /metrics signed = bucket "metrics").
    path_convertor.register()
    app.router.routes.append(StarletteRoute("/{path:s3path}", gateway.handle, methods=ALL_METHODS))
    return RequestObserver(
        S3FastLane(app, gateway), metrics=gateway.metrics, access_log_enabled=config.access_log
    )
