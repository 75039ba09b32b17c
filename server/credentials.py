"""Who may sign requests, and who is an administrator.

The root credentials come from the config (or TIERSTORE_ACCESS_KEY / TIERSTORE_SECRET_KEY) and are
always an administrator; further users live in the catalog (`tierstore admin user add`). Lookups
are cached briefly, so a SigV4 check costs no catalog read on the hot path, and a user added or
removed through one worker is seen by the others within `ttl` seconds.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import time
from dataclasses import dataclass

from tiering.catalog import Catalog


@dataclass(frozen=True)
class Identity:
    access_key: str
    name: str
    is_admin: bool
    anonymous: bool = False  # an unsigned request: policies and ACLs decide what it may do

    def __init__(self, access_key: str, name: str, is_admin: bool, anonymous: bool = False) -> None:
        # Written out, not generated: built once a request (see tiering/records.py on why).
        object.__setattr__(self, "access_key", access_key)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "is_admin", is_admin)
        object.__setattr__(self, "anonymous", anonymous)

    @property
    def owner_id(self) -> str:
        """The canonical user id S3 shows as Owner/ID: stable, and not the key itself."""
        return owner_id(self.access_key)


ANONYMOUS = Identity("", "", False, anonymous=True)


@functools.lru_cache(maxsize=1024)  # asked on every write (its ACL's owner): a hash each time showed
def owner_id(access_key: str) -> str:
    return hashlib.sha256(access_key.encode()).hexdigest()


class StaticCredentials:
    """A fixed set of keys, all administrators (for tools and tests that need no catalog)."""

    def __init__(self, keys: dict[str, str]) -> None:
        self._keys = dict(keys)

    def secret_for(self, access_key: str) -> str | None:
        return self._keys.get(access_key)

    def identity(self, access_key: str) -> Identity:
        return Identity(access_key, access_key, True)


class UserCredentials:
    """Root keys from the config plus the catalog's users, held in memory.

    Signature checks run on the event loop, so they never read SQLite: the user table (small) is
    loaded whole, and reloaded in a worker thread once it is `ttl` seconds old — a user added or
    removed through another worker is seen here within about a second. `reload()` (the admin API
    calls it after a change) makes this process's own changes visible at once.
    """

    def __init__(self, root: dict[str, str], catalog: Catalog, *, ttl: float = 1.0) -> None:
        self._root = dict(root)
        self._catalog = catalog
        self._ttl = ttl
        self._users: dict[str, tuple[str, str, bool]] = catalog.user_keys()
        self._loaded = time.monotonic()
        self._reloading = False

    def reload(self) -> None:
        """Blocking: read the user table (call from a worker thread on a running server)."""
        self._users = self._catalog.user_keys()
        self._loaded = time.monotonic()

    def _background_reload(self) -> None:
        if self._reloading or time.monotonic() - self._loaded < self._ttl:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.reload()  # no event loop (a tool or a test): reading directly blocks nobody
            return
        self._reloading = True
        future = loop.run_in_executor(None, self.reload)
        future.add_done_callback(lambda _: setattr(self, "_reloading", False))

    def _user(self, access_key: str) -> tuple[str, str, bool] | None:
        self._background_reload()
        return self._users.get(access_key)

    def secret_for(self, access_key: str) -> str | None:
        if access_key in self._root:
            return self._root[access_key]
        user = self._user(access_key)
        return user[0] if user else None

    def identity(self, access_key: str) -> Identity:
        if access_key in self._root:
            return Identity(access_key, "root", True)
        user = self._user(access_key)
        return Identity(access_key, user[1] if user else access_key, bool(user and user[2]))
