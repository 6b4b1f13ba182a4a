# SPDX-License-Identifier: Apache-2.0
"""Tests of hashring.ring: determinism, minimal movement, balance, validation."""

from __future__ import annotations

import bisect
import hashlib
import itertools
import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hashring import ring as ring_module
from hashring.exceptions import (
    EmptyRingError,
    HashRingError,
    InvalidMemberError,
    InvalidRingVersionError,
)
from hashring.ring import (
    MAX_WEIGHT,
    POSITION_MAX,
    POSITION_MIN,
    Move,
    Ring,
    moves,
    node_position,
    ring_of,
    subtract_arcs,
)


def node_ids(count: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    return [f"{rnd.getrandbits(128):032x}" for _ in range(count)]


NODES_100K = node_ids(100_000, seed=20261121)

member_ids = st.text(
    alphabet=st.characters(
        min_codepoint=33,
        max_codepoint=0x2FFF,
        exclude_categories=("Cc", "Cs", "Zs", "Zl", "Zp"),
    ),
    min_size=1,
    max_size=20,
)
member_sets = st.sets(member_ids, min_size=1, max_size=20)


# -- lookups -----------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(members=member_sets, seed=st.integers(0, 2**32), version=st.integers(1, 2**31))
def test_assign_matches_owner(members: set[str], seed: int, version: int) -> None:
    ring = Ring(members, version=version)
    ids = [*node_ids(500, seed), "", "é", "node-1", "x" * 300]
    owners = ring.assign(ids)
    assert owners == [ring.owner(n) for n in ids]
    assert set(owners) <= members


def _in(arcs: list[tuple[int, int]], position: int) -> bool:
    at = bisect.bisect_right(arcs, (position, POSITION_MAX)) - 1
    return at >= 0 and arcs[at][0] <= position <= arcs[at][1]


@settings(max_examples=25, deadline=None)
@given(
    weights=st.dictionaries(member_ids, st.sampled_from([0.25, 1.0, 3.0]), min_size=1, max_size=12),
    seed=st.integers(0, 2**32),
    version=st.integers(1, 2**31),
)
def test_arcs_are_exactly_the_positions_each_member_owns(
    weights: dict[str, float], seed: int, version: int
) -> None:
    ring = Ring(weights, version=version)
    arcs = {member: ring.arcs(member) for member in weights}
    for member_arcs in arcs.values():  # sorted, disjoint, inclusive, in range
        assert all(POSITION_MIN <= a <= b <= POSITION_MAX for a, b in member_arcs)
        assert all(b < c for (_a, b), (c, _d) in itertools.pairwise(member_arcs))
    # Together they cover the circle once.
    assert sum(b - a + 1 for member_arcs in arcs.values() for a, b in member_arcs) == 2**64
    ids = node_ids(300, seed)
    for node, owner in zip(ids, ring.assign(ids), strict=True):
        assert [m for m in weights if _in(arcs[m], node_position(node))] == [owner]
    assert ring.arcs("not-a-member") == []


def test_the_arcs_of_a_lone_member_are_the_whole_circle() -> None:
    assert Ring(["a"]).arcs("a") == [(POSITION_MIN, POSITION_MAX)]


def test_subtracting_arcs() -> None:
    assert subtract_arcs([(0, 10), (20, 30), (40, 50)], [(5, 22), (45, 45), (60, 70)]) == [
        (0, 4),
        (23, 30),
        (40, 44),
        (46, 50),
    ]
    assert subtract_arcs([(0, 10)], []) == [(0, 10)]
    assert subtract_arcs([(0, 10)], [(0, 10)]) == []
    # A join: what a member gains is what the newcomer does not take... nothing;
    # what the newcomer gains is all it owns.
    before, after = Ring(["a", "b"]), Ring(["a", "b", "c"])
    assert subtract_arcs(after.arcs("a"), before.arcs("a")) == []
    assert subtract_arcs(after.arcs("c"), before.arcs("c")) == after.arcs("c")


def _arcs_of(points: set[int], offset: int, rng: random.Random) -> list[tuple[int, int]]:
    """Sorted, disjoint, inclusive arcs covering exactly ``points`` (shifted by ``offset``)."""
    arcs: list[tuple[int, int]] = []
    for point in sorted(points):
        if arcs and arcs[-1][1] == point + offset - 1 and rng.random() < 0.7:
            arcs[-1] = (arcs[-1][0], point + offset)  # sometimes two arcs touch
        else:
            arcs.append((point + offset, point + offset))
    return arcs


@settings(max_examples=300, deadline=None)
@given(
    mine=st.sets(st.integers(0, 40)),
    other=st.sets(st.integers(0, 40)),
    where=st.sampled_from([0, POSITION_MIN, POSITION_MAX - 40]),
    rng=st.randoms(use_true_random=False),
)
@example(
    mine={39, 40}, other={39}, where=POSITION_MAX - 40, rng=random.Random(0)
)  # left: the circle's top
@example(mine={0, 1}, other={1}, where=POSITION_MIN, rng=random.Random(0))  # left: its bottom
def test_subtracting_arcs_leaves_exactly_the_positions_not_in_the_other(
    mine: set[int], other: set[int], where: int, rng: random.Random
) -> None:
    """Against sets of positions, at the middle and at both ends of the circle;
    some arcs touch (``rng``, drawn by hypothesis: a failure replays)."""
    left = subtract_arcs(_arcs_of(mine, where, rng), _arcs_of(other, where, rng))
    covered = [p for first, last in left for p in range(first, last + 1)]
    assert covered == sorted(p + where for p in mine - other)
    assert all(first <= last for first, last in left)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(left))


@settings(max_examples=30, deadline=None)
@given(members=member_sets, seed=st.integers(0, 2**32))
def test_member_order_does_not_matter(members: set[str], seed: int) -> None:
    ordered = sorted(members)
    shuffled = ordered[:]
    random.Random(seed).shuffle(shuffled)
    ids = node_ids(300, seed)
    assert Ring(ordered).assign(ids) == Ring(shuffled).assign(ids)
    weights = {m: 1.0 + i % 3 for i, m in enumerate(ordered)}
    reordered = dict(sorted(weights.items(), reverse=True))
    assert Ring(weights).assign(ids) == Ring(reordered).assign(ids)


_SUBPROCESS = """
import hashlib, json, sys
from hashring.ring import Ring
members, nodes = json.loads(sys.stdin.read())
owners = Ring(members, version=7).assign(nodes)
print(hashlib.sha256("\\n".join(owners).encode()).hexdigest())
"""


def test_same_owners_in_every_process() -> None:
    """The map survives PYTHONHASHSEED and member order, across processes."""
    members = {f"agent-{i}": 1.0 + (i % 4) / 2 for i in range(25)}
    nodes = node_ids(5000, seed=1)
    digests = set()
    for hashseed, order in (("0", 1), ("1", -1), ("12345", 1), ("random", -1)):
        payload = json.dumps([dict(list(members.items())[::order]), nodes])
        env = {**os.environ, "PYTHONHASHSEED": hashseed}
        out = subprocess.run(
            [sys.executable, "-c", _SUBPROCESS],
            input=payload,
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        digests.add(out.stdout.strip())
    local = Ring(members, version=7).assign(nodes)
    assert digests == {hashlib.sha256("\n".join(local).encode()).hexdigest()}


def test_the_map_of_version_1_and_3_is_what_it_always_was() -> None:
    """Digests of owners and arcs computed before the ring's build was made
    faster: a change of the map would remap the fleets already stored."""
    rnd = random.Random(7)
    nodes = [f"{rnd.getrandbits(128):032x}" for _ in range(20000)]
    ring = Ring({f"agent-{i:03d}": 1.0 + (i % 3) / 2 for i in range(60)}, version=3)
    owners = hashlib.sha256("\n".join(ring.assign(nodes)).encode()).hexdigest()
    assert owners == "fe5964ec702c56195730a9b2e2ab80824975b0579195fc4122500e0ec3561429"
    firsts, lasts = ring.arc_columns("agent-007")
    arcs = hashlib.sha256(firsts.tobytes() + lasts.tobytes()).hexdigest()
    assert arcs == "47dac88bbfef96873e974dcb73bba063c85f4c9e265cfbce75c2f61227a6891c"


def test_equal_points_keep_the_order_of_their_members() -> None:
    """The smaller member id owns an equal point (a 2**-64 event, forced here)."""
    points = np.array([5, 3, 5, 1, 3, 9], dtype=np.uint64)
    order, ordered = ring_module._circle_order(points)
    assert order.tolist() == [3, 1, 4, 0, 2, 5]
    assert ordered.tolist() == [1, 3, 3, 5, 5, 9]
    distinct = np.array([5, 3, 8, 1], dtype=np.uint64)
    assert ring_module._circle_order(distinct)[0].tolist() == [3, 1, 0, 2]


def test_version_changes_the_map_and_only_the_version() -> None:
    members = [f"agent-{i}" for i in range(10)]
    ids = node_ids(2000, seed=3)
    v1, v1_again, v2 = Ring(members, 1), Ring(members, 1), Ring(members, 2)
    assert v1.assign(ids) == v1_again.assign(ids)
    changed = sum(a != b for a, b in zip(v1.assign(ids), v2.assign(ids), strict=True))
    # Independent maps agree on about 1/10 of the nodes.
    assert changed > 0.8 * len(ids)


def test_empty_ring() -> None:
    ring = Ring([])
    assert len(ring) == 0
    assert ring.assign([]) == []
    with pytest.raises(EmptyRingError) as err:
        ring.owner("node-1")
    assert err.value.node_id == "node-1"
    with pytest.raises(EmptyRingError):
        ring.assign(["node-1"])
    assert moves(ring, Ring(["a"]), ["n1"]) == [Move("n1", None, "a")]
    assert moves(Ring(["a"]), ring, ["n1"]) == [Move("n1", "a", None)]


def test_single_member_owns_everything() -> None:
    ring = Ring(["only"])
    assert set(ring.assign(node_ids(1000, 5))) == {"only"}
    assert ring.load(node_ids(10, 5)) == {"only": 10}


def test_node_id_must_be_a_string() -> None:
    ring = Ring(["a", "b"])
    with pytest.raises(TypeError, match="node id must be a string"):
        ring.owner(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="node id must be a string"):
        ring.assign(["ok", b"bytes"])  # type: ignore[list-item]


def test_members_and_version_exposed_read_only() -> None:
    ring = Ring({"b": 2, "a": 1.5}, version=3)
    assert ring.version == 3
    assert list(ring.members) == ["a", "b"]
    assert ring.members["b"] == 2.0
    assert "a" in ring and "c" not in ring
    with pytest.raises(TypeError):
        ring.members["c"] = 1.0  # type: ignore[index]
    assert ring == Ring({"a": 1.5, "b": 2.0}, version=3)
    assert ring != Ring({"a": 1.5, "b": 2.0}, version=4)


# -- movement ----------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(members=st.sets(member_ids, min_size=1, max_size=20), newcomer=member_ids)
def test_join_moves_only_to_the_newcomer(members: set[str], newcomer: str) -> None:
    members.discard(newcomer)
    if not members:
        return
    size = 4000 * (len(members) + 1)
    ids = node_ids(size, seed=len(members))
    before, after = Ring(members), Ring(members | {newcomer})
    moved = moves(before, after, ids)
    assert all(m.new_owner == newcomer for m in moved)
    expected = 1 / (len(members) + 1)
    assert abs(len(moved) / size - expected) <= 0.10 * expected


@settings(max_examples=25, deadline=None)
@given(members=st.sets(member_ids, min_size=2, max_size=20), data=st.data())
def test_leave_moves_only_the_leavers_nodes(members: set[str], data: st.DataObject) -> None:
    leaver = data.draw(st.sampled_from(sorted(members)))
    ids = node_ids(3000, seed=len(members))
    before, after = Ring(members), Ring(members - {leaver})
    moved = moves(before, after, ids)
    assert all(m.old_owner == leaver and m.new_owner != leaver for m in moved)
    # Every node the leaver had moved, nothing else did.
    assert len(moved) == before.assign(ids).count(leaver)


@settings(max_examples=20, deadline=None)
@given(
    weights=st.dictionaries(member_ids, st.floats(0.25, 8), min_size=2, max_size=12),
    data=st.data(),
)
def test_weight_change_moves_only_to_or_from_that_member(
    weights: dict[str, float], data: st.DataObject
) -> None:
    member = data.draw(st.sampled_from(sorted(weights)))
    factor = data.draw(st.sampled_from([0.5, 2.0, 3.0]))
    changed = {**weights, member: min(MAX_WEIGHT, weights[member] * factor)}
    moved = moves(Ring(weights), Ring(changed), node_ids(3000, seed=9))
    if factor > 1:
        assert all(m.new_owner == member for m in moved)
    else:
        assert all(m.old_owner == member for m in moved)


@pytest.mark.parametrize("count", [3, 10, 100, 200])
def test_join_and_leave_fractions_at_100k(count: int) -> None:
    members = [f"agent-{i:03d}" for i in range(count)]
    ring = Ring(members)
    joined = Ring([*members, "newcomer"])
    moved = moves(ring, joined, NODES_100K)
    expected = 1 / (count + 1)
    assert {m.new_owner for m in moved} == {"newcomer"}
    assert abs(len(moved) / len(NODES_100K) - expected) <= 0.10 * expected
    # A member leaving from the middle, not only the last one.
    leaver = members[count // 2]
    left = moves(ring, Ring([m for m in members if m != leaver]), NODES_100K)
    assert {m.old_owner for m in left} == {leaver}


# -- balance -----------------------------------------------------------------


@pytest.mark.parametrize(("count", "limit"), [(100, 1.10), (200, 1.15)])
def test_balance_at_100k_nodes(count: int, limit: float) -> None:
    ring = Ring([f"agent-{i:03d}" for i in range(count)])
    load = ring.load(NODES_100K)
    assert sum(load.values()) == len(NODES_100K)
    assert max(load.values()) / (len(NODES_100K) / count) <= limit


def test_weights_honoured_within_5_percent() -> None:
    weights = {"small": 0.5, "one": 1.0, "two": 2.0, "three": 3.0, "big": 5.5}
    load = Ring(weights).load(NODES_100K)
    total = sum(weights.values())
    for member, weight in weights.items():
        expected = len(NODES_100K) * weight / total
        assert abs(load[member] - expected) <= 0.05 * expected, member


# -- validation --------------------------------------------------------------


@pytest.mark.parametrize(
    ("members", "member", "field"),
    [
        (["a", ""], "", "id"),
        (["a", " b"], " b", "id"),
        (["a", 7], 7, "id"),
        (["a", "b", "a"], "a", "id"),
        ({"a": 1, "b": 0}, "b", "weight"),
        ({"a": -1.0}, "a", "weight"),
        ({"a": float("nan")}, "a", "weight"),
        ({"a": float("inf")}, "a", "weight"),
        ({"a": True}, "a", "weight"),
        ({"a": "1"}, "a", "weight"),
        ({"a": MAX_WEIGHT * 2}, "a", "weight"),
        ("abc", "abc", "id"),
    ],
)
def test_invalid_members_are_refused(members: object, member: object, field: str) -> None:
    with pytest.raises(InvalidMemberError) as err:
        Ring(members)  # type: ignore[arg-type]
    assert isinstance(err.value, ValueError)
    assert isinstance(err.value, HashRingError)
    assert err.value.member == member
    assert err.value.field == field
    assert repr(member) in str(err.value)


@pytest.mark.parametrize("version", [0, -1, 1.0, "1", True, None])
def test_invalid_version_is_refused(version: object) -> None:
    with pytest.raises(InvalidRingVersionError) as err:
        Ring(["a"], version=version)  # type: ignore[arg-type]
    assert isinstance(err.value, ValueError)
    assert err.value.version == version


def test_ring_of_shares_one_ring_per_members_and_version() -> None:
    one = ring_of({"a": 1.0, "b": 2.0}, version=3)
    assert ring_of({"b": 2.0, "a": 1.0}, version=3) is one  # the same members, any order
    assert one == Ring({"a": 1.0, "b": 2.0}, version=3)
    assert ring_of({"a": 1.0, "b": 2.0}, version=4) is not one
    assert ring_of({"a": 1.0, "b": 1.0}, version=3) is not one
    with pytest.raises(InvalidMemberError):
        ring_of({"": 1.0})


def _arcs_walked(ring: Ring, member: str) -> list[tuple[int, int]]:
    """The arcs of ``member`` by a walk of every point (what Ring.arcs did in
    Python): the reference the vectorized arcs must equal."""
    points = ring._points.tolist()
    owners = [ring._member_ids[i] for i in ring._owner_index.tolist()]
    if member not in ring:
        return []
    if all(o == member for o in owners):
        return [(POSITION_MIN, POSITION_MAX)]
    arcs = []
    for i, (point, owner) in enumerate(zip(points, owners, strict=True)):
        if owner != member:
            continue
        previous = points[i - 1]  # the last point, for the first
        if i == 0:  # across the top: after the last point, and from 0
            if previous + 1 <= 2**64 - 1:
                arcs.append((previous + 1, 2**64 - 1))
            arcs.append((0, point))
        elif previous + 1 <= point:
            arcs.append((previous + 1, point))
    merged: list[tuple[int, int]] = []
    for low, high in sorted(arcs):
        if merged and merged[-1][1] + 1 == low:
            merged[-1] = (merged[-1][0], high)
        else:
            merged.append((low, high))
    return [(a - 2**63, b - 2**63) for a, b in merged]


@pytest.mark.parametrize(
    "weights",
    [
        {"a": 0.001, "b": 0.001},  # four points each: runs across the top
        {"a": 0.002, "b": 0.001, "c": 0.003},
        {f"agent-{i}": 0.01 for i in range(7)},
        {f"agent-{i}": 1.0 for i in range(30)},
    ],
)
def test_the_arcs_are_those_a_walk_of_every_point_finds(weights: dict[str, float]) -> None:
    for version in (1, 2, 3):
        ring = Ring(weights, version=version)
        for member in weights:
            assert ring.arcs(member) == _arcs_walked(ring, member), (version, member)
            firsts, lasts = ring.arc_columns(member)
            assert list(zip(firsts.tolist(), lasts.tolist(), strict=True)) == ring.arcs(member)
