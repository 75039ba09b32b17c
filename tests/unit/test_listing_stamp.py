"""The listing stamp (SQLite catalog, schema version 7): it moves with what a listing shows and
only with that, so that a page read ahead (tiering/listing_readahead.py) survives the commits an
idle server makes all the time (lease renewals, process heartbeats, heat) and never outlives a
change it would hide.

Real catalogs in temp dirs; the readahead runs its real thread against the real catalog.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tiering.catalog import Catalog, schema
from tiering.catalog.base import LIST_COLUMNS
from tiering.catalog.processes import ProcessRow
from tiering.listing_readahead import ListingReadahead, PageArgs
from tiering.records import ListPage, ObjectMeta

BUCKET = "stamped"


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[Catalog]:
    cat = Catalog(tmp_path / "catalog.db")
    cat.create_bucket(BUCKET, "owner", "us-east-1")
    cat.create_empty_objects(BUCKET, [f"k{n:03d}" for n in range(30)], tier="hot", meta=ObjectMeta(), now=1.0)
    try:
        yield cat
    finally:
        cat.close()


def _moves(catalog: Catalog, change: Callable[[], object]) -> bool:
    before = catalog.listing_stamp()
    assert before is not None
    change()
    return catalog.listing_stamp() != before


def test_the_update_trigger_watches_every_listed_column() -> None:
    """The migration keeps its own copy of the listed columns (a migration must not change after
    it shipped); a column added to LIST_COLUMNS without a new migration fails here."""
    assert {c.strip() for c in LIST_COLUMNS.split(",")} <= set(schema._LISTED)


def test_what_a_listing_shows_moves_the_stamp(catalog: Catalog) -> None:
    meta = ObjectMeta()
    assert _moves(
        catalog, lambda: catalog.create_empty_objects(BUCKET, ["new"], tier="hot", meta=meta, now=2.0)
    )
    assert _moves(catalog, lambda: catalog.delete_object(BUCKET, "k001"))
    # A self-copy that changes the storage class rewrites a listed column.
    assert _moves(
        catalog, lambda: catalog.update_object_meta(BUCKET, "k002", ObjectMeta(storage_class="STANDARD_IA"))
    )
    # A lifecycle transition to another storage class (nothing else listed changes).
    moved = catalog.get_object(BUCKET, "k005")
    assert _moves(
        catalog,
        lambda: catalog.commit_move(
            BUCKET, "k005", expected_generation=moved.generation, tier="cold", segments=(),
            storage_class="GLACIER", now=5.0, reason="lifecycle",
        ),
    )  # fmt: skip
    catalog.create_bucket("gone", "owner", "us-east-1")
    assert _moves(catalog, lambda: catalog.delete_bucket("gone"))


def test_leases_heartbeats_heat_and_tags_leave_the_stamp_alone(catalog: Catalog) -> None:
    now = time.time()
    assert not _moves(catalog, lambda: catalog.acquire_lease("garbage-collector", "me", 30.0, now))
    assert not _moves(catalog, lambda: catalog.acquire_lease("garbage-collector", "me", 30.0, now + 1))
    catalog.register_process(ProcessRow("p1", "host", 1, now, now, now + 30))
    assert not _moves(catalog, lambda: catalog.renew_process("p1", now + 1, now + 31))
    assert not _moves(catalog, lambda: catalog.record_accesses({(BUCKET, "k003", ""): (5, now)}))
    assert not _moves(catalog, lambda: catalog.put_tags(BUCKET, "k004", {"team": "vision"}))
    assert not _moves(catalog, lambda: catalog.put_setting("some-setting", "1"))
    # A move to another tier in the same storage class (temperature): the listing reads the same.
    moved = catalog.get_object(BUCKET, "k006")
    assert not _moves(
        catalog,
        lambda: catalog.commit_move(
            BUCKET, "k006", expected_generation=moved.generation, tier="warm", segments=(),
            storage_class=None, now=6.0, reason="temperature",
        ),
    )  # fmt: skip


def test_a_catalog_of_version_6_gets_the_counter(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    Catalog(path).close()
    with sqlite3.connect(path) as db:  # as version 6 left it: no counter table, no triggers
        for name in ("insert", "delete", "update", "bucket"):
            db.execute(f"DROP TRIGGER listing_changes_{name}")
        db.execute("DROP TABLE listing_changes")
        db.execute("UPDATE schema_version SET version = 6")
    reopened = Catalog(path)
    try:
        reopened.create_bucket(BUCKET, "owner", "us-east-1")
        meta = ObjectMeta()
        assert _moves(
            reopened, lambda: reopened.create_empty_objects(BUCKET, ["a"], tier="hot", meta=meta, now=1.0)
        )
    finally:
        reopened.close()


def _page_after(readahead: ListingReadahead, start_after: str) -> list[str]:
    page = readahead.page(PageArgs(BUCKET, "", "", start_after, 10))
    return [entry.key for entry in page.objects]


def _wait_read_ahead(readahead: ListingReadahead) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with readahead._lock:
            pending = [ahead.page for ahead in readahead._ahead.values()]
        if pending and all(future.done() for future in pending):
            return
        time.sleep(0.01)
    raise AssertionError("the next page was not read ahead")


def test_a_page_read_ahead_survives_a_lease_renewal_but_not_a_put(catalog: Catalog) -> None:
    def read_page(args: PageArgs) -> ListPage:
        return catalog.list_objects(
            args.bucket, prefix=args.prefix, delimiter=args.delimiter, start_after=args.start_after,
            max_keys=args.max_keys,
        )  # fmt: skip

    readahead = ListingReadahead(read_page, catalog.listing_stamp)
    try:
        assert _page_after(readahead, "k000") == [f"k{n:03d}" for n in range(1, 11)]
        _wait_read_ahead(readahead)  # k011..k020, read while "the client reads" this page
        catalog.acquire_lease("rebalancer", "me", 30.0, time.time())  # a commit, not a listing change
        assert _page_after(readahead, "k010") == [f"k{n:03d}" for n in range(11, 21)]
        assert readahead.counts["used"] == 1 and readahead.counts["stale"] == 0

        _wait_read_ahead(readahead)  # k021..k029
        catalog.create_empty_objects(BUCKET, ["k0205"], tier="hot", meta=ObjectMeta(), now=3.0)
        time.sleep(0.15)  # past the pause that follows a stale page
        assert _page_after(readahead, "k020") == ["k0205", *[f"k{n:03d}" for n in range(21, 30)]]
        assert readahead.counts["stale"] == 1
    finally:
        readahead.close()


def _ahead_when_settled(readahead: ListingReadahead, count: int) -> list[str]:
    """The start keys of the pages read ahead, once `count` of them are read."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with readahead._lock:
            ahead = dict(readahead._ahead)
        if len(ahead) >= count and all(entry.page.done() for entry in ahead.values()):
            return sorted(args.start_after for args in ahead)
        time.sleep(0.01)
    raise AssertionError(f"{count} pages were not read ahead")


def test_a_client_paging_through_finds_two_pages_read_ahead(catalog: Catalog) -> None:
    """Two pages ahead: the thread reads on while a request renders and sends its page and the
    client asks for the next one (with one, each query waited for that whole round trip)."""
    reads: list[str] = []

    def read_page(args: PageArgs) -> ListPage:
        reads.append(args.start_after)
        return catalog.list_objects(args.bucket, start_after=args.start_after, max_keys=args.max_keys)

    readahead = ListingReadahead(read_page, catalog.listing_stamp)
    try:
        page = readahead.page(PageArgs(BUCKET, "", "", "k000", 5))
        assert [entry.key for entry in page.objects] == [f"k{n:03d}" for n in range(1, 6)]
        assert _ahead_when_settled(readahead, 2) == ["k005", "k010"]
        for start in ("k005", "k010", "k015"):
            page = readahead.page(PageArgs(BUCKET, "", "", start, 5))
            assert page.objects[0].key == f"k{int(start[1:]) + 1:03d}"
            expected = [f"k{n:03d}" for n in range(int(start[1:]) + 5, 30, 5)][:2]
            assert _ahead_when_settled(readahead, len(expected)) == expected
        assert readahead.counts == {"used": 3, "stale": 0, "read": 1}
        assert reads == [f"k{n:03d}" for n in range(0, 30, 5)]  # each page read once, in order
    finally:
        readahead.close()
