"""What an encrypted object's catalog record says about its encryption, and what a write asks for."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tiering.encryption.chunks import CHUNK_SIZE

SSE_S3 = "AES256"
SSE_KMS = "aws:kms"
SSE_C = "SSE-C"


@dataclass(frozen=True)
class EncryptionRequest:
    """How a new object (or upload) is to be encrypted: the mode, and its key where one is named."""

    mode: str  # SSE_S3 | SSE_KMS | SSE_C
    kms_key_id: str | None = None
    customer_key: bytes | None = None  # SSE-C: 32 bytes, checked by the caller (MD5, length)
    bucket_key: bool = False

    @classmethod
    def bucket_default(cls, raw: str | None) -> EncryptionRequest | None:
        """A bucket's default encryption (its BUCKET_DEFAULT config row, JSON) as a request."""
        if not raw:
            return None
        value = json.loads(raw)
        return cls(value["mode"], kms_key_id=value.get("kms") or None, bucket_key=value.get("bk", False))


BUCKET_DEFAULT = "encryption"  # the bucket config row that holds a bucket's default encryption


@dataclass(frozen=True)
class ObjectEncryption:
    """Kept in the object's metadata (small: about 150 bytes of JSON); no secret in the clear."""

    mode: str
    object_id: str  # hex; binds every chunk to this object (AAD)
    wrapped_key: str  # base64 of the data key wrapped by the key below
    key_id: str  # master key id (SSE-S3), KMS key id (SSE-KMS), "" (SSE-C)
    key_check: str = ""  # SSE-C: base64(salt || HMAC-SHA256(salt, customer key))
    bucket_key: bool = False
    chunk_size: int = CHUNK_SIZE

    @property
    def object_id_bytes(self) -> bytes:
        return bytes.fromhex(self.object_id)

    def to_json(self) -> dict[str, Any]:
        raw: dict[str, Any] = {
            "m": self.mode,
            "oid": self.object_id,
            "wk": self.wrapped_key,
            "kid": self.key_id,
            "cs": self.chunk_size,
        }
        if self.key_check:
            raw["kc"] = self.key_check
        if self.bucket_key:
            raw["bk"] = True
        return raw

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ObjectEncryption:
        return cls(
            raw["m"],
            raw["oid"],
            raw["wk"],
            raw.get("kid", ""),
            raw.get("kc", ""),
            raw.get("bk", False),
            raw.get("cs", CHUNK_SIZE),
        )
