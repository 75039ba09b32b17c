"""The `Catalog`: every concern's module put together over one database."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from tiering.catalog.blobs import BlobsCatalog
from tiering.catalog.buckets import BucketsCatalog
from tiering.catalog.database import describe, open_database
from tiering.catalog.leases import LeasesCatalog
from tiering.catalog.listing import ListingCatalog
from tiering.catalog.moves import MovesCatalog
from tiering.catalog.objects import ObjectsCatalog
from tiering.catalog.processes import ProcessesCatalog
from tiering.catalog.sqlite import SQLiteDatabase
from tiering.catalog.topology import TopologyCatalog
from tiering.catalog.uploads import UploadsCatalog
from tiering.catalog.users import UsersCatalog


class Catalog(
    BucketsCatalog,
    ObjectsCatalog,
    ListingCatalog,
    UploadsCatalog,
    BlobsCatalog,
    MovesCatalog,
    TopologyCatalog,
    UsersCatalog,
    LeasesCatalog,
    ProcessesCatalog,
):
    """Synchronous catalog operations, thread-safe, on SQLite or PostgreSQL.

    `location`: a path or `sqlite:///path` (the embedded default), or
    `postgresql://user:password@host:port/dbname` (a catalog several gateways share).
    """

    def __init__(self, location: Path | str, *, durable: bool = True, pool_size: int = 8) -> None:
        self._db = open_database(location, durable=durable, pool_size=pool_size)
        self.url = self._db.url
        self.durable = durable

    @property
    def path(self) -> Path:
        """The SQLite file (a PostgreSQL catalog has none)."""
        if self._db.path is None:
            raise AttributeError(f"the catalog at {describe(self.url)} is a database server, not a file")
        return self._db.path

    @property
    def dialect(self) -> str:
        return self._db.dialect

    @property
    def shared(self) -> bool:
        """Can other hosts' processes use this catalog (a database server, not a local file)?"""
        return self._db.dialect != "sqlite"

    def close(self) -> None:
        self._db.close()

    # The SQLite database's group-commit state, which its tests watch.

    def _sqlite(self) -> SQLiteDatabase:
        assert isinstance(self._db, SQLiteDatabase), "only the SQLite catalog commits in groups"
        return self._db

    @property
    def fsyncs(self) -> int:
        return self._sqlite().fsyncs

    @property
    def _committed(self) -> int:
        return self._sqlite()._committed

    @property
    def _queued(self) -> list[Any]:
        return self._sqlite()._queued

    @property
    def _write_lock(self) -> threading.Lock:
        return self._sqlite()._write_lock
