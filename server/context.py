"""What a handler gets: the routed, authenticated request and the gateway's shared parts.

Compiled in the optional build (setup.py): a request asks its S3Request for headers, bucket and
key a dozen times or more. So no async generator here (the body's reader is
server/signature/payload.py's) and S3Request's `__init__` is written out (tiering/records.py says why).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from starlette.requests import Request

# Every field's type is imported at run time, not only for the type checker: compiled, S3Request
# is a native dataclass, and building the class looks its field types up.
from lifecycle.runtime import Lifecycle
from server.authorization import Authorizer
from server.config import ServerConfig
from server.cors import CorsRules
from server.credentials import Identity, UserCredentials
from server.errors import InvalidRequest, MalformedXML, NoSuchBucket
from server.operations import Operation
from server.request_headers import RequestHeaders
from server.signature import AuthContext, PayloadReader
from server.signature.payload import body_chunks
from server.xml_io import MAX_XML_BODY
from tiering.store import ObjectStore


@dataclass
class S3Request:
    operation: Operation
    bucket_name: str | None
    key_name: str | None
    query: dict[str, str]
    headers: RequestHeaders
    request: Request
    auth: AuthContext
    store: ObjectStore
    config: ServerConfig
    request_id: str
    lifecycle: Lifecycle | None = None
    identity: Identity | None = None
    authorizer: Authorizer | None = None
    cors: CorsRules | None = None  # the gateway's cache of bucket CORS rules (server/cors.py)
    credentials: UserCredentials | None = None  # for a signature inside the body (PostObject)
    _payload: PayloadReader | None = field(default=None, repr=False)

    def __init__(
        self,
        operation: Operation,
        bucket_name: str | None,
        key_name: str | None,
        query: dict[str, str],
        headers: RequestHeaders,
        request: Request,
        auth: AuthContext,
        store: ObjectStore,
        config: ServerConfig,
        request_id: str,
        lifecycle: Lifecycle | None = None,
        identity: Identity | None = None,
        authorizer: Authorizer | None = None,
        cors: CorsRules | None = None,
        credentials: UserCredentials | None = None,
        _payload: PayloadReader | None = None,
    ) -> None:  # written out (the module's docstring)
        self.operation = operation
        self.bucket_name = bucket_name
        self.key_name = key_name
        self.query = query
        self.headers = headers
        self.request = request
        self.auth = auth
        self.store = store
        self.config = config
        self.request_id = request_id
        self.lifecycle = lifecycle
        self.identity = identity
        self.authorizer = authorizer
        self.cors = cors
        self.credentials = credentials
        self._payload = _payload

    @property
    def bucket(self) -> str:
        if not self.bucket_name:
            raise NoSuchBucket()
        return self.bucket_name

    @property
    def key(self) -> str:
        if self.key_name is None:
            raise InvalidRequest("A key is required")
        return self.key_name

    @property
    def method(self) -> str:
        return self.request.method

    def header(self, name: str) -> str | None:
        return self.headers.get(name)

    def payload(self) -> PayloadReader:
        """The decoded request body (aws-chunked framing removed, signatures checked)."""
        if self._payload is None:
            request = self.request
            self._payload = PayloadReader(
                body_chunks(request.stream()), self.auth, self.headers, request.receive
            )
        return self._payload

    @property
    def content_length(self) -> int | None:
        """The size of the object's bytes, as the client declared it (decoded length for aws-chunked)."""
        value = self.headers.get("x-amz-decoded-content-length") or self.headers.get("content-length")
        if value is None:
            return None
        try:
            return int(value)
        except ValueError:
            raise InvalidRequest("Content-Length is not a number") from None

    async def small_body(self, limit: int = MAX_XML_BODY) -> bytes:
        """Read a whole small body (an XML document). Refuses more than `limit` bytes."""
        declared = self.content_length
        if declared is not None and declared > limit:
            raise MalformedXML("The XML document is too large")
        parts: list[bytes] = []
        size = 0
        async for chunk in self.payload():
            size += len(chunk)
            if size > limit:
                raise MalformedXML("The XML document is too large")
            parts.append(chunk)
        return b"".join(parts)
