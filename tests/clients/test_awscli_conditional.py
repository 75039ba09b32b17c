"""aws-cli (v1) on conditional writes and deletes, GetObjectAttributes and ListBuckets paging."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.clients.test_awscli import aws  # noqa: F401 - the fixture, run as a user runs aws


def test_aws_conditional_put_and_delete(aws, bucket: str, tmp_path: Path) -> None:  # noqa: F811
    body = tmp_path / "body"
    body.write_bytes(b"checkpoint step 1")
    args = ("s3api", "put-object", "--bucket", bucket, "--key", "ckpt", "--body", str(body))
    first = json.loads(aws(*args, "--if-none-match", "*").stdout)
    again = aws(*args, "--if-none-match", "*", check=False)
    assert again.returncode != 0 and "PreconditionFailed" in again.stderr
    stale = aws(*args, "--if-match", '"0123456789abcdef0123456789abcdef"', check=False)
    assert stale.returncode != 0 and "PreconditionFailed" in stale.stderr
    body.write_bytes(b"checkpoint step 2")
    second = json.loads(aws(*args, "--if-match", first["ETag"]).stdout)
    assert second["ETag"] != first["ETag"]
    delete = ("s3api", "delete-object", "--bucket", bucket, "--key", "ckpt")
    refused = aws(*delete, "--if-match", first["ETag"], check=False)
    assert refused.returncode != 0 and "PreconditionFailed" in refused.stderr
    wrong_size = aws(*delete, "--if-match-size", "1", check=False)
    assert wrong_size.returncode != 0 and "PreconditionFailed" in wrong_size.stderr
    aws(*delete, "--if-match", second["ETag"], "--if-match-size", str(len(b"checkpoint step 2")))
    gone = aws("s3api", "head-object", "--bucket", bucket, "--key", "ckpt", check=False)
    assert gone.returncode != 0


def test_aws_object_attributes_and_list_buckets_paging(aws, s3, bucket: str, tmp_path: Path) -> None:  # noqa: F811
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(17 * 1024 * 1024))  # aws s3 cp: 8 MiB parts, so three of them
    aws("s3", "cp", str(big), f"s3://{bucket}/big.bin")
    got = json.loads(
        aws("s3api", "get-object-attributes", "--bucket", bucket, "--key", "big.bin", "--object-attributes",
            "ObjectParts", "ObjectSize", "--max-parts", "2").stdout
    )  # fmt: skip
    assert got["ObjectSize"] == 17 * 1024 * 1024
    parts = got["ObjectParts"]
    assert parts["TotalPartsCount"] == 3 and parts["IsTruncated"] is True
    assert [p["PartNumber"] for p in parts["Parts"]] == [1, 2]
    prefix = f"cli-page-{os.getpid()}-"
    names = [f"{prefix}{i}" for i in range(3)]
    for name in names:
        s3.create_bucket(Bucket=name)
    try:
        # aws-cli follows ContinuationToken itself: pages of one, every bucket once.
        listed = json.loads(aws("s3api", "list-buckets", "--prefix", prefix, "--page-size", "1").stdout)
        assert [b["Name"] for b in listed["Buckets"]] == names
        one = json.loads(aws("s3api", "list-buckets", "--prefix", prefix, "--max-buckets", "1",
                             "--no-paginate").stdout)  # fmt: skip
        assert [b["Name"] for b in one["Buckets"]] == names[:1] and one["ContinuationToken"]
    finally:
        for name in names:
            s3.delete_bucket(Bucket=name)
