"""The collector drains a backlog of retired blobs in one round, not one batch per interval, and
blobs under long reads do not hold up the rest.

One batch (256 blobs) every 2 s was 128 retired blobs a second at most: a workload overwriting
faster than that (a checkpoint loop, a dataset rewritten) grew the backlog without bound, and
every retired blob's disk space with it. A round now takes batch after batch while each one is
full. Real store, real drives; the batch made small so that a few hundred blobs need several.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import pytest

import tiering.store as store_module
from server.app import build_store
from server.config import load_config
from tiering.fsck import fsck
from tiering.records import ObjectMeta
from tiering.store import ObjectStore

KEYS = 120
BATCH = 50  # KEYS retired blobs: three batches, the last one short


async def put(store: ObjectStore, key: str, data: bytes) -> None:
    pending = await store.begin_put("b", "STANDARD", size_hint=len(data))
    await pending.write(data)
    await pending.commit_object("b", key, ObjectMeta())


def test_a_backlog_of_retired_blobs_is_collected_in_one_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "GARBAGE_BATCH", BATCH)
    rng = random.Random(5)

    async def scenario() -> None:
        store = build_store(load_config(None, data_dir=tmp_path / "data"))
        await store.start()
        try:
            await store.create_bucket("b", "me", "us-east-1")
            for _ in range(2):  # the second write of each key retires the first's blob
                for n in range(KEYS):
                    # Small (packed replicas) and striped (shard files) blobs alike.
                    await put(store, f"k{n:03d}", rng.randbytes(3000 if n % 2 else 300_000))
            assert len(store.catalog.due_garbage(10**10, 10 * KEYS)) == KEYS

            assert await store.collect_garbage_round(now=10**10) == KEYS
            assert store.catalog.due_garbage(10**10, 10 * KEYS) == []
            report = await fsck(store, orphan_age=0)
            assert report.orphans == [] and report.queued_garbage == 0, report.orphans
            assert report.blobs == KEYS
        finally:
            await store.close()

    asyncio.run(scenario())


def test_blobs_under_long_reads_do_not_hold_up_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # More than a batch of the oldest retired blobs are pinned by another gateway's long reads:
    # the collector once took them as its batch, left them all, and collected nothing behind them.
    monkeypatch.setattr(store_module, "GARBAGE_BATCH", BATCH)
    rng = random.Random(6)

    async def scenario() -> None:
        store = build_store(load_config(None, data_dir=tmp_path / "data"))
        await store.start()
        try:
            await store.create_bucket("b", "me", "us-east-1")
            for _ in range(2):
                for n in range(KEYS):
                    await put(store, f"k{n:03d}", rng.randbytes(3000 if n % 2 else 300_000))
            oldest = [stored.data_id for _, stored in store.catalog.due_garbage(10**10, 10 * KEYS)]
            pinned = oldest[: BATCH + 10]
            store.catalog.publish_pins("another-gateway", pinned, time.time() + 600)

            assert await store.collect_garbage_round(now=10**10) == KEYS - len(pinned)
            store.catalog.publish_pins("another-gateway", [], time.time() + 600)  # the reads end
            left = store.catalog.due_garbage(10**10, 10 * KEYS)
            assert sorted(stored.data_id for _, stored in left) == sorted(pinned)
            assert await store.collect_garbage_round(now=10**10) == len(pinned)
        finally:
            await store.close()

    asyncio.run(scenario())
