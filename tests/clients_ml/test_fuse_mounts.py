"""A bucket mounted as a file system with rclone and with s3fs-fuse, used the way people use mounts.

Needs /dev/fuse and the Debian packages `rclone`, `s3fs` and `fuse3` (fusermount); without them
the tests skip. Mounters change metadata (chmod, touch) by copying an object onto itself with
x-amz-metadata-directive: REPLACE — the server must do that without rewriting a byte, which the
tests check by watching the shard files on disk.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.clients_ml.conftest import access_log, shard_files
from tests.conftest import ACCESS_KEY, REGION, SECRET_KEY, ServerProcess

MOUNT_TIMEOUT = 20.0
FUSERMOUNT = shutil.which("fusermount3") or shutil.which("fusermount")
# Errors that mean "this machine may not mount", not "the mounter or the server is broken".
UNMOUNTABLE = ("permission denied", "operation not permitted", "fuse: device not found", "no such device")


def require(binary: str) -> None:
    if not Path("/dev/fuse").exists():
        pytest.skip("/dev/fuse is missing: FUSE mounts cannot run here")
    if shutil.which(binary) is None:
        pytest.skip(f"{binary} is not installed (Debian: apt-get install {binary} fuse3)")
    if FUSERMOUNT is None:
        pytest.skip("fusermount is not installed (Debian: apt-get install fuse3)")


def wait_for(check: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def unmount(mountpoint: Path) -> None:
    assert FUSERMOUNT is not None, "require() skips a test without it before anything is mounted"
    for _ in range(50):
        if not os.path.ismount(mountpoint):
            return
        if subprocess.run([FUSERMOUNT, "-u", str(mountpoint)], capture_output=True).returncode == 0:
            return
        time.sleep(0.2)  # busy: a file still open somewhere
    subprocess.run([FUSERMOUNT, "-uz", str(mountpoint)], capture_output=True)  # lazy, as a last resort


@contextmanager
def mounted(command: list[str], mountpoint: Path, log: Path, env: dict[str, str]) -> Iterator[Path]:
    mountpoint.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + MOUNT_TIMEOUT
        while not os.path.ismount(mountpoint):
            if proc.poll() is not None or time.monotonic() > deadline:
                text = log.read_text()
                if any(reason in text.lower() for reason in UNMOUNTABLE):
                    pytest.skip(f"{command[0]} cannot mount here: {text.strip()[-300:]}")
                raise AssertionError(f"{command[0]} did not mount (exit {proc.poll()}):\n{text[-3000:]}")
            time.sleep(0.1)
        yield mountpoint
    finally:
        unmount(mountpoint)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        assert not os.path.ismount(mountpoint), f"{mountpoint} is still mounted"


def rclone_mount(server: ServerProcess, bucket: str, tmp: Path) -> tuple[list[str], dict[str, str]]:
    config = tmp / "rclone.conf"
    config.write_text(
        "[tierstore]\n"
        "type = s3\n"
        "provider = Other\n"
        f"access_key_id = {ACCESS_KEY}\n"
        f"secret_access_key = {SECRET_KEY}\n"
        f"endpoint = {server.endpoint}\n"
        f"region = {REGION}\n"
        "force_path_style = true\n"
    )
    command = [
        "rclone", "mount", f"tierstore:{bucket}", str(tmp / "mnt"), "--config", str(config),
        "--vfs-cache-mode", "writes", "--vfs-write-back", "0s", "--cache-dir", str(tmp / "cache"),
        "--dir-cache-time", "1s", "--poll-interval", "0", "-v",
    ]  # fmt: skip
    # rclone < 1.61 refuses a plain-http endpoint when AWS_CA_BUNDLE is set ("unable to load custom CA bundle").
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return command, env


def s3fs_mount(server: ServerProcess, bucket: str, tmp: Path) -> tuple[list[str], dict[str, str]]:
    passwd = tmp / "passwd-s3fs"
    passwd.write_text(f"{ACCESS_KEY}:{SECRET_KEY}\n")
    passwd.chmod(0o600)
    options = f"url={server.endpoint},use_path_request_style,passwd_file={passwd},endpoint={REGION}"
    command = ["s3fs", bucket, str(tmp / "mnt"), "-f", "-o", options]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return command, env


MOUNTERS = {"rclone": rclone_mount, "s3fs": s3fs_mount}


def stored(s3, bucket: str, key: str) -> bytes | None:
    try:
        return s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except s3.exceptions.NoSuchKey:
        return None


@pytest.mark.parametrize("mounter", sorted(MOUNTERS))
def test_mount_workflow(mounter: str, server: ServerProcess, s3, bucket: str, tmp_path: Path) -> None:
    require(mounter)
    command, env = MOUNTERS[mounter](server, bucket, tmp_path)
    s3.put_object(Bucket=bucket, Key="existing/readme.txt", Body=b"put with boto3\n")
    blob = os.urandom(300_000)

    with mounted(command, tmp_path / "mnt", tmp_path / f"{mounter}.log", env) as mnt:
        # Objects written elsewhere show up as files and directories.
        assert (mnt / "existing" / "readme.txt").read_bytes() == b"put with boto3\n"
        assert "existing" in os.listdir(mnt)

        # Write files; they become objects with the same bytes.
        (mnt / "weights.bin").write_bytes(blob)
        (mnt / "notes.txt").write_text("hello from a mount\n")
        (mnt / "runs" / "run-1").mkdir(parents=True)
        (mnt / "runs" / "run-1" / "metrics.json").write_text('{"loss": 0.25}')
        assert (mnt / "weights.bin").read_bytes() == blob
        assert sorted(os.listdir(mnt)) == ["existing", "notes.txt", "runs", "weights.bin"]
        assert os.listdir(mnt / "runs" / "run-1") == ["metrics.json"]
        wait_for(lambda: stored(s3, bucket, "weights.bin") == blob, "weights.bin to be uploaded")
        wait_for(lambda: stored(s3, bucket, "runs/run-1/metrics.json") == b'{"loss": 0.25}', "metrics.json")
        wait_for(lambda: stored(s3, bucket, "notes.txt") == b"hello from a mount\n", "notes.txt")

        # Rename: a server-side copy and a delete.
        (mnt / "notes.txt").rename(mnt / "runs" / "notes-renamed.txt")
        assert (mnt / "runs" / "notes-renamed.txt").read_text() == "hello from a mount\n"
        assert not (mnt / "notes.txt").exists()
        wait_for(
            lambda: stored(s3, bucket, "runs/notes-renamed.txt") == b"hello from a mount\n", "the rename"
        )
        wait_for(lambda: stored(s3, bucket, "notes.txt") is None, "the old name to go")

        # chmod / touch: metadata-only self-copies, no data rewritten.
        etag = s3.head_object(Bucket=bucket, Key="weights.bin")["ETag"]
        shards_before = shard_files(server)
        copies_before = sum(1 for e in access_log(server, bucket) if e["operation"] == "CopyObject")
        os.utime(mnt / "weights.bin", (1_600_000_000, 1_600_000_000))
        os.chmod(mnt / "weights.bin", 0o600)
        wait_for(lambda: sum(1 for e in access_log(server, bucket) if e["operation"] == "CopyObject") > copies_before,
                 "a metadata self-copy")  # fmt: skip
        head = s3.head_object(Bucket=bucket, Key="weights.bin")
        assert head["ETag"] == etag and head["ContentLength"] == len(blob)
        wait_for(lambda: head_meta(s3, bucket).get("mtime", "").startswith("1600000000"), "the new mtime")
        if mounter == "s3fs":  # s3fs-fuse keeps the mode in x-amz-meta-mode; rclone mounts have no chmod
            wait_for(lambda: int(head_meta(s3, bucket).get("mode", "0")) & 0o777 == 0o600, "the new mode")
        assert shard_files(server) - shards_before == set(), "a metadata change rewrote object data"
        assert stored(s3, bucket, "weights.bin") == blob
        copies = [e for e in access_log(server, bucket) if e["operation"] == "CopyObject"][copies_before:]
        assert all(e["status"] == 200 for e in copies)

        # Delete through the mount.
        (mnt / "weights.bin").unlink()
        wait_for(lambda: stored(s3, bucket, "weights.bin") is None, "weights.bin to be deleted")

    errors = [e for e in access_log(server, bucket) if e["status"] >= 500]
    assert not errors, errors


def head_meta(s3, bucket: str) -> dict[str, str]:
    return s3.head_object(Bucket=bucket, Key="weights.bin")["Metadata"]
