"""The HTTP side of a `tierstore node`: the node's drives served to gateways (client: remote.py).

A threading HTTP/1.1 server: each connection has its own thread, so every disk call (open,
pwrite, fsync, rename) blocks only the request that made it — there is no event loop to stall —
and bodies stream both ways without being held whole. Every request is checked against the
cluster secret (node_auth) before anything on disk is touched.

Routes, under /v1/drive/<drive>/<tier>/ (a drive is a subdirectory of the data directory; each
tier keeps its shards in a directory of its own on it, so listings stay per tier):
    PUT    shard/<id>/<n>          stream a shard in (durable when answered 200)
    HEAD   shard/<id>/<n>          is it there      DELETE shard/<id>/<n>   remove it
    GET    header/<id>/<n>         its 512-byte header
    GET    frame/<id>/<n>?stripe=S one frame: checksum + block (the gateway verifies it)
    POST   verify/<id>/<n>         read every block here; its header when all are intact
    GET    list | stat             committed shards | counts and free space
    POST   sweep?max_age=S | probe temporary files of dead writers | a probe write

TLS (optional, `tierstore node --tls-cert/--tls-key`): every connection is TLS; the handshake runs
in the connection's own thread, so a slow or plain-HTTP client holds up no one else, and a client
that fails it (plain HTTP, a gateway that does not trust the certificate) is logged and dropped
before a byte of a request is read. The HMAC check below applies over TLS all the same.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import hmac
import json
import logging
import os
import re
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from erasure import node_auth
from erasure.checksum import CHECKSUM_SIZE
from erasure.errors import CorruptShard, ErasureError
from erasure.pack import DEFAULT_PACK_THRESHOLD
from erasure.remote import FRAME, HEADER_B64
from erasure.shard_format import HEADER_SIZE, ShardHeader, frame_offset
from erasure.shard_store import LocalDrive, PackedShardReader, check_data_id
from erasure.topology import Domain

log = logging.getLogger("tierstore.node")

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
HANDSHAKE_TIMEOUT = 10.0  # seconds a client has to complete the TLS handshake
_ROUTE = re.compile(r"/v1/drive/([^/]+)/([^/]+)/([a-z]+)(?:/([^/]+)/([0-9]{1,3}))?")


class NodeDrives:
    """The drives under a node's data directory (one subdirectory each), per tier, as LocalDrives."""

    def __init__(
        self, data_dir: Path, drives: list[str], pack_threshold: int = DEFAULT_PACK_THRESHOLD
    ) -> None:
        self.data_dir = data_dir
        self.drives = list(drives)
        self.pack_threshold = pack_threshold  # small shards go to pack files (erasure/pack.py); 0: off
        self._stores: dict[tuple[str, str], LocalDrive] = {}
        self._lock = threading.Lock()

    def store(self, drive: str, tier: str) -> LocalDrive:
        if drive not in self.drives or not _NAME.fullmatch(tier):
            raise FileNotFoundError(errno.ENOENT, f"no drive {drive!r} / tier {tier!r} here")
        with self._lock:
            store = self._stores.get((drive, tier))
            if store is None:
                path = self.data_dir / drive / tier
                path.mkdir(parents=True, exist_ok=True)
                store = self._stores[(drive, tier)] = LocalDrive(
                    Domain(id=f"{drive}/{tier}", path=path, weight=1.0), self.pack_threshold
                )
                with contextlib.suppress(OSError):
                    store.scan()
            return store

    def compact_packs_forever(self, stop: threading.Event, interval: float = 60.0) -> None:
        """Every `interval`: rewrite mostly dead pack files of the drives served so far (erasure/pack.py)."""
        while not stop.wait(interval):
            with self._lock:
                packs = [s.packs for s in self._stores.values() if s.packs is not None]
            for pack_set in packs:
                try:
                    pack_set.compact()
                except OSError:
                    logging.getLogger("tierstore.node").exception("compacting %s failed", pack_set.dir)

    def usage(self, drive: str) -> tuple[int, int]:
        import shutil

        usage = shutil.disk_usage(self.data_dir / drive)
        return usage.free, usage.total


class _Refused(Exception):
    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: NodeHTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        log.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        self._serve()

    def do_HEAD(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_DELETE(self) -> None:
        self._serve()

    # -- dispatch ----------------------------------------------------------------------------

    def _serve(self) -> None:
        self.server.in_flight(+1)
        try:
            self._authenticate()
            self._dispatch()
        except _Refused as exc:
            self._error(exc.status, exc.kind, str(exc))
        except FileNotFoundError as exc:
            self._error(404, "not-found", str(exc))
        except CorruptShard as exc:
            self._error(409, "corrupt", str(exc))
        except (ValueError, ErasureError) as exc:
            self._error(400, "bad-request", str(exc))
        except OSError as exc:
            self._error(
                507 if exc.errno in (errno.ENOSPC, errno.EDQUOT) else 500,
                "os-error",
                str(exc),
                errno_=exc.errno,
            )
        finally:
            if self.server.stopping.is_set():
                self.close_connection = True  # draining: no next request on this connection
            self.server.in_flight(-1)

    def _authenticate(self) -> None:
        headers = {k.lower(): v for k, v in self.headers.items()}
        why = node_auth.check(self.server.secret, self.command, self.path, headers)
        if why is None and not self.server.replays.first_use(
            headers[node_auth.SIGNATURE_HEADER], float(headers[node_auth.DATE_HEADER])
        ):
            why = "replayed request"
        if why is not None:
            self.close_connection = True  # its body (if any) is not read: nothing more on this connection
            log.warning("refused %s %s from %s: %s", self.command, self.path, self.client_address[0], why)
            raise _Refused(403, "forbidden", why)
        self._signature = headers[node_auth.SIGNATURE_HEADER]
        self._body_sha = headers[node_auth.BODY_HEADER]

    def _dispatch(self) -> None:
        url = urlsplit(self.path)
        route = _ROUTE.fullmatch(url.path)
        if route is None:
            raise _Refused(404, "not-found", f"no route {url.path}")
        drive, tier, what, data_id, index = route.groups()
        store = self.server.drives.store(drive, tier)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        shard = (check_data_id(data_id), int(index)) if data_id is not None else None
        method = self.command
        if what == "shard" and shard and method == "PUT":
            self._put(store, *shard)
        elif what == "shard" and shard and method == "HEAD":
            self._send(200 if store.has(*shard) else 404, b"", head=True)
        elif what == "shard" and shard and method == "DELETE":
            self._delete(store, *shard)
        elif what == "header" and shard and method == "GET":
            self._header(store, *shard, int(query.get("first_frame_max", "0")))
        elif what == "frame" and shard and method == "GET":
            self._frame(store, *shard, int(query.get("stripe", "0")))
        elif what == "verify" and shard and method == "POST":
            self._send(200, store.verify_shard(*shard).pack())
        elif what == "list" and method == "GET":
            self._json([[s.data_id, s.index, s.mtime, s.size] for s in store.list_shards()])
        elif what == "stat" and method == "GET":
            free, total = self.server.drives.usage(drive)
            self._json(
                {"shards": store.shard_count, "bytes": store.shard_bytes, "free": free, "total": total}
            )
        elif what == "sweep" and method == "POST":
            self._json({"removed": store.sweep_tmp(float(query.get("max_age", "3600")))})
        elif what == "probe" and method == "POST":
            store.probe_write()
            free, total = self.server.drives.usage(drive)
            self._json({"free": free, "total": total})
        else:
            raise _Refused(405, "bad-request", f"{method} {what} is not served")

    # -- operations --------------------------------------------------------------------------

    def _delete(self, store: LocalDrive, data_id: str, index: int) -> None:
        path = store.path_for(data_id, index)
        packed = store.packs.lookup(data_id, index) if store.packs is not None else None
        try:
            size = packed.length if packed is not None else path.stat().st_size
        except FileNotFoundError:
            size = 0
        self._json({"removed": store.remove(data_id, index), "size": size})

    def _header(self, store: LocalDrive, data_id: str, index: int, first_frame_max: int) -> None:
        """The shard's header; followed by its first frame when that is at most `first_frame_max`
        bytes (a small object's GET then costs one round trip to each node, not two)."""
        reader = store.open(data_id, index)
        try:
            header = reader.header.pack()
            geo = reader.header.geometry
            frame = b""
            if geo.stripe_count > 0 and CHECKSUM_SIZE + geo.block_len(0) <= first_frame_max:
                frame = self._read_frame(store, reader, data_id, index, 0)
        finally:
            reader.close()
        self._send(200, header + frame)

    def _frame(self, store: LocalDrive, data_id: str, index: int, stripe: int) -> None:
        """One frame as stored (the gateway checks it against its checksum)."""
        reader = store.open(data_id, index)
        try:
            geo = reader.header.geometry
            if not 0 <= stripe < geo.stripe_count:
                raise ValueError(f"stripe {stripe} out of range")
            raw = self._read_frame(store, reader, data_id, index, stripe)
        finally:
            reader.close()
        self._send(200, raw)

    @staticmethod
    def _read_frame(store: LocalDrive, reader: Any, data_id: str, index: int, stripe: int) -> bytes:
        geo = reader.header.geometry
        length = CHECKSUM_SIZE + geo.block_len(stripe)
        if isinstance(reader, PackedShardReader):
            return reader.frame(stripe)  # the record was read whole when opened
        fd = os.open(store.path_for(data_id, index), os.O_RDONLY)
        try:
            return os.pread(fd, length, frame_offset(geo.block_size, stripe))
        finally:
            os.close(fd)

    def _put(self, store: LocalDrive, data_id: str, index: int) -> None:
        """Stream a shard in: frames appended as they arrive, committed only after the trailer MAC."""
        if self._body_sha != node_auth.STREAMING:
            raise _Refused(400, "bad-request", "a shard write must be streamed")
        if self.headers.get("transfer-encoding", "").lower() != "chunked":
            raise _Refused(400, "bad-request", "a shard write must be chunked")
        self.close_connection = True  # a failed stream leaves the connection unusable; keep it simple
        header = ShardHeader.unpack(base64.b64decode(self.headers.get(HEADER_B64, "")))
        if (header.data_id, header.index) != (data_id, index):
            raise ValueError("shard header does not match the path")
        body = _ChunkedBody(self.rfile)
        digest = hashlib.sha256()
        writer = store.create(header)
        try:
            final: ShardHeader | None = None
            while True:
                kind = body.read_exact(1)
                if kind == b"F":
                    rest = body.read_exact(FRAME.size - 1)
                    _, stripe, checksum, length = FRAME.unpack(kind + rest)
                    if length > header.block_size:
                        raise ValueError("frame larger than the block size")
                    block = body.read_exact(length)
                    digest.update(kind + rest)
                    digest.update(block)
                    writer.append(stripe, checksum, block)
                elif kind == b"C":
                    flag = body.read_exact(1)
                    digest.update(kind + flag)
                    if flag == b"\1":
                        raw = body.read_exact(HEADER_SIZE)
                        digest.update(raw)
                        final = ShardHeader.unpack(raw)
                        if (final.data_id, final.index) != (data_id, index):
                            raise ValueError("final shard header does not match the path")
                    break
                else:
                    raise ValueError(f"unknown record {kind!r}")
            mac = body.read_exact(node_auth.MAC_SIZE)
            body.read_end()
            want = node_auth.trailer_mac(self.server.secret, self._signature, digest.digest())
            if not hmac.compare_digest(mac, want):
                raise _Refused(403, "forbidden", "bad body MAC")
            writer.commit(final)  # fsync + rename + directory fsync: durable before the answer
        except BaseException:
            writer.discard()
            raise
        # The gateway keeps this drive's shard count too: one more only if nothing was replaced.
        self._json({"ok": True, "replaced": writer.replaced})

    # -- answers -----------------------------------------------------------------------------

    def _json(self, value: Any) -> None:
        self._send(200, json.dumps(value).encode(), "application/json")

    def _error(self, status: int, kind: str, message: str, errno_: int | None = None) -> None:
        body = json.dumps({"error": kind, "message": message, "errno": errno_}).encode()
        with contextlib.suppress(OSError):
            self._send(status, body, "application/json", head=self.command == "HEAD")

    def _send(
        self, status: int, body: bytes, content_type: str = "application/octet-stream", head: bool = False
    ) -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        if self.close_connection:
            self.send_header("connection", "close")
        self.end_headers()
        if not head:
            self.wfile.write(body)


class _ChunkedBody:
    """A chunked request body, read as a plain stream."""

    def __init__(self, rfile: Any) -> None:
        self._rfile = rfile
        self._left = 0  # bytes left in the current chunk
        self._first = True
        self._ended = False

    def _advance(self) -> None:
        """Step to the next chunk (or the end of the body)."""
        if not self._first and self._rfile.read(2) != b"\r\n":
            raise ValueError("bad chunk end")
        self._first = False
        line = self._rfile.readline(100)
        if not line.endswith(b"\r\n"):
            raise ValueError("bad chunk size line")
        self._left = int(line.split(b";")[0], 16)
        if self._left == 0:
            self._ended = True
            self._rfile.readline(100)  # the empty line after the last chunk (no trailers are sent)

    def read_exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            if self._left == 0:
                if self._ended:
                    raise ValueError("body ended early")
                self._advance()
                continue
            data = self._rfile.read(min(self._left, n - len(out)))
            if not data:
                raise ValueError("connection closed mid-body")
            out += data
            self._left -= len(data)
        return bytes(out)

    def read_end(self) -> None:
        """Consume the end of the body; ValueError if anything but the end follows."""
        if self._left == 0 and not self._ended:
            self._advance()
        if self._left != 0 or not self._ended:
            raise ValueError("trailing bytes after the MAC")


class NodeHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        drives: NodeDrives,
        secret: bytes,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        if not secret:
            raise ValueError("a node needs a cluster secret")
        self.drives, self.secret, self.tls = drives, secret, tls
        self.stopping = threading.Event()
        self.replays = node_auth.ReplayWindow()
        self._busy = 0
        self._idle = threading.Condition()
        super().__init__(address, _Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, address = super().get_request()
        if self.tls is not None:  # the handshake waits for the connection's thread (finish_request)
            conn = self.tls.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
        return conn, address

    def finish_request(self, request: Any, client_address: Any) -> None:
        if isinstance(request, ssl.SSLSocket):
            request.settimeout(HANDSHAKE_TIMEOUT)
            try:
                request.do_handshake()
            except OSError as exc:  # ssl.SSLError is one: plain HTTP, an untrusted certificate...
                log.warning("TLS handshake with %s failed: %s", client_address[0], exc)
                return  # dropped: nothing of a request was read
            request.settimeout(None)
        super().finish_request(request, client_address)

    def in_flight(self, change: int) -> None:
        with self._idle:
            self._busy += change
            if self._busy == 0:
                self._idle.notify_all()

    def drain(self, timeout: float = 30.0) -> bool:
        """After `shutdown` (no new connections): let the requests in flight finish — a shard write
        the gateway is streaming completes and is durable — for up to `timeout` seconds. Handler
        threads are daemons, so a connection left idle does not hold the exit up. True if none is left."""
        self.stopping.set()
        with self._idle:
            return self._idle.wait_for(lambda: self._busy == 0, timeout)
