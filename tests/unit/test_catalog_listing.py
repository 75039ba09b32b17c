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
