"""Per-request cost of authorization: a 4 KiB GET by a (non-admin) user on a bucket without a
policy and on one with a 20-statement bucket policy.

    .venv/bin/python bench/bench_authz.py [--duration 10] [--concurrency 4] [--rounds 3] [--out FILE.json]

Starts `tierstore serve` (default configuration, temp dir; bench/servers.py), adds a user
`bench-reader` (administrators skip policy evaluation, so the load must be a user's), lets that
user create two buckets, and gives one of them a 20-statement policy that every GET must walk:
10 Deny statements naming other users, 5 Deny statements on other actions, 4 Allow statements on
other prefixes with conditions, and one Deny with a `NotIpAddress aws:SourceIp` condition that
is evaluated on every request (it does not match loopback). The load generator is
/work/shared/tools/s3bench.py (`--op get --size 4KiB`, SigV4 header auth), run against the two
buckets alternately for `--rounds` rounds; the medians and their ratio are printed.
The server is stopped and its temp dir removed at the end, also on errors and Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

sys.path.insert(0, str(Path(__file__).resolve().parent))

from servers import Tierstore  # noqa: E402

S3BENCH = Path(os.environ.get("S3BENCH", "/work/shared/tools/s3bench.py"))
PLAIN, GUARDED = "authz-plain", "authz-policy"


def twenty_statements(bucket: str) -> str:
    arn = f"arn:aws:s3:::{bucket}"
    statements: list[dict[str, Any]] = []
    for i in range(10):
        statements.append(
            {
                "Sid": f"DenyUser{i}",
                "Effect": "Deny",
                "Principal": {"AWS": f"arn:aws:iam::000000000000:user/someone-else-{i}"},
                "Action": "s3:*",
                "Resource": [arn, f"{arn}/*"],
            }
        )
    for i, action in enumerate(
        [
            "s3:DeleteObject",
            "s3:PutObjectAcl",
            "s3:PutBucketPolicy",
            "s3:PutLifecycleConfiguration",
            "s3:DeleteBucket",
        ]
    ):
        statements.append(
            {
                "Sid": f"DenyAction{i}",
                "Effect": "Deny",
                "Principal": "*",
                "Action": action,
                "Resource": [arn, f"{arn}/*"],
            }
        )
    for i in range(4):
        statements.append(
            {
                "Sid": f"AllowPrefix{i}",
                "Effect": "Allow",
                "Principal": "*",
                "Action": "s3:GetObject",
                "Resource": f"{arn}/other-{i}/*",
                "Condition": {"StringEquals": {"aws:username": f"team-{i}"}},
            }
        )
    statements.append(
        {
            "Sid": "LoopbackOnly",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "s3:*",
            "Resource": [arn, f"{arn}/*"],
            "Condition": {"NotIpAddress": {"aws:SourceIp": ["127.0.0.0/8", "::1/128"]}},
        }
    )
    assert len(statements) == 20
    return json.dumps({"Version": "2012-10-17", "Statement": statements})


def add_user(server: Tierstore) -> dict[str, str]:
    env = {**os.environ, "TIERSTORE_ACCESS_KEY": server.access_key, "TIERSTORE_SECRET_KEY": server.secret_key}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "server.cli",
            "admin",
            "user",
            "add",
            "bench-reader",
            "--endpoint",
            server.endpoint,
            "--json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


def s3bench(
    server: Tierstore, user: dict[str, str], bucket: str, args: argparse.Namespace, prepare: bool
) -> dict[str, Any]:
    command = [
        sys.executable,
        str(S3BENCH),
        "--endpoint",
        server.endpoint,
        "--access-key",
        user["access_key"],
        "--secret-key",
        user["secret_key"],
        "--bucket",
        bucket,
        "--op",
        "get",
        "--size",
        "4KiB",
        "--concurrency",
        str(args.concurrency),
        "--duration",
        str(args.duration),
        "--objects",
        "64",
        "--prefix",
        "bench/get-4KiB/",
        "--no-create-bucket",
        "--keep",
        "--quiet",
        "--label",
        bucket,
    ]
    if not prepare:
        command.append("--skip-prepare")
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.duration * 10 + 300)
    if done.returncode != 0:
        raise SystemExit(f"s3bench failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if result.get("errors"):
        raise SystemExit(f"s3bench saw errors: {result.get('error_samples')}")
    return result


def decision_micros(bucket: str, with_policy: bool, n: int = 20000) -> float:
    """The decision alone, in this process: µs per call (what the policy adds to one request)."""
    import timeit

    from server.access.conditions import mapping_context
    from server.access.decision import BucketAccess, Request, decide
    from server.access.policy import Caller, parse_policy

    policy = parse_policy(twenty_statements(bucket), bucket=bucket) if with_policy else None
    access = BucketAccess(owner="id-reader", policy=policy)
    caller = Caller(anonymous=False, name="bench-reader", access_key="AK", account="000000000000")
    request = Request(
        caller,
        "id-reader",
        False,
        "s3:GetObject",
        f"arn:aws:s3:::{bucket}/bench/k",
        mapping_context({"aws:SourceIp": ["127.0.0.1"]}),
    )
    assert decide(request, access).allowed
    return timeit.timeit(lambda: decide(request, access), number=n) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per timed run")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    server = Tierstore()
    server.start()
    try:
        user = add_user(server)
        client = boto3.client(
            "s3",
            endpoint_url=server.endpoint,
            aws_access_key_id=user["access_key"],
            aws_secret_access_key=user["secret_key"],
            region_name="us-east-1",
            config=Config(s3={"addressing_style": "path"}),
        )
        for bucket in (PLAIN, GUARDED):
            client.create_bucket(
                Bucket=bucket
            )  # the user owns both: same owner path, only the policy differs
        client.put_bucket_policy(Bucket=GUARDED, Policy=twenty_statements(GUARDED))
        runs: dict[str, list[dict[str, Any]]] = {PLAIN: [], GUARDED: []}
        for round_number in range(args.rounds):
            for bucket in (PLAIN, GUARDED):
                result = s3bench(server, user, bucket, args, prepare=round_number == 0)
                runs[bucket].append(result)
                print(
                    f"round {round_number} {bucket}: {result['ops_per_s']:.0f} ops/s  "
                    f"P50 {result['lat_ms']['p50']:.2f} ms  P99 {result['lat_ms']['p99']:.2f} ms",
                    flush=True,
                )
        summary: dict[str, Any] = {
            "load": os.getloadavg(),
            "concurrency": args.concurrency,
            "duration_s": args.duration,
            "rounds": args.rounds,
        }
        for bucket, results in runs.items():
            summary[bucket] = {
                "ops_s": statistics.median(r["ops_per_s"] for r in results),
                "p50_ms": statistics.median(r["lat_ms"]["p50"] for r in results),
                "p99_ms": statistics.median(r["lat_ms"]["p99"] for r in results),
            }
        summary["decision_us"] = {
            "no_policy": round(decision_micros(PLAIN, False), 2),
            "policy_20": round(decision_micros(GUARDED, True), 2),
        }
        plain, guarded = summary[PLAIN], summary[GUARDED]
        summary["ops_ratio"] = round(guarded["ops_s"] / plain["ops_s"], 3)
        summary["p50_ratio"] = round(guarded["p50_ms"] / plain["p50_ms"], 3)
        print(
            f"\nno policy:           {plain['ops_s']:.0f} ops/s  P50 {plain['p50_ms']:.2f} ms  "
            f"P99 {plain['p99_ms']:.2f} ms"
        )
        print(
            f"20-statement policy: {guarded['ops_s']:.0f} ops/s  P50 {guarded['p50_ms']:.2f} ms  "
            f"P99 {guarded['p99_ms']:.2f} ms"
        )
        print(
            f"ratio (policy / none): ops/s {summary['ops_ratio']}  P50 {summary['p50_ratio']}  "
            f"(medians of {args.rounds} rounds, load average {summary['load'][0]:.1f})"
        )
        print(
            f"the decision alone, in process: {summary['decision_us']['no_policy']} µs without a policy, "
            f"{summary['decision_us']['policy_20']} µs with the 20 statements"
        )
        if args.out:
            args.out.write_text(json.dumps(summary, indent=2))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
