"""Listing is an ordered index scan: a page costs the same in a small and in a huge bucket.

The cost is measured in SQLite virtual-machine steps (a progress handler counts them), which is
deterministic, unlike wall time on a shared machine.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tiering.catalog import Catalog, key_successor


def _bulk_load(catalog: Catalog, bucket: str, keys: list[str]) -> None:
    """Test data only: rows written straight into the table (a million commits would take minutes)."""
    catalog.create_bucket(bucket, "owner", "us-east-1")
    meta = json.dumps({"ct": "binary/octet-stream", "sys": {}, "user": {}, "sc": "STANDARD", "scx": False})
    segs = json.dumps([{"id": "x", "size": 1, "loc": {}, "pn": 0, "etag": "", "ck": None}])
    conn = sqlite3.connect(catalog.path)
    conn.executemany(
        "INSERT INTO objects (bucket, key, generation, size, etag, last_modified, tier, meta, tags, "
        "checksum_algorithm, checksum, segments) VALUES (?, ?, 1, 1, 'e', 0, 'hot', ?, '{}', NULL, NULL, ?)",
        ((bucket, k, meta, segs) for k in keys),
    )
    conn.commit()
    conn.close()


class StepCounter:
    def __init__(self, catalog: Catalog) -> None:
        self.conn = catalog._reader()  # the reader connection this thread's listing uses
        self.steps = 0

    def __enter__(self) -> StepCounter:
        def tick() -> int:
            self.steps += 1
            return 0

        self.conn.set_progress_handler(tick, 100)
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.set_progress_handler(None, 0)


@pytest.fixture(scope="module")
def catalogs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Catalog, Catalog]:
    root: Path = tmp_path_factory.mktemp("catalogs")
    small, big = Catalog(root / "small.db", durable=False), Catalog(root / "big.db", durable=False)
    # Keys like dir0042/file000123: 100 "directories" in the small bucket, 2,000 in the big one.
    _bulk_load(small, "b", [f"dir{d:04d}/file{f:06d}" for d in range(100) for f in range(50)])
    _bulk_load(big, "b", [f"dir{d:04d}/file{f:06d}" for d in range(2000) for f in range(150)])
    return small, big


def _steps(catalog: Catalog, **kwargs: object) -> tuple[int, int]:
    with StepCounter(catalog) as counter:
        page = catalog.list_objects("b", **kwargs)  # type: ignore[arg-type]
    return counter.steps, len(page.objects) + len(page.common_prefixes)


@pytest.mark.parametrize("start_after", ["", "dir0050/file000010", "dir0079/file000040"])
def test_page_cost_does_not_grow_with_bucket_size(
    catalogs: tuple[Catalog, Catalog], start_after: str
) -> None:
    small, big = catalogs
    small_steps, n_small = _steps(small, start_after=start_after, max_keys=1000)
    big_steps, n_big = _steps(big, start_after=start_after, max_keys=1000)
    assert n_big == 1000
    # 60x more keys, the same page: the cost stays within a small factor (a B-tree one level deeper).
    assert big_steps <= 2 * max(small_steps, 1) + 50, (small_steps, big_steps)


def test_delimiter_listing_seeks_past_each_common_prefix(catalogs: tuple[Catalog, Catalog]) -> None:
    _, big = catalogs
    steps, n = _steps(big, delimiter="/", max_keys=1000)
    assert n == 1000
    # 1,000 prefixes cover 150,000 keys: a scan would visit them all; seeking visits ~1 per prefix.
    flat_steps, _ = _steps(big, start_after="dir0000/file000000", max_keys=1000)
    assert steps < 20 * flat_steps, (steps, flat_steps)
    page = big.list_objects("b", delimiter="/", max_keys=3)
    assert page.common_prefixes == ["dir0000/", "dir0001/", "dir0002/"]
    assert page.is_truncated and page.next_marker == "dir0002/"


def test_last_page_of_big_bucket_is_cheap(catalogs: tuple[Catalog, Catalog]) -> None:
    _, big = catalogs
    first, _ = _steps(big, max_keys=1000)
    last, n = _steps(big, start_after="dir1999/file000000", max_keys=1000)
    assert n == 149
    assert last <= first + 50


def test_key_successor_orders_after_every_extension() -> None:
    for prefix in ["a/", "dir0001/", "é/", "\U0010ffff", "a\U0010ffff"]:
        succ = key_successor(prefix)
        for tail in ["", "z", "\U0010ffff", "\x00"]:
            assert succ is None or (prefix + tail).encode() < succ.encode()
    assert key_successor("\U0010ffff") is None


# The lifecycle daemon's scan and the multipart-upload listing page with a cursor of two columns
# ((bucket, key); (key, upload id)). Each page must seek the index to its cursor: written as
# `bucket > ? OR (bucket = ? AND key > ?)` SQLite read the index from its first entry for every
# page, so a pass over N objects cost ~N² / (2 * page size) entries.


def _scan_steps(catalog: Catalog, bucket: str, key: str) -> tuple[int, list[str]]:
    with StepCounter(catalog) as counter:
        page = catalog.objects_after(bucket, key, 500)
    return counter.steps, [f"{r.bucket}/{r.key}" for r in page]


def test_a_page_of_the_lifecycle_scan_costs_the_same_deep_into_the_catalog(
    catalogs: tuple[Catalog, Catalog],
) -> None:
    _, big = catalogs
    first, keys = _scan_steps(big, "", "")
    assert keys[:2] == ["b/dir0000/file000000", "b/dir0000/file000001"] and len(keys) == 500
    late, keys = _scan_steps(big, "b", "dir1900/file000000")  # 285,000 objects in
    assert keys[:2] == ["b/dir1900/file000001", "b/dir1900/file000002"] and len(keys) == 500
    assert late <= 2 * max(first, 1) + 50, (first, late)


def test_the_lifecycle_scan_goes_on_into_the_next_bucket(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "two.db", durable=False)
    _bulk_load(catalog, "a", ["x", "y", "y/z"])
    _bulk_load(catalog, "ab", ["a"])
    _bulk_load(catalog, "b", ["a", "b"])
    seen: list[str] = []
    cursor = ("", "")
    while page := catalog.objects_after(*cursor, 2):
        seen += [f"{r.bucket}:{r.key}" for r in page]
        cursor = (page[-1].bucket, page[-1].key)
    assert seen == ["a:x", "a:y", "a:y/z", "ab:a", "b:a", "b:b"]
    assert [r.key for r in catalog.objects_after("a", "y", 10)][:2] == ["y/z", "a"]


def _bulk_load_uploads(catalog: Catalog, bucket: str, keys_and_ids: list[tuple[str, str]]) -> None:
    """Test data only, as `_bulk_load`: upload rows written straight into the table."""
    conn = sqlite3.connect(catalog.path)
    conn.executemany(
        "INSERT INTO uploads (upload_id, bucket, key, initiated, tier, meta, tags, checksum_algorithm, owner) "
        "VALUES (?, ?, ?, 0, 'hot', ?, '{}', NULL, 'owner')",
        (
            (upload_id, bucket, key, json.dumps({"ct": "binary/octet-stream"}))
            for key, upload_id in keys_and_ids
        ),
    )
    conn.commit()
    conn.close()


def test_a_page_of_uploads_after_a_marker_seeks_it(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "uploads.db", durable=False)
    catalog.create_bucket("b", "owner", "us-east-1")
    # Three uploads of each of 40,000 keys; upload ids sort against the keys' order on purpose.
    _bulk_load_uploads(
        catalog, "b", [(f"k{n:06d}", f"u{2 - i}-{n:06d}") for n in range(40_000) for i in range(3)]
    )

    def steps(**markers: str) -> tuple[int, list[tuple[str, str]]]:
        with StepCounter(catalog) as counter:
            page = catalog.list_uploads("b", limit=100, **markers)
        return counter.steps, [(u.key, u.upload_id) for u in page]

    first, page = steps()
    assert page[:4] == [
        ("k000000", "u0-000000"),
        ("k000000", "u1-000000"),
        ("k000000", "u2-000000"),
        ("k000001", "u0-000001"),
    ]
    late, page = steps(key_marker="k039000", upload_id_marker="u0-039000")
    assert page[:3] == [("k039000", "u1-039000"), ("k039000", "u2-039000"), ("k039001", "u0-039001")]
    assert late <= 2 * max(first, 1) + 50, (first, late)
    # A key marker alone skips every upload of that key; a prefix still bounds the page.
    _, page = steps(key_marker="k039000")
    assert page[0] == ("k039001", "u0-039001")
    with StepCounter(catalog) as counter:
        in_prefix = catalog.list_uploads(
            "b", prefix="k0390", key_marker="k038000", upload_id_marker="u9", limit=5
        )
    assert [(u.key, u.upload_id) for u in in_prefix][:2] == [
        ("k039000", "u0-039000"),
        ("k039000", "u1-039000"),
    ]
    assert counter.steps <= 2 * max(first, 1) + 50, (first, counter.steps)
    beyond = catalog.list_uploads("b", prefix="k0390", key_marker="k039999", upload_id_marker="u0", limit=5)
    assert [u.key for u in beyond] == []
