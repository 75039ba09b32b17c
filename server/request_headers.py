"""Request headers with constant-time lookups, compiled in the optional build (setup.py).

Starlette's `Headers` scans the raw header list and lower-cases and encodes the name on every
lookup; one signed 4 KiB GET asks for about twenty headers (signature, routing, CORS, encryption,
conditions) and a PUT about fifty, which was ~10 % of the gateway's own CPU per request.
`RequestHeaders` decodes the list once into a dict of first values and answers `[]`, `get` and
`in` from it, and keeps the decoded pairs for `items` (a PUT reads them all for its metadata).

Not a subclass of Starlette's `Headers`, though it answers the same questions (and Starlette's
own `Request` reads it back as its `headers`): as a subclass of an interpreted class it could not
be compiled, and every lookup was an interpreted call of ~1,000 instructions (a 4 KiB PUT made
54 of them; bench/RESULTS.md, "Interpreted calls off a small request's path").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import overload

from starlette.requests import HTTPConnection

# Lower-cased header names, by the name asked for: `str.lower` makes a new string on every call,
# whose hash the dict lookup then computes afresh (~500 instructions a lookup, 50 lookups a PUT).
# Callers ask with a few dozen literal names. SigV4 also asks for every name a client lists in
# its SignedHeaders, any text it likes: the bounds keep such names from growing the cache for
# ever (at most 1,024 names of at most 64 characters: 64 KiB a process).
_LOWER: dict[str, str] = {}
_LOWER_MAX = 1024
_LOWER_NAME_MAX = 64


def _lower(name: str) -> str:
    lowered = _LOWER.get(name)
    if lowered is None:
        lowered = name.lower()
        if len(_LOWER) < _LOWER_MAX and len(name) <= _LOWER_NAME_MAX:
            _LOWER[name] = lowered
    return lowered


class RequestHeaders:
    """The headers of one request (immutable), looked up through a dict.

    The first occurrence of a name wins, as in Starlette's `Headers.__getitem__`; ASGI servers
    hand over header names in lower case, so a lookup lower-cases only the name asked for.
    `keys`, `items`, iteration and `getlist` see every occurrence, in order, as Starlette's do.
    """

    def __init__(self, pairs: list[tuple[str, str]], raw: list[tuple[bytes, bytes]]) -> None:
        self._pairs = pairs  # (name, value) in order, names in lower case
        self.raw = raw  # as Starlette's `Headers.raw`: the byte pairs as received
        first: dict[str, str] = {}
        repeated = False
        for name, value in pairs:
            if name not in first:
                first[name] = value
            else:
                repeated = True
        self._first = first
        self._repeated = repeated

    def __getitem__(self, key: str) -> str:
        try:
            return self._first[_lower(key)]
        except KeyError:
            raise KeyError(key) from None

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and _lower(key) in self._first

    @overload
    def get(self, key: str, /) -> str | None: ...

    @overload
    def get(self, key: str, default: str, /) -> str: ...

    def get(self, key: str, default: str | None = None, /) -> str | None:
        return self._first.get(_lower(key), default)

    def getlist(self, key: str) -> list[str]:
        name = key.lower()
        return [value for each, value in self._pairs if each == name]

    def signed(self) -> RequestHeaders:
        """The headers as signatures cover them: a repeated name's values stripped and joined with
        "," (AWS's canonical form in SigV4's CanonicalHeaders and SigV2's x-amz-* lines; botocore
        signs so), where every other reader takes the first value alone. Itself when no name repeats."""
        if not self._repeated:
            return self
        joined: dict[str, list[str]] = {}
        for name, value in self._pairs:
            joined.setdefault(name, []).append(value.strip())
        pairs = [(name, ",".join(values)) for name, values in joined.items()]
        return RequestHeaders(
            pairs, [(name.encode("latin-1"), value.encode("latin-1")) for name, value in pairs]
        )

    def keys(self) -> list[str]:
        return [name for name, _ in self._pairs]

    def values(self) -> list[str]:
        return [value for _, value in self._pairs]

    def items(self) -> list[tuple[str, str]]:
        return list(self._pairs)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self._pairs)

    def __repr__(self) -> str:
        return f"RequestHeaders({self._pairs!r})"


def asgi_headers(raw: list[tuple[bytes, bytes]]) -> RequestHeaders:
    """An ASGI scope's `headers`: names already in lower case, bytes read as Latin-1 (as Starlette)."""
    return RequestHeaders([(name.decode("latin-1"), value.decode("latin-1")) for name, value in raw], raw)


def headers_from(values: Mapping[str, str]) -> RequestHeaders:
    """Headers made of names and values (a browser form's fields standing in for headers: any
    text, so `raw` holds them as UTF-8)."""
    pairs = [(name.lower(), value) for name, value in values.items()]
    return RequestHeaders(pairs, [(name.encode(), value.encode()) for name, value in pairs])


def headers_of(request: HTTPConnection) -> RequestHeaders:
    """`request`'s headers as `RequestHeaders`, built once and kept where Starlette's own
    `request.headers` finds them (its `_headers`)."""
    headers = getattr(request, "_headers", None)
    if not isinstance(headers, RequestHeaders):
        headers = asgi_headers(request.scope["headers"])
        request._headers = headers  # type: ignore[assignment]  # answers what Starlette asks of its Headers
    return headers
