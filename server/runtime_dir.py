"""Where the processes serving one data directory keep what they share but never need on disk.

Two kinds of files are stored into on every request and read back only by the processes running
now: the local drives' shard counters (erasure/drive_counters.py: a status figure, set anew by
every start-up scan) and the workers' metrics (server/metrics_workers.py: a restart starts them at
zero). Both are memory-mapped. In the data directory they shared the drives' file system, and a
small PUT's flush (`syncfs` of that file system, erasure/durability.py) writes back every dirty
page of it, mapped ones included, and write-protects them again, so the next store into them
faults: work no restart ever needed, inside the wait every small PUT's answer sits behind. Moved
here, a 4 KiB PUT takes 1.8 page faults instead of 5.7 and writes 52 KB to the page cache instead
of 71 (bench/RESULTS.md, "Shared state off the drives").

So they live in memory, in `/dev/shm/tierstore-<uid>-<hash of the data directory's real path>`:
the same directory for every process of this host that serves that data directory, created
private (0700) by the first. A `data-dir` file in it names the data directory; a directory whose
data directory is gone (a test's temporary one, a deleted deployment) is removed by the next
start of any tierstore of the same user on this host, so none pile up in memory.

Where /dev/shm cannot be used (not Linux; not writable; the name taken by something that is not
our own private directory), `for_data_dir` answers None and the callers keep these files in the
data directory, as before. The change token (tiering/changes.py) stays in the data directory:
processes of an earlier version read it there during a rolling upgrade.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

from tiering.peers import locked_directory

SHARED_MEMORY = Path("/dev/shm")
PREFIX = "tierstore-"
OWNER_FILE = "data-dir"  # the real path of the data directory this one belongs to
# Free memory /dev/shm must have for a new server to use it. A store into a mapped page of a full
# tmpfs kills the process (SIGBUS), and a container's /dev/shm is 64 MiB by default; a server's
# files there take well under 1 MiB.
MIN_FREE_BYTES = 32 << 20
_OWN_NAME = re.escape(PREFIX) + "{uid}-[0-9a-f]{{16}}"  # this user's directories


def for_data_dir(data_dir: Path, *, parent: Path = SHARED_MEMORY) -> Path | None:
    """This data directory's runtime directory under `parent`, created if need be; None where it
    cannot be ours alone (the caller then keeps its files in the data directory)."""
    real = os.path.realpath(data_dir)
    try:
        space = os.statvfs(parent)
    except OSError:
        return None
    if space.f_bavail * space.f_frsize < MIN_FREE_BYTES:
        return None
    digest = hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    path = parent / f"{PREFIX}{os.getuid()}-{digest}"
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)
        # Another user may have put a link or a directory of theirs at this name first: never
        # follow it, never write into it.
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            return None
        owner = path / OWNER_FILE
        if not owner.is_file():
            temporary = path / f".{OWNER_FILE}.{os.getpid()}"
            temporary.write_text(real, encoding="utf-8", errors="surrogateescape")
            temporary.replace(owner)
    except OSError:
        return None
    remove_orphans(parent, keep=path)
    return path


def remove_if_unused(path: Path) -> None:
    """Remove a runtime directory that holds nothing but its owner file (and an empty `metrics`):
    the last process of its data directory to stop calls this. Anything else (the fallback, the
    data directory itself) is left alone."""
    if not re.fullmatch(_OWN_NAME.format(uid=os.getuid()), path.name):
        return
    with contextlib.suppress(OSError):
        (path / "metrics").rmdir()  # only if empty: another supervisor's directory stays
    # Under the lock a starting store takes to map its drive counters here (tiering/store.py): it
    # either has put them here first (the directory stays, owner file and all) or finds the
    # directory gone and keeps them in its state directory. Unlocked, the owner file could go while
    # a starting process filled the directory, which then stayed, nameless to every later sweep.
    with contextlib.suppress(OSError), locked_directory(path):
        if os.listdir(path) == [OWNER_FILE]:
            (path / OWNER_FILE).unlink()
            path.rmdir()


def remove_orphans(parent: Path = SHARED_MEMORY, *, keep: Path | None = None) -> list[Path]:
    """Remove this user's runtime directories under `parent` whose data directory no longer
    exists; the ones removed. One whose owner file is not written yet (a start in progress) stays."""
    return _remove_own(parent, lambda data_dir: not os.path.isdir(data_dir), keep)


def remove_for_data_under(root: Path, parent: Path = SHARED_MEMORY) -> list[Path]:
    """Remove this user's runtime directories under `parent` that belong to data directories
    inside `root`, whether or not those still exist; the ones removed. For a test session's end:
    the servers it killed with SIGKILL never removed theirs, and their data directories (pytest
    keeps the last three sessions' temporary trees) keep `remove_orphans` from doing it. Only once
    every server on those data directories is stopped (a running one would lose its counters)."""
    inside = os.path.join(os.path.realpath(root), "")
    return _remove_own(parent, lambda data_dir: os.path.join(data_dir, "").startswith(inside))


def _remove_own(parent: Path, doomed: Callable[[str], bool], keep: Path | None = None) -> list[Path]:
    """Remove this user's runtime directories under `parent` whose data directory is `doomed`."""
    own = re.compile(_OWN_NAME.format(uid=os.getuid()))
    removed: list[Path] = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    for entry in entries:
        if not own.fullmatch(entry.name) or (keep is not None and entry.path == str(keep)):
            continue
        try:
            # Ours alone: another user may have made a directory of this name first (then ours
            # was never used, see `for_data_dir`); it is not ours to remove.
            if (
                not entry.is_dir(follow_symlinks=False)
                or entry.stat(follow_symlinks=False).st_uid != os.getuid()
            ):
                continue
            data_dir = Path(entry.path, OWNER_FILE).read_text(encoding="utf-8", errors="surrogateescape")
        except OSError:
            continue
        if doomed(data_dir):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(Path(entry.path))
    return removed
