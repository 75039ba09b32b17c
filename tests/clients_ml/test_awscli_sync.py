"""`aws s3 sync` of a dataset-shaped tree (2,000 small files) up and back, within a time budget."""

from __future__ import annotations

import filecmp
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ServerProcess

AWS = Path(sys.executable).with_name("aws")
FILES = 2000


def make_tree(root: Path, count: int) -> None:
    rng = random.Random(11)
    for i in range(count):
        path = root / f"class-{i % 20:02d}" / f"img-{i:05d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.randbytes(rng.randrange(200, 6000)))


def same_tree(left: Path, right: Path) -> bool:
    def walk(cmp: filecmp.dircmp[str]) -> bool:
        if cmp.left_only or cmp.right_only or cmp.funny_files:
            return False
        _, mismatch, errors = filecmp.cmpfiles(cmp.left, cmp.right, cmp.common_files, shallow=False)
        return not mismatch and not errors and all(walk(sub) for sub in cmp.subdirs.values())

    return walk(filecmp.dircmp(left, right))


def test_aws_s3_sync_2000_files(
    server: ServerProcess, aws_env: dict[str, str], s3, bucket: str, tmp_path: Path
) -> None:
    if not AWS.exists():
        pytest.skip("aws (awscli) is not installed in this environment")
    env = {**os.environ, **aws_env, "HOME": str(tmp_path)}

    def aws(*args: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([str(AWS), "--endpoint-url", server.endpoint, *args],
                                env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
        assert result.returncode == 0, (
            f"aws {' '.join(args)} exited {result.returncode}:\n{result.stderr[-3000:]}"
        )
        return result

    up, down = tmp_path / "up", tmp_path / "down"
    make_tree(up, FILES)
    started = time.monotonic()
    aws("s3", "sync", "--only-show-errors", str(up), f"s3://{bucket}/imagenet-mini")
    uploaded = time.monotonic()
    aws("s3", "sync", "--only-show-errors", f"s3://{bucket}/imagenet-mini", str(down))
    finished = time.monotonic()
    print(f"aws s3 sync {FILES} files: up {uploaded - started:.1f}s, down {finished - uploaded:.1f}s")

    assert same_tree(up, down)
    assert sum(1 for p in down.rglob("*") if p.is_file()) == FILES
    keys = s3.list_objects_v2(Bucket=bucket, Prefix="imagenet-mini/class-07/")["Contents"]
    assert len(keys) == FILES // 20
    assert (
        aws("s3", "sync", str(up), f"s3://{bucket}/imagenet-mini").stdout.strip() == ""
    )  # nothing left to do
    aws(
        "s3", "rm", "--recursive", "--only-show-errors", f"s3://{bucket}/imagenet-mini"
    )  # batched DeleteObjects
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket)
