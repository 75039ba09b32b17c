"""Listing: one page of keys in UTF-8 byte order, common prefixes rolled up by index seeks."""

from __future__ import annotations

from tiering.catalog.base import (
    CatalogBase,
    _list_entry,
    _listing_rows,
    key_successor,
)
from tiering.errors import (
    BucketNotFound,
)
from tiering.records import (
    ListEntry,
    ListPage,
)


class ListingCatalog(CatalogBase):
    def list_objects(
        self,
        bucket: str,
        *,
        prefix: str = "",
        delimiter: str = "",
        start_after: str = "",
        max_keys: int = 1000,
    ) -> ListPage:
        """One page of keys in UTF-8 binary order, with common prefixes rolled up.

        An ordered index scan: each common prefix costs one seek past its keys, so the cost of
        a page depends on the page, not on the bucket's size.
        """
        db = self._reader()
        if db.execute("SELECT 1 FROM buckets WHERE name = ?", (bucket,)).fetchone() is None:
            raise BucketNotFound(bucket)
        if max_keys <= 0:
            return ListPage([], [], False, None)
        upper = key_successor(prefix) if prefix else None
        # Lower bound: strictly after start_after, and at or after the prefix.
        if start_after and start_after >= prefix:
            lower, inclusive = start_after, False
        else:
            lower, inclusive = prefix, True
        if not delimiter:
            # Nothing rolls up: the page is the next max_keys rows of the index, fetched in one call
            # (one more tells whether the listing goes on).
            rows = _listing_rows(db, bucket, lower, inclusive, upper, max_keys + 1).fetchall()
            entries = list(map(_list_entry, rows[:max_keys]))
            return ListPage(entries, [], len(rows) > max_keys, entries[-1].key if entries else None)
        objects: list[ListEntry] = []
        prefixes: list[str] = []
        last: str | None = None
        batch = min(max_keys + 1, 1001)
        while True:
            # Iterate the cursor lazily: after a seek past a common prefix the rest of the batch
            # is never stepped, so each prefix costs one index seek, not a batch of rows.
            cursor = _listing_rows(db, bucket, lower, inclusive, upper, batch)
            seen = 0
            sought = False
            for row in cursor:
                seen += 1
                key: str = row[0]
                cut = key.find(delimiter, len(prefix))
                if cut >= 0:
                    common = key[: cut + len(delimiter)]
                    if len(objects) + len(prefixes) >= max_keys:
                        cursor.close()
                        return ListPage(objects, prefixes, True, last)
                    if not (start_after and common <= start_after):
                        prefixes.append(common)
                        last = common
                    # Skip every other key under this prefix with one seek.
                    successor = key_successor(common)
                    cursor.close()
                    if successor is None:
                        return ListPage(objects, prefixes, False, last)
                    lower, inclusive = successor, True
                    sought = True
                    break
                if len(objects) + len(prefixes) >= max_keys:
                    cursor.close()
                    return ListPage(objects, prefixes, True, last)
                objects.append(_list_entry(row))
                last = key
            if not sought:
                if seen < batch:
                    return ListPage(objects, prefixes, False, last)
                lower, inclusive = last or lower, False
