# SPDX-License-Identifier: Apache-2.0
"""The node index and the decision procedure, without a database.

The central property: whatever the index holds, choosing from it agrees
with the brute-force answer (every filter of the chain on every node), and
"no valid node" counts are the brute-force first-failure counts.
"""

from __future__ import annotations

import dataclasses
import random
import uuid as uuidlib
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conductor.common.exception import NoValidNode
from conductor.common.objects import Flavor, Node, ProvisionState
from conductor.scheduler.decide import Chooser
from conductor.scheduler.fastnode import FIELDS, evolve, new_node
from conductor.scheduler.filters import BaseFilter, CapabilitiesFilter, TraitsFilter
from conductor.scheduler.index import NodeIndex, NodeSet, is_free
from conductor.scheduler.request import RequestSpec
from conductor.scheduler.weighers import BaseWeigher, SpreadWeigher, WeighingContext

OWNERS = ("agent-1", "agent-2", "agent-3")


def make_node(i: int, **fields: object) -> Node:
    values: dict[str, object] = {
        "uuid": str(uuidlib.UUID(int=i + 1)),
        "name": f"node-{i}",
        "resource_class": "gold",
        "owner": OWNERS[i % len(OWNERS)],
        "owner_epoch": 1,
    }
    values.update(fields)
    return Node(**values)  # type: ignore[arg-type]


def make_request(
    flavor: Flavor,
    live: frozenset[str] = frozenset(OWNERS),
    group: str | None = None,
    exclude: frozenset[str] = frozenset(),
) -> RequestSpec:
    return RequestSpec.build(
        flavor, "inst-0", live_members=live, group=group, exclude_nodes=exclude
    )


def default_chooser(seed: int = 0) -> Chooser:
    return Chooser([TraitsFilter(), CapabilitiesFilter()], [SpreadWeigher()], random.Random(seed))


def brute_force(chooser: Chooser, nodes: list[Node], request: RequestSpec) -> list[Node]:
    return [n for n in nodes if all(f.filter(n, request) for f in chooser.chain)]


def first_failures(chooser: Chooser, nodes: list[Node], request: RequestSpec) -> list[int]:
    counts = [0] * len(chooser.chain)
    for node in nodes:
        for position, node_filter in enumerate(chooser.chain):
            if not node_filter.filter(node, request):
                counts[position] += 1
                break
    return counts


def check_index_invariants(index: NodeIndex, nodes: list[Node]) -> None:
    assert len(index) == len(nodes)
    assert index.free_count == sum(1 for n in nodes if is_free(n))
    allocated = Counter(n.owner for n in nodes if n.instance_uuid is not None and n.owner)
    assert dict(index.allocations) == dict(allocated)
    for node in nodes:
        assert index.get(node.uuid) == node
        assert index.is_free(node.uuid) is is_free(node)


# -- NodeSet -------------------------------------------------------------------------------


def test_node_set_keeps_positions_dense() -> None:
    nodes = [make_node(i) for i in range(6)]
    node_set = NodeSet()
    for node in nodes:
        node_set.add(node)
    node_set.add(nodes[2])  # re-adding replaces, does not duplicate
    assert len(node_set) == 6
    for gone in (nodes[0], nodes[5], nodes[3]):
        node_set.discard(gone.uuid)
    node_set.discard("no-such-node")
    assert len(node_set) == 3
    assert {node_set.at(i).uuid for i in range(3)} == {nodes[1].uuid, nodes[2].uuid, nodes[4].uuid}
    assert nodes[4].uuid in node_set
    assert nodes[5].uuid not in node_set
    assert sorted(n.name for n in node_set) == ["node-1", "node-2", "node-4"]


# -- index bookkeeping -------------------------------------------------------------------------


def test_put_moves_a_node_between_free_and_allocated() -> None:
    index = NodeIndex()
    node = make_node(0)
    index.put(node)
    check_index_invariants(index, [node])
    assert index.stats() == {"nodes": 1, "free": 1, "buckets": 1, "profiles": 1, "allocated": 0}

    taken = dataclasses.replace(node, instance_uuid="i-1", provision_state=ProvisionState.DEPLOYING)
    index.put(taken)
    check_index_invariants(index, [taken])
    assert index.stats()["profiles"] == 0  # empty profiles are dropped
    assert index.allocations == {"agent-1": 1}

    moved = dataclasses.replace(taken, resource_class="silver", group="rack-1")
    index.put(moved)
    check_index_invariants(index, [moved])
    # Buckets are keyed by the class as Placement names it (Nova's normalization).
    assert index.buckets("CUSTOM_GOLD", None) == []
    assert [b.group for b in index.buckets("CUSTOM_SILVER", None)] == ["rack-1"]
    assert index.buckets("CUSTOM_SILVER", "") == []
    assert index.buckets("silver", None) == []

    index.remove(moved.uuid)
    index.remove(moved.uuid)  # removing an unknown node is a no-op
    assert len(index) == 0
    assert index.stats() == {"nodes": 0, "free": 0, "buckets": 0, "profiles": 0, "allocated": 0}


def test_profiles_group_nodes_by_traits_and_capabilities() -> None:
    index = NodeIndex()
    nodes = [
        make_node(0, traits=frozenset({"HW_A"}), capabilities={"boot_mode": "uefi"}),
        make_node(1, traits=frozenset({"HW_A"}), capabilities={"boot_mode": "uefi"}),
        make_node(2, traits=frozenset({"HW_A"}), capabilities={"boot_mode": "bios"}),
        make_node(3, traits=frozenset(), capabilities={"boot_mode": "uefi"}),
    ]
    for node in nodes:
        index.put(node)
    (bucket,) = index.buckets("CUSTOM_GOLD", "")
    assert len(bucket.profiles) == 3
    assert sorted(p.size for p in bucket.profiles.values()) == [1, 1, 2]


def test_local_changes_are_recorded_by_generation() -> None:
    index = NodeIndex()
    a, b = make_node(0), make_node(1)
    index.put(a)  # read from the database: not a local change
    assert index.generation == 0
    before = index.generation
    index.put(dataclasses.replace(b, maintenance=True), local=True)
    assert index.changed_locally_after(b.uuid, before)
    assert not index.changed_locally_after(a.uuid, before)
    assert not index.changed_locally_after(b.uuid, index.generation)
    index.forget_local_changes(index.generation)
    assert not index.changed_locally_after(b.uuid, before)


def test_adopt_local_changes_replays_only_newer_ones() -> None:
    old = NodeIndex()
    a, b, c = make_node(0), make_node(1), make_node(2)
    for node in (a, b, c):
        old.put(node)
    old.put(dataclasses.replace(a, maintenance=True), local=True)
    mark = old.generation
    old.put(dataclasses.replace(b, instance_uuid="i-1"), local=True)
    old.remove(c.uuid, local=True)

    fresh = NodeIndex()  # as read from the database, which missed the late changes
    for node in (a, b, c):
        fresh.put(node)
    fresh.adopt_local_changes(old, after=mark)
    got_a, got_b = fresh.get(a.uuid), fresh.get(b.uuid)
    assert got_a is not None and not got_a.maintenance  # older than mark: the read wins
    assert got_b is not None and got_b.instance_uuid == "i-1"
    assert fresh.get(c.uuid) is None
    assert fresh.generation > mark


# -- choosing ----------------------------------------------------------------------------------


def test_choose_spreads_across_owners_by_allocations() -> None:
    index = NodeIndex()
    chooser = default_chooser()
    flavor = Flavor(name="f", resource_class="gold")
    for i in range(30):
        index.put(make_node(i))
    request = make_request(flavor)
    picked: Counter[str] = Counter()
    for round_ in range(24):
        node = chooser.choose(index, request)
        assert node is not None and node.owner is not None
        picked[node.owner] += 1
        index.put(dataclasses.replace(node, instance_uuid=f"i-{round_}"))
        counts = [index.allocations.get(owner, 0) for owner in OWNERS]
        assert max(counts) - min(counts) <= 1
    assert picked == {owner: 8 for owner in OWNERS}


def test_choose_breaks_ties_at_random() -> None:
    index = NodeIndex()
    for i in range(60):
        index.put(make_node(i))
    request = make_request(Flavor(name="f", resource_class="gold"))
    seen = set()
    for seed in range(30):
        node = default_chooser(seed).choose(index, request)
        assert node is not None
        seen.add((node.owner, node.uuid))
    assert len(seen) > 10
    assert {owner for owner, _ in seen} == set(OWNERS)


def test_choose_skips_excluded_nodes_even_when_drawn() -> None:
    index = NodeIndex()
    nodes = [make_node(i, owner="agent-1") for i in range(5)]
    for node in nodes:
        index.put(node)
    flavor = Flavor(name="f", resource_class="gold")
    keep = nodes[3]
    exclude = frozenset(n.uuid for n in nodes if n is not keep)
    for seed in range(20):
        chosen = default_chooser(seed).choose(index, make_request(flavor, exclude=exclude))
        assert chosen == keep
    everything = frozenset(n.uuid for n in nodes)
    assert default_chooser().choose(index, make_request(flavor, exclude=everything)) is None


class OddNameFilter(BaseFilter):
    """A per-node plugin filter: only nodes with an odd number in their name."""

    def filter(self, node: Node, request: RequestSpec) -> bool:
        return int(node.name.rsplit("-", 1)[1]) % 2 == 1


class HighestNameWeigher(BaseWeigher):
    """A per-node plugin weigher: the highest number in the name wins."""

    def weigh(self, node: Node, request: RequestSpec, context: WeighingContext) -> float:
        return float(node.name.rsplit("-", 1)[1])


def test_per_node_filters_and_weighers() -> None:
    index = NodeIndex()
    for i in range(20):
        index.put(make_node(i))
    chooser = Chooser([OddNameFilter()], [HighestNameWeigher()], random.Random(1))
    node = chooser.choose(index, make_request(Flavor(name="f", resource_class="gold")))
    assert node is not None and node.name == "node-19"
    for seed in range(10):
        by_owner = Chooser([OddNameFilter()], [SpreadWeigher()], random.Random(seed))
        node = by_owner.choose(index, make_request(Flavor(name="f", resource_class="gold")))
        assert node is not None and int(node.name.rsplit("-", 1)[1]) % 2 == 1


def test_verdicts_are_cached_per_profile_and_flavor() -> None:
    calls: list[str] = []

    class CountingFilter(BaseFilter):
        per_profile = True

        def filter(self, node: Node, request: RequestSpec) -> bool:
            calls.append(node.uuid)
            return True

    index = NodeIndex()
    for i in range(50):
        index.put(make_node(i))
    chooser = Chooser([CountingFilter()], [SpreadWeigher()], random.Random(0))
    request = make_request(Flavor(name="f", resource_class="gold"))
    for _ in range(10):
        assert chooser.choose(index, request) is not None
    assert len(calls) == 1  # one profile, one flavor
    other = make_request(Flavor(name="g", resource_class="gold"))
    assert chooser.choose(index, other) is not None
    assert len(calls) == 2


# -- explaining --------------------------------------------------------------------------------


def test_explain_counts_in_chain_order() -> None:
    index = NodeIndex()
    nodes = [make_node(i, resource_class="silver") for i in range(950)]
    nodes += [make_node(950 + i, traits=frozenset({"HW_A"})) for i in range(50)]
    for node in nodes:
        index.put(node)
    flavor = Flavor(name="gold", resource_class="gold", forbidden_traits=frozenset({"HW_A"}))
    chooser = default_chooser()
    request = make_request(flavor)
    assert chooser.choose(index, request) is None
    error = chooser.explain(index, request)
    assert isinstance(error, NoValidNode)
    assert error.flavor == "gold"
    assert error.candidates == 1000
    assert error.removed == [
        ("ResourceClassFilter", 950),
        ("GroupFilter", 0),
        ("AvailabilityFilter", 0),
        ("TraitsFilter", 50),
        ("LiveOwnerFilter", 0),
        ("RetryFilter", 0),
        ("CapabilitiesFilter", 0),
    ]
    assert str(error) == (
        "no valid node for flavor 'gold': 1000 nodes; "
        "ResourceClassFilter removed 950, TraitsFilter removed 50"
    )
    assert NoValidNode(**error.kwargs).removed == error.removed


def test_explain_with_a_group_hint_and_an_empty_index() -> None:
    chooser = default_chooser()
    flavor = Flavor(name="f", resource_class="gold")
    empty = chooser.explain(NodeIndex(), make_request(flavor))
    assert empty.candidates == 0
    assert str(empty) == "no valid node for flavor 'f': 0 nodes"

    index = NodeIndex()
    for i in range(10):
        index.put(make_node(i, group="rack-1" if i < 4 else ""))
    error = chooser.explain(index, make_request(flavor, group="rack-2"))
    assert dict(error.removed)["GroupFilter"] == 10


def test_explaining_a_failed_decision_calls_no_per_profile_filter_again() -> None:
    calls: list[str] = []

    class Refusing(BaseFilter):
        per_profile = True

        def filter(self, node: Node, request: RequestSpec) -> bool:
            calls.append(node.uuid)
            return "HW_B" not in node.traits

    index = NodeIndex()
    for i in range(40):
        index.put(make_node(i, traits=frozenset({"HW_A"} if i < 10 else {"HW_B"})))
    flavor = Flavor(name="f", resource_class="gold", forbidden_traits=frozenset({"HW_A"}))
    chooser = Chooser([Refusing()], [SpreadWeigher()], random.Random(0))
    request = make_request(flavor)
    assert chooser.choose(index, request) is None
    assert len(calls) == 1  # the HW_B profile; traits refused the other first
    removed = dict(chooser.explain(index, request).removed)
    assert len(calls) == 1  # the decision's verdicts, not a second pass
    assert removed["TraitsFilter"] == 10 and removed["Refusing"] == 30
    # Explained without a decision first (a profile that appeared since), it calls them.
    fresh = Chooser([Refusing()], [SpreadWeigher()], random.Random(0))
    assert dict(fresh.explain(NodeIndex(), request).removed)["Refusing"] == 0
    other = make_request(Flavor(name="g", resource_class="gold"))
    assert dict(fresh.explain(index, other).removed) == {
        **dict.fromkeys(("ResourceClassFilter", "GroupFilter", "AvailabilityFilter"), 0),
        **dict.fromkeys(("TraitsFilter", "LiveOwnerFilter", "RetryFilter"), 0),
        "Refusing": 30,
    }
    assert len(calls) == 3


# -- the central property ----------------------------------------------------------------------

TRAITS = ("HW_A", "HW_B", "HW_C")

node_fields = st.fixed_dictionaries(
    {
        "resource_class": st.sampled_from(("gold", "silver")),
        "group": st.sampled_from(("", "rack-1")),
        "traits": st.frozensets(st.sampled_from(TRAITS)),
        "capabilities": st.dictionaries(
            st.sampled_from(("boot_mode", "cpus")),
            st.sampled_from(("uefi", "bios", "8", "16")),
        ),
        "provision_state": st.sampled_from(
            (ProvisionState.AVAILABLE,) * 4 + (ProvisionState.ACTIVE, ProvisionState.ENROLL)
        ),
        "maintenance": st.sampled_from((False, False, False, True)),
        "owner": st.sampled_from((*OWNERS, "agent-gone", None)),
        "instance_uuid": st.sampled_from((None, None, None, "inst")),
    }
)

flavors = st.builds(
    Flavor,
    name=st.just("f"),
    resource_class=st.sampled_from(("gold", "silver", "bronze")),
    required_traits=st.frozensets(st.sampled_from(TRAITS), max_size=2),
    forbidden_traits=st.frozensets(st.sampled_from(TRAITS), max_size=1),
    extra_specs=st.dictionaries(
        st.sampled_from(("capabilities:boot_mode", "capabilities:cpus")),
        st.sampled_from(("uefi", "<or> uefi <or> bios", ">= 10", "s== bios")),
        max_size=2,
    ),
)


@settings(max_examples=150, deadline=None)
@given(
    fields=st.lists(node_fields, max_size=40),
    updates=st.lists(st.tuples(st.integers(0, 39), node_fields), max_size=15),
    removals=st.lists(st.integers(0, 39), max_size=5),
    flavor=flavors,
    live=st.frozensets(st.sampled_from(OWNERS)),
    group=st.sampled_from((None, "", "rack-1")),
    excluded=st.frozensets(st.integers(0, 39), max_size=5),
    seed=st.integers(0, 1000),
)
def test_choice_and_explanation_agree_with_brute_force(
    fields: list[dict[str, object]],
    updates: list[tuple[int, dict[str, object]]],
    removals: list[int],
    flavor: Flavor,
    live: frozenset[str],
    group: str | None,
    excluded: frozenset[int],
    seed: int,
) -> None:
    nodes = {i: make_node(i, **f) for i, f in enumerate(fields)}
    index = NodeIndex()
    for node in nodes.values():
        index.put(node)
    for i, f in updates:  # changes read later, onto existing or new nodes
        nodes[i] = make_node(i, **f)
        index.put(nodes[i])
    for i in removals:
        if i in nodes:
            index.remove(nodes.pop(i).uuid)
    everything = list(nodes.values())
    check_index_invariants(index, everything)

    exclude = frozenset(str(uuidlib.UUID(int=i + 1)) for i in excluded)
    request = make_request(flavor, live=live, group=group, exclude=exclude)
    chooser = default_chooser(seed)
    expected = brute_force(chooser, everything, request)
    chosen = chooser.choose(index, request)
    if not expected:
        assert chosen is None
        error = chooser.explain(index, request)
        assert error.candidates == len(everything)
        assert [n for _, n in error.removed] == first_failures(chooser, everything, request)
        assert sum(n for _, n in error.removed) == len(everything)
    else:
        assert chosen in expected
        # Spread: no passing node belongs to a less loaded agent.
        load = index.allocations
        assert chosen.owner is not None
        assert load.get(chosen.owner, 0) == min(load.get(n.owner or "", 0) for n in expected)


@pytest.mark.parametrize("seed", range(3))
def test_choice_agrees_with_brute_force_on_a_random_fleet(seed: int) -> None:
    rng = random.Random(seed)
    nodes = [
        make_node(
            i,
            resource_class=rng.choice(("gold", "silver")),
            traits=frozenset(rng.sample(TRAITS, rng.randint(0, 3))),
            capabilities={"boot_mode": rng.choice(("uefi", "bios"))},
            owner=rng.choice(OWNERS),
            instance_uuid=rng.choice((None, None, f"i-{i}")),
        )
        for i in range(2000)
    ]
    index = NodeIndex()
    for node in nodes:
        index.put(node)
    chooser = default_chooser(seed)
    flavor = Flavor(
        name="f",
        resource_class="gold",
        required_traits=frozenset({"HW_A"}),
        extra_specs={"capabilities:boot_mode": "uefi"},
    )
    request = make_request(flavor)
    expected = {n.uuid for n in brute_force(chooser, nodes, request)}
    for _ in range(50):
        chosen = chooser.choose(index, request)
        assert chosen is not None and chosen.uuid in expected
        index.put(dataclasses.replace(chosen, instance_uuid="taken"))
        expected.discard(chosen.uuid)


# -- fast node construction ---------------------------------------------------------------------


def test_fast_nodes_equal_dataclass_nodes() -> None:
    node = make_node(3, traits=frozenset({"HW_A"}), capabilities={"a": "b"}, maintenance=True)
    values = [getattr(node, name) for name in FIELDS]
    assert new_node(values) == node
    assert evolve(node, owner="agent-9", instance_uuid="i") == dataclasses.replace(
        node, owner="agent-9", instance_uuid="i"
    )
    assert evolve(node) == node
    with pytest.raises(TypeError):
        evolve(node, colour="red")
    with pytest.raises(ValueError):
        new_node(values[:-1])


def test_cached_candidate_sets_follow_the_index() -> None:
    index = NodeIndex()
    chooser = default_chooser()
    flavor = Flavor(name="f", resource_class="gold")
    request = make_request(flavor, live=frozenset({"agent-1", "agent-2", "agent-new"}))
    nodes = [make_node(i, owner="agent-1") for i in range(3)]
    for node in nodes:
        index.put(node)
    for round_ in range(3):  # uses the cache, empties agent-1's set at the end
        chosen = chooser.choose(index, request)
        assert chosen is not None and index.is_free(chosen.uuid)
        index.put(dataclasses.replace(chosen, instance_uuid=f"i-{round_}"))
    assert chooser.choose(index, request) is None
    newcomer = make_node(10, owner="agent-new")
    index.put(newcomer)
    assert chooser.choose(index, request) == newcomer
    # A resync swaps in another index object: nothing cached is reused.
    fresh = NodeIndex()
    other = make_node(20, owner="agent-2")
    fresh.put(other)
    assert chooser.choose(fresh, request) == other
