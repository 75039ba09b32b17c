"""S3 handlers, one module per operation family. Importing the package registers them all."""

from server.handlers import (  # noqa: F401  (imported for their @handles registrations)
    access_api,
    buckets,
    copy,
    cors_api,
    delete,
    encryption_api,
    get,
    lifecycle_api,
    listing,
    multipart,
    object_lock,
    post_object,
    put,
    subresources,
)
from server.handlers.registry import HANDLERS, Handler

__all__ = ["HANDLERS", "Handler"]
