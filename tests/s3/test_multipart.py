"""Multipart uploads: create, parts, complete (and its errors), abort, list parts/uploads, transfers."""

from __future__ import annotations

import hashlib
import os

import pytest
from boto3.s3.transfer import TransferConfig

MIB = 1024 * 1024


def multipart_etag(parts: list[bytes]) -> str:
    digest = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest()
    return f'"{digest}-{len(parts)}"'


def upload_parts(s3, bucket: str, key: str, upload: str, parts: list[bytes]) -> list[dict[str, object]]:
    return [
        {
            "PartNumber": n,
            "ETag": s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=n, Body=body)["ETag"],
        }
        for n, body in enumerate(parts, start=1)
    ]


def test_multipart_round_trip(s3, bucket) -> None:
    parts = [os.urandom(5 * MIB), os.urandom(5 * MIB), b"the end"]
    created = s3.create_multipart_upload(
        Bucket=bucket,
        Key="mp",
        ContentType="application/x-tar",
        Metadata={"origin": "test"},
        StorageClass="STANDARD_IA",
    )
    assert (created["Bucket"], created["Key"]) == (bucket, "mp")
    upload = created["UploadId"]
    done = upload_parts(s3, bucket, "mp", upload, parts)
    assert [d["ETag"] for d in done] == [f'"{hashlib.md5(p).hexdigest()}"' for p in parts]
    # Not visible until completed.
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    result = s3.complete_multipart_upload(
        Bucket=bucket, Key="mp", UploadId=upload, MultipartUpload={"Parts": done}
    )
    assert result["ETag"] == multipart_etag(parts)
    assert (result["Bucket"], result["Key"]) == (bucket, "mp")
    got = s3.get_object(Bucket=bucket, Key="mp")
    assert got["Body"].read() == b"".join(parts)
    assert got["ETag"] == multipart_etag(parts)
    assert got["ContentType"] == "application/x-tar"
    assert got["Metadata"] == {"origin": "test"}
    assert got["StorageClass"] == "STANDARD_IA"
    assert got["ResponseMetadata"]["HTTPHeaders"]["x-tierstore-tier"] == "warm"
    ranged = s3.get_object(Bucket=bucket, Key="mp", Range=f"bytes={5 * MIB - 3}-{5 * MIB + 2}")
    assert ranged["Body"].read() == b"".join(parts)[5 * MIB - 3 : 5 * MIB + 3]
    # The upload is gone once completed.
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_single_part_upload(s3, bucket) -> None:
    upload = s3.create_multipart_upload(Bucket=bucket, Key="one")["UploadId"]
    done = upload_parts(s3, bucket, "one", upload, [b"only part, any size"])
    result = s3.complete_multipart_upload(
        Bucket=bucket, Key="one", UploadId=upload, MultipartUpload={"Parts": done}
    )
    assert result["ETag"] == multipart_etag([b"only part, any size"])
    assert s3.get_object(Bucket=bucket, Key="one")["Body"].read() == b"only part, any size"


def test_complete_with_subset_of_parts(s3, bucket) -> None:
    parts = [os.urandom(5 * MIB), b"second", b"third"]
    upload = s3.create_multipart_upload(Bucket=bucket, Key="sub")["UploadId"]
    done = upload_parts(s3, bucket, "sub", upload, parts)
    s3.complete_multipart_upload(
        Bucket=bucket, Key="sub", UploadId=upload, MultipartUpload={"Parts": [done[0], done[2]]}
    )
    got = s3.get_object(Bucket=bucket, Key="sub")
    assert got["Body"].read() == parts[0] + parts[2]
    assert got["ETag"] == multipart_etag([parts[0], parts[2]])


def test_reuploading_a_part_replaces_it(s3, bucket) -> None:
    upload = s3.create_multipart_upload(Bucket=bucket, Key="re")["UploadId"]
    s3.upload_part(Bucket=bucket, Key="re", UploadId=upload, PartNumber=1, Body=b"old part")
    etag = s3.upload_part(Bucket=bucket, Key="re", UploadId=upload, PartNumber=1, Body=b"new part!")["ETag"]
    listed = s3.list_parts(Bucket=bucket, Key="re", UploadId=upload)["Parts"]
    assert [(p["PartNumber"], p["ETag"], p["Size"]) for p in listed] == [(1, etag, 9)]
    s3.complete_multipart_upload(
        Bucket=bucket, Key="re", UploadId=upload, MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]}
    )
    assert s3.get_object(Bucket=bucket, Key="re")["Body"].read() == b"new part!"


def test_complete_errors(s3, bucket, expect_error) -> None:
    big, small = os.urandom(5 * MIB), b"small"
    upload = s3.create_multipart_upload(Bucket=bucket, Key="err")["UploadId"]
    done = upload_parts(s3, bucket, "err", upload, [big, small, small])

    def complete(parts: list[dict[str, object]]) -> None:
        s3.complete_multipart_upload(
            Bucket=bucket, Key="err", UploadId=upload, MultipartUpload={"Parts": parts}
        )

    with expect_error("InvalidPart", 400):
        complete([done[0], {"PartNumber": 2, "ETag": '"0123456789abcdef0123456789abcdef"'}])
    with expect_error("InvalidPart", 400):
        complete([done[0], {"PartNumber": 7, "ETag": done[1]["ETag"]}])
    with expect_error("InvalidPartOrder", 400):
        complete([done[1], done[0]])
    with expect_error("InvalidPartOrder", 400):
        complete([done[0], done[0]])
    with expect_error("EntityTooSmall", 400):
        complete([done[0], done[1], done[2]])  # part 2 is not last and under 5 MiB
    # A failed complete leaves the upload usable.
    complete([done[0], done[2]])
    assert s3.get_object(Bucket=bucket, Key="err")["Body"].read() == big + small


def test_complete_with_no_parts_is_malformed(s3, bucket, raw, error_code) -> None:
    upload = s3.create_multipart_upload(Bucket=bucket, Key="none")["UploadId"]
    body = b"<CompleteMultipartUpload></CompleteMultipartUpload>"
    response = raw("POST", f"/{bucket}/none", query=f"uploadId={upload}", body=body)
    assert response.status_code == 400
    assert error_code(response) == "MalformedXML"
    s3.abort_multipart_upload(Bucket=bucket, Key="none", UploadId=upload)


def test_abort(s3, bucket, expect_error) -> None:
    upload = s3.create_multipart_upload(Bucket=bucket, Key="ab")["UploadId"]
    upload_parts(s3, bucket, "ab", upload, [b"p1"])
    assert (
        s3.abort_multipart_upload(Bucket=bucket, Key="ab", UploadId=upload)["ResponseMetadata"][
            "HTTPStatusCode"
        ]
        == 204
    )
    with expect_error("NoSuchUpload", 404):
        s3.list_parts(Bucket=bucket, Key="ab", UploadId=upload)
    with expect_error("NoSuchUpload", 404):
        s3.upload_part(Bucket=bucket, Key="ab", UploadId=upload, PartNumber=1, Body=b"late")
    with expect_error("NoSuchUpload", 404):
        s3.complete_multipart_upload(
            Bucket=bucket,
            Key="ab",
            UploadId=upload,
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": '"x"'}]},
        )
    with expect_error("NoSuchUpload", 404):
        s3.abort_multipart_upload(Bucket=bucket, Key="ab", UploadId=upload)
    with expect_error("NoSuchKey", 404):
        s3.get_object(Bucket=bucket, Key="ab")


def test_upload_id_belongs_to_its_key(s3, bucket, expect_error) -> None:
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mine")["UploadId"]
    with expect_error("NoSuchUpload", 404):
        s3.upload_part(Bucket=bucket, Key="other", UploadId=upload, PartNumber=1, Body=b"x")
    with expect_error("NoSuchUpload", 404):
        s3.list_parts(Bucket=bucket, Key="mine", UploadId="not-an-upload")
    s3.abort_multipart_upload(Bucket=bucket, Key="mine", UploadId=upload)


def test_bad_part_numbers(s3, bucket, raw, error_code) -> None:
    upload = s3.create_multipart_upload(Bucket=bucket, Key="pn")["UploadId"]
    for value in ("0", "10001", "-1", "x"):
        response = raw("PUT", f"/{bucket}/pn", query=f"partNumber={value}&uploadId={upload}", body=b"x")
        assert response.status_code == 400, value
        assert error_code(response) == "InvalidArgument"
    s3.upload_part(Bucket=bucket, Key="pn", UploadId=upload, PartNumber=10000, Body=b"x")
    s3.abort_multipart_upload(Bucket=bucket, Key="pn", UploadId=upload)


def test_list_parts_paging(s3, bucket) -> None:
    upload = s3.create_multipart_upload(Bucket=bucket, Key="lp")["UploadId"]
    bodies = {n: f"part {n}".encode() for n in (1, 2, 3, 5, 8, 13, 21)}
    etags = {
        n: s3.upload_part(Bucket=bucket, Key="lp", UploadId=upload, PartNumber=n, Body=b)["ETag"]
        for n, b in bodies.items()
    }
    seen: list[tuple[int, str, int]] = []
    marker = 0
    pages = 0
    while True:
        page = s3.list_parts(Bucket=bucket, Key="lp", UploadId=upload, MaxParts=3, PartNumberMarker=marker)
        pages += 1
        assert page["MaxParts"] == 3
        assert page["PartNumberMarker"] == marker
        seen += [(p["PartNumber"], p["ETag"], p["Size"]) for p in page["Parts"]]
        if not page["IsTruncated"]:
            break
        marker = page["NextPartNumberMarker"]
        assert marker == page["Parts"][-1]["PartNumber"]
    assert pages == 3
    assert seen == [(n, etags[n], len(bodies[n])) for n in sorted(bodies)]
    via_paginator = [
        p["PartNumber"]
        for page in s3.get_paginator("list_parts").paginate(
            Bucket=bucket, Key="lp", UploadId=upload, PaginationConfig={"PageSize": 2}
        )
        for p in page["Parts"]
    ]
    assert via_paginator == sorted(bodies)
    s3.abort_multipart_upload(Bucket=bucket, Key="lp", UploadId=upload)


def test_list_uploads_paging(s3, bucket) -> None:
    created = []
    for key in ("a", "b/1", "b/2", "c", "c"):
        created.append((key, s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]))
    expected = sorted(created)
    seen: list[tuple[str, str]] = []
    key_marker, id_marker = "", ""
    while True:
        page = s3.list_multipart_uploads(
            Bucket=bucket, MaxUploads=2, KeyMarker=key_marker, UploadIdMarker=id_marker
        )
        seen += [(u["Key"], u["UploadId"]) for u in page.get("Uploads", [])]
        if not page["IsTruncated"]:
            break
        key_marker, id_marker = page["NextKeyMarker"], page["NextUploadIdMarker"]
    assert seen == expected
    prefixed = s3.list_multipart_uploads(Bucket=bucket, Prefix="b/")
    assert [u["Key"] for u in prefixed["Uploads"]] == ["b/1", "b/2"]
    for key, upload in created:
        s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload)


def test_upload_file_with_transfer_config(s3, bucket, tmp_path) -> None:
    data = os.urandom(11 * MIB + 123)
    path = tmp_path / "big.bin"
    path.write_bytes(data)
    config = TransferConfig(multipart_threshold=5 * MIB, multipart_chunksize=5 * MIB, max_concurrency=3)
    s3.upload_file(str(path), bucket, "big.bin", Config=config)
    head = s3.head_object(Bucket=bucket, Key="big.bin")
    chunks = [data[i : i + 5 * MIB] for i in range(0, len(data), 5 * MIB)]
    assert head["ETag"] == multipart_etag(chunks)
    assert head["ContentLength"] == len(data)
    out = tmp_path / "out.bin"
    s3.download_file(bucket, "big.bin", str(out), Config=config)
    assert out.read_bytes() == data


@pytest.mark.parametrize("conditional", ["IfNoneMatch"])
def test_conditional_complete(s3, bucket, expect_error, conditional: str) -> None:
    s3.put_object(Bucket=bucket, Key="exists", Body=b"already")
    upload = s3.create_multipart_upload(Bucket=bucket, Key="exists")["UploadId"]
    done = upload_parts(s3, bucket, "exists", upload, [b"new"])
    with expect_error("PreconditionFailed", 412):
        s3.complete_multipart_upload(
            Bucket=bucket,
            Key="exists",
            UploadId=upload,
            MultipartUpload={"Parts": done},
            **{conditional: "*"},
        )
    assert s3.get_object(Bucket=bucket, Key="exists")["Body"].read() == b"already"
    s3.abort_multipart_upload(Bucket=bucket, Key="exists", UploadId=upload)


def test_list_uploads_with_delimiter(s3, bucket) -> None:
    keys = ["a", "b/1", "b/2", "b/c/3", "c", "d/x", "d/y"]
    created = [(key, s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]) for key in keys]
    full = s3.list_multipart_uploads(Bucket=bucket, Delimiter="/")
    assert [u["Key"] for u in full["Uploads"]] == ["a", "c"]
    assert [p["Prefix"] for p in full["CommonPrefixes"]] == ["b/", "d/"]
    assert full["Delimiter"] == "/"
    nested = s3.list_multipart_uploads(Bucket=bucket, Delimiter="/", Prefix="b/")
    assert [u["Key"] for u in nested["Uploads"]] == ["b/1", "b/2"]
    assert [p["Prefix"] for p in nested["CommonPrefixes"]] == ["b/c/"]
    entries: list[str] = []
    key_marker, id_marker = "", ""
    while True:
        page = s3.list_multipart_uploads(
            Bucket=bucket, Delimiter="/", MaxUploads=1, KeyMarker=key_marker, UploadIdMarker=id_marker
        )
        got = [u["Key"] for u in page.get("Uploads", [])] + [
            p["Prefix"] for p in page.get("CommonPrefixes", [])
        ]
        assert len(got) == 1
        entries += got
        if not page["IsTruncated"]:
            break
        key_marker, id_marker = page["NextKeyMarker"], page["NextUploadIdMarker"]
    assert entries == ["a", "b/", "c", "d/"]
    for key, upload in created:
        s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload)


def test_non_ascii_digit_part_numbers_are_s3_errors_not_500(s3, bucket, raw) -> None:
    # "²" passes str.isdigit() but int() refuses it: a partNumber or <PartNumber> of "²" was a 500.
    s3.put_object(Bucket=bucket, Key="whole", Body=b"0123456789")
    assert raw("GET", f"/{bucket}/whole", query="partNumber=%C2%B2").status_code == 400
    upload = s3.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    put = raw("PUT", f"/{bucket}/mp", query=f"partNumber=%C2%B2&uploadId={upload}", body=b"x")
    assert put.status_code == 400
    body = (
        '<CompleteMultipartUpload><Part><PartNumber>\u00b2</PartNumber><ETag>"x"</ETag></Part>'
        "</CompleteMultipartUpload>"
    ).encode()
    complete = raw("POST", f"/{bucket}/mp", query=f"uploadId={upload}", body=body)
    assert complete.status_code == 400 and b"<Code>" in complete.content
    s3.abort_multipart_upload(Bucket=bucket, Key="mp", UploadId=upload)
