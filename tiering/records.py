"""The values the catalog stores and the ObjectStore hands out: buckets, objects, uploads, parts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tiering.backend import StoredData
from tiering.encryption.chunks import CHUNK_SIZE, plaintext_size


@dataclass(frozen=True)
class Segment:
    """One immutable blob of an object's data; a multipart object has one per part."""

    stored: StoredData
    part_number: int = 0  # 0 for a single-PUT object
    etag: str = ""  # the part's ETag, for multipart objects (GET ?partNumber=N)
    checksum: str | None = None  # the part's additional checksum (base64)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.stored.data_id,
            "size": self.stored.size,
            "loc": self.stored.location,
            "pn": self.part_number,
            "etag": self.etag,
            "ck": self.checksum,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Segment:
        return cls(
            stored=StoredData(raw["id"], raw["size"], raw.get("loc") or {}),
            part_number=raw.get("pn", 0),
            etag=raw.get("etag", ""),
            checksum=raw.get("ck"),
        )


@dataclass(frozen=True)
class ObjectMeta:
    """What a client says about an object besides its bytes."""

    content_type: str = "binary/octet-stream"
    # content-encoding, content-disposition, content-language, cache-control, expires
    system: dict[str, str] = field(default_factory=dict)
    user: dict[str, str] = field(default_factory=dict)  # x-amz-meta-* (names lower-case, no prefix)
    tags: dict[str, str] = field(default_factory=dict)
    storage_class: str = "STANDARD"  # the class the client asked for, as S3 reports it
    storage_class_explicit: bool = False  # did the client name a class (temperature management)
    acl: str | None = (
        None  # the object's ACL (owner and grants) as server.access.acl stores it; None: private
    )
    # Encryption at rest (`tiering.encryption.ObjectEncryption.to_json()`); None: stored in the clear.
    encryption: dict[str, Any] | None = None
    # Object Lock of this version (tiering.catalog.object_lock): {"mode": GOVERNANCE | COMPLIANCE,
    # "until": unix seconds} and/or {"hold": true}; None: not locked.
    lock: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        raw: dict[str, Any] = {
            "ct": self.content_type,
            "sys": self.system,
            "user": self.user,
            "sc": self.storage_class,
            "scx": self.storage_class_explicit,
        }
        if self.acl is not None:
            raw["acl"] = self.acl
        if self.encryption is not None:
            raw["enc"] = self.encryption
        if self.lock:
            raw["lock"] = self.lock
        return raw

    @classmethod
    def from_json(cls, raw: dict[str, Any], tags: dict[str, str]) -> ObjectMeta:
        return cls(
            content_type=raw.get("ct", "binary/octet-stream"),
            system=raw.get("sys", {}),
            user=raw.get("user", {}),
            tags=tags,
            storage_class=raw.get("sc", "STANDARD"),
            storage_class_explicit=raw.get("scx", False),
            acl=raw.get("acl"),
            encryption=raw.get("enc"),
            lock=raw.get("lock"),
        )


@dataclass(frozen=True)
class RestoreState:
    """RestoreObject on an archived (cold) object: a temporary copy on a readable tier."""

    ongoing: bool
    expiry: float  # when the copy goes away (unix seconds)
    days: int
    tier: str = ""  # where the copy lives once done
    segments: tuple[Segment, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "ongoing": self.ongoing,
            "expiry": self.expiry,
            "days": self.days,
            "tier": self.tier,
            "segments": [s.to_json() for s in self.segments],
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> RestoreState:
        return cls(
            ongoing=raw["ongoing"],
            expiry=raw["expiry"],
            days=raw.get("days", 1),
            tier=raw.get("tier", ""),
            segments=tuple(Segment.from_json(s) for s in raw.get("segments", [])),
        )


@dataclass(frozen=True)
class ObjectRecord:
    """One visible object: its metadata and where its bytes are."""

    bucket: str
    key: str
    size: int
    etag: str  # without quotes; "<hex>-<N>" for multipart
    last_modified: float  # unix seconds
    tier: str
    meta: ObjectMeta
    segments: tuple[Segment, ...]
    checksum_algorithm: str | None = None
    checksum: str | None = None  # base64; "<b64>-<N>" for a composite multipart checksum
    generation: int = 0  # bumps on every change: the compare-and-swap token for movers
    heat: float = 0.0  # decayed access count as of `heat_at` (see tiering.heat)
    heat_at: float = 0.0
    last_access: float = 0.0  # last GET/PUT/Copy of the object
    tier_since: float = 0.0  # when the data arrived on its current tier
    restore: RestoreState | None = None  # a temporary readable copy of an archived object
    version_id: str = "null"  # S3's version id; "null" in a bucket never versioned (and when Suspended)

    @property
    def parts_count(self) -> int:
        return sum(1 for s in self.segments if s.part_number) or 0

    def segment_sizes(self, segments: tuple[Segment, ...] | None = None) -> list[int]:
        """The object's bytes in each segment (stored sizes less the encryption's framing)."""
        segments = self.segments if segments is None else segments
        if self.meta.encryption is None:
            return [s.stored.size for s in segments]
        chunk = self.meta.encryption.get("cs", CHUNK_SIZE)
        return [plaintext_size(s.stored.size, chunk) for s in segments]


@dataclass(frozen=True)
class MoveRecord:
    """One move of an object's data between tiers (lifecycle, restore, rebalance)."""

    at: float
    from_tier: str
    to_tier: str
    size: int
    reason: str


@dataclass(frozen=True)
class BucketRecord:
    name: str
    created: float
    owner: str
    region: str


@dataclass(frozen=True)
class UploadRecord:
    upload_id: str
    bucket: str
    key: str
    initiated: float
    tier: str
    meta: ObjectMeta
    checksum_algorithm: str | None
    owner: str
    checksum_type: str | None = None  # COMPOSITE or FULL_OBJECT, with a checksum algorithm


@dataclass(frozen=True)
class PartRecord:
    part_number: int
    size: int
    etag: str
    last_modified: float
    stored: StoredData
    checksum: str | None


class ListEntry(NamedTuple):
    """What a listing shows of one object (no metadata, no locations: cheap to read).

    A named tuple, not a dataclass: a page holds a thousand of them, built straight from the
    catalog's rows, and a tuple costs a fraction of a frozen dataclass to make.
    """

    key: str
    size: int
    etag: str
    last_modified: float
    storage_class: str
    checksum_algorithm: str | None


@dataclass(frozen=True)
class ListPage:
    objects: list[ListEntry]
    common_prefixes: list[str]
    is_truncated: bool
    # Where the next page starts: the last key or common prefix returned.
    next_marker: str | None
