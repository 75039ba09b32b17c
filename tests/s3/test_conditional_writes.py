"""Conditional writes and deletes, as S3 has them: If-None-Match: * and If-Match on PutObject,
CompleteMultipartUpload and CopyObject's destination (412, or 409 ConditionalRequestConflict when
a concurrent write wins the race), conditional DeleteObject / DeleteObjects; racing writers."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from tests.conftest import ACCESS_KEY, REGION, SECRET_KEY, ServerProcess, make_client
from tests.s3.test_multipart import upload_parts

MIB = 1024 * 1024
LOSING_CODES = {"PreconditionFailed", "ConditionalRequestConflict"}


def _code(exc: ClientError) -> tuple[str, int]:
    return str(exc.response["Error"]["Code"]), int(exc.response["ResponseMetadata"]["HTTPStatusCode"])


# --- PutObject ----------------------------------------------------------------------------------


def test_put_if_none_match_creates_only(s3, bucket, expect_error) -> None:
    s3.put_object(Bucket=bucket, Key="k", Body=b"first", IfNoneMatch="*")
    with expect_error("PreconditionFailed", 412):
        s3.put_object(Bucket=bucket, Key="k", Body=b"second", IfNoneMatch="*")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"first"


def test_put_if_match_compares_the_etag(s3, bucket, expect_error) -> None:
    etag = s3.put_object(Bucket=bucket, Key="k", Body=b"v1")["ETag"]
    with expect_error("PreconditionFailed", 412):
        s3.put_object(Bucket=bucket, Key="k", Body=b"v2", IfMatch='"0123456789abcdef0123456789abcdef"')
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v1"
    # Quoted (as S3 returns it) or not, the condition holds and the write lands.
    etag2 = s3.put_object(Bucket=bucket, Key="k", Body=b"v2", IfMatch=etag)["ETag"]
    s3.put_object(Bucket=bucket, Key="k", Body=b"v3", IfMatch=etag2.strip('"'))
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v3"
    with expect_error("NoSuchKey", 404):
        s3.put_object(Bucket=bucket, Key="absent", Body=b"v1", IfMatch=etag)


def test_put_if_none_match_other_than_star_is_not_implemented(s3, bucket, expect_error) -> None:
    etag = s3.put_object(Bucket=bucket, Key="k", Body=b"v1")["ETag"]
    for value in (etag, '"0123456789abcdef0123456789abcdef"'):
        with expect_error("NotImplemented", 501):
            s3.put_object(Bucket=bucket, Key="k", Body=b"v2", IfNoneMatch=value)
    with expect_error("NotImplemented", 501):
        s3.put_object(Bucket=bucket, Key="k", Body=b"v2", IfMatch=etag, IfNoneMatch="*")
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v1"


def _slow_put(
    endpoint: str, path: str, body: bytes, headers: dict[str, str], between: Callable[[], None], wait: float
):
    """PUT `body` in two halves, calling `between()` `wait` seconds after the headers and the
    first half went out: the server has checked the conditions, and the commit is yet to come."""
    url = endpoint + path
    request = AWSRequest(
        method="PUT",
        url=url,
        data=body,
        headers={**headers, "Content-Length": str(len(body))},
    )
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", REGION).add_auth(request)
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=60)
    try:
        conn.putrequest("PUT", parts.path, skip_accept_encoding=True)
        for name, value in request.headers.items():
            conn.putheader(name, value)
        conn.endheaders()
        half = len(body) // 2
        conn.send(body[:half])
        # Ordering, not timing: the server checks the condition as soon as the headers are in,
        # long before this; the body's second half holds the commit back until `between` is done.
        time.sleep(wait)
        between()
        conn.send(body[half:])
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@pytest.mark.parametrize("condition", ["If-None-Match", "If-Match"])
def test_a_concurrent_write_between_check_and_commit_is_a_409(
    server: ServerProcess, s3, bucket, condition: str
) -> None:
    body = b"x" * (2 * MIB)
    # On a machine so loaded that the server checks the condition only after the competing write
    # (a 412: right too, but not the case under test), again with a longer wait.
    for wait in (1.0, 3.0, 8.0):
        s3.delete_object(Bucket=bucket, Key="k")
        headers = {"If-None-Match": "*"}
        if condition == "If-Match":
            headers = {"If-Match": s3.put_object(Bucket=bucket, Key="k", Body=b"old")["ETag"]}
        status, answer = _slow_put(
            server.endpoint,
            f"/{bucket}/k",
            body,
            headers,
            lambda: s3.put_object(Bucket=bucket, Key="k", Body=b"winner"),
            wait,
        )
        assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"winner"
        assert status in (409, 412), answer
        if status == 409:
            break
    assert status == 409, answer
    assert b"<Code>ConditionalRequestConflict</Code>" in answer


# --- CompleteMultipartUpload --------------------------------------------------------------------


def _upload(s3, bucket: str, key: str, data: bytes) -> tuple[str, list[dict[str, Any]]]:
    upload = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    return upload, upload_parts(s3, bucket, key, upload, [data])


def test_complete_if_match(s3, bucket, expect_error) -> None:
    etag = s3.put_object(Bucket=bucket, Key="k", Body=b"old")["ETag"]
    upload, parts = _upload(s3, bucket, "k", b"new")
    with expect_error("PreconditionFailed", 412):
        s3.complete_multipart_upload(
            Bucket=bucket,
            Key="k",
            UploadId=upload,
            MultipartUpload={"Parts": parts},
            IfMatch='"0123456789abcdef0123456789abcdef"',
        )
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"old"
    # The upload survives a failed condition: completed again with the right ETag, it lands.
    s3.complete_multipart_upload(
        Bucket=bucket, Key="k", UploadId=upload, MultipartUpload={"Parts": parts}, IfMatch=etag
    )
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"new"
    upload, parts = _upload(s3, bucket, "absent", b"new")
    with expect_error("NoSuchKey", 404):
        s3.complete_multipart_upload(
            Bucket=bucket, Key="absent", UploadId=upload, MultipartUpload={"Parts": parts}, IfMatch=etag
        )
    s3.abort_multipart_upload(Bucket=bucket, Key="absent", UploadId=upload)


def test_complete_if_none_match(s3, bucket, expect_error) -> None:
    upload, parts = _upload(s3, bucket, "k", b"new")
    s3.complete_multipart_upload(
        Bucket=bucket, Key="k", UploadId=upload, MultipartUpload={"Parts": parts}, IfNoneMatch="*"
    )
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"new"
    upload, parts = _upload(s3, bucket, "k", b"newer")
    with expect_error("PreconditionFailed", 412):
        s3.complete_multipart_upload(
            Bucket=bucket, Key="k", UploadId=upload, MultipartUpload={"Parts": parts}, IfNoneMatch="*"
        )
    with expect_error("NotImplemented", 501):
        s3.complete_multipart_upload(
            Bucket=bucket, Key="k", UploadId=upload, MultipartUpload={"Parts": parts}, IfNoneMatch='"abc"'
        )
    s3.abort_multipart_upload(Bucket=bucket, Key="k", UploadId=upload)
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"new"


# --- CopyObject's destination -------------------------------------------------------------------


def test_copy_destination_conditions(s3, bucket, expect_error) -> None:
    s3.put_object(Bucket=bucket, Key="src", Body=b"source")
    target = s3.put_object(Bucket=bucket, Key="dst", Body=b"target")["ETag"]
    source = {"Bucket": bucket, "Key": "src"}
    with expect_error("PreconditionFailed", 412):
        s3.copy_object(Bucket=bucket, Key="dst", CopySource=source, IfNoneMatch="*")
    with expect_error("PreconditionFailed", 412):
        s3.copy_object(
            Bucket=bucket, Key="dst", CopySource=source, IfMatch='"0123456789abcdef0123456789abcdef"'
        )
    with expect_error("NoSuchKey", 404):
        s3.copy_object(Bucket=bucket, Key="absent", CopySource=source, IfMatch=target)
    assert s3.get_object(Bucket=bucket, Key="dst")["Body"].read() == b"target"
    s3.copy_object(Bucket=bucket, Key="dst", CopySource=source, IfMatch=target)
    assert s3.get_object(Bucket=bucket, Key="dst")["Body"].read() == b"source"
    s3.copy_object(Bucket=bucket, Key="new", CopySource=source, IfNoneMatch="*")
    assert s3.get_object(Bucket=bucket, Key="new")["Body"].read() == b"source"
    # The source's own conditions are still x-amz-copy-source-if-*, and apply as before.
    with expect_error("PreconditionFailed", 412):
        s3.copy_object(Bucket=bucket, Key="new2", CopySource=source, CopySourceIfMatch=target)


# --- DeleteObject / DeleteObjects ---------------------------------------------------------------


def test_conditional_delete_object(s3, bucket, expect_error) -> None:
    etag = s3.put_object(Bucket=bucket, Key="k", Body=b"12345")["ETag"]
    head = s3.head_object(Bucket=bucket, Key="k")
    with expect_error("PreconditionFailed", 412):
        s3.delete_object(Bucket=bucket, Key="k", IfMatch='"0123456789abcdef0123456789abcdef"')
    with expect_error("PreconditionFailed", 412):
        s3.delete_object(Bucket=bucket, Key="k", IfMatchSize=4)
    with expect_error("PreconditionFailed", 412):
        s3.delete_object(
            Bucket=bucket, Key="k", IfMatchLastModifiedTime=head["LastModified"] - timedelta(seconds=5)
        )
    with expect_error("PreconditionFailed", 412):  # all given: each one must hold
        s3.delete_object(Bucket=bucket, Key="k", IfMatch=etag, IfMatchSize=6)
    assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"12345"
    s3.delete_object(
        Bucket=bucket, Key="k", IfMatch=etag, IfMatchSize=5, IfMatchLastModifiedTime=head["LastModified"]
    )
    with expect_error("NoSuchKey", 404):
        s3.get_object(Bucket=bucket, Key="k")
    # On a missing key: If-Match is NoSuchKey; a size or time condition holds (204), as in S3.
    with expect_error("NoSuchKey", 404):
        s3.delete_object(Bucket=bucket, Key="k", IfMatch=etag)
    with expect_error("NoSuchKey", 404):
        s3.delete_object(Bucket=bucket, Key="k", IfMatch="*")
    assert (
        s3.delete_object(Bucket=bucket, Key="k", IfMatchSize=5)["ResponseMetadata"]["HTTPStatusCode"] == 204
    )
    s3.put_object(Bucket=bucket, Key="any", Body=b"x")
    s3.delete_object(Bucket=bucket, Key="any", IfMatch="*")
    with expect_error("NoSuchKey", 404):
        s3.get_object(Bucket=bucket, Key="any")


def test_conditional_delete_objects(s3, bucket) -> None:
    etags = {k: s3.put_object(Bucket=bucket, Key=k, Body=k.encode() * 3)["ETag"] for k in "abcdef"}
    mtime = s3.head_object(Bucket=bucket, Key="e")["LastModified"]
    answer = s3.delete_objects(
        Bucket=bucket,
        Delete={
            "Objects": [
                {"Key": "a", "ETag": etags["a"]},
                {"Key": "b", "ETag": etags["a"]},
                {"Key": "c", "Size": 3},
                {"Key": "d", "Size": 4},
                {"Key": "e", "LastModifiedTime": mtime},
                {"Key": "f", "LastModifiedTime": mtime - timedelta(days=1)},
                {"Key": "absent", "ETag": etags["a"]},
                {"Key": "absent2", "Size": 1},
            ]
        },
    )
    assert sorted(d["Key"] for d in answer["Deleted"]) == ["a", "absent2", "c", "e"]
    errors = {e["Key"]: e["Code"] for e in answer["Errors"]}
    assert errors == {
        "b": "PreconditionFailed",
        "d": "PreconditionFailed",
        "f": "PreconditionFailed",
        "absent": "NoSuchKey",
    }
    left = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert left == ["b", "d", "f"]


# --- racing writers -----------------------------------------------------------------------------


def race(endpoints: list[str], writers: int, write: Callable[[Any, int], None]) -> dict[int, str]:
    """`writers` threads (clients spread over `endpoints`) call `write(client, i)` at once;
    {i: "ok" or the S3 error code}."""
    clients = [make_client(endpoints[i % len(endpoints)]) for i in range(writers)]
    barrier = threading.Barrier(writers)
    outcome: dict[int, str] = {}

    def run(i: int) -> None:
        barrier.wait(timeout=60)
        try:
            write(clients[i], i)
            outcome[i] = "ok"
        except ClientError as exc:
            outcome[i] = _code(exc)[0]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(outcome) == writers
    return outcome


def assert_one_winner(
    s3, bucket: str, key: str, outcome: dict[int, str], body: Callable[[int], bytes]
) -> None:
    winners = [i for i, result in outcome.items() if result == "ok"]
    assert len(winners) == 1, outcome
    assert set(outcome.values()) - {"ok"} <= LOSING_CODES, outcome
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body(winners[0])


def race_rounds(endpoints: list[str], s3, bucket: str, *, rounds: int = 5, writers: int = 8) -> None:
    """Every round, If-None-Match: * on a new key, then If-Match on its ETag: one winner each."""

    def body(i: int) -> bytes:
        return f"writer {i} ".encode() * 100

    for n in range(rounds):
        key = f"race-{n}"

        def create(client: Any, i: int, key: str = key) -> None:
            client.put_object(Bucket=bucket, Key=key, Body=body(i), IfNoneMatch="*")

        assert_one_winner(s3, bucket, key, race(endpoints, writers, create), body)
        etag = s3.head_object(Bucket=bucket, Key=key)["ETag"]

        def update(client: Any, i: int, key: str = key, etag: str = etag) -> None:
            client.put_object(Bucket=bucket, Key=key, Body=body(100 + i), IfMatch=etag)

        assert_one_winner(s3, bucket, key, race(endpoints, writers, update), lambda i: body(100 + i))


def test_racing_conditional_writers_one_wins_every_round(server: ServerProcess, s3, bucket) -> None:
    race_rounds([server.endpoint], s3, bucket)


def test_racing_conditional_completes_one_wins(s3, bucket) -> None:
    uploads = [_upload(s3, bucket, "mp", f"part of {i}".encode()) for i in range(6)]

    def complete(client: Any, i: int) -> None:
        upload, parts = uploads[i]
        client.complete_multipart_upload(
            Bucket=bucket, Key="mp", UploadId=upload, MultipartUpload={"Parts": parts}, IfNoneMatch="*"
        )

    outcome = race([s3.meta.endpoint_url], len(uploads), complete)
    assert_one_winner(s3, bucket, "mp", outcome, lambda i: f"part of {i}".encode())
    for i, (upload, _) in enumerate(uploads):
        if outcome[i] != "ok":
            s3.abort_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload)


def test_racing_conditional_deletes_and_writes(s3, bucket) -> None:
    """A delete conditional on an ETag never removes a newer object written meanwhile."""
    for n in range(5):
        etag = s3.put_object(Bucket=bucket, Key="k", Body=b"old")["ETag"]

        def act(client: Any, i: int, etag: str = etag, n: int = n) -> None:
            if i == 0:
                client.delete_object(Bucket=bucket, Key="k", IfMatch=etag)
            else:
                client.put_object(Bucket=bucket, Key="k", Body=f"new {n}".encode(), IfMatch=etag)

        outcome = race([s3.meta.endpoint_url], 2, act)
        assert list(outcome.values()).count("ok") == 1, outcome
        if outcome[0] == "ok":
            with pytest.raises(ClientError):
                s3.head_object(Bucket=bucket, Key="k")
        else:
            assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == f"new {n}".encode()
