"""Tier definitions: the four tiers, their media profiles, and how S3 storage classes map onto them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tiering.backend import TierBackend, create_backend
from tiering.errors import UnknownStorageClass

GPU_DIRECT, HOT, WARM, COLD = "gpu-direct", "hot", "warm", "cold"
TIER_ORDER = (GPU_DIRECT, HOT, WARM, COLD)  # fastest first

# The storage class a client names → the tier that holds the data.
STORAGE_CLASS_TIERS: dict[str, str] = {
    "EXPRESS_ONEZONE": GPU_DIRECT,
    "GPU_DIRECT": GPU_DIRECT,
    "STANDARD": HOT,
    "REDUCED_REDUNDANCY": HOT,
    "INTELLIGENT_TIERING": HOT,  # starts in frequent access; temperature moves it from there
    "HOT": HOT,
    "STANDARD_IA": WARM,
    "ONEZONE_IA": WARM,
    "GLACIER_IR": WARM,
    "WARM": WARM,
    "GLACIER": COLD,
    "DEEP_ARCHIVE": COLD,
    "COLD": COLD,
}


def tier_for_storage_class(storage_class: str) -> str:
    try:
        return STORAGE_CLASS_TIERS[storage_class.upper()]
    except KeyError:
        raise UnknownStorageClass(storage_class) from None


@dataclass(frozen=True)
class MediaProfile:
    """What the hardware under a tier is like: for docs, metrics and power estimates."""

    media: str
    throughput_mib_s: float
    latency_ms: float
    cost_per_gb_month: float
    watts_per_tb: float


DEFAULT_MEDIA: dict[str, MediaProfile] = {
    GPU_DIRECT: MediaProfile("hbm/dram", 20000.0, 0.01, 2.0, 40.0),
    HOT: MediaProfile("nvme-flash", 3000.0, 0.1, 0.10, 6.0),
    WARM: MediaProfile("hdd", 250.0, 8.0, 0.02, 4.0),
    COLD: MediaProfile("tape/archive", 150.0, 60000.0, 0.002, 0.5),
}


@dataclass(frozen=True)
class TierConfig:
    name: str
    backend: str  # a registered backend kind ("files", "erasure", ...)
    options: dict[str, Any] = field(default_factory=dict)
    media: MediaProfile | None = None
    capacity_bytes: int | None = None


class Tier:
    """A configured tier: its name, profile and the backend that holds its bytes."""

    def __init__(self, config: TierConfig, backend: TierBackend) -> None:
        self.config = config
        self.name = config.name
        self.backend = backend
        self.media = config.media or DEFAULT_MEDIA.get(config.name, DEFAULT_MEDIA[HOT])

    @classmethod
    def from_config(cls, config: TierConfig) -> Tier:
        import tiering.backends  # noqa: F401  (registers the built-in backend kinds)

        return cls(config, create_backend(config.backend, **config.options))
