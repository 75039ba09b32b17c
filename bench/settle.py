"""Bring the box back to quiet before a timed run, so that no server pays for the one before it.

Side-by-side runs take turns on one machine, every server up at once. What one server leaves
behind lands in the next one's window: dirty pages that the kernel writes back (or that the next
server's own `syncfs` has to write first: it flushes the whole file system), and whatever
background work a server still does after its run (a collector, a checkpoint, a peer's daemons).
`settle()` flushes every dirty page (`sync`) and then waits, up to a bound, until the CPUs are
quiet, and says what it found. The same for every server before every run; and `turns()` changes
who follows whom from round to round: the order of turns no longer decides who pays.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

QUIET_BUSY = 0.25  # CPU busy fraction (all cores) counted as quiet; every peer up and idle: 1-10 % here
WINDOW_S = 0.5  # one measurement of the CPUs
MAX_WAIT_S = 15.0  # a box that does not quiet down by then is measured as it is (reported)


@dataclass(frozen=True)
class Settled:
    dirty_kib: int  # dirty page cache when asked (/proc/meminfo Dirty + Writeback)
    sync_s: float  # how long the `sync` took
    waited_s: float  # in all, sync included
    busy: float  # CPU busy fraction of the last window
    quiet: bool  # busy < QUIET_BUSY; False: gave up at MAX_WAIT_S

    def describe(self) -> str:
        state = "quiet" if self.quiet else "NOT quiet"
        return (
            f"settled {self.waited_s:.1f} s ({self.dirty_kib / 1024:,.0f} MiB dirty, sync {self.sync_s:.1f} s, "
            f"CPU {100 * self.busy:.0f} % busy, {state})"
        )


def _dirty_kib() -> int:
    total = 0
    with open("/proc/meminfo") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name in ("Dirty", "Writeback"):
                total += int(rest.split()[0])
    return total


def _cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot; iowait counts as idle."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    total = sum(fields)
    return total - fields[3] - fields[4], total


def busy_fraction(window_s: float = WINDOW_S) -> float:
    busy0, total0 = _cpu_times()
    time.sleep(window_s)
    busy1, total1 = _cpu_times()
    return (busy1 - busy0) / max(1, total1 - total0)


def settle(max_wait_s: float = MAX_WAIT_S, quiet_busy: float = QUIET_BUSY) -> Settled:
    """Flush all dirty pages, then wait (bounded) for the CPUs to go quiet."""
    start = time.monotonic()
    dirty = _dirty_kib()
    os.sync()
    sync_s = time.monotonic() - start
    busy = busy_fraction()
    while busy >= quiet_busy and time.monotonic() - start < max_wait_s:
        busy = busy_fraction()
    return Settled(dirty, sync_s, time.monotonic() - start, busy, busy < quiet_busy)


def turns(targets: list[T], rnd: int) -> list[T]:
    """The order the servers take their turns in round `rnd`: rotated by one each round, and
    reversed every other round, so that a server does not always follow the same one (with a
    rotation alone, each server always ran right after the same neighbour: in bench_small_peers
    tierstore after Ceph, SeaweedFS after nginx)."""
    if not targets:
        return []
    rotated = targets[rnd % len(targets) :] + targets[: rnd % len(targets)]
    return rotated[::-1] if rnd % 2 else rotated
