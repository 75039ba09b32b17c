"""Weighted rendezvous placement: distinct groups, weights honoured, minimal movement."""

from __future__ import annotations

import math
import random
from collections import Counter
from pathlib import Path

import pytest
import xxhash

from erasure.placement import PlacementMemo, hrw_score, place, rank
from erasure.topology import Domain, Topology, default_layout


def flat(tmp_path: Path, n: int, weights: list[float] | None = None) -> Topology:
    weights = weights or [1.0] * n
    return Topology(Domain(f"d{i}", tmp_path / f"d{i}", node=f"n{i}", weight=weights[i]) for i in range(n))


@pytest.mark.parametrize("level,expect_groups", [("drive", 12), ("node", 4), ("rack", 2)])
def test_shards_land_in_distinct_groups(tmp_path: Path, level: str, expect_groups: int) -> None:
    topology = default_layout(tmp_path, "hot", nodes=4, drives_per_node=3, racks=2, weight=1.0)
    assert len(topology.groups(level)) == expect_groups
    width = min(expect_groups, 6)
    for n in range(300):
        chosen = place(f"blob-{n}", topology, level, width)
        assert len(chosen) == width
        assert len({d.label(level) for d in chosen}) == width
    assert place("blob-x", topology, level, width) == place("blob-x", topology, level, width)


def test_offline_domains_are_never_chosen(tmp_path: Path) -> None:
    topology = default_layout(tmp_path, "hot", nodes=4, drives_per_node=2, weight=1.0)
    topology.set_offline("n2")
    for n in range(200):
        chosen = place(f"b{n}", topology, "node", 3)
        assert len(chosen) == 3 and all(d.online and d.node != "n2" for d in chosen)
    assert len(place("b", topology, "node", 4)) == 3  # only three nodes are up


def test_weights_are_respected_roughly(tmp_path: Path) -> None:
    topology = flat(tmp_path, 4, [1.0, 2.0, 3.0, 4.0])
    wins = Counter(place(f"obj-{n}", topology, "drive", 1)[0].id for n in range(20000))
    for i, weight in enumerate([1.0, 2.0, 3.0, 4.0]):
        assert wins[f"d{i}"] / 20000 == pytest.approx(weight / 10, abs=0.02)


def test_adding_a_domain_moves_only_its_share(tmp_path: Path) -> None:
    topology = flat(tmp_path, 6)
    ids = [f"obj-{n}" for n in range(20000)]
    before = {i: place(i, topology, "drive", 1)[0].id for i in ids}
    topology.add(Domain("d6", tmp_path / "d6", node="n6", weight=1.0))
    after = {i: place(i, topology, "drive", 1)[0].id for i in ids}
    moved = [i for i in ids if before[i] != after[i]]
    assert len(moved) / len(ids) == pytest.approx(1 / 7, abs=0.015)
    assert all(after[i] == "d6" for i in moved)  # nothing moves between the old domains


def test_full_shard_sets_change_minimally(tmp_path: Path) -> None:
    """With k+m=3 of 6 → 7 domains, a shard slot changes only when the new domain enters the set."""
    topology = flat(tmp_path, 6)
    ids = [f"obj-{n}" for n in range(5000)]
    before = {i: {d.id for d in place(i, topology, "drive", 3)} for i in ids}
    topology.add(Domain("d6", tmp_path / "d6", node="n6", weight=1.0))
    for i in ids:
        after = {d.id for d in place(i, topology, "drive", 3)}
        assert len(before[i] - after) <= 1
        assert after - before[i] <= {"d6"}


def test_set_state_by_node_rack_and_drive(tmp_path: Path) -> None:
    topology = default_layout(tmp_path, "warm", nodes=4, drives_per_node=2, racks=2)
    assert {d.id for d in topology.set_offline("n3")} == {"warm-n3-d1", "warm-n3-d2"}
    assert len(topology.set_offline("rack2")) == 4  # n2 and n4
    topology.set_online("warm-n2-d1")
    assert sorted(d.id for d in topology if d.online) == ["warm-n1-d1", "warm-n1-d2", "warm-n2-d1"]
    with pytest.raises(KeyError):
        topology.set_offline("nope")


def _documented_score(key: str, cid: str, weight: float) -> float:
    """The score the module's docstring describes, written from it: -weight / ln(u), u = xxh3-64 of
    "key NUL candidate" (UTF-8) mapped into (0, 1); nothing for a weight that is not positive."""
    if weight <= 0:
        return 0.0
    u = (xxhash.xxh3_64_intdigest(f"{key}\0{cid}".encode()) + 0.5) / float(1 << 64)
    return -weight / math.log(u)


def _ranked_as_documented(key: str, candidates: list[tuple[str, float]]) -> list[str]:
    """Highest documented score first, ties by id, zeros out."""
    scored = sorted(((_documented_score(key, cid, w), cid) for cid, w in candidates), reverse=True)
    return [cid for score, cid in scored if score > 0]


def test_rank_orders_as_documented() -> None:
    """The same bytes hashed and the same score, so every placement stays where it was (a different
    order would send rebalance after every stored blob)."""
    rng = random.Random(17)
    names = ["d1", "hot/n1/d1", "hot/n2/d3", "région-ü", "rack2", "zone1/rack1/n4", "x" * 40, "n7", "n10"]
    for n in range(2_000):
        key = rng.choice([f"t{n:014x}{rng.getrandbits(72):018x}-abc", f"blob-{n}\0hot/n{n % 5}", f"é{n}"])
        candidates = [(c, rng.choice([0.0, -1.0, 0.001, 1.0, 2.5, 1e-300, rng.random() * 4])) for c in names]
        rng.shuffle(candidates)
        assert rank(key, candidates) == _ranked_as_documented(key, candidates)
        cid, weight = candidates[0]
        assert hrw_score(key, cid, weight) == _documented_score(key, cid, weight)


def test_a_known_blob_keeps_its_place() -> None:
    """Pinned: what this version ranked for a given id. A change of hash, its input or the score
    would move every existing blob's rightful place."""
    groups = [(f"hot/n{i}/d{j}", 1.0 + 0.5 * (i % 3)) for i in range(1, 5) for j in range(1, 4)]
    assert rank("t0661f55547a0011223344556677-abc", groups) == [
        "hot/n1/d3", "hot/n3/d2", "hot/n2/d1", "hot/n1/d2", "hot/n2/d2", "hot/n4/d1",
        "hot/n2/d3", "hot/n4/d2", "hot/n4/d3", "hot/n1/d1", "hot/n3/d1", "hot/n3/d3",
    ]  # fmt: skip
    assert rank("blob-é\0x", [("a", 1.0), ("b", 0.0), ("c", 2.5), ("ü", 1.0), ("e", -1.0)]) == ["c", "a", "ü"]


def test_a_memo_places_as_place_does_until_a_chosen_drive_turns_unusable(tmp_path: Path) -> None:
    """A batch's memo gives what `place()` gives, and ranks again (never reusing a drive that
    may not take the write now) when a chosen drive fails, drains or goes offline."""
    topology = default_layout(tmp_path, "hot", nodes=8, drives_per_node=2, weight=1.0)
    unusable: set[str] = set()

    def usable(d: Domain) -> bool:
        return d.id not in unusable

    memo = PlacementMemo()
    first = memo.place("obj0", topology, "drive", 3, usable=usable)
    assert first == place("obj0", topology, "drive", 3, usable=usable)
    assert memo.place("obj0", topology, "drive", 3, usable=usable) == first
    assert len(memo.place("obj0", topology, "drive", 5, usable=usable)) == 5  # per width

    unusable.add(first[0].id)  # marked failing or full mid-batch
    second = memo.place("obj0", topology, "drive", 3, usable=usable)
    assert first[0] not in second and second == place("obj0", topology, "drive", 3, usable=usable)
    second[1].draining = True
    third = memo.place("obj0", topology, "drive", 3, usable=usable)
    assert second[1] not in third and third == place("obj0", topology, "drive", 3, usable=usable)
    topology.set_offline(third[2].id)
    fourth = memo.place("obj0", topology, "drive", 3, usable=usable)
    assert third[2] not in fourth and fourth == place("obj0", topology, "drive", 3, usable=usable)


def test_a_memo_ranks_again_when_a_drive_is_added(tmp_path: Path) -> None:
    """A drive added mid-batch may now rank first: the memo does not keep the older ranking."""
    topology = flat(tmp_path, 6)
    memo = PlacementMemo()
    key = next(f"b{n}" for n in range(1000) if rank(f"b{n}", [(f"d{i}", 1.0) for i in range(7)])[0] == "d6")
    assert topology.get("d6") is None
    before = memo.place(key, topology, "drive", 3, usable=lambda d: True)
    topology.add(Domain("d6", tmp_path / "d6", node="n6", weight=1.0))
    after = memo.place(key, topology, "drive", 3, usable=lambda d: True)
    assert after[0].id == "d6" and after != before and after == place(key, topology, "drive", 3)
