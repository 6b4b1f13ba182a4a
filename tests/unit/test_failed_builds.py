# SPDX-License-Identifier: Apache-2.0
"""Failed builds counted per node, and the weighers that avoid the nodes that fail.

A node's ``failed_builds`` is counted as Nova's compute counts it (one more
at each failed build there, 0 again at a success); ringfleet's
``FailedBuildsWeigher`` (a default weigher) and Nova's own
``BuildFailureWeigher`` order nodes by it as Nova does.  The chooser weighs
the few nodes with failures apart from the rest (one per owner and count):
its choices are checked against weighing every candidate node.
"""

from __future__ import annotations

import dataclasses
import random
import types
import uuid as uuidlib
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conductor.common.instance_states import Event
from conductor.common.objects import Flavor, Node, ProvisionState, VmState
from conductor.db import allocations, instances, nodes
from conductor.db.ownership import Fence
from conductor.scheduler import nova
from conductor.scheduler.decide import Chooser
from conductor.scheduler.index import NodeIndex, is_free
from conductor.scheduler.plugins import load_weighers
from conductor.scheduler.request import RequestSpec
from conductor.scheduler.weighers import (
    FailedBuildsWeigher,
    SpreadWeigher,
    WeighingContext,
    total_weights,
)
from conductor.validation import validate_build_request
from tests.unit.test_build_flow import Flow, compress_timers, make_flow, wait_for

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from nova.scheduler import weights as nova_weights
    from nova.scheduler.weights.compute import BuildFailureWeigher

OWNERS = ("agent-1", "agent-2", "agent-3")
NOVA_BUILD_FAILURE = "nova.scheduler.weights.compute.BuildFailureWeigher"
FLAVOR = Flavor(name="gold", resource_class="gold")


def make_node(i: int, failed_builds: int = 0, **fields: object) -> Node:
    values: dict[str, object] = {
        "uuid": str(uuidlib.UUID(int=i + 1)),
        "name": f"node-{i}",
        "resource_class": "gold",
        "owner": OWNERS[i % len(OWNERS)],
        "owner_epoch": 1,
        "failed_builds": failed_builds,
    }
    values.update(fields)
    return Node(**values)  # type: ignore[arg-type]


def make_request(exclude: frozenset[str] = frozenset()) -> RequestSpec:
    return RequestSpec.build(
        FLAVOR, "inst-0", live_members=frozenset(OWNERS), exclude_nodes=exclude
    )


def nova_weigher() -> list[nova.NovaWeigher]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_weighers([NOVA_BUILD_FAILURE])  # type: ignore[return-value]


# -- the index -----------------------------------------------------------------------


def test_the_index_holds_the_free_nodes_with_failed_builds() -> None:
    index = NodeIndex()
    clean, failing = make_node(0), make_node(1, failed_builds=2)
    index.put(clean)
    index.put(failing)
    assert [n.uuid for n in index.failing()] == [failing.uuid]
    taken = dataclasses.replace(
        failing, instance_uuid="i-1", provision_state=ProvisionState.DEPLOYING
    )
    index.put(taken)  # not free: not offered, not singled out
    assert list(index.failing()) == []
    index.put(
        dataclasses.replace(
            taken, instance_uuid=None, failed_builds=3, provision_state=ProvisionState.AVAILABLE
        )
    )
    assert [n.failed_builds for n in index.failing()] == [3]
    index.put(dataclasses.replace(failing, failed_builds=0))  # a success cleared it
    assert list(index.failing()) == []
    index.put(failing)
    index.remove(failing.uuid)
    assert list(index.failing()) == []


def test_nodes_carry_their_count_over_rpc() -> None:
    node = make_node(0, failed_builds=4)
    assert node.to_dict()["failed_builds"] == 4
    assert Node.from_dict(node.to_dict()) == node
    assert Node.from_dict({k: v for k, v in node.to_dict().items() if k != "failed_builds"}) == (
        dataclasses.replace(node, failed_builds=0)
    )


# -- choosing --------------------------------------------------------------------------


@st.composite
def fleets(draw: st.DrawFn) -> tuple[list[Node], frozenset[str]]:
    count = draw(st.integers(min_value=1, max_value=14))
    fleet = []
    for i in range(count):
        fleet.append(
            make_node(
                i,
                failed_builds=draw(st.sampled_from([0, 0, 0, 1, 2, 5])),
                owner=draw(st.sampled_from(OWNERS)),
                instance_uuid=draw(st.sampled_from([None, None, None, f"i-{i}"])),
            )
        )
    excluded = draw(st.sets(st.sampled_from([n.uuid for n in fleet])))
    return fleet, frozenset(excluded)


@pytest.mark.parametrize("which", ["ringfleet", "nova"])
@settings(max_examples=60, deadline=None)
@given(fleet_and_excluded=fleets(), seed=st.integers(0, 1000))
def test_the_choice_weighs_most_of_every_candidate_node(
    which: str, fleet_and_excluded: tuple[list[Node], frozenset[str]], seed: int
) -> None:
    """Weighing one node per owner and count gives the best total over every node."""
    fleet, excluded = fleet_and_excluded
    failures = [FailedBuildsWeigher()] if which == "ringfleet" else nova_weigher()
    weighers = [*failures, SpreadWeigher()]
    index = NodeIndex()
    for node in fleet:
        index.put(node)
    request = make_request(excluded)
    chosen = Chooser([], weighers, random.Random(seed)).choose(index, request)
    candidates = [n for n in fleet if is_free(n) and n.uuid not in excluded]
    if not candidates:
        assert chosen is None
        return
    assert chosen is not None and chosen.uuid in {n.uuid for n in candidates}
    context = WeighingContext(index.allocations)
    totals = total_weights(weighers, candidates, request, context)
    best = max(totals)
    assert totals[[n.uuid for n in candidates].index(chosen.uuid)] == pytest.approx(best)


def nova_order(counts: list[int]) -> list[int]:
    """The failed-builds counts of hosts in the order Nova's BuildFailureWeigher ranks them."""
    states = [
        types.SimpleNamespace(host="h", nodename=str(i), failed_builds=c, aggregates=[])
        for i, c in enumerate(counts)
    ]
    weighed = nova_weights.HostWeightHandler().get_weighed_objects(
        [BuildFailureWeigher()], states, None
    )
    return [w.obj.failed_builds for w in weighed]


@pytest.mark.parametrize("which", ["ringfleet", "nova"])
def test_nodes_are_drawn_in_the_order_novas_build_failure_weigher_ranks_them(which: str) -> None:
    counts = [3, 0, 1, 0, 7, 2, 1, 0, 5]
    fleet = [make_node(i, failed_builds=c) for i, c in enumerate(counts)]
    index = NodeIndex()
    for node in fleet:
        index.put(node)
    failures = [FailedBuildsWeigher()] if which == "ringfleet" else nova_weigher()
    chooser = Chooser([], [*failures, SpreadWeigher()], random.Random(7))
    drawn: list[int] = []
    excluded: set[str] = set()
    while (node := chooser.choose(index, make_request(frozenset(excluded)))) is not None:
        drawn.append(node.failed_builds)
        excluded.add(node.uuid)
    assert drawn == nova_order(counts) == sorted(counts)


def test_without_a_weigher_of_failures_they_are_not_avoided() -> None:
    """What the default FailedBuildsWeigher changes: SpreadWeigher alone draws failing nodes."""
    fleet = [make_node(i, failed_builds=5 if i % 2 else 0) for i in range(12)]
    index = NodeIndex()
    for node in fleet:
        index.put(node)
    spread_only = Chooser([], [SpreadWeigher()], random.Random(3))
    with_failures = Chooser([], [FailedBuildsWeigher(), SpreadWeigher()], random.Random(3))
    drawn_spread = [spread_only.choose(index, make_request()) for _ in range(40)]
    drawn_failures = [with_failures.choose(index, make_request()) for _ in range(40)]
    assert any(n is not None and n.failed_builds for n in drawn_spread)
    assert all(n is not None and n.failed_builds == 0 for n in drawn_failures)


# -- counted where builds fail and succeed (SQLite) -----------------------------------------


def test_a_failed_attempt_counts_and_a_success_clears(tmp_path: Path) -> None:
    delays: list[tuple[float, str]] = []
    with make_flow(tmp_path, delays, node_count=2, routed=False) as flow:
        node = flow.nodes[0]
        owner = flow.node(node).owner
        assert owner is not None
        fence = Fence(owner, flow.node(node).owner_epoch)
        counts = []
        for _attempt in range(3):
            uuid = _stored_build(flow)
            assert allocations.allocate(flow.db, node, uuid) is not None
            assert allocations.fail_attempt(
                flow.db, node, uuid, "pxe", node_clean=True, fence=fence, max_attempts=1
            )
            counts.append(flow.node(node).failed_builds)
        # A stale report (another epoch) changes nothing, its count neither.
        uuid = _stored_build(flow)
        assert allocations.allocate(flow.db, node, uuid) is not None
        stale = Fence(owner, fence.epoch + 1)
        assert (
            allocations.fail_attempt(
                flow.db, node, uuid, "x", node_clean=True, fence=stale, max_attempts=1
            )
            is None
        )
        counts.append(flow.node(node).failed_builds)
        assert allocations.complete(flow.db, node, uuid, fence=fence)
        counts.append(flow.node(node).failed_builds)
        assert counts == [1, 2, 3, 3, 0]
        assert flow.node(flow.nodes[1]).failed_builds == 0
        # Every read of the node carries it: the listing as well.
        listed = {d["uuid"]: d for d in nodes.list_node_dicts(flow.db)}
        assert listed[node]["failed_builds"] == 0


def _stored_build(flow: Flow) -> str:
    [instance], _ = instances.create_instances(flow.db, validate_build_request({"flavor": "small"}))
    return instance.uuid


def test_builds_avoid_the_nodes_whose_deploys_fail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three nodes, two whose deploys fail: each build ends on the good node, and
    each failing node is tried once in all (then its count keeps it last)."""
    delays = compress_timers(monkeypatch)
    with make_flow(tmp_path, delays, node_count=3, max_attempts=3) as flow:
        good = flow.nodes[1]
        bad_routes: list[str] = []
        for _round in range(6):
            uuid = flow.build()
            attempt = 0
            while True:
                attempt += 1
                node, owner, epoch = flow.wait_routes(uuid, attempt)
                assert owner is not None
                if node == good:
                    assert flow.builds.report_result(
                        owner, uuid, node, epoch, success=True, fault=None, node_clean=True
                    )
                    break
                bad_routes.append(node)
                assert flow.builds.report_result(
                    owner,
                    uuid,
                    node,
                    epoch,
                    success=False,
                    fault="deploy failed",
                    node_clean=True,
                )
            assert flow.instance(uuid).vm_state is VmState.ACTIVE
            assert flow.node(good).failed_builds == 0
            # Deleted: the good node is free for the next round.
            instances.set_state(flow.db, uuid, Event.DELETE)
            flow.builds.delete(uuid)
            wait_for(lambda u=uuid: u in flow.router.destroyed)  # type: ignore[misc]
            assert flow.builds.report_destroyed(owner, uuid, good, epoch, success=True, fault=None)
        # Each failing node drew one build at most: after its failure, never again.
        assert len(bad_routes) == len(set(bad_routes)) <= 2
        assert {flow.node(n).failed_builds for n in bad_routes} == ({1} if bad_routes else set())
