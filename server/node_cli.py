"""`tierstore node`: a storage node — serves its drives to the gateways, registers in the catalog.

    tierstore node --data-catalog PATH --listen HOST:PORT --data DIR --name NAME
                   [--rack R] [--zone Z] [--drives N] [--pack-threshold-bytes N]
                   [--tls-cert FILE --tls-key FILE] [--config FILE]

The drives are the subdirectories of DIR (`--drives N` creates d1..dN when DIR has none). The
node serves them over HTTP (erasure.node_server), and keeps its record in the catalog fresh
(tiering.nodes) — its address, rack, zone and drives with their capacity — every 2 seconds.
Requests must be signed with the cluster secret (TIERSTORE_CLUSTER_SECRET or --secret-file).
`--catalog URL` is the gateways' catalog on a database server (postgresql://...: nodes and gateways
on any hosts); `--data-catalog PATH` a SQLite catalog file shared by the processes of one host
(the gateway's `<data>/catalog/catalog.db`).

With `--tls-cert` and `--tls-key` (or `[node] tls_cert` / `tls_key` in the `--config` file) the
node serves HTTPS only, and registers an https:// address: gateways then verify its certificate
(`[cluster] node_ca`, `--node-ca`, TIERSTORE_NODE_CA) and still sign every request. The config
file's `[cluster] secret_file` serves as `--secret-file`.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import ssl
import threading
from pathlib import Path
from typing import Any

from erasure.node_server import NodeDrives, NodeHTTPServer
from erasure.pack import DEFAULT_PACK_THRESHOLD
from tiering import nodes

log = logging.getLogger("tierstore.node")


def add_node_parser(commands: Any) -> None:
    node = commands.add_parser("node", help="run a storage node (drives served to the gateways)")
    where = node.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--catalog", help="the gateways' catalog URL (postgresql://user:password@host:port/db)"
    )
    where.add_argument("--data-catalog", type=Path, help="the gateways' SQLite catalog file")
    node.add_argument("--listen", required=True, help="HOST:PORT to serve the drives on")
    node.add_argument("--advertise", help="address gateways reach this node at (default: http(s)://<listen>)")
    node.add_argument("--data", type=Path, required=True, help="directory holding one subdirectory per drive")
    node.add_argument("--name", required=True, help="this node's name (unique in the cluster)")
    node.add_argument("--rack", default="rack1")
    node.add_argument("--zone", default="zone1")
    node.add_argument("--drives", type=int, metavar="N", help="create drives d1..dN when --data has none")
    node.add_argument("--secret-file", type=Path, help="file holding the cluster secret")
    node.add_argument("--tls-cert", help="PEM certificate: serve HTTPS only (with --tls-key)")
    node.add_argument("--tls-key", help="PEM private key for --tls-cert")
    node.add_argument(
        "--config", type=Path, help="TOML file: its [node] tls_cert/tls_key and [cluster] secret_file"
    )
    node.add_argument(
        "--pack-threshold-bytes",
        type=int,
        default=DEFAULT_PACK_THRESHOLD,
        metavar="N",
        help="append shards up to N bytes to pack files instead of a file each "
        f"(default {DEFAULT_PACK_THRESHOLD}; 0: off)",
    )


def _tls_context(cert: str, key: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


def run_node(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="tierstore-node %(name)s: %(message)s")
    if args.config is not None:
        from server.config import ConfigError, load_settings

        try:
            settings, _ = load_settings(args.config)
        except (OSError, ConfigError) as exc:
            print(f"tierstore node: bad configuration: {exc}", flush=True)
            return 2
        args.tls_cert = args.tls_cert or settings.node.tls_cert or None
        args.tls_key = args.tls_key or settings.node.tls_key or None
        args.secret_file = args.secret_file or settings.cluster.secret_file or None
    if bool(args.tls_cert) != bool(args.tls_key):
        print("tierstore node: --tls-cert and --tls-key go together", flush=True)
        return 2
    try:
        tls = _tls_context(args.tls_cert, args.tls_key) if args.tls_cert else None
    except (OSError, ssl.SSLError) as exc:
        print(f"tierstore node: cannot load the TLS certificate: {exc}", flush=True)
        return 2
    secret = nodes.cluster_secret(args.secret_file)
    if not secret:
        print(f"tierstore node: no cluster secret ({nodes.SECRET_ENV} or --secret-file)", flush=True)
        return 2
    data: Path = args.data
    data.mkdir(parents=True, exist_ok=True)
    drives = sorted(p.name for p in data.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not drives and args.drives:
        drives = [f"d{i}" for i in range(1, args.drives + 1)]
        for drive in drives:
            (data / drive).mkdir()
    if not drives:
        print(f"tierstore node: no drives under {data} (make subdirectories, or pass --drives N)", flush=True)
        return 2
    host, _, port = args.listen.rpartition(":")
    server = NodeHTTPServer(
        (host, int(port)), NodeDrives(data, drives, max(0, args.pack_threshold_bytes)), secret, tls
    )
    scheme = "https" if tls is not None else "http"
    address = args.advertise or f"{scheme}://{host}:{server.server_address[1]}"

    from tiering.catalog import Catalog

    catalog = Catalog(args.catalog or args.data_catalog)
    identity = nodes.node_id(data)
    stop = threading.Event()

    def record() -> dict[str, Any]:
        usage = [(d, shutil.disk_usage(data / d)) for d in drives]
        return {
            "name": args.name,
            "id": identity,
            "address": address,
            "rack": args.rack,
            "zone": args.zone,
            "pid": os.getpid(),
            "drives": [{"name": d, "total": u.total, "free": u.free} for d, u in usage],
        }

    def heartbeat() -> None:
        while not stop.is_set():
            try:
                nodes.register(catalog, record())
            except Exception:  # keep beating: a busy catalog must not end it
                log.exception("heartbeat failed")
            stop.wait(nodes.HEARTBEAT)

    nodes.register(catalog, record())
    beat = threading.Thread(target=heartbeat, name="heartbeat", daemon=True)
    beat.start()
    if args.pack_threshold_bytes > 0:
        threading.Thread(
            target=server.drives.compact_packs_forever, args=(stop,), name="packs", daemon=True
        ).start()
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    log.info(
        "node %s serving %s at %s (rack %s, zone %s)",
        args.name,
        ", ".join(drives),
        address,
        args.rack,
        args.zone,
    )
    print(f"tierstore node {args.name} listening on {address}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        # SIGTERM: stop listening (new connections are refused at once, so gateways turn to
        # parity without waiting out a timeout), then let the requests in flight finish.
        server.server_close()
        if not server.drain():
            log.warning("stopping with requests still in flight")
        stop.set()
    return 0
