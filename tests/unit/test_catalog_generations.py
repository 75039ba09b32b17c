"""An object's generation never repeats for a key: movers and the expiry compare-and-swap on it.

The soak test caught this one: a generation counted per row (`generation + 1`, 1 for a new row)
started again at 1 after a DELETE and a new PUT of the same key, so a lifecycle move that had
copied the deleted object committed its copy over the new one — an acknowledged write lost.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tiering.backend import StoredData
from tiering.catalog import Catalog
from tiering.catalog.database import Conn
from tiering.errors import PreconditionFailed
from tiering.records import ObjectMeta, ObjectRecord, Segment


def _record(key: str, data_id: str) -> ObjectRecord:
    return ObjectRecord(
        bucket="b",
        key=key,
        size=1,
        etag=data_id,
        last_modified=1.0,
        tier="hot",
        meta=ObjectMeta(),
        segments=(Segment(StoredData(data_id, 1, {})),),
    )


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    catalog = Catalog(tmp_path / "catalog.db", durable=False)
    catalog.create_bucket("b", "owner", "us-east-1")
    return catalog


def test_a_move_of_a_deleted_object_does_not_land_on_its_successor(catalog: Catalog) -> None:
    old = catalog.commit_object(_record("k", "old-data"))
    # The mover has read `old` and copied its data to warm; meanwhile the key is deleted and written anew.
    catalog.delete_object("b", "k")
    new = catalog.commit_object(_record("k", "new-data"))
    assert new.generation != old.generation
    with pytest.raises(PreconditionFailed):
        catalog.commit_move(
            "b",
            "k",
            expected_generation=old.generation,
            tier="warm",
            segments=(Segment(StoredData("moved-old-data", 1, {})),),
            storage_class=None,
            now=2.0,
            reason="test",
        )
    current = catalog.get_object("b", "k")
    assert current is not None
    assert [s.stored.data_id for s in current.segments] == ["new-data"] and current.tier == "hot"


def test_an_expiry_of_a_deleted_object_leaves_its_successor(catalog: Catalog) -> None:
    old = catalog.commit_object(_record("k", "old-data"))
    catalog.delete_object("b", "k")
    catalog.commit_object(_record("k", "new-data"))
    assert catalog.delete_object("b", "k", expected_generation=old.generation) is None
    current = catalog.get_object("b", "k")
    assert current is not None and current.etag == "new-data"


def test_every_change_takes_a_new_generation(catalog: Catalog) -> None:
    seen = [catalog.commit_object(_record("k", "a")).generation]
    seen.append(catalog.update_object_meta("b", "k", ObjectMeta(content_type="text/plain")).generation)
    seen.append(
        catalog.commit_move(
            "b",
            "k",
            expected_generation=seen[-1],
            tier="warm",
            segments=(Segment(StoredData("a-warm", 1, {})),),
            storage_class=None,
            now=2.0,
            reason="test",
        ).generation
    )
    seen.append(
        catalog.commit_restripe(
            "b", "k", expected_generation=seen[-1], segments=(Segment(StoredData("a-restriped", 1, {})),)
        ).generation
    )
    assert seen == sorted(set(seen)), seen
    assert catalog.get_object("b", "k").generation == seen[-1]


def test_the_counter_survives_reopening_and_starts_past_an_older_catalog(tmp_path: Path) -> None:
    path = tmp_path / "catalog.db"
    catalog = Catalog(path, durable=False)
    catalog.create_bucket("b", "owner", "us-east-1")
    last = 0
    for i in range(5):
        last = catalog.commit_object(_record("k", f"v{i}")).generation
    catalog.close()
    assert Catalog(path, durable=False).commit_object(_record("k2", "x")).generation > last

    # A catalog written by a version without the counter: generations up to 41 already in use.
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE counters")
        db.execute("UPDATE objects SET generation = 41 WHERE key = 'k'")
    reopened = Catalog(path, durable=False)
    assert reopened.commit_object(_record("k3", "y")).generation > 41


def test_generations_reserved_by_a_rolled_back_piece_are_never_handed_out(catalog: Catalog) -> None:
    """SQLite reserves generations a block at a time per write transaction. A piece of a batch
    that reserved a block and then failed is rolled back — and the reservation with it: the next
    piece must not take values from that block, or a later transaction, reserving the same values
    again, would hand out one a committed row already has."""
    database = catalog._db
    handed_out: list[int] = []

    def reserve_then_fail(db: Conn) -> None:
        handed_out.append(database.next_generation(db))
        raise PreconditionFailed("etag")

    def reserve(db: Conn) -> int:
        return database.next_generation(db)

    done = database.write_batch([reserve_then_fail, reserve])
    assert isinstance(done[0][1], PreconditionFailed) and done[1][1] is None
    committed = done[1][0]

    def reserve_many(db: Conn) -> list[int]:
        return [database.next_generation(db) for _ in range(100)]

    later = database.write_batch([reserve_many])[0][0]
    assert committed not in later
    assert min(later) > committed  # and they still grow with the commit order
    assert len(set(later)) == len(later)
