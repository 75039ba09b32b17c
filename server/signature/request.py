"""What the verifier needs to know about an HTTP request, and where secrets come from.

The gateway builds one `RequestToVerify` per request from the ASGI scope; nothing in this
package touches Starlette/FastAPI objects, so every API surface (S3, admin, ...) shares it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, overload


class HeaderLookup(Protocol):
    """What the verifier asks of a request's headers (lower-case names): Starlette's `Headers`,
    the gateway's `RequestHeaders` (server/request_headers.py) and a plain dict all answer it."""

    @overload
    def get(self, key: str, /) -> str | None: ...

    @overload
    def get(self, key: str, default: str, /) -> str: ...

    def __getitem__(self, key: str, /) -> str: ...

    def __contains__(self, key: object, /) -> bool: ...

    def keys(self) -> Iterable[str]: ...

    def items(self) -> Iterable[tuple[str, str]]: ...


@dataclass(frozen=True)
class RequestToVerify:
    """The parts of a request that signatures cover, exactly as they came over the wire."""

    method: str
    # Path as sent, still percent-encoded ("/bkt/a%20b//c"). Characters outside ASCII are taken as
    # UTF-8 text; decode ASGI's raw_path bytes with ("utf-8", "surrogateescape") to keep any byte.
    raw_path: str
    # Query string as sent, without the leading "?" ("" when there is none).
    query_string: str
    # Lower-case header names; repeated headers already joined with ",".
    headers: HeaderLookup
    # Bucket taken from the Host header (virtual-hosted style): SigV2's canonical resource is
    # "/bucket/key" even when the path on the wire is only "/key".
    virtual_host_bucket: str | None = None


class Credentials(Protocol):
    """Where the verifier looks up secrets; the gateway passes its key store."""

    def secret_for(self, access_key: str) -> str | None:
        """The secret key of `access_key`, or None when the key is unknown."""
        ...
