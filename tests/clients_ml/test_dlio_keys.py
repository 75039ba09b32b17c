"""Keys the way data loaders and benchmark tools (DLIO, ad-hoc scripts) build them round-trip exactly.

Keys are opaque strings to S3: a full URI pasted into a key, doubled, leading and trailing
slashes, dot segments, ':' and query-like characters must come back byte for byte from GET and
LIST — through boto3 and through s3fs (fsspec).
"""

from __future__ import annotations

import pytest

from tests.conftest import ACCESS_KEY, REGION, SECRET_KEY, ServerProcess

KEYS = [
    "dir/file.npz",
    "s3://{bucket}/dir/file.npz",  # a tool that put the whole URI into the key
    "a//b",
    "//leading/double",
    "x:y",
    "img:0001.jpg",
    "dir/",  # a "directory marker"
    "train/part-00000/",
    "a/./b",
    "a/../b",
    "sp ace/+plus%25pct",
    "unicodé/ü.npy",
    "q?x=1&y=2#frag",
]


def keys_for(bucket: str) -> list[str]:
    return [k.format(bucket=bucket) for k in KEYS]


def test_boto3_roundtrip(s3, bucket: str) -> None:
    keys = keys_for(bucket)
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    for key in keys:
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == key.encode(), key
        assert s3.head_object(Bucket=bucket, Key=key)["ContentLength"] == len(key.encode())
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert listed == sorted(keys, key=lambda k: k.encode())

    # Delimiter listings treat every '/' literally, including doubled ones.
    top = s3.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert sorted(p["Prefix"] for p in top["CommonPrefixes"]) == sorted(
        {"/", "a/", "dir/", "s3:/", "sp ace/", "train/", "unicodé/"}
    )
    assert sorted(o["Key"] for o in top["Contents"]) == sorted(["x:y", "img:0001.jpg", "q?x=1&y=2#frag"])
    inner = s3.list_objects_v2(Bucket=bucket, Prefix="a/", Delimiter="/")
    assert sorted(p["Prefix"] for p in inner["CommonPrefixes"]) == sorted(["a//", "a/../", "a/./"])
    uri = s3.list_objects_v2(Bucket=bucket, Prefix=f"s3://{bucket}/")
    assert [o["Key"] for o in uri["Contents"]] == [f"s3://{bucket}/dir/file.npz"]
    marker = s3.list_objects_v2(Bucket=bucket, Prefix="dir/", Delimiter="/")
    assert [o["Key"] for o in marker["Contents"]] == ["dir/", "dir/file.npz"]

    # Listed keys are usable as-is: copy and delete each by the name LIST gave.
    for key in listed:
        s3.copy_object(Bucket=bucket, Key=f"copy/{key}", CopySource={"Bucket": bucket, "Key": key})
        assert s3.get_object(Bucket=bucket, Key=f"copy/{key}")["Body"].read() == key.encode(), key
    s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in listed]})
    remaining = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert remaining == sorted((f"copy/{k}" for k in keys), key=lambda k: k.encode())


def test_s3fs_roundtrip(server: ServerProcess, s3, bucket: str) -> None:
    s3fs = pytest.importorskip("s3fs")
    fs = s3fs.S3FileSystem(key=ACCESS_KEY, secret=SECRET_KEY, skip_instance_cache=True,
                           client_kwargs={"endpoint_url": server.endpoint, "region_name": REGION})  # fmt: skip
    keys = keys_for(bucket)
    files = [k for k in keys if not k.endswith("/")]  # s3fs strips a trailing '/': no file can end in one
    for key in files:
        fs.pipe_file(f"{bucket}/{key}", key.encode())
    for key in [k for k in keys if k.endswith("/")]:
        s3.put_object(Bucket=bucket, Key=key, Body=b"")  # markers, as other tools make them
    for key in files:
        assert fs.cat_file(f"{bucket}/{key}") == key.encode(), key
        assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == key.encode(), (
            key
        )  # same key on the wire
    found = fs.find(bucket)
    assert sorted(found) == sorted(f"{bucket}/{k}" for k in keys)
    assert fs.info(f"{bucket}/a//b")["size"] == len(b"a//b")
    assert fs.info(f"{bucket}/a/../b")["size"] == len(b"a/../b")  # no client-side path normalisation
    assert fs.cat_file(f"{bucket}/s3://{bucket}/dir/file.npz") == f"s3://{bucket}/dir/file.npz".encode()
    fs.rm([f"{bucket}/{k}" for k in files])
    assert sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]) == sorted(
        k for k in keys if k.endswith("/")
    )
