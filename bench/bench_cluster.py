"""Shards over the network vs on local drives, rebuild after a node loss, a hung node's P99 GET.

    python bench/bench_cluster.py [--duration 4] [--rounds 2] [--out bench/cluster.jsonl]

One tmp dir holds six `tierstore node` processes (3 drives each, 3 racks) and three gateways on
one data directory (one catalog): `nodes` (hedged reads, the default), `nodes-nohedge`
(TIERSTORE_HEDGED_READS=0: k shards opened, the others only after a failure) and, on a data
directory of its own, `local` (the same hot tier, 3+2 by node over 6 × 3 local directories).
Load is /work/shared/tools/s3bench.py, endpoints interleaved round by round; medians of rounds.

1. PUT and GET, 4 KiB and 1 MiB, c4: `nodes` vs `local`.
2. P99 of 48 GETs (1 MiB, c4) started right after one node is SIGSTOPped: `nodes` vs
   `nodes-nohedge` (a silent node is marked down 6 s after its last heartbeat and then read around
   by both); the node is resumed between runs.
3. Rebuild: a node SIGKILLed; once it is marked down, `admin heal --wait` rebuilds its shards on
   the other nodes: MiB written by heal per second.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from servers import free_port  # noqa: E402

S3BENCH = Path("/work/shared/tools/s3bench.py")
SECRET = "bench-cluster-secret"
ACCESS, SECRET_KEY = "bench-access-key", "bench-secret-key-0123456789"
CONFIG = '[tiers.hot]\nk = 3\nm = 2\nnodes = 6\ndrives_per_node = 3\nspread_level = "node"\n'


def _env(**extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "TIERSTORE_CLUSTER_SECRET": SECRET,
        "TIERSTORE_ACCESS_KEY": ACCESS,
        "TIERSTORE_SECRET_KEY": SECRET_KEY,
        **extra,
    }


def _start(cmd: list[str], log: Path, ready: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "server.cli", *cmd],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    deadline = time.monotonic() + 60
    while ready not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{cmd[0]} did not start: {log.read_text()[-2000:]}")
        time.sleep(0.1)
    return proc


def _s3bench(
    endpoints: dict[str, str], op: str, size: str, args: argparse.Namespace, *extra: str
) -> dict[str, dict]:
    """Median ops/s, MiB/s and P99 ms per endpoint label over the rounds."""
    out = Path(tempfile.mktemp(suffix=".jsonl"))
    cmd = [
        sys.executable,
        str(S3BENCH),
        *[a for n, e in endpoints.items() for a in ("--endpoint", f"{n}={e}")],
        "--access-key",
        ACCESS,
        "--secret-key",
        SECRET_KEY,
        "--op",
        op,
        "--size",
        size,
        "-c",
        "4",
        *(() if "--count" in extra else ("--duration", str(args.duration))),
        "--rounds",
        str(args.rounds),
        "--json-out",
        str(out),
        "--quiet",
        "--bucket",
        "bench-cluster",
        *extra,
    ]
    done = subprocess.run(cmd, timeout=600, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"s3bench failed: {done.stderr[-2000:]}")
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    out.unlink()
    if args.out:
        with open(args.out, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    result: dict[str, dict] = {}
    for name in endpoints:
        mine = [r for r in rows if r.get("type") == "run" and r.get("endpoint_name") == name]
        result[name] = {
            "ops_per_s": statistics.median(r["ops_per_s"] for r in mine),
            "mib_per_s": statistics.median(r["mib_per_s"] for r in mine),
            "p99_ms": statistics.median((r["lat_ms"] or {}).get("p99", 0.0) for r in mine),
            "errors": sum(r["errors"] for r in mine),
            "rounds": len(mine),
        }
    return result


def _hung_p99(
    url: dict[str, str], node: subprocess.Popen[bytes], args: argparse.Namespace
) -> dict[str, list[float]]:
    """P99 of 48 GETs (1 MiB, c4) per gateway, each run started right after `node` is stopped
    (it is marked down 6 s after its last heartbeat, then read around by both); resumed (and
    beating) between runs."""
    prepare = argparse.Namespace(**{**vars(args), "duration": 1.0, "rounds": 1})
    _s3bench(
        {n: url[n] for n in ("nodes", "nodes-nohedge")}, "get", "1MiB", prepare, "--objects", "24", "--keep"
    )
    p99: dict[str, list[float]] = {"nodes": [], "nodes-nohedge": []}
    window = argparse.Namespace(**{**vars(args), "rounds": 1})
    for _ in range(args.rounds):
        for name in p99:
            node.send_signal(signal.SIGSTOP)
            try:
                # A fixed count, not a timed window: a GET stuck on the hung node counts when it ends.
                got = _s3bench(
                    {name: url[name]},
                    "get",
                    "1MiB",
                    window,
                    "--skip-prepare",
                    "--keep",
                    "--objects",
                    "24",
                    "--count",
                    "48",
                )
            finally:
                node.send_signal(signal.SIGCONT)
            p99[name].append(got[name]["p99_ms"])
            time.sleep(3)  # heartbeats again before the next window
    return p99


def _shard_files(root: Path, names: list[str]) -> dict[Path, int]:
    out = {}
    for n in names:
        for p in (root / n).rglob("*"):
            try:
                if p.is_file() and ".tmp" not in p.parts:
                    out[p] = p.stat().st_size
            except FileNotFoundError:  # collected meanwhile
                continue
    return out


def _rebuild(root: Path, url: str, nodes: list[subprocess.Popen[bytes]]) -> dict[str, float]:
    """SIGKILL n6, wait until it is marked down, then `admin heal --wait`: MiB/s of shard files
    heal wrote on the other nodes (files that were not there before)."""
    admin = [sys.executable, "-m", "server.cli", "admin", "--endpoint", url]
    nodes[5].kill()
    nodes[5].wait(10)
    deadline = time.monotonic() + 30
    while True:
        rows = json.loads(
            subprocess.run(
                [*admin, "nodes", "--json"], capture_output=True, text=True, env=_env(), check=True
            ).stdout
        )
        if {r["name"]: r["state"] for r in rows}["n6"] == "down" or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    survivors = [f"n{i}" for i in range(1, 6)]
    before = _shard_files(root, survivors)
    t0 = time.monotonic()
    subprocess.run([*admin, "heal", "--wait"], capture_output=True, env=_env(), check=True, timeout=900)
    secs = time.monotonic() - t0
    written = sum(size for p, size in _shard_files(root, survivors).items() if p not in before)  # new files
    return {
        "healed_mib": round(written / 2**20, 1),
        "seconds": round(secs, 2),
        "mib_per_s": round(written / 2**20 / secs, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None, help="append every s3bench JSON line here")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    (root / "gw.toml").write_text(CONFIG)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        catalog = root / "gw" / "catalog" / "catalog.db"
        catalog.parent.mkdir(parents=True)
        nodes = []
        for i in range(1, 7):
            nodes.append(
                _start(
                    [
                        "node",
                        "--data-catalog",
                        str(catalog),
                        "--listen",
                        f"127.0.0.1:{free_port()}",
                        "--data",
                        str(root / f"n{i}"),
                        "--name",
                        f"n{i}",
                        "--rack",
                        f"rack{(i - 1) % 3 + 1}",
                        "--drives",
                        "3",
                    ],
                    root / f"n{i}.log",
                    "listening on",
                    _env(),
                )
            )
        procs += nodes
        ports = {"nodes": free_port(), "nodes-nohedge": free_port(), "local": free_port()}
        for name, port in ports.items():
            data = root / ("local" if name == "local" else "gw")
            env = _env(TIERSTORE_HEDGED_READS="0") if name == "nodes-nohedge" else _env()
            if name == "local":
                env.pop("TIERSTORE_CLUSTER_SECRET")
            procs.append(
                _start(
                    [
                        "serve",
                        "--data",
                        str(data),
                        "--config",
                        str(root / "gw.toml"),
                        "--listen",
                        f"127.0.0.1:{port}",
                        "--workers",
                        "1",  # as measured before one worker per core became the default
                    ],
                    root / f"{name}.log",
                    "listening on",
                    env,
                )
            )
        url = {n: f"http://127.0.0.1:{p}" for n, p in ports.items()}
        report: dict[str, object] = {"duration": args.duration, "rounds": args.rounds}

        for op in ("put", "get"):
            for size in ("4KiB", "1MiB"):
                got = _s3bench({"nodes": url["nodes"], "local": url["local"]}, op, size, args)
                got["ratio nodes/local ops_per_s"] = round(
                    got["nodes"]["ops_per_s"] / got["local"]["ops_per_s"], 2
                )
                report[f"{op} {size}"] = got
                print(op, size, json.dumps(got), flush=True)
        p99 = _hung_p99(url, nodes[1], args)
        report["hung node P99 GET 1MiB ms"] = {
            n: {"rounds": v, "median": statistics.median(v)} for n, v in p99.items()
        }
        print("hung", json.dumps(report["hung node P99 GET 1MiB ms"]), flush=True)
        # Data to rebuild: 64 x 1 MiB more on the nodes, then one node lost.
        _s3bench(
            {"nodes": url["nodes"]},
            "put",
            "1MiB",
            argparse.Namespace(**{**vars(args), "rounds": 1}),
            "--keep",
            "--prefix",
            "rebuild/",
        )
        report["rebuild after a node loss"] = _rebuild(root, url["nodes"], nodes)
        print(json.dumps(report, indent=1))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
