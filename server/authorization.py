"""Who may do what: the access class of each operation (server.operations.ACCESS) against the
bucket's owner. Administrators may do everything; any other user only touches buckets it owns.
"""

from __future__ import annotations

import time

from server.credentials import Identity
from server.errors import AccessDenied
from server.operations import ACCESS, Access, Operation
from tiering.errors import BucketNotFound
from tiering.store import ObjectStore

OWNER_CACHE_SECONDS = 1.0


class Authorizer:
    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        # bucket → (when looked up, owner id): HEAD-every-path mount tools must not cost a
        # catalog read each just for this check.
        self._owners: dict[str, tuple[float, str | None]] = {}

    async def bucket_owner(self, bucket: str) -> str | None:
        now = time.monotonic()
        cached = self._owners.get(bucket)
        if cached is not None and now - cached[0] < OWNER_CACHE_SECONDS:
            return cached[1]
        try:
            owner: str | None = (await self.store.get_bucket(bucket)).owner
        except BucketNotFound:
            owner = None
        if len(self._owners) > 10_000:
            self._owners.clear()
        self._owners[bucket] = (now, owner)
        return owner

    async def check(self, identity: Identity, operation: Operation, bucket: str | None) -> None:
        """Raise AccessDenied unless `identity` may run `operation` on `bucket`."""
        if identity.is_admin or ACCESS[operation] is Access.SERVICE or not bucket:
            return
        owner = await self.bucket_owner(bucket)
        if owner is not None and owner != identity.owner_id:
            raise AccessDenied()
        # A missing bucket is left to the handler: it answers NoSuchBucket.

    async def check_read(self, identity: Identity, bucket: str) -> None:
        """A copy's source bucket: reading it needs the same ownership."""
        await self.check(identity, Operation.GetObject, bucket)
