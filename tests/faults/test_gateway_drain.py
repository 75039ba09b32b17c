"""A drain through one gateway waits for a write another gateway placed on the node before it.

Two gateways on one PostgreSQL catalog and one data directory. Gateway B takes a large PUT and
holds it mid-body: its shards are placed, their files half written. A `drain --wait` of one of
those nodes through gateway A must not answer while B's write is in flight — A knows nothing of
B's writers in memory; B publishes them in the catalog once it has taken up the drain — and, once
the write completes, answers only after the rebalancer has moved that blob off the node too. Then
`remove` succeeds, the object reads back byte-exact through both gateways and the node holds no
shard. Before the catalog carried those counts, A's drain answered within a couple of seconds
(nothing committed on the node, no writer of its own) while B still wrote there.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.clients.wire import sign_v4
from tests.conftest import ServerProcess, make_client
from tests.faults.conftest import Gateways, StreamingPut, pattern_md5
from tests.shards import shards_under
from tests.support import AdminError, admin, wait_for

pytestmark = [pytest.mark.postgresql, pytest.mark.timeout(600)]

MiB = 1 << 20
SIZE = 12 * MiB  # streamed: shards are placed, their files created, once a stripe (4 x 1 MiB) is in
HELD_AT = 6 * MiB
GRACE = 2.0  # TIERSTORE_RETIRE_GRACE_SECONDS: the drain also waits out the moved files' grace
STILL_WAITING = 8.0  # seconds the drain must keep waiting while B's write is held


def nodes_written_by(data: Path, pid: int) -> list[str]:
    """Nodes of the hot tier holding a temporary shard file of process `pid` (a write in flight)."""
    found = {p.parts[-4] for p in (data / "domains" / "hot").glob(f"n*/d*/.tmp/*.p{pid}.tmp")}
    return sorted(found)


def drain_state(gateway: ServerProcess, target: str) -> dict[str, Any]:
    """GET domains/<target>/drain through `gateway`: how far the domain is from removable."""
    url = f"{gateway.endpoint}/_tierstore/admin/domains/{target}/drain"
    headers = sign_v4("GET", url, {}, hashlib.sha256(b"").hexdigest()).headers
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as response:
        return dict(json.loads(response.read()))


def test_a_drain_waits_for_a_write_another_gateway_placed_on_the_node(gateways: Gateways) -> None:
    env = {"TIERSTORE_RETIRE_GRACE_SECONDS": str(GRACE), "TIERSTORE_REBALANCE_SETTLE_SECONDS": "1"}
    a, b = gateways(2, env=env)
    s3 = make_client(a.endpoint)
    s3.create_bucket(Bucket="drain")
    s3.put_object(Bucket="drain", Key="before", Body=b"x" * 300_000)

    held = StreamingPut(b, "/drain/held", seed=7, size=SIZE, pause_at=HELD_AT)
    held.start()
    try:
        assert held.paused.wait(60), "the held PUT never reached its pause"
        assert b.proc is not None
        pid = b.proc.pid
        wait_for(lambda: nodes_written_by(b.data_dir, pid), 30, "B's shard files of the held PUT")
        node = nodes_written_by(b.data_dir, pid)[0]
        target = f"hot-{node}"

        outcome: dict[str, Any] = {}

        def drain() -> None:
            try:
                outcome["state"] = admin(a.endpoint, "domain", "drain", target, "--wait", timeout=400)
            except AdminError as exc:
                outcome["error"] = str(exc)
            outcome["at"] = time.monotonic()

        drainer = threading.Thread(target=drain, daemon=True)
        drainer.start()
        started = time.monotonic()
        # A counts B's write (published by B once it took up the drain) and keeps waiting.
        wait_for(lambda: drain_state(a, target)["draining"], 30, "the drain to begin")
        drainer.join(STILL_WAITING)
        assert drainer.is_alive(), f"the drain answered while B still wrote on {target}: {outcome}"
        assert drain_state(a, target)["writers"] == 1  # B's, as B published it
    finally:
        held.resume.set()
        held.join(120)
    assert held.error is None and held.status == 200, (held.status, held.error, held.reply[:300])
    released = time.monotonic()
    drainer.join(400)
    assert not drainer.is_alive() and "error" not in outcome, outcome
    assert outcome["at"] >= released > started
    state = outcome["state"]
    assert state["drain"]["removable"], state

    removed = admin(a.endpoint, "domain", "remove", target)
    assert removed["status"] == "removed" and removed["domains"] == [f"{target}-d1", f"{target}-d2"], removed
    expected = pattern_md5(7, SIZE)
    for endpoint in (a.endpoint, b.endpoint):
        client = make_client(endpoint)
        body = client.get_object(Bucket="drain", Key="held")["Body"].read()
        assert hashlib.md5(body).hexdigest() == expected
        assert client.get_object(Bucket="drain", Key="before")["Body"].read() == b"x" * 300_000
    left = shards_under(b.data_dir / "domains" / "hot" / node)
    assert not left, f"{len(left)} shards left on the removed node {node}"
