"""S3 lifecycle configuration as a pure library: parse, validate, render, evaluate.

No I/O and no clock: the daemon hands in an object's facts and "now", and applies the `Action`
that comes back (MinIO's `internal/bucket/lifecycle` is the model). The S3 layer turns a
`RuleError` into the S3 error its `s3_code` names; this package never imports `server`.

AWS semantics kept here:
- Days count from object creation and the due time is rounded *up* to the next midnight UTC;
  a Date (which must be a midnight UTC) applies from that midnight on, to old objects as well.
- Expiration wins over transitions; among due transitions the coldest allowed target wins, and an
  object only ever moves down AWS's transition waterfall, never to the class it already has.
- Filters: `<Filter>` with exactly one of Prefix / Tag / ObjectSizeGreaterThan /
  ObjectSizeLessThan / And, an empty `<Filter/>` (every object), or the legacy rule-level `<Prefix>`.

tierstore's own class names (GPU_DIRECT, HOT, WARM, COLD) are accepted as transition targets and
placed in the waterfall beside their AWS equivalents.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from xml.etree.ElementTree import Element, tostring
from xml.sax.saxutils import escape

from defusedxml import ElementTree as SafeET

from lifecycle.facts import DAY, Action, ActionKind, ObjectFacts, UploadFacts
from tiering.tiers import STORAGE_CLASS_TIERS, TIER_ORDER

S3_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
MAX_RULES = 1000
MAX_ID_LENGTH = 255
MALFORMED_MESSAGE = (
    "The XML you provided was not well-formed or did not validate against our published schema"
)

# Position along AWS's transition waterfall (higher = colder). Classes on one rung are
# equivalent: an object never transitions between them.
CLASS_RANK: Mapping[str, int] = MappingProxyType(
    {
        "GPU_DIRECT": 0,
        "EXPRESS_ONEZONE": 0,
        "STANDARD": 1,
        "REDUCED_REDUNDANCY": 1,
        "HOT": 1,
        "STANDARD_IA": 2,
        "WARM": 2,
        "INTELLIGENT_TIERING": 3,
        "ONEZONE_IA": 4,
        "GLACIER_IR": 5,
        "GLACIER": 6,
        "COLD": 6,
        "DEEP_ARCHIVE": 7,
    }
)
# What a <Transition> may name: AWS's six targets and tierstore's four tiers.
TRANSITION_CLASSES = frozenset(
    {
        "STANDARD_IA",
        "ONEZONE_IA",
        "INTELLIGENT_TIERING",
        "GLACIER_IR",
        "GLACIER",
        "DEEP_ARCHIVE",
        "GPU_DIRECT",
        "HOT",
        "WARM",
        "COLD",
    }
)
# The one step down the rank order that AWS does not allow.
_UNSUPPORTED_TRANSITIONS = frozenset({("ONEZONE_IA", "GLACIER_IR")})
# AWS bills these for 30 days at least, and refuses transitions to them any earlier.
_THIRTY_DAY_CLASSES = frozenset({"STANDARD_IA", "ONEZONE_IA"})
_INTEGER = re.compile(r"[+-]?\d+")
INT_MAX = 2**31 - 1  # Days, DaysAfterInitiation: xs:int in S3's schema
LONG_MAX = 2**63 - 1  # object sizes: xs:long


# --- errors ----------------------------------------------------------------------------------


class RuleError(ValueError):
    """A configuration the S3 layer must refuse; `s3_code` names the S3 error to answer with."""

    def __init__(self, s3_code: str, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.s3_code = s3_code  # "MalformedXML" | "InvalidArgument" | "NotImplemented"
        self.message = message  # what the client sees, worded as AWS words it
        self.detail = detail or message  # why, for our logs (AWS's MalformedXML says nothing)


def malformed(detail: str) -> RuleError:
    return RuleError("MalformedXML", MALFORMED_MESSAGE, detail)


def invalid(message: str) -> RuleError:
    return RuleError("InvalidArgument", message)


# --- the model -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Filter:
    """Which objects a rule applies to; every predicate given must hold (S3's <And>)."""

    prefix: str = ""
    tags: Mapping[str, str] = field(default_factory=dict)
    size_greater_than: int | None = None
    size_less_than: int | None = None
    # How the client spelled it, so that GET returns the form PUT gave (AWS does); equality and
    # matching ignore them. An explicit <Prefix> (even empty) and predicates wrapped in <And>.
    prefix_given: bool = field(default=False, compare=False)
    in_and: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        # A frozen dataclass should not hold a dict someone else can still change.
        object.__setattr__(self, "tags", MappingProxyType(dict(self.tags)))

    @property
    def has_size(self) -> bool:
        return self.size_greater_than is not None or self.size_less_than is not None

    def matches_key(self, key: str) -> bool:
        return key.startswith(self.prefix)

    def matches(self, obj: ObjectFacts) -> bool:
        if not self.matches_key(obj.key):
            return False
        # A tag given with no Value matches only objects whose tag value is empty (AWS).
        if any(obj.tags.get(k) != v for k, v in self.tags.items()):
            return False
        if self.size_greater_than is not None and not obj.size > self.size_greater_than:
            return False
        return self.size_less_than is None or obj.size < self.size_less_than


@dataclass(frozen=True)
class Transition:
    days: int | None
    date: float | None
    storage_class: str


@dataclass(frozen=True)
class NoncurrentTransition:
    """NoncurrentVersionTransition: move a version `days` after it stopped being current, once it
    has more than `newer_versions` newer noncurrent versions (None: whatever their number)."""

    days: int
    storage_class: str
    newer_versions: int | None = None


@dataclass(frozen=True)
class Rule:
    id: str
    enabled: bool
    filter: Filter
    transitions: tuple[Transition, ...] = ()
    expiration_days: int | None = None
    expiration_date: float | None = None
    abort_incomplete_days: int | None = None
    # Remove a current delete marker that has no other version left behind it.
    expired_object_delete_marker: bool = False
    # NoncurrentVersionExpiration (NoncurrentDays, NewerNoncurrentVersions) and transitions.
    noncurrent_expiration_days: int | None = None
    noncurrent_expiration_newer: int | None = None
    noncurrent_transitions: tuple[NoncurrentTransition, ...] = ()
    # The rule used the legacy rule-level <Prefix> rather than a <Filter>: GET answers the same way.
    legacy_prefix: bool = field(default=False, compare=False)

    @property
    def has_action(self) -> bool:
        return bool(
            self.transitions
            or self.expiration_days is not None
            or self.expiration_date is not None
            or self.abort_incomplete_days is not None
            or self.expired_object_delete_marker
            or self.noncurrent_expiration_days is not None
            or self.noncurrent_transitions
        )

    @property
    def acts_on_versions(self) -> bool:
        """Does the rule act on noncurrent versions or delete markers?"""
        return bool(
            self.noncurrent_expiration_days is not None
            or self.noncurrent_transitions
            or self.expired_object_delete_marker
        )


@dataclass(frozen=True)
class LifecycleConfiguration:
    rules: tuple[Rule, ...]


# --- XML in ----------------------------------------------------------------------------------


def parse_document(body: bytes, root: str) -> Element:
    """defusedxml (no entity expansion), namespaces stripped, the root element checked."""
    if not body or not body.strip():
        raise malformed("empty document")
    try:
        element = SafeET.fromstring(body)
    except Exception:  # defusedxml raises several types; to a client they all mean the same
        raise malformed("not well-formed XML") from None
    for node in element.iter():
        node.tag = node.tag.rsplit("}", 1)[-1]
    if element.tag != root:
        raise malformed(f"root element is <{element.tag}>, expected <{root}>")
    return element


def children(element: Element, allowed: Iterable[str]) -> dict[str, list[Element]]:
    """Child elements grouped by name; any name not in `allowed` fails the schema."""
    allowed = set(allowed)
    groups: dict[str, list[Element]] = {}
    for child in element:
        if child.tag not in allowed:
            raise malformed(f"unexpected <{child.tag}> in <{element.tag}>")
        groups.setdefault(child.tag, []).append(child)
    return groups


def one(groups: dict[str, list[Element]], name: str) -> Element | None:
    found = groups.get(name, [])
    if len(found) > 1:
        raise malformed(f"<{name}> given more than once")
    return found[0] if found else None


def raw_text(element: Element) -> str:
    # Keys, prefixes and IDs are user data: surrounding spaces are significant, never stripped.
    return element.text or ""


def integer(element: Element, limit: int = INT_MAX) -> int:
    """An xs:int (or, with `limit`, xs:long): a number past the type's range fails the schema."""
    text = raw_text(element).strip()
    if not _INTEGER.fullmatch(text) or len(text) > 40:
        raise malformed(f"<{element.tag}> is not an integer: {text[:40]!r}")
    value = int(text)
    if not -limit - 1 <= value <= limit:
        raise malformed(f"<{element.tag}> is out of range: {text!r}")
    return value


def _midnight_date(element: Element) -> float:
    text = raw_text(element).strip()
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise malformed(f"<Date> is not an ISO 8601 timestamp: {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    timestamp = moment.timestamp()
    if timestamp % DAY:
        raise invalid("'Date' must be at midnight GMT")
    return timestamp


def _tag(element: Element) -> tuple[str, str]:
    groups = children(element, ("Key", "Value"))
    key, value = one(groups, "Key"), one(groups, "Value")
    if key is None:
        raise malformed("<Tag> without <Key>")
    if not raw_text(key):
        raise invalid("The TagKey you have provided is invalid")
    return raw_text(key), raw_text(value) if value is not None else ""


def _size(element: Element) -> int:
    size = integer(element, LONG_MAX)
    if size < 0:
        raise invalid(f"'{element.tag}' must be a non-negative integer")
    return size


def _predicates(elements: list[Element], *, sizes: bool) -> Filter:
    prefix: str | None = None
    tags: dict[str, str] = {}
    bounds: dict[str, int] = {}
    for element in elements:
        if element.tag == "Prefix":
            if prefix is not None:
                raise malformed("<Prefix> given more than once")
            prefix = raw_text(element)
        elif element.tag == "Tag":
            key, value = _tag(element)
            if key in tags:
                raise invalid("Duplicate Tag Keys are not allowed.")
            tags[key] = value
        elif sizes and element.tag in ("ObjectSizeGreaterThan", "ObjectSizeLessThan"):
            if element.tag in bounds:
                raise malformed(f"<{element.tag}> given more than once")
            bounds[element.tag] = _size(element)
        else:
            raise malformed(f"unexpected <{element.tag}> in a filter")
    return Filter(
        prefix or "",
        tags,
        bounds.get("ObjectSizeGreaterThan"),
        bounds.get("ObjectSizeLessThan"),
        prefix_given=prefix is not None,
    )


def parse_filter(element: Element, *, sizes: bool = True) -> Filter:
    """A <Filter>: empty, exactly one predicate, or <And> around several.

    Intelligent-Tiering filters know no size predicates: `sizes=False` makes them a schema error.
    """
    parts = list(element)
    if not parts:
        return Filter()
    if len(parts) > 1:
        raise malformed("a <Filter> holds one predicate; combine several inside <And>")
    if parts[0].tag != "And":
        return _predicates(parts, sizes=sizes)
    inner = list(parts[0])
    if not inner:
        raise malformed("an empty <And>")
    return replace(_predicates(inner, sizes=sizes), in_and=True)


def _transition(element: Element) -> Transition:
    groups = children(element, ("Days", "Date", "StorageClass"))
    days_el, date_el, class_el = one(groups, "Days"), one(groups, "Date"), one(groups, "StorageClass")
    if class_el is None:
        raise malformed("<Transition> without <StorageClass>")
    storage_class = raw_text(class_el).strip().upper()
    if storage_class not in TRANSITION_CLASSES:
        raise malformed(f"unknown transition StorageClass {raw_text(class_el)!r}")
    if (days_el is None) == (date_el is None):
        raise malformed("<Transition> needs exactly one of <Days> and <Date>")
    return Transition(
        days=integer(days_el) if days_el is not None else None,
        date=_midnight_date(date_el) if date_el is not None else None,
        storage_class=storage_class,
    )


def _expiration(element: Element) -> tuple[int | None, float | None, bool]:
    groups = children(element, ("Days", "Date", "ExpiredObjectDeleteMarker"))
    days_el, date_el, marker_el = (
        one(groups, "Days"),
        one(groups, "Date"),
        one(groups, "ExpiredObjectDeleteMarker"),
    )
    given = [e for e in (days_el, date_el, marker_el) if e is not None]
    if len(given) != 1:
        raise malformed("<Expiration> needs exactly one of <Days>, <Date> and <ExpiredObjectDeleteMarker>")
    marker = False
    if marker_el is not None:
        value = raw_text(marker_el).strip().lower()
        if value not in ("true", "false"):
            raise malformed("<ExpiredObjectDeleteMarker> must be true or false")
        marker = value == "true"
    return (
        integer(days_el) if days_el is not None else None,
        _midnight_date(date_el) if date_el is not None else None,
        marker,
    )


def _newer_versions(groups: dict[str, list[Element]]) -> int | None:
    element = one(groups, "NewerNoncurrentVersions")
    if element is None:
        return None
    value = integer(element)
    if not 1 <= value <= 100:
        raise invalid("'NewerNoncurrentVersions' must be an integer between 1 and 100")
    return value


def _noncurrent_days(groups: dict[str, list[Element]], action: str) -> int:
    element = one(groups, "NoncurrentDays")
    if element is None:
        raise malformed(f"<{action}> without <NoncurrentDays>")
    days = integer(element)
    if days < (1 if action == "NoncurrentVersionExpiration" else 0):
        raise invalid(f"'NoncurrentDays' for {action} action must be a positive integer")
    return days


def _noncurrent_expiration(element: Element) -> tuple[int, int | None]:
    groups = children(element, ("NoncurrentDays", "NewerNoncurrentVersions"))
    return _noncurrent_days(groups, "NoncurrentVersionExpiration"), _newer_versions(groups)


def _noncurrent_transition(element: Element) -> NoncurrentTransition:
    groups = children(element, ("NoncurrentDays", "StorageClass", "NewerNoncurrentVersions"))
    class_el = one(groups, "StorageClass")
    if class_el is None:
        raise malformed("<NoncurrentVersionTransition> without <StorageClass>")
    storage_class = raw_text(class_el).strip().upper()
    if storage_class not in TRANSITION_CLASSES:
        raise malformed(f"unknown transition StorageClass {raw_text(class_el)!r}")
    days = _noncurrent_days(groups, "NoncurrentVersionTransition")
    if storage_class in _THIRTY_DAY_CLASSES and days < 30:
        raise invalid(
            f"'NoncurrentDays' in NoncurrentVersionTransition action for StorageClass '{storage_class}' "
            "must be greater than or equal to 30"
        )
    return NoncurrentTransition(days, storage_class, _newer_versions(groups))


def _abort_days(element: Element) -> int:
    days_el = one(children(element, ("DaysAfterInitiation",)), "DaysAfterInitiation")
    if days_el is None:
        raise malformed("<AbortIncompleteMultipartUpload> without <DaysAfterInitiation>")
    return integer(days_el)


_RULE_ELEMENTS = (
    "ID",
    "Prefix",
    "Filter",
    "Status",
    "Transition",
    "Expiration",
    "AbortIncompleteMultipartUpload",
    "NoncurrentVersionTransition",
    "NoncurrentVersionExpiration",
)


def _generated_id(element: Element, index: int) -> str:
    # AWS makes up a random ID; ours is derived from the rule so that parsing stays pure and a
    # repeated PUT of the same document yields the same IDs.
    digest = hashlib.sha256(f"{index}\0".encode() + tostring(element)).digest()
    return base64.urlsafe_b64encode(digest[:24]).decode()


def _rule(element: Element, index: int) -> Rule:
    groups = children(element, _RULE_ELEMENTS)
    id_el, status_el = one(groups, "ID"), one(groups, "Status")
    rule_id = raw_text(id_el) if id_el is not None else ""
    if status_el is None or raw_text(status_el).strip() not in ("Enabled", "Disabled"):
        raise malformed("<Status> must be Enabled or Disabled")
    prefix_el, filter_el = one(groups, "Prefix"), one(groups, "Filter")
    if (prefix_el is None) == (filter_el is None):
        raise malformed("a rule needs exactly one of <Filter> and the legacy <Prefix>")
    if filter_el is not None:
        rule_filter = parse_filter(filter_el)
    else:
        assert prefix_el is not None
        rule_filter = Filter(prefix=raw_text(prefix_el), prefix_given=True)
    expiration_el, abort_el = one(groups, "Expiration"), one(groups, "AbortIncompleteMultipartUpload")
    days, date, marker = _expiration(expiration_el) if expiration_el is not None else (None, None, False)
    noncurrent_el = one(groups, "NoncurrentVersionExpiration")
    noncurrent_days, noncurrent_newer = (
        _noncurrent_expiration(noncurrent_el) if noncurrent_el is not None else (None, None)
    )
    noncurrent_transitions = tuple(
        _noncurrent_transition(t) for t in groups.get("NoncurrentVersionTransition", [])
    )
    if len({t.storage_class for t in noncurrent_transitions}) != len(noncurrent_transitions):
        raise invalid(
            "'StorageClass' must be different for 'NoncurrentVersionTransition' actions in same 'Rule'"
        )
    return Rule(
        id=rule_id or _generated_id(element, index),
        enabled=raw_text(status_el).strip() == "Enabled",
        filter=rule_filter,
        transitions=tuple(_transition(t) for t in groups.get("Transition", [])),
        expiration_days=days,
        expiration_date=date,
        abort_incomplete_days=_abort_days(abort_el) if abort_el is not None else None,
        expired_object_delete_marker=marker,
        noncurrent_expiration_days=noncurrent_days,
        noncurrent_expiration_newer=noncurrent_newer,
        noncurrent_transitions=noncurrent_transitions,
        legacy_prefix=filter_el is None,
    )


def parse_lifecycle(xml: bytes) -> LifecycleConfiguration:
    """PutBucketLifecycleConfiguration's body → a validated configuration, or RuleError."""
    root = parse_document(xml, "LifecycleConfiguration")
    elements = children(root, ("Rule",)).get("Rule", [])
    if not elements:
        raise malformed("a lifecycle configuration needs at least one <Rule>")
    if len(elements) > MAX_RULES:  # before parsing them all: a huge document is refused cheaply
        raise invalid(f"The number of lifecycle rules must not exceed the allowed limit of {MAX_RULES} rules")
    config = LifecycleConfiguration(tuple(_rule(e, i) for i, e in enumerate(elements)))
    validate_lifecycle(config)
    return config


# --- validation (also for configurations built in code) --------------------------------------


def validate_lifecycle(config: LifecycleConfiguration) -> None:
    if not config.rules:
        raise malformed("a lifecycle configuration needs at least one rule")
    if len(config.rules) > MAX_RULES:
        raise invalid(f"The number of lifecycle rules must not exceed the allowed limit of {MAX_RULES} rules")
    seen: set[str] = set()
    for rule in config.rules:
        if rule.id in seen:
            raise invalid("Rule ID must be unique. Found same ID for more than one rule")
        seen.add(rule.id)
        validate_rule(rule)


def validate_rule(rule: Rule) -> None:
    if not rule.id:
        raise invalid("Rule ID must not be empty")
    if len(rule.id) > MAX_ID_LENGTH:
        raise invalid(f"ID length should not exceed allowed limit of {MAX_ID_LENGTH}")
    if not rule.has_action:
        raise invalid("At least one action needs to be specified in a rule")
    _validate_filter(rule.filter)
    if rule.filter.tags and rule.abort_incomplete_days is not None:
        raise invalid("AbortIncompleteMultipartUpload cannot be specified with Tags")
    if rule.filter.tags and rule.expired_object_delete_marker:
        raise invalid("ExpiredObjectDeleteMarker cannot be specified with Tags")
    if rule.abort_incomplete_days is not None and rule.abort_incomplete_days < 1:
        raise invalid(
            "'DaysAfterInitiation' for AbortIncompleteMultipartUpload action must be a positive integer"
        )
    if rule.expiration_days is not None and rule.expiration_date is not None:
        raise malformed("<Expiration> with both <Days> and <Date>")
    if rule.expiration_days is not None and rule.expiration_days < 1:
        raise invalid("'Days' for Expiration action must be a positive integer")
    _validate_transitions(rule)


def _validate_filter(rule_filter: Filter) -> None:
    low, high = rule_filter.size_greater_than, rule_filter.size_less_than
    if (low is not None and low < 0) or (high is not None and high < 0):
        raise invalid("Object size filters must be non-negative integers")
    if low is not None and high is not None and low >= high:
        raise invalid("ObjectSizeGreaterThan must be less than ObjectSizeLessThan")


def _validate_transitions(rule: Rule) -> None:
    for t in rule.transitions:
        if t.storage_class not in TRANSITION_CLASSES:
            raise malformed(f"unknown transition StorageClass {t.storage_class!r}")
        if (t.days is None) == (t.date is None):
            raise malformed("<Transition> needs exactly one of <Days> and <Date>")
        if t.date is not None and t.date % DAY:
            raise invalid("'Date' must be at midnight GMT")
        if t.days is not None and t.days < 0:
            raise invalid("'Days' in Transition action must be nonnegative")
        if t.days is not None and t.storage_class in _THIRTY_DAY_CLASSES and t.days < 30:
            raise invalid(
                f"'Days' in Transition action for StorageClass '{t.storage_class}' "
                "must be greater than or equal to 30"
            )
    by_days = {t.days is not None for t in rule.transitions}
    if rule.expiration_days is not None or rule.expiration_date is not None:
        by_days.add(rule.expiration_days is not None)
    if len(by_days) > 1:
        raise invalid(
            "Found mixed 'Date' and 'Days' based Expiration and Transition actions in lifecycle rule"
        )
    ranks = [CLASS_RANK[t.storage_class] for t in rule.transitions]
    if len(set(ranks)) != len(ranks):
        raise invalid("'StorageClass' must be different for 'Transition' actions in same 'Rule'")
    _validate_order(rule)


def _when(days: int | None, date: float | None) -> float:
    # Days and Dates never mix within a rule (checked above), so either compares like with like.
    return float(days) * DAY if days is not None else float(date or 0.0)


def _validate_order(rule: Rule) -> None:
    """A colder target comes later; after an IA class, 30 days later at least; expiry comes last."""
    steps = sorted(rule.transitions, key=lambda t: CLASS_RANK[t.storage_class])
    for warmer, colder in zip(steps, steps[1:], strict=False):
        gap = _when(colder.days, colder.date) - _when(warmer.days, warmer.date)
        needed = 30 * DAY if warmer.storage_class in _THIRTY_DAY_CLASSES and warmer.days is not None else 1.0
        if gap < needed:
            raise invalid(
                f"'Days' in Transition action for StorageClass '{colder.storage_class}' must be "
                f"{'30 days more than' if needed > 1 else 'greater than'} 'Days' in Transition action "
                f"for StorageClass '{warmer.storage_class}'"
            )
    if rule.expiration_days is None and rule.expiration_date is None:
        return
    expires = _when(rule.expiration_days, rule.expiration_date)
    for t in rule.transitions:
        if expires <= _when(t.days, t.date):
            raise invalid(
                "'Days' in the Expiration action for the rule must be greater than 'Days' in the "
                f"Transition action for StorageClass '{t.storage_class}'"
            )


# --- XML out ---------------------------------------------------------------------------------


def xml_text(name: str, value: str | int) -> str:
    # XML parsers turn a literal CR into LF; a character reference keeps a key's CR intact.
    return f"<{name}>{escape(str(value)).replace(chr(13), '&#13;')}</{name}>"


def xml_element(name: str, *content: str) -> str:
    return f"<{name}>{''.join(content)}</{name}>"


def xml_document(root: str, *content: str) -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<{root} xmlns="{S3_NS}">{"".join(content)}</{root}>'
    ).encode()


def iso_midnight(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def render_filter(rule_filter: Filter) -> str:
    """The filter as the client spelled it: one predicate bare, several (or as sent) inside
    <And>, an empty <Filter></Filter> when it named nothing. Nothing the client did not send."""
    given = rule_filter.prefix or rule_filter.prefix_given
    parts = [xml_text("Prefix", rule_filter.prefix)] if given else []
    parts += [
        xml_element("Tag", xml_text("Key", k), xml_text("Value", v)) for k, v in rule_filter.tags.items()
    ]
    if rule_filter.size_greater_than is not None:
        parts.append(xml_text("ObjectSizeGreaterThan", rule_filter.size_greater_than))
    if rule_filter.size_less_than is not None:
        parts.append(xml_text("ObjectSizeLessThan", rule_filter.size_less_than))
    if not parts:
        return xml_element("Filter")
    if len(parts) == 1 and not rule_filter.in_and:
        return xml_element("Filter", parts[0])
    return xml_element("Filter", xml_element("And", *parts))


def _render_when(days: int | None, date: float | None) -> str:
    return xml_text("Days", days) if days is not None else xml_text("Date", iso_midnight(date or 0.0))


def _legacy(rule: Rule) -> bool:
    # A rule-level <Prefix> can only say a prefix; a rule built in code with more gets a <Filter>.
    return rule.legacy_prefix and not (rule.filter.tags or rule.filter.has_size)


def _render_rule(rule: Rule) -> str:
    parts = [
        xml_text("ID", rule.id),
        xml_text("Prefix", rule.filter.prefix) if _legacy(rule) else render_filter(rule.filter),
        xml_text("Status", "Enabled" if rule.enabled else "Disabled"),
    ]
    for t in rule.transitions:
        parts.append(
            xml_element("Transition", _render_when(t.days, t.date), xml_text("StorageClass", t.storage_class))
        )
    if rule.expiration_days is not None or rule.expiration_date is not None:
        parts.append(xml_element("Expiration", _render_when(rule.expiration_days, rule.expiration_date)))
    elif rule.expired_object_delete_marker:
        parts.append(xml_element("Expiration", xml_text("ExpiredObjectDeleteMarker", "true")))
    for nt in rule.noncurrent_transitions:
        newer = [xml_text("NewerNoncurrentVersions", nt.newer_versions)] if nt.newer_versions else []
        parts.append(
            xml_element(
                "NoncurrentVersionTransition",
                xml_text("NoncurrentDays", nt.days),
                xml_text("StorageClass", nt.storage_class),
                *newer,
            )
        )
    if rule.noncurrent_expiration_days is not None:
        newer = (
            [xml_text("NewerNoncurrentVersions", rule.noncurrent_expiration_newer)]
            if rule.noncurrent_expiration_newer
            else []
        )
        parts.append(
            xml_element(
                "NoncurrentVersionExpiration",
                xml_text("NoncurrentDays", rule.noncurrent_expiration_days),
                *newer,
            )
        )
    if rule.abort_incomplete_days is not None:
        parts.append(
            xml_element(
                "AbortIncompleteMultipartUpload", xml_text("DaysAfterInitiation", rule.abort_incomplete_days)
            )
        )
    return xml_element("Rule", *parts)


def render_lifecycle(config: LifecycleConfiguration) -> bytes:
    """The document GetBucketLifecycleConfiguration returns."""
    return xml_document("LifecycleConfiguration", *(_render_rule(r) for r in config.rules))


# --- evaluation ------------------------------------------------------------------------------


def next_midnight(timestamp: float) -> float:
    """The first midnight UTC at or after `timestamp`."""
    # divmod, not ceil(t / DAY): the division can round a time just past midnight down onto it.
    days, rest = divmod(timestamp, DAY)
    return (days + (1 if rest else 0)) * DAY


def due_at(start: float, days: int | None, date: float | None) -> float | None:
    """When an action with these Days/Date becomes due for something started at `start`."""
    if date is not None:
        return date
    if days is not None:
        return next_midnight(start + days * DAY)
    return None


def can_transition(current_class: str, target_class: str, current_tier: str | None = None) -> bool:
    """May lifecycle move an object from `current_class` to `target_class`? Only down the waterfall.

    With `current_tier`, also never onto a faster tier than the data is on now: temperature or
    Intelligent-Tiering may have put it colder than its class says, and a rule only moves data down.
    """
    current, target = CLASS_RANK.get(current_class.upper()), CLASS_RANK.get(target_class.upper())
    if current is None or target is None or target <= current:
        return False
    if (current_class.upper(), target_class.upper()) in _UNSUPPORTED_TRANSITIONS:
        return False
    target_tier = STORAGE_CLASS_TIERS.get(target_class.upper())
    if current_tier not in TIER_ORDER or target_class.upper() == "INTELLIGENT_TIERING" or target_tier is None:
        return True  # Intelligent-Tiering keeps the data where temperature put it
    return TIER_ORDER.index(target_tier) >= TIER_ORDER.index(current_tier)


def _transition_allowed_by_size(rule: Rule, obj: ObjectFacts, min_transition_size: int) -> bool:
    # AWS skips objects under 128 KiB unless the rule filters on size itself; the daemon chooses
    # the default minimum (0 = every object).
    return rule.filter.has_size or obj.size >= min_transition_size


def object_action(
    config: LifecycleConfiguration, obj: ObjectFacts, now: float, *, min_transition_size: int = 0
) -> Action | None:
    """What the configuration wants done to `obj` at `now`: expire, transition, or nothing (None)."""
    rules = [r for r in config.rules if r.enabled and r.filter.matches(obj)]
    for rule in rules:
        due = due_at(obj.created, rule.expiration_days, rule.expiration_date)
        if due is not None and now >= due:
            return Action(ActionKind.EXPIRE, rule_id=rule.id, reason="expiration")
    best: tuple[int, Action] | None = None
    for rule in rules:
        if not _transition_allowed_by_size(rule, obj, min_transition_size):
            continue
        for t in rule.transitions:
            due = due_at(obj.created, t.days, t.date)
            if due is None or now < due or not can_transition(obj.storage_class, t.storage_class, obj.tier):
                continue
            rank = CLASS_RANK[t.storage_class]
            if best is None or rank > best[0]:  # the coldest due target; the first rule on a tie
                best = (rank, Action(ActionKind.TRANSITION, t.storage_class, rule.id, "transition"))
    return best[1] if best else None


def upload_should_abort(config: LifecycleConfiguration, upload: UploadFacts, now: float) -> str | None:
    """The ID of the rule whose AbortIncompleteMultipartUpload applies to `upload` now, if any."""
    for rule in config.rules:
        if not rule.enabled or rule.abort_incomplete_days is None:
            continue
        # An upload has no tags or size yet: a rule that filters on them cannot be said to match,
        # and aborting is destructive, so only prefix-only rules abort uploads.
        if rule.filter.tags or rule.filter.has_size or not rule.filter.matches_key(upload.key):
            continue
        due = due_at(upload.initiated, rule.abort_incomplete_days, None)
        if due is not None and now >= due:
            return rule.id
    return None


def noncurrent_action(
    config: LifecycleConfiguration,
    obj: ObjectFacts,
    noncurrent_since: float,
    newer_noncurrent: int,
    now: float,
) -> Action | None:
    """What the configuration wants done to a noncurrent version: expire, transition, or nothing.

    `noncurrent_since`: when a newer version replaced it (NoncurrentDays count from then, rounded
    up to midnight UTC as Days are); `newer_noncurrent`: how many noncurrent versions of its key
    are newer (NewerNoncurrentVersions keeps that many, whatever their age).
    """
    rules = [r for r in config.rules if r.enabled and r.filter.matches(obj)]
    for rule in rules:
        if rule.noncurrent_expiration_days is None:
            continue
        keep = rule.noncurrent_expiration_newer or 0
        due = due_at(noncurrent_since, rule.noncurrent_expiration_days, None)
        if due is not None and now >= due and newer_noncurrent >= keep:
            return Action(ActionKind.EXPIRE, rule_id=rule.id, reason="noncurrent-expiration")
    best: tuple[int, Action] | None = None
    for rule in rules:
        for t in rule.noncurrent_transitions:
            due = due_at(noncurrent_since, t.days, None)
            if due is None or now < due or newer_noncurrent < (t.newer_versions or 0):
                continue
            if not can_transition(obj.storage_class, t.storage_class, obj.tier):
                continue
            rank = CLASS_RANK[t.storage_class]
            if best is None or rank > best[0]:
                best = (
                    rank,
                    Action(ActionKind.TRANSITION, t.storage_class, rule.id, "noncurrent-transition"),
                )
    return best[1] if best else None


def removes_lone_marker(config: LifecycleConfiguration, key: str) -> str | None:
    """The ID of the rule whose ExpiredObjectDeleteMarker removes a key's lone delete marker."""
    for rule in config.rules:
        if rule.enabled and rule.expired_object_delete_marker and rule.filter.matches_key(key):
            return rule.id
    return None
