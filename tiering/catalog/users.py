"""Users and their keys (besides the root credentials of the config)."""

from __future__ import annotations

import time
from typing import Any

from tiering.catalog.base import (
    CatalogBase,
)
from tiering.catalog.database import transaction


class UsersCatalog(CatalogBase):
    @transaction
    def add_user(self, access_key: str, secret_key: str, name: str, is_admin: bool) -> None:
        with self._write() as db:
            if db.execute("SELECT 1 FROM users WHERE access_key = ?", (access_key,)).fetchone():
                raise ValueError(f"access key {access_key!r} exists")
            db.execute(
                "INSERT INTO users (access_key, secret_key, name, created, is_admin) VALUES (?, ?, ?, ?, ?)",
                (access_key, secret_key, name, time.time(), int(is_admin)),
            )

    @transaction
    def remove_user(self, access_key: str) -> bool:
        with self._write() as db:
            return db.execute("DELETE FROM users WHERE access_key = ?", (access_key,)).rowcount > 0

    def get_user(self, access_key: str) -> tuple[str, str, bool] | None:
        """(secret key, name, is admin) of a user."""
        row = (
            self._reader()
            .execute("SELECT secret_key, name, is_admin FROM users WHERE access_key = ?", (access_key,))
            .fetchone()
        )
        return (row[0], row[1], bool(row[2])) if row else None

    def user_keys(self) -> dict[str, tuple[str, str, bool]]:
        """Every user: access key → (secret key, name, is admin). Small: loaded whole by the gateway."""
        rows = self._reader().execute("SELECT access_key, secret_key, name, is_admin FROM users")
        return {a: (sk, n, bool(i)) for a, sk, n, i in rows}

    def list_users(self) -> list[dict[str, Any]]:
        rows = self._reader().execute("SELECT access_key, name, created, is_admin FROM users ORDER BY name")
        return [{"access_key": a, "name": n, "created": c, "admin": bool(i)} for a, n, c, i in rows]

    @transaction
    def put_user_policy(self, name: str, policy: str | None) -> bool:
        """Set (or with None remove) the policy of user `name`; False when there was none to remove."""
        with self._write() as db:
            if policy is None:
                return db.execute("DELETE FROM user_policies WHERE name = ?", (name,)).rowcount > 0
            db.execute(
                "INSERT INTO user_policies (name, policy) VALUES (?, ?) "
                "ON CONFLICT (name) DO UPDATE SET policy = excluded.policy",
                (name, policy),
            )
            return True

    def user_policies(self) -> dict[str, str]:
        """Every user policy: name → document. Small: loaded whole by the gateway."""
        return dict(self._reader().execute("SELECT name, policy FROM user_policies").fetchall())
