"""A drive's shared shard counters (erasure/drive_counters.py): every process of a host adds to its
own slot of one file, and every process reads what all of them added — the workers of `tierstore
serve` answer `admin domains` alike. Four processes adding at once lose no update, and an update
takes no lock between processes."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from erasure.drive_counters import SharedCounters

ADDS = 2000


def _add_many(path: str) -> None:
    counters = SharedCounters(Path(path))
    for _ in range(ADDS):
        counters.add(1, 3)


def test_processes_adding_at_once_lose_no_update(tmp_path: Path) -> None:
    path = tmp_path / "state" / "hot.d1"
    mine = SharedCounters(path)
    assert mine.read() == (0, 0)  # a new file starts at zero
    mine.set(10, 100)
    context = multiprocessing.get_context("fork")
    procs = [context.Process(target=_add_many, args=(str(path),)) for _ in range(4)]
    for proc in procs:
        proc.start()
    for _ in range(ADDS):
        mine.add(-1, -1)
    for proc in procs:
        proc.join(30)
        assert proc.exitcode == 0
    expected = (10 + 4 * ADDS - ADDS, 100 + 4 * 3 * ADDS - ADDS)
    assert mine.read() == expected  # this process sees the others' adds
    assert SharedCounters(path).read() == expected  # and so does one that opens it now


def _threads_adding_across(paths: list[str], seed: int) -> None:
    """Several threads of one process, each adding to the drives' counters in its own order (the
    worker threads of concurrent large PUTs, each committing shards on several drives)."""
    import random
    import threading

    counters = [SharedCounters(Path(p)) for p in paths]
    errors: list[BaseException] = []

    def run(n: int) -> None:
        rng = random.Random(seed * 100 + n)
        try:
            for _ in range(ADDS):
                rng.choice(counters).add(1, 1)
        except BaseException as exc:  # noqa: BLE001 - reported by the exit code
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit(f"{len(errors)} thread(s) failed: {errors[0]!r}")


def test_threads_of_several_processes_never_see_a_false_deadlock(tmp_path: Path) -> None:
    """POSIX record locks (`lockf`) belong to the process, so the kernel's deadlock check saw one
    process's thread holding drive A's lock while another of its threads waited for drive B's,
    held by a process waiting for A, and failed that wait with EDEADLK: a 500 on concurrent 1 MiB
    PUTs under two workers. Locks of the open file (`flock`) have no such check and cannot."""
    paths = [str(tmp_path / f"hot.d{n}") for n in range(6)]
    context = multiprocessing.get_context("fork")
    procs = [context.Process(target=_threads_adding_across, args=(paths, n)) for n in range(3)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
    assert [proc.exitcode for proc in procs] == [0, 0, 0]
    assert sum(SharedCounters(Path(p)).read()[0] for p in paths) == 3 * 6 * ADDS


def test_a_short_file_is_grown_not_refused(tmp_path: Path) -> None:
    path = tmp_path / "hot.d2"
    path.write_bytes(b"")  # a crash between create and the first update
    counters = SharedCounters(path)
    counters.add(2, 8)
    assert counters.read() == (2, 8)


def test_an_update_takes_no_lock_between_processes(tmp_path: Path, monkeypatch) -> None:
    """Each counter adds to a slot of its own: no flock per update (each was two system calls that
    let go of the GIL, for every drive a batch of small PUTs touched)."""
    import fcntl

    import erasure.drive_counters as drive_counters

    counters = SharedCounters(tmp_path / "hot.d1")
    other = SharedCounters(tmp_path / "hot.d1")  # another process's, as far as the slots go
    locks: list[int] = []
    real_flock = fcntl.flock

    def counting_flock(fd: int, cmd: int) -> None:
        locks.append(cmd)
        real_flock(fd, cmd)

    monkeypatch.setattr(drive_counters.fcntl, "flock", counting_flock)
    for _ in range(10):
        counters.add(1, 4096)
        other.add(2, 1)
    assert locks == []
    assert counters.read() == other.read() == (30, 10 * 4097)


def test_set_makes_the_sum_whatever_the_slots_hold(tmp_path: Path) -> None:
    path = tmp_path / "hot.d1"
    first, second = SharedCounters(path), SharedCounters(path)
    first.add(5, 50)
    second.add(7, 70)
    first.set(100, 1000)  # a scan's result
    assert second.read() == (100, 1000)
    second.add(1, 1)
    assert first.read() == (101, 1001)


def test_a_closed_counters_slot_is_reused_and_keeps_what_it_added(tmp_path: Path) -> None:
    path = tmp_path / "hot.d1"
    gone = SharedCounters(path)
    gone.add(3, 30)
    gone.close()  # a process that exited: its shards are still on the drive
    later = SharedCounters(path)
    assert later.read() == (3, 30)
    later.add(1, 10)
    assert later.read() == (4, 40)


def test_with_every_slot_taken_updates_go_to_the_shared_slot(tmp_path: Path) -> None:
    from erasure.drive_counters import SLOTS

    path = tmp_path / "hot.d1"
    holders = [SharedCounters(path) for _ in range(SLOTS - 1)]
    for holder in holders:
        holder.add(1, 1)
    extra = SharedCounters(path)  # no slot of its own left: slot 0, under the flock
    extra.add(5, 5)
    assert extra.read() == (SLOTS - 1 + 5, SLOTS - 1 + 5)
    for holder in holders:
        holder.close()
    extra.close()


def test_an_older_single_pair_file_keeps_its_counts(tmp_path: Path) -> None:
    """The file of a version that kept one pair (16 bytes): grown, its pair is slot 0's."""
    import struct

    path = tmp_path / "hot.d1"
    path.write_bytes(struct.pack("<qq", 9, 90))
    counters = SharedCounters(path)
    assert counters.read() == (9, 90)
    counters.add(1, 10)
    assert counters.read() == (10, 100)
