"""S3 Intelligent-Tiering archive configurations: parse, validate, render, and it_action."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lifecycle.facts import DAY, Action, ActionKind, ObjectFacts
from lifecycle.intelligent_tiering import (
    ARCHIVE_ACCESS,
    DEEP_ARCHIVE_ACCESS,
    IntelligentTieringConfig,
    ITPolicy,
    RuleError,
    Tiering,
    it_action,
    parse_intelligent_tiering,
    render_intelligent_tiering,
    render_intelligent_tiering_list,
)
from lifecycle.rules import Filter

NS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'
T0 = 1_700_000_000.0
BIG = 1 << 20

# Adapted from the PutBucketIntelligentTieringConfiguration request syntax.
AWS_EXAMPLE = b"""<?xml version="1.0" encoding="UTF-8"?>
<IntelligentTieringConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
   <Id>ExampleConfig</Id>
   <Filter>
      <And>
         <Prefix>images/</Prefix>
         <Tag><Key>project</Key><Value>alpha</Value></Tag>
      </And>
   </Filter>
   <Status>Enabled</Status>
   <Tiering>
      <Days>90</Days>
      <AccessTier>ARCHIVE_ACCESS</AccessTier>
   </Tiering>
   <Tiering>
      <Days>180</Days>
      <AccessTier>DEEP_ARCHIVE_ACCESS</AccessTier>
   </Tiering>
</IntelligentTieringConfiguration>"""


def it_doc(body: str, *, id_: str | None = "cfg", status: str = "Enabled") -> bytes:
    id_part = f"<Id>{id_}</Id>" if id_ is not None else ""
    return f"<IntelligentTieringConfiguration>{id_part}<Status>{status}</Status>{body}</IntelligentTieringConfiguration>".encode()


def tiering(days: int, tier: str = ARCHIVE_ACCESS) -> str:
    return f"<Tiering><Days>{days}</Days><AccessTier>{tier}</AccessTier></Tiering>"


def obj(
    key: str = "images/a.png",
    *,
    size: int = BIG,
    tags: dict[str, str] | None = None,
    storage_class: str = "INTELLIGENT_TIERING",
    tier: str = "hot",
    last_access: float = T0,
) -> ObjectFacts:
    return ObjectFacts(
        key,
        size,
        tags if tags is not None else {"project": "alpha"},
        storage_class,
        tier,
        T0 - 10 * DAY,
        last_access,
        0.0,
    )


def it_action_of(
    configs: list[IntelligentTieringConfig], facts: ObjectFacts, now: float, policy: ITPolicy
) -> Action:
    """`it_action` where the test expects a move: None fails here, not as an AttributeError."""
    action = it_action(configs, facts, now, policy)
    assert action is not None, f"no action for {facts.key} at {now}"
    return action


def test_parse_aws_example() -> None:
    config = parse_intelligent_tiering(AWS_EXAMPLE)
    assert config == IntelligentTieringConfig(
        id="ExampleConfig",
        enabled=True,
        filter=Filter("images/", {"project": "alpha"}),
        tierings=(Tiering(90, ARCHIVE_ACCESS), Tiering(180, DEEP_ARCHIVE_ACCESS)),
    )


def test_filter_is_optional_and_every_single_predicate_form_parses() -> None:
    assert parse_intelligent_tiering(it_doc(tiering(90))).filter == Filter()
    with_prefix = it_doc("<Filter><Prefix>p/</Prefix></Filter>" + tiering(90))
    assert parse_intelligent_tiering(with_prefix).filter == Filter("p/")
    with_tag = it_doc("<Filter><Tag><Key>k</Key><Value>v</Value></Tag></Filter>" + tiering(90))
    assert parse_intelligent_tiering(with_tag).filter == Filter(tags={"k": "v"})


@pytest.mark.parametrize(
    ("xml", "code"),
    [
        (b"", "MalformedXML"),
        (b"<LifecycleConfiguration/>", "MalformedXML"),
        (it_doc(tiering(90), id_=None), "MalformedXML"),
        (it_doc(tiering(90), id_=""), "InvalidArgument"),
        (it_doc(tiering(90), status="On"), "MalformedXML"),
        (it_doc(""), "MalformedXML"),
        (it_doc(tiering(89)), "InvalidArgument"),
        (it_doc(tiering(731)), "InvalidArgument"),
        (it_doc(tiering(179, DEEP_ARCHIVE_ACCESS)), "InvalidArgument"),
        (it_doc(tiering(731, DEEP_ARCHIVE_ACCESS)), "InvalidArgument"),
        (it_doc(tiering(90) + tiering(100)), "InvalidArgument"),
        (it_doc(tiering(200) + tiering(200, DEEP_ARCHIVE_ACCESS)), "InvalidArgument"),
        (it_doc(tiering(90, "GLACIER")), "MalformedXML"),
        (it_doc("<Tiering><Days>90</Days></Tiering>"), "MalformedXML"),
        (
            it_doc("<Tiering><Days>ninety</Days><AccessTier>ARCHIVE_ACCESS</AccessTier></Tiering>"),
            "MalformedXML",
        ),
        (
            it_doc("<Filter><ObjectSizeGreaterThan>5</ObjectSizeGreaterThan></Filter>" + tiering(90)),
            "MalformedXML",
        ),
        (it_doc("<Filter><Prefix>a</Prefix><Tag><Key>k</Key></Tag></Filter>" + tiering(90)), "MalformedXML"),
        (it_doc("<Bogus/>" + tiering(90)), "MalformedXML"),
    ],
)
def test_validation_errors(xml: bytes, code: str) -> None:
    with pytest.raises(RuleError) as info:
        parse_intelligent_tiering(xml)
    assert info.value.s3_code == code, info.value.detail


def test_bounds_are_inclusive() -> None:
    for body in (
        tiering(90),
        tiering(730),
        tiering(180, DEEP_ARCHIVE_ACCESS),
        tiering(730, DEEP_ARCHIVE_ACCESS),
        tiering(100) + tiering(180, DEEP_ARCHIVE_ACCESS),
    ):
        parse_intelligent_tiering(it_doc(body))


def test_render_matches_get_output() -> None:
    body = render_intelligent_tiering(parse_intelligent_tiering(AWS_EXAMPLE)).decode()
    assert body == (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<IntelligentTieringConfiguration {NS}><Id>ExampleConfig</Id>"
        "<Filter><And><Prefix>images/</Prefix><Tag><Key>project</Key><Value>alpha</Value></Tag></And></Filter>"
        "<Status>Enabled</Status>"
        "<Tiering><Days>90</Days><AccessTier>ARCHIVE_ACCESS</AccessTier></Tiering>"
        "<Tiering><Days>180</Days><AccessTier>DEEP_ARCHIVE_ACCESS</AccessTier></Tiering>"
        "</IntelligentTieringConfiguration>"
    )
    unfiltered = render_intelligent_tiering(parse_intelligent_tiering(it_doc(tiering(90)))).decode()
    assert "<Filter>" not in unfiltered


def test_render_list_sorted_and_not_truncated() -> None:
    a = parse_intelligent_tiering(it_doc(tiering(90), id_="b"))
    b = parse_intelligent_tiering(it_doc(tiering(91), id_="a"))
    body = render_intelligent_tiering_list([a, b]).decode()
    assert body.startswith(
        f'<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketIntelligentTieringConfigurationsOutput {NS}>'
        "<IsTruncated>false</IsTruncated><IntelligentTieringConfiguration><Id>a</Id>"
    )
    assert body.index("<Id>a</Id>") < body.index("<Id>b</Id>")
    assert body.endswith("</ListBucketIntelligentTieringConfigurationsOutput>")
    empty = render_intelligent_tiering_list([]).decode()
    assert "<IsTruncated>false</IsTruncated></ListBucketIntelligentTieringConfigurationsOutput>" in empty


# --- it_action ----------------------------------------------------------------------------------

CONFIG = IntelligentTieringConfig(
    "cfg", True, Filter("images/"), (Tiering(90, ARCHIVE_ACCESS), Tiering(180, DEEP_ARCHIVE_ACCESS))
)
POLICY = ITPolicy()


def test_only_monitored_objects() -> None:
    idle_long = T0 + 365 * DAY
    assert it_action([CONFIG], obj(storage_class="STANDARD"), idle_long, POLICY) is None
    assert it_action([CONFIG], obj(size=128 * 1024 - 1), idle_long, POLICY) is None
    assert it_action([CONFIG], obj(size=128 * 1024), idle_long, POLICY) is not None


def test_frequent_to_infrequent_to_archive_to_deep_archive() -> None:
    o = obj()
    assert it_action([CONFIG], o, T0 + 29 * DAY, POLICY) is None
    assert it_action([CONFIG], o, T0 + 30 * DAY, POLICY) == Action(
        ActionKind.TRANSITION, "WARM", "", "infrequent"
    )
    warm = obj(tier="warm")
    assert it_action([CONFIG], warm, T0 + 60 * DAY, POLICY) is None
    assert it_action([CONFIG], warm, T0 + 90 * DAY, POLICY) == Action(
        ActionKind.TRANSITION, "COLD", "cfg", "archive"
    )
    assert it_action([CONFIG], warm, T0 + 180 * DAY, POLICY) == Action(
        ActionKind.TRANSITION, "COLD", "cfg", "deep-archive"
    )
    # Straight from frequent when it was idle long enough; nothing more once it is cold.
    assert it_action_of([CONFIG], o, T0 + 100 * DAY, POLICY).reason == "archive"
    assert it_action([CONFIG], obj(tier="cold"), T0 + 400 * DAY, POLICY) is None


def test_gpu_direct_counts_as_frequent() -> None:
    assert it_action_of([], obj(tier="gpu-direct"), T0 + 31 * DAY, POLICY).storage_class == "WARM"


def test_without_archive_configs_it_stops_at_warm() -> None:
    assert it_action([], obj(tier="warm"), T0 + 1000 * DAY, POLICY) is None
    disabled = IntelligentTieringConfig("off", False, Filter(), (Tiering(90, ARCHIVE_ACCESS),))
    assert it_action([disabled], obj(tier="warm"), T0 + 1000 * DAY, POLICY) is None


def test_filters_select_configs_and_deepest_wins() -> None:
    other = IntelligentTieringConfig("logs", True, Filter("logs/"), (Tiering(90, ARCHIVE_ACCESS),))
    tagged = IntelligentTieringConfig(
        "tagged", True, Filter(tags={"project": "alpha"}), (Tiering(200, DEEP_ARCHIVE_ACCESS),)
    )
    plain = IntelligentTieringConfig("all", True, Filter(), (Tiering(120, ARCHIVE_ACCESS),))
    configs = [other, plain, tagged]
    assert it_action(configs, obj(tier="warm"), T0 + 100 * DAY, POLICY) is None
    assert it_action_of(configs, obj(tier="warm"), T0 + 150 * DAY, POLICY).rule_id == "all"
    assert it_action_of(configs, obj(tier="warm"), T0 + 250 * DAY, POLICY).rule_id == "tagged"
    assert it_action_of(configs, obj(tier="warm", tags={}), T0 + 250 * DAY, POLICY).rule_id == "all"


def test_an_access_resets_the_idle_clock() -> None:
    assert it_action([CONFIG], obj(last_access=T0 + 80 * DAY), T0 + 100 * DAY, POLICY) is None


def test_policy_knobs() -> None:
    quick = ITPolicy(infrequent_after_days=1.0, min_monitored_size=0)
    assert it_action_of([], obj(size=1), T0 + DAY, quick).storage_class == "WARM"


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.sampled_from([(ARCHIVE_ACCESS, 90, 730), (DEEP_ARCHIVE_ACCESS, 180, 730)]), unique=True, min_size=1
    ),
    st.data(),
)
def test_render_then_parse_is_identity(kinds, data) -> None:
    tierings = tuple(Tiering(data.draw(st.integers(low, high)), tier) for tier, low, high in kinds)
    if len(tierings) == 2 and tierings[0].days == tierings[1].days:
        return
    by_tier = {t.access_tier: t.days for t in tierings}
    if len(by_tier) == 2 and by_tier[DEEP_ARCHIVE_ACCESS] <= by_tier[ARCHIVE_ACCESS]:
        return
    prefix = data.draw(st.text("abc/-_ ", max_size=6))
    tags = data.draw(
        st.dictionaries(st.text("xyz", min_size=1, max_size=3), st.text("uv", max_size=3), max_size=2)
    )
    config = IntelligentTieringConfig(
        data.draw(st.text("idABC-_.", min_size=1, max_size=10)),
        data.draw(st.booleans()),
        Filter(prefix, tags),
        tierings,
    )
    assert parse_intelligent_tiering(render_intelligent_tiering(config)) == config


@settings(max_examples=80, deadline=None)
@given(st.floats(0, 3000), st.sampled_from(["gpu-direct", "hot", "warm", "cold"]))
def test_never_moves_up(idle_days: float, tier: str) -> None:
    action = it_action([CONFIG], obj(tier=tier), T0 + idle_days * DAY, POLICY)
    if action is not None:
        order = ["gpu-direct", "hot", "warm", "cold"]
        assert action.storage_class is not None  # Intelligent-Tiering only ever moves objects
        assert order.index(action.storage_class.lower()) > order.index(tier)
