"""`fsck --repair` collects every orphan it found, whatever else the shard collector has queued.

The repair queues the orphans for the shard collector and runs it. The collector takes the oldest
entries first: a heal's or a rebalance's moved-away files, queued earlier. It once stopped at the
first batch that deleted no file, so a batch of entries whose files were already gone (deleted
meanwhile, or named again) left the orphans behind it uncollected. Real store, real drives.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

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
            pending = await store.begin_put("b", "STANDARD", size_hint=600_000)
            await pending.write(random.Random(3).randbytes(600_000))  # 150 kB shards: files
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
