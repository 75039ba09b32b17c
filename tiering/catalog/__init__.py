"""The catalog: every bucket, object, upload and part — the namespace — behind a narrow interface.

Two databases carry it, with one behaviour: SQLite (WAL, one file: the embedded default, with
group commit) and PostgreSQL (one database shared by any number of gateways on any number of
hosts; also the PostgreSQL-compatible distributed databases). The SQL is written once, in what
both accept; `database.py` holds the few differences, `schema.py` the tables and their versioned
migrations.

Layout: a database layer (`database.py` the interface and the choice by URL, `sqlite.py`,
`postgres.py`, `schema.py`) and one module per concern, each a mixin of `Catalog` (catalog.py):
`buckets`, `objects` (and usage counters), `listing`, `uploads` (and parts), `blobs` (and
garbage, read pins), `moves` (temperature, moves, restores), `topology` (domains, rebalancing),
`users` (and keys), `leases` (and settings). `base.py` holds what several share.

Every method is synchronous and short; none does I/O on object data. The async facade
(`tiering.store`) runs them in threads.
"""

from tiering.catalog.base import (
    ARCHIVE_STATUS,
    EMPTY_ETAG,
    LIST_COLUMNS,
    OBJECT_COLUMNS,
    OBJECT_PLACEHOLDERS,
    RETIRE_GRACE_SECONDS,
    key_successor,
)
from tiering.catalog.catalog import Catalog
from tiering.catalog.database import describe, is_postgresql_url, sqlite_path
from tiering.catalog.schema import SCHEMA_VERSION, SchemaTooNew

__all__ = [
    "ARCHIVE_STATUS",
    "EMPTY_ETAG",
    "LIST_COLUMNS",
    "OBJECT_COLUMNS",
    "OBJECT_PLACEHOLDERS",
    "RETIRE_GRACE_SECONDS",
    "SCHEMA_VERSION",
    "Catalog",
    "SchemaTooNew",
    "describe",
    "is_postgresql_url",
    "key_successor",
    "sqlite_path",
]
