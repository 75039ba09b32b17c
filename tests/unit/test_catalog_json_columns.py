"""The catalog's JSON columns are decoded with orjson and, for what orjson refuses, the standard
library: a row reads back the same whichever decoder took it (tiering/catalog/base.py)."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pytest

from tiering.catalog import Catalog
from tiering.catalog.base import _loads
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
