"""URI, query and header canonicalisation shared by SigV4 and SigV2.

S3 signs the path *without* normalisation: "//" and "." segments are part of the key. We decode
the path as sent and re-encode every byte the AWS way (unreserved A-Za-z0-9-_.~ and "/" kept,
everything else %XX upper-case), which is exactly what botocore and the other SDKs put on the
wire and sign. Decoding works on bytes so that keys which are not valid UTF-8 survive.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote_from_bytes, unquote_to_bytes


@dataclass(frozen=True, slots=True)
class QueryParam:
    """One `name[=value]` piece of a query string, still encoded as sent."""

    raw_name: str
    raw_value: str | None  # None when the piece had no "=" at all ("?uploads")

    @property
    def name(self) -> str:
        return decode_text(self.raw_name)

    @property
    def value(self) -> str:
        return decode_text(self.raw_value or "")


# A path of only the characters AWS URI encoding leaves alone ("/" included), and no "%".
_ENCODED_AS_IS = re.compile(r"[A-Za-z0-9_.~/-]*")


def _to_bytes(text: str) -> bytes:
    # surrogateescape lets a gateway hand us arbitrary raw bytes decoded the same way.
    return text.encode("utf-8", "surrogateescape")


def decode_component(raw: str, *, plus_is_space: bool) -> bytes:
    """Percent-decode one path or query component to bytes (invalid escapes stay literal)."""
    data = _to_bytes(raw)
    if plus_is_space:
        # Form encoding: the router reads "+" in a query as a space, so the signature must too,
        # or a signed "a%20b" and an unsigned "a+b" would mean different things to each.
        data = data.replace(b"+", b" ")
    return unquote_to_bytes(data)


def decode_text(raw: str) -> str:
    """Decode a query component for reading (parameter values such as X-Amz-Credential)."""
    return decode_component(raw, plus_is_space=True).decode("utf-8", "replace")


def uri_encode(data: bytes, *, keep_slash: bool) -> str:
    """AWS URI encoding: unreserved bytes kept, everything else %XX with upper-case hex."""
    # quote_from_bytes always keeps A-Za-z0-9 and "_.-~" and emits upper-case hex.
    return quote_from_bytes(data, safe="/" if keep_slash else "")


def canonical_uri(raw_path: str) -> str:
    """The SigV4 canonical URI of an S3 request path (not normalised)."""
    if not raw_path:
        return "/"
    if _ENCODED_AS_IS.fullmatch(raw_path):
        return raw_path  # only bytes URI encoding keeps: decoding and encoding give it back
    return uri_encode(decode_component(raw_path, plus_is_space=False), keep_slash=True)


def split_query(query_string: str) -> list[QueryParam]:
    """Split a raw query string into its pieces, in order, keeping their encoding."""
    params: list[QueryParam] = []
    for piece in query_string.split("&"):
        if not piece:
            continue  # "a=1&&b=2": empty pieces carry nothing and no SDK signs them
        name, sep, value = piece.partition("=")
        params.append(QueryParam(name, value if sep else None))
    return params


def first_values(params: list[QueryParam]) -> dict[str, str]:
    """Decoded name -> decoded value, first occurrence winning (auth parameters are single)."""
    found: dict[str, str] = {}
    for param in params:
        found.setdefault(param.name, param.value)
    return found


def canonical_query(params: list[QueryParam], *, exclude: frozenset[str] = frozenset()) -> str:
    """The SigV4 canonical query string: encoded pairs sorted by name, then value."""
    pairs: list[tuple[str, str]] = []
    for param in params:
        name = decode_component(param.raw_name, plus_is_space=True)
        if exclude and name.decode("utf-8", "replace") in exclude:
            continue
        value = decode_component(param.raw_value or "", plus_is_space=True)
        pairs.append((uri_encode(name, keep_slash=False), uri_encode(value, keep_slash=False)))
    pairs.sort()
    return "&".join(f"{name}={value}" for name, value in pairs)


def trim_all(value: str) -> str:
    """SigV4 Trimall: strip, and collapse runs of whitespace to one space."""
    return " ".join(value.split())
