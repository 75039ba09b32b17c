"""The status page rendered for real by headless Chromium (skipped where no Chromium is installed)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.ops.conftest import Ops

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# Let the page's script fetch status.json and render before the DOM dump / screenshot.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--no-first-run",
    "--virtual-time-budget=5000",
]


def browser() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no Chromium binary on PATH (Debian: apt-get install chromium)")


def run_browser(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [browser(), *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_status_page_renders_tiers_in_headless_chromium(ops: Ops, tmp_path: Path) -> None:
    url = f"{ops.endpoint}/_tierstore/"
    dom = run_browser(["--dump-dom", url], tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert 'data-loaded="true"' in html, html[:3000]
    rows = re.findall(r'<tr data-tier="([a-z-]+)"', html)
    assert rows == ["gpu-direct", "hot", "warm", "cold"]
    assert "could not load status" not in html
    assert re.search(r'class="cell', html), "failure domains rendered"
    assert "hot → warm" in html or ">hot</td><td>warm</td>" in html, "the move shows in the mover table"

    png = tmp_path / "status.png"
    shot = run_browser([f"--screenshot={png}", "--window-size=1280,900", url], tmp_path)
    assert shot.returncode == 0, shot.stderr[-2000:]
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 20_000, "a rendered page, not a blank one"
