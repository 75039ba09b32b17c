"""The `tierstore` command: `tierstore serve` and `tierstore admin ...`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import uvicorn

from server.admin_cli import add_admin_parser, run_admin
from server.app import build_lifecycle, build_store, create_app
from server.config import ServerConfig, load_config

# Blocking work (disk, hashing, SQLite) runs in threads; many concurrent streams need many.
IO_THREADS = 64
# On shutdown, a connection that is already closing (its last response handed to the kernel)
# gets this long to finish closing before it is dropped: a TLS close waits for the client's
# close_notify, which an idle keep-alive client never sends.
CLOSING_GRACE = 1.0


class _Server(uvicorn.Server):
    """uvicorn's server with two shutdown fixes: exit status 0 and no wait on idle TLS clients."""

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
        while self.server_state.connections and not self.force_exit:
            now = time.monotonic()
            for connection in list(self.server_state.connections):
                transport = getattr(connection, "transport", None)
                if transport is None or not transport.is_closing() or transport.get_write_buffer_size():
                    continue
                since = closing_since.setdefault(id(connection), now)
                if now - since >= CLOSING_GRACE:
                    transport.abort()
            await asyncio.sleep(0.1)
        await super()._wait_tasks_to_complete()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tierstore", description="S3-compatible tiered object store")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the S3 server")
    serve.add_argument("--config", type=Path, help="TOML configuration file")
    serve.add_argument("--data", type=Path, help="data directory (default ./data)")
    serve.add_argument("--listen", help="HOST:PORT to listen on (default 127.0.0.1:9000)")
    serve.add_argument("--tls-cert", help="PEM certificate: serve HTTPS")
    serve.add_argument("--tls-key", help="PEM private key for --tls-cert")
    serve.add_argument("--test-clock", action="store_true",
                       help="allow `tierstore admin clock advance` (tests and demos only)")
    serve.add_argument("--no-lifecycle", action="store_true",
                       help="do not run the lifecycle daemon here (run `tierstore lifecycle` instead)")
    daemon = commands.add_parser("lifecycle", help="run only the lifecycle daemon, beside a server")
    daemon.add_argument("--config", type=Path, help="TOML configuration file (the server's)")
    daemon.add_argument("--data", type=Path, help="data directory (the server's)")
    daemon.add_argument("--test-clock", action="store_true", help="follow the server's test clock")
    add_admin_parser(commands)
    return parser


def _banner(config: ServerConfig) -> str:
    scheme = "https" if config.tls_cert else "http"
    tiers = ", ".join(f"{t.name}({t.backend})" for t in config.tiers)
    lines = [
        f"tierstore: listening on {scheme}://{config.listen} (data in {config.data_dir.resolve()})",
        f"tierstore: tiers: {tiers}",
        f"tierstore: access key: {config.access_key}",
    ]
    if config.credentials_are_default:
        lines.append(f"tierstore: secret key: {config.secret_key}  (default credentials: set "
                     "TIERSTORE_ACCESS_KEY / TIERSTORE_SECRET_KEY for anything but a local trial)")
    return "\n".join(lines)


async def serve(config: ServerConfig) -> None:
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(IO_THREADS, thread_name_prefix="io"))
    app = create_app(config)
    uv_config = uvicorn.Config(
        app,
        host=config.listen_host,
        port=config.listen_port,
        http="httptools",
        loop="none",
        lifespan="on",
        access_log=False,
        server_header=False,
        log_level=config.log_level,
        ssl_certfile=config.tls_cert or None,
        ssl_keyfile=config.tls_key or None,
        timeout_graceful_shutdown=30,
        timeout_keep_alive=30,
    )
    server = _Server(uv_config)
    task = asyncio.create_task(server.serve())
    while not server.started and not task.done():
        await asyncio.sleep(0.02)
    if server.started:
        # Tests and scripts wait for this line: it is printed only once requests are accepted.
        print(_banner(config), flush=True)
    await task


async def run_lifecycle_only(config: ServerConfig) -> None:
    """The daemon in its own process: same catalog and tiers, no HTTP. Stops on SIGTERM/SIGINT."""
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(IO_THREADS, thread_name_prefix="io"))
    store = build_store(config)
    lifecycle = build_lifecycle(config, store, run_daemon=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await store.start()
    await lifecycle.start()
    print(f"tierstore: lifecycle daemon running on {config.data_dir.resolve()}", flush=True)
    try:
        await stop.wait()
    finally:
        await lifecycle.close()
        await store.close()


def _run(coro_factory: object) -> None:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux and macOS
        asyncio.run(coro_factory)  # type: ignore[arg-type]
    else:
        uvloop.run(coro_factory)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "admin":
        return run_admin(args)
    if args.command in ("serve", "lifecycle"):
        try:
            if args.command == "serve":
                config = load_config(args.config, data_dir=args.data, listen=args.listen,
                                     tls_cert=args.tls_cert, tls_key=args.tls_key, test_clock=args.test_clock)
                if args.no_lifecycle:
                    config.lifecycle = replace(config.lifecycle, enabled=False)
            else:
                config = load_config(args.config, data_dir=args.data, test_clock=args.test_clock)
        except (OSError, ValueError) as exc:
            print(f"tierstore: bad configuration: {exc}", file=sys.stderr)
            return 2
        logging.basicConfig(level=config.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        config.data_dir.mkdir(parents=True, exist_ok=True)
        _run(serve(config) if args.command == "serve" else run_lifecycle_only(config))
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
