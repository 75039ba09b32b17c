"""The workers' progress board (server/worker_progress.py): each worker's entry is written by its
once-a-second publisher and by admin commands, from worker threads, at the same time; the
requests workers post each other are found by a `stat` while nothing changed."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

from server.worker_progress import RECENT_NS, LifecycleRuns, ProgressBoard


def test_concurrent_publishes_all_succeed_and_leave_the_newest(tmp_path: Path) -> None:
    # Both writers went through one temporary file: the second rename found it gone
    # (FileNotFoundError), and the admin command that published answered 500.
    count = 0

    def snapshot() -> dict[str, Any]:
        nonlocal count
        count += 1
        return {"heal": {"passes": count}, "padding": "x" * 200_000}

    board = ProgressBoard(tmp_path, snapshot)

    async def publish_many() -> None:
        for _ in range(20):
            await asyncio.gather(*(board.publish_async() for _ in range(16)))

    asyncio.run(publish_many())
    assert json.loads(board.path.read_text())["heal"]["passes"] == count == 320
    assert list(board.directory.glob("*.tmp")) == []


def test_an_older_snapshot_never_replaces_a_newer_one(tmp_path: Path) -> None:
    board = ProgressBoard(tmp_path, lambda: {})
    board._write(2, {"heal": {"passes": 2}})
    board._write(1, {"heal": {"passes": 1}})  # taken first, its thread ran late
    assert json.loads(board.path.read_text())["heal"]["passes"] == 2


def test_a_posted_request_is_seen_at_the_next_look_and_an_unchanged_directory_is_not_listed(
    tmp_path: Path,
) -> None:
    board = ProgressBoard(tmp_path, lambda: {})
    runs = LifecycleRuns(board)
    assert runs._posted() == []  # the first look lists
    os.utime(runs.directory, ns=(time.time_ns() - 5 * RECENT_NS,) * 2)  # changed long ago
    assert runs._posted() == []
    assert runs._posted() is None  # unchanged since: one stat, no listing
    board.publish()  # a board entry changes the board's directory, not the requests'
    assert runs._posted() is None
    request = runs.post()
    (runs.directory / "sync.0123456789abcdef.request").write_text("1")
    # Posted within the same clock tick as the last change seen: the mtime alone cannot tell.
    os.utime(runs.directory, ns=(time.time_ns(),) * 2)
    assert runs._posted() == [("sync", "0123456789abcdef"), ("run", request)]
    assert runs._posted() == [("sync", "0123456789abcdef"), ("run", request)]  # still recent: listed


def test_answered_requests_are_forgotten_once_their_files_are_cleared(tmp_path: Path) -> None:
    runs = LifecycleRuns(ProgressBoard(tmp_path, lambda: {}))
    first, second = runs.post(), runs.post()
    runs._handled |= {first, second}
    runs.forget(first)
    runs._listed_mtime = None
    assert runs._posted() == [("run", second)]
    assert runs._handled == {second}


def test_a_removed_request_directory_is_made_again_not_an_error_every_look(tmp_path: Path) -> None:
    runs = LifecycleRuns(ProgressBoard(tmp_path, lambda: {}))
    runs.directory.rmdir()
    assert runs._posted() is None
    request = runs.post()  # posting works again at once
    assert runs._posted() == [("run", request)]
