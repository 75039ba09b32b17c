"""Where configuration values come from, and how a bad one is reported.

Three sources feed the one model in `server.config` (highest first): command-line flags, the
environment (`TIERSTORE_<SECTION>_<KEY>`, `TIERSTORE_TIERS_<TIER>_<KEY>`, and the credential
shortcuts `TIERSTORE_ACCESS_KEY` / `TIERSTORE_SECRET_KEY`), and the TOML file. pydantic says *what*
is wrong and at which key path; this module says *where*: the environment variable, the flag, or the
file and line (tomllib keeps no positions, so the line is found in the file's text, best effort).
"""

from __future__ import annotations

import difflib
import json
import re
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

Path_ = tuple[str, ...]  # a key path: ("tiers", "hot", "k")

# TIERSTORE_* names that other code reads, not the server configuration: they never warn.
NOT_CONFIG_ENV = frozenset(
    {
        "TIERSTORE_ENDPOINT",  # `tierstore admin`: the server to talk to
        "TIERSTORE_RETIRE_GRACE_SECONDS",  # tiering/catalog/base.py: tests shorten the retire grace
        "TIERSTORE_SUPERVISOR_PID",  # server/workers.py: set by the supervisor for its workers
        "TIERSTORE_CLUSTER_SECRET",  # tiering/nodes.py: signs gateway <-> storage node requests
        "TIERSTORE_HOST_ID",  # tiering/peers.py: this host's id in the catalog's process table
        "TIERSTORE_PROCESS_HEARTBEAT_SECONDS",  # tiering/peers.py: tests shorten the process heartbeat
        "TIERSTORE_NODE_CA",  # tiering/nodes.py: CA bundle for storage nodes served over TLS
        "TIERSTORE_HEDGED_READS",  # erasure/reader.py: 0 turns hedged shard opening off (a bench baseline)
    }
)
CREDENTIAL_SHORTCUTS = {"TIERSTORE_ACCESS_KEY": "access_key", "TIERSTORE_SECRET_KEY": "secret_key"}


class ConfigError(ValueError):
    """A configuration that cannot be used; one line per problem, each saying where it is."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        count = f"{len(self.problems)} problem{'s' if len(self.problems) != 1 else ''}"
        super().__init__(f"{count}:\n" + "\n".join(f"  {p}" for p in self.problems))


def env_name(*parts: str) -> str:
    return "_".join(("TIERSTORE", *parts)).upper().replace("-", "_")


@dataclass
class Environment:
    """The TIERSTORE_* variables as nested config values, and which variable set which key path.

    A variable under a section's prefix that names no key of it (`TIERSTORE_LIFECYCLE_INTERVAL_SECOND`)
    still becomes a value, so that validation refuses it as an unknown key, exactly as in the file.
    A TIERSTORE_* variable under no section's prefix may belong to another program: it is reported
    in `unrecognised`, a warning, not an error.
    """

    values: dict[str, Any] = field(default_factory=dict)
    origins: dict[Path_, str] = field(default_factory=dict)
    unrecognised: list[str] = field(default_factory=list)

    @classmethod
    def read(
        cls,
        environ: Mapping[str, str],
        sections: Mapping[str, type[BaseModel]],
        tier_names: Iterable[str],
        tier_fields: Mapping[str, Any],
    ) -> Environment:
        env = cls()
        claimed: set[str] = set()
        for section, model in sections.items():
            prefix = env_name(section) + "_"
            names = {env_name(section, key): key for key in model.model_fields}
            for name, raw in environ.items():
                if not name.startswith(prefix) or name in NOT_CONFIG_ENV:
                    continue
                key = names.get(name, name[len(prefix) :].lower())
                annotation = model.model_fields[key].annotation if key in model.model_fields else str
                env._set((section, key), _decode(raw, annotation), name)
                claimed.add(name)
        tier_prefixes = {env_name("tiers", tier) + "_": tier for tier in tier_names}
        for name, raw in environ.items():
            if not name.startswith(env_name("tiers") + "_"):
                continue
            tier = next((t for p, t in tier_prefixes.items() if name.startswith(p)), None)
            if tier is None:  # an unknown tier: its name is refused as a [tiers.NAME] would be
                env._set(("tiers", name[len(env_name("tiers")) + 1 :].lower()), {}, name)
            else:
                key = name[len(env_name("tiers", tier)) + 1 :].lower()
                env._set(("tiers", tier, key), _decode(raw, tier_fields.get(key, str)), name)
            claimed.add(name)
        for name, key in CREDENTIAL_SHORTCUTS.items():
            if environ.get(name):  # the shortcut wins over TIERSTORE_CREDENTIALS_<KEY>
                env._set(("credentials", key), environ[name], name)
                claimed.add(name)
        env.unrecognised = sorted(
            name
            for name in environ
            if name.startswith("TIERSTORE_")
            and name not in claimed
            and name not in NOT_CONFIG_ENV
            and name not in CREDENTIAL_SHORTCUTS
        )
        return env

    def _set(self, path: Path_, value: Any, name: str) -> None:
        table = self.values
        for part in path[:-1]:
            table = table.setdefault(part, {})
        table[path[-1]] = value
        self.origins[path] = name


def _decode(raw: str, annotation: Any) -> Any:
    """An environment string as the value a TOML file would give: lists are comma-separated
    (`a,b`) or JSON (`[{"id": ...}]`); scalars stay strings for pydantic to convert and check."""
    if any(typing.get_origin(t) is list for t in (annotation, *typing.get_args(annotation))):
        text = raw.strip()
        if text.startswith("["):
            try:
                return json.loads(text)
            except json.JSONDecodeError:
                return raw  # refused by validation, naming the variable
        return [item.strip() for item in text.split(",") if item.strip()]
    return raw


# --- the file ---------------------------------------------------------------------------------

_HEADER = re.compile(r"^\s*\[(?!\[)\s*([^\]]+?)\s*\]")
_KEY = re.compile(
    r"^\s*((?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*'))*)\s*="
)
_KEY_PART = re.compile(r"\"([^\"]*)\"|'([^']*)'|([A-Za-z0-9_-]+)")


def _key_parts(text: str) -> Path_:
    return tuple(next(g for g in m.groups() if g is not None) for m in _KEY_PART.finditer(text))


def find_line(text: str, path: Path_) -> int | None:
    """The 1-based line that sets `path` (a key, or a table holding it) in TOML `text`; best effort:
    tables and dotted keys are followed, multi-line strings and inline tables are not."""
    table: Path_ = ()
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header:
            table = _key_parts(header.group(1))
            if table[: len(path)] == path:
                return number
            continue
        key = _KEY.match(line)
        if key and (table + _key_parts(key.group(1)))[: len(path)] == path:
            return number
    return None


# --- reporting ----------------------------------------------------------------------------------


@dataclass
class Origins:
    """Where each source's values came from, to say where a bad value was set."""

    file: Path | None = None
    file_text: str = ""
    env: dict[Path_, str] = field(default_factory=dict)
    flags: dict[Path_, str] = field(default_factory=dict)

    def where(self, path: Path_) -> str:
        for origins, kind in ((self.flags, "command line"), (self.env, "environment")):
            for set_path, name in origins.items():
                if path[: len(set_path)] == set_path:
                    return f"{kind} {name}"
        if self.file is not None:
            # A key the file lacks (a required one, a default that conflicts): its table's line.
            for depth in range(len(path), 0, -1):
                line = find_line(self.file_text, path[:depth])
                if line is not None:
                    return f"{self.file}:{line}"
            return str(self.file)
        return "defaults"


def describe(
    error: ValidationError,
    origins: Origins,
    valid_keys: Callable[[tuple[int | str, ...]], Sequence[str] | None],
    tidy_path: Callable[[tuple[int | str, ...]], Path_],
) -> ConfigError:
    """pydantic's errors as one line each: where, which key, what is wrong, and what would do.

    `valid_keys(loc)`: the keys the table holding `loc` accepts; `tidy_path(loc)`: `loc` as the
    user writes it (pydantic's loc may hold a union tag or `[key]`)."""
    problems = []
    errors = error.errors(include_url=False)
    # A bad table name ("[key]" error) also fails its contents: the name is the one problem.
    bad_names = {tidy_path(tuple(e["loc"])) for e in errors if "[key]" in e["loc"]}
    for item in errors:
        loc = tuple(item["loc"])
        path = tidy_path(loc)
        if path in bad_names and "[key]" not in loc:
            continue
        dotted = ".".join(path) or "(top level)"
        where = origins.where(path)
        if item["type"] == "extra_forbidden":
            valid = list(valid_keys(loc) or [])
            close = difflib.get_close_matches(str(loc[-1]), valid, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(f"{where}: unknown key {dotted}{hint}; valid keys: {', '.join(valid)}")
            continue
        message = item["msg"].removeprefix("Value error, ")  # our validators' own words
        if item["type"] not in ("missing", "model_type", "value_error") and not isinstance(
            item.get("input"), dict
        ):
            message += f" (got {item.get('input')!r})"
        problems.append(f"{where}: {dotted}: {message}")
    return ConfigError(problems)


def read_file(path: Path) -> tuple[dict[str, Any], str]:
    """The parsed TOML file and its text; a missing or malformed file is a ConfigError."""
    import tomllib

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"{path}: cannot read: {exc}"]) from None
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{path}: not valid TOML: {exc}"]) from None
