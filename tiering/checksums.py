"""Whole-object digests computed in the single pass over a PUT's bytes.

MD5 gives the S3 ETag; one optional "additional checksum" (CRC32, CRC32C, CRC64NVME, SHA1,
SHA256) is stored with the object and returned when a client asks for it. The CRCs come from
awscrt (the AWS SDKs' own C implementation), the SHAs from hashlib.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Protocol

from awscrt import checksums as crt

ALGORITHMS = ("CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256")


class Digest(Protocol):
    def update(self, data: bytes | memoryview) -> None: ...

    def digest(self) -> bytes: ...


class _Crc:
    """A running CRC with the big-endian byte layout S3 uses for its base64 value."""

    def __init__(self, fn: type | object, width: int) -> None:
        self._fn = fn
        self._width = width
        self._value = 0

    def update(self, data: bytes | memoryview) -> None:
        self._value = self._fn(data, self._value)  # type: ignore[operator]

    def digest(self) -> bytes:
        return self._value.to_bytes(self._width, "big")


def new_digest(algorithm: str) -> Digest:
    algorithm = algorithm.upper()
    if algorithm == "CRC32":
        return _Crc(crt.crc32, 4)
    if algorithm == "CRC32C":
        return _Crc(crt.crc32c, 4)
    if algorithm == "CRC64NVME":
        return _Crc(crt.crc64nvme, 8)
    if algorithm == "SHA1":
        return hashlib.sha1()
    if algorithm == "SHA256":
        return hashlib.sha256()
    raise ValueError(f"unknown checksum algorithm {algorithm!r}")


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


class BodyDigests:
    """MD5 plus the optional additional checksum, updated together over each piece of body."""

    def __init__(self, checksum_algorithm: str | None = None) -> None:
        self.md5 = hashlib.md5()
        self.checksum_algorithm = checksum_algorithm.upper() if checksum_algorithm else None
        self._checksum = new_digest(self.checksum_algorithm) if self.checksum_algorithm else None
        self.size = 0

    def update(self, data: bytes | memoryview) -> None:
        self.md5.update(data)
        if self._checksum is not None:
            self._checksum.update(data)
        self.size += len(data)

    @property
    def md5_hex(self) -> str:
        return self.md5.hexdigest()

    @property
    def checksum_b64(self) -> str | None:
        return b64(self._checksum.digest()) if self._checksum is not None else None


def combine_part_checksums(algorithm: str, part_checksums_b64: list[str]) -> str:
    """The "checksum of checksums" S3 reports for a multipart object (COMPOSITE type)."""
    digest = new_digest(algorithm)
    for value in part_checksums_b64:
        digest.update(base64.b64decode(value))
    return f"{b64(digest.digest())}-{len(part_checksums_b64)}"
