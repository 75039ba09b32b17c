"""Data ids are time-ordered (tiering/data_ids.py): new ones sort after older ones, so that they
land together at the right edge of the catalog's indexes; where an id's characters pick a
directory (the files backend) the random part does, and earlier versions' ids still resolve."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from pathlib import Path

from erasure.shard_store import check_data_id
from tiering.backend import StoredData
from tiering.backends.local_files import LocalFilesBackend
from tiering.data_ids import TIME_ORDERED, new_data_id, spread_chars
from tiering.peers import owner_of


def test_ids_made_later_sort_after_earlier_ones() -> None:
    earlier = [new_data_id() for _ in range(500)]
    time.sleep(0.002)
    later = [new_data_id() for _ in range(500)]
    assert max(earlier) < min(later)
    assert len(set(earlier + later)) == 1000


def test_an_owned_id_is_a_valid_file_name_and_names_its_owner() -> None:
    data_id = f"{new_data_id()}-0123456789ab"
    assert check_data_id(data_id) == data_id
    assert data_id.startswith(TIME_ORDERED)
    assert owner_of(data_id) == "0123456789ab"


def test_ids_made_at_once_are_spread_over_the_fan_out_directories() -> None:
    ids = [new_data_id() for _ in range(4096)]
    assert len({data_id[:2] for data_id in ids}) <= 2  # the clock's digits: no spread at all
    assert len({spread_chars(data_id)[:2] for data_id in ids}) >= 240  # of 256
    legacy = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
    assert spread_chars(legacy) == "0f1e"


def test_ids_inserted_in_order_share_index_pages(tmp_path: Path) -> None:
    """What time-ordered ids are for: a batch of inserts into a TEXT primary key (the catalog's
    `blobs` table) touches the rightmost leaf pages, not a random leaf per id."""

    def pages_written_by_last_batch(make_id: object, db_path: Path) -> int:
        db = sqlite3.connect(db_path, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE blobs (data_id TEXT PRIMARY KEY, tier TEXT NOT NULL)")
        for _ in range(200):  # 20,000 ids: a few hundred leaf pages
            db.execute("BEGIN")
            db.executemany("INSERT INTO blobs VALUES (?, 'hot')", [(make_id(),) for _ in range(100)])  # type: ignore[operator]
            db.execute("COMMIT")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.execute("BEGIN")
        db.executemany("INSERT INTO blobs VALUES (?, 'hot')", [(make_id(),) for _ in range(32)])  # type: ignore[operator]
        db.execute("COMMIT")
        frames = (os.path.getsize(f"{db_path}-wal") - 32) // (24 + 4096)
        db.close()
        return frames

    ordered = pages_written_by_last_batch(new_data_id, tmp_path / "ordered.db")
    random_ids = pages_written_by_last_batch(lambda: os.urandom(16).hex(), tmp_path / "random.db")
    assert ordered <= 10  # the rightmost leaves of the index and the table, the header page
    assert random_ids >= 24  # a leaf per id


def test_files_backend_places_new_ids_by_their_random_part_and_still_reads_old_ones(tmp_path: Path) -> None:
    backend = LocalFilesBackend(tmp_path)
    data_id = f"{new_data_id()}-0123456789ab"
    stored = backend.write_whole(data_id, b"new layout")
    assert stored is not None
    spread = spread_chars(data_id)
    assert (tmp_path / spread[:2] / spread[2:4] / data_id).read_bytes() == b"new layout"
    assert backend.read_whole(stored) == b"new layout"

    # A blob an earlier version wrote: a random id, under its first four characters.
    legacy_id = "a1b2c3d4e5f60718293a4b5c6d7e8f90-0123456789ab"
    legacy_path = tmp_path / "a1" / "b2" / legacy_id
    legacy_path.parent.mkdir(parents=True)
    legacy_path.write_bytes(b"old layout")
    legacy = StoredData(legacy_id, 10, {})
    assert backend.read_whole(legacy) == b"old layout"
    assert asyncio.run(backend.exists(legacy))
    found = asyncio.run(backend.recent_data(0.0, time.time() + 60))
    assert {d.data_id for d in found} == {data_id, legacy_id}
    asyncio.run(backend.delete(legacy))
    assert not legacy_path.exists()
