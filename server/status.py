"""Operator endpoints beside the S3 API: /metrics, /_tierstore/health and the status page.

- `GET /metrics` without any signature is a Prometheus scrape; a signed one (or one addressed to
  a virtual-hosted bucket) is S3's ListObjects of a bucket named "metrics", as before. Anonymous
  S3 requests are refused anyway, so the scrape takes nothing from S3 clients.
  `GET /_tierstore/metrics` is the same scrape, and there a request signed by an administrator
  also gets the per bucket series. Bucket names are tenants' data and the scrape needs no
  credentials, so an unsigned scrape has them only with `[metrics] per_bucket = true`.
- `GET /_tierstore/health` answers 200 "ok" while the catalog answers, 503 otherwise; no
  credentials (container health checks and load balancers call it).
- `GET /_tierstore/` is a small HTML page whose script polls `/_tierstore/status.json`: tiers
  with fill and temperature, failure domains, heal progress and the mover. Who may read it is
  `server.status_page`: "loopback" (the default: clients on 127.0.0.0/8 or ::1), "authenticated"
  (SigV4, in headers or a presigned URL), or "off". Anyone it admits sees the aggregate view;
  bucket names, lost objects' keys and the domains' paths on disk only a request signed by an
  administrator (`tierstore admin user add --admin`, or the root keys).

Bucket names cannot contain "_", so none of the /_tierstore/ paths shadows a bucket; on a
virtual-hosted bucket's host they are object keys and go to the gateway.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import time
from importlib import resources
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from server import errors as s3
from server.router import bucket_from_host
from tiering import nodes
from tiering.domains import list_domains

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from server.app import Gateway

STATUS_PREFIX = "/_tierstore/"
STATUS_PAGE_MODES = ("loopback", "authenticated", "off")
ASSETS = {"status.js": "text/javascript", "status.css": "text/css"}
MAX_LOST_LISTED = 100
TOP_BUCKETS = 20


def _signed(request: Request) -> bool:
    query = request.query_params
    return "authorization" in request.headers or "X-Amz-Signature" in query or "Signature" in query


def _loopback(request: Request) -> bool:
    client = request.client
    if client is None:
        return False
    try:
        return ipaddress.ip_address(client.host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _page_file(name: str) -> bytes:
    return resources.files("server").joinpath("status_page", name).read_bytes()


class OpsEndpoints:
    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.mode = gateway.config.status_page

    def routes(self) -> list[Route]:
        return [
            Route("/metrics", self.metrics, methods=["GET"]),
            Route(STATUS_PREFIX + "metrics", self.tierstore_metrics, methods=["GET"]),
            Route(STATUS_PREFIX + "health", self.health, methods=["GET", "HEAD"]),
            Route(STATUS_PREFIX, self.page, methods=["GET"]),
            Route(STATUS_PREFIX + "status.json", self.status_json, methods=["GET"]),
            Route(STATUS_PREFIX + "static/{name}", self.asset, methods=["GET"]),
        ]

    def install(self, app: Starlette) -> None:
        app.router.routes.extend(self.routes())

    def _virtual_host(self, request: Request) -> bool:
        return (
            bucket_from_host(request.headers.get("host", ""), self.gateway.config.virtual_host_domains)
            is not None
        )

    async def metrics(self, request: Request) -> Response:
        if _signed(request) or self._virtual_host(request):
            return await self.gateway.handle(request)  # ListObjects of the bucket "metrics"
        await self.gateway.sync_workers()  # every worker's figures as of this scrape
        return await self.gateway.metrics.endpoint(request)

    async def tierstore_metrics(self, request: Request) -> Response:
        if self._virtual_host(request):
            return await self.gateway.handle(request)
        try:
            administrator = self._administrator(request)
        except s3.S3Error as exc:
            request.state.operation = "Metrics"
            return PlainTextResponse(
                f"{exc.code}: bad signature on a metrics scrape\n", status_code=exc.status
            )
        await self.gateway.sync_workers()
        return await self.gateway.metrics.endpoint(request, administrator=administrator)

    def _administrator(self, request: Request) -> bool:
        """Whether the request is signed by an administrator (S3Error: signed, but not validly)."""
        if not _signed(request):
            return False
        auth = self.gateway.authenticate_request(request)
        return self.gateway.credentials.identity(auth.access_key).is_admin

    async def health(self, request: Request) -> Response:
        if self._virtual_host(request):
            return await self.gateway.handle(request)
        request.state.operation = "Health"
        try:
            await asyncio.to_thread(self.gateway.store.catalog.get_setting, "health-probe")
        except Exception as exc:  # any failure to read the catalog means "not up"
            return PlainTextResponse(f"catalog unavailable: {type(exc).__name__}\n", status_code=503)
        return PlainTextResponse("ok\n")

    def _refused(self, request: Request) -> Response | None:
        """None if this client may read the status page, else the answer to give it."""
        if self.mode == "off":
            return PlainTextResponse("the status page is off (server.status_page)\n", status_code=404)
        if self.mode == "loopback":
            if _loopback(request):
                return None
            return PlainTextResponse(
                "the status page answers loopback clients only (server.status_page)\n", status_code=403
            )
        try:
            self.gateway.authenticate_request(request)
        except s3.S3Error as exc:
            return PlainTextResponse(
                f"{exc.code}: the status page needs a signed request\n", status_code=exc.status
            )
        return None

    async def page(self, request: Request) -> Response:
        if self._virtual_host(request):
            return await self.gateway.handle(request)
        request.state.operation = "StatusPage"
        if self.mode == "off":
            return PlainTextResponse("the status page is off (server.status_page)\n", status_code=404)
        # The page itself holds no data; status.json enforces who may read it.
        return Response(
            _page_file("index.html"),
            media_type="text/html; charset=utf-8",
            headers={"cache-control": "no-store"},
        )

    async def asset(self, request: Request) -> Response:
        name = request.path_params["name"]
        if self._virtual_host(request):
            return await self.gateway.handle(request)
        request.state.operation = "StatusPage"
        if name not in ASSETS or self.mode == "off":
            return PlainTextResponse("not found\n", status_code=404)
        return Response(_page_file(name), media_type=ASSETS[name], headers={"cache-control": "no-cache"})

    async def status_json(self, request: Request) -> Response:
        if self._virtual_host(request):
            return await self.gateway.handle(request)
        request.state.operation = "StatusPage"
        refused = self._refused(request)
        if refused is not None:
            return refused
        try:
            administrator = self._administrator(request)
        except s3.S3Error as exc:
            return PlainTextResponse(
                f"{exc.code}: the status page needs a valid signature\n", status_code=exc.status
            )
        # Every worker's heal and lifecycle progress (server/worker_progress.py), read on the loop.
        heal, lifecycle = await self.gateway.heal_report(), await self.gateway.lifecycle_report()
        body = await asyncio.to_thread(
            self.snapshot, administrator=administrator, heal=heal, lifecycle=lifecycle
        )
        return Response(
            json.dumps(body, default=str),
            media_type="application/json",
            headers={"cache-control": "no-store"},
        )

    def snapshot(
        self,
        *,
        administrator: bool = False,
        heal: dict[str, Any] | None = None,
        lifecycle: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Everything the status page shows (blocking: reads the catalog).

        Not for an `administrator`: the aggregate view, without bucket names, lost objects' keys
        and the domains' paths on disk (`buckets` and `heal.lost` absent, `bucket_count` kept).
        """
        gateway = self.gateway
        store, view, daemon = gateway.store, gateway.metrics.view, gateway.lifecycle.daemon
        pending = daemon.pending_by_tier()
        tiers = view.tiers()
        for tier in tiers:
            tier["pending_moves"] = pending.get(tier["name"], 0)
        heal = dict(heal or store.maintenance.progress.to_json())
        heal["lost"] = heal["lost"][:MAX_LOST_LISTED]
        buckets = view.buckets()
        top = sorted(buckets.items(), key=lambda item: item[1]["bytes"], reverse=True)[:TOP_BUCKETS]
        now = time.time()
        domains = list_domains(store)
        # Storage nodes (tiering.nodes) with up/down; where they listen only for an administrator.
        node_rows = [
            {k: v for k, v in n.items() if k in ("name", "rack", "zone", "state", "heartbeat_age", "address")}
            for n in nodes.node_status(store.catalog)
        ]
        if not administrator:
            del heal["lost"]
            for domain in domains:
                domain.pop("path", None)
            for node in node_rows:
                node.pop("address", None)
        snapshot = {
            "server": {
                "listen": gateway.config.listen,
                "region": gateway.config.region,
                "started": gateway.metrics.started,
                "uptime_seconds": now - gateway.metrics.started,
                "now": now,
                "heat_half_life_seconds": view.half_life,
                "slow_stats_age_seconds": time.time() - view.slow().at,
            },
            "tiers": tiers,
            "domains": domains,
            "nodes": node_rows,
            "heal": heal,
            "lifecycle": lifecycle or daemon.status(),
            "bucket_count": len(buckets),
            "administrator": administrator,
        }
        if administrator:
            snapshot["buckets"] = [{"name": name, **entry} for name, entry in top]
        return snapshot
