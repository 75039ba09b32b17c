"""Processes sharing one data directory: who is alive, and what a dead one may have left behind.

Several processes may open the same catalog and domains at once: the workers of
`tierstore serve --workers N`, an old and a new server during an upgrade, a `tierstore lifecycle`
process. Each keeps its own checkpoint file `checkpoint.<pid>` in the state directory —
"running <heartbeat> <started>", rewritten every CHECKPOINT_INTERVAL, removed on an orderly
close. A starting process reads the others': one still marked running whose process is gone
crashed, and its file stays until a survivor has swept the orphans it may have left.

The single file `checkpoint` ("running <time>" or "clean") of earlier, single-process versions is
read too; it names no process, so only its heartbeat tells whether its writer still runs.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

CHECKPOINT_INTERVAL = 30.0
# A legacy checkpoint (no pid) whose heartbeat is older than this was left by a dead process.
LEGACY_STALE_AFTER = 4 * CHECKPOINT_INTERVAL
_NAME = re.compile(r"checkpoint(?:\.([0-9]+))?")


def pid_alive(pid: int) -> bool:
    """True while a process with this pid exists (a reused pid reads as alive: the safe side)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # EPERM: it exists, owned by someone else
    return True


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    pid: int | None  # None: the single-process file of an earlier version
    running: bool
    heartbeat: float
    started: float | None  # when that process opened the store (None: unknown)

    def alive(self, now: float) -> bool:
        if not self.running:
            return False
        if self.pid is None:
            return now - self.heartbeat < LEGACY_STALE_AFTER
        if self.pid == os.getpid():
            return False  # an earlier process with our pid (a restarted container's pid 1)
        return pid_alive(self.pid)


class ProcessRegistry:
    """This process's checkpoint file, and a look at everyone else's."""

    def __init__(self, state_dir: Path, started: float | None = None) -> None:
        self.state_dir = state_dir
        self.started = time.time() if started is None else started
        self.path = state_dir / f"checkpoint.{os.getpid()}"
        self._written = False

    def scan(self) -> list[Checkpoint]:
        """Every checkpoint file but this process's own current one."""
        found: list[Checkpoint] = []
        try:
            entries = list(os.scandir(self.state_dir))
        except FileNotFoundError:
            return found
        for entry in entries:
            match = _NAME.fullmatch(entry.name)
            if match is None or (self._written and entry.path == str(self.path)):
                continue
            try:
                state, *fields = Path(entry.path).read_text().split()
            except (FileNotFoundError, ValueError):
                continue
            numbers = []
            for value in fields[:2]:
                with contextlib.suppress(ValueError):
                    numbers.append(float(value))
            heartbeat = numbers[0] if numbers else 0.0
            started = numbers[1] if len(numbers) > 1 else None
            pid = int(match.group(1)) if match.group(1) else None
            found.append(Checkpoint(Path(entry.path), pid, state == "running", heartbeat, started))
        return found

    def heartbeat(self) -> None:
        """Write (or refresh) "running <now> <started>" for this process, atomically."""
        tmp = self.state_dir / f".checkpoint.{os.getpid()}.tmp"
        tmp.write_text(f"running {time.time()} {self.started}")
        tmp.replace(self.path)
        self._written = True

    def remove(self) -> None:
        """An orderly close: nothing of ours needs sweeping."""
        self.path.unlink(missing_ok=True)
        self._written = False

    @staticmethod
    def forget(checkpoint: Checkpoint) -> None:
        """A dead process's orphans were swept: its checkpoint has served its purpose."""
        checkpoint.path.unlink(missing_ok=True)
