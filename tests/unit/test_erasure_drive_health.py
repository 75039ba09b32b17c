"""Drive health and retried placement in the erasure pool, on real filesystems: a tmpfs that fills
up mid-write (ENOSPC) and a read-only tmpfs (EROFS). Mounting needs root: skipped otherwise."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from erasure import ErasurePool, WriteQuorumError, default_layout
from erasure.drive_health import DriveCondition, DriveHealthSettings
from erasure.location import Location
from erasure.placement import place
from erasure.rebalance import plan_moves

K, M, BLOCK = 4, 2, 16 << 10
SMALL = 4096


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


@pytest.fixture
def mount() -> Iterator[Callable[[Path, str], None]]:
    """mount(path, options): a tmpfs at `path`; all unmounted at the end."""
    if os.geteuid() != 0:
        pytest.skip("mounting filesystems needs root")
    mounted: list[Path] = []

    def do(path: Path, options: str) -> None:
        done = _run("mount", "-t", "tmpfs", "-o", options, "tierstore-test", str(path))
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(path)

    try:
        yield do
    finally:
        for path in reversed(mounted):
            if _run("umount", str(path)).returncode != 0:
                _run("umount", "-l", str(path))


def make_pool(tmp_path: Path, nodes: int, settings: DriveHealthSettings) -> ErasurePool:
    topology = default_layout(tmp_path, "hot", nodes=nodes, drives_per_node=1, weight=1.0)
    return ErasurePool(
        "hot", topology, K, M, block_size=BLOCK, small_object_threshold=SMALL, drive_health=settings
    )


def data_id_placed_on(pool: ErasurePool, drive: str, width: int = K + M, skip: str = "") -> str:
    """A data id whose first-choice placement of `width` shards includes `drive` (deterministic)."""
    for n in range(1000):
        if f"blob{n}" != skip and drive in [d.id for d in place(f"blob{n}", pool.topology, "drive", width)]:
            return f"blob{n}"
    raise AssertionError(f"no data id lands on {drive}")


def blob(size: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(size)


def test_a_shard_whose_drive_fills_mid_stream_moves_to_a_spare_drive(tmp_path: Path, mount) -> None:
    """ENOSPC after a few stripes: the frames written so far are copied to a spare drive and the
    stream goes on there; the location names the spare, nothing is missing, the drive is `full`."""
    pool = make_pool(tmp_path, 7, DriveHealthSettings(reserve_bytes=0))
    small = pool.topology["hot-n3-d1"]
    mount(small.path, "size=64k")
    data_id = data_id_placed_on(pool, small.id)
    data = blob(12 * K * BLOCK + 777, 1)

    async def scenario() -> dict[str, Any]:
        writer = await pool.create_writer(data_id)
        for i in range(0, len(data), K * BLOCK):
            await writer.write(data[i : i + K * BLOCK])
        return await writer.finish()

    loc = asyncio.run(scenario())
    assert loc["missing"] == []
    assert small.id not in loc["shards"]
    assert sorted(loc["shards"]) == sorted(d.id for d in pool.topology if d.id != small.id)
    assert asyncio.run(pool.read_all(data_id, loc, len(data))) == data
    assert pool.health.condition(small.id) is DriveCondition.FULL
    assert "ENOSPC" in pool.health.detail(small.id)
    assert [p for p in small.path.rglob("*") if p.is_file()] == []  # the partial shard did not stay behind


def test_a_read_only_drive_is_retried_around_then_marked_failing_and_recovers(tmp_path: Path, mount) -> None:
    pool = make_pool(tmp_path, 7, DriveHealthSettings(reserve_bytes=0, failing_after_errors=2))
    ro = pool.topology["hot-n5-d1"]
    mount(ro.path, "ro,size=1m")
    copies = data_id_placed_on(pool, ro.id, M + 1)
    striped = data_id_placed_on(pool, ro.id, skip=copies)
    for data_id, size in ((copies, 100), (striped, 3 * K * BLOCK + 5)):  # whole copies, then erasure-coded
        data = blob(size)
        loc = pool.write_blob(data_id, data)
        assert ro.id not in loc["shards"] and loc["missing"] == []
        assert asyncio.run(pool.read_all(data_id, loc, size)) == data
    # The second failure in a row made it `failing`: placement no longer offers it.
    assert pool.health.condition(ro.id) is DriveCondition.FAILING
    assert "EROFS" in pool.health.detail(ro.id)
    assert pool.writable(ro) is False
    assert ro.id not in [d.id for d in place(striped, pool.topology, "drive", K + M, usable=pool.writable)]
    status = {d["id"]: d for d in pool.status()["domains"]}
    assert status[ro.id]["health"] == "failing" and status[ro.id]["state"] == "online"

    pool.health.check(pool.topology)  # still read-only: the probe write fails, it stays failing
    assert pool.health.condition(ro.id) is DriveCondition.FAILING
    assert _run("mount", "-o", "remount,rw", str(ro.path)).returncode == 0
    pool.health.check(pool.topology)
    assert pool.health.condition(ro.id) is DriveCondition.NORMAL
    assert list(ro.path.rglob("health-probe*")) == []  # the probe cleans up after itself


def test_quorum_error_names_each_failed_drive_and_why(tmp_path: Path, mount) -> None:
    """Six drives for six shards: two read-only ones leave 4 < quorum 5, and the error says who and why."""
    pool = make_pool(tmp_path, 6, DriveHealthSettings(reserve_bytes=0))
    for drive in ("hot-n2-d1", "hot-n4-d1"):
        mount(pool.topology[drive].path, "ro,size=1m")
    with pytest.raises(WriteQuorumError) as raised:
        pool.write_blob("refused", blob(2 * K * BLOCK))
    message = str(raised.value)
    assert message.startswith("2 of 6 shards failed: ")
    assert "hot-n2-d1 EROFS (Read-only file system)" in message
    assert "hot-n4-d1 EROFS (Read-only file system)" in message


def test_a_drive_below_the_reserve_is_full_until_space_is_freed(tmp_path: Path, mount) -> None:
    pool = make_pool(tmp_path, 7, DriveHealthSettings(reserve_bytes=256 << 10))
    drive = pool.topology["hot-n1-d1"]
    mount(drive.path, "size=1m")
    filler = drive.path / "filler"
    filler.write_bytes(b"\1" * (900 << 10))
    asyncio.run(pool.start())
    try:
        assert pool.health.condition(drive.id) is DriveCondition.FULL
        data_id = data_id_placed_on(pool, drive.id)
        loc = pool.write_blob(data_id, blob(2 * K * BLOCK))
        assert drive.id not in loc["shards"] and loc["missing"] == []
        filler.unlink()
        pool.health.check(pool.topology)  # first look after marking: the baseline
        pool.health.check(pool.topology)
        assert pool.health.condition(drive.id) is DriveCondition.NORMAL
    finally:
        asyncio.run(pool.close())


def test_heal_rebuilds_a_shard_of_a_full_drive_elsewhere(tmp_path: Path, mount) -> None:
    """Heal does not rebuild in place on a drive that is full: the shard goes to a writable drive."""
    pool = make_pool(tmp_path, 7, DriveHealthSettings(reserve_bytes=256 << 10))
    drive = pool.topology["hot-n4-d1"]
    mount(drive.path, "size=1m")
    data_id = data_id_placed_on(pool, drive.id)
    data = blob(2 * K * BLOCK, 5)
    loc = pool.write_blob(data_id, data)
    index = loc["shards"].index(drive.id)
    for shard in [p for p in drive.path.rglob(f"{data_id}.*") if p.is_file()]:
        shard.unlink()  # lost: heal must rebuild it
    (drive.path / "filler").write_bytes(b"\1" * (900 << 10))
    pool.health.check(pool.topology)
    assert pool.health.condition(drive.id) is DriveCondition.FULL

    result = asyncio.run(pool.heal(data_id, loc, len(data)))
    assert result.rebuilt == [index] and result.changed
    assert result.location["shards"][index] not in (drive.id, None)
    assert asyncio.run(pool.read_all(data_id, result.location, len(data))) == data


def test_rebalance_does_not_move_shards_onto_a_drive_that_cannot_take_writes(tmp_path: Path) -> None:
    """A shard outside its desired group waits (blocked) while that group's drive is full or failing."""
    topology = default_layout(tmp_path, "hot", nodes=8, drives_per_node=1, weight=1.0)
    desired = [d.id for d in place("blob", topology, "drive", K + M)]
    spare = next(d.id for d in topology if d.id not in desired)
    # Shard 0 was retried onto the spare when its preferred drive failed.
    loc = Location("ec", K, M, BLOCK, [spare, *desired[1:]])
    assert plan_moves("blob", loc, topology, "drive").moves[0].id == desired[0]
    plan = plan_moves("blob", loc, topology, "drive", lambda d: d.id != desired[0])
    assert plan.moves == {} and plan.blocked == 1


def test_a_rebalance_move_that_hits_enospc_marks_the_target_full(tmp_path: Path, mount) -> None:
    pool = make_pool(tmp_path, 7, DriveHealthSettings(reserve_bytes=0))
    data = blob(12 * K * BLOCK, 6)
    loc = pool.write_blob("moving", data)
    target = next(d for d in pool.topology if d.id not in loc["shards"])
    mount(target.path, "size=64k")
    with pytest.raises(OSError):
        asyncio.run(pool.move_shard("moving", loc, 0, target.id, len(data)))
    assert pool.health.condition(target.id) is DriveCondition.FULL
    assert pool.writable(target) is False  # the next plan blocks moves to it
    assert [p for p in target.path.rglob("*") if p.is_file()] == []  # the partial copy is gone
