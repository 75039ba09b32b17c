"""Many clients at once on one bucket or one key: every request gets a correct S3 answer (never a
500), and the state afterwards is one of the outcomes the requests could have had. On the
PostgreSQL catalog concurrent transactions conflict and are run again; a conflict that surfaces
as anything but a retry is a 500 these tests catch."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from botocore.exceptions import ClientError

_names = iter(range(1_000_000))


def _name(what: str) -> str:
    return f"conc-{what}-{os.getpid()}-{next(_names)}"


def _code(exc: ClientError) -> str:
    return str(exc.response["Error"]["Code"])


def test_concurrent_creates_of_one_bucket(s3: Any) -> None:
    name = _name("bucket")

    def create(_: int) -> str:
        try:
            s3.create_bucket(Bucket=name)
            return "created"
        except ClientError as exc:
            return _code(exc)

    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(create, range(12)))
    assert set(answers) <= {"created", "BucketAlreadyOwnedByYou"}, answers
    assert answers.count("created") >= 1
    s3.delete_bucket(Bucket=name)


def test_concurrent_completes_of_one_upload_and_uploads_of_one_key(s3: Any) -> None:
    bucket = _name("mpu")
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    uploads = []
    for n in range(6):
        upload = s3.create_multipart_upload(Bucket=bucket, Key="k")["UploadId"]
        etag = s3.upload_part(Bucket=bucket, Key="k", UploadId=upload, PartNumber=1, Body=b"%d" % n)["ETag"]
        uploads.append((upload, etag))

    def complete(item: tuple[str, str]) -> str:
        upload, etag = item
        try:
            done = s3.complete_multipart_upload(
                Bucket=bucket,
                Key="k",
                UploadId=upload,
                MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]},
            )
            return str(done["VersionId"])
        except ClientError as exc:
            return _code(exc)

    # Each upload completed twice at once (a client retrying), all six uploads at once.
    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(complete, uploads + uploads))
    assert not [a for a in answers if a in ("InternalError", "ServiceUnavailable")], answers
    versions = {v["VersionId"] for v in s3.list_object_versions(Bucket=bucket)["Versions"]}
    assert len(versions) == 6 and set(answers) <= versions | {"NoSuchUpload"}, answers
    for version in versions:
        s3.delete_object(Bucket=bucket, Key="k", VersionId=version)
    s3.delete_bucket(Bucket=bucket)


def test_concurrent_copies_tags_and_deletes_of_one_versioned_key(s3: Any) -> None:
    bucket = _name("mixed")
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.put_object(Bucket=bucket, Key="src", Body=b"source")
    s3.put_object(Bucket=bucket, Key="k", Body=b"first")

    def act(n: int) -> str:
        try:
            match n % 4:
                case 0:
                    s3.copy_object(Bucket=bucket, Key="k", CopySource={"Bucket": bucket, "Key": "src"})
                case 1:
                    s3.put_object_tagging(
                        Bucket=bucket, Key="k", Tagging={"TagSet": [{"Key": "n", "Value": str(n)}]}
                    )
                case 2:
                    s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "k"}]})
                case _:
                    s3.put_object(Bucket=bucket, Key="k", Body=b"%d" % n)
            return "ok"
        except ClientError as exc:
            return _code(exc)

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(act, range(64)))
    # A tag on a key whose current version is a delete marker: NoSuchKey / MethodNotAllowed.
    assert set(answers) <= {"ok", "NoSuchKey", "MethodNotAllowed"}, answers
    listed = s3.list_object_versions(Bucket=bucket, Prefix="k")
    entries = listed.get("Versions", []) + listed.get("DeleteMarkers", [])
    assert [e["IsLatest"] for e in entries].count(True) == 1
    for entry in entries + s3.list_object_versions(Bucket=bucket, Prefix="src")["Versions"]:
        s3.delete_object(Bucket=bucket, Key=entry["Key"], VersionId=entry["VersionId"])
    s3.delete_bucket(Bucket=bucket)
