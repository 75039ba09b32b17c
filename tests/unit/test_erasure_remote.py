"""The remote drive seam: an erasure pool whose drives are on node servers (loopback, in threads)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from erasure import ErasurePool
from erasure.node_server import NodeDrives, NodeHTTPServer
from erasure.remote import NodeClient, RemoteDrive, remote_drive_factory
from erasure.topology import Domain, Topology

SECRET = b"test-cluster-secret"


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[list[tuple[str, NodeHTTPServer]]]:
    servers = []
    for n in range(6):
        data = tmp_path / f"node{n}"
        for d in ("d1", "d2"):
            (data / d).mkdir(parents=True)
        server = NodeHTTPServer(("127.0.0.1", 0), NodeDrives(data, ["d1", "d2"]), SECRET)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append((f"http://127.0.0.1:{server.server_address[1]}", server))
    yield servers
    for _, server in servers:
        server.shutdown()
        server.server_close()


def _pool(
    nodes: list[tuple[str, NodeHTTPServer]], secret: bytes = SECRET, addresses: dict[int, str] | None = None
) -> ErasurePool:
    """A 4+2 pool over the nodes; `addresses` sends node n's requests elsewhere instead."""
    topology = Topology(
        Domain(
            id=f"hot-n{n}-{d}",
            path=Path(d) / "hot",
            node=f"n{n}",
            rack=f"r{n % 3}",
            address=(addresses or {}).get(n, address),
        )
        for n, (address, _) in enumerate(nodes)
        for d in ("d1", "d2")
    )
    return ErasurePool(
        "hot",
        topology,
        4,
        2,
        spread_level="node",
        block_size=4096,
        small_object_threshold=1024,
        drive_factory=remote_drive_factory(secret, timeout=2.0),
    )


def test_blobs_round_trip_over_nodes(nodes: list[tuple[str, NodeHTTPServer]]) -> None:
    pool = _pool(nodes)

    async def run() -> None:
        for size in (0, 100, 5000, 4 * 4096 * 3 + 17):
            data = os.urandom(size)
            writer = await pool.create_writer(f"blob{size}", None)
            for pos in range(0, size, 3000):
                await writer.write(data[pos : pos + 3000])
            location = await writer.finish()
            assert await pool.read_all(f"blob{size}", location, size) == data
            result = await pool.verify(f"blob{size}", location, size)
            assert not result.damaged and not result.lost
            assert await pool.exists(f"blob{size}", location)
            await pool.delete(f"blob{size}", location)
            assert not await pool.exists(f"blob{size}", location)
        location = pool.write_blob("whole", b"x" * 50000)
        assert pool.read_healthy("whole", location, 50000) is None  # on nodes: the hedged reader's
        assert await pool.read_all("whole", location, 50000) == b"x" * 50000
        listed = {(s.data_id, s.index) for d in pool.topology for s in pool.list_shards(d.id)}
        assert {("whole", i) for i in range(6)} <= listed

    asyncio.run(run())


def test_reads_survive_dead_nodes(nodes: list[tuple[str, NodeHTTPServer]]) -> None:
    pool = _pool(nodes)
    data = os.urandom(100_000)
    location = pool.write_blob("b", data)
    for _, server in nodes[:2]:  # m = 2 nodes gone (their sockets closed: connection refused)
        server.shutdown()
        server.server_close()
    assert asyncio.run(pool.read_all("b", location, len(data))) == data
    # Writes go on at the write quorum (k+1 = 5 of 6 needs one of the dead nodes' places filled):
    # with spread over 6 nodes and 2 dead, only 4 shards land — below quorum, refused cleanly.


def test_wrong_secret_is_refused_and_nothing_written(
    nodes: list[tuple[str, NodeHTTPServer]], tmp_path: Path
) -> None:
    pool = _pool(nodes, secret=b"not-the-secret")
    with pytest.raises(Exception, match="quorum|forbidden|signature"):
        pool.write_blob("forged", b"y" * 5000)
    assert not any(p.name.startswith("forged") for p in tmp_path.rglob("*"))
    address = nodes[0][0]
    for headers in (
        {},
        {"x-tierstore-date": "1", "x-tierstore-content-sha256": "x", "x-tierstore-signature": "0"},
    ):
        request = urllib.request.Request(address + "/v1/drive/d1/hot/list", headers=headers)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        assert refused.value.code == 403


def test_hedged_reads_do_not_wait_for_a_hung_node(nodes: list[tuple[str, NodeHTTPServer]]) -> None:
    """A node that takes connections but never answers (hung) costs a read nothing: k+1 shards
    are asked for and the first k used. Without hedging each read waits out the 2 s timeout."""
    data = {size: os.urandom(size) for size in (500, 20_000, 100_000)}
    locations = {size: _pool(nodes).write_blob(f"h{size}", body) for size, body in data.items()}
    with socket.socket() as hole:  # listens, never accepts: requests hang until their timeout
        hole.bind(("127.0.0.1", 0))
        hole.listen(64)
        black_hole = f"http://127.0.0.1:{hole.getsockname()[1]}"
        for size, body in data.items():
            location = locations[size]
            first = location["shards"][0]  # the node holding shard 0 (a data shard or first copy) hangs
            hung = int(first.split("-")[1][1:])
            pool = _pool(nodes, addresses={hung: black_hole})

            async def timed_read(pool: ErasurePool = pool, size: int = size) -> tuple[bytes, float]:
                # Timed inside the loop: asyncio.run's exit waits for the hung thread's timeout.
                started = time.monotonic()
                got = await pool.read_all(f"h{size}", locations[size], size)
                return got, time.monotonic() - started

            got, took = asyncio.run(timed_read())
            assert got == body
            assert took < 1.0, f"a {size}-byte read waited {took:.2f}s for the hung node"


def test_nodes_pack_small_shards(tmp_path: Path) -> None:
    """A node started with a pack threshold: small shards land in its pack files, read back verified."""
    servers = []
    for n in range(6):
        data = tmp_path / f"pnode{n}"
        for d in ("d1", "d2"):
            (data / d).mkdir(parents=True)
        server = NodeHTTPServer(
            ("127.0.0.1", 0), NodeDrives(data, ["d1", "d2"], pack_threshold=65536), SECRET
        )
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append((f"http://127.0.0.1:{server.server_address[1]}", server))
    try:
        pool = _pool(servers)

        async def run() -> None:
            for size in (100, 900, 5000, 4 * 4096 * 3 + 17):
                data = os.urandom(size)
                location = pool.write_blob(f"blob{size}", data)
                assert await pool.read_all(f"blob{size}", location, size) == data
                assert (await pool.verify(f"blob{size}", location, size)).clean
                listed = {(s.data_id, s.index) for d in pool.topology for s in pool.list_shards(d.id)}
                assert {(f"blob{size}", i) for i, d in enumerate(location["shards"]) if d} <= listed
                await pool.delete(f"blob{size}", location)
                assert not await pool.exists(f"blob{size}", location)

        asyncio.run(run())
        shard_files = [p for p in tmp_path.rglob("*") if p.is_file() and ".packs" not in p.parts]
        assert not shard_files, shard_files  # everything was packed (and is deleted now)
        assert list(tmp_path.rglob("*.tsp"))
    finally:
        for _, server in servers:
            server.shutdown()
            server.server_close()


class _SlowOnce:
    """A TCP relay in front of one node that, once armed, holds the next request it sees past the
    client's timeout and then drops that connection: a node slow for one request under load."""

    def __init__(self, upstream: str, hold: float) -> None:
        host, port = upstream.removeprefix("http://").split(":")
        self._upstream, self._hold = (host, int(port)), hold
        self.armed, self.stalled, self._closed = threading.Event(), 0, threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.address = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._sockets: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            upstream = socket.create_connection(self._upstream)
            self._sockets += (client, upstream)
            for source, sink, requests in ((client, upstream, True), (upstream, client, False)):
                thread = threading.Thread(target=self._pump, args=(source, sink, requests), daemon=True)
                thread.start()
                self._threads.append(thread)

    def _pump(self, source: socket.socket, sink: socket.socket, requests: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if requests and self.armed.is_set():
                    self.armed.clear()
                    self.stalled += 1
                    self._closed.wait(self._hold)
                    break
                sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def cut(self) -> None:
        """Close every connection relayed so far, as a node that restarts does; new ones are taken."""
        sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        time.sleep(0.1)  # the client's end sees the close before it is used again

    def close(self) -> None:
        self._closed.set()
        self._threads[0].join(5)
        self._listener.close()
        for sock in self._sockets:  # kept-alive connections: their pumps wait in recv
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(5)


def test_a_node_slow_once_mid_read_is_asked_again(nodes: list[tuple[str, NodeHTTPServer]]) -> None:
    """With two of six nodes gone a 4+2 blob has exactly k shards left. One of them answering one
    frame request only after the timeout must not cut the read (headers are out by then): the
    shard is asked again before the stripe counts as lost. Without the retry: DataLost mid-stream."""
    data = os.urandom(6 * 4 * 4096 + 123)  # 7 stripes of four 4 KiB blocks
    location = _pool(nodes).write_blob("slow-once", data)
    node_of = [int(domain.split("-")[1][1:]) for domain in location["shards"]]
    for n in node_of[4:]:  # the parity shards' nodes go away: no spare left for a data block
        nodes[n][1].shutdown()
        nodes[n][1].server_close()
    relay = _SlowOnce(nodes[node_of[1]][0], hold=2.5)  # past the pool's 2 s timeout
    try:
        pool = _pool(nodes, addresses={node_of[1]: relay.address})

        async def read() -> bytes:
            reader = await pool.open_reader("slow-once", location, len(data))
            try:
                relay.armed.set()  # stripe 0 came with the open; a later stripe's request is held
                return b"".join([bytes(block) async for block in reader.stream(0, len(data))])
            finally:
                await reader.close()

        assert asyncio.run(read()) == data
        assert relay.stalled == 1
    finally:
        relay.close()


def test_a_restarted_node_is_asked_on_a_fresh_connection(nodes: list[tuple[str, NodeHTTPServer]]) -> None:
    """A node restart closes every connection a gateway keeps alive to it. The first request
    after must not fail for that: before, a stale connection's retry took the next idle one —
    stale too — and the drive counted as offline (a rolling upgrade then saw 503s)."""
    relay = _SlowOnce(nodes[0][0], hold=0)
    try:
        client = NodeClient(relay.address, SECRET, timeout=2.0)
        drive = RemoteDrive(Domain(id="hot-n0-d1", path=Path("d1") / "hot", address=relay.address), client)
        drive.scan()  # one request through the client: its connection is kept alive
        kept = [client.connection() for _ in range(4)]  # four requests at once, say…
        for conn in kept:
            conn.connect()
        for conn in kept:  # … then all idle
            client.release(conn)
        deadline = time.monotonic() + 5
        while len(relay._sockets) < 2 * len(kept) and time.monotonic() < deadline:
            time.sleep(0.01)  # the relay has taken up every connection (two sockets each)
        relay.cut()  # the node goes away and comes back: each kept connection is closed by its end
        for _ in range(3):
            drive.scan()
    finally:
        relay.close()
