"""ObjectStore PUTs through PendingWrite, on the default tiers in a temp dir: a small body is
stored and committed in one thread trip, a large one streams in batches; both read back
byte-exact with the right ETag, and a refused commit leaves no data behind."""

from __future__ import annotations

import asyncio
import hashlib
import random
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from server.app import build_store
from server.config import load_config
from tests.shards import shards_under
from tiering.backend import StoredData
from tiering.errors import ObjectNotFound, PreconditionFailed, TierUnavailable
from tiering.records import ObjectMeta
from tiering.small_writes import MAX_BODY_BYTES
from tiering.store import HASH_BATCH, ObjectStore


def with_store(tmp_path: Path, scenario: Callable[[ObjectStore], Awaitable[Any]]) -> Any:
    async def run() -> Any:
        store = build_store(load_config(None, data_dir=tmp_path / "data"))
        await store.start()
        try:
            await store.create_bucket("b", "me", "us-east-1")
            return await scenario(store)
        finally:
            await store.close()

    return asyncio.run(run())


async def put(store: ObjectStore, key: str, data: bytes, chunk: int, **conditions: str) -> Any:
    pending = await store.begin_put("b", "STANDARD", size_hint=len(data), checksum_algorithm="CRC32")
    try:
        for i in range(0, len(data), chunk):
            await pending.write(data[i : i + chunk])
        await pending.end_body()
        return await pending.commit_object("b", key, ObjectMeta(), **conditions)
    except BaseException:
        await pending.abort()
        raise


async def get(store: ObjectStore, key: str) -> bytes:
    opened = await store.open_object("b", key)
    try:
        return b"".join([c async for c in opened.stream(0, opened.record.size)])
    finally:
        opened.close()


def shard_files(tmp_path: Path) -> set[Path]:
    return {
        p
        for p in (tmp_path / "data").rglob("*")
        if p.is_file() and ".tmp" not in p.parts and p.suffix[1:].isdigit()
    }


@pytest.mark.parametrize(
    ("size", "chunk"),
    [(0, 1), (4096, 4096), (HASH_BATCH, 65536), (HASH_BATCH + 1, 65536), (5 * HASH_BATCH + 12345, 100_000)],
)
def test_put_reads_back_with_its_etag(tmp_path: Path, size: int, chunk: int) -> None:
    data = random.Random(size).randbytes(size)

    async def scenario(store: ObjectStore) -> None:
        record = await put(store, "k", data, chunk)
        assert record.etag == hashlib.md5(data).hexdigest() and record.size == size
        assert await get(store, "k") == data

    with_store(tmp_path, scenario)


def test_a_refused_commit_leaves_no_shards(tmp_path: Path) -> None:
    """If-None-Match on an existing key: the new (durable) blob is deleted, the old one stays."""
    old, new = b"old" * 100, b"new" * 100

    async def scenario(store: ObjectStore) -> None:
        await put(store, "k", old, 1000)
        files = shard_files(tmp_path)
        with pytest.raises(PreconditionFailed):
            await put(store, "k", new, 1000, if_none_match="*")
        assert await get(store, "k") == old
        assert shard_files(tmp_path) == files

    with_store(tmp_path, scenario)


def test_a_backend_without_whole_writes_still_takes_small_bodies(tmp_path: Path, monkeypatch) -> None:
    """`write_whole` answering None (a backend that only streams): the body goes through a writer."""
    calls: list[str] = []

    def no_whole(self: Any, data_id: str, data: bytes) -> StoredData | None:
        calls.append(data_id)
        return None

    from tiering.backends.erasure_coded import ErasureCodedBackend

    monkeypatch.setattr(ErasureCodedBackend, "write_whole", no_whole)
    monkeypatch.setattr(ErasureCodedBackend, "batches_small_writes", False)  # not the committer's batches
    data = b"x" * 5000

    async def scenario(store: ObjectStore) -> None:
        await put(store, "k", data, 700)
        assert await get(store, "k") == data

    with_store(tmp_path, scenario)
    assert len(calls) == 1  # asked once, then streamed


def test_concurrent_small_puts_are_committed_in_batches(tmp_path: Path) -> None:
    """Small PUTs at once (SQLite catalog, erasure-coded hot tier) go to the small-write
    committer, which stores and commits them in batches: fewer batches than PUTs, each PUT's own
    bytes and ETag, and a failed condition fails only its own PUT."""
    bodies = {f"k{n}": random.Random(n).randbytes(n * 97 % 4000 + 1) for n in range(48)}

    async def scenario(store: ObjectStore) -> None:
        committer = store.small_writes
        assert committer is not None
        await put(store, "taken", b"first", 100)
        results = await asyncio.gather(
            *(put(store, key, body, 1000) for key, body in bodies.items()),
            put(store, "taken", b"second", 100, if_none_match="*"),
            return_exceptions=True,
        )
        assert isinstance(results[-1], PreconditionFailed)
        for (key, body), record in zip(bodies.items(), results, strict=False):
            assert not isinstance(record, BaseException) and record.etag == hashlib.md5(body).hexdigest()
            assert await get(store, key) == body
        assert await get(store, "taken") == b"first"
        assert committer.writes == len(bodies) + 2
        assert committer.batches < committer.writes, "every PUT committed on its own"
        # Over MAX_BODY_BYTES: its own thread trip (erasure coded in parallel with other PUTs').
        big = random.Random(7).randbytes(MAX_BODY_BYTES + 1)
        await put(store, "big", big, 65536)
        assert await get(store, "big") == big and committer.writes == len(bodies) + 2

    with_store(tmp_path, scenario)


def test_a_small_put_while_the_store_closes_is_refused_cleanly(tmp_path: Path) -> None:
    """Once the committer closed (the server stopping), a small PUT fails as TierUnavailable (a
    503 the client retries), not a RuntimeError (a 500), and leaves no shards behind."""

    async def scenario(store: ObjectStore) -> None:
        committer = store.small_writes
        assert committer is not None
        await put(store, "before", b"kept" * 10, 100)
        files = shard_files(tmp_path)
        await committer.close()
        with pytest.raises(TierUnavailable):
            await put(store, "after", b"late" * 10, 100)
        assert shard_files(tmp_path) == files
        assert await get(store, "before") == b"kept" * 10

    with_store(tmp_path, scenario)


def test_small_puts_cancelled_mid_batch_leave_all_or_nothing(tmp_path: Path) -> None:
    """Clients that hang up while their small PUT sits in the committer's batch: each such PUT is
    either committed whole (and reads back byte-exact) or leaves no shard behind; the committed
    ones' shards are all there. (A cancelled request waits for its batch before it aborts.)
    Which of them commit is the scheduler's business; every eighth PUT is left to finish (committed
    for certain), and the first is cancelled before it ever runs (committed never)."""
    bodies = {f"c{n}": random.Random(n).randbytes(n * 131 % 3000 + 1) for n in range(40)}

    async def scenario(store: ObjectStore) -> None:
        tasks = {key: asyncio.create_task(put(store, key, body, 1000)) for key, body in bodies.items()}
        finishing = set()
        for turn, (key, task) in enumerate(tasks.items()):
            if turn % 8 == 7:
                finishing.add(key)
                continue
            for _ in range(turn % 8):  # cancelled at different points: queued, in the batch, done
                await asyncio.sleep(0)
            task.cancel()
        await asyncio.wait(tasks.values())
        committed = {}
        for key, body in bodies.items():
            try:
                record = await store.head_object("b", key)
            except ObjectNotFound:
                continue
            assert await get(store, key) == body
            committed[key] = {s.stored.data_id for s in record.segments}
        assert finishing <= committed.keys() and "c0" not in committed, sorted(committed)
        on_disk = {s.data_id for s in shards_under(tmp_path / "data")}
        assert on_disk == set().union(*committed.values())

    with_store(tmp_path, scenario)


def test_a_cancelled_small_put_waits_for_its_batch(tmp_path: Path) -> None:
    """A client that hangs up while its small PUT's batch commits: the request ends (cancelled)
    only once the batch is over, so that what it stored is neither discarded under a committed
    row nor left behind by a failed one. The batch is held at its catalog commit by another
    SQLite writer, the way a second gateway process holds it."""
    body = random.Random(7).randbytes(5000)

    async def scenario(store: ObjectStore) -> None:
        catalog_file = tmp_path / "data" / "catalog" / "catalog.db"
        other_writer = sqlite3.connect(catalog_file, isolation_level=None)
        other_writer.execute("BEGIN IMMEDIATE")
        try:
            task = asyncio.create_task(put(store, "k", body, len(body)))
            await asyncio.sleep(0.3)  # stored, and waiting for the catalog
            assert not task.done()
            task.cancel()
            await asyncio.sleep(0.3)
            assert not task.done(), "the cancelled PUT stopped waiting for its batch"
        finally:
            other_writer.execute("ROLLBACK")
            other_writer.close()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await get(store, "k") == body

    with_store(tmp_path, scenario)


def test_local_files_backend_writes_whole_blobs(tmp_path: Path) -> None:
    from tiering.backends.local_files import LocalFilesBackend

    backend = LocalFilesBackend(tmp_path)
    stored = backend.write_whole("abcdef", b"hello")
    assert stored is not None and stored.size == 5
    assert backend.read_whole(stored) == b"hello"
    assert list((tmp_path / "tmp").iterdir()) == []
