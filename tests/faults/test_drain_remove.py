"""The README's own line, `tierstore admin domain drain hot-n3 --wait && tierstore admin domain remove
hot-n3`, run through a real shell and the real CLI while clients keep writing: it exits 0, and every
object (the preloaded ones and every one written during the drain) reads back byte-exact.

`drain --wait` returns only when `remove` can succeed: no live blob names the node any more (a write
that placed its shards before the drain and committed after the rebalancer's last scan is moved by
another run), and the shard files moved away from it have outlived the readers' grace and are gone.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import ACCESS_KEY, SECRET_KEY, ServerProcess, free_port, make_client
from tests.shards import shards_under

pytestmark = pytest.mark.timeout(600)

BUCKET = "drain"
KIB, MIB = 1 << 10, 1 << 20
GRACE = 4.0  # TIERSTORE_RETIRE_GRACE_SECONDS: short, but `remove` right after `drain` is inside it
WRITES_DURING_DRAIN = 150  # bounded: the writer stops after this many PUTs or when the drain ends


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tmp_path / "data",
        free_port(),
        extra_args=["--no-lifecycle"],
        env={"TIERSTORE_RETIRE_GRACE_SECONDS": str(GRACE), "TIERSTORE_REBALANCE_SETTLE_SECONDS": "1"},
    ).start()
    try:
        yield proc
    finally:
        proc.stop()


class Writer(threading.Thread):
    """PUTs new keys (small ones as copies, some erasure-coded) until told to stop or the bound."""

    def __init__(self, server: ServerProcess) -> None:
        super().__init__(daemon=True)
        self.s3 = make_client(server.endpoint, read_timeout=120, connect_timeout=10)
        self.rng = random.Random(11)
        self.written: dict[str, bytes] = {}
        self.stop = threading.Event()
        self.errors: list[str] = []

    def run(self) -> None:
        for n in range(WRITES_DURING_DRAIN):
            if self.stop.is_set():
                return
            body = self.rng.randbytes(self.rng.choice([0, 3 * KIB, 40 * KIB, 300 * KIB, 5 * MIB // 2]))
            key = f"during/{n:04d}"
            try:
                self.s3.put_object(Bucket=BUCKET, Key=key, Body=body)
                self.written[key] = body
            except Exception as exc:  # every failed request is a test failure
                self.errors.append(f"PUT {key}: {type(exc).__name__}: {exc}")


def test_readme_drain_then_remove_with_writes(server: ServerProcess) -> None:
    s3 = make_client(server.endpoint, read_timeout=120, connect_timeout=10, max_pool_connections=16)
    s3.create_bucket(Bucket=BUCKET)
    rng = random.Random(5)
    objects = {
        f"pre/{i:04d}": rng.randbytes(rng.choice([1 * KIB, 20 * KIB, 200 * KIB, 1 * MIB])) for i in range(120)
    }
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda kv: s3.put_object(Bucket=BUCKET, Key=kv[0], Body=kv[1]), objects.items()))

    bin_dir = Path(sys.executable).parent
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "TIERSTORE_ENDPOINT": server.endpoint,
        "TIERSTORE_ACCESS_KEY": ACCESS_KEY,
        "TIERSTORE_SECRET_KEY": SECRET_KEY,
    }
    writer = Writer(server)
    writer.start()
    try:
        done = subprocess.run(
            "tierstore admin domain drain hot-n3 --wait && tierstore admin domain remove hot-n3",
            shell=True,
            env=env,
            capture_output=True,
            text=True,
            timeout=400,
        )
    finally:
        writer.stop.set()
        writer.join(120)
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert "removed hot-n3-d1, hot-n3-d2" in done.stdout, done.stdout
    assert not writer.errors, writer.errors[:5]
    assert writer.written, "no write landed during the drain"

    objects.update(writer.written)

    def check(item: tuple[str, bytes]) -> None:
        key, data = item
        assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == data, f"{key}: wrong bytes"

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(check, objects.items()))
    node = server.data_dir / "domains" / "hot" / "n3"
    left = shards_under(node)  # shard files, and live records in pack files
    assert not left, f"{len(left)} shards left on the removed node"
