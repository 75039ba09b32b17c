"""A heal that loses its race leaves nothing behind.

Heal rebuilds a shard whose drive is offline on another drive, then records the new place with a
compare-and-swap. If the client overwrote the object between the two, the swap loses and the
rebuilt copy is named by nothing: not the new object, not the old blob's garbage entry (which
names the places recorded before). It must be collected, or `fsck` finds an orphan for good (the
soak test's "1 orphan, referenced_blob false" on CI).

The interleaving is made exact by overwriting the object right after the real heal returns, before
its swap: a real store on real drives, nothing of it faked.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest

import tiering.maintenance as maintenance_module
from server.app import build_store
from server.config import load_config
from tiering.backend import StoredData
from tiering.domains import set_domain_state
from tiering.fsck import fsck
from tiering.records import ObjectMeta
from tiering.store import ObjectStore


async def put(store: ObjectStore, key: str, data: bytes) -> None:
    pending = await store.begin_put("b", "STANDARD", size_hint=len(data))
    await pending.write(data)
    await pending.commit_object("b", key, ObjectMeta())


async def read(store: ObjectStore, key: str) -> bytes:
    opened = await store.open_object("b", key)
    try:
        return b"".join([c async for c in opened.stream(0, opened.record.size)])
    finally:
        opened.close()


# hot is 4+2: 600 kB makes 150 kB shards, files of their own; 200 kB makes 50 kB shards, packed.
@pytest.mark.parametrize("size", [600_000, 200_000], ids=["shard-files", "packed-shards"])
def test_a_shard_rebuilt_for_a_blob_overwritten_meanwhile_is_collected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    old, new = random.Random(1).randbytes(size), random.Random(2).randbytes(size)
    monkeypatch.setattr(maintenance_module, "RETIRE_GRACE_SECONDS", 0.0)  # collectable at once

    async def scenario() -> None:
        store = build_store(load_config(None, data_dir=tmp_path / "data"))
        await store.start()
        try:
            await store.create_bucket("b", "me", "us-east-1")
            await put(store, "k", old)
            stored = (await store.head_object("b", "k")).segments[0].stored
            before = list(stored.location["shards"])
            offline = before[0]
            set_domain_state(store, offline, online=False)

            backend: Any = store.tiers["hot"].backend
            real_heal = backend.heal
            rebuilt: list[tuple[int, str]] = []

            async def heal_then_overwrite(blob: StoredData) -> Any:
                result, healed = await real_heal(blob)
                rebuilt.extend((i, healed.location["shards"][i]) for i in result.rebuilt)
                await put(store, "k", new)  # the client's overwrite lands before heal's swap
                return result, healed

            monkeypatch.setattr(backend, "heal", heal_then_overwrite)
            await store.maintenance.heal_blob("hot", stored.data_id, force=True)
            monkeypatch.setattr(backend, "heal", real_heal)
            # The race happened: shard 0 was rebuilt on a drive the old blob never used.
            assert [i for i, _ in rebuilt] == [0] and rebuilt[0][1] not in before, rebuilt

            set_domain_state(store, offline, online=True)
            await store.collect_garbage(now=10**10)  # the old blob, as recorded: gone
            await store.rebalancer.collect_shard_garbage()
            report = await fsck(store, orphan_age=0)
            assert report.orphans == [], report.orphans
            assert report.dangling == report.lost == []
            assert report.queued_garbage == 0  # nothing left waiting either
            assert await read(store, "k") == new
        finally:
            await store.close()

    asyncio.run(scenario())
