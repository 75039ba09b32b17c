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

    [credentials]
    access_key = "tierstore"
    secret_key = "tierstore-secret"

    [catalog]
    path = ""          # default: <data_dir>/catalog/catalog.db
    durable = true     # fsync every commit (an acknowledged write survives power loss)

    [tiers.hot]        # one table per tier: gpu-direct, hot, warm, cold
    backend = "files"  # a registered backend kind
    path = ""          # default: <data_dir>/tiers/<name>
    capacity_bytes = 0 # 0: the disk's size
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    access_key: str = DEFAULT_ACCESS_KEY
    secret_key: str = DEFAULT_SECRET_KEY
    catalog_path: Path | None = None
    catalog_durable: bool = True
    tiers: list[TierConfig] = field(default_factory=list)

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
    return cfg


def _tier_configs(tables: dict[str, dict[str, Any]], data_dir: Path) -> list[TierConfig]:
    """All four tiers by default; a [tiers.NAME] table overrides one, `enabled = false` drops it."""
    configs = []
    for name in TIER_ORDER:
        table = dict(tables.get(name, {}))
        section = f"tiers_{name}"
        if not _as_bool(str(_env(section, "enabled") or table.pop("enabled", True))):
            continue
        backend = str(_env(section, "backend") or table.pop("backend", "files"))
        path = _env(section, "path") or table.pop("path", "") or str(data_dir / "tiers" / name)
        capacity = int(_env(section, "capacity_bytes") or table.pop("capacity_bytes", 0)) or None
        options: dict[str, Any] = {"root": path, **table}
        configs.append(TierConfig(name=name, backend=backend, options=options, capacity_bytes=capacity))
    return configs
