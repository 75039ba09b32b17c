"""Property tests for the HTTP-level parsers: Range headers, query strings (the router and the
signature must read them alike), and header text (RFC 2047 metadata, wire bytes).

Bounded and repeatable by default; `pytest --soak` or TIERSTORE_FUZZ=soak searches longer
(tests/fuzzing.py)."""

from __future__ import annotations

from email.header import decode_header, make_header

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from server.header_text import encode_rfc2047, metadata_text, wire_text
from server.http_semantics import ByteRange, RangeNotSatisfiable, parse_range
from server.router import parse_query
from server.signature.canonical import first_values, split_query
from tests.fuzzing import fuzz

# Header values reach us as latin-1 text (one character per wire byte): any of the 256.
latin1_text = st.text(st.characters(max_codepoint=0xFF), max_size=40)


# --- Range -------------------------------------------------------------------------------------------

specs = st.one_of(
    st.tuples(st.integers(0, 300), st.none() | st.integers(0, 300)).map(
        lambda p: f"{p[0]}-{'' if p[1] is None else p[1]}"
    ),
    st.integers(0, 300).map(lambda n: f"-{n}"),
)


def model(pieces: list[str], size: int) -> list[ByteRange] | None | str:
    """RFC 9110 14.1.2 as S3 applies it: a syntactically bad set is ignored (None), a set that
    selects nothing is unsatisfiable ("416")."""
    ranges: list[ByteRange] = []
    for piece in pieces:
        first, _, last = piece.partition("-")
        if not first:
            if int(last) and size:
                ranges.append(ByteRange(max(0, size - int(last)), size))
            continue
        if last and int(last) < int(first):
            return None
        if int(first) < size:
            ranges.append(ByteRange(int(first), min(size, int(last) + 1) if last else size))
    return ranges or "416"


@fuzz(300)
@given(st.lists(specs, min_size=1, max_size=5), st.integers(0, 200), st.sampled_from(["", " "]))
def test_well_formed_ranges_match_the_model(pieces: list[str], size: int, space: str) -> None:
    header = f"bytes={space}" + f",{space}".join(pieces)
    try:
        got: list[ByteRange] | None | str = parse_range(header, size)
    except RangeNotSatisfiable:
        got = "416"
    assert got == model(pieces, size)


@fuzz(500)
@given(latin1_text, st.integers(0, 10**6))
@example("bytes=\xb2-", 10)  # "²".isdigit() is True, but int("²") fails: was a 500
@example("bytes=0-\xb9", 10)
def test_any_range_header_is_ignored_refused_or_sane(header: str, size: int) -> None:
    try:
        ranges = parse_range(header, size)
    except RangeNotSatisfiable:
        return
    for r in ranges or []:
        assert 0 <= r.start < r.end <= size


# --- query strings ------------------------------------------------------------------------------------

query_text = st.text(st.sampled_from("ab=&+%2AF0é/ ?;x-Amz%C3%A9%zz"), max_size=40)


@fuzz(500)
@given(query_text)
@example("a=%C3&a=2")
@example("%41=1&A=2")
@example("x=a+b%2Bc")
def test_router_and_signature_read_a_query_alike(query: str) -> None:
    # The signature covers what the router routes on: both must see the same names and values.
    assert parse_query(query) == first_values(split_query(query))


# --- header text -------------------------------------------------------------------------------------

printable_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=60)


def decoded(value: str) -> str:
    return str(make_header(decode_header(value)))


@fuzz(500)
@given(printable_text)
@example("=?UTF-8?Q?looks_encoded?=")
@example("a?=b")
@example("café ☕")
@example("\x00\x7f")
def test_rfc2047_encoding_is_header_safe_and_decodes_back(text: str) -> None:
    encoded = encode_rfc2047(text)
    assert all(" " <= ch <= "~" or ch == "\t" for ch in encoded), encoded
    if encoded != text:
        assert decoded(encoded) == text


@fuzz(300)
@given(printable_text)
def test_utf8_metadata_is_stored_as_the_text_sent(text: str) -> None:
    wire = text.encode("utf-8").decode("latin-1")  # what Starlette hands us
    if "=?" not in text:
        assert metadata_text(wire) == text
    assert wire_text(wire) == text


@fuzz(300)
@given(st.binary(max_size=40))
def test_wire_text_keeps_every_byte(data: bytes) -> None:
    as_received = data.decode("latin-1")
    assert wire_text(as_received).encode("utf-8", "surrogateescape") == data
    assert isinstance(metadata_text(as_received), str)


@pytest.mark.parametrize("value", ["plain", "", "tab\tand space"])
def test_plain_ascii_metadata_is_returned_as_is(value: str) -> None:
    assert encode_rfc2047(value) == value
