"""`tierstore admin ...`: talk to a running server's admin API, print tables or JSON."""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from typing import Any

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from server import admin_topology_cli as topology_cli
from server.config import DEFAULT_ACCESS_KEY, DEFAULT_SECRET_KEY
from server.progress import progress_bar


def add_admin_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    # The common options work before or after the verb (`admin --json status`, `admin status --json`).
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--endpoint",
        default=argparse.SUPPRESS,
        help="server URL (default $TIERSTORE_ENDPOINT or http://127.0.0.1:9000)",
    )
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print JSON for scripts"
    )
    common.add_argument(
        "--insecure",
        action="store_true",
        default=argparse.SUPPRESS,
        help="do not verify the server's TLS certificate",
    )
    admin = commands.add_parser("admin", help="inspect and operate a running server", parents=[common])
    verbs = admin.add_subparsers(dest="verb", required=True)
    verbs.add_parser("status", parents=[common], help="tiers, domains, degraded/lost objects, heal progress")
    verbs.add_parser("domains", parents=[common], help="every failure domain with state and usage")
    verbs.add_parser("nodes", parents=[common], help="storage nodes: address, rack, zone, drives, up/down")
    domain = verbs.add_parser(
        "domain",
        parents=[common],
        help="take a domain (drive, node, rack, zone) offline or online; add, drain, remove",
    )
    domain.add_argument("action", choices=["offline", "online", "add", "drain", "remove"])
    domain.add_argument("target", nargs="?", help="a drive id (hot-n1-d2) or tier-node/rack/zone (hot-n1)")
    topology_cli.add_domain_options(domain)
    topology_cli.add_parsers(verbs, common)
    heal = verbs.add_parser(
        "heal", parents=[common], help="verify every shard now and rebuild what is missing or corrupt"
    )
    heal.add_argument("--wait", action="store_true", help="return only when the pass is complete")
    check = verbs.add_parser(
        "fsck",
        parents=[common],
        help="cross-check catalog and shards: dangling references, lost objects, orphans "
        "(exit 1 when not clean)",
    )
    check.add_argument("--verify", action="store_true", help="also read every block and check its checksum")
    check.add_argument(
        "--repair",
        action="store_true",
        help="hand the orphans to the garbage collector (never touches referenced data)",
    )
    check.add_argument(
        "--orphan-age",
        type=float,
        default=None,
        metavar="SECONDS",
        help="only unreferenced shards older than this are orphans (default 3600: younger "
        "ones may belong to a write in flight)",
    )
    clock = verbs.add_parser(
        "clock", parents=[common], help="the test clock (server started with --test-clock)"
    )
    clock.add_argument("action", choices=["advance", "show"])
    clock.add_argument("days", nargs="?", type=float, default=0.0)
    lifecycle = verbs.add_parser("lifecycle", parents=[common], help="the lifecycle daemon")
    lifecycle.add_argument("action", choices=["run", "status"])
    lifecycle.add_argument("--wait", action="store_true", help="return when the pass and its moves are done")
    restore = verbs.add_parser(
        "restore", parents=[common], help="restore every archived object under a prefix (bulk RestoreObject)"
    )
    restore.add_argument("bucket")
    restore.add_argument("--prefix", default="")
    restore.add_argument("--days", type=int, default=1, help="how long the restored copies stay")
    restore.add_argument("--wait", action="store_true", help="return when every copy is readable")
    user = verbs.add_parser("user", parents=[common], help="S3 users: add, list, remove; their policies")
    user.add_argument("action", choices=["add", "list", "remove", "policy"])
    user.add_argument(
        "name", nargs="?", help="add: the user's name; remove: the access key; policy: set | get | delete"
    )
    user.add_argument(
        "policy_args",
        nargs="*",
        metavar="ARG",
        help="policy set NAME FILE.json | policy get NAME | policy delete NAME "
        "(an IAM policy document: what the user may do besides its own buckets)",
    )
    user.add_argument("--access-key", help="add: choose the access key (default: generated)")
    user.add_argument("--secret-key", help="add: choose the secret key (default: generated)")
    user.add_argument("--admin", action="store_true", help="add: may use the admin API and every bucket")
    verbs.add_parser(
        "tiers", parents=[common], help="per tier: objects, bytes, capacity, heat, pending moves"
    )
    encryption = verbs.add_parser(
        "encryption",
        parents=[common],
        help="encryption at rest: rotate the master key (re-wraps data keys), show it",
    )
    encryption.add_argument("action", choices=["rotate", "show"])
    obj = verbs.add_parser("object", parents=[common], help="one object's tier, heat, last access and moves")
    obj.add_argument("bucket")
    obj.add_argument("key")


def _call(args: argparse.Namespace, method: str, path: str, query: str = "", body: bytes = b"") -> Any:
    url = args.endpoint.rstrip("/") + "/_tierstore/admin/" + path + (f"?{query}" if query else "")
    credentials = Credentials(
        os.environ.get("TIERSTORE_ACCESS_KEY", DEFAULT_ACCESS_KEY),
        os.environ.get("TIERSTORE_SECRET_KEY", DEFAULT_SECRET_KEY),
    )
    signed = AWSRequest(method=method, url=url, data=body)
    S3SigV4Auth(credentials, "s3", os.environ.get("AWS_DEFAULT_REGION", "us-east-1")).add_auth(signed)
    request = urllib.request.Request(
        url, method=method, headers=dict(signed.headers.items()), data=body or None
    )
    context = ssl._create_unverified_context() if args.insecure else None  # noqa: S323 - operator's choice
    try:
        with urllib.request.urlopen(request, timeout=3600, context=context) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        text = exc.read()
        try:
            problem = json.loads(text or b"{}")
        except ValueError:  # not the admin API's JSON (a proxy's page, an older server): shown as is
            problem = {"message": text.decode(errors="replace").strip()[:500]}
        raise SystemExit(
            f"tierstore admin: {problem.get('error', exc.code)}: {problem.get('message', '')}"
        ) from None
    except urllib.error.URLError as exc:
        raise SystemExit(f"tierstore admin: cannot reach {args.endpoint}: {exc.reason}") from None


def _when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if timestamp else "never"


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    cells = [[_fmt(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, int) and value > 10_000:
        for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
            if value < 1024:
                return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
            value /= 1024
        return f"{value:.1f}PiB"
    return str(value)


def run_admin(args: argparse.Namespace) -> int:
    args.endpoint = getattr(args, "endpoint", None) or os.environ.get(
        "TIERSTORE_ENDPOINT", "http://127.0.0.1:9000"
    )
    args.json = getattr(args, "json", False)
    args.insecure = getattr(args, "insecure", False)
    if args.verb == "status":
        result = _call(args, "GET", "status")
        if args.json:
            print(json.dumps(result, indent=2))
            return 0
        print(
            _table(
                result["tiers"],
                ["name", "backend", "objects", "bytes", "k", "m", "domains", "domains_online"],
            )
        )
        heal = result["heal"]
        print(f"\ndegraded objects: {result['degraded_objects']}   lost objects: {result['lost_objects']}")
        print(
            f"heal: {'running' if heal['running'] else 'idle'}, passes {heal['passes']}, "
            f"checked {heal['blobs_checked']}/{heal['blobs_total']}, shards healed {heal['shards_healed']}, "
            f"relocated {heal['relocated']}"
        )
        for lost in heal["lost"]:
            print(f"LOST: {lost['tier']} {lost['bucket']}/{lost['key']}")
        return 0
    if args.verb == "domains":
        rows = _call(args, "GET", "domains")
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            print(
                _table(
                    rows,
                    [
                        "id",
                        "tier",
                        "node",
                        "rack",
                        "state",
                        "health",
                        "shards",
                        "used_bytes",
                        "free_bytes",
                        "path",
                        "health_detail",
                    ],
                )
            )
        return 0
    if args.verb == "nodes":
        rows = _call(args, "GET", "nodes")
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            for row in rows:
                row["drives"] = ",".join(d["name"] for d in row["drives"])
            print(_table(rows, ["name", "state", "address", "rack", "zone", "drives", "heartbeat_age"]))
        return 0
    if topology_cli.handles(args):
        return topology_cli.run(args, _call, _fmt)
    if args.verb == "domain":
        result = _call(args, "POST", f"domains/{args.target}/{args.action}")
        print(json.dumps(result, indent=2) if args.json else f"{args.action}: {', '.join(result['domains'])}")
        return 0
    if args.verb == "heal":
        if args.wait and not args.json and sys.stderr.isatty():
            result = _heal_with_progress(args)
        else:
            result = _call(args, "POST", "heal", "wait=true" if args.wait else "")
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            state = "running" if result["running"] else "done"
            print(
                f"heal {state}: checked {result['blobs_checked']}/{result['blobs_total']} blobs, "
                f"{result['shards_healed']} shards healed, {result['relocated']} relocated, "
                f"{result['degraded_objects']} degraded, {result['lost_objects']} lost"
            )
        return 0
    if args.verb == "fsck":
        return _fsck(args)
    if args.verb == "clock":
        if args.action == "advance":
            result = _call(args, "POST", "clock/advance", urllib.parse.urlencode({"days": args.days}))
        else:
            result = _call(args, "GET", "clock")
        print(
            json.dumps(result, indent=2)
            if args.json
            else f"clock: {_when(result['now'])} (offset {result['offset_seconds'] / 86400:.2f} days)"
        )
        return 0
    if args.verb == "lifecycle":
        if args.action == "run":
            result = _call(args, "POST", "lifecycle/run", "wait=true" if args.wait else "")
        else:
            result = _call(args, "GET", "lifecycle")
        skipped = (result.get("pass") or {}).get("skipped")
        if args.json:
            print(json.dumps(result, indent=2))
        if skipped:  # `run --wait` asked for a pass and none ran: say why, and fail
            print(f"tierstore admin: lifecycle pass not run: {skipped}", file=sys.stderr)
            return 1
        if not args.json:
            done = result.get("pass") or result.get("last_pass") or {}
            print(
                f"lifecycle: passes {result['passes']}, last pass scanned {done.get('scanned', 0)}, "
                f"transitions {done.get('transitions', 0)}, expired {done.get('expired', 0)}, "
                f"restores {done.get('restores_started', 0)}"
            )
            for move in result["mover"]["moves"]:
                print(
                    f"  moved {move['count']} objects ({_fmt(move['bytes'])}) {move['from']} -> {move['to']}"
                )
        return 0
    if args.verb == "user":
        return _user(args)
    if args.verb == "restore":
        return _bulk_restore(args)
    if args.verb == "encryption":
        result = (
            _call(args, "POST", "encryption/rotate")
            if args.action == "rotate"
            else _call(args, "GET", "encryption")
        )
        if args.json:
            print(json.dumps(result, indent=2))
        elif args.action == "rotate":
            print(
                f"master key {result['current_key_id']} is current; {result['rewrapped']} data keys re-wrapped"
            )
        else:
            print(f"master key {result['current_key_id']} is current")
        return 0
    if args.verb == "tiers":
        rows = _call(args, "GET", "tiers")
        if args.json:
            print(json.dumps(rows, indent=2))
            return 0
        for row in rows:
            row["heat (le:count)"] = " ".join(f"{k}:{v}" for k, v in row["heat_histogram"].items())
        print(
            _table(
                rows,
                ["name", "backend", "objects", "bytes", "capacity_bytes", "pending_moves", "heat (le:count)"],
            )
        )
        return 0
    if args.verb == "object":
        result = _call(
            args,
            "GET",
            "object",
            urllib.parse.urlencode(
                {"bucket": args.bucket, "key": args.key},
                quote_via=urllib.parse.quote,  # SigV4 wants %20, not "+"
            ),
        )
        if args.json:
            print(json.dumps(result, indent=2))
            return 0
        print(
            f"{result['bucket']}/{result['key']}: {result['size']} bytes, class {result['storage_class']}, "
            f"tier {result['tier']}, heat {result['heat']:.2f}, last access {_when(result['last_access'])}"
        )
        for move in result["moves"]:
            print(f"  {_when(move['at'])}  {move['from_tier']} -> {move['to_tier']}  ({move['reason']})")
        return 0
    print(f"unknown admin command {args.verb}", file=sys.stderr)
    return 2


def _user_policy(args: argparse.Namespace) -> int:
    verb, rest = args.name, args.policy_args
    if verb not in ("set", "get", "delete") or len(rest) != (2 if verb == "set" else 1):
        print("tierstore admin user policy: set NAME FILE.json | get NAME | delete NAME", file=sys.stderr)
        return 2
    path = f"users/{urllib.parse.quote(rest[0], safe='')}/policy"
    if verb == "set":
        try:
            with open(rest[1], "rb") as source:
                document = source.read()
        except OSError as exc:
            print(f"tierstore admin user policy: cannot read {rest[1]}: {exc.strerror}", file=sys.stderr)
            return 2
        result = _call(args, "PUT", path, body=document)
    elif verb == "get":
        result = _call(args, "GET", path)
        if not args.json:
            print(json.dumps(result["policy"], indent=2))
            return 0
    else:
        result = _call(args, "DELETE", path)
    print(json.dumps(result, indent=2) if args.json else f"{verb}: policy of user {result['name']}")
    return 0


def _user(args: argparse.Namespace) -> int:
    if args.action == "policy":
        return _user_policy(args)
    if args.action == "list":
        rows = _call(args, "GET", "users")
        print(json.dumps(rows, indent=2) if args.json else _table(rows, ["name", "access_key", "admin"]))
        return 0
    if not args.name:
        print("tierstore admin user: name the user (add) or the access key (remove)", file=sys.stderr)
        return 2
    if args.action == "add":
        query = {"name": args.name, "admin": "true" if args.admin else ""}
        if args.access_key:
            query["access_key"] = args.access_key
        if args.secret_key:
            query["secret_key"] = args.secret_key
        result = _call(args, "POST", "users", urllib.parse.urlencode(query))
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            print(
                f"user {result['name']}: access key {result['access_key']}  secret key {result['secret_key']}"
            )
        return 0
    result = _call(args, "DELETE", f"users/{urllib.parse.quote(args.name, safe='')}")
    print(json.dumps(result, indent=2) if args.json else f"removed {result['removed']}")
    return 0


def _fsck(args: argparse.Namespace) -> int:
    query = {"verify": "true" if args.verify else "", "repair": "true" if args.repair else ""}
    if args.orphan_age is not None:
        query["orphan_age"] = str(args.orphan_age)
    result = _call(args, "POST", "fsck", urllib.parse.urlencode(query))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0 if result["clean"] else 1
    counts = result["counts"]
    for entry in result["lost"]:
        print(f"LOST: {entry['tier']} {entry['bucket']}/{entry['key']} (blob {entry['data_id']})")
    for entry in result["dangling"]:
        print(
            f"DANGLING: {entry['tier']} {entry['bucket']}/{entry['key']} shard {entry['shard']} "
            f"missing on {entry['domain']} (blob {entry['data_id']})"
        )
    for entry in result["corrupt"]:
        print(f"CORRUPT: {entry['tier']} {entry['bucket']}/{entry['key']} shards {entry['shards']}")
    for entry in result["orphans"]:
        print(
            f"ORPHAN: {entry['tier']} {entry['domain']} {entry['data_id']}.{entry['shard']} "
            f"({_fmt(entry['size'])}, {entry['age_s']} s old)"
        )
    print(
        f"fsck: {result['blobs']} blobs, {result['pieces_referenced']} shards referenced, "
        f"{result['pieces_listed']} shard files listed in {result['seconds']:.1f}s"
    )
    print(
        f"  dangling {counts['dangling']}, lost {counts['lost']}, corrupt {counts['corrupt']}, "
        f"orphans {counts['orphans']} (repaired {result['repaired']})"
    )
    print(
        f"  not judged: {result['young_unreferenced']} unreferenced shards younger than "
        f"{result['orphan_age']:.0f}s (writes in flight or garbage due), {result['queued_garbage']} queued "
        f"for the collector, {result['unreachable']} on offline domains {result['offline_domains'] or ''}"
    )
    print("clean" if result["clean"] else "NOT CLEAN")
    return 0 if result["clean"] else 1


def _heal_with_progress(args: argparse.Namespace) -> dict[str, Any]:
    before = _call(args, "GET", "heal")["passes"]
    _call(args, "POST", "heal")
    while True:
        state = _call(args, "GET", "heal")
        done = not state["running"] and state["passes"] > before
        progress_bar("heal: blobs verified", state["blobs_checked"], state["blobs_total"], final=done)
        if done:
            return state
        time.sleep(0.5)


def _bulk_restore(args: argparse.Namespace) -> int:
    query = urllib.parse.urlencode({"bucket": args.bucket, "prefix": args.prefix, "days": args.days})
    started = _call(args, "POST", "restore", query)
    state = started
    where = urllib.parse.urlencode({"bucket": args.bucket, "prefix": args.prefix})
    while args.wait:
        state = _call(args, "GET", "restore", where)
        finished = state["ongoing"] == 0
        if not args.json:
            progress_bar("restore: copies readable", state["restored"], state["archived"], final=finished)
        if finished:
            break
        time.sleep(0.5)
    if args.json:
        print(json.dumps({"requested": started, "state": state}, indent=2))
    else:
        print(
            f"restore of {args.bucket}/{args.prefix}: {started['requested']} requested, "
            f"{started['already']} already restored, {started['skipped']} not archived; "
            f"{state['restored']}/{state['archived']} readable now"
        )
    return 0
