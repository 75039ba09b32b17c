"""Server-side encryption against a real server with boto3: SSE-S3, SSE-KMS, SSE-C, bucket
default encryption; ranged reads across the 64 KiB sealed chunks; S3's errors for bad headers."""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterator

import pytest
from botocore.exceptions import ClientError

from tests.conftest import ServerProcess, free_port, make_client

CHUNK = 64 * 1024
KMS_KEY = "test-key-1"


@pytest.fixture(scope="module")
def sse_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(
        tmp_path_factory.mktemp("sse") / "data",
        free_port(),
        env={
            "TIERSTORE_ENCRYPTION_ALLOW_SSE_C_OVER_HTTP": "true",
            "TIERSTORE_ENCRYPTION_KMS_KEY_IDS": KMS_KEY,
        },
    ).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def s3(sse_server: ServerProcess):
    return make_client(sse_server.endpoint)


_names = iter(range(1_000_000))


@pytest.fixture
def bucket(s3) -> str:
    name = f"sse-{os.getpid()}-{next(_names)}"
    s3.create_bucket(Bucket=name)
    return name


def code_of(exc: pytest.ExceptionInfo[ClientError]) -> tuple[int, str]:
    response = exc.value.response
    return response["ResponseMetadata"]["HTTPStatusCode"], response["Error"]["Code"]


def customer(key: bytes) -> dict[str, str]:
    return {
        "SSECustomerAlgorithm": "AES256",
        "SSECustomerKey": base64.b64encode(key).decode(),
        "SSECustomerKeyMD5": base64.b64encode(hashlib.md5(key).digest()).decode(),
    }


def ranges_across_chunks(size: int) -> list[tuple[int, int]]:
    """Inclusive byte ranges that start, end and straddle sealed-chunk boundaries."""
    picks = [
        (0, 0),
        (0, CHUNK - 1),
        (CHUNK - 1, CHUNK),
        (CHUNK, CHUNK),
        (CHUNK - 5, 2 * CHUNK + 5),
        (2 * CHUNK, size - 1),
        (size - 1, size - 1),
        (1, size - 2),
        (3 * CHUNK + 7, 5 * CHUNK),
    ]
    return [(a, min(b, size - 1)) for a, b in picks if a < size]


def test_sse_s3_round_trip_with_ranged_reads(s3, bucket: str) -> None:
    body = os.urandom(5 * CHUNK + 123)
    put = s3.put_object(Bucket=bucket, Key="big", Body=body, ServerSideEncryption="AES256")
    assert put["ServerSideEncryption"] == "AES256"
    assert put["ETag"] == f'"{hashlib.md5(body).hexdigest()}"', "an SSE-S3 ETag is the body's MD5"
    got = s3.get_object(Bucket=bucket, Key="big")
    assert got["ServerSideEncryption"] == "AES256"
    assert got["ContentLength"] == len(body)
    assert got["Body"].read() == body
    head = s3.head_object(Bucket=bucket, Key="big")
    assert head["ServerSideEncryption"] == "AES256" and head["ContentLength"] == len(body)
    for a, b in ranges_across_chunks(len(body)):
        part = s3.get_object(Bucket=bucket, Key="big", Range=f"bytes={a}-{b}")
        assert part["Body"].read() == body[a : b + 1], (a, b)
        assert part["ContentRange"] == f"bytes {a}-{b}/{len(body)}"
    listed = s3.list_objects_v2(Bucket=bucket)["Contents"]
    assert listed[0]["Size"] == len(body)


@pytest.mark.parametrize("size", [0, 1, CHUNK, CHUNK + 1, 3 * CHUNK])
def test_sse_s3_sizes_at_chunk_edges(s3, bucket: str, size: int) -> None:
    body = os.urandom(size)
    s3.put_object(Bucket=bucket, Key="k", Body=body, ServerSideEncryption="AES256")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == body
    assert s3.head_object(Bucket=bucket, Key="k")["ContentLength"] == size


def test_large_sse_s3_object_streams(s3, bucket: str) -> None:
    body = os.urandom(9 * 1024 * 1024 + 17)  # several 1 MiB batches and erasure stripes
    s3.put_object(Bucket=bucket, Key="large", Body=body, ServerSideEncryption="AES256")
    assert s3.get_object(Bucket=bucket, Key="large")["Body"].read() == body
    a, b = 4 * 1024 * 1024 - 3, 6 * 1024 * 1024 + 3
    assert s3.get_object(Bucket=bucket, Key="large", Range=f"bytes={a}-{b}")["Body"].read() == body[a : b + 1]


def test_bad_encryption_headers_are_s3_400s(s3, bucket: str) -> None:
    with pytest.raises(ClientError) as err:
        s3.put_object(Bucket=bucket, Key="k", Body=b"x", ServerSideEncryption="AES128")
    assert code_of(err) == (400, "InvalidArgument")
    with pytest.raises(ClientError) as err:
        s3.put_object(Bucket=bucket, Key="k", Body=b"x", ServerSideEncryption="AES256", SSEKMSKeyId=KMS_KEY)
    assert code_of(err) == (400, "InvalidArgument")
    with pytest.raises(ClientError) as err:
        s3.put_object(
            Bucket=bucket, Key="k", Body=b"x", ServerSideEncryption="AES256", **customer(os.urandom(32))
        )
    assert code_of(err) == (400, "InvalidArgument")


def test_sse_c_round_trip_and_key_checks(s3, bucket: str) -> None:
    key, other = os.urandom(32), os.urandom(32)
    body = os.urandom(3 * CHUNK + 5)
    put = s3.put_object(Bucket=bucket, Key="c", Body=body, **customer(key))
    assert put["SSECustomerAlgorithm"] == "AES256"
    assert put["SSECustomerKeyMD5"] == customer(key)["SSECustomerKeyMD5"]
    assert "ServerSideEncryption" not in put
    assert put["ETag"] != f'"{hashlib.md5(body).hexdigest()}"', "an SSE-C ETag is not the body's MD5"
    got = s3.get_object(Bucket=bucket, Key="c", **customer(key))
    assert got["Body"].read() == body and got["SSECustomerAlgorithm"] == "AES256"
    assert got["ETag"] == put["ETag"]
    a, b = CHUNK - 2, 2 * CHUNK + 1
    ranged = s3.get_object(Bucket=bucket, Key="c", Range=f"bytes={a}-{b}", **customer(key))
    assert ranged["Body"].read() == body[a : b + 1]
    assert s3.head_object(Bucket=bucket, Key="c", **customer(key))["ContentLength"] == len(body)
    # Missing key: 400 InvalidRequest; another key: 403 AccessDenied (GET and HEAD alike).
    with pytest.raises(ClientError) as err:
        s3.get_object(Bucket=bucket, Key="c")
    assert code_of(err) == (400, "InvalidRequest")
    with pytest.raises(ClientError) as err:
        s3.get_object(Bucket=bucket, Key="c", **customer(other))
    assert code_of(err) == (403, "AccessDenied")
    with pytest.raises(ClientError) as err:
        s3.head_object(Bucket=bucket, Key="c", **customer(other))
    assert code_of(err)[0] == 403
    with pytest.raises(ClientError) as err:
        s3.head_object(Bucket=bucket, Key="c")
    assert code_of(err)[0] == 400
    # A key for an object that has none: 400.
    s3.put_object(Bucket=bucket, Key="plain", Body=b"plain")
    with pytest.raises(ClientError) as err:
        s3.get_object(Bucket=bucket, Key="plain", **customer(key))
    assert code_of(err) == (400, "InvalidRequest")


def test_sse_c_malformed_keys(s3, bucket: str) -> None:
    key = os.urandom(32)
    bad_md5 = {**customer(key), "SSECustomerKeyMD5": base64.b64encode(b"0" * 16).decode()}
    with pytest.raises(ClientError) as err:
        s3.put_object(Bucket=bucket, Key="k", Body=b"x", **bad_md5)
    assert code_of(err) == (400, "InvalidArgument")
    with pytest.raises(ClientError) as err:
        s3.put_object(Bucket=bucket, Key="k", Body=b"x", **customer(os.urandom(16)))
    assert code_of(err) == (400, "InvalidArgument")
    with pytest.raises(ClientError) as err:
        s3.put_object(
            Bucket=bucket, Key="k", Body=b"x", **{**customer(key), "SSECustomerAlgorithm": "AES128"}
        )
    assert code_of(err) == (400, "InvalidEncryptionAlgorithmError")


def test_sse_c_over_plain_http_is_refused_by_default(tmp_path) -> None:
    proc = ServerProcess(tmp_path / "data", free_port()).start()
    try:
        client = make_client(proc.endpoint)
        client.create_bucket(Bucket="nohttp")
        with pytest.raises(ClientError) as err:
            client.put_object(Bucket="nohttp", Key="k", Body=b"x", **customer(os.urandom(32)))
        assert code_of(err) == (400, "InvalidRequest")
        assert "secure connection" in err.value.response["Error"]["Message"]
    finally:
        proc.stop()


def test_sse_kms_round_trip_and_unknown_key(s3, bucket: str) -> None:
    body = os.urandom(2 * CHUNK + 9)
    put = s3.put_object(
        Bucket=bucket,
        Key="kms",
        Body=body,
        ServerSideEncryption="aws:kms",
        SSEKMSKeyId=KMS_KEY,
        BucketKeyEnabled=True,
    )
    assert put["ServerSideEncryption"] == "aws:kms" and put["SSEKMSKeyId"] == KMS_KEY
    assert put["BucketKeyEnabled"] is True
    assert put["ETag"] != f'"{hashlib.md5(body).hexdigest()}"'
    got = s3.get_object(Bucket=bucket, Key="kms")
    assert got["Body"].read() == body and got["SSEKMSKeyId"] == KMS_KEY
    default = s3.put_object(Bucket=bucket, Key="kms-default", Body=b"abc", ServerSideEncryption="aws:kms")
    assert default["SSEKMSKeyId"] == "aws/s3"
    with pytest.raises(ClientError) as err:
        s3.put_object(
            Bucket=bucket, Key="k", Body=b"x", ServerSideEncryption="aws:kms", SSEKMSKeyId="no-such-key"
        )
    assert code_of(err) == (400, "KMS.NotFoundException")


def test_bucket_default_encryption(s3, bucket: str) -> None:
    with pytest.raises(ClientError) as err:
        s3.get_bucket_encryption(Bucket=bucket)
    assert code_of(err) == (404, "ServerSideEncryptionConfigurationNotFoundError")
    s3.put_bucket_encryption(
        Bucket=bucket,
        ServerSideEncryptionConfiguration={
            "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
        },
    )
    rules = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"]
    assert rules[0]["ApplyServerSideEncryptionByDefault"] == {"SSEAlgorithm": "AES256"}
    put = s3.put_object(Bucket=bucket, Key="d", Body=b"default")
    assert put["ServerSideEncryption"] == "AES256"
    assert s3.head_object(Bucket=bucket, Key="d")["ServerSideEncryption"] == "AES256"
    # An explicit request wins over the default.
    key = os.urandom(32)
    assert "ServerSideEncryption" not in s3.put_object(Bucket=bucket, Key="c", Body=b"c", **customer(key))
    s3.put_bucket_encryption(
        Bucket=bucket,
        ServerSideEncryptionConfiguration={
            "Rules": [
                {
                    "ApplyServerSideEncryptionByDefault": {
                        "SSEAlgorithm": "aws:kms",
                        "KMSMasterKeyID": KMS_KEY,
                    },
                    "BucketKeyEnabled": True,
                }
            ]
        },
    )
    rule = s3.get_bucket_encryption(Bucket=bucket)["ServerSideEncryptionConfiguration"]["Rules"][0]
    assert (
        rule["ApplyServerSideEncryptionByDefault"]["KMSMasterKeyID"] == KMS_KEY and rule["BucketKeyEnabled"]
    )
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mp")
    assert upload["ServerSideEncryption"] == "aws:kms"
    s3.abort_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload["UploadId"])
    s3.delete_bucket_encryption(Bucket=bucket)
    with pytest.raises(ClientError) as err:
        s3.get_bucket_encryption(Bucket=bucket)
    assert code_of(err)[0] == 404
    assert "ServerSideEncryption" not in s3.put_object(Bucket=bucket, Key="after", Body=b"x")
    assert s3.get_object(Bucket=bucket, Key="d")["Body"].read() == b"default"


@pytest.mark.parametrize("mode", ["AES256", "SSE-C"])
def test_multipart_upload_encrypted(s3, bucket: str, mode: str) -> None:
    key = os.urandom(32)
    extra = customer(key) if mode == "SSE-C" else {"ServerSideEncryption": "AES256"}
    part_extra = customer(key) if mode == "SSE-C" else {}
    parts_data = [os.urandom(5 * 1024 * 1024 + 3), os.urandom(CHUNK + 1)]
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mp", **extra)
    uid = upload["UploadId"]
    if mode == "SSE-C":
        with pytest.raises(ClientError) as err:  # every part needs the key
            s3.upload_part(Bucket=bucket, Key="mp", UploadId=uid, PartNumber=1, Body=parts_data[0])
        assert code_of(err)[0] == 400
    etags = [
        s3.upload_part(Bucket=bucket, Key="mp", UploadId=uid, PartNumber=n + 1, Body=data, **part_extra)[
            "ETag"
        ]
        for n, data in enumerate(parts_data)
    ]
    done = s3.complete_multipart_upload(
        Bucket=bucket,
        Key="mp",
        UploadId=uid,
        MultipartUpload={"Parts": [{"PartNumber": n + 1, "ETag": e} for n, e in enumerate(etags)]},
    )
    assert done["ETag"].endswith('-2"')
    body = b"".join(parts_data)
    got = s3.get_object(Bucket=bucket, Key="mp", **part_extra)
    assert got["ContentLength"] == len(body) and got["Body"].read() == body
    edge = len(parts_data[0])
    ranged = s3.get_object(Bucket=bucket, Key="mp", Range=f"bytes={edge - 10}-{edge + 10}", **part_extra)
    assert ranged["Body"].read() == body[edge - 10 : edge + 11]
    second = s3.get_object(Bucket=bucket, Key="mp", PartNumber=2, **part_extra)
    assert second["Body"].read() == parts_data[1]


def test_copy_between_encryption_modes(s3, bucket: str) -> None:
    key, key2 = os.urandom(32), os.urandom(32)
    body = os.urandom(2 * CHUNK + 77)
    s3.put_object(Bucket=bucket, Key="plain", Body=body)
    # plain → SSE-S3 → SSE-C → SSE-C (another key) → KMS → plain
    s3.copy_object(
        Bucket=bucket, Key="s3", CopySource={"Bucket": bucket, "Key": "plain"}, ServerSideEncryption="AES256"
    )
    assert s3.head_object(Bucket=bucket, Key="s3")["ServerSideEncryption"] == "AES256"
    s3.copy_object(Bucket=bucket, Key="c", CopySource={"Bucket": bucket, "Key": "s3"}, **customer(key))
    with pytest.raises(ClientError) as err:  # the SSE-C source needs its key
        s3.copy_object(Bucket=bucket, Key="c2", CopySource={"Bucket": bucket, "Key": "c"}, **customer(key2))
    assert code_of(err) == (400, "InvalidRequest")
    source = {f"CopySource{k}": v for k, v in customer(key).items()}
    s3.copy_object(
        Bucket=bucket, Key="c2", CopySource={"Bucket": bucket, "Key": "c"}, **customer(key2), **source
    )
    assert s3.get_object(Bucket=bucket, Key="c2", **customer(key2))["Body"].read() == body
    source2 = {f"CopySource{k}": v for k, v in customer(key2).items()}
    s3.copy_object(
        Bucket=bucket,
        Key="kms",
        CopySource={"Bucket": bucket, "Key": "c2"},
        ServerSideEncryption="aws:kms",
        SSEKMSKeyId=KMS_KEY,
        **source2,
    )
    s3.copy_object(Bucket=bucket, Key="back", CopySource={"Bucket": bucket, "Key": "kms"})
    back = s3.get_object(Bucket=bucket, Key="back")
    assert "ServerSideEncryption" not in back and back["Body"].read() == body
    # Re-encrypting an object in place (S3 allows a self-copy that changes encryption).
    s3.copy_object(
        Bucket=bucket,
        Key="plain",
        CopySource={"Bucket": bucket, "Key": "plain"},
        ServerSideEncryption="AES256",
    )
    assert s3.head_object(Bucket=bucket, Key="plain")["ServerSideEncryption"] == "AES256"
    # A metadata-only self-copy keeps the object's encryption (and its data readable).
    s3.copy_object(
        Bucket=bucket,
        Key="plain",
        CopySource={"Bucket": bucket, "Key": "plain"},
        MetadataDirective="REPLACE",
        Metadata={"a": "b"},
    )
    assert s3.get_object(Bucket=bucket, Key="plain")["Body"].read() == body
    # UploadPartCopy from an SSE-C source into an SSE-S3 upload.
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mpc", ServerSideEncryption="AES256")
    part = s3.upload_part_copy(
        Bucket=bucket,
        Key="mpc",
        UploadId=upload["UploadId"],
        PartNumber=1,
        CopySource={"Bucket": bucket, "Key": "c2"},
        CopySourceRange="bytes=100-70000",
        **source2,
    )
    s3.complete_multipart_upload(
        Bucket=bucket,
        Key="mpc",
        UploadId=upload["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["CopyPartResult"]["ETag"]}]},
    )
    assert s3.get_object(Bucket=bucket, Key="mpc")["Body"].read() == body[100:70001]


def test_master_key_rotation_keeps_objects_readable(s3, bucket: str, sse_server: ServerProcess) -> None:
    from tests.support import admin

    bodies = {f"k{i}": os.urandom(1000 + i * CHUNK) for i in range(3)}
    for name, body in bodies.items():
        s3.put_object(Bucket=bucket, Key=name, Body=body, ServerSideEncryption="AES256")
    before = admin(sse_server.endpoint, "encryption", "show")["current_key_id"]
    upload = s3.create_multipart_upload(Bucket=bucket, Key="open", ServerSideEncryption="AES256")
    rotated = admin(sse_server.endpoint, "encryption", "rotate")
    assert rotated["current_key_id"] != before and rotated["rewrapped"] >= len(bodies) + 1
    for name, body in bodies.items():
        assert s3.get_object(Bucket=bucket, Key=name)["Body"].read() == body
    part = s3.upload_part(Bucket=bucket, Key="open", UploadId=upload["UploadId"], PartNumber=1, Body=b"part")
    s3.complete_multipart_upload(
        Bucket=bucket,
        Key="open",
        UploadId=upload["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
    )
    assert s3.get_object(Bucket=bucket, Key="open")["Body"].read() == b"part"
    # Nothing left under the old key: a second rotation re-wraps only what the first one made current.
    again = admin(sse_server.endpoint, "encryption", "rotate")
    assert again["rewrapped"] >= len(bodies) + 1
    keyring = sse_server.data_dir / "encryption" / "master-keys"
    assert {p.stem for p in keyring.glob("*.key")} >= {
        before,
        rotated["current_key_id"],
        again["current_key_id"],
    }
    assert all((p.stat().st_mode & 0o777) == 0o600 for p in keyring.glob("*.key"))
    log = sse_server.log()
    for p in keyring.glob("*.key"):
        assert p.read_text().strip() not in log, "a master key never reaches the log"


def test_aws_cli_sse_s3_and_sse_c(sse_server: ServerProcess, s3, bucket: str, tmp_path) -> None:
    import subprocess
    import sys
    from pathlib import Path

    from tests.conftest import ACCESS_KEY, REGION, SECRET_KEY

    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": str(tmp_path / "config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "credentials"),
        "HOME": str(tmp_path),
    }
    env.pop("AWS_PROFILE", None)

    def aws(*args: str) -> None:
        done = subprocess.run(
            [str(Path(sys.executable).with_name("aws")), "--endpoint-url", sse_server.endpoint, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert done.returncode == 0, done.stderr

    source = tmp_path / "source.bin"
    body = os.urandom(9 * 1024 * 1024 + 5)  # the cli uploads it in parts
    source.write_bytes(body)
    key_file = tmp_path / "key.bin"
    key = os.urandom(32)
    key_file.write_bytes(key)
    aws("s3", "cp", str(source), f"s3://{bucket}/s3.bin", "--sse", "AES256")
    assert s3.head_object(Bucket=bucket, Key="s3.bin")["ServerSideEncryption"] == "AES256"
    aws("s3", "cp", f"s3://{bucket}/s3.bin", str(tmp_path / "s3.out"))
    assert (tmp_path / "s3.out").read_bytes() == body
    aws(
        "s3",
        "cp",
        str(source),
        f"s3://{bucket}/c.bin",
        "--sse-c",
        "AES256",
        "--sse-c-key",
        f"fileb://{key_file}",
    )
    assert s3.get_object(Bucket=bucket, Key="c.bin", **customer(key))["Body"].read() == body
    aws(
        "s3",
        "cp",
        f"s3://{bucket}/c.bin",
        str(tmp_path / "c.out"),
        "--sse-c",
        "AES256",
        "--sse-c-key",
        f"fileb://{key_file}",
    )
    assert (tmp_path / "c.out").read_bytes() == body


def test_bucket_encryption_and_read_header_errors(s3, bucket: str, sse_server: ServerProcess) -> None:
    import requests
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    from tests.conftest import ACCESS_KEY, SECRET_KEY

    with pytest.raises(ClientError) as err:
        s3.put_bucket_encryption(
            Bucket=bucket,
            ServerSideEncryptionConfiguration={
                "Rules": [
                    {
                        "ApplyServerSideEncryptionByDefault": {
                            "SSEAlgorithm": "aws:kms",
                            "KMSMasterKeyID": "missing",
                        }
                    }
                ]
            },
        )
    assert code_of(err) == (400, "KMS.NotFoundException")
    with pytest.raises(ClientError) as err:
        s3.put_bucket_encryption(
            Bucket=bucket,
            ServerSideEncryptionConfiguration={
                "Rules": [
                    {
                        "ApplyServerSideEncryptionByDefault": {
                            "SSEAlgorithm": "AES256",
                            "KMSMasterKeyID": KMS_KEY,
                        }
                    }
                ]
            },
        )
    assert code_of(err) == (400, "InvalidArgument")

    def signed(method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None):
        url = f"{sse_server.endpoint}{path}"
        request = AWSRequest(method=method, url=url, data=body, headers=headers or {})
        S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1").add_auth(request)
        return requests.request(method, url, data=body, headers=dict(request.headers.items()), timeout=30)

    bad = (
        b"<ServerSideEncryptionConfiguration><Rule><ApplyServerSideEncryptionByDefault><SSEAlgorithm>DES"
        b"</SSEAlgorithm></ApplyServerSideEncryptionByDefault></Rule></ServerSideEncryptionConfiguration>"
    )
    answer = signed("PUT", f"/{bucket}?encryption", bad)
    assert answer.status_code == 400 and b"<Code>MalformedXML</Code>" in answer.content
    s3.put_object(Bucket=bucket, Key="k", Body=b"x", ServerSideEncryption="AES256")
    answer = signed("GET", f"/{bucket}/k", headers={"x-amz-server-side-encryption": "AES256"})
    assert answer.status_code == 400 and b"<Code>InvalidArgument</Code>" in answer.content
