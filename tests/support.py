"""Helpers every test family shares: wait for a condition, run `tierstore admin` as an operator does.

(Servers themselves start through `tests.conftest.ServerProcess`.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.conftest import ACCESS_KEY, SECRET_KEY


def wait_for(condition: Callable[[], object], timeout: float, what: str, interval: float = 0.1) -> None:
    """Poll `condition` until it is truthy; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def tierstore_cmd() -> list[str]:
    """The `tierstore` entry point of this virtualenv (it honours PYTHONPATH), or the module."""
    script = Path(sys.executable).with_name("tierstore")
    return [str(script)] if script.exists() else [sys.executable, "-m", "server.cli"]


class AdminError(Exception):
    """`tierstore admin` exited non-zero; the message is its stderr."""


def run_admin(
    endpoint: str, *args: str, timeout: float = 300, keys: tuple[str, str] = (ACCESS_KEY, SECRET_KEY)
) -> subprocess.CompletedProcess[str]:
    """`tierstore admin ARGS --endpoint E --json` as a subprocess; whatever it exited with."""
    env = {**os.environ, "TIERSTORE_ACCESS_KEY": keys[0], "TIERSTORE_SECRET_KEY": keys[1]}
    return subprocess.run(
        [*tierstore_cmd(), "admin", *args, "--endpoint", endpoint, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def admin(endpoint: str, *args: str, timeout: float = 300) -> Any:
    """`tierstore admin ARGS --json`, which must succeed; the JSON it printed."""
    done = run_admin(endpoint, *args, timeout=timeout)
    if done.returncode != 0:
        raise AdminError(
            f"tierstore admin {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}"
        )
    return json.loads(done.stdout)
