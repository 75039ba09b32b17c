"""Property tests for the XML request bodies: DeleteObjects, Tagging, lifecycle and
Intelligent-Tiering configurations, CompleteMultipartUpload's document and the generic parser.

Any bytes at all must end in the parser's own refusal (an S3 error class, or `RuleError` for
the lifecycle library), never another exception; well-formed documents must round-trip.
Bounded and repeatable by default; `pytest --soak` searches longer (tests/fuzzing.py)."""

from __future__ import annotations

import random
from xml.sax.saxutils import escape

from hypothesis import example, given
from hypothesis import strategies as st

from lifecycle.intelligent_tiering import parse_intelligent_tiering
from lifecycle.rules import RuleError, parse_lifecycle, render_lifecycle
from server.errors import InvalidTag, MalformedXML, S3Error
from server.handlers.delete import parse_delete
from server.handlers.subresources import _tags_document, parse_tags
from server.xml_io import child_text, parse
from tests.fuzzing import fuzz

NS = "http://s3.amazonaws.com/doc/2006-03-01/"

# Text XML 1.0 can carry, without CR (an XML parser turns a literal CR into LF).
xml_chars = st.characters(
    exclude_categories=["Cs"],
    exclude_characters="".join(chr(c) for c in range(32) if c not in (9, 10)) + "\ufffe\uffff",
)
xml_text = st.text(xml_chars, max_size=30)
nonempty = st.text(xml_chars, min_size=1, max_size=30)

# Pieces that make near-miss documents: S3's element names, broken markup, entities, numbers.
TOKENS = [
    "<Delete>", "</Delete>", "<Object>", "</Object>", "<Key>", "</Key>", "<Quiet>", "</Quiet>",
    "<VersionId>", "</VersionId>", "<Tagging>", "</Tagging>", "<TagSet>", "</TagSet>", "<Tag>", "</Tag>",
    "<Value>", "</Value>", "<LifecycleConfiguration>", "</LifecycleConfiguration>", "<Rule>", "</Rule>",
    "<ID>", "</ID>", "<Filter>", "</Filter>", "<Filter/>", "<Prefix>", "</Prefix>", "<And>", "</And>",
    "<Status>", "</Status>", "Enabled", "Disabled", "<Expiration>", "</Expiration>", "<Days>", "</Days>",
    "<Date>", "</Date>", "<Transition>", "</Transition>", "<StorageClass>", "</StorageClass>", "GLACIER",
    "<AbortIncompleteMultipartUpload>", "</AbortIncompleteMultipartUpload>", "<DaysAfterInitiation>",
    "</DaysAfterInitiation>", "<ObjectSizeGreaterThan>", "</ObjectSizeGreaterThan>",
    "<IntelligentTieringConfiguration>", "</IntelligentTieringConfiguration>", "<Id>", "</Id>",
    "<Tiering>", "</Tiering>", "<AccessTier>", "</AccessTier>", "ARCHIVE_ACCESS",
    "<CompleteMultipartUpload>", "</CompleteMultipartUpload>", "<Part>", "</Part>", "<PartNumber>",
    "</PartNumber>", "<ETag>", "</ETag>", "1", "0", "-1", "2147483648", "1e3", "²", "٣", " ", "true",
    "2030-01-01T00:00:00Z", "2030-01-01T10:00:00Z", "&amp;", "&lt;", "&bogus;", "<![CDATA[x]]>",
    "<!-- c -->", "<?pi x?>", "<!DOCTYPE x>", "\x00", "\udcff", "é", "<", ">", "&", "/", '"',
    f' xmlns="{NS}"',
]  # fmt: skip


def near_miss_documents() -> st.SearchStrategy[bytes]:
    tokens = st.lists(st.sampled_from(TOKENS) | xml_text, max_size=40).map("".join)
    return tokens.map(lambda text: text.encode("utf-8", "surrogatepass"))


any_body = st.binary(max_size=300) | near_miss_documents()


def _only(errors: tuple[type[BaseException], ...], call: object, *args: object) -> None:
    try:
        call(*args)  # type: ignore[operator]
    except errors:
        pass


# --- any bytes -> only our refusals ----------------------------------------------------------------


@fuzz(400)
@given(any_body)
@example(b"<Delete><Object><Key>\xff</Key></Object></Delete>")
def test_generic_parser_only_raises_malformed_xml(body: bytes) -> None:
    _only((MalformedXML,), parse, body)


@fuzz(400)
@given(any_body)
def test_delete_objects_body_only_raises_s3_errors(body: bytes) -> None:
    _only((S3Error,), parse_delete, body)


@fuzz(400)
@given(any_body, st.sampled_from([10, 50]))
def test_tagging_body_only_raises_s3_errors(body: bytes, limit: int) -> None:
    _only((S3Error,), parse_tags, body, limit)


@fuzz(400)
@given(any_body)
@example(
    b"<LifecycleConfiguration><Rule><Filter/><Status>Enabled</Status><Expiration><Days>\xc2\xb2</Days>"
    b"</Expiration></Rule></LifecycleConfiguration>"
)
def test_lifecycle_body_only_raises_rule_errors(body: bytes) -> None:
    _only((RuleError,), parse_lifecycle, body)


@fuzz(300)
@given(any_body)
def test_intelligent_tiering_body_only_raises_rule_errors(body: bytes) -> None:
    _only((RuleError,), parse_intelligent_tiering, body)


@fuzz(300)
@given(any_body)
def test_complete_multipart_document_reads_without_surprises(body: bytes) -> None:
    # The handler reads <Part>s with parse + child_text; both must hold for any body.
    try:
        root = parse(body, "CompleteMultipartUpload")
    except MalformedXML:
        return
    for part in root.findall("Part"):
        for name in ("PartNumber", "ETag"):
            value = child_text(part, name)
            assert value is None or isinstance(value, str)


# --- well-formed documents round-trip --------------------------------------------------------------


def _element(name: str, text: str) -> str:
    return f"<{name}>{escape(text)}</{name}>"


@fuzz(300)
@given(
    st.lists(
        st.tuples(nonempty, st.none() | st.sampled_from(["null", "3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY"])),
        min_size=1,
        max_size=20,
    ),
    st.sampled_from([None, "true", "false", " TRUE "]),
    st.booleans(),
)
def test_delete_objects_round_trip(
    objects: list[tuple[str, str | None]], quiet: str | None, ns: bool
) -> None:
    entries = "".join(
        "<Object>" + _element("Key", key) + (_element("VersionId", v) if v is not None else "") + "</Object>"
        for key, v in objects
    )
    quiet_part = _element("Quiet", quiet) if quiet is not None else ""
    body = f"<Delete{f' xmlns={chr(34)}{NS}{chr(34)}' if ns else ''}>{quiet_part}{entries}</Delete>".encode()
    parsed_quiet, parsed = parse_delete(body)
    assert parsed_quiet == ((quiet or "").strip().lower() == "true")
    assert [(key, version) for key, version, condition in parsed] == objects
    assert not any(condition for _, _, condition in parsed)


tag_keys = st.text(xml_chars, min_size=1, max_size=128)
tag_values = st.text(xml_chars, max_size=256)


@fuzz(300)
@given(st.dictionaries(tag_keys, tag_values, max_size=10))
def test_tagging_round_trip(tags: dict[str, str]) -> None:
    assert parse_tags(_tags_document(tags), 10) == tags


@fuzz(100)
@given(st.dictionaries(tag_keys, tag_values, min_size=11, max_size=14))
def test_too_many_tags_are_refused(tags: dict[str, str]) -> None:
    try:
        parse_tags(_tags_document(tags), 10)
    except InvalidTag:
        return
    raise AssertionError("more than 10 tags accepted")


@fuzz(200)
@given(
    st.lists(
        st.sampled_from(
            [
                "<Filter></Filter>",
                "<Filter><Prefix>a/</Prefix></Filter>",
                "<Prefix>p</Prefix>",
                "<Filter><And><Prefix>x</Prefix><Tag><Key>k</Key><Value>v</Value></Tag></And></Filter>",
                "<Filter><ObjectSizeLessThan>100</ObjectSizeLessThan></Filter>",
            ]
        ),
        min_size=1,
        max_size=5,
    ),
    st.randoms(use_true_random=False),
)
def test_lifecycle_documents_read_back_as_written(filters: list[str], rnd: random.Random) -> None:
    actions = [
        "<Expiration><Days>{}</Days></Expiration>",
        "<Transition><Days>{}</Days><StorageClass>GLACIER</StorageClass></Transition>",
        "<AbortIncompleteMultipartUpload><DaysAfterInitiation>{}"
        "</DaysAfterInitiation></AbortIncompleteMultipartUpload>",
    ]
    rules = []
    for i, selector in enumerate(filters):
        action = rnd.choice(actions if "Tag" not in selector else actions[:2]).format(
            rnd.randint(1, 2**31 - 1)
        )
        rules.append(f"<Rule><ID>r{i}</ID>{selector}<Status>Enabled</Status>{action}</Rule>")
    body = f'<?xml version="1.0" encoding="UTF-8"?>\n<LifecycleConfiguration xmlns="{NS}">{"".join(rules)}</LifecycleConfiguration>'
    assert render_lifecycle(parse_lifecycle(body.encode())).decode() == body
