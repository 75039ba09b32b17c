"""Server configuration: one TOML file, every key with a default and an environment override.

Precedence (highest first): command-line flags → environment variables → the TOML file →
embedded defaults. Environment names are `TIERSTORE_<SECTION>_<KEY>` upper-cased (for example
`TIERSTORE_SERVER_LISTEN`), plus the two credential shortcuts `TIERSTORE_ACCESS_KEY` and
`TIERSTORE_SECRET_KEY` that the README and the admin CLI use.

Example (every key optional):

    [server]
    listen = "127.0.0.1:9000"
    data_dir = "./data"
    region = "us-east-1"
    virtual_host_domains = ["localhost"]   # bucket.localhost:9000 → virtual-hosted style
    tls_cert = ""                          # both set → HTTPS
    tls_key = ""
    max_clock_skew_seconds = 900
    log_level = "info"
    access_log = false                     # true: one JSON line per request on logger "tierstore.access"
    status_page = "loopback"               # /_tierstore/: "loopback" | "authenticated" | "off"
    test_clock = false                     # allow `tierstore admin clock advance` (tests, demos)
    header_timeout_seconds = 10            # a request head not complete by then: connection closed
    body_idle_timeout_seconds = 60         # no body bytes for this long: RequestTimeout (400), closed
    keep_alive_timeout_seconds = 30        # an idle connection between requests: closed
    max_connections = 1024                 # per process; past it: SlowDown (503) and closed

    [metrics]
    per_bucket = false     # bucket labels in unsigned scrapes (bucket names are tenants' data)

    [credentials]
    access_key = "tierstore"
    secret_key = "tierstore-secret"

    [catalog]
    path = ""          # default: <data_dir>/catalog/catalog.db
    durable = true     # fsync every commit (an acknowledged write survives power loss)

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
    high_watermark = 0.90          # of a tier's capacity_bytes: start moving the coldest down
    low_watermark = 0.75           # ... until usage is below this
    mover_concurrency = 4
    mover_bytes_per_second = 0     # 0: unlimited
    restore_tier = "warm"          # where RestoreObject puts the temporary copy

    [rebalance]                    # moving shards after `admin domain add/drain`, `admin tier recode`
    bytes_per_second = 0           # 0: unlimited
    concurrency = 4                # blobs moved (objects re-striped) at once
    settle_seconds = 2             # start once the last topology change is this old (batch several)

    [drives]                       # drives of the erasure-coded tiers that cannot take writes
    reserve_bytes = 1073741824     # less free space than this: the drive is "full", placement skips it
    failing_after_errors = 3       # this many failed writes in a row: "failing", placement skips it
    reprobe_seconds = 10           # how often marked drives are checked again (statvfs, a probe write)

    [tiers.hot]            # one table per tier: gpu-direct, hot, warm, cold
    backend = "erasure"    # a registered backend kind: "erasure" or "files"
    path = ""              # default: <data_dir>/domains (erasure) or <data_dir>/tiers/<name> (files)
    k = 4                  # data shards per stripe
    m = 2                  # parity shards: any m domains may fail
    nodes = 8              # simulated nodes: directories <path>/<tier>/n<i>/d<j>
    drives_per_node = 2
    spread_level = "node"  # a stripe's shards land on distinct drives / nodes / racks / zones
    write_quorum = 0       # 0: k+1 shards must be durable before a PUT is acknowledged
    capacity_bytes = 0     # 0: the disk's size
    # Or declare the domains explicitly instead of nodes/drives_per_node:
    # domains = [{id = "hot-a", path = "/mnt/a", node = "n1", rack = "r1", zone = "z1", weight = 1.0}, ...]

    [tiers.cold]           # or keep a tier's blobs in an external S3 bucket (cloud, another tierstore)
    backend = "s3"
    endpoint = "https://s3.example.com"
    bucket = "archive"
    access_key = ""        # empty: boto3's default credential chain
    secret_key = ""
    region = "us-east-1"
    prefix = "tierstore/"  # blobs are <prefix><data id>, never object keys
    addressing_style = "path"
    part_size = 16777216   # remote multipart part size (>= 5 MiB)
    verify_tls = true      # or a CA bundle path
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from erasure.drive_health import DriveHealthSettings
from lifecycle.daemon import LifecycleSettings
from tiering.rebalance import RebalanceSettings
from tiering.tiers import TIER_ORDER, TierConfig

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
    access_log: bool = False  # off for a quiet trial console; services turn it on (deploy/tierstore.toml)
    status_page: str = "loopback"
    metrics_per_bucket: bool = False
    access_key: str = DEFAULT_ACCESS_KEY
    secret_key: str = DEFAULT_SECRET_KEY
    catalog_path: Path | None = None
    catalog_durable: bool = True
    tiers: list[TierConfig] = field(default_factory=list)
    test_clock: bool = False
    lifecycle: LifecycleSettings = field(default_factory=LifecycleSettings)
    rebalance: RebalanceSettings = field(default_factory=RebalanceSettings)
    header_timeout_seconds: float = 10.0
    body_idle_timeout_seconds: float = 60.0
    keep_alive_timeout_seconds: float = 30.0
    max_connections: int = 1024
    drives: DriveHealthSettings = field(default_factory=DriveHealthSettings)

    @property
    def listen(self) -> str:
        return f"{self.listen_host}:{self.listen_port}"

    @property
    def credentials_are_default(self) -> bool:
        return self.access_key == DEFAULT_ACCESS_KEY and self.secret_key == DEFAULT_SECRET_KEY


def parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"listen address must be HOST:PORT, got {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def _env(section: str, key: str) -> str | None:
    return os.environ.get(f"TIERSTORE_{section}_{key}".upper().replace("-", "_"))


def _as_bool(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


def load_config(
    path: Path | None = None,
    *,
    data_dir: Path | None = None,
    listen: str | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    test_clock: bool | None = None,
) -> ServerConfig:
    raw: dict[str, Any] = {}
    if path is not None:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    server = raw.get("server", {})
    creds = raw.get("credentials", {})
    catalog = raw.get("catalog", {})
    cfg = ServerConfig()

    def pick(section: str, table: dict[str, Any], key: str, default: Any) -> Any:
        env = _env(section, key)
        if env is not None:
            return env
        return table.get(key, default)

    listen_value = listen or pick("server", server, "listen", cfg.listen)
    cfg.listen_host, cfg.listen_port = parse_listen(str(listen_value))
    cfg.data_dir = Path(data_dir or pick("server", server, "data_dir", cfg.data_dir))
    cfg.region = str(pick("server", server, "region", cfg.region))
    domains = pick("server", server, "virtual_host_domains", cfg.virtual_host_domains)
    cfg.virtual_host_domains = domains.split(",") if isinstance(domains, str) else list(domains)
    cfg.tls_cert = tls_cert or str(pick("server", server, "tls_cert", ""))
    cfg.tls_key = tls_key or str(pick("server", server, "tls_key", ""))
    cfg.max_clock_skew_seconds = int(pick("server", server, "max_clock_skew_seconds", 900))
    cfg.log_level = str(pick("server", server, "log_level", "info"))
    access = pick("server", server, "access_log", False)
    cfg.access_log = _as_bool(access) if isinstance(access, str) else bool(access)
    cfg.status_page = str(pick("server", server, "status_page", "loopback")).lower()
    if cfg.status_page not in ("loopback", "authenticated", "off"):
        raise ValueError(f"server.status_page must be loopback, authenticated or off, got {cfg.status_page!r}")
    per_bucket = pick("metrics", raw.get("metrics", {}), "per_bucket", False)
    cfg.metrics_per_bucket = _as_bool(per_bucket) if isinstance(per_bucket, str) else bool(per_bucket)
    cfg.access_key = os.environ.get("TIERSTORE_ACCESS_KEY") or str(
        pick("credentials", creds, "access_key", DEFAULT_ACCESS_KEY)
    )
    cfg.secret_key = os.environ.get("TIERSTORE_SECRET_KEY") or str(
        pick("credentials", creds, "secret_key", DEFAULT_SECRET_KEY)
    )
    catalog_path = pick("catalog", catalog, "path", "")
    cfg.catalog_path = Path(catalog_path) if catalog_path else cfg.data_dir / "catalog" / "catalog.db"
    durable = pick("catalog", catalog, "durable", True)
    cfg.catalog_durable = _as_bool(durable) if isinstance(durable, str) else bool(durable)
    cfg.tiers = _tier_configs(raw.get("tiers", {}), cfg.data_dir)
    clock_flag = pick("server", server, "test_clock", False)
    cfg.test_clock = bool(test_clock) or (_as_bool(clock_flag) if isinstance(clock_flag, str) else bool(clock_flag))
    cfg.header_timeout_seconds = float(pick("server", server, "header_timeout_seconds", cfg.header_timeout_seconds))
    cfg.body_idle_timeout_seconds = float(pick("server", server, "body_idle_timeout_seconds", cfg.body_idle_timeout_seconds))
    cfg.keep_alive_timeout_seconds = float(pick("server", server, "keep_alive_timeout_seconds", cfg.keep_alive_timeout_seconds))
    cfg.max_connections = int(pick("server", server, "max_connections", cfg.max_connections))
    for key, value in (("header_timeout_seconds", cfg.header_timeout_seconds),
                       ("body_idle_timeout_seconds", cfg.body_idle_timeout_seconds),
                       ("keep_alive_timeout_seconds", cfg.keep_alive_timeout_seconds),
                       ("max_connections", cfg.max_connections)):
        if not value > 0:
            raise ValueError(f"server.{key} must be positive, got {value}")
    cfg.lifecycle = _lifecycle_settings(raw.get("lifecycle", {}))
    cfg.rebalance = RebalanceSettings.from_config(raw.get("rebalance", {}))
    cfg.drives = DriveHealthSettings.from_config(raw.get("drives", {}))
    for tier in cfg.tiers:
        if tier.backend == "erasure":
            tier.options["drive_health"] = cfg.drives
    return cfg


def _lifecycle_settings(table: dict[str, Any]) -> LifecycleSettings:
    """[lifecycle] keys, each overridable as TIERSTORE_LIFECYCLE_<KEY>."""
    defaults = LifecycleSettings()
    temp, it, wm = defaults.temperature, defaults.intelligent_tiering, defaults.watermarks

    def get(key: str, default: Any) -> Any:
        value = _env("lifecycle", key)
        if value is None:
            return table.get(key, default)
        if isinstance(default, bool):
            return _as_bool(value)
        return type(default)(value)

    day = 86400.0
    return LifecycleSettings(
        enabled=bool(get("enabled", defaults.enabled)),
        interval_seconds=float(get("interval_seconds", defaults.interval_seconds)),
        manage_unclassified=bool(get("manage_unclassified", defaults.manage_unclassified)),
        temperature=replace(
            temp,
            half_life_s=float(get("heat_half_life_seconds", temp.half_life_s)),
            promote_to_gpu=float(get("promote_to_gpu_heat", temp.promote_to_gpu)),
            promote_to_hot=float(get("promote_to_hot_heat", temp.promote_to_hot)),
            demote_after_idle_s=float(get("demote_after_idle_days", temp.demote_after_idle_s / day)) * day,
            gpu_idle_s=float(get("gpu_idle_seconds", temp.gpu_idle_s)),
        ),
        intelligent_tiering=replace(
            it,
            infrequent_after_days=float(get("it_infrequent_after_days", it.infrequent_after_days)),
            min_monitored_size=int(get("it_min_monitored_size", it.min_monitored_size)),
        ),
        watermarks=replace(
            wm, high=float(get("high_watermark", wm.high)), low=float(get("low_watermark", wm.low))
        ),
        mover_concurrency=int(get("mover_concurrency", defaults.mover_concurrency)),
        mover_bytes_per_second=float(get("mover_bytes_per_second", defaults.mover_bytes_per_second)),
        restore_tier=str(get("restore_tier", defaults.restore_tier)),
        min_transition_size=int(get("min_transition_size", defaults.min_transition_size)),
    )


# The embedded default: gpu-direct served from RAM (written through to files), and the other
# tiers erasure-coded over simulated failure domains, one directory per drive. Each code spreads
# over nodes and has more nodes than shards, so losing m whole nodes still leaves room to write
# every new object at full width.
DEFAULT_TIERS: dict[str, dict[str, Any]] = {
    "gpu-direct": {"backend": "memory", "cache_bytes": 1 << 30, "capacity_bytes": 4 << 30},
    "hot": {"backend": "erasure", "k": 4, "m": 2, "nodes": 8, "drives_per_node": 2, "spread_level": "node"},
    "warm": {"backend": "erasure", "k": 8, "m": 3, "nodes": 12, "drives_per_node": 2, "spread_level": "node"},
    "cold": {"backend": "erasure", "k": 10, "m": 4, "nodes": 16, "drives_per_node": 1, "spread_level": "node"},
}
_INT_OPTIONS = ("cache_bytes", "capacity_bytes", "k", "m", "nodes", "drives_per_node", "write_quorum", "block_size", "small_object_threshold", "part_size")


def _tier_configs(tables: dict[str, dict[str, Any]], data_dir: Path) -> list[TierConfig]:
    """All four tiers by default; a [tiers.NAME] table overrides keys, `enabled = false` drops it."""
    configs = []
    for name in TIER_ORDER:
        table = {**DEFAULT_TIERS[name], **tables.get(name, {})}
        section = f"tiers_{name}"
        for key in list(table) + list(_INT_OPTIONS) + ["spread_level", "backend", "path", "enabled"]:
            env = _env(section, key)
            if env is not None:
                table[key] = int(env) if key in _INT_OPTIONS else env
        if not _as_bool(str(table.pop("enabled", True))):
            continue
        backend = str(table.pop("backend"))
        default_root = data_dir / ("domains" if backend == "erasure" else "tiers") / ("" if backend == "erasure" else name)
        path = table.pop("path", "") or str(default_root)
        capacity = int(table.pop("capacity_bytes", 0)) or None
        options: dict[str, Any] = {"root": path, "name": name, **table}
        configs.append(TierConfig(name=name, backend=backend, options=options, capacity_bytes=capacity))
    return configs
