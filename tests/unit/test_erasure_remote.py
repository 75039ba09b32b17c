"""The remote drive seam: an erasure pool whose drives are on node servers (loopback, in threads)."""

from __future__ import annotations

import asyncio
import os
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from erasure import ErasurePool
from erasure.node_server import NodeDrives, NodeHTTPServer
from erasure.remote import remote_drive_factory
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


def _pool(nodes: list[tuple[str, NodeHTTPServer]], secret: bytes = SECRET, **kw: object) -> ErasurePool:
    topology = Topology(
        Domain(id=f"hot-n{n}-{d}", path=Path(d) / "hot", node=f"n{n}", rack=f"r{n % 3}", address=address)
        for n, (address, _) in enumerate(nodes) for d in ("d1", "d2")
    )
    return ErasurePool("hot", topology, 4, 2, spread_level="node", block_size=4096,
                       small_object_threshold=1024, drive_factory=remote_drive_factory(secret, timeout=2.0), **kw)


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
        assert pool.read_healthy("whole", location, 50000) == b"x" * 50000
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


def test_wrong_secret_is_refused_and_nothing_written(nodes: list[tuple[str, NodeHTTPServer]], tmp_path: Path) -> None:
    pool = _pool(nodes, secret=b"not-the-secret")
    with pytest.raises(Exception, match="quorum|forbidden|signature"):
        pool.write_blob("forged", b"y" * 5000)
    assert not any(p.name.startswith("forged") for p in tmp_path.rglob("*"))
    address = nodes[0][0]
    for headers in ({}, {"x-tierstore-date": "1", "x-tierstore-content-sha256": "x", "x-tierstore-signature": "0"}):
        request = urllib.request.Request(address + "/v1/drive/d1/hot/list", headers=headers)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=5)
        assert refused.value.code == 403
