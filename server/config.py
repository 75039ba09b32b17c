"""Server configuration: one TOML file, every key with a default and an environment override.

Precedence (highest first): command-line flags → environment variables → the TOML file →
embedded defaults. Environment names are `TIERSTORE_<SECTION>_<KEY>` upper-cased (for example
`TIERSTORE_SERVER_LISTEN`, `TIERSTORE_TIERS_GPU_DIRECT_CAPACITY_BYTES`; lists are comma-separated
or JSON), plus the two credential shortcuts `TIERSTORE_ACCESS_KEY` and `TIERSTORE_SECRET_KEY` that
the README and the admin CLI use.

Everything is validated before the server starts: an unknown key (a typo), a value of the wrong
type or out of range, in the file or in a `TIERSTORE_<SECTION>_...` variable, is refused with where
it was set and the keys that are valid there. `tierstore config check FILE` prints the effective
configuration, or those errors (exit 2).

Example (every key optional):

    [server]
    listen = "127.0.0.1:9000"
    data_dir = "./data"
    region = "us-east-1"
    virtual_host_domains = ["localhost"]   # bucket.localhost:9000 → virtual-hosted style
    tls_cert = ""                          # both set → HTTPS
    tls_key = ""
    max_clock_skew_seconds = 900
    log_level = "info"                     # critical | error | warning | info | debug
    access_log = false                     # true: one JSON line per request on logger "tierstore.access"
    status_page = "loopback"               # /_tierstore/: "loopback" | "authenticated" | "off"
    test_clock = false                     # allow `tierstore admin clock advance` (tests, demos)
    header_timeout_seconds = 10            # a request's headers must arrive within this
    body_idle_timeout_seconds = 60         # a request body may stall this long between reads
    keep_alive_timeout_seconds = 30        # an idle keep-alive connection is closed after this
    max_connections = 1024                 # at most this many client connections open at once
    workers = 0                            # processes serving the port: 0 = one per usable core
                                           # (a supervisor when that is more than one), 1 = a single
                                           # process; --workers N wins
    trusted_proxies = []                   # peers (IPs or networks, "10.0.0.0/8") whose X-Forwarded-For
                                           # and X-Forwarded-Proto name the client and its scheme
                                           # (aws:SourceIp, aws:SecureTransport); from anyone else,
                                           # ignored. Empty: the connection's own address and scheme

    [credentials]
    access_key = "tierstore"
    secret_key = "tierstore-secret-key"

    [catalog]
    url = ""           # where the namespace lives: "sqlite:///path/to/catalog.db" or
                       # "postgresql://user:password@host:port/dbname" (one database any number of
                       # gateways share); also --catalog URL or TIERSTORE_CATALOG_URL. Default: SQLite at `path`
    path = ""          # default: <data_dir>/catalog/catalog.db
    durable = true     # fsync every commit (an acknowledged write survives power loss; SQLite)
    pool_size = 8      # PostgreSQL: connections per process at most (each statement holds one for
                       # a round trip; more only raised the memory a burst of large GETs leaves behind)

    [metrics]
    per_bucket = false  # also label request metrics by bucket (one series per bucket)

    [authorization]
    block_public_access = false   # true: every bucket as if its PublicAccessBlock had all four set
    account_id = "000000000000"   # the account of this server's users in policy ARNs (arn:aws:iam::<id>:user/NAME)

    [encryption]                    # encryption at rest (SSE-S3, SSE-KMS, SSE-C); see README
    master_key_file = ""            # a file holding the 256-bit master key (base64 or hex);
                                    # empty: an embedded keyring <data_dir>/encryption (0600)
    master_key_env = ""             # or the NAME of an environment variable holding it
    previous_key_files = []         # older master keys, still read until `admin encryption rotate`
    kms_key_ids = []                # key ids of the local KMS (aws:kms); "aws/s3" always exists
    allow_sse_c_over_http = false   # S3 refuses SSE-C keys sent in the clear; true: allow (tests)

    [drives]                        # the drives (failure domains) of the erasure-coded tiers
    reserve_bytes = 1073741824      # a drive with less free space takes no new shards
    failing_after_errors = 3        # consecutive I/O errors before a drive counts as failing
    reprobe_seconds = 10            # how often a failing drive is tried again

    [cluster]                       # storage nodes (`tierstore node`) registered in the catalog
    secret_file = ""                # a file holding the secret that signs gateway <-> node requests;
                                    # empty: the TIERSTORE_CLUSTER_SECRET environment variable
    node_timeout_seconds = 3        # every call to a node (connect, each read) gives up after this
    node_ca = ""                    # CA bundle (PEM) that nodes serving TLS are verified against;
                                    # also --node-ca, TIERSTORE_NODE_CA; empty: the system store

    [node]                          # `tierstore node --config FILE` (flags win)
    tls_cert = ""                   # both set: the node serves HTTPS (and registers https://)
    tls_key = ""

    [lifecycle]                    # the daemon that moves data between tiers
    enabled = true
    interval_seconds = 60
    manage_unclassified = true     # objects PUT without a storage class follow temperature
    heat_half_life_seconds = 86400
    promote_to_gpu_heat = 20       # decayed reads needed to move up to gpu-direct
    promote_to_hot_heat = 2        # ... and from warm to hot
    demote_after_idle_days = 30    # hot → warm after this long without access
    gpu_idle_seconds = 3600        # gpu-direct → hot after this long without access
    it_infrequent_after_days = 30  # INTELLIGENT_TIERING: frequent → infrequent (warm)
    it_min_monitored_size = 131072 # ... smaller objects stay frequent (as on AWS)
    high_watermark = 0.90          # of a tier's capacity_bytes: start moving the coldest down
    low_watermark = 0.75           # ... until usage is below this
    mover_concurrency = 4
    mover_bytes_per_second = 0     # 0: unlimited
    restore_tier = "warm"          # where RestoreObject puts the temporary copy
    min_transition_size = 0        # smaller objects are not moved by lifecycle rules
    scan_share = 0.1               # a background pass's scan works this share of the time, sleeps
                                   # the rest (1: never pauses); `admin lifecycle run` never pauses

    [rebalance]                    # moving shards after `admin domain add/drain`, `admin tier recode`
    bytes_per_second = 0           # 0: unlimited
    concurrency = 4                # blobs moved (objects re-striped) at once
    settle_seconds = 2             # start once the last topology change is this old (batch several)

    [tiers.hot]            # one table per tier: gpu-direct, hot, warm, cold
    backend = "erasure"    # a backend kind: "erasure", "files", "memory" or "s3"; its keys below
    enabled = true         # false: no such tier
    capacity_bytes = 0     # 0: the disk's size
    path = ""              # default: <data_dir>/domains (erasure) or <data_dir>/tiers/<name>
    k = 4                  # data shards per stripe
    m = 2                  # parity shards: any m domains may fail
    nodes = 8              # simulated nodes: directories <path>/<tier>/n<i>/d<j>
    drives_per_node = 2
    spread_level = "node"  # a stripe's shards land on distinct drives / nodes / racks / zones / regions
    write_quorum = 0       # 0: k+1 shards must be durable before a PUT is acknowledged
    block_size = 1048576   # bytes of data per stripe
    small_object_threshold = 65536  # smaller objects are written whole, in one go
    pack_threshold_bytes = 524288  # shards up to this size are appended to pack files (max 1 MiB; 0: off)
    pack_compact_seconds = 60 # packs at least half dead are rewritten this often (online, throttled)
    # Or declare the domains explicitly instead of nodes/drives_per_node:
    # domains = [{id = "hot-a", path = "/mnt/a", node = "n1", rack = "r1", zone = "z1", weight = 1.0}, ...]

    [tiers.gpu-direct]     # "memory": RAM in front of files; "files": one file per blob (path, fsync)
    backend = "memory"
    cache_bytes = 1073741824      # RAM for recently used blobs
    capacity_bytes = 4294967296
    fsync = true           # memory, files: fsync each blob before a PUT is acknowledged

    [tiers.cold]           # or keep a tier's blobs in an external S3 bucket (cloud, another tierstore)
    backend = "s3"
    endpoint = "https://s3.example.com"
    bucket = "archive"     # required
    access_key = ""        # empty: boto3's default credential chain
    secret_key = ""
    region = "us-east-1"
    prefix = "tierstore/"  # blobs are <prefix><data id>, never object keys
    addressing_style = "path"  # or "virtual", "auto"
    part_size = 16777216   # remote multipart part size (>= 5 MiB)
    verify_tls = true      # or a CA bundle path
    connect_timeout = 5
    read_timeout = 60
    max_attempts = 3

A [tiers.NAME] table overrides the embedded default's keys (DEFAULT_TIERS below) when it keeps
the default's backend, and replaces the table when it names another backend.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Self, cast
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, InitSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from erasure.drive_health import DriveHealthSettings
from erasure.topology import LEVELS
from lifecycle.daemon import LifecycleSettings
from lifecycle.intelligent_tiering import ITPolicy
from lifecycle.temperature import TemperaturePolicy, Watermarks
from server.config_sources import ConfigError, Environment, Origins, describe, read_file
from tiering.backends.erasure_coded import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_PACK_THRESHOLD,
    DEFAULT_SMALL_OBJECT_THRESHOLD,
)
from tiering.backends.memory import DEFAULT_CACHE_BYTES
from tiering.backends.s3_remote import DEFAULT_PART_SIZE, MIN_PART_SIZE
from tiering.encryption.keys import KeySettings, decode_key
from tiering.rebalance import RebalanceSettings
from tiering.tiers import TIER_ORDER, TierConfig

__all__ = ["ConfigError", "ServerConfig", "Settings", "load_config", "load_settings"]

DEFAULT_ACCESS_KEY = "tierstore"
DEFAULT_SECRET_KEY = "tierstore-secret-key"


@dataclass
class ServerConfig:
    listen_host: str = "127.0.0.1"
    listen_port: int = 9000
    data_dir: Path = Path("./data")
    region: str = "us-east-1"
    virtual_host_domains: list[str] = field(default_factory=lambda: ["localhost"])
    tls_cert: str = ""
    tls_key: str = ""
    max_clock_skew_seconds: int = 900
    log_level: str = "info"
    access_log: bool = False
    status_page: str = "loopback"
    access_key: str = DEFAULT_ACCESS_KEY
    secret_key: str = DEFAULT_SECRET_KEY
    catalog_path: Path | None = None
    catalog_durable: bool = True
    catalog_url: str = ""  # empty: SQLite at catalog_path
    catalog_pool_size: int = 8
    tiers: list[TierConfig] = field(default_factory=list)
    test_clock: bool = False
    lifecycle: LifecycleSettings = field(default_factory=LifecycleSettings)
    rebalance: RebalanceSettings = field(default_factory=RebalanceSettings)
    header_timeout_seconds: float = 10.0
    body_idle_timeout_seconds: float = 60.0
    keep_alive_timeout_seconds: float = 30.0
    max_connections: int = 1024
    # Every core serving by default: workers share all state through the catalog and the host's
    # state directory (README "Shared state"); the suite passes with 2 workers per server
    # (tests/conftest.py TIERSTORE_TEST_WORKERS).
    workers: int = 0  # 0: one per usable core (server.workers.default_workers); 1: one process
    # Peers whose X-Forwarded-For/-Proto are believed (uvicorn's proxy headers); empty: nobody's.
    trusted_proxies: list[str] = field(default_factory=list)
    metrics_per_bucket: bool = False
    block_public_access: bool = False
    account_id: str = "000000000000"
    drives: DriveHealthSettings = field(default_factory=DriveHealthSettings)
    encryption_keys: KeySettings = field(default_factory=KeySettings)  # keyring_dir: set from data_dir
    encryption_allow_sse_c_over_http: bool = False
    cluster_secret_file: str = ""  # [cluster]: see tiering/nodes.py
    node_timeout_seconds: float = 3.0
    node_ca: str = ""  # [cluster] node_ca: see erasure/remote.py
    # TIERSTORE_* variables that configure nothing here (perhaps another program's): said at start.
    warnings: list[str] = field(default_factory=list)

    @property
    def listen(self) -> str:
        return f"{self.listen_host}:{self.listen_port}"

    @property
    def credentials_are_default(self) -> bool:
        return self.access_key == DEFAULT_ACCESS_KEY and self.secret_key == DEFAULT_SECRET_KEY


def parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"listen address must be HOST:PORT, got {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


# --- the model: one class per table -----------------------------------------------------------


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


TierName = Literal["gpu-direct", "hot", "warm", "cold"]
assert TierName.__args__ == TIER_ORDER  # type: ignore[attr-defined]  # one list of tiers


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ServerSection(_Table):
    listen: str = "127.0.0.1:9000"
    data_dir: Path = Path("./data")
    region: str = "us-east-1"
    virtual_host_domains: list[str] = ["localhost"]
    tls_cert: str = ""
    tls_key: str = ""
    max_clock_skew_seconds: NonNegativeInt = 900
    log_level: Annotated[
        Literal["critical", "error", "warning", "info", "debug"], BeforeValidator(_lower)
    ] = "info"
    access_log: bool = False
    status_page: Annotated[Literal["loopback", "authenticated", "off"], BeforeValidator(_lower)] = "loopback"
    test_clock: bool = False
    header_timeout_seconds: PositiveFloat = 10.0
    body_idle_timeout_seconds: PositiveFloat = 60.0
    keep_alive_timeout_seconds: PositiveFloat = 30.0
    max_connections: PositiveInt = 1024
    workers: NonNegativeInt = 0
    trusted_proxies: list[str] = []

    @field_validator("listen")
    @classmethod
    def _host_and_port(cls, value: str) -> str:
        parse_listen(value)
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, values: list[str]) -> list[str]:
        # Addresses only: a host name would be resolved by nobody (uvicorn compares addresses).
        for value in values:
            try:
                ipaddress.ip_network(value, strict=False)
            except ValueError:
                raise ValueError(f"not an IP address or network: {value!r}") from None
        return values


class CredentialsSection(_Table):
    access_key: str = Field(default=DEFAULT_ACCESS_KEY, min_length=1)
    secret_key: str = Field(default=DEFAULT_SECRET_KEY, min_length=1)


class CatalogSection(_Table):
    url: str = ""
    path: str = ""
    durable: bool = True
    pool_size: int = Field(default=8, ge=2, le=1000)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value:
            return value
        if value.startswith("sqlite:"):
            if not value.startswith("sqlite:///") or len(value) == len("sqlite:///"):
                raise ValueError(
                    "a SQLite catalog URL is sqlite:///relative/path or sqlite:////absolute/path"
                )
            return value
        if value.startswith(("postgresql://", "postgres://")):
            parts = urlsplit(value)
            try:
                parts.port  # noqa: B018 - raises ValueError for a port that is not a number
            except ValueError as exc:
                raise ValueError(f"bad port in the catalog URL: {exc}") from None
            if not parts.hostname or not parts.path.strip("/"):
                raise ValueError(
                    "a PostgreSQL catalog URL names a host and a database: "
                    "postgresql://user:password@host:port/dbname"
                )
            return value
        raise ValueError("the catalog URL starts with sqlite:/// or postgresql://")


class MetricsSection(_Table):
    per_bucket: bool = False


class AuthorizationSection(_Table):
    block_public_access: bool = False
    account_id: str = Field(default="000000000000", pattern=r"^\d{12}$")


class EncryptionSection(_Table):
    master_key_file: str = ""
    master_key_env: str = ""
    previous_key_files: list[str] = Field(default_factory=list)
    kms_key_ids: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    allow_sse_c_over_http: bool = False

    @model_validator(mode="after")
    def _one_master_key(self) -> Self:
        if self.master_key_file and self.master_key_env:
            raise ValueError("set master_key_file or master_key_env, not both")
        for path in [self.master_key_file, *self.previous_key_files]:
            if path:
                try:
                    decode_key(Path(path).read_text(), path)
                except OSError as exc:
                    raise ValueError(f"cannot read key file {path}: {exc.strerror}") from None
        if self.master_key_env:
            value = os.environ.get(self.master_key_env)
            if not value:
                raise ValueError(f"master_key_env: environment variable {self.master_key_env} is not set")
            decode_key(value, f"environment variable {self.master_key_env}")
        return self


_DRIVES = DriveHealthSettings()


class DrivesSection(_Table):
    reserve_bytes: NonNegativeInt = _DRIVES.reserve_bytes
    failing_after_errors: PositiveInt = _DRIVES.failing_after_errors
    reprobe_seconds: PositiveFloat = _DRIVES.reprobe_seconds


class ClusterSection(_Table):
    secret_file: str = ""
    node_timeout_seconds: PositiveFloat = 3.0
    node_ca: str = ""

    @field_validator("node_ca")
    @classmethod
    def _readable(cls, value: str) -> str:
        if value and not Path(value).is_file():
            raise ValueError(f"no CA bundle file {value}")
        return value


class NodeSection(_Table):
    """A storage node's own keys (`tierstore node --config FILE`); a gateway ignores them."""

    tls_cert: str = ""
    tls_key: str = ""

    @model_validator(mode="after")
    def _both_or_neither(self) -> Self:
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("set both tls_cert and tls_key, or neither")
        for path in (self.tls_cert, self.tls_key):
            if path and not Path(path).is_file():
                raise ValueError(f"no such file {path}")
        return self


_LIFECYCLE = LifecycleSettings()
_TEMPERATURE, _IT, _WATERMARKS = _LIFECYCLE.temperature, _LIFECYCLE.intelligent_tiering, _LIFECYCLE.watermarks
DAY = 86400.0


class LifecycleSection(_Table):
    enabled: bool = _LIFECYCLE.enabled
    interval_seconds: PositiveFloat = _LIFECYCLE.interval_seconds
    manage_unclassified: bool = _LIFECYCLE.manage_unclassified
    heat_half_life_seconds: PositiveFloat = _TEMPERATURE.half_life_s
    promote_to_gpu_heat: PositiveFloat = _TEMPERATURE.promote_to_gpu
    promote_to_hot_heat: PositiveFloat = _TEMPERATURE.promote_to_hot
    demote_after_idle_days: PositiveFloat = _TEMPERATURE.demote_after_idle_s / DAY
    gpu_idle_seconds: PositiveFloat = _TEMPERATURE.gpu_idle_s
    it_infrequent_after_days: NonNegativeFloat = _IT.infrequent_after_days
    it_min_monitored_size: NonNegativeInt = _IT.min_monitored_size
    high_watermark: float = Field(default=_WATERMARKS.high, ge=0.0, le=1.0)
    low_watermark: float = Field(default=_WATERMARKS.low, ge=0.0, le=1.0)
    mover_concurrency: PositiveInt = _LIFECYCLE.mover_concurrency
    mover_bytes_per_second: NonNegativeFloat = _LIFECYCLE.mover_bytes_per_second
    restore_tier: TierName = cast(TierName, _LIFECYCLE.restore_tier)
    min_transition_size: NonNegativeInt = _LIFECYCLE.min_transition_size
    scan_share: float = Field(default=_LIFECYCLE.scan_share, gt=0.0, le=1.0)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.low_watermark > self.high_watermark:
            raise ValueError(
                f"low_watermark ({self.low_watermark}) is above high_watermark ({self.high_watermark})"
            )
        if self.promote_to_hot_heat > self.promote_to_gpu_heat:
            raise ValueError(
                f"promote_to_hot_heat ({self.promote_to_hot_heat}) is above "
                f"promote_to_gpu_heat ({self.promote_to_gpu_heat})"
            )
        self.settings()  # and whatever else the policies refuse
        return self

    def settings(self) -> LifecycleSettings:
        return LifecycleSettings(
            enabled=self.enabled,
            interval_seconds=self.interval_seconds,
            manage_unclassified=self.manage_unclassified,
            temperature=TemperaturePolicy(
                half_life_s=self.heat_half_life_seconds,
                promote_to_gpu=self.promote_to_gpu_heat,
                promote_to_hot=self.promote_to_hot_heat,
                demote_after_idle_s=self.demote_after_idle_days * DAY,
                gpu_idle_s=self.gpu_idle_seconds,
            ),
            intelligent_tiering=ITPolicy(
                infrequent_after_days=self.it_infrequent_after_days,
                min_monitored_size=self.it_min_monitored_size,
            ),
            watermarks=Watermarks(high=self.high_watermark, low=self.low_watermark),
            mover_concurrency=self.mover_concurrency,
            mover_bytes_per_second=self.mover_bytes_per_second,
            restore_tier=self.restore_tier,
            min_transition_size=self.min_transition_size,
            scan_share=self.scan_share,
        )


_REBALANCE = RebalanceSettings()


class RebalanceSection(_Table):
    bytes_per_second: NonNegativeFloat = _REBALANCE.bytes_per_second
    concurrency: PositiveInt = _REBALANCE.concurrency
    settle_seconds: NonNegativeFloat = _REBALANCE.settle_seconds


# --- tiers: one model per backend kind, chosen by `backend` --------------------------------------


class _Tier(_Table):
    enabled: bool = True
    capacity_bytes: NonNegativeInt = 0  # 0: the disk's size


class _LocalTier(_Tier):
    path: str = ""  # "": under data_dir (resolved by Settings)


class DomainSpec(_Table):
    id: str = Field(min_length=1)
    path: str = Field(min_length=1)
    node: str | None = None  # None: the domain's id
    rack: str = "rack1"
    zone: str = "zone1"
    weight: NonNegativeFloat = 0.0  # 0: the size of the filesystem under path


class ErasureTier(_LocalTier):
    backend: Literal["erasure"]
    k: PositiveInt = 4
    m: NonNegativeInt = 2
    nodes: PositiveInt = 1
    drives_per_node: PositiveInt = 6
    # Literal over erasure's runtime tuple of levels: pydantic checks it, mypy cannot spell it.
    spread_level: Literal[LEVELS] = "drive"  # type: ignore[valid-type]
    write_quorum: NonNegativeInt = 0  # 0: k+1
    block_size: PositiveInt = DEFAULT_BLOCK_SIZE
    small_object_threshold: NonNegativeInt = DEFAULT_SMALL_OBJECT_THRESHOLD
    # Shards (header + frames) up to this many bytes are appended to pack files on local drives
    # instead of a file each (erasure/pack.py); 0: off. At most 1 MiB: packed shards are held in
    # memory while written.
    pack_threshold_bytes: int = Field(default=DEFAULT_PACK_THRESHOLD, ge=0, le=1 << 20)
    pack_compact_seconds: PositiveFloat = 60.0  # how often packs mostly dead are rewritten
    domains: list[DomainSpec] | None = None


class FilesTier(_LocalTier):
    backend: Literal["files"]
    fsync: bool = True


class MemoryTier(_LocalTier):
    backend: Literal["memory"]
    cache_bytes: NonNegativeInt = DEFAULT_CACHE_BYTES
    fsync: bool = True


class S3Tier(_Tier):
    backend: Literal["s3"]
    endpoint: str = ""
    bucket: str = Field(min_length=1)
    access_key: str = ""
    secret_key: str = ""
    region: str = "us-east-1"
    prefix: str = "tierstore/"
    addressing_style: Literal["path", "virtual", "auto"] = "path"
    part_size: int = Field(default=DEFAULT_PART_SIZE, ge=MIN_PART_SIZE)
    verify_tls: bool | str = True
    connect_timeout: PositiveFloat = 5.0
    read_timeout: PositiveFloat = 60.0
    max_attempts: PositiveInt = 3


TierTable = Annotated[ErasureTier | FilesTier | MemoryTier | S3Tier, Field(discriminator="backend")]
TIER_KINDS: dict[str, type[_Tier]] = {
    "erasure": ErasureTier,
    "files": FilesTier,
    "memory": MemoryTier,
    "s3": S3Tier,
}

# The embedded default: gpu-direct served from RAM (written through to files), and the other
# tiers erasure-coded over simulated failure domains, one directory per drive. Each code spreads
# over nodes and has more nodes than shards, so losing m whole nodes still leaves room to write
# every new object at full width.
DEFAULT_TIERS: dict[str, dict[str, Any]] = {
    "gpu-direct": {"backend": "memory", "cache_bytes": 1 << 30, "capacity_bytes": 4 << 30},
    "hot": {"backend": "erasure", "k": 4, "m": 2, "nodes": 8, "drives_per_node": 2, "spread_level": "node"},
    "warm": {"backend": "erasure", "k": 8, "m": 3, "nodes": 12, "drives_per_node": 2, "spread_level": "node"},
    "cold": {
        "backend": "erasure",
        "k": 10,
        "m": 4,
        "nodes": 16,
        "drives_per_node": 1,
        "spread_level": "node",
    },
}


# --- the whole configuration ------------------------------------------------------------------


class Settings(BaseSettings):
    """The validated configuration: flags over environment over file over defaults."""

    model_config = SettingsConfigDict(extra="forbid", case_sensitive=True)

    config_file: Path | None = Field(default=None, exclude=True)  # read by the file source
    server: ServerSection = Field(default_factory=ServerSection)
    credentials: CredentialsSection = Field(default_factory=CredentialsSection)
    catalog: CatalogSection = Field(default_factory=CatalogSection)
    metrics: MetricsSection = Field(default_factory=MetricsSection)
    authorization: AuthorizationSection = Field(default_factory=AuthorizationSection)
    encryption: EncryptionSection = Field(default_factory=EncryptionSection)
    drives: DrivesSection = Field(default_factory=DrivesSection)
    cluster: ClusterSection = Field(default_factory=ClusterSection)
    node: NodeSection = Field(default_factory=NodeSection)
    lifecycle: LifecycleSection = Field(default_factory=LifecycleSection)
    rebalance: RebalanceSection = Field(default_factory=RebalanceSection)
    tiers: dict[TierName, TierTable] = Field(default_factory=dict, validate_default=True)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Ours replace pydantic's environment reader: TIERSTORE_TIERS_<TIER>_<KEY> needs the tier
        # names, and a variable under a section's prefix that names no key must be refused.
        config_file = cast(InitSettingsSource, init_settings).init_kwargs.get("config_file")
        return init_settings, _EnvironmentSource(settings_cls), _FileSource(settings_cls, config_file)

    @field_validator("tiers", mode="before")
    @classmethod
    def _over_defaults(cls, tables: Any) -> Any:
        """Every tier, its table laid over the embedded default (or replacing it: another backend)."""
        if not isinstance(tables, dict):
            return tables
        merged: dict[str, Any] = {}
        for name, default in DEFAULT_TIERS.items():
            table = tables.get(name, {})
            same_backend = (
                isinstance(table, dict) and table.get("backend", default["backend"]) == default["backend"]
            )
            merged[name] = {**default, **table} if same_backend else table
        return {**merged, **{k: v for k, v in tables.items() if k not in merged}}

    @model_validator(mode="after")
    def _resolve_paths(self) -> Self:
        """Paths left empty take their place under data_dir, so what is shown is what is used."""
        data_dir = self.server.data_dir
        if not self.catalog.path:
            self.catalog.path = str(data_dir / "catalog" / "catalog.db")
        for name, tier in self.tiers.items():
            if isinstance(tier, _LocalTier) and not tier.path:
                tier.path = str(
                    data_dir / "domains" if isinstance(tier, ErasureTier) else data_dir / "tiers" / name
                )
        return self


SECTIONS: dict[str, type[_Table]] = {
    name: info.annotation
    for name, info in Settings.model_fields.items()
    if isinstance(info.annotation, type) and issubclass(info.annotation, _Table)
}
_TIER_FIELDS: dict[str, Any] = {
    k: f.annotation for m in TIER_KINDS.values() for k, f in m.model_fields.items()
}


def _environment() -> Environment:
    return Environment.read(os.environ, SECTIONS, TIER_ORDER, _TIER_FIELDS)


class _EnvironmentSource(PydanticBaseSettingsSource):
    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads everything at once

    def __call__(self) -> dict[str, Any]:
        return _environment().values


class _FileSource(InitSettingsSource):
    def __init__(self, settings_cls: type[BaseSettings], path: Path | None) -> None:
        super().__init__(settings_cls, read_file(Path(path))[0] if path is not None else {})


# --- loading ------------------------------------------------------------------------------------

# The command-line flags of `tierstore serve` that set [server] keys.
FLAGS = {
    "data_dir": "--data",
    "listen": "--listen",
    "tls_cert": "--tls-cert",
    "tls_key": "--tls-key",
    "test_clock": "--test-clock",
}


def load_settings(
    path: Path | None = None,
    *,
    flags: dict[str, Any] | None = None,
    catalog_url: str | None = None,
    node_ca: str | None = None,
) -> tuple[Settings, list[str]]:
    """The validated settings and warnings; a ConfigError names every problem and where it is.

    `flags`: [server] keys given on the command line (the highest precedence); `catalog_url`:
    `--catalog`, the [catalog] url; `node_ca`: `--node-ca`, the [cluster] node_ca."""
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    environment = _environment()
    try:
        init: dict[str, Any] = {"config_file": path, "server": flags}
        if catalog_url:
            init["catalog"] = {"url": catalog_url}
        if node_ca:
            init["cluster"] = {"node_ca": node_ca}
        settings = Settings(**init)
    except ValidationError as error:
        text = read_file(Path(path))[1] if path is not None else ""
        flag_origins: dict[tuple[str, ...], str] = {("server", k): FLAGS[k] for k in flags}
        if catalog_url:
            flag_origins["catalog", "url"] = "--catalog"
        if node_ca:
            flag_origins["cluster", "node_ca"] = "--node-ca"
        origins = Origins(path, text, environment.origins, flag_origins)
        raise describe(error, origins, _valid_keys, _user_path) from None
    warnings = [
        f"environment variable {name} is not a configuration key (ignored)"
        for name in environment.unrecognised
    ]
    return settings, warnings


def _user_path(loc: tuple[int | str, ...]) -> tuple[str, ...]:
    """pydantic's error location as the key path a user writes: no union tags, no `[key]`."""
    parts = [str(p) for p in loc if p != "[key]"]
    if len(parts) > 2 and parts[0] == "tiers" and parts[2] in TIER_KINDS:
        del parts[2]
    return tuple(parts)


def _valid_keys(loc: tuple[int | str, ...]) -> list[str] | None:
    """The keys the table holding `loc` accepts."""
    parent = [str(p) for p in loc[:-1]]
    if not parent:
        return [name for name in Settings.model_fields if name != "config_file"]
    if parent[0] == "tiers" and len(parent) >= 3 and parent[2] in TIER_KINDS:
        model: type[BaseModel] = TIER_KINDS[parent[2]]
        if len(parent) == 3:
            return ["backend", *(k for k in model.model_fields if k != "backend")]
        return list(DomainSpec.model_fields) if parent[3] == "domains" else None
    if len(parent) == 1 and parent[0] in SECTIONS:
        return list(SECTIONS[parent[0]].model_fields)
    return None


def load_config(
    path: Path | None = None,
    *,
    data_dir: Path | None = None,
    listen: str | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    test_clock: bool | None = None,
    catalog_url: str | None = None,
    node_ca: str | None = None,
) -> ServerConfig:
    """The server's configuration; ConfigError (a ValueError) when any of it is wrong."""
    settings, warnings = load_settings(
        path,
        flags={
            "data_dir": data_dir,
            "listen": listen,
            "tls_cert": tls_cert or None,
            "tls_key": tls_key or None,
            "test_clock": True if test_clock else None,
        },
        catalog_url=catalog_url,
        node_ca=node_ca,
    )
    return server_config(settings, warnings)


def server_config(settings: Settings, warnings: list[str] | None = None) -> ServerConfig:
    """What the rest of the server reads, from validated settings."""
    server = settings.server
    host, port = parse_listen(server.listen)
    drives = DriveHealthSettings(**settings.drives.model_dump())
    return ServerConfig(
        listen_host=host,
        listen_port=port,
        data_dir=server.data_dir,
        region=server.region,
        virtual_host_domains=list(server.virtual_host_domains),
        trusted_proxies=list(server.trusted_proxies),
        tls_cert=server.tls_cert,
        tls_key=server.tls_key,
        max_clock_skew_seconds=server.max_clock_skew_seconds,
        log_level=server.log_level,
        access_log=server.access_log,
        status_page=server.status_page,
        access_key=settings.credentials.access_key,
        secret_key=settings.credentials.secret_key,
        catalog_path=Path(settings.catalog.path),
        catalog_durable=settings.catalog.durable,
        catalog_url=settings.catalog.url,
        catalog_pool_size=settings.catalog.pool_size,
        cluster_secret_file=settings.cluster.secret_file,
        node_timeout_seconds=settings.cluster.node_timeout_seconds,
        node_ca=settings.cluster.node_ca,
        tiers=[_tier_config(name, tier, drives) for name, tier in settings.tiers.items() if tier.enabled],
        test_clock=server.test_clock,
        lifecycle=settings.lifecycle.settings(),
        rebalance=RebalanceSettings(**settings.rebalance.model_dump()),
        header_timeout_seconds=server.header_timeout_seconds,
        body_idle_timeout_seconds=server.body_idle_timeout_seconds,
        keep_alive_timeout_seconds=server.keep_alive_timeout_seconds,
        max_connections=server.max_connections,
        workers=server.workers,
        metrics_per_bucket=settings.metrics.per_bucket,
        block_public_access=settings.authorization.block_public_access,
        account_id=settings.authorization.account_id,
        drives=drives,
        encryption_keys=KeySettings(
            keyring_dir=server.data_dir / "encryption",
            master_key_file=settings.encryption.master_key_file,
            master_key_env=settings.encryption.master_key_env,
            previous_key_files=list(settings.encryption.previous_key_files),
            kms_key_ids=list(settings.encryption.kms_key_ids),
        ),
        encryption_allow_sse_c_over_http=settings.encryption.allow_sse_c_over_http,
        warnings=list(warnings or []),
    )


def _tier_config(name: str, tier: TierTable, drives: DriveHealthSettings) -> TierConfig:
    options = tier.model_dump(exclude={"backend", "enabled", "capacity_bytes", "path", "domains"})
    if isinstance(tier, ErasureTier):
        options["drive_health"] = drives  # every erasure-coded pool judges its drives by [drives]
    if isinstance(tier, _LocalTier):
        options["root"] = tier.path
    if isinstance(tier, ErasureTier) and tier.domains:
        options["domains"] = [d.model_dump(exclude_none=True) for d in tier.domains]
    return TierConfig(
        name=name,
        backend=tier.backend,
        options={"name": name, **options},
        capacity_bytes=tier.capacity_bytes or None,
    )
