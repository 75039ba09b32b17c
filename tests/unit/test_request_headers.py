"""RequestHeaders answers what Starlette's Headers answers, from a dict built once."""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.requests import Request

from server.request_headers import RequestHeaders, asgi_headers, headers_from, headers_of

RAW = [
    (b"host", b"127.0.0.1:9000"),
    (b"x-amz-meta-a", b"1"),
    (b"x-amz-meta-a", b"2"),
    (b"content-type", b"text/caf\xe9"),
]


def test_answers_as_starlettes_headers_do() -> None:
    ours, theirs = asgi_headers(RAW), Headers(raw=RAW)
    for name in ("host", "Host", "X-Amz-Meta-A", "content-type", "missing"):
        assert ours.get(name) == theirs.get(name)
        assert ours.get(name, "") == theirs.get(name, "")
        assert (name in ours) == (name in theirs)
        assert ours.getlist(name) == theirs.getlist(name)
    assert ours["X-AMZ-META-A"] == theirs["X-AMZ-META-A"] == "1"  # the first occurrence wins
    assert ours.keys() == theirs.keys() and list(ours) == list(theirs)
    assert ours.values() == theirs.values()
    assert ours.items() == theirs.items()
    assert len(ours) == len(theirs) == 4
    assert ours.raw == theirs.raw == RAW
    assert 7 not in ours


def test_a_missing_name_raises_key_error_with_the_name_asked() -> None:
    try:
        asgi_headers(RAW)["X-Missing"]
    except KeyError as exc:
        assert exc.args == ("X-Missing",)
    else:
        raise AssertionError("no KeyError")


def test_form_fields_keep_any_text() -> None:
    # A browser form's fields stand in for headers (PostObject): not limited to Latin-1.
    headers = headers_from({"Content-Type": "text/plain", "x-amz-meta-name": "日本"})
    assert headers["content-type"] == "text/plain"
    assert headers.get("X-Amz-Meta-Name") == "日本"
    assert headers.raw[1] == (b"x-amz-meta-name", "日本".encode())


def test_starlettes_request_reads_them_back() -> None:
    scope = {"type": "http", "method": "GET", "path": "/", "headers": RAW, "query_string": b""}
    request = Request(scope)
    headers = headers_of(request)
    assert isinstance(headers, RequestHeaders)
    assert headers_of(request) is headers  # built once
    assert request.headers is headers  # type: ignore[comparison-overlap]  # Starlette's own property
    assert request.headers.get("host") == "127.0.0.1:9000"


def test_names_a_client_chooses_do_not_grow_the_name_cache_without_bound() -> None:
    """SigV4 looks up every name a client signs: long or countless names answer right and the
    cache of lower-cased names stays within its bounds."""
    from server import request_headers

    headers = asgi_headers([(b"x-amz-meta-" + b"a" * 300, b"long")])
    assert headers.get("X-Amz-Meta-" + "A" * 300) == "long"
    for n in range(3000):
        assert headers.get(f"X-Client-Chosen-{n}") is None
    assert len(request_headers._LOWER) <= request_headers._LOWER_MAX
    assert all(len(name) <= request_headers._LOWER_NAME_MAX for name in request_headers._LOWER)


def test_signatures_see_a_repeated_name_as_its_values_joined() -> None:
    # SigV4 and SigV2 sign a repeated header as its values, each stripped, joined with "," (AWS's
    # canonical form); everything else reads the first value.
    headers = asgi_headers(
        [
            (b"host", b"h"),
            (b"x-amz-meta-a", b" one "),
            (b"x-amz-date", b"d"),
            (b"x-amz-meta-a", b"two  three"),
        ]
    )
    signed = headers.signed()
    assert signed.items() == [("host", "h"), ("x-amz-meta-a", "one,two  three"), ("x-amz-date", "d")]
    assert signed["X-Amz-Meta-A"] == "one,two  three" and headers["x-amz-meta-a"] == " one "
    once = asgi_headers([(b"host", b"h"), (b"x-amz-meta-a", b" one ")])
    assert once.signed() is once  # no name repeats: no copy, and values as sent
