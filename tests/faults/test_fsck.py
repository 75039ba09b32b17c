"""`tierstore admin fsck`: the catalog and the shards cross-checked on a real server and disk.

Faults are real bytes: a shard file and a packed record planted with no catalog row (orphans),
shard files deleted or corrupted under a live object (dangling, lost, corrupt), a packed record
corrupted in its pack.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from erasure.pack import PACK_DIR, encode_record, load_pack_key
from erasure.shard_format import HEADER_SIZE, ShardHeader
from tests.conftest import ServerProcess, make_client
from tests.faults.conftest import MiB, pattern
from tests.reliability import Recorder
from tests.shards import Shard, plant, shards_under
from tests.support import admin, run_admin

Spawn = Callable[..., ServerProcess]
HOUR = 3600.0


def fsck(server: ServerProcess, *args: str) -> tuple[int, dict[str, Any]]:
    done = run_admin(server.endpoint, "fsck", *args)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def shard_files(data: Path) -> set[Shard]:
    """Committed shards of every erasure-coded tier: shard files and records in pack files."""
    return set(shards_under(data / "domains"))


def put(s3: Any, data: Path, key: str, body: bytes) -> set[Shard]:
    """PUT and return the shards it made."""
    before = shard_files(data)
    s3.put_object(Bucket="fsck", Key=key, Body=body)
    return shard_files(data) - before


def plant_packed(beside: Shard, data_id: str, age: float) -> Path:
    """A copy of a real shard as a record under a data id no catalog row names, in a pack of its
    own, `age` seconds old, as a process that is gone would have left it."""
    born = time.time() - age
    path = beside.domain / PACK_DIR / f"pack-{int(born * 1e9):020d}-p999999999-0badc0de.tsp"
    raw = beside.read()
    header = dataclasses.replace(ShardHeader.unpack(raw[:HEADER_SIZE]), data_id=data_id, index=0)
    key = load_pack_key(path.parent)  # the drive's own key: a record as the store writes it
    path.write_bytes(encode_record(1, data_id, 0, header.pack() + raw[HEADER_SIZE:], key))
    os.utime(path, (born, born))
    return path


def test_fsck_clean_orphan_repair_dangling_lost(spawn: Spawn, tmp_path: Path, reliability: Recorder) -> None:
    data = tmp_path / "data"
    server = spawn(data)
    s3 = make_client(server.endpoint)
    s3.create_bucket(Bucket="fsck")
    bodies = {
        "small": b"tiny object",
        "empty": b"",
        "big": b"".join(pattern(1, 3 * MiB + 5)),
        "victim": b"".join(pattern(2, 2 * MiB)),
        "doomed": b"".join(pattern(3, 2 * MiB)),
    }
    files = {key: put(s3, data, key, body) for key, body in bodies.items()}
    upload = s3.create_multipart_upload(Bucket="fsck", Key="unfinished")["UploadId"]
    s3.upload_part(Bucket="fsck", Key="unfinished", UploadId=upload, PartNumber=1, Body=bodies["big"])

    # A clean store is clean.
    code, report = fsck(server, "--verify")
    assert code == 0, report
    assert report["clean"] and report["counts"] == {"dangling": 0, "lost": 0, "corrupt": 0, "orphans": 0}
    assert report["blobs"] == 6  # five objects and one part
    assert report["pieces_listed"] == report["pieces_referenced"] == len(shard_files(data))

    # An old unreferenced shard file is an orphan; a young one may be a write in flight: not judged.
    # The same for a record in a pack file (small objects are packed by default).
    assert all(s.packed for s in files["small"]) and not any(s.packed for s in files["big"])
    old = plant(next(iter(files["big"])), "0" * 32, age=2 * HOUR)
    young = plant(next(iter(files["big"])), "1" * 32, age=0)
    old_packed = plant_packed(next(iter(files["small"])), "2" * 32, age=2 * HOUR)
    code, report = fsck(server)
    assert code == 1 and not report["clean"]
    assert sorted((o["data_id"], o["shard"]) for o in report["orphans"]) == [("0" * 32, 0), ("2" * 32, 0)]
    assert report["young_unreferenced"] == 1
    code, report = fsck(server, "--repair")
    assert report["repaired"] == 2 and code == 0, report
    assert not old.exists() and young.exists()
    assert old_packed.exists() and not [s for s in shard_files(data) if s.data_id == "2" * 32]  # a tombstone
    young.unlink()

    # A missing shard is a dangling reference; more than m missing loses the object.
    victim = sorted(files["victim"], key=lambda s: s.index)
    assert not any(s.packed for s in victim)  # 512 KiB shards: files of their own
    victim[0].destroy()
    doomed = sorted(files["doomed"], key=lambda s: s.index)
    for shard in doomed[:3]:  # hot tier: k=4, m=2
        shard.destroy()
    code, report = fsck(server, "--repair")
    assert code == 1, report
    dangling = {(d["key"], d["shard"]) for d in report["dangling"]}
    assert ("victim", victim[0].index) in dangling
    assert {k for k, _ in dangling} == {"victim", "doomed"}
    assert [lost["key"] for lost in report["lost"]] == ["doomed"]
    assert report["counts"]["orphans"] == 0  # --repair found nothing to collect: referenced data untouched

    # --repair never touched referenced data: every readable object reads back byte-exact.
    for key, body in bodies.items():
        if key != "doomed":
            assert s3.get_object(Bucket="fsck", Key=key)["Body"].read() == body, key
    assert files["small"] | files["big"] <= shard_files(data)
    reliability.record(
        inputs=len(bodies) + 1, faults=2 + 1 + 3, operations=len(bodies) * 2 + 3, verified=len(bodies) - 1
    )


@pytest.mark.parametrize("size", [2 * MiB, 5000], ids=["shard-file", "packed-record"])
def test_fsck_verify_finds_a_corrupt_block(
    spawn: Spawn, tmp_path: Path, reliability: Recorder, size: int
) -> None:
    data = tmp_path / "data"
    server = spawn(data)
    s3 = make_client(server.endpoint)
    s3.create_bucket(Bucket="fsck")
    body = b"".join(pattern(4, size))
    shard = sorted(put(s3, data, "rot", body), key=lambda s: s.index)[0]
    assert shard.packed == (size < 128 * 1024)
    shard.corrupt(-100)  # a bit flip inside the last block's payload (in the file, or the pack)

    code, report = fsck(server)
    assert code == 0, report  # without --verify only presence is checked
    code, report = fsck(server, "--verify")
    assert code == 1 and [c["key"] for c in report["corrupt"]] == ["rot"], report
    assert admin(server.endpoint, "heal", "--wait")["shards_healed"] >= 1
    code, report = fsck(server, "--verify")
    assert code == 0, report
    assert s3.get_object(Bucket="fsck", Key="rot")["Body"].read() == body
    reliability.record(inputs=1, faults=1, operations=3, verified=1)
