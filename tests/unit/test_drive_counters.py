"""A drive's shared shard counters (erasure/drive_counters.py): every process of a host adds to one
pair, and every process reads what all of them added — the workers of `tierstore serve` answer
`admin domains` alike. Four processes adding at once lose no update."""

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
    assert path.stat().st_size == 16


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


def test_batched_updates_apply_once_per_counter_at_the_end(tmp_path: Path, monkeypatch) -> None:
    """The small PUTs' committer holds a batch's updates back: one locked update per drive, not one
    per shard; others see nothing of the batch until then, and all of it after (even on error)."""
    import fcntl

    import pytest

    import erasure.drive_counters as drive_counters
    from erasure.drive_counters import batched_updates

    first, second = SharedCounters(tmp_path / "hot.d1"), SharedCounters(tmp_path / "hot.d2")
    other_view = SharedCounters(tmp_path / "hot.d1")  # what another process reads
    locks: list[int] = []
    real_flock = fcntl.flock

    def counting_flock(fd: int, cmd: int) -> None:
        if cmd == fcntl.LOCK_EX:
            locks.append(fd)
        real_flock(fd, cmd)

    monkeypatch.setattr(drive_counters.fcntl, "flock", counting_flock)
    with batched_updates():
        for _ in range(8):
            first.add(1, 4096)
            second.add(1, 4096)
            with batched_updates():  # nested: the outermost applies
                first.add(1, 1)
        assert other_view.read() == (0, 0)
        assert locks == []
    assert other_view.read() == (16, 8 * 4097)
    assert second.read() == (8, 8 * 4096)
    assert len(locks) == 2  # one update per counter
    with pytest.raises(RuntimeError), batched_updates():
        first.add(-1, -4096)
        raise RuntimeError("a bug mid-batch")
    assert other_view.read() == (15, 8 * 4097 - 4096)  # what was held back is applied all the same
    first.add(1, 1)  # outside a batch: at once
    assert other_view.read() == (16, 8 * 4097 - 4095)
