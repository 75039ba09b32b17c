"""A data directory's runtime directory (server/runtime_dir.py): one per data directory, private,
never someone else's, gone with its data directory or with the last process that used it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from pathlib import Path

import pytest

from server import metrics_workers, runtime_dir
from server.app import build_store
from server.config import load_config
from tiering.peers import locked_directory
from tiering.store import ObjectStore


@pytest.fixture
def shm(tmp_path: Path) -> Path:
    """A stand-in for /dev/shm (world-writable, sticky) on the test's own file system."""
    parent = tmp_path / "shm"
    parent.mkdir()
    parent.chmod(0o1777)
    return parent


def test_one_private_directory_per_data_directory(tmp_path: Path, shm: Path) -> None:
    data, other = tmp_path / "data", tmp_path / "other"
    data.mkdir()
    other.mkdir()
    (tmp_path / "link").symlink_to(data)
    path = runtime_dir.for_data_dir(data, parent=shm)
    assert path is not None and path.parent == shm
    assert path.name.startswith(f"tierstore-{os.getuid()}-")
    assert path.stat().st_mode & 0o777 == 0o700
    assert (path / runtime_dir.OWNER_FILE).read_text() == str(data.resolve())
    # Every process of the data directory finds the same one, whatever path it was given.
    assert runtime_dir.for_data_dir(data, parent=shm) == path
    assert runtime_dir.for_data_dir(tmp_path / "link", parent=shm) == path
    assert runtime_dir.for_data_dir(other, parent=shm) not in (None, path)


def test_a_name_taken_by_a_link_or_an_open_directory_is_not_used(tmp_path: Path, shm: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    path = runtime_dir.for_data_dir(data, parent=shm)
    assert path is not None
    path.chmod(0o777)  # someone could have put files in it
    assert runtime_dir.for_data_dir(data, parent=shm) is None
    for entry in path.iterdir():
        entry.unlink()
    path.rmdir()
    elsewhere = tmp_path / "planted"
    elsewhere.mkdir()
    path.symlink_to(elsewhere)  # a link planted at the name is never followed
    assert runtime_dir.for_data_dir(data, parent=shm) is None
    assert list(elsewhere.iterdir()) == []


def test_no_usable_parent_means_the_data_directory(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    assert runtime_dir.for_data_dir(data, parent=tmp_path / "missing") is None


def test_too_little_free_memory_means_the_data_directory(
    tmp_path: Path, shm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store into a mapped page of a full tmpfs is a SIGBUS: below the free-space floor the
    files stay in the data directory, and nothing is created."""
    data = tmp_path / "data"
    data.mkdir()
    free = os.statvfs(shm).f_bavail * os.statvfs(shm).f_frsize
    monkeypatch.setattr(runtime_dir, "MIN_FREE_BYTES", free + (1 << 30))
    assert runtime_dir.for_data_dir(data, parent=shm) is None
    assert list(shm.iterdir()) == []


def test_directories_of_deleted_data_directories_are_removed(tmp_path: Path, shm: Path) -> None:
    kept_data, gone_data = tmp_path / "kept", tmp_path / "gone"
    kept_data.mkdir()
    gone_data.mkdir()
    kept = runtime_dir.for_data_dir(kept_data, parent=shm)
    gone = runtime_dir.for_data_dir(gone_data, parent=shm)
    assert kept is not None and gone is not None
    (gone / "drive-counters").mkdir()
    (gone / "drive-counters" / "hot.d1").write_bytes(bytes(16))
    starting = shm / f"tierstore-{os.getuid()}-{'0' * 16}"  # no owner file yet: a start in progress
    starting.mkdir()
    not_ours = shm / "tierstore-somebody-else"
    not_ours.mkdir()
    foreign = shm / f"tierstore-{os.getuid()}-{'1' * 16}"  # our name, another user's directory
    foreign.mkdir()
    (foreign / runtime_dir.OWNER_FILE).write_text(str(gone_data))
    if os.getuid() == 0:
        os.chown(foreign, 65534, 65534)
    gone_data.rmdir()
    third = tmp_path / "third"
    third.mkdir()
    assert runtime_dir.for_data_dir(third, parent=shm) is not None  # any start sweeps
    assert not gone.exists()
    assert kept.exists() and starting.exists() and not_ours.exists()
    assert foreign.exists() == (os.getuid() == 0)  # as root it belongs to nobody: left alone


def test_the_last_one_out_removes_an_unused_directory(tmp_path: Path, shm: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    path = runtime_dir.for_data_dir(data, parent=shm)
    assert path is not None
    (path / "metrics" / "123").mkdir(parents=True)
    runtime_dir.remove_if_unused(path)  # another supervisor's metrics are still there
    assert path.exists()
    (path / "metrics" / "123").rmdir()
    runtime_dir.remove_if_unused(path)
    assert not path.exists()
    runtime_dir.remove_if_unused(data)  # the fallback (the data directory) is never removed
    assert data.exists()


def test_a_test_session_removes_the_runtime_directories_of_its_data_directories(
    tmp_path: Path, shm: Path
) -> None:
    """The servers a session killed left theirs behind: removed if their data directory lies in the
    session's tree (whether or not it still exists), never anyone else's."""
    session, elsewhere = tmp_path / "session", tmp_path / "elsewhere"
    kept_data = elsewhere / "data"
    (session / "t1" / "data").mkdir(parents=True)
    kept_data.mkdir(parents=True)
    near_miss = tmp_path / "session-other" / "data"  # a name that merely starts like the session's
    near_miss.mkdir(parents=True)
    ours = runtime_dir.for_data_dir(session / "t1" / "data", parent=shm)
    kept = runtime_dir.for_data_dir(kept_data, parent=shm)
    kept_too = runtime_dir.for_data_dir(near_miss, parent=shm)
    assert ours is not None and kept is not None and kept_too is not None
    (ours / "drive-counters").mkdir()  # what a killed server leaves
    assert runtime_dir.remove_for_data_under(session, parent=shm) == [ours]
    assert not ours.exists() and kept.is_dir() and kept_too.is_dir()


def _store_in_memory(tmp_path: Path) -> ObjectStore:
    """A store whose runtime directory is in /dev/shm (the case these tests are about)."""
    store = build_store(load_config(None, data_dir=tmp_path / "data"))
    if store.runtime_dir is None or store.runtime_dir.parent != runtime_dir.SHARED_MEMORY:
        store.catalog.close()
        pytest.skip("no runtime directory in /dev/shm on this host (not Linux, or too little free)")
    return store


def test_a_store_maps_and_removes_its_drive_counters_only_under_the_runtime_directorys_lock(
    tmp_path: Path,
) -> None:
    """A process starting while the last one of its data directory stops: each side's step on the
    drive counters (map them / see nobody alive and remove them) waits for the other's, so the
    stopping one cannot unlink the files the starting one has just mapped."""
    store = _store_in_memory(tmp_path)
    path = store.runtime_dir
    assert path is not None
    counters = path / "drive-counters"

    async def scenario() -> None:
        held = _lock(path)  # another process of the data directory, stopping or starting
        start = asyncio.create_task(store.start())
        await asyncio.sleep(0.5)
        assert not start.done() and not counters.exists(), "mapped the counters without the lock"
        held.close()
        await asyncio.wait_for(start, 60)
        assert any(counters.iterdir())
        held = _lock(path)
        close = asyncio.create_task(store.close())
        await asyncio.sleep(0.5)
        assert counters.is_dir(), "removed the counters without the lock"
        held.close()
        await asyncio.wait_for(close, 60)
        assert not counters.exists()

    try:
        asyncio.run(scenario())
    finally:
        runtime_dir.remove_if_unused(path)
    assert not path.exists()


@pytest.mark.parametrize("when", ["before the start", "while the start waits for the lock"])
def test_a_runtime_directory_removed_meanwhile_leaves_the_counters_in_the_state_directory(
    tmp_path: Path, when: str
) -> None:
    """The last other process of the data directory may remove the runtime directory between the
    server finding it and the store mapping its counters: the store starts anyway, with the counters
    where they are kept without one, and does not make the directory again (it would lack its owner
    file and its private mode)."""
    store = _store_in_memory(tmp_path)
    path, state = store.runtime_dir, store.state_dir
    assert path is not None and state is not None

    def remove() -> None:  # what `remove_if_unused` does, the lock being ours already
        (path / runtime_dir.OWNER_FILE).unlink()
        path.rmdir()

    async def scenario() -> None:
        if when == "before the start":
            remove()
            await store.start()
        else:
            held = _lock(path)
            start = asyncio.create_task(store.start())
            await asyncio.sleep(0.5)  # it has opened the directory and waits for the lock
            remove()
            held.close()
            await asyncio.wait_for(start, 60)
        try:
            assert store.runtime_dir == state and not path.exists()
            assert any((state / "drive-counters").iterdir())
        finally:
            await store.close()

    asyncio.run(scenario())
    assert not path.exists()


def test_removing_an_unused_runtime_directory_waits_for_its_lock(tmp_path: Path, shm: Path) -> None:
    """`remove_if_unused` takes the lock a starting store maps its counters under: a store that got
    there first keeps the directory (owner file and all), one that comes later finds it gone."""
    data = tmp_path / "data"
    data.mkdir()
    path = runtime_dir.for_data_dir(data, parent=shm)
    assert path is not None
    held = _lock(path)
    remover = threading.Thread(target=runtime_dir.remove_if_unused, args=(path,))
    remover.start()
    remover.join(0.5)
    assert remover.is_alive() and (path / runtime_dir.OWNER_FILE).is_file(), "removed without the lock"
    (path / "drive-counters").mkdir()  # the starting store, holding the lock, put its counters here
    held.close()
    remover.join(30)
    assert (path / runtime_dir.OWNER_FILE).is_file() and (path / "drive-counters").is_dir()
    (path / "drive-counters").rmdir()
    runtime_dir.remove_if_unused(path)
    assert not path.exists()


def test_worker_metrics_never_make_a_removed_runtime_directory_again(tmp_path: Path, shm: Path) -> None:
    """A supervisor starting while the last process of its data directory stops: the runtime
    directory it was handed is gone when it makes its workers' metrics directory. The metrics go to
    the data directory, and the runtime directory is not made again (it was, through a mkdir with
    parents: no owner file, mode 0755, never removed by a sweep nor used by a later start)."""
    data = tmp_path / "data"
    data.mkdir()
    path = runtime_dir.for_data_dir(data, parent=shm)
    assert path is not None
    runtime_dir.remove_if_unused(path)
    assert not path.exists()
    metrics = metrics_workers.prepare_dir(path, data)
    assert not path.exists(), "the removed runtime directory was made again"
    assert metrics == data / "metrics" / str(os.getpid()) and metrics.is_dir()


def test_worker_metrics_are_made_under_the_runtime_directorys_lock(tmp_path: Path, shm: Path) -> None:
    """The metrics directory is made holding the lock a stopping process removes an unused runtime
    directory under, so the two never interleave; with the lock free it lands in the runtime directory."""
    data = tmp_path / "data"
    data.mkdir()
    path = runtime_dir.for_data_dir(data, parent=shm)
    assert path is not None
    made: list[Path] = []
    held = _lock(path)
    maker = threading.Thread(target=lambda: made.append(metrics_workers.prepare_dir(path, data)))
    maker.start()
    maker.join(0.5)
    try:
        assert maker.is_alive() and not (path / "metrics").exists(), "made without the lock"
    finally:
        held.close()
        maker.join(30)
    assert made == [path / "metrics" / str(os.getpid())] and made[0].is_dir()


def _lock(directory: Path) -> contextlib.ExitStack:
    """Hold `directory`'s lock as another process of the data directory would (the product's own
    `locked_directory`: an flock of its own open file, so this process's threads wait for it too)."""
    held = contextlib.ExitStack()
    held.enter_context(locked_directory(directory))
    return held
