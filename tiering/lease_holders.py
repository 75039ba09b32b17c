"""Who holds a lease: a name per process that says, on the same machine, when that process is dead.

A lease in the catalog (the lifecycle daemon's, say) runs out `ttl` seconds after its last renewal.
When its holder is killed (kill -9, OOM, a power cut of the process), waiting out the ttl stalls
the background work for minutes although nobody is doing it. So a holder's name records enough to
tell, from the same machine, that the process that took the lease no longer exists:

    <hostname>:<pid>:<start time of that pid>:<boot id>.<pid namespace>[:<tag>]

A lease whose holder is provably dead is taken over at once (`Catalog.acquire_lease(...,
replacing=holder)`, a compare-and-swap on the holder). Why two live processes never both hold it:

- Only a dead holder is replaced. "Dead" means: the same host name, the same boot, the same pid
  namespace as ours, and no process with that pid *and that start time* (a pid reused by a new
  process after a crash has another start time). Anything we cannot judge — another host (a
  shared catalog), another container's pid namespace, a holder written by an older version — is
  treated as alive, and only the ttl frees it.
- `--workers N` runs N processes: each has its own pid, and a live sibling is never dead. During a
  rolling restart the old worker stays holder until it releases the lease on SIGTERM, or dies.
- Two `tierstore serve --reuse-port` on one data directory: two live pids, same as workers.
- A restarted server (same host, same data directory) finds its predecessor's pid gone, so it
  takes the lease at its first pass instead of waiting for the ttl.

The tag tells apart holders inside one process (two daemons in one test process).
"""

from __future__ import annotations

import functools
import os
import socket
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class _Process:
    host: str
    pid: int
    started: str  # /proc/<pid>/stat field 22 (clock ticks after boot); "" where there is no /proc
    machine: str  # boot id and pid namespace: pids mean the same process only within both


def _start_time(pid: int) -> str | None:
    """The start time of `pid`, None if no such process; "" where /proc cannot say."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return ""
    # Field 2 (the command) may hold spaces and parentheses: count from the last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else ""


@functools.cache
def _machine() -> str:
    """This boot of this kernel, and our pid namespace: where a pid names one process."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid").strip("pid:[]")
    except OSError:
        return ""  # cannot tell: holders we see are never judged dead
    return f"{boot}.{namespace}"


def process_holder(tag: str = "") -> str:
    """This process's holder name (with `tag` appended to tell holders in one process apart)."""
    pid = os.getpid()
    name = f"{socket.gethostname()}:{pid}:{_start_time(pid) or ''}:{_machine()}"
    return f"{name}:{tag}" if tag else name


def _parse(holder: str) -> _Process | None:
    parts = holder.split(":")
    if len(parts) < 4 or not parts[1].isdigit():
        return None  # an older holder format ("host:pid:object id"): cannot judge it
    return _Process(parts[0], int(parts[1]), parts[2], parts[3])


def holder_is_dead(holder: str) -> bool:
    """True only when the process named by `holder` provably no longer exists (see the module doc)."""
    process = _parse(holder)
    if process is None or not process.started or not process.machine:
        return False
    if process.host != socket.gethostname() or process.machine != _machine():
        return False  # another host, boot or pid namespace: not ours to judge
    started = _start_time(process.pid)
    if started == "":
        return False
    return started is None or started != process.started


def holder_pid(holder: str) -> int | None:
    """The pid in a holder's name when it names a process on this host, else None."""
    process = _parse(holder)
    if process is None or process.host != socket.gethostname() or process.machine != _machine():
        return None
    return process.pid


def describe(holder: str) -> str:
    """A holder for people: 'pid 1234 on host-a'."""
    process = _parse(holder)
    return holder if process is None else f"pid {process.pid} on {process.host}"
