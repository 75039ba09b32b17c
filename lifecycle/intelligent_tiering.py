"""S3 Intelligent-Tiering: the bucket's archive configurations, and what they decide for one object.

An INTELLIGENT_TIERING object keeps reporting that class wherever its data lies. Frequent and
infrequent access are automatic (AWS: 30 days without access → Infrequent Access); the optional
Archive and Deep Archive Access tiers are opted into per bucket by configurations, each with a
filter and a number of days without access. Here both archive tiers land on tierstore's cold tier.

Promotion back to frequent access on a read is the temperature policy's job, not this module's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from xml.etree.ElementTree import Element

from lifecycle.facts import DAY, Action, ActionKind, ObjectFacts
from lifecycle.rules import (
    Filter,
    RuleError,
    children,
    integer,
    invalid,
    malformed,
    one,
    parse_document,
    parse_filter,
    raw_text,
    render_filter,
    xml_document,
    xml_element,
    xml_text,
)

ARCHIVE_ACCESS = "ARCHIVE_ACCESS"
DEEP_ARCHIVE_ACCESS = "DEEP_ARCHIVE_ACCESS"
# AWS's bounds on the days without access before each archive tier.
DAYS_RANGE = {ARCHIVE_ACCESS: (90, 730), DEEP_ARCHIVE_ACCESS: (180, 730)}
MAX_ID_LENGTH = 64
INTELLIGENT_TIERING = "INTELLIGENT_TIERING"
_FREQUENT_TIERS = ("gpu-direct", "hot")

__all__ = [
    "ARCHIVE_ACCESS",
    "DEEP_ARCHIVE_ACCESS",
    "ITPolicy",
    "IntelligentTieringConfig",
    "RuleError",
    "Tiering",
    "it_action",
    "parse_intelligent_tiering",
    "render_intelligent_tiering",
    "render_intelligent_tiering_list",
    "validate_intelligent_tiering",
]


@dataclass(frozen=True)
class Tiering:
    days: int
    access_tier: str  # ARCHIVE_ACCESS | DEEP_ARCHIVE_ACCESS


@dataclass(frozen=True)
class IntelligentTieringConfig:
    id: str
    enabled: bool
    filter: Filter
    tierings: tuple[Tiering, ...]


@dataclass(frozen=True)
class ITPolicy:
    infrequent_after_days: float = 30.0
    # AWS does not monitor (nor charge monitoring for) smaller objects: they stay frequent.
    min_monitored_size: int = 128 * 1024


# --- XML in ----------------------------------------------------------------------------------


def _tiering(element: Element) -> Tiering:
    groups = children(element, ("Days", "AccessTier"))
    days_el, tier_el = one(groups, "Days"), one(groups, "AccessTier")
    if days_el is None or tier_el is None:
        raise malformed("<Tiering> needs <Days> and <AccessTier>")
    access_tier = raw_text(tier_el).strip()
    if access_tier not in DAYS_RANGE:
        raise malformed(f"unknown AccessTier {access_tier!r}")
    return Tiering(integer(days_el), access_tier)


def parse_intelligent_tiering(xml: bytes) -> IntelligentTieringConfig:
    """PutBucketIntelligentTieringConfiguration's body → a validated configuration, or RuleError."""
    root = parse_document(xml, "IntelligentTieringConfiguration")
    groups = children(root, ("Id", "Filter", "Status", "Tiering"))
    id_el, filter_el, status_el = one(groups, "Id"), one(groups, "Filter"), one(groups, "Status")
    if id_el is None:
        raise malformed("<Id> is required")
    if status_el is None or raw_text(status_el).strip() not in ("Enabled", "Disabled"):
        raise malformed("<Status> must be Enabled or Disabled")
    config = IntelligentTieringConfig(
        id=raw_text(id_el),
        enabled=raw_text(status_el).strip() == "Enabled",
        filter=parse_filter(filter_el, sizes=False) if filter_el is not None else Filter(),
        tierings=tuple(_tiering(t) for t in groups.get("Tiering", [])),
    )
    validate_intelligent_tiering(config)
    return config


def validate_intelligent_tiering(config: IntelligentTieringConfig) -> None:
    if not config.id:
        raise invalid("The Id of an Intelligent-Tiering configuration must not be empty")
    if len(config.id) > MAX_ID_LENGTH:
        raise invalid(
            f"The Id of an Intelligent-Tiering configuration must not exceed {MAX_ID_LENGTH} characters"
        )
    if config.filter.has_size:
        raise malformed("Intelligent-Tiering filters take no object size")
    if not config.tierings:
        raise malformed("at least one <Tiering> is required")
    seen: dict[str, int] = {}
    for tiering in config.tierings:
        if tiering.access_tier not in DAYS_RANGE:
            raise malformed(f"unknown AccessTier {tiering.access_tier!r}")
        if tiering.access_tier in seen:
            raise invalid(f"AccessTier {tiering.access_tier} given more than once")
        low, high = DAYS_RANGE[tiering.access_tier]
        if not low <= tiering.days <= high:
            raise invalid(
                f"Days for AccessTier {tiering.access_tier} must be between {low} and {high}, got {tiering.days}"
            )
        seen[tiering.access_tier] = tiering.days
    if len(seen) == 2 and seen[DEEP_ARCHIVE_ACCESS] <= seen[ARCHIVE_ACCESS]:
        raise invalid("Days for DEEP_ARCHIVE_ACCESS must be greater than Days for ARCHIVE_ACCESS")


# --- XML out ---------------------------------------------------------------------------------


def _config_parts(config: IntelligentTieringConfig) -> list[str]:
    parts = [xml_text("Id", config.id)]
    if config.filter != Filter():  # AWS leaves out a filter that was never given
        parts.append(render_filter(config.filter))
    parts.append(xml_text("Status", "Enabled" if config.enabled else "Disabled"))
    parts += [
        xml_element("Tiering", xml_text("Days", t.days), xml_text("AccessTier", t.access_tier))
        for t in config.tierings
    ]
    return parts


def render_intelligent_tiering(config: IntelligentTieringConfig) -> bytes:
    """The document GetBucketIntelligentTieringConfiguration returns."""
    return xml_document("IntelligentTieringConfiguration", *_config_parts(config))


def render_intelligent_tiering_list(configs: Iterable[IntelligentTieringConfig]) -> bytes:
    """ListBucketIntelligentTieringConfigurations: all of them (a bucket holds at most 1,000), by Id."""
    ordered = sorted(configs, key=lambda c: c.id)
    return xml_document(
        "ListBucketIntelligentTieringConfigurationsOutput",
        xml_text("IsTruncated", "false"),
        *(xml_element("IntelligentTieringConfiguration", *_config_parts(c)) for c in ordered),
    )


# --- evaluation ------------------------------------------------------------------------------


def _archive_action(
    configs: Sequence[IntelligentTieringConfig], obj: ObjectFacts, idle: float
) -> Action | None:
    """The deepest archive tier any matching, enabled configuration has made due."""
    best: tuple[int, Action] | None = None
    for config in configs:
        if not config.enabled or not config.filter.matches(obj):
            continue
        for tiering in config.tierings:
            if idle < tiering.days * DAY:
                continue
            depth = 2 if tiering.access_tier == DEEP_ARCHIVE_ACCESS else 1
            if best is None or depth > best[0]:
                reason = "deep-archive" if depth == 2 else "archive"
                best = (depth, Action(ActionKind.TRANSITION, "COLD", config.id, reason))
    return best[1] if best else None


def it_action(
    configs: Sequence[IntelligentTieringConfig], obj: ObjectFacts, now: float, policy: ITPolicy
) -> Action | None:
    """Where Intelligent-Tiering wants an idle object: the cold tier (archive), warm (infrequent), or None."""
    if obj.storage_class.upper() != INTELLIGENT_TIERING or obj.size < policy.min_monitored_size:
        return None
    if obj.tier == "cold":
        return None  # already archived; archive and deep archive are one tier here
    idle = obj.idle_s(now)
    archive = _archive_action(configs, obj, idle)
    if archive is not None:
        return archive
    if idle >= policy.infrequent_after_days * DAY and obj.tier in _FREQUENT_TIERS:
        return Action(ActionKind.TRANSITION, "WARM", reason="infrequent")
    return None
