"""The remote `Drive`: a drive directory on a `tierstore node`, reached over HTTP (see node_server.py).

Blocking, like the local drive: the pool calls it from worker threads. Every call has a timeout
(connect and each read); a node that refuses, resets or does not answer in time raises
DomainOffline, which the writer and reader treat like an unreachable drive (the shard is missing
for this write, the read uses parity). Blocks are verified here against their checksums, so a
node's bytes are never trusted blindly.

Wire format of a shard write (`PUT`, chunked): the initial header in the request headers, then
records — `F` stripe(u32) checksum(u64) length(u32) block — and one `C` record: a flag, the final
header when the flag is 1, and the trailer MAC (node_auth). The node answers once the shard is
durable (fsync'd and renamed), so a 200 means what a local commit means.

TLS: a node registered at an https:// address (`tierstore node --tls-cert/--tls-key`) is reached
over TLS, its certificate verified against the gateway's CA bundle (`[cluster] node_ca`,
`--node-ca`, TIERSTORE_NODE_CA; the system store when none is given) and its host name or IP. The
HMAC signatures stay on top: TLS keeps the bytes private, the signature says who sent them. A
certificate that does not verify is a connection failure like any other (DomainOffline), so the
gateway answers with parity or a clean 503, never with bytes from a node it cannot trust.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import hashlib
import http.client
import json
import ssl
import struct
import threading
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlsplit

from erasure import node_auth
from erasure.checksum import CHECKSUM_SIZE, block_checksum
from erasure.drive import Drive, DriveFactory, ShardEntry, ShardWriter
from erasure.durability import FlushBarrier
from erasure.errors import CorruptShard, DomainOffline, ErasureError, ShardUnreadable
from erasure.shard_format import HEADER_SIZE, ShardHeader, file_size
from erasure.shard_store import check_data_id, local_drive
from erasure.topology import Domain

DEFAULT_TIMEOUT = 3.0
FRAME = struct.Struct("<cIQI")  # record type, stripe, checksum, block length
HEADER_B64 = "x-tierstore-shard-header"
_IDLE_CONNECTIONS = 8
# A first frame up to this size comes with the shard's header (RemoteDrive.open): small blocks,
# where a round trip costs far more than the bytes; a large object's first frame is not fetched
# for the hedged spare that may never be read.
FIRST_FRAME_MAX = 64 * 1024


class NodeClient:
    """Signed requests to one node over a few kept-alive connections. Thread-safe."""

    def __init__(
        self,
        address: str,
        secret: bytes,
        timeout: float = DEFAULT_TIMEOUT,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        url = urlsplit(address)
        if url.scheme not in ("http", "https") or not url.hostname or not url.port:
            raise ValueError(f"node address must be http(s)://HOST:PORT, not {address!r}")
        self.address, self.secret, self.timeout = address, secret, timeout
        self._host, self._port = url.hostname, url.port
        # https: verified against `tls` (the gateway's node CA), or the system store without one.
        self._tls = (tls or ssl.create_default_context()) if url.scheme == "https" else None
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def new_connection(self) -> http.client.HTTPConnection:
        """A fresh connection to the node (TLS when its address is https://)."""
        if self._tls is not None:
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=self.timeout, context=self._tls
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)

    def connection(self) -> http.client.HTTPConnection:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return self.new_connection()

    def release(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < _IDLE_CONNECTIONS:
                self._idle.append(conn)
                return
        conn.close()

    def drop_idle(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def request(self, method: str, target: str, body: bytes | None = None) -> tuple[int, bytes]:
        """(status, body). DomainOffline when the node cannot be reached or does not answer in time."""
        conn = self.connection()
        for attempt in (1, 2):  # a kept-alive connection the node closed meanwhile: one fresh retry
            try:
                conn.request(
                    method, target, body=body, headers=node_auth.sign(self.secret, method, target, body)
                )
                response = conn.getresponse()
                data = response.read()
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                if attempt == 1 and isinstance(
                    exc, http.client.RemoteDisconnected | ConnectionResetError | BrokenPipeError
                ):
                    # A node that restarted closed every connection kept to it: the other idle
                    # ones are as stale as this one, so they go too and the retry opens anew.
                    self.drop_idle()
                    conn = self.new_connection()
                    continue
                raise DomainOffline(f"node {self.address}: {exc or type(exc).__name__}") from exc
            if response.will_close:
                conn.close()
            else:
                self.release(conn)
            return response.status, data
        raise AssertionError("unreachable")

    def call(self, method: str, target: str, body: bytes | None = None) -> bytes:
        """The body of a 2xx answer; otherwise the error the node reported, as the local drive raises it."""
        status, data = self.request(method, target, body)
        if 200 <= status < 300:
            return data
        raise node_error(status, data, self.address)


def node_error(status: int, data: bytes, address: str) -> Exception:
    """A node's error answer as the exception a local drive would have raised."""
    try:
        info = json.loads(data)
    except ValueError:
        info = {}
    message = f"node {address}: {info.get('message') or data[:200]!r}"
    kind = info.get("error")
    if status == 404 or kind == "not-found":
        return FileNotFoundError(errno.ENOENT, message)
    if kind == "corrupt":
        return CorruptShard(message)
    if kind == "offline":
        return DomainOffline(message)
    if kind == "os-error":
        return OSError(int(info.get("errno") or errno.EIO), message)
    return ErasureError(f"{message} (HTTP {status})")


class RemoteDrive:
    """One drive of a node. `domain.path` is the drive's directory relative to the node's data dir."""

    def __init__(self, domain: Domain, client: NodeClient) -> None:
        self.domain, self.client = domain, client
        self.shard_count = 0
        self.shard_bytes = 0
        self._base = "/v1/drive/" + quote(str(domain.path), safe="/")
        self._usage: tuple[int, int] | None = None

    def target(self, what: str, data_id: str | None = None, index: int | None = None, **query: Any) -> str:
        path = f"{self._base}/{what}"
        if data_id is not None:
            path += f"/{check_data_id(data_id)}/{index}"
        if query:
            path += "?" + "&".join(f"{k}={v}" for k, v in sorted(query.items()))
        return path

    def check_online(self) -> None:
        if not self.domain.online:
            raise DomainOffline(f"domain {self.domain.id} is offline")

    def create(self, header: ShardHeader) -> ShardWriter:
        self.check_online()
        return RemoteShardWriter(self, header)

    def open(self, data_id: str, index: int) -> RemoteShardReader:
        """The shard's header — and, when it is small, its first frame in the same answer: a small
        object's GET is then one round trip to each node instead of two (a node that predates
        `first_frame_max` sends the header alone, and the frame is asked for when read)."""
        self.check_online()
        raw = self.client.call("GET", self.target("header", data_id, index, first_frame_max=FIRST_FRAME_MAX))
        header = ShardHeader.unpack(raw[:HEADER_SIZE])
        if header.data_id != data_id or header.index != index:
            raise CorruptShard(
                f"{self.domain.id}: shard {data_id}.{index} holds {header.data_id}.{header.index}"
            )
        return RemoteShardReader(self, header, raw[HEADER_SIZE:] or None)

    def has(self, data_id: str, index: int) -> bool:
        self.check_online()
        status, data = self.client.request("HEAD", self.target("shard", data_id, index))
        if status == 404:
            return False
        if status != 200:
            raise node_error(status, data, self.client.address)
        return True

    def remove(self, data_id: str, index: int) -> bool:
        self.check_online()
        result = json.loads(self.client.call("DELETE", self.target("shard", data_id, index)))
        if result.get("removed"):
            self._account(-1, -int(result.get("size", 0)))
        return bool(result.get("removed"))

    def sweep_tmp(
        self, max_age: float = 3600.0, judged_elsewhere: Callable[[str], bool] | None = None
    ) -> int:
        # The node judges its own temporary files: it is their only writer.
        self.check_online()
        return int(
            json.loads(self.client.call("POST", self.target("sweep", max_age=int(max_age))))["removed"]
        )

    def sweep_tmp_of(self, writer: Callable[[str], bool]) -> int:
        return 0  # the node's temporary files are its own: it discards a stream that broke off

    def scan(self) -> None:
        self.check_online()
        info = json.loads(self.client.call("GET", self.target("stat")))
        self.shard_count, self.shard_bytes = int(info["shards"]), int(info["bytes"])
        self._usage = (int(info["free"]), int(info["total"]))

    def answers(self) -> bool:
        """Does the node serve this drive right now? (One `stat` request, whatever the domain's
        state: how a gateway tells a node whose catalog heartbeat is late from one that is gone.)"""
        try:
            status, _ = self.client.request("GET", self.target("stat"))
        except DomainOffline:
            return False
        return status == 200

    def list_shards(self) -> list[ShardEntry]:
        self.check_online()
        rows = json.loads(self.client.call("GET", self.target("list")))
        return [ShardEntry(d, int(i), float(t), int(s)) for d, i, t, s in rows]

    def verify_shard(self, data_id: str, index: int) -> ShardHeader:
        self.check_online()
        return ShardHeader.unpack(self.client.call("POST", self.target("verify", data_id, index)))

    def disk_usage(self) -> tuple[int, int] | None:
        """The figures of the last `scan` or probe: a status page must not wait on every node."""
        return self._usage

    def probe_write(self) -> None:
        self.check_online()
        info = json.loads(self.client.call("POST", self.target("probe")))
        self._usage = (int(info["free"]), int(info["total"]))

    def _account(self, files: int, size: int) -> None:
        self.shard_count += files  # a status counter: a lost race under threads is harmless
        self.shard_bytes += size


class RemoteShardWriter:
    """A shard streamed to a node over one connection; `publish` ends the stream and waits for durability."""

    def __init__(self, drive: RemoteDrive, header: ShardHeader) -> None:
        self.store, self.header = drive, header
        self._lock = threading.Lock()
        self._next_stripe = 0
        self._hash = hashlib.sha256()
        self._done = False
        self.replaced: int | None = None  # ShardWriter.replaced, as the node answered it
        client = drive.client
        self._target = drive.target("shard", header.data_id, header.index)
        self._conn = client.new_connection()
        headers = node_auth.sign(client.secret, "PUT", self._target, streaming=True)
        self._signature = headers[node_auth.SIGNATURE_HEADER]
        try:
            self._conn.putrequest("PUT", self._target, skip_accept_encoding=True)
            for name, value in {
                **headers,
                HEADER_B64: base64.b64encode(header.pack()).decode(),
                "transfer-encoding": "chunked",
            }.items():
                self._conn.putheader(name, value)
            self._conn.endheaders()
        except OSError as exc:
            self._conn.close()
            raise DomainOffline(f"node {client.address}: {exc}") from exc

    @property
    def drive(self) -> Drive:
        return self.store

    @property
    def stripes_written(self) -> int:
        return self._next_stripe

    def _send(self, parts: list[bytes | memoryview]) -> None:
        size = sum(len(p) for p in parts)
        for part in parts:
            self._hash.update(part)
        try:
            self._conn.send(b"%x\r\n" % size)
            for part in parts:
                self._conn.send(part)
            self._conn.send(b"\r\n")
        except OSError as exc:
            self._conn.close()
            raise DomainOffline(f"node {self.store.client.address}: {exc}") from exc

    def append(self, stripe: int, checksum: int, block: bytes | memoryview) -> None:
        with self._lock:
            self.store.check_online()
            if stripe != self._next_stripe:
                raise ValueError(
                    f"shard frames must be appended in order: got {stripe}, want {self._next_stripe}"
                )
            self._send([FRAME.pack(b"F", stripe, checksum, len(block)), block])
            self._next_stripe += 1

    def relocate(self, drive: Drive) -> ShardWriter:
        # The frames went to the node: they are not at hand to copy (heal recreates the shard).
        raise ShardUnreadable(f"{self.store.domain.id}: a streamed shard cannot be moved off a node")

    def publish(self, header: ShardHeader | None = None) -> FlushBarrier | None:
        """End the stream (with the final header) and wait until the node has the shard durable."""
        with self._lock:
            self.store.check_online()
            if header is not None:
                self.header = header
            record = b"C" + (b"\1" + header.pack() if header is not None else b"\0")
            self._send([record])
            mac = node_auth.trailer_mac(self.store.client.secret, self._signature, self._hash.digest())
            self._send([mac])
            try:
                self._conn.send(b"0\r\n\r\n")
                response = self._conn.getresponse()
                data = response.read()
            except (OSError, http.client.HTTPException) as exc:
                raise DomainOffline(f"node {self.store.client.address}: {exc}") from exc
            finally:
                self._conn.close()
                self._done = True
            if response.status != 200:
                raise node_error(response.status, data, self.store.client.address)
            # (A node of an earlier version answers {"ok": true}: it added a shard, as far as we know.)
            with contextlib.suppress(ValueError, AttributeError):
                replaced = json.loads(data).get("replaced")
                self.replaced = int(replaced) if replaced is not None else None
        return None

    def committed(self) -> None:
        if self.replaced is None:
            self.store._account(1, file_size(self.header))
        else:
            self.store._account(0, file_size(self.header) - self.replaced)

    def unpublish(self) -> None:
        pass  # publish either made the shard durable or failed as a whole

    def commit(self, header: ShardHeader | None = None) -> None:
        self.publish(header)
        self.committed()

    def discard(self) -> None:
        """Drop the connection mid-stream: the node removes its temporary file (never raises)."""
        with self._lock:
            if not self._done:
                self._done = True
                self._conn.close()


class RemoteShardReader:
    """A shard on a node: its header (with its first frame when small), then one frame per
    request, every frame verified here."""

    def __init__(self, drive: RemoteDrive, header: ShardHeader, first_frame: bytes | None = None) -> None:
        self.store, self.header = drive, header
        self._first_frame = first_frame

    def read_block(self, stripe: int) -> bytes:
        return bytes(self.read_block_view(stripe))

    def read_block_view(self, stripe: int) -> memoryview:
        self.store.check_online()
        if stripe == 0 and self._first_frame is not None:
            raw = self._first_frame
        else:
            raw = self.store.client.call(
                "GET", self.store.target("frame", self.header.data_id, self.header.index, stripe=stripe)
            )
        length = self.header.geometry.block_len(stripe)
        if len(raw) != CHECKSUM_SIZE + length:
            raise CorruptShard(
                f"shard {self.header.index} on {self.store.domain.id} truncated at stripe {stripe}"
            )
        block = memoryview(raw)[CHECKSUM_SIZE:]
        if int.from_bytes(raw[:CHECKSUM_SIZE], "little") != block_checksum(block, stripe, self.header.index):
            raise CorruptShard(
                f"shard {self.header.index} block {stripe} on {self.store.domain.id}: checksum mismatch"
            )
        return block

    def close(self) -> None:
        pass


def tls_context(ca_file: str | None) -> ssl.SSLContext:
    """How a gateway checks a node's certificate: against `ca_file` (PEM), or the system store."""
    return ssl.create_default_context(cafile=ca_file or None)


def remote_drive_factory(
    secret: bytes, timeout: float = DEFAULT_TIMEOUT, ca_file: str | None = None
) -> DriveFactory:
    """A pool's drive factory: a RemoteDrive for a domain with an address, a LocalDrive otherwise.
    Nodes at https:// addresses are verified against `ca_file` (None: the system store)."""
    tls = tls_context(ca_file)
    clients: dict[str, NodeClient] = {}
    lock = threading.Lock()

    def factory(domain: Domain) -> Drive:
        if domain.address is None:
            return local_drive(domain)
        with lock:
            client = clients.get(domain.address)
            if client is None:
                client = clients[domain.address] = NodeClient(domain.address, secret, timeout, tls)
        return RemoteDrive(domain, client)

    return factory


__all__ = ["HEADER_SIZE", "NodeClient", "RemoteDrive", "remote_drive_factory", "tls_context"]
