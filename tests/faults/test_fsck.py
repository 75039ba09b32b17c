"""`tierstore admin fsck`: the catalog and the shard files cross-checked on a real server and disk.

Faults are real files: a shard file planted with no catalog row (an orphan), shard files deleted
or corrupted under a live object (dangling, lost, corrupt).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import xxhash

from tests.conftest import ServerProcess, make_client
from tests.faults.conftest import MiB, pattern
from tests.reliability import Recorder
from tests.support import admin, run_admin

Spawn = Callable[..., ServerProcess]
HOUR = 3600.0


def fsck(server: ServerProcess, *args: str) -> tuple[int, dict[str, Any]]:
    done = run_admin(server.endpoint, "fsck", *args)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def shard_files(data: Path) -> set[Path]:
    """Committed shard files (`<data id>.<index>`) of every erasure-coded tier."""
    return {
        p
        for p in data.rglob("*.[0-9]*")
        if p.is_file() and ".tmp" not in p.parts and "catalog" not in p.parts
    }


def put(s3: Any, data: Path, key: str, body: bytes) -> set[Path]:
    """PUT and return the shard files it made."""
    before = shard_files(data)
    s3.put_object(Bucket="fsck", Key=key, Body=body)
    return shard_files(data) - before


def plant(beside: Path, data_id: str, age: float) -> Path:
    """A copy of a real shard file under a data id no catalog row names, `age` seconds old."""
    domain = beside.parents[2]
    fan = xxhash.xxh3_64_hexdigest(data_id.encode())
    path = domain / fan[:2] / fan[2:4] / f"{data_id}.0"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(beside.read_bytes())
    os.utime(path, (time.time() - age, time.time() - age))
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
    old = plant(next(iter(files["big"])), "0" * 32, age=2 * HOUR)
    young = plant(next(iter(files["big"])), "1" * 32, age=0)
    code, report = fsck(server)
    assert code == 1 and not report["clean"]
    assert [(o["data_id"], o["shard"]) for o in report["orphans"]] == [("0" * 32, 0)]
    assert report["young_unreferenced"] == 1
    code, report = fsck(server, "--repair")
    assert report["repaired"] == 1 and code == 0, report
    assert not old.exists() and young.exists()
    young.unlink()

    # A missing shard is a dangling reference; more than m missing loses the object.
    victim = sorted(files["victim"])
    victim[0].unlink()
    doomed = sorted(files["doomed"])
    for path in doomed[:3]:  # hot tier: k=4, m=2
        path.unlink()
    code, report = fsck(server, "--repair")
    assert code == 1, report
    dangling = {(d["key"], d["shard"]) for d in report["dangling"]}
    assert ("victim", int(victim[0].name.rpartition(".")[2])) in dangling
    assert {k for k, _ in dangling} == {"victim", "doomed"}
    assert [lost["key"] for lost in report["lost"]] == ["doomed"]
    assert report["counts"]["orphans"] == 0  # --repair found nothing to collect: referenced data untouched

    # --repair never touched referenced data: every readable object reads back byte-exact.
    for key, body in bodies.items():
        if key != "doomed":
            assert s3.get_object(Bucket="fsck", Key=key)["Body"].read() == body, key
    assert all(p.exists() for key in ("small", "big") for p in files[key])
    reliability.record(
        inputs=len(bodies) + 1, faults=2 + 1 + 3, operations=len(bodies) * 2 + 3, verified=len(bodies) - 1
    )


def test_fsck_verify_finds_a_corrupt_block(spawn: Spawn, tmp_path: Path, reliability: Recorder) -> None:
    data = tmp_path / "data"
    server = spawn(data)
    s3 = make_client(server.endpoint)
    s3.create_bucket(Bucket="fsck")
    body = b"".join(pattern(4, 2 * MiB))
    shard = sorted(put(s3, data, "rot", body))[0]
    raw = bytearray(shard.read_bytes())
    raw[-100] ^= 0xFF  # a bit flip inside the last block's payload
    shard.write_bytes(bytes(raw))

    code, report = fsck(server)
    assert code == 0, report  # without --verify only presence is checked
    code, report = fsck(server, "--verify")
    assert code == 1 and [c["key"] for c in report["corrupt"]] == ["rot"], report
    assert admin(server.endpoint, "heal", "--wait")["shards_healed"] >= 1
    code, report = fsck(server, "--verify")
    assert code == 0, report
    assert s3.get_object(Bucket="fsck", Key="rot")["Body"].read() == body
    reliability.record(inputs=1, faults=1, operations=3, verified=1)
