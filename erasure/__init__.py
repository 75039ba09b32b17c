"""The data plane under a tier: bytes on failure domains, erasure-coded, checksummed, healable.

Knows nothing of buckets, keys, S3 or HTTP (and imports neither `tiering` nor `server`).
Public API: `ErasurePool` (pool.py) over a `Topology` of `Domain`s (topology.py); errors in errors.py.
"""

from erasure.errors import (
    CorruptShard,
    DataLost,
    DataNotFound,
    DomainOffline,
    ErasureError,
    OutOfSpace,
    WriteQuorumError,
)
from erasure.heal import HealResult
from erasure.pool import ErasurePool, HealRequest
from erasure.reader import PoolReader
from erasure.topology import Domain, DomainState, Topology, default_layout
from erasure.writer import PoolWriter

__all__ = [
    "CorruptShard",
    "DataLost",
    "DataNotFound",
    "Domain",
    "DomainOffline",
    "DomainState",
    "ErasureError",
    "ErasurePool",
    "HealRequest",
    "HealResult",
    "OutOfSpace",
    "PoolReader",
    "PoolWriter",
    "Topology",
    "WriteQuorumError",
    "default_layout",
]
