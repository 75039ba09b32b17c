"""fsck against the collectors running beside it: `--repair` collects every orphan it found,
whatever else the shard collector has queued; a piece the garbage collector deleted while fsck
looked is no orphan.

The repair queues the orphans for the shard collector and runs it. The collector takes the oldest
entries first: a heal's or a rebalance's moved-away files, queued earlier. It once stopped at the
first batch that deleted no file, so a batch of entries whose files were already gone (deleted
meanwhile, or named again) left the orphans behind it uncollected. Real store, real drives; the
one interleaving a test needs is made exact by running the real collector right after the real
listing returns.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

from server.app import build_store
from server.config import load_config
from tests.shards import plant, shards_under
from tiering.fsck import PAGE, fsck
from tiering.records import ObjectMeta

HOUR = 3600.0


def test_repair_collects_orphans_queued_behind_settled_entries(tmp_path: Path) -> None:
    data = tmp_path / "data"

    async def scenario() -> None:
        store = build_store(load_config(None, data_dir=data))
        await store.start()
        try:
            await store.create_bucket("b", "me", "us-east-1")
            pending = await store.begin_put("b", "STANDARD", size_hint=2_400_000)
            await pending.write(random.Random(3).randbytes(2_400_000))  # 600 kB shards: files
            record = await pending.commit_object("b", "k", ObjectMeta())
            shard = next(s for s in shards_under(data / "domains") if not s.packed)
            orphans = [plant(shard, f"{n:032x}", age=2 * HOUR) for n in range(3)]
            # More than a batch of earlier entries whose files are gone already: settled by
            # the collector without deleting anything.
            gone = [(f"{n:031x}f", record.tier, shard.domain.name, 1) for n in range(PAGE + 10)]
            store.catalog.add_shard_garbage(gone, time.time() - HOUR)

            report = await fsck(store, repair=True)
            assert len(report.orphans) == len(orphans)
            assert report.repaired == len(orphans), report.to_json()
            assert not any(path.exists() for path in orphans)
            assert (await fsck(store)).orphans == []
        finally:
            await store.close()

    asyncio.run(scenario())


def test_pieces_collected_during_the_walk_are_not_orphans(tmp_path: Path) -> None:
    # fsck lists the drives, then asks the catalog about what no reference names. The garbage
    # collector deletes a retired blob's pieces, then forgets its row: a piece listed before that
    # and asked about after looked unreferenced, an "orphan" (hundreds per report while the
    # collector drained a backlog).
    data = tmp_path / "data"
    rng = random.Random(4)

    async def scenario() -> None:
        store = build_store(load_config(None, data_dir=data))
        await store.start()
        try:
            await store.create_bucket("b", "me", "us-east-1")
            for size in (2_400_000, 2_400_000, 3000):  # shard files and packed replicas; retired twice
                pending = await store.begin_put("b", "STANDARD", size_hint=size)
                await pending.write(rng.randbytes(size))
                await pending.commit_object("b", "k", ObjectMeta())
            backend = store.tiers["hot"].backend
            listing = backend.list_data

            async def listing_then_collection() -> Any:
                listed = await listing()
                assert await store.collect_garbage_round(now=time.time() + HOUR) == 2
                return listed

            backend.list_data = listing_then_collection  # type: ignore[method-assign]
            report = await fsck(store, orphan_age=0)
            del backend.list_data
            assert report.orphans == [], report.orphans
            assert (await fsck(store, orphan_age=0)).orphans == []
        finally:
            await store.close()

    asyncio.run(scenario())
