"""The `tierstore` command: `tierstore serve` and `tierstore admin ...`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server import (
    compiled_build,
    config_check,
    http_protocol,
    logs,
    malloc_tuning,
    metrics_workers,
    runtime_dir,
)
from server.admin_cli import add_admin_parser, run_admin
from server.app import build_lifecycle, build_store, create_app
from server.config import ServerConfig, load_config
from server.connection_limits import ConnectionLimits, raise_file_limit
from server.node_cli import add_node_parser, run_node
from server.workers import (
    Supervisor,
    bind_sockets,
    default_workers,
    inherited_sockets,
    signal_ready,
    worker_setup,
)
from tiering.catalog import describe as describe_catalog

# Blocking work (disk, hashing, SQLite) runs in threads; many concurrent streams need many.
IO_THREADS = 64
GIL_SWITCH_INTERVAL = 0.0005  # seconds; see _tune_runtime
# On shutdown, a connection that is already closing (its last response handed to the kernel)
# gets this long to finish closing before it is dropped: a TLS close waits for the client's
# close_notify, which an idle keep-alive client never sends.
CLOSING_GRACE = 1.0
# Draining (SIGTERM): an idle keep-alive connection is closed only after this long, so that a
# client that sends its next request meanwhile gets it answered (with `Connection: close`)
# instead of racing the close — the classic failed request of a restart.
DRAIN_IDLE_GRACE = 2.0
# How long a stopping server keeps taking connections the kernel already queued for it.
ACCEPT_DRAIN_LIMIT = 1.0


class _DrainGate:
    """The app, plus `Connection: close` on every response that starts once draining began."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.draining = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.draining and scope["type"] == "http":
            send = _closing(send)
        await self.app(scope, receive, send)


def _closing(send: Send) -> Send:
    async def closing_send(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
            message = {**message, "headers": [*headers, (b"connection", b"close")]}
        await send(message)

    return closing_send


def _readable(sock: socket.socket) -> bool:
    try:
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return False


class _Server(uvicorn.Server):
    """uvicorn's server with a draining shutdown, exit status 0 and no wait on idle TLS clients.

    Shutdown (SIGTERM): take what the kernel already queued for our listening sockets, then stop
    listening; answer every further request with `Connection: close`; close idle keep-alive
    connections only after DRAIN_IDLE_GRACE; wait (up to 30 s) for requests in flight.
    """

    def __init__(self, config: uvicorn.Config, gate: _DrainGate) -> None:
        super().__init__(config)
        self.gate = gate

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        logging.getLogger("tierstore.server").info(
            "draining: %d connection(s) open", len(self.server_state.connections)
        )
        await self._stop_accepting()
        for sock in sockets or []:
            sock.close()
        self.gate.draining = True
        for connection in list(self.server_state.connections):
            cycle = getattr(connection, "cycle", None)
            if cycle is not None and not cycle.response_complete:
                cycle.keep_alive = False  # its response says `Connection: close`
        try:
            await asyncio.wait_for(
                self._wait_tasks_to_complete(), timeout=self.config.timeout_graceful_shutdown
            )
        except TimeoutError:
            logging.getLogger("tierstore.server").error(
                "cancelling %d request(s) still running after the graceful shutdown timeout",
                len(self.server_state.tasks),
            )
            for task in self.server_state.tasks:
                task.cancel(msg="graceful shutdown timeout exceeded")
        if not self.force_exit:
            await self.lifespan.shutdown()

    async def _stop_accepting(self) -> None:
        # Connections the kernel queued on our sockets are lost when they close (a shared
        # socket's queue is not, but taking them is harmless): accept them first.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ACCEPT_DRAIN_LIMIT
        for server in self.servers:
            listeners = list(server.sockets or [])
            while loop.time() < deadline and any(_readable(s) for s in listeners):
                await asyncio.sleep(0.002)
            server.close()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn re-raises the caught SIGTERM/SIGINT after its graceful shutdown, so the process
        # would end "killed by SIGTERM" even though every request finished. A drained, clean
        # stop exits 0 instead.
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        original = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)

    async def _wait_tasks_to_complete(self) -> None:
        # uvicorn waits until every connection is gone. An idle keep-alive TLS connection is
        # closed with a TLS shutdown that waits for the peer (up to 30 s); requests still in
        # flight are what a graceful stop must wait for, not those idle sockets.
        closing_since: dict[int, float] = {}
        drain_started = time.monotonic()
        while self.server_state.connections and not self.force_exit:
            now = time.monotonic()
            for connection in list(self.server_state.connections):
                cycle = getattr(connection, "cycle", None)
                if now - drain_started >= DRAIN_IDLE_GRACE and (cycle is None or cycle.response_complete):
                    connection.shutdown()  # idle all through the grace: close it
                transport = getattr(connection, "transport", None)
                if transport is None or not transport.is_closing() or transport.get_write_buffer_size():
                    continue
                since = closing_since.setdefault(id(connection), now)
                if now - since >= CLOSING_GRACE:
                    transport.abort()
            await asyncio.sleep(0.05)
        await super()._wait_tasks_to_complete()


CATALOG_HELP = (
    "where the namespace lives: sqlite:///path/catalog.db (default: in the data directory) or "
    "postgresql://user:password@host:port/dbname, which any number of gateways may share"
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tierstore", description="S3-compatible tiered object store")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the S3 server")
    serve.add_argument("--config", type=Path, help="TOML configuration file")
    serve.add_argument("--data", type=Path, help="data directory (default ./data)")
    serve.add_argument("--catalog", metavar="URL", help=CATALOG_HELP)
    serve.add_argument("--listen", help="HOST:PORT to listen on (default 127.0.0.1:9000)")
    serve.add_argument("--tls-cert", help="PEM certificate: serve HTTPS")
    serve.add_argument("--tls-key", help="PEM private key for --tls-cert")
    serve.add_argument(
        "--node-ca",
        metavar="FILE",
        help="CA bundle that storage nodes serving TLS are verified against "
        "([cluster] node_ca, TIERSTORE_NODE_CA; default: the system store)",
    )
    serve.add_argument(
        "--test-clock",
        action="store_true",
        help="allow `tierstore admin clock advance` (tests and demos only)",
    )
    serve.add_argument(
        "--no-lifecycle",
        action="store_true",
        help="do not run the lifecycle daemon here (run `tierstore lifecycle` instead)",
    )
    serve.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="worker processes on the port (default: [server] workers, 0: one per usable core); "
        "N > 1 runs them under a supervisor (SIGHUP: rolling restart; SIGTERM: drain and stop); "
        "1 is a single process",
    )
    serve.add_argument(
        "--reuse-port",
        action="store_true",
        help="bind with SO_REUSEPORT, so that another `tierstore serve --reuse-port` "
        "(a new version) can take over the port without downtime",
    )
    serve.add_argument("--listen-fds", help=argparse.SUPPRESS)  # a worker: the supervisor's sockets
    serve.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)  # a worker: say "ready" here
    daemon = commands.add_parser("lifecycle", help="run only the lifecycle daemon, beside a server")
    daemon.add_argument("--config", type=Path, help="TOML configuration file (the server's)")
    daemon.add_argument("--data", type=Path, help="data directory (the server's)")
    daemon.add_argument("--catalog", metavar="URL", help="the server's catalog (see serve --help)")
    daemon.add_argument("--test-clock", action="store_true", help="follow the server's test clock")
    config = commands.add_parser("config", help="check a configuration file")
    config_commands = config.add_subparsers(dest="config_command", required=True)
    check = config_commands.add_parser(
        "check", help="print the effective configuration (file + environment + defaults) or its errors"
    )
    check.add_argument("file", type=Path, nargs="?", help="TOML configuration file")
    add_admin_parser(commands)
    add_node_parser(commands)
    return parser


def _banner(config: ServerConfig, workers: int = 1) -> str:
    """Lines for the `tierstore` logger (`logs.console`), which prefixes each with `tierstore: `."""
    scheme = "https" if config.tls_cert else "http"
    tiers = ", ".join(f"{t.name}({t.backend})" for t in config.tiers)
    processes = (
        f"{workers} worker processes (supervisor pid {os.getpid()}; SIGHUP: rolling restart)"
        if workers > 1
        else f"1 process, pid {os.getpid()} (--workers N for more)"
    )
    lines = [
        f"listening on {scheme}://{config.listen} (data in {config.data_dir.resolve()})",
        f"workers: {processes}",
        f"tiers: {tiers}",
        f"catalog: {describe_catalog(config.catalog_url or str(config.catalog_path))}",
        f"access key: {config.access_key}",
    ]
    if config.credentials_are_default:
        lines.append(
            f"secret key: {config.secret_key}  (default credentials: set "
            "TIERSTORE_ACCESS_KEY / TIERSTORE_SECRET_KEY for anything but a local trial)"
        )
    return "\n".join(lines)


def _tune_runtime() -> None:
    """Collect cyclic garbage less often, never re-scan what start-up built, hand the GIL on sooner.

    A request allocates a few hundred short-lived objects, so CPython's default generation-0
    threshold (700) runs a collection every request or two, and the older generations re-walk
    every long-lived object (app, catalog, caches) again and again. Reference counting frees
    almost all of a request's objects anyway; the cyclic collector still runs, just less often.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 50)
    # A GET hands off to a worker thread and back; each hand-off waits for the GIL, which the
    # event loop holds while it serves other requests, up to the switch interval (5 ms by
    # default). 0.5 ms cut that wait: +10-30 % samples/s for DataLoaders reading 112 KiB objects
    # (bench/feed, one server process, 1 and 2 accelerators); 0.1 ms was slower again. The price:
    # ~9 % fewer 4 KiB GETs/s at 16-32 clients in a closed loop (bench/RESULTS.md, same day).
    sys.setswitchinterval(GIL_SWITCH_INTERVAL)


async def serve(
    config: ServerConfig,
    *,
    sockets: list[socket.socket] | None = None,
    reuse_port: bool = False,
    ready_fd: int | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT, then drain. `sockets`: inherited from a supervisor (a worker)."""
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(IO_THREADS, thread_name_prefix="io"))
    if sockets is None:
        # Bound now (a port in use fails fast), listening only once the store has started.
        sockets = bind_sockets(config.listen_host, config.listen_port, reuse_port=reuse_port, listen=False)
    gate = _DrainGate(create_app(config))
    _tune_runtime()
    raise_file_limit(config.max_connections)
    trimmer = asyncio.create_task(malloc_tuning.trim_periodically())
    uv_config = uvicorn.Config(
        gate,
        host=config.listen_host,
        port=config.listen_port,
        # httptools plus header/body timeouts and a connection cap (server/http_protocol.py); the
        # same protocol serves HTTPS and every worker. uvicorn calls what `http=` names with the
        # protocol's arguments: a factory works as well as a class.
        http=http_protocol.factory(  # type: ignore[arg-type]
            ConnectionLimits(
                header_timeout=config.header_timeout_seconds,
                body_idle_timeout=config.body_idle_timeout_seconds,
                max_connections=config.max_connections,
            )
        ),
        ws="none",  # S3 has no WebSocket; an upgrade would also hand the connection out of the cap
        # X-Forwarded-For/-Proto decide aws:SourceIp and aws:SecureTransport: believed only from
        # the configured proxies (uvicorn's default believed any process on 127.0.0.1).
        proxy_headers=bool(config.trusted_proxies),
        forwarded_allow_ips=list(config.trusted_proxies) or None,
        loop="none",
        lifespan="on",
        access_log=False,
        server_header=False,
        log_config=None,  # logging is configured once, by `logs.configure`: one format for all
        log_level=None,
        ssl_certfile=config.tls_cert or None,
        ssl_keyfile=config.tls_key or None,
        timeout_graceful_shutdown=30,
        timeout_keep_alive=config.keep_alive_timeout_seconds,  # type: ignore[arg-type]  # a float works (call_later)
    )
    server = _Server(uv_config, gate)
    task = asyncio.create_task(server.serve(sockets=sockets))
    try:
        while not server.started and not task.done():
            await asyncio.sleep(0.02)
        if server.started:
            if ready_fd is not None:
                logs.console.info("worker %d accepting on %s", os.getpid(), config.listen)
                signal_ready(ready_fd)
            else:
                # Tests and scripts wait for "tierstore: listening on": logged only once requests are accepted.
                for line in _banner(config).splitlines():
                    logs.console.info("%s", line)
        await task
    finally:
        trimmer.cancel()
    if threading.current_thread() is threading.main_thread():
        # Drained and closed: a further SIGTERM (a supervisor, an impatient script) must not turn
        # the clean exit that follows into "killed by SIGTERM".
        signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _ignore_sighup() -> None:
    def note(_sig: int, _frame: object) -> None:
        logging.getLogger("tierstore.server").warning(
            "SIGHUP ignored: a rolling restart needs `tierstore serve --workers N` with N > 1"
        )

    signal.signal(signal.SIGHUP, note)


def _supervise(config: ServerConfig, argv: list[str], workers: int, reuse_port: bool) -> int:
    try:
        sockets = bind_sockets(config.listen_host, config.listen_port, reuse_port=reuse_port, listen=True)
    except OSError as exc:
        print(f"tierstore: cannot listen on {config.listen}: {exc}", file=sys.stderr)
        return 1
    # Workers re-read the command line (and so the configuration and the code) when started.
    command = [sys.executable, "-m", "server.cli", *argv]
    # In memory where the host has a place for it (server/runtime_dir.py), else in the data directory.
    metrics_dir = metrics_workers.prepare_dir(runtime_dir.for_data_dir(config.data_dir), config.data_dir)
    return Supervisor(command, sockets, workers, _banner(config, workers), metrics_dir).run()


async def run_lifecycle_only(config: ServerConfig) -> None:
    """The daemon in its own process: same catalog and tiers, no HTTP. Stops on SIGTERM/SIGINT."""
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(IO_THREADS, thread_name_prefix="io"))
    # Moves stream blocks as GETs and PUTs do.
    trimmer = asyncio.create_task(malloc_tuning.trim_periodically())
    store = build_store(config)
    lifecycle = build_lifecycle(config, store, run_daemon=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await store.start()
    await lifecycle.start()
    logs.console.info("lifecycle daemon running on %s", config.data_dir.resolve())
    try:
        await stop.wait()
    finally:
        trimmer.cancel()
        await lifecycle.close()
        await store.close()
        if store.runtime_dir is not None:
            await asyncio.to_thread(runtime_dir.remove_if_unused, store.runtime_dir)


def _run(main: Coroutine[Any, Any, None]) -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux and macOS
        asyncio.run(main)
    else:
        uvloop.run(main)


# What a shell reports for a writer killed by SIGPIPE (128 + 13), as `yes | head` does.
BROKEN_PIPE_EXIT = 141


def main(argv: list[str] | None = None) -> int:
    """The entry point: `_main`, ending quietly when the reader of stdout goes away (`| head`)."""
    try:
        code = _main(argv)
        sys.stdout.flush()  # a buffered tail fails here, inside the try, not at interpreter exit
        return code
    except BrokenPipeError:
        # Python ignores SIGPIPE, so a closed pipe is an exception rather than a quiet exit.
        # Point stdout at /dev/null so that the interpreter's final flush fails no more.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return BROKEN_PIPE_EXIT


def _main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    if args.command == "admin":
        return run_admin(args)
    if args.command == "config":
        return config_check.check(args.file)
    if args.command in ("serve", "lifecycle", "node"):  # what runs the (possibly compiled) store code
        stale = compiled_build.stale_message()
        if stale:
            print(f"tierstore: {stale}", file=sys.stderr)
            return 2
    if args.command == "node":
        return run_node(args)
    if args.command in ("serve", "lifecycle"):
        # Before any thread exists: a thread that allocates before the arena limit keeps an arena.
        malloc_tuning.tune()
        try:
            if args.command == "serve":
                config = load_config(
                    args.config,
                    data_dir=args.data,
                    listen=args.listen,
                    tls_cert=args.tls_cert,
                    tls_key=args.tls_key,
                    test_clock=args.test_clock,
                    catalog_url=args.catalog,
                    node_ca=args.node_ca,
                )
                if args.no_lifecycle:
                    config.lifecycle = replace(config.lifecycle, enabled=False)
            else:
                config = load_config(
                    args.config, data_dir=args.data, test_clock=args.test_clock, catalog_url=args.catalog
                )
        except (OSError, ValueError) as exc:
            print(f"tierstore: bad configuration: {exc}", file=sys.stderr)
            return 2
        logs.configure(config.log_level)
        for warning in config.warnings:
            logs.console.warning("%s", warning)
        if args.command == "lifecycle" or not args.listen_fds:  # once, not once per worker
            logs.console.info("build: %s", compiled_build.describe())
        config.data_dir.mkdir(parents=True, exist_ok=True)
        if args.command == "lifecycle":
            _run(run_lifecycle_only(config))
            return 0
        if args.listen_fds:  # a worker under a supervisor
            worker_setup()
            _run(serve(config, sockets=inherited_sockets(args.listen_fds), ready_fd=args.ready_fd))
            return 0
        workers = args.workers if args.workers is not None else config.workers
        if workers < 0:
            print("tierstore: --workers must be 0 (one per usable core) or more", file=sys.stderr)
            return 2
        workers = workers or default_workers()
        if workers > 1:
            return _supervise(config, argv, workers, args.reuse_port)
        _ignore_sighup()
        try:
            _run(serve(config, reuse_port=args.reuse_port))
        except OSError as exc:
            if exc.errno not in (98, 48):  # EADDRINUSE (Linux, BSD)
                raise
            print(
                f"tierstore: cannot listen on {config.listen}: {exc}"
                + (
                    ""
                    if args.reuse_port
                    else " (another server may take over a port only with --reuse-port on both)"
                ),
                file=sys.stderr,
            )
            return 1
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
