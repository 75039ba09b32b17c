"""Errors the erasure layer raises. `tiering` maps them onto its backend errors; nothing here knows HTTP."""

from __future__ import annotations


class ErasureError(Exception):
    """Base of every error this package raises on purpose."""


class DataNotFound(ErasureError):
    """No shard of the blob exists on any reachable domain: it was deleted (or never written)."""


class DataLost(ErasureError):
    """Fewer than k good blocks of some stripe are reachable: the bytes cannot be served right now.

    Raised instead of ever returning wrong bytes. It may be temporary (offline domains come back).
    """

    def __init__(self, data_id: str, detail: str, stripe: int | None = None) -> None:
        where = f" (stripe {stripe})" if stripe is not None else ""
        super().__init__(f"data {data_id}{where}: {detail}")
        self.data_id = data_id
        self.stripe = stripe


class WriteQuorumError(ErasureError):
    """Too few shards could be written to keep the pool's durability promise."""


class OutOfSpace(WriteQuorumError):
    """The write quorum was lost because domains ran out of space."""


class DomainOffline(ErasureError):
    """The domain (a drive, or the node/rack/zone holding it) is unreachable."""


class ShardUnreadable(ErasureError):
    """A shard being written cannot be read back to move it to another drive (its drive failed)."""


class CorruptShard(ErasureError):
    """A shard file or one of its blocks failed verification; it counts as missing."""
