"""Restarting under load without one failed request: a rolling restart of workers (SIGHUP), and a
second server taking over the port (SO_REUSEPORT) before the old one is sent SIGTERM.

Four client threads run a continuous mix of PUT, GET, LIST and DELETE over keep-alive
connections, with botocore's retries off (`make_client`): any request the restart breaks — a
reset connection, a keep-alive connection closed under a request, a 5xx — is an error. A fifth,
bare http.client connection pauses between its GETs and never checks a pooled connection before
reusing it (urllib3 does): it is the client that an idle keep-alive connection closed by a
stopping server breaks. At the end every acknowledged write must be there (and every
acknowledged delete gone), byte-exact.
"""

from __future__ import annotations

import hashlib
import http.client
import random
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.clients.wire import sign_v4
from tests.conftest import ServerProcess, alternate_gateways, make_client
from tests.support import wait_for

Spawn = Callable[..., ServerProcess]
BUCKET = "rolling"
PROBE = "raw-probe"


class MixedLoad:
    """`threads` clients, each looping PUT, GET, LIST, PUT, DELETE, GET on its own keys."""

    def __init__(self, endpoint: str, threads: int = 4, also: list[str] | None = None) -> None:
        self.endpoint = endpoint
        self.also = also or []  # more gateways: each client sends its requests to all in turn
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.errors: list[str] = []
        self.acked: dict[str, str] = {}  # key → md5 of every write acknowledged and not deleted
        self.deleted: set[str] = set()
        self.requests = 0
        self.threads = [threading.Thread(target=self._run, args=(n,), daemon=True) for n in range(threads)]
        make_client(endpoint).put_object(Bucket=BUCKET, Key=PROBE, Body=b"probe")
        self.acked[PROBE] = hashlib.md5(b"probe").hexdigest()
        self.threads.append(threading.Thread(target=self._bare, daemon=True))

    def __enter__(self) -> MixedLoad:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)

    def _fail(self, what: str, exc: BaseException) -> None:
        with self.lock:
            self.errors.append(f"{time.strftime('%H:%M:%S')} {what}: {exc!r}")

    def _run(self, n: int) -> None:
        s3 = make_client(self.endpoint)  # one client: its connections are kept alive
        if self.also:
            alternate_gateways(s3, [self.endpoint, *self.also])
        rng = random.Random(n)
        mine: dict[str, str] = {}
        count = 0
        while not self.stop.is_set():
            step = count % 6
            count += 1
            try:
                if step in (0, 3):
                    key = f"t{n}/{count:06d}"
                    body = rng.randbytes(rng.choice((0, 100, 4096, 70_000, 300_000)))
                    etag = s3.put_object(Bucket=BUCKET, Key=key, Body=body)["ETag"].strip('"')
                    assert etag == hashlib.md5(body).hexdigest(), key
                    mine[key] = etag
                    with self.lock:
                        self.acked[key] = etag
                elif step in (1, 5) and mine:
                    key = rng.choice(list(mine))
                    body = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
                    assert hashlib.md5(body).hexdigest() == mine[key], f"{key} read back wrong"
                elif step == 2:
                    s3.list_objects_v2(Bucket=BUCKET, Prefix=f"t{n}/", MaxKeys=50)
                elif step == 4 and len(mine) > 5:
                    key = rng.choice(list(mine))
                    s3.delete_object(Bucket=BUCKET, Key=key)
                    del mine[key]
                    with self.lock:
                        del self.acked[key]
                        self.deleted.add(key)
                with self.lock:
                    self.requests += 1
            except Exception as exc:  # noqa: BLE001 - any failure is the finding
                self._fail(f"step {step}", exc)

    def _bare(self) -> None:
        url = urlsplit(self.endpoint)
        conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=30)
        path = f"/{BUCKET}/{PROBE}"
        while not self.stop.is_set():
            time.sleep(0.005)  # idle in between: a server closing idle connections hits this one
            try:
                conn.putrequest("GET", path, skip_host=True, skip_accept_encoding=True)
                for name, value in sign_v4(
                    "GET", self.endpoint + path, {}, "UNSIGNED-PAYLOAD"
                ).headers.items():
                    conn.putheader(name, value)
                conn.endheaders()
                response = conn.getresponse()
                body = response.read()
                assert (response.status, body) == (200, b"probe"), (response.status, body[:200])
                with self.lock:
                    self.requests += 1
            except Exception as exc:  # noqa: BLE001 - any failure is the finding
                self._fail("bare GET", exc)
                conn.close()

    def verify(self, s3: Any) -> None:
        assert not self.errors, f"{len(self.errors)} failed request(s) of {self.requests}: {self.errors[:5]}"
        listed = {
            o["Key"]: o["ETag"].strip('"')
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
            for o in page.get("Contents", [])
        }
        assert listed == self.acked, "the listing differs from the acknowledged writes and deletes"
        for key in random.Random(0).sample(sorted(self.acked), min(40, len(self.acked))):
            body = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
            assert hashlib.md5(body).hexdigest() == self.acked[key], key


def test_sighup_replaces_workers_one_at_a_time(spawn: Spawn) -> None:
    server = spawn(extra_args=["--workers", "2"])
    make_client(server.endpoint).create_bucket(Bucket=BUCKET)
    assert server.proc is not None
    with MixedLoad(server.endpoint) as load:
        time.sleep(2)
        before = load.requests
        server.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "rolling restart done" in server.log(), 60, "the rolling restart")
        during = load.requests - before
        time.sleep(1.5)  # and the new workers serve
    log = server.log()
    assert log.count("accepting on") == 4 and log.count("exited (0)") == 2, log[-3000:]
    load.verify(make_client(server.endpoint))
    assert during > 50, f"only {during} requests during the rolling restart"
    assert server.stop() == 0


def test_new_server_takes_over_the_port(spawn: Spawn, tmp_path: Path) -> None:
    data = tmp_path / "data"
    old = spawn(data, extra_args=["--reuse-port"])
    make_client(old.endpoint).create_bucket(Bucket=BUCKET)
    # The same data directory through another path: the new server's log goes beside it.
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "data").symlink_to(data)
    with MixedLoad(old.endpoint) as load:
        time.sleep(2)
        new = ServerProcess(tmp_path / "new" / "data", old.port, extra_args=["--reuse-port"]).start()
        try:
            time.sleep(1)
            assert old.proc is not None
            old.proc.send_signal(signal.SIGTERM)
            assert old.proc.wait(60) == 0, old.log()
            before = load.requests
            time.sleep(2)  # the new server alone
            after_old = load.requests - before
        except BaseException:
            new.kill()
            raise
    try:
        load.verify(make_client(new.endpoint))
        assert after_old > 20, f"only {after_old} requests after the old server left"
        assert "Traceback" not in new.log() and "Traceback" not in old.log()
    finally:
        assert new.stop() == 0
