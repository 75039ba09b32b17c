"""server/cors.py as a pure library: documents round-trip, origins and headers match as on S3."""

from __future__ import annotations

import pytest

from server import errors as s3
from server.cors import CorsRule, allow_headers, match_rule, parse_cors, render_cors, wildcard_match


@pytest.mark.parametrize(
    ("pattern", "origin", "matches"),
    [
        ("*", "https://example.com", True),
        ("*", "null", True),
        ("https://example.com", "https://example.com", True),
        ("https://example.com", "https://example.com:8443", False),
        ("https://example.com", "https://EXAMPLE.com", False),  # origins compare case-sensitively
        ("https://*.example.com", "https://a.b.example.com", True),
        ("https://*.example.com", "https://example.com", False),
        ("https://example.com:*", "https://example.com:8443", True),
        ("https://a*a", "https://aa", True),
        ("https://a*a", "https://a", False),  # head and tail do not overlap
        ("prefix*", "bla.prefix", False),
    ],
)
def test_origin_patterns(pattern: str, origin: str, matches: bool) -> None:
    assert wildcard_match(pattern, origin) is matches


def test_the_first_rule_that_allows_everything_asked_wins() -> None:
    rules = [
        CorsRule(("https://*.example.com",), ("GET", "PUT"), allowed_headers=("x-amz-*", "Content-Type")),
        CorsRule(("*",), ("GET", "HEAD")),
    ]
    assert match_rule(rules, "https://www.example.com", "PUT", ["content-type", "x-amz-date"]) is rules[0]
    assert match_rule(rules, "https://www.example.com", "PUT", ["authorization"]) is None
    assert match_rule(rules, "https://www.example.com", "GET", ["authorization"]) is None
    assert match_rule(rules, "https://www.example.com", "GET") is rules[0]
    assert match_rule(rules, "https://other.org", "HEAD") is rules[1]
    assert match_rule(rules, "https://other.org", "DELETE") is None


def test_a_star_origin_answers_star_without_credentials() -> None:
    everyone = CorsRule(("*",), ("GET",), max_age=5)
    assert allow_headers(everyone, "https://x.org") == {
        "access-control-allow-origin": "*",
        "access-control-allow-methods": "GET",
        "access-control-max-age": "5",
        "vary": "Origin, Access-Control-Request-Headers, Access-Control-Request-Method",
    }
    site = CorsRule(("https://x.org",), ("GET", "PUT"), expose_headers=("ETag",))
    headers = allow_headers(site, "https://x.org", ["content-type"])
    assert headers["access-control-allow-origin"] == "https://x.org"
    assert headers["access-control-allow-credentials"] == "true"
    assert headers["access-control-allow-headers"] == "content-type"
    assert headers["access-control-expose-headers"] == "ETag"


def test_documents_round_trip_in_s3s_element_order() -> None:
    rules = [
        CorsRule(("https://a.com", "https://*.b.org"), ("GET", "PUT"), ("x-amz-*",), ("ETag",), 300, "r1"),
        CorsRule(("*",), ("HEAD",)),
    ]
    body = render_cors(rules)
    assert body.startswith(b'<?xml version="1.0" encoding="UTF-8"?>\n<CORSConfiguration xmlns=')
    assert b"<CORSRule><ID>r1</ID><AllowedMethod>GET</AllowedMethod>" in body
    assert b"<AllowedHeader>x-amz-*</AllowedHeader><MaxAgeSeconds>300</MaxAgeSeconds><ExposeHeader>" in body
    assert parse_cors(body) == rules


def test_structure_errors_come_before_value_errors() -> None:
    bad_method_and_unknown_element = (
        b"<CORSConfiguration><CORSRule><AllowedOrigin>*</AllowedOrigin><AllowedMethod>PATCH</AllowedMethod>"
        b"<AllowedHeaders>*</AllowedHeaders></CORSRule></CORSConfiguration>"
    )
    with pytest.raises(s3.MalformedXML):
        parse_cors(bad_method_and_unknown_element)
    with pytest.raises(s3.InvalidRequest):
        parse_cors(bad_method_and_unknown_element.replace(b"<AllowedHeaders>*</AllowedHeaders>", b""))
