"""The catalog's JSON columns are decoded with orjson and, for what orjson refuses, the standard
library: a row reads back the same whichever decoder took it (tiering/catalog/base.py). An object
row's own columns are encoded the same way (tiering/catalog/rows.py, `dumps`), into the text the
standard library writes (a float's digits aside)."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pytest

from tiering.catalog import Catalog
from tiering.catalog.base import _loads
from tiering.catalog.rows import dumps, standard_dumps
from tiering.records import ObjectMeta


@pytest.fixture
def catalog(tmp_path: Path) -> Catalog:
    catalog = Catalog(tmp_path / "catalog.db", durable=False)
    catalog.create_bucket("b", "owner", "us-east-1")
    return catalog


@pytest.mark.parametrize(
    "text",
    [
        '{"ct":"text/plain","user":{"name":"caf\\u00e9 \\ud83d\\ude00","empty":""}}',
        '{"ct":"text/plain","user":{"name":"café 😀"}}',
        '[{"id":"t1","size":4096,"loc":{"k":1,"shards":["a",null]},"ck":null}]',
        "{}",
        "[1e-05, 0.1, -0.0, 9007199254740993]",
    ],
)
def test_what_orjson_reads_it_reads_as_the_standard_library_does(text: str) -> None:
    assert _loads(text) == json.loads(text)


def test_what_orjson_refuses_the_standard_library_reads() -> None:
    """`json.dumps` writes NaN and integers of any size; orjson refuses both."""
    value = _loads('{"heat": NaN, "big": 123456789012345678901234567890, "inf": Infinity}')
    assert math.isnan(value["heat"]) and value["inf"] == math.inf
    assert value["big"] == 123456789012345678901234567890


def test_a_row_written_by_the_standard_library_reads_back(catalog: Catalog, tmp_path: Path) -> None:
    """A row whose metadata holds what orjson refuses (as `json.dumps` may have written it) still
    reads: the object is not lost to a decoder's strictness."""
    meta = ObjectMeta(content_type="text/plain", user={"note": "naïve"})
    catalog.create_empty_objects("b", ["k"], tier="hot", meta=meta, now=1.0)
    with sqlite3.connect(tmp_path / "catalog.db") as db:
        (stored,) = db.execute("SELECT meta FROM objects WHERE key = 'k'").fetchone()
        raw = json.loads(stored)
        raw["extra"] = float("nan")  # not a field ObjectMeta reads: it must only not break the row
        db.execute("UPDATE objects SET meta = ? WHERE key = 'k'", (json.dumps(raw),))
    record = catalog.get_object("b", "k")
    assert record.meta.content_type == "text/plain" and record.meta.user == {"note": "naïve"}


@pytest.mark.parametrize(
    "value",
    [
        {
            "ct": "text/plain",
            "sys": {},
            "user": {"name": "café 😀", "empty": ""},
            "sc": "STANDARD",
            "scx": False,
        },
        [
            {
                "id": "t0661f55547a-1f2e",
                "size": 4096,
                "loc": {"k": 1, "shards": ["hot/n1/d1", None]},
                "pn": None,
            }
        ],
        {"id": "t1", "size": 9007199254740993, "loc": {}},
        {},
        [],
    ],
)
def test_an_object_rows_columns_are_written_as_the_standard_library_writes_them(value: object) -> None:
    assert dumps(value) == standard_dumps(value)


def test_a_float_reads_back_the_same_though_its_digits_may_differ() -> None:
    """orjson writes 1e-05 as 0.00001: the same number, other digits (nothing compares the text)."""
    value = {
        "lock": {"mode": "GOVERNANCE", "until": 1780000000.123456},
        "tiny": 1e-05,
        "big": 1e16,
        "neg": -0.0,
    }
    assert json.loads(dumps(value)) == value == json.loads(standard_dumps(value))
    assert math.copysign(1.0, json.loads(dumps(value))["neg"]) == -1.0


@pytest.mark.parametrize(
    "value",
    [
        {"big": 123456789012345678901234567890},  # past 64 bits
        {1: "a key that is not a string"},
        {"user": {"name": "\ud800 a lone surrogate"}},
    ],
)
def test_what_orjson_refuses_to_write_the_standard_library_writes(value: object) -> None:
    assert dumps(value) == standard_dumps(value)


def test_a_committed_objects_columns_are_the_standard_librarys_text(catalog: Catalog, tmp_path: Path) -> None:
    from tiering.backend import StoredData
    from tiering.records import ObjectRecord, Segment

    meta = ObjectMeta(content_type="image/jpeg", user={"owner": "zoë"}, tags={"team": "vision"})
    segment = Segment(StoredData("t0661f55547a0011223344556677-abc", 5, {"k": 1, "shards": ["hot/n1/d1"]}))
    record = ObjectRecord("b", "k", 5, "etag", 1.0, "hot", meta, segments=(segment,))
    catalog.commit_object(record)
    with sqlite3.connect(tmp_path / "catalog.db") as db:
        stored = db.execute("SELECT meta, tags, segments FROM objects WHERE key = 'k'").fetchone()
    assert stored == (
        standard_dumps(meta.to_json()),
        standard_dumps(meta.tags),
        standard_dumps([segment.to_json()]),
    )
    assert catalog.get_object("b", "k").meta.user == {"owner": "zoë"}
