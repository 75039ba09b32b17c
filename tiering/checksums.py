"""Whole-object digests computed in the single pass over a PUT's bytes.

MD5 gives the S3 ETag; one optional "additional checksum" (CRC32, CRC32C, CRC64NVME, SHA1,
SHA256) is stored with the object and returned when a client asks for it. The CRCs come from
awscrt (the AWS SDKs' own C implementation), the SHAs from hashlib.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from typing import Protocol

from awscrt import checksums as crt

ALGORITHMS = ("CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256")
# A multipart object's checksum is either the checksum of the part checksums ("<b64>-<N>") or,
# for the CRCs only, the CRC of the whole object: CRCs are linear, so the whole-object value is
# combined from the part CRCs and sizes, with no second pass over the data. CRC64NVME has only
# the full-object kind; the SHAs only the composite one.
COMPOSITE = "COMPOSITE"
FULL_OBJECT = "FULL_OBJECT"
CHECKSUM_TYPES = (COMPOSITE, FULL_OBJECT)
_COMBINE = {
    "CRC32": (crt.combine_crc32, 4),
    "CRC32C": (crt.combine_crc32c, 4),
    "CRC64NVME": (crt.combine_crc64nvme, 8),
}


class Digest(Protocol):
    def update(self, data: bytes | memoryview) -> None: ...

    def digest(self) -> bytes: ...


class _Crc:
    """A running CRC with the big-endian byte layout S3 uses for its base64 value."""

    def __init__(self, fn: Callable[[bytes | memoryview, int], int], width: int) -> None:
        self._fn = fn
        self._width = width
        self._value = 0

    def update(self, data: bytes | memoryview) -> None:
        self._value = self._fn(data, self._value)

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


def checksum_types_for(algorithm: str) -> tuple[str, ...]:
    """The multipart checksum types S3 allows for an algorithm, the default first."""
    algorithm = algorithm.upper()
    if algorithm == "CRC64NVME":
        return (FULL_OBJECT,)
    if algorithm in _COMBINE:
        return (COMPOSITE, FULL_OBJECT)
    return (COMPOSITE,)


def checksum_type_of(checksum: str) -> str:
    """A stored checksum's type: a composite value carries its part count ("<b64>-<N>")."""
    return COMPOSITE if "-" in checksum else FULL_OBJECT


def combine_full_object(algorithm: str, parts: list[tuple[str, int]]) -> str:
    """The CRC of the concatenated parts, from each part's (base64 CRC, size).

    awscrt's `combine_crc*` (the SDKs' own C code) does the GF(2) shift of the running CRC
    over the next part's length, so nothing is re-read and no CRC algebra is hand-written here.
    """
    combine, width = _COMBINE[algorithm.upper()]
    value = 0
    for part_b64, size in parts:
        part = int.from_bytes(base64.b64decode(part_b64), "big")
        value = combine(value, part, size)
    return b64(value.to_bytes(width, "big"))


def combine_part_checksums(algorithm: str, part_checksums_b64: list[str]) -> str:
    """The "checksum of checksums" S3 reports for a multipart object (COMPOSITE type)."""
    digest = new_digest(algorithm)
    for value in part_checksums_b64:
        digest.update(base64.b64decode(value))
    return f"{b64(digest.digest())}-{len(part_checksums_b64)}"
