"""Starlette's "s3path" URL convertor: any path at all, for the catch-all route of S3 requests.

A module of its own because it subclasses Starlette's `Convertor`: server/app.py runs compiled
(setup.py), and a compiled subclass of a library's Python class is not something to rely on.
"""

from __future__ import annotations

from starlette.convertors import Convertor, register_url_convertor


class AnyPath(Convertor[str]):
    """Any path at all: S3 keys may hold newlines, which Starlette's "path" (".*") never matches."""

    regex = "(?s:.*)"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


def register() -> None:
    """Make "{name:s3path}" usable in routes (idempotent)."""
    register_url_convertor("s3path", AnyPath())
