"""Processes sharing one catalog: who is alive, and what a dead one may have left behind.

Several processes write through one catalog at once — the workers of `tierstore serve --workers
N`, an old and a new server during an upgrade, a `tierstore lifecycle` process, and gateways on
other hosts sharing a PostgreSQL catalog and the same storage nodes. A process that dies between
making a blob durable and committing it to the catalog leaves an orphan, which a survivor sweeps.
The sweep must never take a blob that a live process is about to commit, wherever it runs.

**The live-process table** (`LiveProcess`, tiering.catalog.processes): each process registers a
row — a random id, a host id (TIERSTORE_HOST_ID, else the host name), its pid, start time — and
pushes its expiry PROCESS_TTL ahead every PROCESS_HEARTBEAT seconds. Every data id it makes ends
in its id (`<id>-<process id>`; the id before it: tiering/data_ids.py), so a blob says which process
wrote it. Liveness is the row's expiry, never a pid: a pid from another host means nothing here.
A survivor sweeps a process only once its row has been expired for PROCESS_GRACE more seconds, and
then reclaims only unreferenced blobs tagged with that process's id — never another's, live or not.

**Fencing**: the expired process may not be dead (stopped, cut off from the catalog). It refuses
to commit a blob once its own last successful heartbeat is older than PROCESS_TTL -
PROCESS_HEARTBEAT (`LiveProcess.may_commit`), which is 2 × PROCESS_HEARTBEAT before any sweeper
may act (covering that much clock skew between hosts); and when a heartbeat finds its row gone
(swept) it takes a new id, so nothing it wrote under the old one is ever committed. What is left:
a process that passed the check and then stalled more than 2 × PROCESS_HEARTBEAT before its
commit reached the database.

**Checkpoint files** (`ProcessRegistry`), the mechanism of earlier versions, are still written and
read, for processes of an earlier version on the same data directory during an upgrade: each
keeps `checkpoint.<pid>` in the state directory — "running <heartbeat> <started>", rewritten
every CHECKPOINT_INTERVAL, removed on an orderly close; one still marked running whose pid is gone
crashed. Their blobs carry no process id, and only those are swept on a checkpoint's word. The
single file `checkpoint` ("running <time>" or "clean") of single-process versions is read too.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import secrets
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tiering.catalog.processes import ProcessRow
from tiering.data_ids import new_data_id

if TYPE_CHECKING:
    from tiering.catalog import Catalog

log = logging.getLogger("tierstore.peers")

HOST_ENV = "TIERSTORE_HOST_ID"  # this host's id in the process table (default: the host name)
# Seconds between a process's heartbeats (tests shorten it); its row expires PROCESS_TTL after one.
PROCESS_HEARTBEAT = float(os.environ.get("TIERSTORE_PROCESS_HEARTBEAT_SECONDS", "10"))
PROCESS_TTL = 3 * PROCESS_HEARTBEAT
PROCESS_GRACE = PROCESS_HEARTBEAT  # a row expired this long is swept (clock skew between hosts)
_PROCESS_ID = re.compile(r"[0-9a-f]{12}")

CHECKPOINT_INTERVAL = 30.0
# A legacy checkpoint (no pid) whose heartbeat is older than this was left by a dead process.
LEGACY_STALE_AFTER = 4 * CHECKPOINT_INTERVAL
_NAME = re.compile(r"checkpoint(?:\.([0-9]+))?")


def host_id() -> str:
    return os.environ.get(HOST_ENV) or socket.gethostname()


def owner_of(data_id: str) -> str | None:
    """The id of the process that wrote this blob; None for a blob of an earlier version."""
    _, sep, tail = data_id.rpartition("-")
    return tail if sep and _PROCESS_ID.fullmatch(tail) else None


class LiveProcess:
    """This process's row in the catalog's process table, and the data ids it hands out."""

    def __init__(self, catalog: Catalog, started: float | None = None) -> None:
        self.catalog = catalog
        self.started = time.time() if started is None else started
        self.host = host_id()
        self.id = secrets.token_hex(6)
        self.last_beat = 0.0  # the time of our last heartbeat the catalog took (0: none yet)

    def new_data_id(self, time_ordered: bool) -> str:
        return f"{new_data_id(time_ordered)}-{self.id}"

    def register(self) -> None:
        now = time.time()
        row = ProcessRow(self.id, self.host, os.getpid(), self.started, now, now + PROCESS_TTL)
        self.catalog.register_process(row)
        self.last_beat = now

    def beat(self) -> None:
        """Push our expiry ahead. If our row is gone, a survivor took us for dead and may have
        swept what we wrote: carry on under a new id, so none of that is ever committed."""
        now = time.time()
        if self.catalog.renew_process(self.id, now, now + PROCESS_TTL):
            self.last_beat = now
            return
        old = self.id
        self.id = secrets.token_hex(6)
        log.error("this process (id %s) was declared dead by another; continuing as %s", old, self.id)
        self.register()

    def may_commit(self, data_id: str) -> bool:
        """May a blob with this data id be committed now? Only ours under our current id, while
        our row is surely unexpired (PROCESS_HEARTBEAT of margin before its expiry, and as much
        again before any sweeper acts)."""
        owner = owner_of(data_id)
        if owner is None:
            return True  # not made by `new_data_id` (an earlier version's id): not ours to judge
        return owner == self.id and time.time() < self.last_beat + PROCESS_TTL - PROCESS_HEARTBEAT

    def close(self) -> None:
        """An orderly exit: nothing of ours needs sweeping."""
        self.catalog.forget_process(self.id)


def judged_elsewhere(rows: list[ProcessRow], host: str) -> Callable[[str], bool]:
    """Which data ids' temporary files a start-up sweep must not judge by the pid in their name:
    those of a process on another host, or of one it cannot place (registered after `rows` were
    read): the process table judges those (`LiveProcess`, the sweep of a dead process). A crashed
    predecessor on this host is judged by its pid, as before, so a restart cleans up at once."""
    hosts = {row.id: row.host for row in rows}

    def elsewhere(data_id: str) -> bool:
        owner = owner_of(data_id)
        return owner is not None and hosts.get(owner) != host

    return elsewhere


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


@contextlib.contextmanager
def locked_directory(directory: Path) -> Iterator[None]:
    """An exclusive lock on `directory` among this host's processes (`flock`; blocking: call it
    from a worker thread). The processes of one data directory take their runtime directory's
    (server/runtime_dir.py) to map or remove the drive counters in it, and to remove it: a process
    starting and one stopping then never interleave those steps."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # lets go of the lock


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
