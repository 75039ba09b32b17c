"""SIGKILL trials: kill -9 the server at a random moment of a write, restart it, check what is left.

Each trial starts a server on its own data directory, sets up a known state, starts one operation
(a large streaming PUT, a multipart complete, a CopyObject, a DeleteObjects, lifecycle tier moves
on the test clock, a rebalance after a domain add), kills the server at a random moment, restarts
it on the same data and asserts:
- every acknowledged write is readable byte-exact;
- an unacknowledged one is either wholly the old state or wholly the new (HEAD, GET and LIST
  agree; a DeleteObjects deleted each key or did not, consistently with what it acknowledged);
- `tierstore admin fsck` finds no dangling reference and nothing lost; what the crash left is
  only garbage the collector removes (`fsck --repair`), after which fsck is clean.

One trial per kind in CI; TIERSTORE_KILL9_TRIALS=N (or --soak: 8) runs N per kind. The RNG seed
is printed: TIERSTORE_KILL9_SEED=<seed> replays a failure.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import BotoCoreError, ClientError

from tests.conftest import ServerProcess, make_client
from tests.faults.conftest import MiB, StreamingPut, pattern, pattern_md5
from tests.reliability import Recorder
from tests.support import AdminError, admin, run_admin

BUCKET = "trials"
KINDS = ["put", "multipart_complete", "copy", "delete_objects", "tier_move", "rebalance"]
SOAK_TRIALS = 8
# A pass runs only when a trial asks; moves and rebalances start at once; garbage goes quickly.
SERVER_ENV = {
    "TIERSTORE_LIFECYCLE_INTERVAL_SECONDS": "3600",
    "TIERSTORE_REBALANCE_SETTLE_SECONDS": "0.2",
    "TIERSTORE_RETIRE_GRACE_SECONDS": "2",
}


def _seed() -> int:
    return int(os.environ.get("TIERSTORE_KILL9_SEED") or random.SystemRandom().randrange(1 << 32))


SEED = _seed()


def trials_per_kind(config: pytest.Config) -> int:
    if os.environ.get("TIERSTORE_KILL9_TRIALS"):
        return max(1, int(os.environ["TIERSTORE_KILL9_TRIALS"]))
    return SOAK_TRIALS if config.getoption("--soak") else 1


@dataclass(frozen=True)
class Version:
    """One state of a key: absent (md5 None) or these bytes."""

    md5: str | None
    size: int = 0

    @classmethod
    def of(cls, data: bytes) -> Version:
        return cls(hashlib.md5(data).hexdigest(), len(data))


ABSENT = Version(None)


@dataclass
class Trial:
    """One server's life through a kill: the keys' possible states and what was acknowledged."""

    server: ServerProcess
    spawn: Callable[..., ServerProcess]  # the faults fixture: starts a server, kills it at the end
    rng: random.Random
    recorder: Recorder
    allowed: dict[str, set[Version]] = field(default_factory=dict)  # key -> states that may be seen
    operations: int = 0
    after_restart: list[Callable[[], None]] = field(default_factory=list)  # checks a trial adds
    notes: list[str] = field(default_factory=list)  # what happened, printed for the record

    def __post_init__(self) -> None:
        self.s3 = make_client(
            self.server.endpoint, read_timeout=120, connect_timeout=10, max_pool_connections=16
        )

    def put(self, key: str, data: bytes, **kwargs: Any) -> None:
        self.s3.put_object(Bucket=BUCKET, Key=key, Body=data, **kwargs)
        self.allowed[key] = {Version.of(data)}
        self.operations += 1

    def admin(self, *args: str) -> Any:
        self.operations += 1
        return admin(self.server.endpoint, *args)

    def in_background(self, action: Callable[[], Any]) -> Background:
        job = Background(action)
        job.start()
        return job

    def kill_at_random(self, job: Background, window: float) -> float:
        """SIGKILL the server `uniform(0, window)` seconds from now; returns the delay chosen."""
        delay = self.rng.uniform(0, window)
        time.sleep(delay)
        self.server.kill()
        job.join(60)
        assert not job.is_alive(), "the client did not notice the kill"
        self.recorder.record(faults=1)
        self.notes.append(f"killed {delay:.2f}s in, {'after the ack' if job.acked else 'unacknowledged'}")
        return delay

    def restart(self) -> None:
        self.server = self.spawn(self.server.data_dir, env=dict(SERVER_ENV), extra_args=["--test-clock"])
        self.s3 = make_client(
            self.server.endpoint, read_timeout=120, connect_timeout=10, max_pool_connections=16
        )

    # --- after the restart ----------------------------------------------------------------------

    def seen(self, key: str) -> Version:
        """The key's state as GET shows it, checked against HEAD and LIST (nothing half-visible)."""
        try:
            head = self.s3.head_object(Bucket=BUCKET, Key=key)
        except ClientError as exc:
            assert exc.response["Error"]["Code"] in ("404", "NoSuchKey"), exc.response
            listed = self.s3.list_objects_v2(Bucket=BUCKET, Prefix=key).get("Contents", [])
            assert key not in [o["Key"] for o in listed], f"{key}: listed but HEAD says absent"
            return ABSENT
        body = self.s3.get_object(Bucket=BUCKET, Key=key)["Body"]
        digest, size = hashlib.md5(), 0
        for piece in iter(lambda: body.read(MiB), b""):
            digest.update(piece)
            size += len(piece)
        assert size == head["ContentLength"], (
            f"{key}: GET gave {size} bytes, HEAD says {head['ContentLength']}"
        )
        (listed,) = [
            o for o in self.s3.list_objects_v2(Bucket=BUCKET, Prefix=key)["Contents"] if o["Key"] == key
        ]
        assert listed["Size"] == size and listed["ETag"] == head["ETag"], f"{key}: LIST disagrees with HEAD"
        self.operations += 4
        return Version(digest.hexdigest(), size)

    def check(self) -> None:
        for key, allowed in sorted(self.allowed.items()):
            try:
                state = self.seen(key)
            except ClientError as exc:  # e.g. 503: its shards are gone
                self.recorder.lost(f"{key}: {exc}")
                continue
            if state not in allowed:
                self.recorder.lost(f"{key}: {state} not in {allowed}")
        self.recorder.record(verified=len(self.allowed))

    def check_fsck(self) -> None:
        """No dangling reference, nothing lost; what the crash left is garbage the collector takes."""
        first = self.fsck()
        assert first["counts"]["dangling"] == first["counts"]["lost"] == 0, first
        # Nothing is in flight now: every unreferenced shard is crash garbage, whatever its age.
        repair = self.fsck("--orphan-age", "0", "--repair")
        final = self.fsck("--orphan-age", "0")
        assert final["clean"], final
        self.notes.append(
            f"fsck: {repair['counts']['orphans']} crash orphans collected, "
            f"{first['queued_garbage']} queued garbage"
        )

    def fsck(self, *args: str) -> dict[str, Any]:
        done = run_admin(self.server.endpoint, "fsck", *args)
        self.operations += 1
        assert done.returncode in (0, 1), done.stderr
        report: dict[str, Any] = json.loads(done.stdout)
        assert done.returncode == (0 if report["clean"] else 1)
        return report


class Background(threading.Thread):
    """Run one client operation; `acked` once it returned, `error` if the kill cut it off."""

    def __init__(self, action: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.action = action
        self.result: Any = None
        self.acked = False
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.action()
            self.acked = True
        except (BotoCoreError, ClientError, OSError, AdminError) as exc:
            self.error = exc


# --- one trial per kind ---------------------------------------------------------------------------


def trial_put(t: Trial) -> None:
    """Overwrite a large object with a streaming PUT (UNSIGNED-PAYLOAD), killed anywhere in it."""
    old = b"".join(pattern(t.rng.randrange(1 << 30), 3 * MiB + t.rng.randrange(MiB)))
    t.put("big", old)
    seed, size = t.rng.randrange(1 << 30), t.rng.choice([8, 16, 32]) * MiB + t.rng.randrange(MiB)
    upload = StreamingPut(t.server, f"/{BUCKET}/big", seed=seed, size=size)
    started = time.monotonic()
    upload.start()
    upload.join(120)
    took = time.monotonic() - started  # the scale of the random moment: a PUT's own duration
    assert upload.status == 200, upload.reply
    t.allowed["big"] = {Version(pattern_md5(seed, size), size)}
    seed, size = t.rng.randrange(1 << 30), t.rng.choice([8, 16, 32]) * MiB + t.rng.randrange(MiB)
    upload = StreamingPut(t.server, f"/{BUCKET}/big", seed=seed, size=size)
    new = Version(pattern_md5(seed, size), size)
    upload.start()
    time.sleep(t.rng.uniform(0, 1.3 * took))
    t.server.kill()
    upload.join(60)
    t.recorder.record(faults=1)
    t.operations += 3
    acked = upload.status == 200
    t.notes.append(
        f"killed {upload.sent // MiB}/{size // MiB} MiB in, {'after the ack' if acked else 'unacknowledged'}"
    )
    t.allowed["big"] = {new} if acked else t.allowed["big"] | {new}


def trial_multipart_complete(t: Trial) -> None:
    """Complete a three-part upload over an existing key; kill around the complete."""
    t.put("mpu", b"old version")
    upload = t.s3.create_multipart_upload(Bucket=BUCKET, Key="mpu")["UploadId"]
    parts, whole = [], hashlib.md5()
    size = 0
    for number, part_size in enumerate([5 * MiB, 5 * MiB + t.rng.randrange(MiB), t.rng.randrange(1, MiB)], 1):
        data = b"".join(pattern(t.rng.randrange(1 << 30), part_size))
        etag = t.s3.upload_part(Bucket=BUCKET, Key="mpu", UploadId=upload, PartNumber=number, Body=data)[
            "ETag"
        ]
        parts.append({"PartNumber": number, "ETag": etag})
        whole.update(data)
        size += part_size
        t.operations += 1
    new = Version(whole.hexdigest(), size)
    job = t.in_background(
        lambda: t.s3.complete_multipart_upload(
            Bucket=BUCKET, Key="mpu", UploadId=upload, MultipartUpload={"Parts": parts}
        )
    )
    t.kill_at_random(job, 0.08)  # a complete takes tens of milliseconds
    t.allowed["mpu"] = {new} if job.acked else t.allowed["mpu"] | {new}
    t.after_restart.append(lambda: _upload_consistent(t, upload, parts, new))


def _upload_consistent(t: Trial, upload: str, parts: list[dict[str, Any]], new: Version) -> None:
    """Completed: the upload is gone. Not completed: it is still there, whole, and completes now."""
    pending = [u["UploadId"] for u in t.s3.list_multipart_uploads(Bucket=BUCKET).get("Uploads", [])]
    if t.seen("mpu") == new:
        assert upload not in pending, "the object is complete but its upload is still listed"
        return
    assert upload in pending, "neither the object nor the upload survived"
    listed = t.s3.list_parts(Bucket=BUCKET, Key="mpu", UploadId=upload)["Parts"]
    assert [(p["PartNumber"], p["ETag"]) for p in listed] == [(p["PartNumber"], p["ETag"]) for p in parts]
    t.s3.complete_multipart_upload(
        Bucket=BUCKET, Key="mpu", UploadId=upload, MultipartUpload={"Parts": parts}
    )
    t.allowed["mpu"] = {new}


def trial_copy(t: Trial) -> None:
    """CopyObject of a large object onto an existing key, into another tier (a data copy)."""
    source = b"".join(pattern(t.rng.randrange(1 << 30), t.rng.choice([4, 12, 24]) * MiB + 7))
    t.put("source", source)
    t.put("copy", b"the copy's old version")
    job = t.in_background(
        lambda: t.s3.copy_object(
            Bucket=BUCKET,
            Key="copy",
            CopySource={"Bucket": BUCKET, "Key": "source"},
            StorageClass="STANDARD_IA",
        )
    )
    t.kill_at_random(job, 0.1 + len(source) / (40 * MiB))
    new = Version.of(source)
    t.allowed["copy"] = {new} if job.acked else t.allowed["copy"] | {new}


def trial_delete_objects(t: Trial) -> None:
    """DeleteObjects of many keys: each key is deleted or not, never half; acknowledged ones are gone."""
    keys = [f"many/{i:03d}" for i in range(120)]
    for key in keys:
        t.put(key, t.rng.randbytes(t.rng.choice([0, 100, 70_000, 300_000])))
    # A first DeleteObjects of half the keys gives the time scale of the one the kill cuts.
    started = time.monotonic()
    t.s3.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": k} for k in keys[1::2]]})
    took = time.monotonic() - started
    for key in keys[1::2]:
        t.allowed[key] = {ABSENT}
    doomed = keys[::2]
    job = t.in_background(
        lambda: t.s3.delete_objects(
            Bucket=BUCKET, Delete={"Objects": [{"Key": k} for k in doomed], "Quiet": False}
        )
    )
    t.kill_at_random(job, 1.3 * took)
    deleted = {d["Key"] for d in job.result.get("Deleted", [])} if job.acked else set()
    for key in doomed:
        t.allowed[key] = {ABSENT} if key in deleted else t.allowed[key] | {ABSENT}


def trial_tier_move(t: Trial) -> None:
    """Lifecycle transitions (hot -> warm) on the test clock, killed while the mover copies."""
    for i in range(24):
        t.put(f"move/{i:02d}", t.rng.randbytes(t.rng.choice([1000, 200_000, 3 * MiB])))
    t.s3.put_bucket_lifecycle_configuration(
        Bucket=BUCKET,
        LifecycleConfiguration={
            "Rules": [
                {
                    "ID": "to-warm",
                    "Filter": {"Prefix": "move/"},
                    "Status": "Enabled",
                    "Transitions": [{"Days": 30, "StorageClass": "STANDARD_IA"}],
                }
            ]
        },
    )
    t.admin("clock", "advance", "32")
    job = t.in_background(lambda: t.admin("lifecycle", "run", "--wait"))
    t.kill_at_random(job, 3.0)


def trial_rebalance(t: Trial) -> None:
    """A domain added to the hot tier; the rebalance that follows is killed while it moves shards."""
    for i in range(40):
        t.put(f"spread/{i:02d}", t.rng.randbytes(t.rng.choice([2000, 150_000, 2 * MiB])))
    drive = t.server.data_dir / "domains" / "hot" / "n99" / "d1"
    job = t.in_background(
        lambda: t.admin(
            "domain",
            "add",
            "--tier",
            "hot",
            "--path",
            str(drive),
            "--node",
            "n99",
            "--rack",
            "rack1",
            "--wait",
        )
    )
    t.kill_at_random(job, 4.0)


TRIALS: dict[str, Callable[[Trial], None]] = {
    "put": trial_put,
    "multipart_complete": trial_multipart_complete,
    "copy": trial_copy,
    "delete_objects": trial_delete_objects,
    "tier_move": trial_tier_move,
    "rebalance": trial_rebalance,
}


@pytest.mark.parametrize("kind", KINDS)
def test_kill9_trials(
    kind: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    reliability: Recorder,
    spawn: Callable[..., ServerProcess],
) -> None:
    count = trials_per_kind(request.config)
    print(f"\nkill -9 trials: {count} x {kind}, seed {SEED} (replay: TIERSTORE_KILL9_SEED={SEED})")
    for number in range(count):
        rng = random.Random(f"{SEED}-{kind}-{number}")
        server = spawn(tmp_path / f"trial{number}", env=dict(SERVER_ENV), extra_args=["--test-clock"])
        trial = Trial(server, spawn, rng, reliability)
        trial.s3.create_bucket(Bucket=BUCKET)
        TRIALS[kind](trial)
        assert trial.server.proc is None, "the trial did not kill its server"
        trial.restart()
        for check in trial.after_restart:
            check()
        trial.check()
        trial.check_fsck()
        reliability.record(inputs=1, operations=trial.operations)
        print(f"  trial {number}: {'; '.join(trial.notes)}")
        trial.server.stop()
