"""An object's catalog row read back: its JSON columns decoded and the `ObjectRecord` built.

Every GET, HEAD and overwrite reads its object's row this way, so this module is one of the
compiled ones (setup.py): interpreted, building the record from the row was about a tenth of a
small GET's event-loop time (bench/RESULTS.md).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from tiering.records import ObjectMeta, ObjectRecord, RestoreState, Segment


def loads(raw: str) -> Any:
    """A stored JSON column. orjson: a GET decodes three per row, and the standard library's
    decoder (Python wrappers around its scanner) was about a tenth of a small GET's CPU. What orjson
    refuses and `json.dumps` may have written (NaN, integers past 64 bits) goes to the standard
    library, which reads it as before."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


def standard_dumps(value: Any) -> str:
    """Compact JSON text by the standard library: what every catalog column was written with."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def dumps(value: Any) -> str:
    """The compact JSON text of an object row's column: its metadata, tags, segments and stored
    blobs. What `standard_dumps` writes, but for a float's digits (1e-05 comes out as 0.00001: the
    same number). orjson: a PUT encodes three of these (and one per blob an overwrite retires):
    9.7 µs through the standard library's encoder, 0.6 µs here (a micro-benchmark of the three).

    For those values only: orjson writes a float NaN or infinity as null where the standard library
    writes NaN, and these hold none (sizes, counts, names; a retention date is a parsed, finite
    time). Whatever orjson refuses (an integer past 64 bits, a key that is not a string, a lone
    surrogate) goes to the standard library, which writes it as before."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # orjson.JSONEncodeError
        return standard_dumps(value)


def object_from_row(row: tuple[Any, ...]) -> ObjectRecord:
    """The record of a row of OBJECT_COLUMNS (tiering/catalog/base.py), in that order."""
    (
        bucket,
        key,
        generation,
        size,
        etag,
        mtime,
        tier,
        meta,
        tags,
        algo,
        checksum,
        segments,
        heat,
        heat_at,
        last_access,
        tier_since,
        restore,
        version_id,
    ) = row
    return ObjectRecord(
        bucket=bucket,
        key=key,
        size=size,
        etag=etag,
        last_modified=mtime,
        tier=tier,
        meta=ObjectMeta.from_json(loads(meta), loads(tags)),
        segments=tuple([Segment.from_json(s) for s in loads(segments)]),
        checksum_algorithm=algo,
        checksum=checksum,
        generation=generation,
        heat=heat,
        heat_at=heat_at,
        last_access=last_access,
        tier_since=tier_since,
        restore=RestoreState.from_json(loads(restore)) if restore else None,
        version_id=version_id,
    )
