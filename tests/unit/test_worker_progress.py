"""The workers' progress board (server/worker_progress.py): each worker's entry is written by its
once-a-second publisher and by admin commands, from worker threads, at the same time."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from server.worker_progress import ProgressBoard


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
