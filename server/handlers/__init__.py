"""S3 handlers, one module per operation family. Importing the package registers them all."""

from server.handlers import (  # noqa: F401  (imported for their @handles registrations)
    buckets,
    copy,
    delete,
    encryption_api,
    get,
    lifecycle_api,
    listing,
    multipart,
    put,
    subresources,
)
from server.handlers.registry import HANDLERS, Handler

__all__ = ["HANDLERS", "Handler"]
