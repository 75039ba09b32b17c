"""Server-side encryption as S3 speaks it: the request headers (SSE-S3, SSE-KMS, SSE-C, and the
copy source's SSE-C key) turned into `tiering.encryption` requests, S3's 400s for bad or clashing
ones, the response headers, and bucket default encryption (Put/Get/DeleteBucketEncryption).

The sealing itself lives in `tiering.encryption`; nothing here touches object bytes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import dataclass

from server import errors as s3
from server.context import S3Request
from server.xml_io import Value, child_text, document, parse
from tiering.encryption import SSE_C, SSE_KMS, SSE_S3, EncryptionRequest

SSE = "x-amz-server-side-encryption"
KMS_KEY_ID = "x-amz-server-side-encryption-aws-kms-key-id"
BUCKET_KEY = "x-amz-server-side-encryption-bucket-key-enabled"
CUSTOMER = "x-amz-server-side-encryption-customer-"
COPY_SOURCE_CUSTOMER = "x-amz-copy-source-server-side-encryption-customer-"


@dataclass(frozen=True)
class CustomerKey:
    """An SSE-C key a request gave: checked (algorithm, length, MD5); never stored."""

    key: bytes
    md5: str  # base64, as the client sent it (echoed back in responses)


def customer_key(req: S3Request, prefix: str = CUSTOMER) -> CustomerKey | None:
    """The SSE-C key of a request (or of its copy source, with COPY_SOURCE_CUSTOMER); None if none."""
    algorithm = req.header(prefix + "algorithm")
    key_b64 = req.header(prefix + "key")
    md5_b64 = req.header(prefix + "key-md5")
    if algorithm is None and key_b64 is None and md5_b64 is None:
        return None
    if algorithm is None:
        raise s3.InvalidArgument(
            "Requests specifying Server Side Encryption with Customer provided keys must "
            "provide a valid encryption algorithm.",
            ArgumentName=prefix + "algorithm",
        )
    if algorithm != "AES256":
        raise s3.InvalidEncryptionAlgorithmError(
            "The Encryption request you specified is not valid. Supported value: AES256.",
            ArgumentName=prefix + "algorithm",
            ArgumentValue=algorithm,
        )
    if not key_b64:
        raise s3.InvalidArgument(
            "Requests specifying Server Side Encryption with Customer provided keys must "
            "provide an appropriate secret key.",
            ArgumentName=prefix + "key",
        )
    if not md5_b64:
        raise s3.InvalidArgument(
            "Requests specifying Server Side Encryption with Customer provided keys must "
            "provide the client calculated MD5 of the secret key.",
            ArgumentName=prefix + "key-MD5",
        )
    try:
        key = base64.b64decode(key_b64, validate=True)
    except (ValueError, binascii.Error):
        key = b""
    if len(key) != 32:
        raise s3.InvalidArgument(
            "The secret key was invalid for the specified algorithm.", ArgumentName=prefix + "key"
        )
    if base64.b64encode(hashlib.md5(key).digest()).decode() != md5_b64.strip():
        raise s3.InvalidArgument(
            "The calculated MD5 hash of the key did not match the hash that was provided.",
            ArgumentName=prefix + "key-MD5",
        )
    if req.request.url.scheme != "https" and not req.config.encryption_allow_sse_c_over_http:
        raise s3.InvalidRequest(
            "Requests specifying Server Side Encryption with Customer provided keys must be "
            "made over a secure connection."
        )
    return CustomerKey(key, md5_b64.strip())


def _mode(value: str, argument: str) -> str:
    if value not in (SSE_S3, SSE_KMS):
        raise s3.InvalidArgument(
            "Server Side Encryption with unknown algorithm", ArgumentName=argument, ArgumentValue=value
        )
    return value


def _bucket_key(req: S3Request) -> bool:
    value = req.header(BUCKET_KEY)
    if value is None:
        return False
    if value.lower() not in ("true", "false"):
        raise s3.InvalidArgument(
            "Invalid bucket key enabled header value", ArgumentName=BUCKET_KEY, ArgumentValue=value
        )
    return value.lower() == "true"


def write_request(req: S3Request) -> tuple[EncryptionRequest | None, CustomerKey | None]:
    """What a PUT / CreateMultipartUpload / CopyObject asks for the new object, from its headers.
    None: no encryption header (the bucket's default, if any, applies)."""
    sse = req.header(SSE)
    kms_key = req.header(KMS_KEY_ID)
    ckey = customer_key(req)
    if ckey is not None:
        if sse is not None or kms_key is not None:
            raise s3.InvalidArgument(
                "Server Side Encryption with Customer provided key is incompatible with the "
                "encryption method specified",
                ArgumentName=SSE,
                ArgumentValue=sse or "",
            )
        return EncryptionRequest(SSE_C, customer_key=ckey.key), ckey
    if sse is None:
        if kms_key is not None:
            raise s3.InvalidArgument(
                "Server Side Encryption with AWS KMS managed key requires HTTP header "
                "x-amz-server-side-encryption : aws:kms",
                ArgumentName=SSE,
            )
        if req.header(BUCKET_KEY) is not None:
            _bucket_key(req)
        return None, None
    mode = _mode(sse, SSE)
    if kms_key is not None and mode != SSE_KMS:
        raise s3.InvalidArgument(
            "Server Side Encryption with AWS KMS managed key requires HTTP header "
            "x-amz-server-side-encryption : aws:kms",
            ArgumentName=SSE,
            ArgumentValue=sse,
        )
    return EncryptionRequest(mode, kms_key_id=kms_key or None, bucket_key=_bucket_key(req)), None


def response_headers(encryption: dict[str, object] | None, ckey: CustomerKey | None = None) -> dict[str, str]:
    """The x-amz-server-side-encryption* headers S3 sends for an object stored this way."""
    if encryption is None:
        return {}
    mode = encryption.get("m")
    if mode == SSE_C:
        headers = {CUSTOMER + "algorithm": "AES256"}
        if ckey is not None:
            headers[CUSTOMER + "key-md5"] = ckey.md5
        return headers
    headers = {SSE: str(mode)}
    if mode == SSE_KMS:
        headers[KMS_KEY_ID] = str(encryption.get("kid", ""))
        if encryption.get("bk"):
            headers[BUCKET_KEY] = "true"
    return headers


# --- bucket default encryption -------------------------------------------------------------------


def parse_bucket_encryption(body: bytes) -> str:
    """A ServerSideEncryptionConfiguration document → the stored JSON; S3's errors for bad ones."""
    root = parse(body, "ServerSideEncryptionConfiguration")
    rules = root.findall("Rule")
    if len(rules) != 1:
        raise s3.MalformedXML()
    default = rules[0].find("ApplyServerSideEncryptionByDefault")
    if default is None:
        raise s3.MalformedXML()
    algorithm = child_text(default, "SSEAlgorithm")
    kms = child_text(default, "KMSMasterKeyID")
    if algorithm not in (SSE_S3, SSE_KMS):
        raise s3.MalformedXML()
    if kms and algorithm != SSE_KMS:
        raise s3.InvalidArgument(
            "a KMSMasterKeyID is not applicable if the default sse algorithm is not aws:kms",
            ArgumentName="ApplyServerSideEncryptionByDefault",
        )
    bucket_key = (child_text(rules[0], "BucketKeyEnabled") or "false").strip().lower()
    if bucket_key not in ("true", "false"):
        raise s3.MalformedXML()
    return json.dumps({"mode": algorithm, "kms": kms or "", "bk": bucket_key == "true"}, sort_keys=True)


def bucket_encryption_document(raw: str) -> bytes:
    value = json.loads(raw)
    default: list[tuple[str, Value]] = [("SSEAlgorithm", value["mode"])]
    if value.get("kms"):
        default.append(("KMSMasterKeyID", value["kms"]))
    rule: list[tuple[str, Value]] = [
        ("ApplyServerSideEncryptionByDefault", default),
        ("BucketKeyEnabled", bool(value.get("bk"))),
    ]
    return document("ServerSideEncryptionConfiguration", [("Rule", rule)])
