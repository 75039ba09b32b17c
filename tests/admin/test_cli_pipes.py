"""`tierstore ... | head`: a reader that stops early ends the command quietly, with no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from server.cli import BROKEN_PIPE_EXIT
from tests.conftest import ACCESS_KEY, SECRET_KEY, ServerProcess


def _tierstore_cmd() -> list[str]:
    script = Path(sys.executable).with_name("tierstore")
    return [str(script)] if script.exists() else [sys.executable, "-m", "server.cli"]


@pytest.mark.parametrize("args", [["status"], ["status", "--json"], ["domains"], ["tiers"]])
def test_admin_output_into_a_closed_pipe_ends_quietly(server: ServerProcess, args: list[str]) -> None:
    env = {**os.environ, "TIERSTORE_ACCESS_KEY": ACCESS_KEY, "TIERSTORE_SECRET_KEY": SECRET_KEY}
    # The reader is gone before the first byte is written (what `| head` does once it has its
    # lines, made certain): every write fails with EPIPE.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [*_tierstore_cmd(), "admin", *args, "--endpoint", server.endpoint],
            stdout=write_end,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert done.stderr == "", done.stderr
    assert done.returncode == BROKEN_PIPE_EXIT


def test_admin_status_through_head(server: ServerProcess, tmp_path: Path) -> None:
    """The README's own use, through a shell: `head -4` sees the table, stderr stays empty."""
    env = {**os.environ, "TIERSTORE_ACCESS_KEY": ACCESS_KEY, "TIERSTORE_SECRET_KEY": SECRET_KEY}
    command = " ".join([*_tierstore_cmd(), "admin", "domains", "--endpoint", server.endpoint])
    errors = tmp_path / "stderr"
    done = subprocess.run(
        ["bash", "-c", f"{command} 2>{errors} | head -4"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 4
    assert done.stdout.startswith("ID ")
    assert errors.read_text() == ""
