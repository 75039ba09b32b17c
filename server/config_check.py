"""`tierstore config check [FILE]`: the effective configuration as TOML, or what is wrong with it.

The output is file + environment + defaults, every key spelled out, secrets masked: what `tierstore
serve --config FILE` would run with in this environment. Exit 0 when valid, 2 when not (the same
message `serve` refuses to start with).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from server.config import ConfigError, Settings, load_settings
from tiering.catalog import describe as describe_catalog

MASK = "********"
SECRET_KEYS = frozenset({"secret_key"})


def check(path: Path | None) -> int:
    try:
        settings, warnings = load_settings(path)
    except ConfigError as error:
        print(f"tierstore: bad configuration: {error}", file=sys.stderr)
        return 2
    for warning in warnings:
        print(f"tierstore: warning: {warning}", file=sys.stderr)
    print(render(settings), end="")
    return 0


def render(settings: Settings) -> str:
    """Settings as a TOML document, secrets masked."""
    data = settings.model_dump(mode="json")
    lines: list[str] = []
    for section, table in data.items():
        if section == "tiers":
            for name, tier in table.items():
                lines += [f"[tiers.{name}]", *_keys(tier), ""]
        else:
            lines += [f"[{section}]", *_keys(table), ""]
    return "\n".join(lines)


def _keys(table: dict[str, Any]) -> list[str]:
    ordered = {"backend": table["backend"], **table} if "backend" in table else table
    return [
        f"{key} = {_value(_masked(key, value))}" for key, value in ordered.items() if value is not None
    ]  # TOML has no null: unset


def _masked(key: str, value: Any) -> Any:
    if key in SECRET_KEYS and value:
        return MASK
    if key == "url" and isinstance(value, str):
        return describe_catalog(value)  # the catalog URL's password
    return value


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_value(v)}" for k, v in value.items() if v is not None) + "}"
    return json.dumps(str(value), ensure_ascii=False)  # a JSON string is a TOML basic string
