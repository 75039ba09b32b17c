"""Bad drives must not fail PUTs that healthy drives could take: real full and read-only filesystems.

The hot tier is the default 4+2 over 8 nodes × 2 drives, spread by node, declared as explicit
`domains` of equal weight (placement weighs a drive by its filesystem's size, and a tiny tmpfs
would otherwise hardly ever be chosen). Three of its sixteen drives get a filesystem of their own
(tmpfs, mounted before the server starts):

- `hot-n2-d1`: full from the start (a 1 MiB tmpfs filled to the last byte);
- `hot-n5-d2`: nearly full (2 MiB free over a 256 KiB reserve): it takes a few shards, then a
  larger shard hits ENOSPC mid-write and moves to another drive while it streams;
- `hot-n7-d1`: a read-only tmpfs (root ignores permissions, not a read-only mount): every write
  fails with EROFS.

Without drive health, a stripe that lands on two of them loses its write quorum (about one PUT
in six answered 503). With it, 100 of 100 PUTs succeed and read back byte-exact, `admin domains`,
`tierstore_domain_state`, status.json and the log (once per drive) name the drives full /
failing, a heal pass finds nothing degraded; once the faults are cleared (space freed, remounted
read-write) a re-probe brings them back, and a rebalance moves retried shards where placement
prefers them with every object still byte-exact.

fsync errors are not injected: that needs device-mapper's `error` target (dmsetup), which this
kernel does not offer to the test container; EROFS and ENOSPC come from real filesystems.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.conftest import ACCESS_KEY, SECRET_KEY, ServerProcess, make_client

pytestmark = pytest.mark.timeout(600)

KIB, MIB = 1 << 10, 1 << 20
RESERVE = 256 * KIB
FULL = "hot-n2-d1"
NEARLY_FULL = "hot-n5-d2"
READ_ONLY = "hot-n7-d1"
BUCKET = "bad-drives"


def _drive_dir(data: Path, drive: str) -> Path:
    """Where server/config.py's default layout puts a hot drive: <data>/domains/hot/n<i>/d<j>."""
    _, node, disk = drive.split("-")
    return data / "domains" / "hot" / node / disk


def _config(data: Path, nodes: int = 8, drives_per_node: int = 2) -> Path:
    """The server's TOML: the hot tier's drives where the default layout puts them, weight 1 each."""
    drives = ", ".join(
        f'{{id = "hot-n{n}-d{d}", path = "{_drive_dir(data, f"hot-n{n}-d{d}")}", node = "n{n}", weight = 1.0}}'
        for n in range(1, nodes + 1)
        for d in range(1, drives_per_node + 1)
    )
    path = data.parent / "tierstore.toml"
    path.write_text(f"""
[tiers.hot]
domains = [{drives}]

[drives]
reserve_bytes = {RESERVE}
reprobe_seconds = 1
""")
    return path


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def _fill(path: Path, leave: int) -> Path:
    """Write a filler file into the filesystem at `path` until fewer than `leave` bytes are free."""
    filler = path / "filler"
    with open(filler, "wb") as f:
        while True:
            free = os.statvfs(path).f_bavail * os.statvfs(path).f_frsize
            if free <= leave:
                break
            try:
                f.write(b"\xff" * min(64 * KIB, free - leave))
                f.flush()
                os.fsync(f.fileno())
            except OSError:
                break  # ENOSPC: as full as it gets
    return filler


@pytest.fixture
def mount_tmpfs() -> Iterator[Callable[[Path, str], None]]:
    """mount_tmpfs(path, options): a tmpfs of its own at `path`; everything unmounted at the end."""
    if os.geteuid() != 0:
        pytest.skip("mounting filesystems needs root")
    mounted: list[Path] = []

    def mount(path: Path, options: str) -> None:
        path.mkdir(parents=True, exist_ok=True)
        done = _run(
            "mount", "-t", "tmpfs", "-o", options, f"tierstore-{path.parent.name}-{path.name}", str(path)
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(path)

    try:
        yield mount
    finally:
        for path in reversed(mounted):
            if _run("umount", str(path)).returncode != 0:
                _run("umount", "-l", str(path))


@pytest.fixture
def bad_drives(tmp_path: Path, mount_tmpfs: Callable[[Path, str], None]) -> Path:
    """The data directory, with the three bad drives mounted."""
    data = tmp_path / "data"
    for drive, options in ((FULL, "size=1m"), (NEARLY_FULL, "size=3m"), (READ_ONLY, "ro,size=16m")):
        mount_tmpfs(_drive_dir(data, drive), options)
    _fill(_drive_dir(data, FULL), 0)
    _fill(_drive_dir(data, NEARLY_FULL), 2 * MIB)
    return data


def _body(seed: int, size: int) -> bytes:
    block = hashlib.sha256(str(seed).encode()).digest() * 2048  # 64 KiB
    return (block * (size // len(block) + 1))[:size]


def _sizes(count: int) -> list[int]:
    """Mixed sizes: small (whole copies), one stripe or less (written whole), several stripes (streamed)."""
    rng = random.Random(12)
    sizes = []
    for n in range(count):
        if n % 5 < 2:
            sizes.append(rng.randrange(1, 64 * KIB))
        elif n % 5 < 4:
            sizes.append(rng.randrange(64 * KIB, 4 * MIB))
        else:
            sizes.append(rng.randrange(5 * MIB, 13 * MIB))
    return sizes


def _admin(server: ServerProcess, *args: str) -> Any:
    script = Path(sys.executable).with_name("tierstore")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "server.cli"]
    env = {**os.environ, "TIERSTORE_ACCESS_KEY": ACCESS_KEY, "TIERSTORE_SECRET_KEY": SECRET_KEY}
    done = subprocess.run(
        [*cmd, "admin", *args, "--endpoint", server.endpoint, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"tierstore admin {' '.join(args)} failed: {done.stderr}"
    return json.loads(done.stdout)


def _health(server: ServerProcess) -> dict[str, str]:
    return {d["id"]: d["health"] for d in _admin(server, "domains") if d["tier"] == "hot"}


def _metric_states(server: ServerProcess) -> dict[str, str]:
    """Drive → the state whose tierstore_domain_state series is 1."""
    with urllib.request.urlopen(f"{server.endpoint}/_tierstore/metrics", timeout=30) as response:
        text = response.read().decode()
    states = {}
    for line in text.splitlines():
        if line.startswith("tierstore_domain_state{") and line.endswith(" 1.0"):
            labels = dict(
                part.split("=", 1) for part in line[line.index("{") + 1 : line.index("}")].split(",")
            )
            if labels["tier"].strip('"') == "hot":
                states[labels["domain"].strip('"')] = labels["state"].strip('"')
    return states


def _wait_for(check: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_bad_drives_do_not_fail_puts(bad_drives: Path, spawn: Callable[..., ServerProcess]) -> None:
    # Two workers: a drive's write health, found out by one worker's writes, holds in both (shared
    # through the catalog), and whichever worker answers below must say the same.
    server = spawn(
        bad_drives, extra_args=["--config", str(_config(bad_drives)), "--no-lifecycle", "--workers", "2"]
    )
    s3 = make_client(server.endpoint, read_timeout=120, connect_timeout=10)
    s3.create_bucket(Bucket=BUCKET)

    sizes = _sizes(100)
    failed = []
    for n, size in enumerate(sizes):
        try:
            s3.put_object(Bucket=BUCKET, Key=f"obj-{n}", Body=_body(n, size))
        except Exception as exc:  # noqa: BLE001 - counted, reported below
            failed.append(f"obj-{n} ({size} bytes): {exc}")
    assert not failed, f"{len(failed)} of {len(sizes)} PUTs failed:\n" + "\n".join(failed[:10])

    def read_back() -> None:
        for n, size in enumerate(sizes):
            body = s3.get_object(Bucket=BUCKET, Key=f"obj-{n}")["Body"].read()
            assert hashlib.md5(body).hexdigest() == hashlib.md5(_body(n, size)).hexdigest(), (
                f"obj-{n} differs"
            )

    read_back()
    # Retried shards are recorded where they landed: a heal pass finds every shard whole.
    assert _admin(server, "heal", "--wait")["running"] is False
    status = _admin(server, "status")
    assert (status["degraded_objects"], status["lost_objects"]) == (0, 0), status

    expected = {FULL: "full", NEARLY_FULL: "full", READ_ONLY: "failing"}
    for _ in range(6):  # new connections: either worker answers, and each must say the same
        health = _health(server)
        assert {d: h for d, h in health.items() if h != "normal"} == expected, health
        states = _metric_states(server)
        assert (states[FULL], states[NEARLY_FULL], states[READ_ONLY]) == ("full", "full", "failing")
        with urllib.request.urlopen(f"{server.endpoint}/_tierstore/status.json", timeout=30) as response:
            page = {d["id"]: d for d in json.loads(response.read())["domains"] if d["tier"] == "hot"}
        assert page[READ_ONLY]["health"] == "failing" and "EROFS" in page[READ_ONLY]["health_detail"]
        assert page[FULL]["health"] == "full" and page[FULL]["state"] == "online"

    log = server.log()
    for drive, state in expected.items():
        # Found out once per worker at most (the other takes it up, logged as such), never per write.
        marked = [line for line in log.splitlines() if f"drive {drive} (hot) is {state}" in line]
        assert 1 <= len(marked) <= 2, f"{drive} should be logged once per worker as {state}, got {marked}"
    assert "EROFS" in log  # the errno that marked it

    # Clear the faults: free the space (and grow the filesystems, so that the rebalance below has
    # room for the shards it moves back), remount read-write. A re-probe brings each drive back.
    for drive in (FULL, NEARLY_FULL):
        (_drive_dir(bad_drives, drive) / "filler").unlink()
        done = _run("mount", "-o", "remount,size=64m", str(_drive_dir(bad_drives, drive)))
        assert done.returncode == 0, done.stderr
    done = _run("mount", "-o", "remount,rw", str(_drive_dir(bad_drives, READ_ONLY)))
    assert done.returncode == 0, done.stderr
    _wait_for(lambda: set(_health(server).values()) == {"normal"}, "every hot drive back to normal")
    assert set(_metric_states(server).values()) == {"normal"}
    assert "drive hot-n7-d1 (hot) is back to normal" in server.log()

    # A rebalance may now move retried shards to the groups placement prefers; reads stay exact.
    result = _admin(server, "rebalance", "--wait")
    assert result["state"] == "done" and result["failures"] == 0, result
    read_back()

    # Objects still read back, and new writes may use the recovered drives again.
    for n in range(100, 110):
        s3.put_object(Bucket=BUCKET, Key=f"obj-{n}", Body=_body(n, 3 * MIB))
        body = s3.get_object(Bucket=BUCKET, Key=f"obj-{n}")["Body"].read()
        assert body == _body(n, 3 * MIB)


def test_a_put_short_of_its_quorum_says_which_drives_failed_and_why(
    tmp_path: Path,
    mount_tmpfs: Callable[[Path, str], None],
    spawn: Callable[..., ServerProcess],
) -> None:
    """Six drives for 4+2 and two of them read-only: nowhere to retry, so the PUT is refused — and
    the 503 names both drives and the errno, not just "retry later"."""
    data = tmp_path / "data"
    for drive in ("hot-n2-d1", "hot-n5-d1"):
        mount_tmpfs(_drive_dir(data, drive), "ro,size=1m")
    server = spawn(
        data, extra_args=["--config", str(_config(data, nodes=6, drives_per_node=1)), "--no-lifecycle"]
    )
    s3 = make_client(server.endpoint, read_timeout=60, connect_timeout=10)
    s3.create_bucket(Bucket=BUCKET)
    with pytest.raises(ClientError) as raised:
        s3.put_object(Bucket=BUCKET, Key="refused", Body=_body(1, 2 * MIB))
    error = raised.value.response
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 503
    assert error["Error"]["Code"] == "ServiceUnavailable"
    message = error["Error"]["Message"]
    assert "2 of 6 shards failed" in message, message
    assert "hot-n2-d1 EROFS (Read-only file system)" in message, message
    assert "hot-n5-d1 EROFS (Read-only file system)" in message, message
    # The operator reads the same cause in the server's log (a 5xx's cause always is).
    assert f"PUT /{BUCKET}/refused answered 503 ServiceUnavailable: TierUnavailable: " in server.log()
