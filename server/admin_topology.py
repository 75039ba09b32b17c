"""Admin endpoints for changing a running cluster's shape (dispatched from `server.admin`):

    POST   domains/add?tier=&path=&node=&rack=[&zone=&weight=&id=&wait=]
    POST   domains/<drive|tier-node>/drain[?wait=]
    GET    domains/<drive|tier-node>/drain         (how far from removable: blobs, writers, retired files)
    POST   domains/<drive|tier-node>/remove        (also DELETE domains/<target>)
    POST   tiers/<tier>/recode?k=&m=[&wait=]
    POST   rebalance[?wait=]
    POST   nodes/<name>/drain[?wait=]          (every tier's drives on a storage node: tiering.nodes)
    POST   nodes/<name>/remove
    GET    rebalance

`wait=true` answers only when the rebalance the change asked for has finished; for a drain, only
when the domain can be removed (`tiering.rebalance.wait_drained`). The work itself is
`tiering.rebalance`; this module only translates HTTP to it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from tiering import nodes, rebalance
from tiering.domains import UnknownDomain

if TYPE_CHECKING:
    from tiering.store import ObjectStore


def _json(value: Any, status: int = 200) -> Response:
    return Response(
        json.dumps(value, indent=2, default=str), status_code=status, media_type="application/json"
    )


def _error(code: str, message: str, status: int) -> Response:
    return _json({"error": code, "message": message}, status)


async def handle(store: ObjectStore, request: Request, parts: list[str]) -> Response:
    params = request.query_params
    wait = params.get("wait", "").lower() in ("1", "true", "yes")
    try:
        match parts:
            case ["domains", "add"]:
                result = await rebalance.add_domain(
                    store,
                    params.get("tier", ""),
                    params.get("path", ""),
                    params.get("node", ""),
                    params.get("rack", ""),
                    zone=params.get("zone") or "zone1",
                    weight=float(params.get("weight") or 0.0),
                    domain_id=params.get("id") or None,
                )
            case ["domains", target, "drain"] if request.method == "GET":
                return _json(await rebalance.drain_state(store, target))
            case ["domains", target, "drain"]:
                result = await rebalance.drain_domain(store, target)
                token = await store.rebalancer.request()
                if wait:
                    result["drain"] = await rebalance.wait_drained(store, target, token)
                result["rebalance"] = await store.rebalancer.status()
                return _json(result)
            case ["nodes", name, "drain"]:
                return _json(await nodes.drain_node(store, name, wait))
            case ["nodes", name, "remove"]:
                return _json(await nodes.remove_node(store, name))
            case ["domains", target, "remove"]:
                return _json(await rebalance.remove_domain(store, target))
            case ["tiers", tier, "recode"]:
                result = await rebalance.recode_tier(
                    store, tier, int(params.get("k", "0")), int(params.get("m", "-1"))
                )
            case ["rebalance"]:
                if request.method == "GET":
                    return _json(await store.rebalancer.status())
                result = {}
            case _:
                return _error("NotFound", f"no admin endpoint {request.method} {'/'.join(parts)}", 404)
    except UnknownDomain as exc:
        what = "node" if parts[0] == "nodes" else "domain"
        return _error("NoSuchNode" if what == "node" else "NoSuchDomain", f"no {what} {exc.args[0]!r}", 404)
    except rebalance.RebalanceRefused as exc:
        return _error(exc.code, str(exc), exc.status)
    except ValueError as exc:
        return _error("InvalidArgument", str(exc), 400)
    token = await store.rebalancer.request()
    if wait:
        result["rebalance"] = await store.rebalancer.wait(token)
    else:
        result["rebalance"] = await store.rebalancer.status()
    return _json(result)
