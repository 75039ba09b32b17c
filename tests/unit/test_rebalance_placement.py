"""Placement arithmetic of the rebalancer (erasure.rebalance): desired groups, the minimal matching
of shards onto them, the moved fraction after growing a tier, drains, and one real shard move."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from erasure import ErasurePool, default_layout
from erasure.location import Location
from erasure.placement import place
from erasure.rebalance import desired_groups, move_shard, plan_moves, set_code, stale_code
from erasure.topology import Domain, Topology


def layout(nodes: int, drives: int = 1, root: Path = Path("/nonexistent")) -> Topology:
    topology = Topology()
    for n in range(1, nodes + 1):
        for d in range(1, drives + 1):
            topology.add(Domain(id=f"hot-n{n}-d{d}", path=root / f"n{n}" / f"d{d}", node=f"n{n}", weight=1.0))
    return topology


def written(data_id: str, topology: Topology, width: int, k: int = 4) -> Location:
    """Where a write made now puts a blob (the writer's own placement call)."""
    shards = [d.id for d in place(data_id, topology, "node", width)]
    return Location("ec", k, width - k, 1 << 20, list(shards))


def groups_of(loc: Location, topology: Topology) -> set[str]:
    return {topology[d].label("node") for d in loc.shards if d is not None}


def apply(loc: Location, plan_moves_: dict[int, Domain]) -> Location:
    shards = list(loc.shards)
    for i, d in plan_moves_.items():
        shards[i] = d.id
    return Location(loc.layout, loc.k, loc.m, loc.block_size, shards, set(loc.missing))


def test_fresh_writes_need_no_move() -> None:
    topology = layout(8, 2)
    for i in range(300):
        loc = written(f"blob{i}", topology, 6)
        plan = plan_moves(f"blob{i}", loc, topology, "node")
        assert plan.clean and not plan.moves
        assert groups_of(loc, topology) == set(plan.desired)


def test_a_blob_placed_by_another_id_is_planned_by_that_id() -> None:
    """A batch of small PUTs is placed by its first blob's id (`Location.placed_by`): rebalance
    ranks by that id too, so such a blob needs no move now and, after nodes join, moves to the
    groups that id prefers; the field survives the catalog's JSON and is absent otherwise."""
    topology = layout(8, 2)
    for i in range(100):
        loc = written(f"first{i}", topology, 6)
        loc.placed_by = f"first{i}"
        assert plan_moves(f"other{i}", loc, topology, "node").clean
    assert "placed_by" not in written("blob", topology, 6).to_dict()
    assert Location.from_dict(loc.to_dict()).placed_by == loc.placed_by
    grown = layout(10, 2)
    moved = apply(loc, plan_moves("other99", loc, grown, "node").moves)
    assert groups_of(moved, grown) == set(desired_groups(loc.placement_key("other99"), grown, "node", 6))


def test_adding_nodes_moves_their_share_only() -> None:
    topology = layout(8, 2)
    blobs = {f"blob{i}": written(f"blob{i}", topology, 6) for i in range(2000)}
    for n in (9, 10):
        for d in (1, 2):
            topology.add(Domain(id=f"hot-n{n}-d{d}", path=Path("/x"), node=f"n{n}", weight=1.0))
    moved = total = 0
    for data_id, loc in blobs.items():
        plan = plan_moves(data_id, loc, topology, "node")
        total += loc.width
        moved += len(plan.moves)
        # Moves go only to the new nodes, never shift indexes, and end on the desired set.
        assert all(d.node in ("n9", "n10") for d in plan.moves.values())
        after = apply(loc, plan.moves)
        assert groups_of(after, topology) == set(plan.desired)
        assert len(groups_of(after, topology)) == loc.width
        assert plan_moves(data_id, after, topology, "node").clean
    ideal = 4 / 20  # 2 nodes of 2 drives join 8 such nodes
    assert abs(moved / total - ideal) < 0.02, (moved, total)


def test_draining_a_node_moves_exactly_its_shards() -> None:
    topology = layout(9, 2)
    blobs = {f"blob{i}": written(f"blob{i}", topology, 6) for i in range(1000)}
    on_n3 = sum(1 for loc in blobs.values() for d in loc.shards if d and d.startswith("hot-n3-"))
    for d in topology:
        if d.node == "n3":
            d.draining = True
    moved = 0
    for data_id, loc in blobs.items():
        plan = plan_moves(data_id, loc, topology, "node")
        assert {i for i, d in enumerate(loc.shards) if d and d.startswith("hot-n3-")} == set(plan.moves)
        assert all(d.node != "n3" for d in plan.moves.values())
        moved += len(plan.moves)
        # New writes already avoid the draining node, and agree with the plan.
        assert not any(d.node == "n3" for d in place(data_id, topology, "node", 6))
    assert moved == on_n3 > 0


def test_draining_one_drive_moves_only_that_nodes_shards() -> None:
    """The node keeps half its weight: its drained drive's shards move (mostly to the sibling
    drive), and the node now wins fewer blobs, so some of its other shards move too — nothing else."""
    topology = layout(8, 2)
    blobs = {f"blob{i}": written(f"blob{i}", topology, 6) for i in range(500)}
    topology["hot-n2-d1"].draining = True
    sibling = 0
    for data_id, loc in blobs.items():
        plan = plan_moves(data_id, loc, topology, "node")
        assert {i for i, d in enumerate(loc.shards) if d == "hot-n2-d1"} <= set(plan.moves)
        for i, target in plan.moves.items():
            assert loc.shards[i] in ("hot-n2-d1", "hot-n2-d2")
            assert target.id != "hot-n2-d1"
            sibling += target.id == "hot-n2-d2"
    assert sibling > 0


def test_offline_source_is_blocked_not_moved() -> None:
    topology = layout(8)
    loc = written("b", topology, 6)
    topology.add(Domain(id="hot-n9-d1", path=Path("/x"), node="n9", weight=100.0))  # wins every blob
    source = topology[
        next(
            d
            for d in loc.shards
            if d and topology[d].label("node") not in desired_groups("b", topology, "node", 6)
        )
    ]
    source.state = source.state.OFFLINE
    plan = plan_moves("b", loc, topology, "node")
    assert plan.blocked == 1 and not plan.moves


@settings(max_examples=60, deadline=None)
@given(
    nodes=st.integers(6, 14),
    width=st.integers(2, 6),
    shuffle=st.lists(st.integers(0, 30), min_size=6, max_size=6),
    missing=st.sets(st.integers(0, 5), max_size=2),
    drain=st.sets(st.integers(1, 14), max_size=2),
)
def test_any_placement_converges_in_one_plan(
    nodes: int, width: int, shuffle: list[int], missing: set[int], drain: set[int]
) -> None:
    """Whatever the recorded placement (duplicates in one group, drained nodes, missing shards),
    one plan leaves every readable shard in a distinct desired group, moving no kept shard."""
    topology = layout(nodes, 2)
    for d in topology:
        if int(d.node[1:]) in drain:
            d.draining = True
    if len({d.node for d in topology if not d.draining}) < width:
        return
    ids = sorted(d.id for d in topology)
    loc = Location(
        "ec",
        max(width - 2, 1),
        width - max(width - 2, 1),
        1 << 20,
        [ids[s % len(ids)] for s in shuffle[:width]],
        {i for i in missing if i < width},
    )
    plan = plan_moves("blob", loc, topology, "node")
    after = apply(loc, plan.moves)
    present = [topology[d] for _, d in after.present()]
    assert all(not d.draining for d in present)
    assert len({d.label("node") for d in present}) == len(present)
    assert {d.label("node") for d in present} <= set(plan.desired)
    kept = [i for i, _ in loc.present() if i not in plan.moves]
    assert all(after.shards[i] == loc.shards[i] for i in kept)
    assert plan_moves("blob", after, topology, "node").clean


def test_move_shard_copies_and_verifies(tmp_path: Path) -> None:
    topology = default_layout(tmp_path, "hot", nodes=6, drives_per_node=1, weight=1.0)
    pool = ErasurePool("hot", topology, 2, 1, spread_level="node", block_size=4096, small_object_threshold=0)
    data = os.urandom(3 * 4096 * 2 + 123)

    async def scenario() -> None:
        writer = await pool.create_writer("blob1", len(data))
        await writer.write(data)
        loc = await writer.finish()
        free = next(d for d in topology if d.id not in loc["shards"])
        moved = await move_shard(pool, "blob1", loc, 1, free, len(data))
        assert moved["shards"][1] == free.id and moved["shards"][0] == loc["shards"][0]
        assert await pool.read_all("blob1", moved, len(data)) == data
        # The old file is still there (retired later by the caller), the new one verified.
        assert pool.store(loc["shards"][1]).has("blob1", 1)  # type: ignore[union-attr]
        # A corrupt source block is refused, and leaves no copy behind.
        path = pool.store(loc["shards"][0]).path_for("blob1", 0)  # type: ignore[union-attr]
        raw = bytearray(path.read_bytes())
        raw[600] ^= 0xFF
        path.write_bytes(bytes(raw))
        other = next(d for d in topology if d.id not in moved["shards"])
        with pytest.raises(Exception, match="checksum"):
            await move_shard(pool, "blob1", moved, 0, other, len(data))
        assert not pool.store(other.id).has("blob1", 0)  # type: ignore[union-attr]

    asyncio.run(scenario())


def test_set_code_and_stale_code(tmp_path: Path) -> None:
    topology = default_layout(tmp_path, "hot", nodes=9, drives_per_node=1, weight=1.0)
    pool = ErasurePool("hot", topology, 4, 2, spread_level="node")
    old = Location("ec", 4, 2, 1 << 20, [None] * 6)
    replica = Location("replica", 1, 2, 1 << 20, [None] * 3)
    assert not stale_code(pool, old) and not stale_code(pool, replica)
    set_code(pool, 6, 3)
    assert (pool.k, pool.m, pool.write_quorum) == (6, 3, 7)
    assert stale_code(pool, old) and stale_code(pool, replica)
    with pytest.raises(ValueError, match="needs 11"):
        set_code(pool, 8, 3)
