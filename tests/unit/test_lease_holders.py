"""tiering.lease_holders: a lease is taken over only from a holder that provably died."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tiering.catalog import Catalog
from tiering.lease_holders import describe, holder_is_dead, process_holder


def _holder_of(pid: int) -> str:
    """The holder name process `pid` would use (computed here from /proc, as it would)."""
    ours = process_holder().split(":")
    stat = Path(f"/proc/{pid}/stat").read_text()
    started = stat[stat.rindex(")") + 2 :].split()[19]
    return ":".join([ours[0], str(pid), started, ours[3]])


def test_live_processes_are_never_dead_and_dead_ones_are() -> None:
    assert not holder_is_dead(process_holder("a"))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        holder = _holder_of(child.pid)
        assert not holder_is_dead(holder), "a live sibling (another worker, a --reuse-port server)"
    finally:
        child.kill()
        child.wait()
    assert holder_is_dead(holder)
    assert describe(holder) == f"pid {child.pid} on {holder.split(':')[0]}"


def test_a_reused_pid_with_another_start_time_is_dead() -> None:
    name = process_holder().split(":")
    assert holder_is_dead(":".join([name[0], name[1], str(int(name[2]) - 1), name[3]]))


def test_what_cannot_be_judged_counts_as_alive() -> None:
    name = process_holder().split(":")
    assert not holder_is_dead("some-host:12345:139871234")  # the older "host:pid:object id" form
    assert not holder_is_dead(":".join(["another-host", "999999", "1", name[3]]))
    assert not holder_is_dead(":".join([name[0], "999999", "1", "other-boot.4026531836"]))


def test_the_catalog_replaces_only_the_named_dead_holder(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path / "catalog.db", durable=False)
    now = time.time()
    assert catalog.acquire_lease("job", "dead", 3600, now)
    assert not catalog.acquire_lease("job", "me", 3600, now)
    assert not catalog.acquire_lease("job", "me", 3600, now, replacing="someone-else")
    assert catalog.acquire_lease("job", "me", 3600, now, replacing="dead")
    assert catalog.lease("job", now) == ("me", now + 3600)
    assert not catalog.acquire_lease("job", "third", 3600, now, replacing="dead"), "a CAS: once only"
