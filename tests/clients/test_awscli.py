"""The aws command line (v1), run as a user runs it: a subprocess with credentials in the env."""

from __future__ import annotations

import filecmp
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ACCESS_KEY, REGION, SECRET_KEY, ServerProcess

AWS = str(Path(sys.executable).with_name("aws"))
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def aws(server: ServerProcess, tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp("aws-home")
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_DEFAULT_REGION": REGION,
        # Nothing from the machine's own AWS configuration may leak in.
        "AWS_CONFIG_FILE": str(home / "config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(home / "credentials"),
        "HOME": str(home),
    }
    env.pop("AWS_PROFILE", None)

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [AWS, "--endpoint-url", server.endpoint, *args],
            env=env, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        if check and result.returncode != 0:
            raise AssertionError(f"aws {' '.join(args)} exited {result.returncode}:\n{result.stderr}")
        return result

    return run


def make_tree(root: Path, count: int) -> dict[str, bytes]:
    files = {}
    for i in range(count):
        rel = f"d{i % 7}/sub{i % 3}/file-{i:04d}.dat"
        data = os.urandom(i * 37 % 5000)
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        files[rel] = data
    return files


def same_tree(left: Path, right: Path) -> bool:
    def walk(cmp: filecmp.dircmp[str]) -> bool:
        if cmp.left_only or cmp.right_only or cmp.funny_files:
            return False
        _, mismatch, errors = filecmp.cmpfiles(cmp.left, cmp.right, cmp.common_files, shallow=False)
        return not mismatch and not errors and all(walk(sub) for sub in cmp.subdirs.values())

    return walk(filecmp.dircmp(left, right))


def test_aws_s3_workflow(aws, s3, tmp_path: Path) -> None:
    bucket = f"cli-{os.getpid()}"
    aws("s3", "mb", f"s3://{bucket}")
    try:
        small = tmp_path / "small.txt"
        small.write_bytes(b"hello aws cli\n")
        big = tmp_path / "big.bin"
        big.write_bytes(os.urandom(20 * MiB))
        aws("s3", "cp", str(small), f"s3://{bucket}/one/small.txt")
        aws("s3", "cp", str(big), f"s3://{bucket}/one/big.bin")
        assert s3.head_object(Bucket=bucket, Key="one/big.bin")["ETag"].endswith('-3"')  # multipart
        aws("s3", "cp", f"s3://{bucket}/one/big.bin", str(tmp_path / "big.back"))
        assert (tmp_path / "big.back").read_bytes() == big.read_bytes()

        up = tmp_path / "up"
        files = make_tree(up, 300)
        aws("s3", "sync", str(up), f"s3://{bucket}/tree")
        down = tmp_path / "down"
        aws("s3", "sync", f"s3://{bucket}/tree", str(down))
        assert same_tree(up, down)
        assert sum(1 for p in down.rglob("*") if p.is_file()) == len(files)
        # A second sync finds nothing to do.
        assert aws("s3", "sync", str(up), f"s3://{bucket}/tree").stdout.strip() == ""

        top = aws("s3", "ls", f"s3://{bucket}/").stdout
        assert "PRE one/" in top and "PRE tree/" in top
        listing = aws("s3", "ls", f"s3://{bucket}/one/").stdout
        assert "small.txt" in listing and str(20 * MiB) in listing
        recursive = aws("s3", "ls", "--recursive", f"s3://{bucket}").stdout.splitlines()
        assert len(recursive) == len(files) + 2
        assert any(line.endswith("tree/d0/sub0/file-0000.dat") for line in recursive)

        aws("s3", "rm", "--recursive", f"s3://{bucket}/tree")
        assert len(aws("s3", "ls", "--recursive", f"s3://{bucket}").stdout.splitlines()) == 2
        aws("s3", "rm", "--recursive", f"s3://{bucket}")
        assert aws("s3", "ls", "--recursive", f"s3://{bucket}").stdout.strip() == ""
    finally:
        aws("s3", "rb", "--force", f"s3://{bucket}", check=False)
    assert bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]


def test_aws_s3api(aws, bucket: str, tmp_path: Path) -> None:
    src = tmp_path / "in.bin"
    src.write_bytes(os.urandom(123_456))
    put = json.loads(aws("s3api", "put-object", "--bucket", bucket, "--key", "api/obj",
                         "--body", str(src), "--metadata", "owner=cli").stdout)  # fmt: skip
    head = json.loads(aws("s3api", "head-object", "--bucket", bucket, "--key", "api/obj").stdout)
    assert head["ETag"] == put["ETag"]
    assert head["ContentLength"] == 123_456
    assert head["Metadata"] == {"owner": "cli"}
    listed = json.loads(aws("s3api", "list-objects-v2", "--bucket", bucket, "--prefix", "api/").stdout)
    assert [(o["Key"], o["Size"]) for o in listed["Contents"]] == [("api/obj", 123_456)]
    out = tmp_path / "out.bin"
    got = json.loads(aws("s3api", "get-object", "--bucket", bucket, "--key", "api/obj", str(out)).stdout)
    assert got["ContentLength"] == 123_456
    assert out.read_bytes() == src.read_bytes()


def test_aws_s3api_missing_key_fails(aws, bucket: str, tmp_path: Path) -> None:
    result = aws("s3api", "get-object", "--bucket", bucket, "--key", "nope", str(tmp_path / "x"), check=False)
    assert result.returncode != 0
    assert "NoSuchKey" in result.stderr
    assert not (tmp_path / "x").exists()
