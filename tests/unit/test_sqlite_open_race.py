"""Processes opening one new SQLite catalog at the same moment (the workers of `tierstore serve`
start together): every one of them opens it. Before, one of them now and then died at start with
"database is locked" (SQLite answers the losing switch to WAL mode at once, without waiting): CI
saw a two-worker server fail to start; four processes at once failed in 1 of 15 tries here."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path


def _open(path: str, at: float, results: multiprocessing.Queue) -> None:
    from tiering.catalog import Catalog

    while time.time() < at:  # all start together
        pass
    try:
        Catalog(Path(path)).close()
        results.put("ok")
    except Exception as exc:  # noqa: BLE001 - the finding
        results.put(repr(exc))


def test_processes_opening_a_new_catalog_at_once_all_open_it(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    for trial in range(12):
        results = context.Queue()
        at = time.time() + 0.3
        path = str(tmp_path / f"catalog-{trial}.db")
        openers = [context.Process(target=_open, args=(path, at, results)) for _ in range(4)]
        for process in openers:
            process.start()
        outcomes = [results.get(timeout=60) for _ in openers]
        for process in openers:
            process.join(10)
        assert outcomes == ["ok"] * 4, (trial, outcomes)
