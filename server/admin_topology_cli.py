"""`tierstore admin domain add|drain|remove`, `admin rebalance [status]`, `admin tier recode`.

Parsers are declared in `server.admin_cli`; this module runs them against `server.admin_topology`.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from server.progress import progress_bar

Call = Callable[[argparse.Namespace, str, str, str], Any]


def add_parsers(
    verbs: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    rebalance = verbs.add_parser(
        "rebalance",
        parents=[common],
        help="move shards to where placement wants them (after domain add/drain, tier recode); or show progress",
    )
    rebalance.add_argument("action", nargs="?", choices=["run", "status"], default="run")
    rebalance.add_argument("--wait", action="store_true", help="return only when the data is in place")
    tier = verbs.add_parser(
        "tier", parents=[common], help="change an erasure-coded tier: recode T --k K --m M"
    )
    tier.add_argument("action", choices=["recode"])
    tier.add_argument("tier")
    tier.add_argument("--k", type=int, required=True, help="data shards per stripe for new writes")
    tier.add_argument("--m", type=int, required=True, help="parity shards per stripe for new writes")
    tier.add_argument("--wait", action="store_true", help="return when every object is re-striped")
    node = verbs.add_parser(
        "node",
        parents=[common],
        help="a storage node: drain NAME [--wait] (move every shard off it), remove NAME",
    )
    node.add_argument("action", choices=["drain", "remove"])
    node.add_argument("name")
    node.add_argument("--wait", action="store_true", help="drain: return when the node can be removed")


def add_domain_options(domain: argparse.ArgumentParser) -> None:
    domain.add_argument("--tier", help="add: the erasure-coded tier (hot, warm, cold)")
    domain.add_argument("--path", help="add: the drive's directory")
    domain.add_argument("--node", help="add: the node it belongs to (a new name: a new node)")
    domain.add_argument("--rack", help="add: its rack")
    domain.add_argument("--zone", help="add: its zone (default zone1)")
    domain.add_argument("--weight", type=float, help="add: capacity weight (default: the file system's TiB)")
    domain.add_argument("--id", help="add: the drive id (default <tier>-<node>-d<n>)")
    domain.add_argument("--wait", action="store_true", help="add/drain: return when the rebalance is done")


def handles(args: argparse.Namespace) -> bool:
    return args.verb in ("rebalance", "tier", "node") or (
        args.verb == "domain" and args.action in ("add", "drain", "remove")
    )


def _follow(args: argparse.Namespace, call: Call) -> dict[str, Any]:
    """Wait for the rebalance with a progress bar (a terminal, no --json) instead of one long call."""
    while True:
        state = call(args, "GET", "rebalance", "")
        done = not state.get("running") and not state.get("pending")
        progress_bar(
            "rebalance: shards moved",
            state.get("shards_moved", 0),
            state.get("shards_planned", 0),
            final=done,
        )
        if done:
            return state
        time.sleep(0.5)


def _follow_drain(args: argparse.Namespace, call: Call, path: str) -> dict[str, Any]:
    """`domain drain --wait` on a terminal: the server waits (`wait=true`: until the domain can be
    removed) while this shows the shards moving, then the readers' grace running out."""
    answer: dict[str, Any] = {}

    def drain() -> None:
        try:
            answer["result"] = call(args, "POST", path, "wait=true")
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            answer["error"] = exc

    worker = threading.Thread(target=drain, daemon=True)
    worker.start()
    grace = 0.0
    while worker.is_alive():
        worker.join(0.5)
        if not worker.is_alive():
            break
        moving = call(args, "GET", "rebalance", "")
        if moving.get("running") or moving.get("pending"):
            progress_bar(
                "drain: shards moved", moving.get("shards_moved", 0), moving.get("shards_planned", 0)
            )
            continue
        state = call(args, "GET", path, "")
        if state.get("retired_files"):
            left = float(state["retired_wait_seconds"])
            grace = max(grace, left)  # the bar fills as the readers' grace on the moved-away files runs out
            progress_bar(
                f"drain: readers' grace, {left:.0f}s left ({state['retired_files']} retired files)",
                int(grace - left),
                int(grace) or 1,
            )
    if "error" in answer:
        raise answer["error"]
    progress_bar("drain: done", 1, 1, final=True)
    return answer["result"]


def run(args: argparse.Namespace, call: Call, fmt: Callable[[Any], str]) -> int:
    follow = getattr(args, "wait", False) and not args.json and sys.stderr.isatty() and args.verb != "node"
    if follow and args.verb == "domain" and args.action == "drain" and args.target:
        drained = _follow_drain(args, call, f"domains/{urllib.parse.quote(args.target, safe='')}/drain")
        print(f"drained {', '.join(drained['domains'])}: nothing left on it, ready to remove")
        print(_progress(drained["rebalance"], fmt))
        return 0
    wait = "wait=true" if getattr(args, "wait", False) and not follow else ""
    result = _run(args, call, fmt, wait)
    if follow:
        print(_progress(_follow(args, call), fmt))
    return result


def _run(args: argparse.Namespace, call: Call, fmt: Callable[[Any], str], wait: str) -> int:
    if args.verb == "rebalance":
        if args.action == "status":
            result = call(args, "GET", "rebalance", "")
        else:
            result = call(args, "POST", "rebalance", wait)
            result = result.get("rebalance", result)
        print(json.dumps(result, indent=2) if args.json else _progress(result, fmt))
        return 0
    if args.verb == "node":
        quoted = urllib.parse.quote(args.name, safe="")
        # No progress bar here: the server answers when the node can be removed.
        result = call(args, "POST", f"nodes/{quoted}/{args.action}", "wait=true" if args.wait else "")
        if args.json:
            print(json.dumps(result, indent=2))
        elif args.action == "remove":
            print(f"removed node {args.name}: {', '.join(result['domains'])}")
        else:
            done = "nothing left on it, ready to remove" if result["status"] == "drained" else "draining"
            print(f"node {args.name} ({', '.join(result['domains'])}): {done}")
            print(_progress(result["rebalance"], fmt))
        return 0
    if args.verb == "tier":
        result = call(
            args,
            "POST",
            f"tiers/{urllib.parse.quote(args.tier, safe='')}/recode",
            "&".join(filter(None, [f"k={args.k}", f"m={args.m}", wait])),
        )
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            prev = result["previous"]
            print(
                f"tier {result['tier']}: {prev['k']}+{prev['m']} -> {result['k']}+{result['m']} for new writes"
            )
            print(_progress(result["rebalance"], fmt))
        return 0
    if args.action == "add":
        query = {
            "tier": args.tier,
            "path": args.path,
            "node": args.node,
            "rack": args.rack,
            "zone": args.zone,
            "weight": args.weight,
            "id": args.id,
        }
        missing = [k for k in ("tier", "path", "node", "rack") if not query[k]]
        if missing:
            raise SystemExit(f"tierstore admin domain add: needs {', '.join('--' + k for k in missing)}")
        encoded = urllib.parse.urlencode(
            {k: v for k, v in query.items() if v is not None}, quote_via=urllib.parse.quote
        )  # SigV4 wants %20, not "+"
        result = call(args, "POST", "domains/add", "&".join(filter(None, [encoded, wait])))
        what = f"added {result['id']} to {result['tier']} (node {result['node']}, rack {result['rack']})"
    elif not args.target:
        raise SystemExit(f"tierstore admin domain {args.action}: name the drive or node (hot-n3)")
    elif args.action == "drain":
        result = call(args, "POST", f"domains/{urllib.parse.quote(args.target, safe='')}/drain", wait)
        what = (
            f"drained {', '.join(result['domains'])}: nothing left on it, ready to remove"
            if "drain" in result
            else f"draining {', '.join(result['domains'])}"
        )
    else:
        result = call(args, "POST", f"domains/{urllib.parse.quote(args.target, safe='')}/remove", "")
        what = f"removed {', '.join(result['domains'])}"
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(what)
        if "rebalance" in result:
            print(_progress(result["rebalance"], fmt))
    return 0


def _progress(p: dict[str, Any], fmt: Callable[[Any], str]) -> str:
    state = "pending" if p.get("pending") and not p.get("running") else p.get("state", "idle")
    lines = [
        f"rebalance: {state}, passes {p.get('passes', 0)}, "
        f"shards moved {p.get('shards_moved', 0)}/{p.get('shards_planned', 0)} "
        f"({fmt(p.get('bytes_moved', 0))} of {fmt(p.get('bytes_planned', 0))}), "
        f"objects re-striped {p.get('objects_restriped', 0)}/{p.get('objects_planned', 0)}",
    ]
    if p.get("running"):
        eta = p.get("eta_seconds")
        lines.append(
            f"  rate {fmt(int(p.get('rate_bytes_per_second') or 0))}/s, "
            f"ETA {'unknown' if eta is None else f'{eta:.0f}s'}"
        )
    extra = {k: p.get(k, 0) for k in ("conflicts", "failures", "blocked", "unplaceable") if p.get(k)}
    if extra:
        lines.append("  " + ", ".join(f"{k} {v}" for k, v in extra.items()))
    for tier in p.get("tiers", []):
        drain = f", draining {', '.join(tier['draining'])}" if tier["draining"] else ""
        lines.append(
            f"  {tier['tier']}: {tier['k']}+{tier['m']} over {tier['active_groups']} active "
            f"{tier['spread_level']}s ({tier['domains']} domains){drain}"
        )
    return "\n".join(lines)
