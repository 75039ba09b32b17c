"""Access temperature: decay, desired tiers, eviction order, watermarks, histograms."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lifecycle.facts import ObjectFacts
from lifecycle.temperature import (
    TemperaturePolicy,
    Watermarks,
    bump,
    bytes_to_free,
    coldest_first,
    current_heat,
    decayed,
    desired_tier,
    heat_histogram,
    over_high_watermark,
    temperature_managed,
)

T0 = 1_700_000_000.0
HOUR, DAY = 3600.0, 86400.0
POLICY = TemperaturePolicy()
TIERS = ["gpu-direct", "hot", "warm", "cold"]


def obj(
    tier: str, heat: float = 0.0, *, idle: float = 0.0, key: str = "k", heat_at: float | None = None
) -> ObjectFacts:
    return ObjectFacts(key, 100, {}, "STANDARD", tier, T0 - 100 * DAY, T0 - idle, heat, heat_at)


# --- decay ------------------------------------------------------------------------------------


def test_half_life() -> None:
    assert decayed(8.0, T0, T0 + DAY, DAY) == pytest.approx(4.0)
    assert decayed(8.0, T0, T0 + 3 * DAY, DAY) == pytest.approx(1.0)
    assert decayed(8.0, T0, T0, DAY) == 8.0
    assert decayed(8.0, T0, T0 - 5, DAY) == 8.0  # a clock step back never heats an object up
    assert bump(8.0, T0, T0 + DAY, DAY) == pytest.approx(5.0)
    assert bump(0.0, 0.0, T0, DAY, weight=2.5) == 2.5


def test_current_heat_uses_heat_at_when_known() -> None:
    assert current_heat(obj("hot", 4.0, idle=DAY), T0, DAY) == pytest.approx(2.0)
    assert current_heat(obj("hot", 4.0, idle=DAY, heat_at=T0), T0, DAY) == pytest.approx(4.0)


heats = st.floats(min_value=0, max_value=1e6)
times = st.floats(min_value=0, max_value=4e9)
half_lives = st.floats(min_value=1, max_value=1e7)


@settings(max_examples=50)
@given(heats, times, times, times, half_lives)
def test_decay_is_monotonic_in_time(h: float, since: float, a: float, b: float, half: float) -> None:
    early, late = sorted((a, b))
    assert decayed(h, since, late, half) <= decayed(h, since, early, half) <= h


@settings(max_examples=50)
@given(heats, times, times, half_lives, st.floats(min_value=0, max_value=100))
def test_bump_is_at_least_decayed(h: float, since: float, now: float, half: float, weight: float) -> None:
    assert bump(h, since, now, half, weight) >= decayed(h, since, now, half)
    assert bump(h, since, now, half, weight) == pytest.approx(decayed(h, since, now, half) + weight)


@settings(max_examples=50)
@given(heats, times, st.floats(0, 1e7), st.floats(0, 1e7), half_lives)
def test_decay_composes(h: float, t: float, d1: float, d2: float, half: float) -> None:
    stepwise = decayed(decayed(h, t, t + d1, half), t + d1, t + d1 + d2, half)
    assert math.isclose(stepwise, decayed(h, t, t + d1 + d2, half), rel_tol=1e-9, abs_tol=1e-300)


# --- desired tier -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        (obj("warm", 25.0), "gpu-direct"),
        (obj("hot", 20.0), "gpu-direct"),
        (obj("hot", 19.9), None),
        (obj("warm", 2.0), "hot"),
        (obj("warm", 1.9), None),
        (obj("gpu-direct", 25.0, idle=HOUR - 1, heat_at=T0), None),
        (obj("gpu-direct", 25.0, idle=HOUR, heat_at=T0), "hot"),
        (obj("gpu-direct", 1.9), "hot"),
        (obj("hot", 0.0, idle=30 * DAY), "warm"),
        (obj("hot", 0.0, idle=30 * DAY - 1), None),
        (obj("warm", 0.0, idle=400 * DAY), None),
        (obj("cold", 1000.0), None),
        (obj("somewhere", 1000.0), None),
        # Hysteresis: heat alone does not promote an object that has sat idle past the demotion mark.
        (obj("hot", 25.0, idle=2 * HOUR, heat_at=T0), None),
        (obj("warm", 3.0, idle=31 * DAY, heat_at=T0), None),
    ],
)
def test_desired_tier(facts: ObjectFacts, expected: str | None) -> None:
    assert desired_tier(facts, POLICY, T0) == expected


def test_heat_decays_before_it_is_compared() -> None:
    # 8 heat, 2 days ago → 2 now: enough for hot, not for staying on gpu-direct past an hour idle.
    assert desired_tier(obj("warm", 8.0, idle=2 * DAY), POLICY, T0) == "hot"
    assert desired_tier(obj("warm", 8.0, idle=3 * DAY), POLICY, T0) is None


def test_policy_validation() -> None:
    with pytest.raises(ValueError):
        TemperaturePolicy(promote_to_gpu=1.0, promote_to_hot=2.0)
    with pytest.raises(ValueError):
        TemperaturePolicy(half_life_s=0)
    with pytest.raises(ValueError):
        Watermarks(high=0.5, low=0.6)


@settings(max_examples=120, deadline=None)
@given(
    st.sampled_from(TIERS[:3]),
    st.floats(0, 1e4),
    st.floats(0, 90 * DAY),
    st.floats(0, 5 * DAY),
    st.floats(1.0, 50.0),
    st.floats(0.0, 3.0),
)
def test_moves_settle_and_never_touch_cold(tier, heat, idle, heat_age, gpu, hot_ratio) -> None:
    # At most `gpu`: gpu * 3.0 / 3.0 can round one ulp above it, which the policy rightly refuses.
    policy = TemperaturePolicy(promote_to_gpu=gpu, promote_to_hot=min(gpu, max(0.01, gpu * hot_ratio / 3.0)))
    facts = obj(tier, heat, idle=idle, heat_at=T0 - min(heat_age, idle))
    seen = [tier]
    for _ in range(3):
        target = desired_tier(facts, policy, T0)
        if target is None:
            break
        assert target in TIERS[:3] and target not in seen  # no flapping back to a tier it left
        seen.append(target)
        facts = ObjectFacts(
            facts.key,
            facts.size,
            facts.tags,
            facts.storage_class,
            target,
            facts.created,
            facts.last_access,
            facts.heat,
            facts.heat_at,
        )
    else:
        pytest.fail(f"did not settle: {seen}")
    assert desired_tier(obj("cold", heat, idle=idle), policy, T0) is None


# --- eviction order and watermarks ------------------------------------------------------------


def test_coldest_first_ties_break_on_idle_then_key() -> None:
    a = obj("hot", 0.0, idle=DAY, key="a")
    b = obj("hot", 0.0, idle=2 * DAY, key="b")
    c = obj("hot", 5.0, idle=0.0, key="c", heat_at=T0)
    d = obj("hot", 0.0, idle=DAY, key="0")
    assert [o.key for o in coldest_first([c, a, b, d], T0, DAY)] == ["b", "0", "a", "c"]


@settings(max_examples=50)
@given(st.lists(st.tuples(st.floats(0, 1e3), st.floats(0, 60 * DAY), st.floats(0, 10 * DAY)), max_size=30))
def test_coldest_first_is_sorted_by_current_heat(specs) -> None:
    objs = [obj("hot", h, idle=idle, key=str(i), heat_at=T0 - age) for i, (h, idle, age) in enumerate(specs)]
    ordered = coldest_first(objs, T0, DAY)
    assert sorted(o.key for o in ordered) == sorted(o.key for o in objs)
    keys = [(current_heat(o, T0, DAY), o.last_access) for o in ordered]
    assert keys == sorted(keys)


def test_watermarks() -> None:
    wm = Watermarks()
    assert not over_high_watermark(90, 100, wm)
    assert over_high_watermark(91, 100, wm)
    assert not over_high_watermark(0, 0, wm)
    assert bytes_to_free(95, 100, wm) == 20
    assert bytes_to_free(50, 100, wm) == 0
    assert bytes_to_free(10, 0, wm) == 10


@settings(max_examples=50)
@given(st.integers(0, 10**15), st.integers(0, 10**15), st.floats(0, 1), st.floats(0, 1))
def test_freeing_reaches_the_low_watermark(used: int, capacity: int, x: float, y: float) -> None:
    wm = Watermarks(high=max(x, y), low=min(x, y))
    freed = bytes_to_free(used, capacity, wm)
    assert 0 <= freed <= used
    assert used - freed <= wm.low * capacity or freed == 0
    if over_high_watermark(used, capacity, wm):
        assert freed > 0 or wm.low == wm.high == 1.0


# --- histogram --------------------------------------------------------------------------------


def test_heat_histogram_is_cumulative_with_le_labels() -> None:
    assert heat_histogram([0.0, 0.1, 0.5, 2.0, 19.0, 20.0, 21.0, 1000.0]) == {
        "0.1": 2,
        "1": 3,
        "2": 4,
        "5": 4,
        "10": 4,
        "20": 6,
        "50": 7,
        "+Inf": 8,
    }
    assert heat_histogram([], bounds=(1, 2)) == {"1": 0, "2": 0, "+Inf": 0}
    with pytest.raises(ValueError):
        heat_histogram([1.0], bounds=(2, 1))


@settings(max_examples=50)
@given(st.lists(st.floats(0, 1e4), max_size=50))
def test_heat_histogram_counts_everything_once(values: list[float]) -> None:
    hist = heat_histogram(values)
    counts = list(hist.values())
    assert counts == sorted(counts)
    assert hist["+Inf"] == len(values)
    assert hist["2"] == sum(1 for v in values if v <= 2)


@pytest.mark.parametrize(
    ("storage_class", "explicit", "unclassified_on", "managed"),
    [
        ("STANDARD", False, True, True),  # written without a class
        ("STANDARD", False, False, False),  # ... in a bucket (or server) that turned temperature off
        ("STANDARD", True, True, False),  # the writer named STANDARD
        ("STANDARD_IA", False, True, False),  # a lifecycle transition gave it STANDARD_IA
        ("STANDARD_IA", True, True, False),
        ("EXPRESS_ONEZONE", True, True, False),
        ("INTELLIGENT_TIERING", True, False, True),  # always: that class *is* temperature management
    ],
)
def test_only_unclassed_and_intelligent_tiering_objects_follow_temperature(
    storage_class: str, explicit: bool, unclassified_on: bool, managed: bool
) -> None:
    obj = ObjectFacts("k", 100, {}, storage_class, "warm", T0, T0, 50.0, storage_class_explicit=explicit)
    assert temperature_managed(obj, unclassified_on) is managed
