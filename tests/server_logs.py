"""The servers' logs in a failed test's report.

CI keeps the test report, not the temporary directories the servers wrote their logs in: a test
that failed on a server's 503 or 500 said nothing of why. So each server a test starts registers
its log here, and a failed test's report ends with the tail of every log written to while it ran
(tests/conftest.py's `pytest_runtest_makereport`): the server's own lines (warnings, tracebacks)
and, of the access log, only the 5xx answers.
"""

from __future__ import annotations

import os
from pathlib import Path

TAIL_LINES = 60
LINE_CHARS = 600

_logs: set[Path] = set()


def register(path: Path) -> None:
    _logs.add(path)


def _kept(line: str) -> bool:
    # An access-log entry is a JSON object per line: only those of a 5xx answer matter here.
    return not line.startswith("{") or '"status":5' in line


def tail(path: Path) -> str:
    with open(path, errors="replace") as log:
        lines = [line.rstrip("\n") for line in log if _kept(line)]
    return "\n".join(line[:LINE_CHARS] for line in lines[-TAIL_LINES:])


def written_since(started: float) -> list[tuple[str, str]]:
    """(section title, text) for each registered log written to at or after `started` (time.time())."""
    sections = []
    for path in sorted(_logs):
        try:
            if os.stat(path).st_mtime < started:
                continue
            text = tail(path)
        except FileNotFoundError:
            continue  # its test's directory is gone
        sections.append((f"{path} (last {TAIL_LINES} lines, of the access log only 5xx answers)", text))
    return sections
