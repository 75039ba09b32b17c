"""Object PUT / GET / HEAD / DELETE over real boto3: bodies, keys, metadata, storage classes."""

from __future__ import annotations

import base64
import hashlib
import os
import threading
from datetime import UTC, datetime

import pytest
from botocore.exceptions import ClientError

from tests.conftest import make_client


def md5_hex(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


@pytest.mark.parametrize("size", [0, 1, 1000, 3 * 1024 * 1024 + 17])
def test_put_get_head_round_trip(s3, bucket, size: int) -> None:
    body = os.urandom(size)
    put = s3.put_object(Bucket=bucket, Key="obj", Body=body)
    assert put["ETag"] == f'"{md5_hex(body)}"'
    got = s3.get_object(Bucket=bucket, Key="obj")
    assert got["Body"].read() == body
    assert got["ContentLength"] == size
    assert got["ETag"] == put["ETag"]
    head = s3.head_object(Bucket=bucket, Key="obj")
    assert head["ContentLength"] == size
    assert head["ETag"] == put["ETag"]
    assert head["ContentType"] == "binary/octet-stream"
    assert head["AcceptRanges"] == "bytes"
    assert abs((head["LastModified"] - datetime.now(UTC)).total_seconds()) < 60


def test_overwrite_replaces_body_and_metadata(s3, bucket) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"first", Metadata={"a": "1"})
    s3.put_object(Bucket=bucket, Key="k", Body=b"second!")
    got = s3.get_object(Bucket=bucket, Key="k")
    assert got["Body"].read() == b"second!"
    assert got["Metadata"] == {}


KEYS = [
    "plain",
    "with space",
    "unicode-日本語-ümlaut-😀",
    "colon:in:key",
    "double//slash",
    "trailing/",
    "plus+sign",
    "percent%20literal",
    "/leading-slash",
    "//two-leading",
    "question?mark&amp=eq",
    "tilde~star*quote'paren()",
    "hash#fragment",
    "a" * 1024,
    "é" * 512,  # 1024 bytes in UTF-8
]


@pytest.mark.parametrize("key", KEYS, ids=range(len(KEYS)))
def test_special_keys_round_trip(s3, bucket, key: str) -> None:
    body = key.encode()[:64] + b"!"
    s3.put_object(Bucket=bucket, Key=key, Body=body)
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body
    assert s3.head_object(Bucket=bucket, Key=key)["ContentLength"] == len(body)
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
    assert listed == [key]
    s3.delete_object(Bucket=bucket, Key=key)
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


@pytest.mark.parametrize("key", ["a" * 1025, "é" * 513])
def test_key_too_long(s3, bucket, expect_error, key: str) -> None:
    with expect_error("KeyTooLongError", 400):
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")


def test_user_and_system_metadata_round_trip(s3, bucket) -> None:
    expires = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    s3.put_object(
        Bucket=bucket,
        Key="meta",
        Body=b"<p>hi</p>",
        Metadata={"color": "blue", "Mixed-Case": "Value With Spaces", "empty": ""},
        ContentType="text/html; charset=utf-8",
        ContentEncoding="identity",
        ContentDisposition='attachment; filename="a b.html"',
        ContentLanguage="de-DE",
        CacheControl="max-age=3600, public",
        Expires=expires,
    )
    for response in (s3.head_object(Bucket=bucket, Key="meta"), s3.get_object(Bucket=bucket, Key="meta")):
        assert response["Metadata"] == {"color": "blue", "mixed-case": "Value With Spaces", "empty": ""}
        assert response["ContentType"] == "text/html; charset=utf-8"
        assert response["ContentEncoding"] == "identity"
        assert response["ContentDisposition"] == 'attachment; filename="a b.html"'
        assert response["ContentLanguage"] == "de-DE"
        assert response["CacheControl"] == "max-age=3600, public"
        assert response["ResponseMetadata"]["HTTPHeaders"]["expires"] == "Wed, 02 Jan 2030 03:04:05 GMT"


def test_metadata_too_large(s3, bucket, expect_error) -> None:
    with expect_error("MetadataTooLarge", 400):
        s3.put_object(Bucket=bucket, Key="big-meta", Body=b"x", Metadata={"k": "v" * 2100})
    with expect_error("NoSuchKey", 404):
        s3.get_object(Bucket=bucket, Key="big-meta")
    # Just under the limit is fine.
    s3.put_object(Bucket=bucket, Key="ok-meta", Body=b"x", Metadata={"k": "v" * 1900})
    assert s3.head_object(Bucket=bucket, Key="ok-meta")["Metadata"] == {"k": "v" * 1900}


@pytest.mark.parametrize(
    ("storage_class", "tier"),
    [
        ("STANDARD", "hot"),
        ("STANDARD_IA", "warm"),
        ("GLACIER_IR", "warm"),
        ("EXPRESS_ONEZONE", "gpu-direct"),
        ("REDUCED_REDUNDANCY", "hot"),
        ("INTELLIGENT_TIERING", "hot"),
    ],
)
def test_storage_class_accepted_and_reported(s3, bucket, storage_class: str, tier: str) -> None:
    body = b"class " + storage_class.encode()
    s3.put_object(Bucket=bucket, Key="sc", Body=body, StorageClass=storage_class)
    head = s3.head_object(Bucket=bucket, Key="sc")
    if storage_class == "STANDARD":
        assert "StorageClass" not in head  # S3 does not report STANDARD on HEAD
    else:
        assert head["StorageClass"] == storage_class
    assert head["ResponseMetadata"]["HTTPHeaders"]["x-tierstore-tier"] == tier
    got = s3.get_object(Bucket=bucket, Key="sc")
    assert got["Body"].read() == body
    assert got["ResponseMetadata"]["HTTPHeaders"]["x-tierstore-tier"] == tier
    listed = s3.list_objects_v2(Bucket=bucket)["Contents"]
    assert [o["StorageClass"] for o in listed] == [storage_class]


def test_invalid_storage_class(s3, bucket, expect_error) -> None:
    with expect_error("InvalidStorageClass", 400):
        s3.put_object(Bucket=bucket, Key="k", Body=b"x", StorageClass="SUPER_FAST")


def test_version_id_null_reads_the_object(s3, bucket, expect_error) -> None:
    s3.put_object(Bucket=bucket, Key="v", Body=b"versioned?")
    head = s3.head_object(Bucket=bucket, Key="v", VersionId="null")
    assert head["ContentLength"] == 10
    got = s3.get_object(Bucket=bucket, Key="v", VersionId="null")
    assert got["Body"].read() == b"versioned?"
    assert got["VersionId"] == "null"
    with expect_error("NoSuchVersion", 404):
        s3.get_object(Bucket=bucket, Key="v", VersionId="3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY")


def test_get_missing_key(s3, bucket, expect_error) -> None:
    with expect_error("NoSuchKey", 404):
        s3.get_object(Bucket=bucket, Key="nope")
    with pytest.raises(ClientError) as caught:
        s3.head_object(Bucket=bucket, Key="nope")
    assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404


def test_delete_object_and_missing_key_is_204(s3, bucket, expect_error) -> None:
    s3.put_object(Bucket=bucket, Key="d", Body=b"x")
    assert s3.delete_object(Bucket=bucket, Key="d")["ResponseMetadata"]["HTTPStatusCode"] == 204
    with expect_error("NoSuchKey", 404):
        s3.get_object(Bucket=bucket, Key="d")
    assert s3.delete_object(Bucket=bucket, Key="d")["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert s3.delete_object(Bucket=bucket, Key="never")["ResponseMetadata"]["HTTPStatusCode"] == 204


def test_concurrent_puts_to_one_key_never_tear(server, s3, bucket) -> None:
    bodies = [bytes([i]) * (256 * 1024 + i) for i in range(8)]
    errors: list[BaseException] = []

    def writer(body: bytes) -> None:
        try:
            client = make_client(server.endpoint)
            for _ in range(3):
                client.put_object(Bucket=bucket, Key="contended", Body=body)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    got = s3.get_object(Bucket=bucket, Key="contended")
    data = got["Body"].read()
    assert data in bodies
    assert got["ETag"] == f'"{md5_hex(data)}"'


# --- DeleteObjects -----------------------------------------------------------------------------


def test_delete_objects_verbose_with_missing_keys(s3, bucket) -> None:
    for key in ("a", "b", "c"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    result = s3.delete_objects(
        Bucket=bucket, Delete={"Objects": [{"Key": "a"}, {"Key": "missing"}, {"Key": "c"}]}
    )
    assert sorted(d["Key"] for d in result["Deleted"]) == ["a", "c", "missing"]
    assert result.get("Errors", []) == []
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]] == ["b"]


def test_delete_objects_quiet(s3, bucket) -> None:
    for key in ("a", "b"):
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    result = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "a"}, {"Key": "b"}], "Quiet": True})
    assert "Deleted" not in result
    assert result.get("Errors", []) == []
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


def test_delete_objects_special_keys(s3, bucket) -> None:
    keys = ["sp ace", "amp&er<sand>", "uni-ü-😀", "quote\"'"]
    for key in keys:
        s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    result = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys]})
    assert sorted(d["Key"] for d in result["Deleted"]) == sorted(keys)
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


def test_delete_objects_more_than_1000_is_malformed(s3, bucket, expect_error) -> None:
    with expect_error("MalformedXML", 400):
        s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": f"k{i}"} for i in range(1001)]})


def test_delete_objects_exactly_1000(s3, bucket) -> None:
    result = s3.delete_objects(
        Bucket=bucket, Delete={"Objects": [{"Key": f"k{i}"} for i in range(1000)], "Quiet": True}
    )
    assert result.get("Errors", []) == []


def test_delete_objects_bad_content_md5(raw, bucket, error_code) -> None:
    body = b"<Delete><Object><Key>a</Key></Object></Delete>"
    wrong = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    response = raw("POST", f"/{bucket}", query="delete=", body=body, headers={"Content-MD5": wrong})
    assert response.status_code == 400
    assert error_code(response) == "BadDigest"


def test_get_object_attributes(s3, bucket) -> None:
    body = b"attributes"
    s3.put_object(
        Bucket=bucket, Key="attr", Body=body, StorageClass="STANDARD_IA", ChecksumAlgorithm="SHA256"
    )
    attrs = s3.get_object_attributes(
        Bucket=bucket, Key="attr", ObjectAttributes=["ETag", "ObjectSize", "StorageClass", "Checksum"]
    )
    assert attrs["ETag"] == md5_hex(body)  # without quotes, as AWS answers it
    assert attrs["ObjectSize"] == len(body)
    assert attrs["StorageClass"] == "STANDARD_IA"
    assert attrs["Checksum"]["ChecksumSHA256"] == base64.b64encode(hashlib.sha256(body).digest()).decode()
    assert attrs["LastModified"] == s3.head_object(Bucket=bucket, Key="attr")["LastModified"]
