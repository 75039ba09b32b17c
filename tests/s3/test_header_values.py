"""Header values through a PUT and back: non-ASCII user metadata (signed by boto3, returned
RFC 2047-encoded as S3 does) and the stored system headers, returned byte for byte as sent."""

from __future__ import annotations

from email.header import decode_header, make_header

import botocore.handlers
import pytest

from tests.conftest import ServerProcess, make_client


def rfc2047_text(value: str) -> str:
    """What a mail-header decoder (and newer SDKs) make of a returned metadata value."""
    return str(make_header(decode_header(value)))


@pytest.fixture
def unicode_s3(server: ServerProcess):
    """A boto3 client that sends non-ASCII metadata. botocore refuses it before sending by
    default (an old reading of S3's docs); S3 accepts it, and so must we."""
    client = make_client(server.endpoint)
    for operation in ("PutObject", "CopyObject", "CreateMultipartUpload"):
        client.meta.events.unregister(
            f"before-parameter-build.s3.{operation}", botocore.handlers.validate_ascii_metadata
        )
    return client


@pytest.mark.parametrize("value", ["café ☕", "naïve_=?x?=", "日本語のメタデータ", "tab\there"])
def test_non_ascii_metadata_signed_by_boto3_round_trips(unicode_s3, bucket, value: str) -> None:
    unicode_s3.put_object(Bucket=bucket, Key="k", Body=b"x", Metadata={"name": value})
    for response in (unicode_s3.head_object(Bucket=bucket, Key="k"), unicode_s3.get_object(Bucket=bucket, Key="k")):
        returned = response["Metadata"]["name"]
        assert returned.isascii()  # mail-safe on the wire, as S3 returns it
        assert rfc2047_text(returned) == value


def test_non_ascii_metadata_is_rfc2047_encoded_like_s3(unicode_s3, bucket) -> None:
    unicode_s3.put_object(Bucket=bucket, Key="k", Body=b"x", Metadata={"name": "café ☕", "plain": "a b_c"})
    metadata = unicode_s3.head_object(Bucket=bucket, Key="k")["Metadata"]
    assert metadata == {"name": "=?UTF-8?Q?caf=C3=A9_=E2=98=95?=", "plain": "a b_c"}


def test_rfc2047_metadata_sent_is_decoded_before_storing(unicode_s3, bucket) -> None:
    # S3 decodes encoded-words before storing: sending the encoded form is the same as the text.
    unicode_s3.put_object(Bucket=bucket, Key="k", Body=b"x", Metadata={"name": "=?UTF-8?B?Y2Fmw6kg4piV?="})
    returned = unicode_s3.head_object(Bucket=bucket, Key="k")["Metadata"]["name"]
    assert returned == "=?UTF-8?Q?caf=C3=A9_=E2=98=95?="


def test_non_ascii_metadata_counts_utf8_bytes(unicode_s3, bucket, expect_error) -> None:
    with expect_error("MetadataTooLarge", 400):
        unicode_s3.put_object(Bucket=bucket, Key="k", Body=b"x", Metadata={"k": "é" * 1100})


def test_non_ascii_metadata_through_copy(unicode_s3, bucket) -> None:
    unicode_s3.put_object(Bucket=bucket, Key="src", Body=b"x", Metadata={"name": "café"})
    unicode_s3.copy_object(Bucket=bucket, Key="kept", CopySource={"Bucket": bucket, "Key": "src"})
    unicode_s3.copy_object(
        Bucket=bucket, Key="replaced", CopySource={"Bucket": bucket, "Key": "src"},
        Metadata={"name": "thé"}, MetadataDirective="REPLACE",
    )
    assert rfc2047_text(unicode_s3.head_object(Bucket=bucket, Key="kept")["Metadata"]["name"]) == "café"
    assert rfc2047_text(unicode_s3.head_object(Bucket=bucket, Key="replaced")["Metadata"]["name"]) == "thé"
