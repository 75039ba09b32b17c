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
import time
from pathlib import Path
from typing import Any

import pytest

import tiering.maintenance as maintenance_module
import tiering.rebalance as rebalance_module
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


# hot is 4+2: 2.4 MB makes 600 kB shards, files of their own; 200 kB makes 50 kB shards, packed.
@pytest.mark.parametrize("size", [2_400_000, 200_000], ids=["shard-files", "packed-shards"])
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


def test_the_file_a_heal_moved_away_from_an_offline_drive_is_removed_when_it_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Heal rebuilds the shard of an offline drive on another one and records the move. The old
    file is still on the drive when it comes back, named by nobody: the location names the new
    place, and the blob's garbage entry, once it is retired, will name only that. It is queued
    for the shard collector, which waits for the drive (the soak's orphan on a flapping drive)."""
    data = random.Random(3).randbytes(2_400_000)
    monkeypatch.setattr(maintenance_module, "RETIRE_GRACE_SECONDS", 0.0)
    monkeypatch.setattr(rebalance_module, "OFFLINE_RETRY_SECONDS", 0.0)  # due again at once

    async def scenario() -> None:
        store = build_store(load_config(None, data_dir=tmp_path / "data"))
        await store.start()
        try:
            await store.create_bucket("b", "me", "us-east-1")
            await put(store, "k", data)
            stored = (await store.head_object("b", "k")).segments[0].stored
            offline = stored.location["shards"][0]
            set_domain_state(store, offline, online=False)
            await store.maintenance.heal_blob("hot", stored.data_id, force=True)
            moved_to = (await store.head_object("b", "k")).segments[0].stored.location["shards"][0]
            assert moved_to != offline  # shard 0 now lives elsewhere
            await store.rebalancer.collect_shard_garbage()  # the drive is away: the file waits

            set_domain_state(store, offline, online=True)
            await store.rebalancer.collect_shard_garbage()
            report = await fsck(store, orphan_age=0)
            assert report.orphans == [], report.orphans
            assert report.queued_garbage == 0
            assert await read(store, "k") == data
            # Retired later, the blob leaves nothing behind either.
            await put(store, "k", data[::-1])
            await store.collect_garbage(now=10**10)
            report = await fsck(store, orphan_age=0)
            assert report.orphans == [] and report.queued_garbage == 0, report.orphans
        finally:
            await store.close()

    asyncio.run(scenario())


async def _offline_first_drive(store: ObjectStore, data: bytes) -> StoredData:
    """`k` written, then the drive of its shard 0 offline: heal moves that shard elsewhere."""
    await store.create_bucket("b", "me", "us-east-1")
    await put(store, "k", data)
    stored = (await store.head_object("b", "k")).segments[0].stored
    set_domain_state(store, stored.location["shards"][0], online=False)
    return stored


def test_a_shard_the_collector_deletes_as_a_heal_records_it_is_healed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shard collector checks a queued place (a file moved away from that drive earlier),
    finds it unnamed and deletes it; a heal that rebuilt the same shard at that very place
    records it in between. The collector's check after deleting sees the place named and queues
    the blob for heal (on the old code: one shard gone, nothing knew)."""
    data = random.Random(4).randbytes(2_400_000)

    async def scenario() -> None:
        store = build_store(load_config(None, data_dir=tmp_path / "data"))
        await store.start()
        try:
            stored = await _offline_first_drive(store, data)
            backend: Any = store.tiers["hot"].backend
            result, healed = await backend.heal(stored)  # the heal's rebuild, not yet recorded
            assert result.rebuilt == [0]
            target = healed.location["shards"][0]
            store.catalog.add_shard_garbage([(stored.data_id, "hot", target, 0)], 0.0)

            catalog = store.catalog
            real_lookup = catalog.stored_blob
            recorded: list[bool] = []

            def lookup_then_heal_records(data_id: str) -> StoredData | None:
                found = real_lookup(data_id)
                if not recorded:  # the collector's check has its answer: the heal's swap now
                    recorded.append(catalog.relocate_blob_if(data_id, stored.location, healed.location))
                return found

            monkeypatch.setattr(catalog, "stored_blob", lookup_then_heal_records)
            await store.rebalancer.collect_shard_garbage()
            monkeypatch.setattr(catalog, "stored_blob", real_lookup)
            assert recorded == [True]
            assert (await backend.check(healed)).missing  # the race happened: the file is gone
            assert catalog.heal_due(time.time()), "the blob is queued for heal again"
        finally:
            await store.close()

    asyncio.run(scenario())


def test_a_shard_deleted_before_the_heal_records_it_is_healed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other order: the collector checks, deletes and checks again before the heal's swap.
    Heal's own check after the swap finds its file gone and queues the blob again."""
    data = random.Random(5).randbytes(2_400_000)

    async def scenario() -> None:
        store = build_store(load_config(None, data_dir=tmp_path / "data"))
        await store.start()
        try:
            stored = await _offline_first_drive(store, data)
            backend: Any = store.tiers["hot"].backend
            real_heal = backend.heal

            async def heal_then_collector(blob: StoredData) -> Any:
                result, healed = await real_heal(blob)
                place = (blob.data_id, "hot", healed.location["shards"][0], 0)
                store.catalog.add_shard_garbage([place], 0.0)
                await store.rebalancer.collect_shard_garbage()  # before the swap: unnamed, deleted
                assert (await backend.check(healed)).missing
                return result, healed

            monkeypatch.setattr(backend, "heal", heal_then_collector)
            await store.maintenance.heal_blob("hot", stored.data_id, force=True)
            monkeypatch.setattr(backend, "heal", real_heal)
            # Queued again, and healed by the store's own queue worker (woken at once).
            deadline = time.monotonic() + 30
            while True:
                healed = (await store.head_object("b", "k")).segments[0].stored
                if not (await backend.check(healed)).missing:
                    break
                assert time.monotonic() < deadline, "the lost shard was never rebuilt"
                await asyncio.sleep(0.1)
            assert await read(store, "k") == data
        finally:
            await store.close()

    asyncio.run(scenario())
