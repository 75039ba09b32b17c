"""S3 lifecycle rules as a pure library: parsing, AWS validation errors, rendering, evaluation."""

from __future__ import annotations

import calendar
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lifecycle.facts import DAY, Action, ActionKind, ObjectFacts, UploadFacts
from lifecycle.rules import (
    CLASS_RANK,
    Filter,
    LifecycleConfiguration,
    Rule,
    RuleError,
    Transition,
    can_transition,
    due_at,
    next_midnight,
    object_action,
    parse_lifecycle,
    render_lifecycle,
    upload_should_abort,
)

NS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'
JAN_15_2024_1030 = calendar.timegm((2024, 1, 15, 10, 30, 0))
MIDNIGHT_JAN_1_2030 = calendar.timegm((2030, 1, 1, 0, 0, 0))


def doc(*rules: str, ns: bool = True) -> bytes:
    return f"<LifecycleConfiguration {NS if ns else ''}>{''.join(rules)}</LifecycleConfiguration>".encode()


def rule(body: str, *, rule_id: str = "r", status: str = "Enabled", filt: str = "<Filter/>") -> str:
    id_part = f"<ID>{rule_id}</ID>" if rule_id is not None else ""
    return f"<Rule>{id_part}{filt}<Status>{status}</Status>{body}</Rule>"


def obj(
    key: str = "logs/a.txt",
    *,
    size: int = 1 << 20,
    tags: dict[str, str] | None = None,
    storage_class: str = "STANDARD",
    tier: str = "hot",
    created: float = JAN_15_2024_1030,
) -> ObjectFacts:
    return ObjectFacts(key, size, tags or {}, storage_class, tier, created, created, 0.0)


def action_of(config: LifecycleConfiguration, facts: ObjectFacts, now: float) -> Action:
    """`object_action` where the test expects an action: None fails here, not as an AttributeError."""
    action = object_action(config, facts, now)
    assert action is not None, f"no action for {facts.key} at {now}"
    return action


def error_of(xml: bytes) -> RuleError:
    with pytest.raises(RuleError) as info:
        parse_lifecycle(xml)
    return info.value


# --- AWS documentation examples (adapted) ------------------------------------------------------

AWS_PREFIX_EXAMPLE = b"""<?xml version="1.0" encoding="UTF-8"?>
<LifecycleConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Rule>
    <ID>Transition and Expiration Rule</ID>
    <Filter>
      <Prefix>tax/</Prefix>
    </Filter>
    <Status>Enabled</Status>
    <Transition>
      <Days>365</Days>
      <StorageClass>GLACIER</StorageClass>
    </Transition>
    <Expiration>
      <Days>3650</Days>
    </Expiration>
  </Rule>
</LifecycleConfiguration>"""

AWS_TIERING_DOWN_EXAMPLE = b"""<LifecycleConfiguration>
  <Rule>
    <ID>example-id</ID>
    <Filter><Prefix>logs/</Prefix></Filter>
    <Status>Enabled</Status>
    <Transition><Days>30</Days><StorageClass>STANDARD_IA</StorageClass></Transition>
    <Transition><Days>90</Days><StorageClass>GLACIER</StorageClass></Transition>
    <Expiration><Days>365</Days></Expiration>
  </Rule>
</LifecycleConfiguration>"""

AWS_AND_EXAMPLE = b"""<LifecycleConfiguration>
  <Rule>
    <ID>tagged</ID>
    <Filter>
      <And>
        <Prefix>tax/</Prefix>
        <Tag><Key>key1</Key><Value>value1</Value></Tag>
        <Tag><Key>key2</Key><Value>value2</Value></Tag>
      </And>
    </Filter>
    <Status>Enabled</Status>
    <Transition><Days>365</Days><StorageClass>GLACIER</StorageClass></Transition>
  </Rule>
</LifecycleConfiguration>"""

AWS_MULTIPLE_RULES_EXAMPLE = b"""<LifecycleConfiguration>
  <Rule>
    <ID>1</ID>
    <Filter><Prefix>logs/</Prefix></Filter>
    <Status>Enabled</Status>
    <Transition><Days>0</Days><StorageClass>GLACIER</StorageClass></Transition>
  </Rule>
  <Rule>
    <ID>2</ID>
    <Filter><Prefix>documents/</Prefix></Filter>
    <Status>Disabled</Status>
    <Transition><Days>0</Days><StorageClass>GLACIER</StorageClass></Transition>
  </Rule>
</LifecycleConfiguration>"""

AWS_ABORT_MPU_EXAMPLE = b"""<LifecycleConfiguration>
  <Rule>
    <ID>sample-rule</ID>
    <Filter><Prefix>SomeKeyPrefix/</Prefix></Filter>
    <Status>Enabled</Status>
    <AbortIncompleteMultipartUpload>
      <DaysAfterInitiation>7</DaysAfterInitiation>
    </AbortIncompleteMultipartUpload>
  </Rule>
</LifecycleConfiguration>"""

AWS_SIZE_EXAMPLE = b"""<LifecycleConfiguration>
  <Rule>
    <ID>Transition with a prefix and based on size</ID>
    <Filter>
      <And>
        <Prefix>tax/</Prefix>
        <ObjectSizeGreaterThan>500</ObjectSizeGreaterThan>
        <ObjectSizeLessThan>64000</ObjectSizeLessThan>
      </And>
    </Filter>
    <Status>Enabled</Status>
    <Transition><Days>365</Days><StorageClass>GLACIER</StorageClass></Transition>
  </Rule>
</LifecycleConfiguration>"""

AWS_DATE_EXAMPLE = b"""<LifecycleConfiguration>
  <Rule>
    <ID>by-date</ID>
    <Filter><Prefix>tax/</Prefix></Filter>
    <Status>Enabled</Status>
    <Transition><Date>2030-01-01T00:00:00.000Z</Date><StorageClass>GLACIER</StorageClass></Transition>
    <Expiration><Date>2031-01-01T00:00:00Z</Date></Expiration>
  </Rule>
</LifecycleConfiguration>"""


def test_aws_prefix_example() -> None:
    config = parse_lifecycle(AWS_PREFIX_EXAMPLE)
    assert config == LifecycleConfiguration(
        (
            Rule(
                id="Transition and Expiration Rule",
                enabled=True,
                filter=Filter(prefix="tax/"),
                transitions=(Transition(days=365, date=None, storage_class="GLACIER"),),
                expiration_days=3650,
            ),
        )
    )


def test_aws_tiering_down_example_walks_the_waterfall() -> None:
    config = parse_lifecycle(AWS_TIERING_DOWN_EXAMPLE)
    created = JAN_15_2024_1030
    young = obj(created=created)
    assert object_action(config, young, created + 29 * DAY) is None
    at_30 = next_midnight(created + 30 * DAY)
    assert object_action(config, young, at_30 - 1) is None
    assert object_action(config, young, at_30) == Action(
        ActionKind.TRANSITION, "STANDARD_IA", "example-id", "transition"
    )
    # Once in STANDARD_IA, only GLACIER is next; a STANDARD object 100 days old skips straight to it.
    as_ia = obj(created=created, storage_class="STANDARD_IA", tier="warm")
    assert object_action(config, as_ia, created + 60 * DAY) is None
    assert action_of(config, as_ia, created + 100 * DAY).storage_class == "GLACIER"
    assert action_of(config, young, created + 100 * DAY).storage_class == "GLACIER"
    as_glacier = obj(created=created, storage_class="GLACIER", tier="cold")
    assert object_action(config, as_glacier, created + 200 * DAY) is None
    assert action_of(config, as_glacier, created + 366 * DAY).kind is ActionKind.EXPIRE


def test_aws_and_example_needs_prefix_and_all_tags() -> None:
    config = parse_lifecycle(AWS_AND_EXAMPLE)
    assert config.rules[0].filter == Filter("tax/", {"key1": "value1", "key2": "value2"})
    later = JAN_15_2024_1030 + 400 * DAY
    both = {"key1": "value1", "key2": "value2", "other": "x"}
    assert object_action(config, obj("tax/doc1", tags=both), later) is not None
    assert object_action(config, obj("tax/doc1", tags={"key1": "value1"}), later) is None
    assert object_action(config, obj("tax/doc1", tags={"key1": "value1", "key2": "nope"}), later) is None
    assert object_action(config, obj("other/doc1", tags=both), later) is None


def test_aws_multiple_rules_example_with_disabled_rule() -> None:
    config = parse_lifecycle(AWS_MULTIPLE_RULES_EXAMPLE)
    assert [r.enabled for r in config.rules] == [True, False]
    tomorrow = next_midnight(JAN_15_2024_1030)  # Days 0: the first midnight after creation
    assert action_of(config, obj("logs/x"), tomorrow).storage_class == "GLACIER"
    assert object_action(config, obj("logs/x"), tomorrow - 1) is None
    assert object_action(config, obj("documents/x"), tomorrow + 10 * DAY) is None


def test_aws_abort_mpu_example() -> None:
    config = parse_lifecycle(AWS_ABORT_MPU_EXAMPLE)
    initiated = JAN_15_2024_1030
    upload = UploadFacts("SomeKeyPrefix/big.bin", initiated)
    due = next_midnight(initiated + 7 * DAY)
    assert upload_should_abort(config, upload, due - 1) is None
    assert upload_should_abort(config, upload, due) == "sample-rule"
    assert upload_should_abort(config, UploadFacts("elsewhere/big.bin", initiated), due) is None
    # An abort-only rule never touches objects.
    assert object_action(config, obj("SomeKeyPrefix/x"), due + 1000 * DAY) is None


def test_aws_size_example_bounds_are_exclusive() -> None:
    config = parse_lifecycle(AWS_SIZE_EXAMPLE)
    later = JAN_15_2024_1030 + 400 * DAY
    assert object_action(config, obj("tax/a", size=500), later) is None
    assert object_action(config, obj("tax/a", size=501), later) is not None
    assert object_action(config, obj("tax/a", size=63999), later) is not None
    assert object_action(config, obj("tax/a", size=64000), later) is None


def test_aws_date_example_applies_from_that_midnight_to_old_and_new_objects() -> None:
    config = parse_lifecycle(AWS_DATE_EXAMPLE)
    assert config.rules[0].transitions[0].date == MIDNIGHT_JAN_1_2030
    old = obj("tax/a", created=JAN_15_2024_1030)
    assert object_action(config, old, MIDNIGHT_JAN_1_2030 - 1) is None
    assert action_of(config, old, MIDNIGHT_JAN_1_2030).storage_class == "GLACIER"
    newer = obj("tax/b", created=MIDNIGHT_JAN_1_2030 + 5 * DAY)
    assert action_of(config, newer, MIDNIGHT_JAN_1_2030 + 5 * DAY + 1).storage_class == "GLACIER"
    assert action_of(config, old, MIDNIGHT_JAN_1_2030 + 366 * DAY).kind is ActionKind.EXPIRE


# --- filter forms -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("filt", "expected"),
    [
        ("<Filter/>", Filter()),
        ("<Filter></Filter>", Filter()),
        ("<Filter><Prefix></Prefix></Filter>", Filter()),
        ("<Filter><Prefix>a/</Prefix></Filter>", Filter("a/")),
        ("<Filter><Tag><Key>k</Key><Value>v</Value></Tag></Filter>", Filter(tags={"k": "v"})),
        ("<Filter><Tag><Key>k</Key></Tag></Filter>", Filter(tags={"k": ""})),
        ("<Filter><ObjectSizeGreaterThan>10</ObjectSizeGreaterThan></Filter>", Filter(size_greater_than=10)),
        ("<Filter><ObjectSizeLessThan>10</ObjectSizeLessThan></Filter>", Filter(size_less_than=10)),
        (
            "<Filter><And><Prefix>p</Prefix><ObjectSizeLessThan>9</ObjectSizeLessThan></And></Filter>",
            Filter("p", size_less_than=9),
        ),
        ("<Prefix>legacy/</Prefix>", Filter("legacy/")),
        ("<Prefix></Prefix>", Filter()),
    ],
)
def test_filter_forms(filt: str, expected: Filter) -> None:
    config = parse_lifecycle(doc(rule("<Expiration><Days>1</Days></Expiration>", filt=filt)))
    assert config.rules[0].filter == expected


def test_tag_without_value_matches_only_an_empty_value() -> None:
    config = parse_lifecycle(
        doc(rule("<Expiration><Days>1</Days></Expiration>", filt="<Filter><Tag><Key>k</Key></Tag></Filter>"))
    )
    later = JAN_15_2024_1030 + 10 * DAY
    assert object_action(config, obj(tags={"k": ""}), later) is not None
    assert object_action(config, obj(tags={"k": "v"}), later) is None
    assert object_action(config, obj(tags={}), later) is None


def test_filter_tags_are_frozen() -> None:
    tags = {"a": "1"}
    f = Filter(tags=tags)
    tags["b"] = "2"
    assert dict(f.tags) == {"a": "1"}
    with pytest.raises(TypeError):
        f.tags["c"] = "3"  # type: ignore[index]


def test_namespace_is_optional_and_stripped() -> None:
    with_ns = parse_lifecycle(doc(rule("<Expiration><Days>1</Days></Expiration>")))
    without = parse_lifecycle(doc(rule("<Expiration><Days>1</Days></Expiration>"), ns=False))
    assert with_ns == without


def test_storage_class_case_is_normalised() -> None:
    config = parse_lifecycle(
        doc(rule("<Transition><Days>5</Days><StorageClass>Glacier</StorageClass></Transition>"))
    )
    assert config.rules[0].transitions[0].storage_class == "GLACIER"


def test_missing_id_gets_a_stable_generated_one() -> None:
    body = doc(
        rule("<Expiration><Days>1</Days></Expiration>", rule_id=None),  # type: ignore[arg-type]
        rule("<Expiration><Days>1</Days></Expiration>", rule_id=None),  # type: ignore[arg-type]
    )
    first, again = parse_lifecycle(body), parse_lifecycle(body)
    ids = [r.id for r in first.rules]
    assert ids == [r.id for r in again.rules]
    assert len(set(ids)) == 2 and all(0 < len(i) <= 255 for i in ids)


def test_expired_object_delete_marker_is_kept_for_get() -> None:
    body = doc(rule("<Expiration><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker></Expiration>"))
    config = parse_lifecycle(body)
    assert config.rules[0].expired_object_delete_marker
    assert b"<ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker>" in render_lifecycle(config)
    assert object_action(config, obj(), JAN_15_2024_1030 + 1000 * DAY) is None  # unversioned: no markers


# --- validation errors ------------------------------------------------------------------------

EXPIRE_1 = "<Expiration><Days>1</Days></Expiration>"


@pytest.mark.parametrize(
    ("xml", "code", "message"),
    [
        (b"", "MalformedXML", None),
        (b"<LifecycleConfiguration>", "MalformedXML", None),
        (b"<NotLifecycle/>", "MalformedXML", None),
        (doc(), "MalformedXML", None),
        (doc("<Bogus/>"), "MalformedXML", None),
        (doc(rule(EXPIRE_1, status="enabled")), "MalformedXML", None),
        (doc(rule(EXPIRE_1, filt="")), "MalformedXML", None),
        (doc(rule(EXPIRE_1, filt="<Prefix>a</Prefix><Filter/>")), "MalformedXML", None),
        (
            doc(
                rule(
                    EXPIRE_1,
                    filt="<Filter><Prefix>a</Prefix><Tag><Key>k</Key><Value>v</Value></Tag></Filter>",
                )
            ),
            "MalformedXML",
            None,
        ),
        (
            doc(rule(EXPIRE_1, filt="<Filter><Tag><Key>a</Key></Tag><Tag><Key>b</Key></Tag></Filter>")),
            "MalformedXML",
            None,
        ),
        (doc(rule(EXPIRE_1, filt="<Filter><And></And></Filter>")), "MalformedXML", None),
        (
            doc(rule(EXPIRE_1, filt="<Filter><And><Prefix>a</Prefix><Prefix>b</Prefix></And></Filter>")),
            "MalformedXML",
            None,
        ),
        (doc(rule(EXPIRE_1, filt="<Filter><Bogus/></Filter>")), "MalformedXML", None),
        (doc(rule(EXPIRE_1, filt="<Filter><Tag><Value>v</Value></Tag></Filter>")), "MalformedXML", None),
        (
            doc(
                rule(
                    EXPIRE_1,
                    filt="<Filter><And><Tag><Key>k</Key></Tag><Tag><Key>k</Key></Tag></And></Filter>",
                )
            ),
            "InvalidArgument",
            "Duplicate Tag Keys are not allowed.",
        ),
        (
            doc(rule(EXPIRE_1, filt="<Filter><ObjectSizeGreaterThan>x</ObjectSizeGreaterThan></Filter>")),
            "MalformedXML",
            None,
        ),
        (
            doc(rule(EXPIRE_1, filt="<Filter><ObjectSizeGreaterThan>-1</ObjectSizeGreaterThan></Filter>")),
            "InvalidArgument",
            None,
        ),
        (
            doc(
                rule(
                    EXPIRE_1,
                    filt="<Filter><And><ObjectSizeGreaterThan>9</ObjectSizeGreaterThan>"
                    "<ObjectSizeLessThan>9</ObjectSizeLessThan></And></Filter>",
                )
            ),
            "InvalidArgument",
            "ObjectSizeGreaterThan must be less than ObjectSizeLessThan",
        ),
        (doc(rule("")), "InvalidArgument", "At least one action needs to be specified in a rule"),
        (
            doc(rule(EXPIRE_1, rule_id="x" * 256)),
            "InvalidArgument",
            "ID length should not exceed allowed limit of 255",
        ),
        (
            doc(rule(EXPIRE_1, rule_id="same"), rule(EXPIRE_1, rule_id="same")),
            "InvalidArgument",
            "Rule ID must be unique. Found same ID for more than one rule",
        ),
        (
            doc(*[rule(EXPIRE_1, rule_id=f"r{i}") for i in range(1001)]),
            "InvalidArgument",
            "The number of lifecycle rules must not exceed the allowed limit of 1000 rules",
        ),
        (
            doc(rule("<Expiration><Days>0</Days></Expiration>")),
            "InvalidArgument",
            "'Days' for Expiration action must be a positive integer",
        ),
        (doc(rule("<Expiration><Days>1.5</Days></Expiration>")), "MalformedXML", None),
        (
            doc(rule("<Expiration><Days>-5</Days></Expiration>")),
            "InvalidArgument",
            "'Days' for Expiration action must be a positive integer",
        ),
        # Days is an xs:int: a number past its range fails the schema, as on AWS.
        (doc(rule("<Expiration><Days>100000000000000000000000</Days></Expiration>")), "MalformedXML", None),
        (doc(rule("<Expiration><Days>2147483648</Days></Expiration>")), "MalformedXML", None),
        (doc(rule("<Expiration><Days>1e3</Days></Expiration>")), "MalformedXML", None),
        (
            doc(
                rule(
                    "<Transition><Days>100000000000000000000000</Days><StorageClass>GLACIER</StorageClass>"
                    "</Transition>"
                )
            ),
            "MalformedXML",
            None,
        ),
        (
            doc(
                rule(
                    "<AbortIncompleteMultipartUpload><DaysAfterInitiation>100000000000000000000000"
                    "</DaysAfterInitiation></AbortIncompleteMultipartUpload>"
                )
            ),
            "MalformedXML",
            None,
        ),
        (
            doc(
                rule(
                    EXPIRE_1,
                    filt="<Filter><ObjectSizeGreaterThan>10000000000000000000000</ObjectSizeGreaterThan>"
                    "</Filter>",
                )
            ),
            "MalformedXML",
            None,
        ),
        (
            doc(rule("<Expiration><Days>3</Days><Date>2030-01-01T00:00:00Z</Date></Expiration>")),
            "MalformedXML",
            None,
        ),
        (doc(rule("<Expiration></Expiration>")), "MalformedXML", None),
        (doc(rule(EXPIRE_1 + EXPIRE_1)), "MalformedXML", None),
        (
            doc(rule("<Expiration><Date>2030-01-01T10:00:00Z</Date></Expiration>")),
            "InvalidArgument",
            "'Date' must be at midnight GMT",
        ),
        (doc(rule("<Expiration><Date>yesterday</Date></Expiration>")), "MalformedXML", None),
        (
            doc(rule("<Transition><Days>29</Days><StorageClass>STANDARD_IA</StorageClass></Transition>")),
            "InvalidArgument",
            "'Days' in Transition action for StorageClass 'STANDARD_IA' must be greater than or equal to 30",
        ),
        (
            doc(rule("<Transition><Days>10</Days><StorageClass>ONEZONE_IA</StorageClass></Transition>")),
            "InvalidArgument",
            "'Days' in Transition action for StorageClass 'ONEZONE_IA' must be greater than or equal to 30",
        ),
        (
            doc(rule("<Transition><Days>-1</Days><StorageClass>GLACIER</StorageClass></Transition>")),
            "InvalidArgument",
            None,
        ),
        (
            doc(rule("<Transition><Days>1</Days><StorageClass>PLATINUM</StorageClass></Transition>")),
            "MalformedXML",
            None,
        ),
        (
            doc(rule("<Transition><Days>1</Days><StorageClass>STANDARD</StorageClass></Transition>")),
            "MalformedXML",
            None,
        ),
        (doc(rule("<Transition><Days>1</Days></Transition>")), "MalformedXML", None),
        (doc(rule("<Transition><StorageClass>GLACIER</StorageClass></Transition>")), "MalformedXML", None),
        (
            doc(
                rule(
                    "<Transition><Days>1</Days><Date>2030-01-01T00:00:00Z</Date>"
                    "<StorageClass>GLACIER</StorageClass></Transition>"
                )
            ),
            "MalformedXML",
            None,
        ),
        (
            doc(
                rule(
                    "<Transition><Days>1</Days><StorageClass>GLACIER</StorageClass></Transition>"
                    "<Expiration><Date>2030-01-01T00:00:00Z</Date></Expiration>"
                )
            ),
            "InvalidArgument",
            "Found mixed 'Date' and 'Days' based Expiration and Transition actions in lifecycle rule",
        ),
        (
            doc(
                rule(
                    "<Transition><Days>1</Days><StorageClass>GLACIER</StorageClass></Transition>"
                    "<Transition><Days>5</Days><StorageClass>GLACIER</StorageClass></Transition>"
                )
            ),
            "InvalidArgument",
            "'StorageClass' must be different for 'Transition' actions in same 'Rule'",
        ),
        (
            doc(
                rule(
                    "<Transition><Days>1</Days><StorageClass>GLACIER</StorageClass></Transition>"
                    "<Transition><Days>5</Days><StorageClass>COLD</StorageClass></Transition>"
                )
            ),
            "InvalidArgument",
            "'StorageClass' must be different for 'Transition' actions in same 'Rule'",
        ),
        (
            doc(
                rule(
                    "<Transition><Days>30</Days><StorageClass>STANDARD_IA</StorageClass></Transition>"
                    "<Transition><Days>40</Days><StorageClass>GLACIER</StorageClass></Transition>"
                )
            ),
            "InvalidArgument",
            None,
        ),
        (
            doc(
                rule(
                    "<Transition><Days>100</Days><StorageClass>GLACIER</StorageClass></Transition>"
                    "<Transition><Days>50</Days><StorageClass>DEEP_ARCHIVE</StorageClass></Transition>"
                )
            ),
            "InvalidArgument",
            None,
        ),
        (
            doc(
                rule(
                    "<Transition><Days>100</Days><StorageClass>GLACIER</StorageClass></Transition>"
                    "<Expiration><Days>100</Days></Expiration>"
                )
            ),
            "InvalidArgument",
            None,
        ),
        (
            doc(
                rule(
                    "<AbortIncompleteMultipartUpload><DaysAfterInitiation>0</DaysAfterInitiation>"
                    "</AbortIncompleteMultipartUpload>"
                )
            ),
            "InvalidArgument",
            "'DaysAfterInitiation' for AbortIncompleteMultipartUpload action must be a positive integer",
        ),
        (doc(rule("<AbortIncompleteMultipartUpload/>")), "MalformedXML", None),
        (
            doc(
                rule(
                    "<AbortIncompleteMultipartUpload><DaysAfterInitiation>3</DaysAfterInitiation>"
                    "</AbortIncompleteMultipartUpload>",
                    filt="<Filter><Tag><Key>k</Key></Tag></Filter>",
                )
            ),
            "InvalidArgument",
            "AbortIncompleteMultipartUpload cannot be specified with Tags",
        ),
        (
            doc(
                rule(
                    "<NoncurrentVersionExpiration><NoncurrentDays>0</NoncurrentDays></NoncurrentVersionExpiration>"
                )
            ),
            "InvalidArgument",
            "'NoncurrentDays' for NoncurrentVersionExpiration action must be a positive integer",
        ),
        (
            doc(
                rule(
                    "<NoncurrentVersionExpiration><NoncurrentDays>3</NoncurrentDays>"
                    "<NewerNoncurrentVersions>101</NewerNoncurrentVersions></NoncurrentVersionExpiration>"
                )
            ),
            "InvalidArgument",
            "'NewerNoncurrentVersions' must be an integer between 1 and 100",
        ),
    ],
)
def test_validation_errors(xml: bytes, code: str, message: str | None) -> None:
    error = error_of(xml)
    assert error.s3_code == code, error.detail
    if message is not None:
        assert error.message == message
    if code == "MalformedXML":
        assert error.message.startswith("The XML you provided was not well-formed")


def test_rule_error_is_a_value_error_with_aws_text() -> None:
    error = error_of(doc(rule("<Expiration><Days>0</Days></Expiration>")))
    assert isinstance(error, ValueError)
    assert str(error) == error.message


def test_entity_expansion_is_refused() -> None:
    bomb = b"""<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;">]>
    <LifecycleConfiguration><Rule><ID>&b;</ID><Filter/><Status>Enabled</Status>
    <Expiration><Days>1</Days></Expiration></Rule></LifecycleConfiguration>"""
    assert error_of(bomb).s3_code == "MalformedXML"


def test_accepted_edge_values() -> None:
    ok = [
        "<Transition><Days>0</Days><StorageClass>GLACIER</StorageClass></Transition>",
        "<Transition><Days>0</Days><StorageClass>INTELLIGENT_TIERING</StorageClass></Transition>",
        "<Transition><Days>30</Days><StorageClass>STANDARD_IA</StorageClass></Transition>",
        "<Transition><Days>1</Days><StorageClass>WARM</StorageClass></Transition>",  # our names: no 30-day floor
        "<Transition><Days>30</Days><StorageClass>STANDARD_IA</StorageClass></Transition>"
        "<Transition><Days>60</Days><StorageClass>GLACIER</StorageClass></Transition>",
        "<Transition><Date>2030-01-01</Date><StorageClass>COLD</StorageClass></Transition>",
        "<Expiration><Date>2030-01-01T00:00:00+00:00</Date></Expiration>",
        "<Expiration><Days>2147483647</Days></Expiration>",
    ]
    for body in ok:
        parse_lifecycle(doc(rule(body)))
    parse_lifecycle(doc(*[rule(EXPIRE_1, rule_id=f"r{i}") for i in range(1000)]))
    parse_lifecycle(doc(rule(EXPIRE_1, rule_id="x" * 255)))


# --- rendering --------------------------------------------------------------------------------


def test_render_is_canonical_aws_xml() -> None:
    body = render_lifecycle(parse_lifecycle(AWS_TIERING_DOWN_EXAMPLE)).decode()
    assert body.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<LifecycleConfiguration ' + NS + ">")
    assert (
        "<Rule><ID>example-id</ID><Filter><Prefix>logs/</Prefix></Filter><Status>Enabled</Status>"
        "<Transition><Days>30</Days><StorageClass>STANDARD_IA</StorageClass></Transition>"
        "<Transition><Days>90</Days><StorageClass>GLACIER</StorageClass></Transition>"
        "<Expiration><Days>365</Days></Expiration></Rule>"
    ) in body


def test_render_filter_forms_and_dates() -> None:
    rendered = render_lifecycle(parse_lifecycle(AWS_AND_EXAMPLE)).decode()
    assert "<Filter><And><Prefix>tax/</Prefix><Tag><Key>key1</Key><Value>value1</Value></Tag>" in rendered
    rendered = render_lifecycle(parse_lifecycle(AWS_DATE_EXAMPLE)).decode()
    assert "<Date>2030-01-01T00:00:00.000Z</Date>" in rendered


@pytest.mark.parametrize(
    ("sent", "returned"),
    [
        # GET answers the form PUT gave: no Filter added to a legacy rule, no Prefix to an empty one.
        ("<Filter/>", "<Filter></Filter>"),
        ("<Filter></Filter>", "<Filter></Filter>"),
        ("<Filter><Prefix></Prefix></Filter>", "<Filter><Prefix></Prefix></Filter>"),
        ("<Filter><Prefix>logs/</Prefix></Filter>", "<Filter><Prefix>logs/</Prefix></Filter>"),
        ("<Prefix>old/</Prefix>", "<Prefix>old/</Prefix>"),
        ("<Prefix></Prefix>", "<Prefix></Prefix>"),
        (
            "<Filter><And><Prefix>a/</Prefix></And></Filter>",
            "<Filter><And><Prefix>a/</Prefix></And></Filter>",
        ),
        (
            "<Filter><And><Prefix></Prefix><Tag><Key>k</Key><Value>v</Value></Tag></And></Filter>",
            "<Filter><And><Prefix></Prefix><Tag><Key>k</Key><Value>v</Value></Tag></And></Filter>",
        ),
        (
            "<Filter><ObjectSizeLessThan>5</ObjectSizeLessThan></Filter>",
            "<Filter><ObjectSizeLessThan>5</ObjectSizeLessThan></Filter>",
        ),
    ],
)
def test_filter_is_read_back_as_written(sent: str, returned: str) -> None:
    rendered = render_lifecycle(parse_lifecycle(doc(rule(EXPIRE_1, filt=sent)))).decode()
    assert f"<Rule><ID>r</ID>{returned}<Status>Enabled</Status>{EXPIRE_1}</Rule>" in rendered
    # And a second round trip changes nothing: what is stored reads back the same.
    assert render_lifecycle(parse_lifecycle(rendered.encode())).decode() == rendered


def test_render_escapes_user_text() -> None:
    config = LifecycleConfiguration(
        (Rule("<id & 'x'>", True, Filter("a<&>\r\nb", {"k&": "v<"}), expiration_days=3),)
    )
    assert parse_lifecycle(render_lifecycle(config)) == config


# --- evaluation -------------------------------------------------------------------------------


def test_days_round_up_to_next_midnight_utc() -> None:
    # AWS's own example: created 2014-01-15 10:30 UTC, 3 days → due 2014-01-19 00:00 UTC.
    created = calendar.timegm((2014, 1, 15, 10, 30, 0))
    assert due_at(created, 3, None) == calendar.timegm((2014, 1, 19, 0, 0, 0))
    midnight = calendar.timegm((2014, 1, 15, 0, 0, 0))
    assert due_at(midnight, 3, None) == midnight + 3 * DAY  # already a midnight: nothing to round
    assert due_at(created, None, MIDNIGHT_JAN_1_2030) == MIDNIGHT_JAN_1_2030
    assert due_at(created, None, None) is None


def test_expiration_wins_over_transitions() -> None:
    config = LifecycleConfiguration(
        (
            Rule("move", True, Filter(), transitions=(Transition(1, None, "GLACIER"),)),
            Rule("kill", True, Filter("logs/"), expiration_days=5),
        )
    )
    later = JAN_15_2024_1030 + 10 * DAY
    assert object_action(config, obj("logs/a"), later) == Action(
        ActionKind.EXPIRE, None, "kill", "expiration"
    )
    assert action_of(config, obj("data/a"), later).kind is ActionKind.TRANSITION


def test_coldest_due_transition_wins_across_rules() -> None:
    config = LifecycleConfiguration(
        (
            Rule("ia", True, Filter(), transitions=(Transition(30, None, "STANDARD_IA"),)),
            Rule("deep", True, Filter(), transitions=(Transition(60, None, "DEEP_ARCHIVE"),)),
            Rule("glacier", True, Filter(), transitions=(Transition(40, None, "GLACIER"),)),
        )
    )
    at = lambda days: JAN_15_2024_1030 + days * DAY  # noqa: E731
    assert action_of(config, obj(), at(35)).rule_id == "ia"
    assert action_of(config, obj(), at(45)).rule_id == "glacier"
    assert action_of(config, obj(), at(65)).rule_id == "deep"


def test_never_up_nor_sideways() -> None:
    config = LifecycleConfiguration(
        (
            Rule("ia", True, Filter(), transitions=(Transition(30, None, "STANDARD_IA"),)),
            Rule("warm", True, Filter("w/"), transitions=(Transition(30, None, "WARM"),)),
        )
    )
    later = JAN_15_2024_1030 + 100 * DAY
    for cls, tier in [
        ("STANDARD_IA", "warm"),
        ("GLACIER", "cold"),
        ("DEEP_ARCHIVE", "cold"),
        ("INTELLIGENT_TIERING", "hot"),
        ("ONEZONE_IA", "warm"),
    ]:
        assert object_action(config, obj(storage_class=cls, tier=tier), later) is None, cls
    # WARM is STANDARD_IA's rung: an object already on it stays.
    assert object_action(config, obj("w/a", storage_class="STANDARD_IA", tier="warm"), later) is None
    assert action_of(config, obj("w/a"), later).storage_class in ("STANDARD_IA", "WARM")


def test_tierstore_classes_in_the_waterfall() -> None:
    assert CLASS_RANK["GPU_DIRECT"] < CLASS_RANK["HOT"] == CLASS_RANK["STANDARD"]
    assert CLASS_RANK["HOT"] < CLASS_RANK["WARM"] == CLASS_RANK["STANDARD_IA"]
    assert CLASS_RANK["WARM"] < CLASS_RANK["COLD"] == CLASS_RANK["GLACIER"]
    assert can_transition("GPU_DIRECT", "HOT")
    assert can_transition("STANDARD", "COLD")
    assert not can_transition("COLD", "WARM")
    assert not can_transition("GLACIER", "COLD")
    assert can_transition("GLACIER", "DEEP_ARCHIVE")


def test_aws_unsupported_transitions() -> None:
    assert not can_transition("ONEZONE_IA", "GLACIER_IR")
    assert not can_transition("ONEZONE_IA", "STANDARD_IA")
    assert not can_transition("INTELLIGENT_TIERING", "STANDARD_IA")
    assert can_transition("STANDARD_IA", "INTELLIGENT_TIERING")
    assert can_transition("INTELLIGENT_TIERING", "ONEZONE_IA")
    assert not can_transition("MYSTERY", "GLACIER")


def test_data_never_moves_to_a_faster_tier() -> None:
    # A STANDARD object that temperature already put on cold stays there: STANDARD_IA is warm.
    assert not can_transition("STANDARD", "STANDARD_IA", "cold")
    assert can_transition("STANDARD", "STANDARD_IA", "hot")
    assert can_transition("STANDARD", "GLACIER", "cold")
    assert can_transition("STANDARD_IA", "INTELLIGENT_TIERING", "warm")  # IT keeps the data where it is


def test_small_object_minimum_is_the_daemons_choice() -> None:
    plain = LifecycleConfiguration(
        (Rule("g", True, Filter(), transitions=(Transition(1, None, "GLACIER"),)),)
    )
    sized = LifecycleConfiguration(
        (Rule("g", True, Filter(size_greater_than=10), transitions=(Transition(1, None, "GLACIER"),)),)
    )
    tiny, later = obj(size=1000), JAN_15_2024_1030 + 10 * DAY
    assert object_action(plain, tiny, later) is not None
    assert object_action(plain, tiny, later, min_transition_size=128 * 1024) is None
    assert object_action(sized, tiny, later, min_transition_size=128 * 1024) is not None


def test_upload_abort_is_conservative_about_filters() -> None:
    config = LifecycleConfiguration(
        (
            Rule("disabled", False, Filter(), abort_incomplete_days=1),
            Rule("sized", True, Filter(size_greater_than=5), abort_incomplete_days=1),
            Rule("late", True, Filter("a/"), abort_incomplete_days=10),
            Rule("early", True, Filter("a/b"), abort_incomplete_days=2),
        )
    )
    up = UploadFacts("a/b/c", JAN_15_2024_1030)
    assert upload_should_abort(config, up, JAN_15_2024_1030 + DAY) is None
    assert upload_should_abort(config, up, JAN_15_2024_1030 + 3 * DAY) == "early"
    assert (
        upload_should_abort(config, UploadFacts("z", JAN_15_2024_1030), JAN_15_2024_1030 + 99 * DAY) is None
    )


# --- properties -------------------------------------------------------------------------------

# Text that XML 1.0 can carry (no control characters but tab/LF/CR, no surrogates).
xml_chars = st.characters(
    exclude_categories=["Cs"],
    exclude_characters="".join(chr(c) for c in range(32) if c not in (9, 10, 13)) + "\ufffe\uffff",
)
xml_text = st.text(xml_chars, max_size=12)
day_counts = st.integers(min_value=0, max_value=3000)
midnights = st.integers(min_value=0, max_value=40_000).map(lambda d: float(d * DAY))


nonempty_text = st.text(xml_chars, min_size=1, max_size=12)
tag_maps = st.dictionaries(nonempty_text, xml_text, max_size=3)
sizes = st.none() | st.integers(0, 10**12)
archive_classes = st.lists(
    st.sampled_from(["INTELLIGENT_TIERING", "GLACIER_IR", "GLACIER", "DEEP_ARCHIVE"]), unique=True, max_size=3
)
gap_lists = st.lists(st.integers(1, 100), min_size=3, max_size=3)
optional_days = st.none() | st.integers(1, 500)


@st.composite
def filters(draw: st.DrawFn) -> Filter:
    low, high = draw(sizes), draw(sizes)
    if low is not None and high is not None and low >= high:
        low = None
    return Filter(prefix=draw(xml_text), tags=draw(tag_maps), size_greater_than=low, size_less_than=high)


@st.composite
def rules(draw: st.DrawFn) -> Rule:
    rule_filter = draw(filters())
    by_date = draw(st.booleans())
    classes = sorted(draw(archive_classes), key=CLASS_RANK.__getitem__)
    start, gaps = draw(st.integers(0, 1000)), draw(gap_lists)
    offsets = [start + sum(gaps[: i + 1]) for i in range(len(classes))]
    last = offsets[-1] if offsets else 0
    base = draw(midnights)
    transitions = tuple(
        Transition(None, base + o * DAY, c) if by_date else Transition(o, None, c)
        for o, c in zip(offsets, classes, strict=True)
    )
    extra = draw(optional_days)
    expire = last + extra if extra is not None else None
    abort = None if rule_filter.tags else draw(optional_days)
    if not transitions and expire is None and abort is None:
        expire = last + 1
    return Rule(
        id=draw(nonempty_text),
        enabled=draw(st.booleans()),
        filter=rule_filter,
        transitions=transitions,
        expiration_days=expire if expire is not None and not by_date else None,
        expiration_date=base + expire * DAY if expire is not None and by_date else None,
        abort_incomplete_days=abort,
    )


configs = st.lists(rules(), min_size=1, max_size=4, unique_by=lambda r: r.id).map(
    lambda rs: LifecycleConfiguration(tuple(rs))
)


@settings(max_examples=60, deadline=None)
@given(configs)
def test_render_then_parse_is_identity(config: LifecycleConfiguration) -> None:
    rendered = render_lifecycle(config)
    parsed = parse_lifecycle(rendered)
    assert parsed == config
    assert render_lifecycle(parsed) == rendered


@settings(max_examples=40, deadline=None)
@given(configs, st.randoms(use_true_random=False))
def test_parse_render_parse_is_stable_for_any_filter_spelling(config: LifecycleConfiguration, rnd) -> None:
    # Respell each filter the long way (And around a lone predicate, legacy Prefix) and re-parse.
    text = render_lifecycle(config).decode()
    spellings = ("<Filter>{}</Filter>", "<Filter><And>{}</And></Filter>", "{}")  # the last: legacy
    text = re.sub(
        r"<Filter>(<Prefix>[^<]*</Prefix>)</Filter>", lambda m: rnd.choice(spellings).format(m.group(1)), text
    )
    once = parse_lifecycle(text.encode())
    assert parse_lifecycle(render_lifecycle(once)) == once == config


@given(st.integers(0, 4 * 10**12).map(lambda ms: ms / 1000), st.integers(0, 10_000))
def test_due_is_the_first_midnight_not_before_created_plus_days(created: float, days: int) -> None:
    due = due_at(created, days, None)
    assert due is not None
    assert due % DAY == 0
    assert created + days * DAY <= due < created + days * DAY + DAY


@settings(max_examples=60, deadline=None)
@given(
    configs,
    st.floats(min_value=0, max_value=4e9),
    st.floats(min_value=0, max_value=4e9),
    st.sampled_from(sorted(CLASS_RANK)),
    st.sampled_from(["gpu-direct", "hot", "warm", "cold"]),
)
def test_transitions_only_go_down(config, created: float, now: float, cls: str, tier: str) -> None:
    action = object_action(config, obj("", size=0, storage_class=cls, tier=tier, created=created), now)
    if action is not None and action.kind is ActionKind.TRANSITION:
        assert action.storage_class is not None  # a transition always names its target class
        assert CLASS_RANK[action.storage_class] > CLASS_RANK[cls]


def test_noncurrent_rules_parse_render_and_decide() -> None:
    from lifecycle.rules import noncurrent_action, removes_lone_marker

    xml = doc(
        rule(
            "<NoncurrentVersionTransition><NoncurrentDays>30</NoncurrentDays><StorageClass>STANDARD_IA</StorageClass>"
            "</NoncurrentVersionTransition>"
            "<NoncurrentVersionExpiration><NoncurrentDays>90</NoncurrentDays>"
            "<NewerNoncurrentVersions>2</NewerNoncurrentVersions></NoncurrentVersionExpiration>"
            "<Expiration><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker></Expiration>"
        )
    )
    config = parse_lifecycle(xml)
    assert parse_lifecycle(render_lifecycle(config)) == config
    [parsed] = config.rules
    assert parsed.noncurrent_expiration_days == 90 and parsed.noncurrent_expiration_newer == 2
    obj = ObjectFacts("k", 10, {}, "STANDARD", "hot", 0.0, 0.0, 0.0)
    since = 10 * DAY
    assert noncurrent_action(config, obj, since, 0, since + 29 * DAY) is None
    moved = noncurrent_action(config, obj, since, 0, since + 31 * DAY)
    assert moved is not None and moved.storage_class == "STANDARD_IA"
    # 91 days noncurrent: expired only with at least two newer noncurrent versions kept.
    assert noncurrent_action(config, obj, since, 1, since + 91 * DAY).kind is ActionKind.TRANSITION  # type: ignore[union-attr]
    assert noncurrent_action(config, obj, since, 2, since + 91 * DAY).kind is ActionKind.EXPIRE  # type: ignore[union-attr]
    assert removes_lone_marker(config, "k") == parsed.id
