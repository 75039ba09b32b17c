"""Request authentication for every API surface: SigV4 (header and presigned), SigV2 (header
and presigned), and the body rules they imply (aws-chunked streaming, chunk and trailer
signatures, x-amz-content-sha256).

Use:

    auth = authenticate(RequestToVerify(...), key_store)          # raises S3Error subclasses
    async for piece in PayloadReader(receive_body(), auth, headers):
        ...                                                        # verified bytes only

Handlers run only after `authenticate` returned; the body they read is verified as it flows.
"""

from server.signature.context import AuthContext, AuthScheme, PayloadMode
from server.signature.payload import PayloadReader
from server.signature.request import Credentials, RequestToVerify
from server.signature.verify import authenticate, has_credentials

__all__ = [
    "AuthContext",
    "AuthScheme",
    "Credentials",
    "PayloadMode",
    "PayloadReader",
    "RequestToVerify",
    "authenticate",
    "has_credentials",
]
