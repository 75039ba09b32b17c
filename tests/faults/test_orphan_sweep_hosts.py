"""The orphan sweep across hosts: gateways with distinct host ids (TIERSTORE_HOST_ID) on one
catalog and one set of drives, each with its own data directory — as gateways on several hosts
are. A process is alive while its row in the catalog's process table is fresh, whatever its pid
means here; a survivor sweeps only what a process whose heartbeat expired wrote.

Gateway C is SIGKILLed while an upload is in flight on A (stopped meanwhile, so that B sweeps):
B sweeps C, and A's upload (its temporary shard files) is untouched and completes byte-exact. Then A is SIGKILLed with an upload
in flight and another durable but not yet committed (its catalog commit held up by a lock the
test takes): once A's heartbeat has expired, B removes both, and of A's data only what it
committed is left.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import signal
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests import postgres
from tests.conftest import ServerProcess, catalog_env, catalog_kind, catalog_query, free_port, make_client

HEARTBEAT = "1"  # seconds (TIERSTORE_PROCESS_HEARTBEAT_SECONDS): rows expire 3 s after a heartbeat
HEARTBEAT_A = "5"  # A's row stays fresh (15 s) while A is stopped for a few seconds
BUCKET = "sweep"
MiB = 1024 * 1024
WIDTH = 6  # k + m of the hot tier (4 + 2 by default): a streamed write's temporary shard files


def _gateways(root: Path) -> list[ServerProcess]:
    """A, B and C: own data directories, one catalog (A's), the erasure-coded tiers on shared drives."""
    shared = root / "shared"
    config = root / "gateway.toml"
    config.write_text("".join(f'[tiers.{t}]\npath = "{shared}"\n\n' for t in ("hot", "warm", "cold")))
    where = catalog_env(root / "a")
    args = [] if where else ["--catalog", f"sqlite:///{root / 'a' / 'catalog' / 'catalog.db'}"]
    (root / "a" / "catalog").mkdir(parents=True, exist_ok=True)
    return [
        ServerProcess(
            root / name,
            free_port(),
            # One process per gateway: the test stops and kills "the" process of A and C and
            # follows one row per host in the process table.
            extra_args=["--config", str(config), *args, "--workers", "1"],
            env={
                **where,
                "TIERSTORE_HOST_ID": f"host-{name}",
                "TIERSTORE_PROCESS_HEARTBEAT_SECONDS": HEARTBEAT_A if name == "a" else HEARTBEAT,
            },
            nodes=False,
        )
        for name in ("a", "b", "c")
    ]


def _process_id(root: Path, host: str) -> str:
    rows = catalog_query(root / "a", "SELECT id FROM processes WHERE host = ?", (host,))
    assert len(rows) == 1, rows
    return str(rows[0][0])


def _heartbeat(root: Path, process_id: str) -> float:
    return float(
        catalog_query(root / "a", "SELECT heartbeat FROM processes WHERE id = ?", (process_id,))[0][0]
    )


def _files_of(shared: Path, owner: str) -> tuple[list[Path], list[Path]]:
    """(committed shard files, temporary shard files) of blobs written by process `owner`."""
    committed: list[Path] = []
    temporary: list[Path] = []
    for path in shared.rglob(f"*-{owner}.*"):
        (temporary if path.parent.name == ".tmp" else committed).append(path)
    return sorted(committed), sorted(temporary)


def _wait(what: str, condition: Any, timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


class SlowPut:
    """A PUT (presigned, so the body needs no hashing up front) whose body is sent in two goes."""

    def __init__(self, endpoint: str, key: str, size: int, first: int) -> None:
        url = urlsplit(
            make_client(endpoint).generate_presigned_url(
                "put_object", Params={"Bucket": BUCKET, "Key": key}, ExpiresIn=600
            )
        )
        self.body = os.urandom(size)
        self.first = first
        assert url.hostname is not None and url.port is not None
        self.conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
        self.conn.putrequest("PUT", f"{url.path}?{url.query}")
        self.conn.putheader("Content-Length", str(size))
        self.conn.endheaders()
        self.conn.send(self.body[:first])

    def finish(self) -> int:
        self.conn.send(self.body[self.first :])
        response = self.conn.getresponse()
        response.read()
        self.conn.close()
        return response.status


@contextlib.contextmanager
def catalog_commits_held(root: Path) -> Iterator[None]:
    """No object can be committed meanwhile: SQLite's write lock, or PostgreSQL's on `objects`
    (reads, and writes to the other tables, go on there)."""
    if catalog_kind() == "postgresql":
        import psycopg

        with psycopg.connect(postgres.database_for(root / "a")) as conn:
            conn.execute("LOCK TABLE objects IN EXCLUSIVE MODE")
            try:
                yield
            finally:
                conn.rollback()
        return
    db = sqlite3.connect(root / "a" / "catalog" / "catalog.db", timeout=30, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        yield
        db.execute("ROLLBACK")
    finally:
        db.close()


def test_a_sweep_takes_only_what_processes_with_an_expired_heartbeat_left(tmp_path: Path) -> None:
    root = tmp_path
    shared = root / "shared"
    a, b, c = gateways = _gateways(root)
    try:
        for gateway in gateways:
            gateway.start()
        ids = {name: _process_id(root, f"host-{name}") for name in ("a", "b", "c")}
        assert c.proc is not None
        c_pid = c.proc.pid
        assert len(set(ids.values())) == 3
        make_client(a.endpoint).create_bucket(Bucket=BUCKET)

        # An upload in flight on A: more than a stripe (4 MiB on hot) sent, so shards are being written.
        flight = SlowPut(a.endpoint, "in-flight", 8 * MiB, 5 * MiB)
        _wait("A's temporary shard files", lambda: len(_files_of(shared, ids["a"])[1]) == WIDTH)
        in_flight = sorted(_files_of(shared, ids["a"])[1])

        # C dies; once its heartbeat has expired, B sweeps after it — and only after it. (A is
        # stopped meanwhile, its row still fresh: B, not A, is the one to sweep, and B knows
        # nothing of A's files but what the process table says.)
        assert a.proc is not None
        a.proc.send_signal(signal.SIGSTOP)
        try:
            c.kill()
            _wait("B's sweep after C", lambda: f"process {ids['c']}: " in b.log())
        finally:
            a.proc.send_signal(signal.SIGCONT)
        assert f"process {ids['c']} (pid {c_pid} on host-c) stopped beating" in b.log()
        assert sorted(_files_of(shared, ids["a"])[1]) == in_flight  # A's upload untouched
        resumed = time.time()
        _wait("A's next heartbeat", lambda: _heartbeat(root, ids["a"]) > resumed)
        assert flight.finish() == 200
        finished = flight.body
        got = make_client(b.endpoint).get_object(Bucket=BUCKET, Key="in-flight")["Body"].read()
        assert hashlib.sha256(got).digest() == hashlib.sha256(finished).digest()
        assert catalog_query(root / "a", "SELECT id FROM processes WHERE id = ?", (ids["c"],)) == []
        kept = sorted(_files_of(shared, ids["a"])[0])  # the finished upload's shards: A's, committed
        assert kept

        # A: one upload in flight, another durable but held up before its catalog commit; A dies.
        flight = SlowPut(a.endpoint, "never-finished", 8 * MiB, 5 * MiB)
        _wait("A's temporary shard files", lambda: len(_files_of(shared, ids["a"])[1]) == WIDTH)
        blocked_result: list[Any] = []
        with catalog_commits_held(root):

            def put() -> None:
                try:
                    make_client(a.endpoint).put_object(
                        Bucket=BUCKET, Key="never-committed", Body=os.urandom(3 * MiB)
                    )
                    blocked_result.append("committed")
                except Exception as exc:  # A is killed under it
                    blocked_result.append(exc)

            blocked = threading.Thread(target=put, daemon=True)
            blocked.start()
            # Its shards are durable (committed files) while the catalog commit waits.
            _wait(
                "A's durable, uncommitted shards",
                lambda: len(_files_of(shared, ids["a"])[0]) == len(kept) + WIDTH,
                20,
            )
            a.kill()
        blocked.join(30)
        assert blocked_result and blocked_result[0] != "committed"
        with contextlib.suppress(OSError):
            flight.conn.close()
        committed, temporary = _files_of(shared, ids["a"])
        assert set(committed) > set(kept) and temporary  # what A left: an orphan blob, an unfinished write

        # B, on another "host", cannot judge A's pid: it waits for A's heartbeat to expire.
        _wait("B's sweep after A", lambda: f"process {ids['a']}: " in b.log())
        assert _files_of(shared, ids["a"]) == (kept, [])  # only what A wrote and committed is left
        s3 = make_client(b.endpoint)
        assert [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]] == ["in-flight"]
        got = s3.get_object(Bucket=BUCKET, Key="in-flight")["Body"].read()
        assert hashlib.sha256(got).digest() == hashlib.sha256(finished).digest()
        # B's own writes go on, and B is the only process left in the table.
        body = os.urandom(5 * MiB + 3)
        s3.put_object(Bucket=BUCKET, Key="after", Body=body)
        assert s3.get_object(Bucket=BUCKET, Key="after")["Body"].read() == body
        assert [r[0] for r in catalog_query(root / "a", "SELECT host FROM processes")] == ["host-b"]
    finally:
        for gateway in gateways:
            gateway.kill()
