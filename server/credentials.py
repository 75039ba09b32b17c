"""Who may sign requests: access key → secret key."""

from __future__ import annotations


class StaticCredentials:
    """A fixed set of keys (the root credentials from the config)."""

    def __init__(self, keys: dict[str, str]) -> None:
        self._keys = dict(keys)

    def secret_for(self, access_key: str) -> str | None:
        return self._keys.get(access_key)
