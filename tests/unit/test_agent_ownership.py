# SPDX-License-Identifier: Apache-2.0
"""The agent's OwnershipManager against the REAL conductor agents endpoint on SQLite.

The conductor side is :class:`conductor.endpoints.agents.AgentsEndpoint`
with a real :class:`conductor.fleet_view.FleetView` fed membership views, so
the compare-and-swap rules of :mod:`conductor.db.ownership` decide every
claim, release and transfer.  Only the RPC hop (a thin recording adapter)
and the agent's own membership connection state are stubbed.
"""

from __future__ import annotations

import datetime
import logging
import time
import types
import uuid as uuidlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from compute_agent import inventory_reads, releases, share_claims
from compute_agent import ownership as agent_ownership
from compute_agent.ownership import OwnershipManager
from conductor.common.exception import InvalidInput, NotOwner, ServiceUnavailable
from conductor.common.objects import (
    ClaimOutcome,
    Ownership,
    ReleaseOutcome,
)
from conductor.db import agents as agents_db
from conductor.db import instances, nodes, ownership
from conductor.db.engine import Database
from conductor.db.models import NodeModel, utcnow
from conductor.endpoints.agents import AgentsEndpoint
from conductor.fleet_view import FleetView
from conductor.rpcapi_agents import share_page_entries
from conductor.validation import validate_node_specs
from hashring.membership import Member, MembershipView, State
from hashring.ring import Ring
from tests.dbutil import add_nodes, migrated, pin

CTXT: dict[str, Any] = {"request_id": "req-test"}


# -- stubs ----------------------------------------------------------------------------


class StubMembership:
    """A membership whose connection state the test sets (agent or conductor side)."""

    def __init__(self, state: State = State.CONNECTED) -> None:
        self.state = state
        self.join_generation = 1
        self.view: MembershipView | None = None  # the latest view, as Membership.view
        #: Our first join replaced an earlier process's entry (a fast restart).
        self.replaced_earlier_process = False
        self.ttl = 10.0
        self.reads_asked = 0

    def read_soon(self) -> None:
        self.reads_asked += 1

    def can_act(self) -> bool:
        return self.state is State.CONNECTED


@dataclass
class ConductorAdapter:
    """What ConductorAPI does over RPC, done in-process on the real endpoint; records calls."""

    endpoint: AgentsEndpoint
    calls: list[tuple[str, Any]] = field(default_factory=list)
    #: Whether "the conductor" reads by share (API 1.15): the agent's
    #: refresh reads its share, else the whole fleet.
    by_share: bool = True
    #: Whether "the conductor" claims by share (API 1.19).
    claims_by_share: bool = True
    #: Whether "the conductor" reads what it claimed by share (API 1.26).
    reads_claims: bool = True
    #: Whether "the conductor" re-reads the held set with a claim (API 1.28).
    reads_held: bool = True
    #: Whether "the conductor" says which departed peers it still sees live.
    says_still_live: bool = True

    def claim_share(
        self,
        host: str,
        ring: dict[str, Any],
        *,
        groups: list[str] | None = None,
        exclude_groups: list[str] | None = None,
        limit: int = 5000,
        previous_ring: dict[str, Any] | None = None,
        read: int | None = None,
        held: bool = False,
    ) -> dict[str, Any] | None:
        """As ConductorAPI.claim_share: None when "the conductor" is older."""
        read = read if self.reads_claims else None
        held = held and self.reads_held
        self.calls.append(
            (
                "claim_share",
                {
                    "ring": ring,
                    "groups": groups,
                    "limit": limit,
                    "previous_ring": previous_ring,
                    "read": read,
                    "held": held,
                },
            )
        )
        if not self.claims_by_share:
            return None
        out = self.endpoint.claim_share(
            CTXT,
            host=host,
            ring=ring,
            groups=groups,
            exclude_groups=exclude_groups,
            limit=limit,
            previous_ring=previous_ring,
            read=read,
            held=held,
        )
        if "share" in out:
            out["share"] = share_page_entries(out["share"])
        if "held" in out:
            out["held"] = [Ownership.from_dict(o) for o in out["held"]]
        if not self.says_still_live:
            out.pop("still_live", None)
        return out

    def claim_nodes(self, host: str, node_uuids: list[str]) -> ClaimOutcome:
        self.calls.append(("claim", list(node_uuids)))
        return ClaimOutcome.from_dict(self.endpoint.claim_nodes(CTXT, host, list(node_uuids)))

    def release_nodes(self, host: str, claims: dict[str, int]) -> ReleaseOutcome:
        self.calls.append(("release", dict(claims)))
        return ReleaseOutcome.from_dict(self.endpoint.release_nodes(CTXT, host, dict(claims)))

    def transfer_nodes(self, host: str, transfers: list[dict[str, Any]]) -> ReleaseOutcome:
        self.calls.append(("transfer", list(transfers)))
        return ReleaseOutcome.from_dict(self.endpoint.transfer_nodes(CTXT, host, list(transfers)))

    def hold_for_restart(self, host: str) -> dict[str, Any]:
        self.calls.append(("hold", host))
        return self.endpoint.hold_for_restart(CTXT, host)

    def owned_nodes(self, host: str) -> list[Ownership]:
        self.calls.append(("owned", host))
        return [Ownership.from_dict(o) for o in self.endpoint.owned_nodes(CTXT, host)]

    def list_node_uuids(
        self,
        groups: list[str] | None = None,
        since: str | None = None,
        marker: str | None = None,
        limit: int = 5000,
    ) -> dict[str, Any]:
        self.calls.append(("list", {"groups": groups, "since": since, "marker": marker}))
        return self.endpoint.list_node_uuids(
            CTXT, groups=groups, since=since, marker=marker, limit=limit
        )

    def list_node_share(self, member: str, **query: Any) -> dict[str, Any] | None:
        """As ConductorAPI.list_node_share: None when "the conductor" is older."""
        self.calls.append(("share", {"member": member, **query}))
        if not self.by_share:
            return None
        if query.get("ring") is None:
            query["owner"] = member
        else:
            query["member"] = member
        return share_page_entries(self.endpoint.list_node_uuids(CTXT, columns=True, **query))

    def of(self, kind: str) -> list[Any]:
        return [args for name, args in self.calls if name == kind]


def view_of(agents: dict[str, Sequence[str]]) -> MembershipView:
    """A view of agents, each with the node groups it serves ([] = all)."""
    return MembershipView(
        members={
            host: Member(host, 1, 1.0, {"groups": list(groups)}) for host, groups in agents.items()
        },
        excluded={},
        ring_version=1,
    )


@dataclass
class Fleet:
    db: Database
    fleet: FleetView
    conductor: ConductorAdapter
    grace: list[float]
    agents: dict[str, OwnershipManager] = field(default_factory=dict)
    memberships: dict[str, StubMembership] = field(default_factory=dict)
    busy: dict[str, set[str]] = field(default_factory=dict)
    view: MembershipView = field(default_factory=lambda: view_of({}))

    def live(self, agents: dict[str, Sequence[str]]) -> MembershipView:
        """The group now has these agents (conductor and agents see the same view)."""
        self.view = view_of(agents)
        self.fleet.on_change(self.view)
        for membership in self.memberships.values():
            membership.view = self.view
        return self.view

    def agent(
        self,
        host: str,
        groups: Sequence[str] = (),
        claim_batch: int = 500,
        rejoin_settle: float = 0.0,
        join_settle: float = 0.0,
    ) -> OwnershipManager:
        membership = StubMembership()
        membership.view = self.view
        self.memberships[host] = membership
        self.busy[host] = set()
        manager = OwnershipManager(
            host,
            self.conductor,
            membership,  # type: ignore[arg-type]
            groups=groups,
            claim_batch=claim_batch,
            busy_nodes=lambda: set(self.busy[host]),
            rejoin_settle=rejoin_settle,
            join_settle=join_settle,
        )
        self.agents[host] = manager
        return manager

    def owners(self) -> dict[str, tuple[str | None, int]]:
        return {n.uuid: (n.owner, n.owner_epoch) for n in nodes.iter_nodes(self.db)}

    def owner(self, node: str) -> str | None:
        return ownership.ownership_of(self.db, [node])[node].owner

    def settle(self, rounds: int = 3) -> None:
        """Every agent refreshes and reconciles, a few rounds (releases then claims)."""
        for _ in range(rounds):
            for manager in self.agents.values():
                manager.refresh_inventory()
                manager.reconcile(self.view)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The agent's monotonic clock, moved by the test alone: ``clock[0] += s``."""
    now = [1000.0]
    fake = types.SimpleNamespace(monotonic=lambda: now[0], sleep=time.sleep)
    monkeypatch.setattr(agent_ownership, "time", fake)
    monkeypatch.setattr(inventory_reads, "time", fake)
    monkeypatch.setattr(share_claims, "time", fake)
    return now


@pytest.fixture(params=["by-share", "whole-fleet"])
def env(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Fleet]:
    db = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    fleet = FleetView(db)
    fleet.attach(StubMembership())  # type: ignore[arg-type]
    grace = [3600.0]
    endpoint = AgentsEndpoint(db, fleet, lambda: grace[0], restart_grace=lambda: 60.0)
    try:
        conductor = ConductorAdapter(endpoint, by_share=request.param == "by-share")
        yield Fleet(db=db, fleet=fleet, conductor=conductor, grace=grace)
    finally:
        db.dispose()


#: A test of the whole-fleet reads (a conductor before API 1.15): it counts rows.
WHOLE_FLEET = pytest.mark.parametrize("env", ["whole-fleet"], indirect=True)


def grouped_nodes(db: Database, group: str, count: int) -> list[str]:
    tag = uuidlib.uuid4().hex[:8]
    specs = validate_node_specs(
        [
            {"name": f"{group}-{tag}-n{i}", "resource_class": "baremetal", "group": group}
            for i in range(count)
        ]
    )
    return [n.uuid for n in nodes.create_nodes(db, specs)]


def ring_share(members: Sequence[str], node_ids: Sequence[str], host: str) -> set[str]:
    ring = Ring(dict.fromkeys(members, 1.0), version=1)
    return {n for n, owner in zip(node_ids, ring.assign(node_ids), strict=True) if owner == host}


def age_nodes(db: Database, node_uuids: Sequence[str], hours: float = 1.0) -> None:
    with db.transaction() as session:
        session.execute(
            update(NodeModel)
            .where(NodeModel.uuid.in_(list(node_uuids)))
            .values(updated_at=utcnow() - datetime.timedelta(hours=hours))
        )


def _a2_joins_a1(
    env: Fleet,
) -> tuple[list[str], OwnershipManager, OwnershipManager, MembershipView]:
    """30 nodes all owned by a1, then a2 joins and reads the inventory (it has
    claimed nothing yet, a1 released nothing): the nodes, a1, a2 and the view."""
    uuids = add_nodes(env.db, 30)
    env.live({"a1": []})
    a1 = env.agent("a1")
    env.settle(1)
    view = env.live({"a1": [], "a2": []})
    a2 = env.agent("a2")
    a2.refresh_inventory()
    return uuids, a1, a2, view


# -- the desired set -------------------------------------------------------------------


def test_serves_a_group_when_listed_or_when_serving_all() -> None:
    assert Member("a", 1, 1.0, {"groups": ["rack1"]}).serves("rack1")
    assert not Member("a", 1, 1.0, {"groups": ["rack1"]}).serves("rack2")
    assert Member("a", 1, 1.0, {"groups": []}).serves("rack2")
    assert Member("a", 1, 1.0, {}).serves("")


@WHOLE_FLEET
def test_desired_is_the_ring_share_of_each_served_group_plus_pins(env: Fleet) -> None:
    rack1 = grouped_nodes(env.db, "rack1", 30)
    rack2 = grouped_nodes(env.db, "rack2", 30)
    lonely = grouped_nodes(env.db, "rack3", 10)  # only the all-groups agent serves it
    view = env.live({"a1": ["rack1"], "a2": [], "a3": ["rack2"]})
    a1, a2, a3 = env.agent("a1", ["rack1"]), env.agent("a2"), env.agent("a3", ["rack2"])
    assert a1.refresh_inventory() == 30  # only its own groups
    assert a2.refresh_inventory() == 70
    assert a3.refresh_inventory() == 30

    want1 = ring_share(["a1", "a2"], rack1, "a1")
    want3 = ring_share(["a2", "a3"], rack2, "a3")
    want2 = (
        ring_share(["a1", "a2"], rack1, "a2") | ring_share(["a2", "a3"], rack2, "a2") | set(lonely)
    )
    assert a1.desired(view) == want1
    assert a3.desired(view) == want3
    assert a2.desired(view) == want2
    assert want1 and want3 and want2 - set(lonely)  # the rings really split the groups
    # A partition: disjoint, and together every node.
    assert not (want1 & want2) and not (want1 & want3) and not (want2 & want3)
    assert want1 | want2 | want3 == set(rack1 + rack2 + lonely)

    # A pin is desired whatever the ring says (even of a group the agent does not serve).
    foreign = next(n for n in rack2 if n not in want1)
    a1.pin(foreign)
    assert a1.desired(view) == want1 | {foreign}
    a1.unpin(foreign)
    assert a1.desired(view) == want1


@WHOLE_FLEET
def test_the_ring_share_follows_every_change_of_rings_or_inventory_and_only_those(
    env: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    placements: list[int] = []

    class CountingRing(Ring):
        def assign(self, node_ids: Sequence[str]) -> list[str]:
            placements.append(len(node_ids))
            return super().assign(node_ids)

    monkeypatch.setattr(
        agent_ownership, "ring_of", lambda members, version=1: CountingRing(members, version)
    )
    rack1 = grouped_nodes(env.db, "rack1", 40)
    rack2 = grouped_nodes(env.db, "rack2", 40)
    env.live({"a1": [], "a2": ["rack2"]})
    a1 = env.agent("a1")
    a1.refresh_inventory()
    assert a1.desired(env.view) == set(rack1) | ring_share(["a1", "a2"], rack2, "a1")
    assert placements
    # Nothing changed (an equal view, a pin, an empty refresh): no placement again.
    placements.clear()
    a1.desired(view_of({"a1": [], "a2": ["rack2"]}))
    a1.pin(rack1[0])
    a1.unpin(rack1[0])
    a1.refresh_inventory()
    assert a1.desired(env.view) == set(rack1) | ring_share(["a1", "a2"], rack2, "a1")
    assert placements == []

    # A member joins.
    view = env.live({"a1": [], "a2": ["rack2"], "a3": []})
    assert a1.desired(view) == ring_share(["a1", "a3"], rack1, "a1") | ring_share(
        ["a1", "a2", "a3"], rack2, "a1"
    )
    # A member's weight changes.
    heavy = MembershipView(
        members={**view.members, "a3": Member("a3", 1, 4.0, {"groups": []})},
        excluded={},
        ring_version=1,
    )
    ring = Ring({"a1": 1.0, "a3": 4.0}, version=1)
    heavy_share = {n for n, o in zip(rack1, ring.assign(rack1), strict=True) if o == "a1"}
    assert (
        a1.desired(heavy).intersection(rack1)
        == heavy_share
        != ring_share(["a1", "a3"], rack1, "a1")
    )
    # A node moves to another group, and a new node is enrolled.
    moved = next(
        n
        for n in ring_share(["a1", "a3"], rack1, "a1")
        if n not in ring_share(["a1", "a2", "a3"], [n], "a1")
    )
    with env.db.transaction() as session:
        session.execute(
            update(NodeModel)
            .where(NodeModel.uuid == moved)
            .values(node_group="rack2", updated_at=utcnow())
        )
    new = grouped_nodes(env.db, "rack1", 20)
    rack1 = [n for n in rack1 if n != moved] + new
    a1.refresh_inventory()
    desired = a1.desired(view)
    assert desired == ring_share(["a1", "a3"], rack1, "a1") | ring_share(
        ["a1", "a2", "a3"], [*rack2, moved], "a1"
    )
    assert moved not in desired and desired.intersection(new)


def test_an_agent_outside_the_view_desires_only_its_pins(env: Fleet) -> None:
    rack1 = grouped_nodes(env.db, "rack1", 10)
    view = env.live({"a2": []})
    a1 = env.agent("a1")
    a1.refresh_inventory()
    assert a1.desired(view) == set()
    a1.pin(rack1[0])
    assert a1.desired(view) == {rack1[0]}


# -- reconcile -------------------------------------------------------------------------


def test_reconcile_claims_in_batches_and_partitions_the_fleet(env: Fleet) -> None:
    """By uuid, in batches: the claims of an agent whose conductor does not
    claim by share (older than 1.19), and of what a claim by share leaves."""
    env.conductor.claims_by_share = False
    uuids = add_nodes(env.db, 40)
    view = env.live({"a1": [], "a2": []})
    a1 = env.agent("a1", claim_batch=7)
    a1.refresh_inventory()
    want = a1.desired(view)
    result = a1.reconcile(view)
    assert result is not None
    assert (result.desired, result.claimed, result.released, result.refused) == (
        len(want),
        len(want),
        0,
        0,
    )
    claims = env.conductor.of("claim")
    assert [len(c) for c in claims] == [7] * (len(want) // 7) + (
        [len(want) % 7] if len(want) % 7 else []
    )
    assert sorted(n for c in claims for n in c) == sorted(want)
    owners = env.owners()
    assert a1.held() == {n: owners[n][1] for n in want}
    assert all(owners[n][0] == "a1" for n in want)

    # A second pass changes nothing and asks for nothing.
    env.conductor.calls.clear()
    again = a1.reconcile(view)
    assert again is not None and (again.claimed, again.released) == (0, 0)
    assert env.conductor.of("claim") == [] and env.conductor.of("release") == []

    a2 = env.agent("a2", claim_batch=7)
    env.settle()
    assert set(a1.held()) | set(a2.held()) == set(uuids)
    assert not set(a1.held()) & set(a2.held())
    assert set(a2.held()) == a2.desired(view)


def test_a_join_moves_only_unpinned_idle_nodes_and_never_robs_a_live_owner(env: Fleet) -> None:
    uuids = add_nodes(env.db, 40)
    env.live({"a1": []})
    a1 = env.agent("a1", claim_batch=7)
    env.settle(1)
    assert set(a1.held()) == set(uuids)

    view = env.live({"a1": [], "a2": []})
    a2 = env.agent("a2", claim_batch=7)
    a2.refresh_inventory()
    moving = sorted(a2.desired(view))
    assert len(moving) >= 3
    pinned, busy = moving[0], moving[1]
    pin(env.db, [pinned], "a1")
    a1.revalidate()  # learns the pin from the conductor
    assert a1.pinned() == {pinned}
    env.busy["a1"].add(busy)
    epochs_before = env.owners()

    # The newcomer first: every claim of a node a live agent holds is refused.
    first = a2.reconcile(view)
    assert first is not None
    assert (first.claimed, first.refused, first.held) == (0, len(moving), 0)
    assert env.owners() == epochs_before  # nothing moved, no epoch bumped

    # The old owner releases what it should no longer own: not the pin, not the busy one.
    env.conductor.calls.clear()
    out = a1.reconcile(view)
    assert out is not None and out.released == len(moving) - 2
    released = {n for claims in env.conductor.of("release") for n in claims}
    assert released == set(moving) - {pinned, busy}
    assert len(env.conductor.of("release")) == 1  # one call, whatever claim_batch
    assert set(a1.held()) == (set(uuids) - set(moving)) | {pinned, busy}

    # The newcomer learns of the releases from its inventory read, claims
    # them, and asks nothing more of the two the live owner keeps.
    a2.refresh_inventory()
    second = a2.reconcile(view)
    assert second is not None and (second.claimed, second.refused) == (len(moving) - 2, 0)
    assert set(a2.held()) == set(moving) - {pinned, busy}
    # Nodes that stayed with a1 kept their epoch (minimal movement).
    owners = env.owners()
    for node in set(uuids) - set(moving):
        assert owners[node] == epochs_before[node]

    # Once the deploy ends, the busy node moves too; the pinned one never does.
    env.busy["a1"].clear()
    env.settle()
    assert busy in a2.held() and env.owner(busy) == "a2"
    assert pinned in a1.held() and env.owner(pinned) == "a1"
    assert pinned not in a2.held()


def test_a_node_a_live_owner_keeps_is_not_asked_for_again_until_view_or_record_change(
    env: Fleet,
) -> None:
    uuids, a1, a2, view = _a2_joins_a1(env)
    moving = sorted(a2.desired(view))
    pinned = moving[0]
    pin(env.db, [pinned], "a1")
    a1.revalidate()
    a1.reconcile(view)  # releases all but the pinned node
    a2.refresh_inventory()
    first = a2.reconcile(view)
    assert first is not None and first.refused == 1

    # The pinned node's record does not change and a1 stays: no more asking.
    env.conductor.calls.clear()
    for _ in range(3):
        a2.refresh_inventory()
        again = a2.reconcile(view)
        assert again is not None and again.refused == 0
    assert pinned not in {n for batch in env.conductor.of("claim") for n in batch}

    # Its owner leaves: the node is asked for again (and re-homed once the
    # grace is over; here it is refused, the owner still counts as live at
    # the conductor).
    alone = env.live({"a2": []})
    env.conductor.calls.clear()
    a2.reconcile(alone)
    assert pinned in {n for batch in env.conductor.of("claim") for n in batch}
    assert set(uuids) >= set(a2.held())


def test_a_refusal_by_a_live_owner_brings_the_next_pass_forward_for_a_while(
    env: Fleet, clock: list[float]
) -> None:
    """An owner that saw the same change releases on its own pass: the refused
    agent looks again within a second, not a reconcile_interval later."""
    _nodes, a1, a2, view = _a2_joins_a1(env)
    refused = a2.reconcile(view)  # before a1 released anything
    assert refused is not None and refused.refused > 0 and not refused.converged
    assert refused.retry_in == agent_ownership._HANDOVER_POLL
    a1.reconcile(view)  # a1 releases a2's share
    a2.refresh_inventory()
    claimed = a2.reconcile(view)  # a second later: the released nodes are claimed
    assert claimed is not None and claimed.converged and claimed.claimed == refused.refused
    assert claimed.retry_in is None
    # A live owner that keeps a node (pinned, busy) is not polled for ever.
    env.live({"a1": [], "a2": [], "a3": []})
    view3 = env.view
    a3 = env.agent("a3")
    a3.refresh_inventory()
    env.busy["a1"] = set(a1.held())  # in-flight work: a1 releases nothing
    env.busy["a2"] = set(a2.held())
    assert a3.reconcile(view3).retry_in == agent_ownership._HANDOVER_POLL  # type: ignore[union-attr]
    clock[0] += agent_ownership._HANDOVER_WAIT
    a3.refresh_inventory()
    assert a3.reconcile(view3).retry_in is None  # type: ignore[union-attr]


def test_a_refusal_is_remembered_only_for_a_while(env: Fleet, clock: list[float]) -> None:
    """The release that would clear a refusal can be missed by the inventory's
    time window (its transaction committed late): the node is asked for again
    once the refusal is old, or it would stay unowned for good (issue 13)."""
    _nodes, a1, a2, view = _a2_joins_a1(env)
    first = a2.reconcile(view)  # a1 has not released its share yet: refused
    mine = a2.desired(view)
    assert first is not None and first.refused == len(mine) > 0
    a1.reconcile(view)  # a1 releases them; a2's inventory never hears of it
    again = a2.reconcile(view)
    assert again is not None and again.claimed == 0  # remembered: not asked
    clock[0] += agent_ownership._REFUSAL_MEMORY / 2
    again = a2.reconcile(view)
    assert again is not None and again.claimed == 0  # still
    clock[0] += agent_ownership._REFUSAL_MEMORY / 2 + 0.1
    late = a2.reconcile(view)
    assert late is not None and late.claimed == len(mine)
    assert set(a2.held()) == mine


def test_an_agent_stopped_for_a_restart_keeps_every_node_and_is_not_asked(
    env: Fleet,
) -> None:
    add_nodes(env.db, 40)
    both = env.live({"a1": [], "a2": []})
    a1, a2 = env.agent("a1"), env.agent("a2")
    env.settle()
    before = env.owners()
    a1_nodes = set(a1.held())
    assert a1_nodes and set(a2.held()) == set(before) - a1_nodes

    with pytest.raises(InvalidInput) as refused:  # only a member may hold its nodes
        env.conductor.hold_for_restart("a9")
    assert refused.value.fields == ["host"]
    reply = env.conductor.hold_for_restart("A1")  # SIGTERM: a1 asks, then leaves
    assert reply["host"] == "a1"
    assert reply["seconds"] == 60.0
    alone = env.live({"a2": []})
    a2.refresh_inventory()
    first = a2.reconcile(alone)
    assert first is not None and first.claimed == 0 and first.refused == len(a1_nodes)
    assert not first.retry_soon  # the hold has a deadline: no asking every 0.5 s ...
    assert first.retry_in is not None and 55.0 < first.retry_in <= 60.0  # ... but then
    env.conductor.calls.clear()
    for _ in range(3):
        again = a2.reconcile(alone)
        assert again is not None and again.refused == 0
    assert not {n for batch in env.conductor.of("claim") for n in batch} & a1_nodes

    # a1 is back (a new process): every node where it was, at the same epoch.
    env.live({"a1": [], "a2": []})
    a1 = env.agent("a1")
    env.settle()
    assert env.owners() == before
    assert a1.reconcile(both) is not None and set(a1.held()) == a1_nodes


def test_a_restart_hold_ends_when_the_conductor_sees_the_agent_back_not_before(
    env: Fleet,
) -> None:
    """A new process says it is back (``resume_work``) before the conductor's
    view has it: its nodes stay held meanwhile, or a peer's claim would
    find them neither live nor held and take them (seen in CI)."""
    add_nodes(env.db, 40)
    both = env.live({"a1": [], "a2": []})
    a1, a2 = env.agent("a1"), env.agent("a2")
    env.settle()
    a1_nodes = set(a1.held())
    before = env.owners()
    env.conductor.hold_for_restart("a1")
    alone = env.live({"a2": []})

    def hold() -> datetime.datetime | None:
        [record] = [a for a in agents_db.list_agents(env.db) if a.host == "a1"]
        return record.restart_until

    with pytest.raises(ServiceUnavailable):  # no build workers here; the hold first
        env.conductor.endpoint.resume_work(CTXT, "a1")
    assert hold() is not None  # not seen back: still held
    a2.refresh_inventory()
    early = a2.reconcile(alone)
    assert early is not None and early.claimed == 0
    assert env.owners() == before

    env.live({"a1": [], "a2": []})  # seen back
    with pytest.raises(ServiceUnavailable):
        env.conductor.endpoint.resume_work(CTXT, "a1")
    assert hold() is None
    assert a2.reconcile(both) is not None
    assert env.owners() == before and set(a1.held()) == a1_nodes


def test_a_conductor_that_cannot_vouch_for_its_view_keeps_the_hold_and_resumes_the_work(
    tmp_path: Path,
) -> None:
    """Its membership suspended, a conductor cannot tell the agent is back:
    the hold stays (its record ends it later), the work is routed anyway."""

    class Suspended:
        def live_members(self) -> frozenset[str]:
            raise ServiceUnavailable("membership suspended")

    class Builds:
        def resume_agent(self, host: str) -> tuple[int, int]:
            return 2, 1

    db = migrated(f"sqlite:///{tmp_path / 'fleet.db'}")
    agents_db.record_membership(db, {"a1": 1.0})
    agents_db.hold_for_restart(db, "a1", 60.0)
    endpoint = AgentsEndpoint(db, Suspended(), lambda: 0.0, Builds())  # type: ignore[arg-type]
    assert endpoint.resume_work(CTXT, "a1") == {"builds": 2, "teardowns": 1}
    [record] = agents_db.list_agents(db)
    assert record.restart_until is not None


def test_reconcile_is_postponed_unless_connected(env: Fleet) -> None:
    add_nodes(env.db, 10)
    view = env.live({"a1": []})
    a1 = env.agent("a1")
    a1.refresh_inventory()
    env.conductor.calls.clear()
    for state in (State.SUSPENDED, State.LOST):
        env.memberships["a1"].state = state
        assert a1.reconcile(view) is None
    assert env.conductor.calls == [] and a1.held() == {}
    env.memberships["a1"].state = State.CONNECTED
    result = a1.reconcile(view)
    assert result is not None and result.claimed == 10


def test_a_view_without_this_agent_is_not_acted_on(env: Fleet) -> None:
    """Such a view is read while the agent re-joins (its lease expired while
    the etcd member in use was away): acting on it released every unpinned
    node only to claim them back on the next view."""
    add_nodes(env.db, 12)
    env.live({"a1": [], "a2": []})
    a1, a2 = env.agent("a1"), env.agent("a2")
    env.settle()
    before = env.owners()
    assert {owner for owner, _ in before.values()} == {"a1", "a2"}
    held = a1.held()
    env.conductor.calls.clear()
    # CONNECTED again (re-joined), but the view was read before the join.
    assert a1.reconcile(view_of({"a2": []})) is None
    assert env.conductor.of("release") == [] and env.conductor.of("claim") == []
    assert a1.held() == held and env.owners() == before
    assert a2.reconcile(view_of({"a2": []})) is not None  # a peer's view is fine


def test_after_a_re_join_peers_missing_from_the_view_get_time_to_re_join(
    env: Fleet, clock: list[float]
) -> None:
    """The etcd member every service used was away past the TTL: every lease
    expired, and the agents re-join one after the other.  The first one back
    must not take the nodes of peers that re-join a heartbeat later."""
    add_nodes(env.db, 12)
    env.live({"a1": [], "a2": []})
    a1 = env.agent("a1", rejoin_settle=0.3)
    a2 = env.agent("a2")
    env.settle()
    before = env.owners()
    theirs = {n for n, (owner, _epoch) in before.items() if owner == "a2"}
    assert theirs and a1.held().keys() == before.keys() - theirs
    # a1 re-joined (a new join generation); a2 has not yet.
    env.memberships["a1"].join_generation = 2
    view = env.live({"a1": []})
    env.conductor.calls.clear()
    result = a1.reconcile(view)
    assert result is not None and result.claimed == 0
    assert result.retry_in == pytest.approx(0.3)
    assert env.conductor.of("claim") == [] and env.owners() == before
    # a2 re-joins meanwhile: nothing moved, nothing will.
    view = env.live({"a1": [], "a2": []})
    clock[0] += 0.4
    result = a1.reconcile(view)
    assert result is not None and result.claimed == 0 and env.owners() == before
    assert a2.reconcile(view) is not None and env.owners() == before
    # A peer that stays away past the settle is gone: its nodes are taken.
    view = env.live({"a1": []})
    result = a1.reconcile(view)
    assert result is not None and result.claimed == len(theirs)


def test_a_first_join_claims_at_once(env: Fleet) -> None:
    add_nodes(env.db, 6)
    view = env.live({"a1": []})
    a1 = env.agent("a1", rejoin_settle=60.0)
    a1.refresh_inventory()
    result = a1.reconcile(view)
    assert result is not None and result.claimed == 6 and result.retry_in is None


def test_a_first_join_lets_the_view_settle_before_claiming(env: Fleet, clock: list[float]) -> None:
    """Agents started together each join seeing few peers: the first pass
    waits join_settle (one watch interval) for the view to fill in."""
    add_nodes(env.db, 6)
    view = env.live({"a1": []})
    a1 = env.agent("a1", join_settle=0.3)
    a1.refresh_inventory()
    result = a1.reconcile(view)
    assert result is not None and result.claimed == 0
    assert result.retry_in == pytest.approx(0.3)
    assert env.conductor.of("claim") == []
    clock[0] += 0.15
    result = a1.reconcile(view)
    assert result is not None and result.claimed == 0  # not yet
    assert result.retry_in == pytest.approx(0.15)
    clock[0] += 0.2
    result = a1.reconcile(view)
    assert result is not None and result.claimed == 6


def test_a_claim_pass_stops_when_the_view_changes(env: Fleet) -> None:
    """Claims computed from a view that is no longer ours are not sent: the
    pass stops between batches and the next one, on the new view, follows."""
    env.conductor.claims_by_share = False  # by uuid, in batches
    nodes = add_nodes(env.db, 12)
    view = env.live({"a1": []})
    a1 = env.agent("a1", claim_batch=2)
    a1.refresh_inventory()
    claim = env.conductor.claim_nodes

    def claim_then_a2_joins(host: str, node_uuids: list[str]) -> Any:
        out = claim(host, node_uuids)
        env.live({"a1": [], "a2": []})
        return out

    env.conductor.claim_nodes = claim_then_a2_joins  # type: ignore[method-assign]
    result = a1.reconcile(view)
    env.conductor.claim_nodes = claim  # type: ignore[method-assign]
    assert result is not None and result.claimed == 2 and result.retry_soon
    assert len(env.conductor.of("claim")) == 1
    # The next pass, on the new view, claims a1's share only.
    result = a1.reconcile(env.view)
    assert result is not None and not result.retry_soon
    assert set(a1.held()) == ring_share(["a1", "a2"], nodes, "a1")


def test_a_claim_by_an_agent_the_conductor_does_not_see_fails_and_holds_nothing(
    env: Fleet,
) -> None:
    add_nodes(env.db, 5)
    env.live({"a2": []})
    a1 = env.agent("a1")
    a1.refresh_inventory()
    a1.pin(add_nodes(env.db, 1)[0])  # desired: its pin
    with pytest.raises(Exception, match="not a live member"):
        a1.reconcile(view_of({"a1": []}))  # the agent believes it is in; the conductor not
    assert a1.held() == {}


# -- the fence -------------------------------------------------------------------------


def test_check_refuses_wrong_epoch_unknown_node_and_unless_connected(env: Fleet) -> None:
    [node, other] = add_nodes(env.db, 2)
    env.live({"a1": []})
    a1 = env.agent("a1")
    a1.refresh_inventory()
    a1.reconcile(env.view)
    epoch = a1.epoch(node)
    assert epoch is not None and epoch == env.owners()[node][1]
    a1.check(node, epoch)  # ours, at that epoch, connected: fine

    with pytest.raises(NotOwner) as stale:
        a1.check(node, epoch + 1)
    assert (stale.value.node_uuid, stale.value.owner, stale.value.epoch) == (node, "a1", epoch)
    with pytest.raises(NotOwner):
        a1.check(node, epoch - 1)

    a1.forget([other])
    with pytest.raises(NotOwner) as unknown:
        a1.check(other, 1)
    assert (unknown.value.owner, unknown.value.epoch) == (None, -1)
    assert a1.epoch(other) is None

    for state in (State.SUSPENDED, State.LOST):
        env.memberships["a1"].state = state
        with pytest.raises(NotOwner) as suspended:
            a1.check(node, epoch)
        assert suspended.value.owner == "a1" and suspended.value.epoch == epoch
    env.memberships["a1"].state = State.CONNECTED
    a1.check(node, epoch)


def test_forget_drops_held_and_pinned(env: Fleet) -> None:
    [node] = add_nodes(env.db, 1)
    env.live({"a1": []})
    a1 = env.agent("a1")
    env.settle(1)
    a1.pin(node)
    a1.forget([node])
    assert a1.held() == {} and a1.pinned() == set()


def test_pin_and_unpin_move_the_pinned_gauge_by_one(env: Fleet) -> None:
    held, outside = add_nodes(env.db, 2)
    env.live({"a1": []})
    a1 = env.agent("a1")
    env.settle(1)
    a1.forget([outside])  # a node it does not hold: no pin of it counts

    def gauge() -> float | None:
        sample = a1._metrics.registry.get_sample_value
        return sample("ringfleet_agent_nodes_pinned", {"host": "a1", "group": ""})

    assert gauge() == 0
    a1.pin(held)
    a1.pin(held)  # pinned already
    a1.pin(outside)
    assert gauge() == 1
    a1.unpin(held)
    a1.unpin(held)
    assert gauge() == 0
    a1.pin(held)
    assert gauge() == 1
    a1.reconcile(env.view)  # claims ``outside`` again, pinned above: the pass counts it
    assert a1.held().keys() == {held, outside} and gauge() == 2


# -- revalidation ----------------------------------------------------------------------


def test_revalidate_replaces_held_epochs_after_a_takeover(env: Fleet) -> None:
    uuids = add_nodes(env.db, 12)
    env.live({"a1": []})
    a1 = env.agent("a1")
    env.settle(1)
    pinned = uuids[0]
    pin(env.db, [pinned], "a1")
    old = a1.held()
    assert set(old) == set(uuids)

    # a1 is LOST: a2 alone in the group takes every unpinned node (the pin
    # waits for rehome_grace); then hands one back to a1, at a new epoch.
    env.memberships["a1"].state = State.LOST
    view = env.live({"a2": []})
    a2 = env.agent("a2")
    a2.refresh_inventory()
    out = a2.reconcile(view)
    assert out is not None and out.claimed == 11 and out.refused == 1
    env.live({"a1": [], "a2": []})
    returned = uuids[1]
    moved = env.conductor.transfer_nodes(
        "a2", [{"node_uuid": returned, "epoch": a2.held()[returned], "new_owner": "a1"}]
    )
    assert list(moved.done) == [returned]

    # Back and connected, a1 re-reads before acting: only what the conductor records.
    env.memberships["a1"].state = State.CONNECTED
    assert a1.revalidate() == 2
    held = a1.held()
    owners = env.owners()
    assert held == {pinned: owners[pinned][1], returned: owners[returned][1]}
    assert held[returned] == old[returned] + 2  # claimed by a2, then transferred back
    assert a1.pinned() == {pinned}
    with pytest.raises(NotOwner):
        a1.check(returned, old[returned])
    a1.check(returned, held[returned])
    for node in uuids[2:]:
        with pytest.raises(NotOwner):
            a1.check(node, old[node])


def test_nodes_a_read_finds_taken_over_are_said_in_one_line(
    env: Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    """Not a WARNING per node (an agent that stepped aside lost hundreds):
    one INFO line per read; the absence that let its peers take them was
    said when it happened."""
    uuids = add_nodes(env.db, 12)
    env.live({"a1": []})
    a1 = env.agent("a1")
    env.settle(1)
    assert set(a1.held()) == set(uuids)
    a1.refresh_inventory()
    env.memberships["a1"].state = State.LOST
    view = env.live({"a2": []})
    a2 = env.agent("a2")
    a2.refresh_inventory()
    out = a2.reconcile(view)
    assert out is not None and out.claimed == 12
    env.memberships["a1"].state = State.CONNECTED
    env.live({"a1": [], "a2": []})
    with caplog.at_level(logging.DEBUG, logger="compute_agent.ownership"):
        a1.refresh_inventory(deep=True)
    said = [r for r in caplog.records if "lost" in r.getMessage() and r.levelno >= logging.INFO]
    assert len(said) == 1, [r.getMessage() for r in said]
    assert said[0].levelname == "INFO"
    lost = [n for n in uuids if n not in a1.held()]
    assert f"lost {len(lost)} nodes" in said[0].getMessage() and len(lost) >= 1


# -- inventory -------------------------------------------------------------------------


@WHOLE_FLEET
def test_inventory_is_read_whole_then_only_changes(env: Fleet) -> None:
    first = grouped_nodes(env.db, "rack1", 5)
    grouped_nodes(env.db, "rack2", 5)
    age_nodes(env.db, first)
    env.live({"a1": ["rack1"]})
    a1 = env.agent("a1", ["rack1"])
    assert a1.refresh_inventory() == 5
    [call] = env.conductor.of("list")
    assert call == {"groups": ["rack1"], "since": None, "marker": None}
    assert a1.desired(env.view) == set(first)

    later = grouped_nodes(env.db, "rack1", 3)
    grouped_nodes(env.db, "rack2", 3)
    env.conductor.calls.clear()
    assert a1.refresh_inventory() == 3  # only the new ones of its group
    [call] = env.conductor.of("list")
    assert call["since"] is not None and call["groups"] == ["rack1"]
    assert a1.desired(env.view) == set(first + later)


@WHOLE_FLEET
def test_inventory_pages_through_a_large_fleet(env: Fleet) -> None:
    uuids = add_nodes(env.db, 5003)
    env.live({"a1": []})
    a1 = env.agent("a1")
    assert a1.refresh_inventory() == 5003
    lists = env.conductor.of("list")
    assert len(lists) == 2 and lists[0]["marker"] is None
    assert lists[1]["marker"] == sorted(uuids)[4999]
    assert a1.desired(env.view) == set(uuids)


#: A test of the reads by share (API 1.15).
BY_SHARE = pytest.mark.parametrize("env", ["by-share"], indirect=True)


def _share_reads(env: Fleet) -> list[dict[str, Any]]:
    return [call for call in env.conductor.of("share") if call.get("ring") is not None]


@BY_SHARE
def test_an_agent_reads_only_its_ring_share_of_each_group_and_its_own_nodes(env: Fleet) -> None:
    rack1 = grouped_nodes(env.db, "rack1", 60)
    rack2 = grouped_nodes(env.db, "rack2", 60)
    lonely = grouped_nodes(env.db, "rack3", 20)  # only the all-groups agents serve it
    age_nodes(env.db, rack1 + rack2 + lonely)  # so that a change read sees only changes
    view = env.live({"a1": ["rack1"], "a2": [], "a3": ["rack2"], "a4": []})
    a1, a2 = env.agent("a1", ["rack1"]), env.agent("a2")
    want1 = ring_share(["a1", "a2", "a4"], rack1, "a1")
    want2 = (
        ring_share(["a1", "a2", "a4"], rack1, "a2")
        | ring_share(["a2", "a3", "a4"], rack2, "a2")
        | ring_share(["a2", "a4"], lonely, "a2")
    )
    assert a1.refresh_inventory() == len(want1)
    assert a2.refresh_inventory() == len(want2)
    assert a1.desired(view) == want1 and a2.desired(view) == want2
    # a2 serves every group: one ring per group some agent names, and one
    # for every other group (rack3, and any group enrolled later).
    rings = {
        (None if c["groups"] is None else tuple(c["groups"]), tuple(c["exclude_groups"] or ()))
        for c in _share_reads(env)
        if c["member"] == "a2"
    }
    assert rings == {(("rack1",), ()), (("rack2",), ()), (None, ("rack1", "rack2"))}
    # A node it holds outside its share (an instance pins it) is followed too.
    outside = next(n for n in rack2 if n not in want2)
    ownership.claim_nodes(env.db, "a2", [outside], live_members=set(view.members), rehome_grace=0.0)
    env.conductor.calls.clear()
    a2.expect_owner_changes()  # as the conductor's hint after a move or hand-over
    assert a2.refresh_inventory() == 1
    assert a2.held() == {outside: env.owners()[outside][1]}  # adopted


@BY_SHARE
def test_the_first_read_of_a_share_is_the_call_that_claims_it(env: Fleet) -> None:
    """At a cold start an agent read its share, then claimed it: two calls to
    a conductor for the same arcs.  Now one (conductor API 1.26), and the
    pass finds nothing left to claim."""
    nodes = add_nodes(env.db, 60)
    view = env.live({"a1": [], "a2": []})
    share = ring_share(["a1", "a2"], nodes, "a1")
    a1 = env.agent("a1")
    result = a1.reconcile(view)
    assert result is not None and result.claimed == len(share) and result.converged
    assert set(a1.held()) == share == a1.desired(view)
    assert {env.owners()[n] for n in share} == {("a1", 1)}
    [claim] = env.conductor.of("claim_share")
    assert claim["read"] == inventory_reads.PAGE and claim["previous_ring"] is None
    assert _share_reads(env) == []  # the share came with the claim
    assert a1.reconcile(view) is not None and env.conductor.of("claim_share") == [claim]


@BY_SHARE
def test_a_conductor_that_does_not_read_what_it_claimed_is_read_after(env: Fleet) -> None:
    """A conductor older than API 1.26 claims without reading: the share is
    read by the next call, and nothing is claimed twice."""
    nodes = add_nodes(env.db, 60)
    view = env.live({"a1": [], "a2": []})
    env.conductor.reads_claims = False
    a1 = env.agent("a1")
    result = a1.reconcile(view)
    share = ring_share(["a1", "a2"], nodes, "a1")
    assert result is not None and result.claimed == len(share) and set(a1.held()) == share
    assert [c["read"] for c in env.conductor.of("claim_share")] == [None]
    assert [c["since"] for c in _share_reads(env)] == [None]


@BY_SHARE
def test_a_first_read_that_cannot_claim_yet_reads(env: Fleet) -> None:
    """A conductor that has not seen the agent join refuses its claim: the
    first read is made all the same, and the pass claims later."""
    nodes = add_nodes(env.db, 30)
    view = env.live({"a1": []})
    a1 = env.agent("a1")
    a1.revalidate()
    env.fleet.on_change(view_of({"a2": []}))  # the conductor's view: a1 not yet
    assert a1.refresh_inventory(view=view) == 30 and a1.held() == {}
    assert [c["since"] for c in _share_reads(env)] == [None]
    assert len(env.conductor.of("claim_share")) == 1
    env.fleet.on_change(view)
    assert a1.reconcile(view) is not None and set(a1.held()) == set(nodes)


@BY_SHARE
def test_a_read_before_the_held_set_is_validated_claims_nothing(env: Fleet) -> None:
    """A restarted agent's first read may come before it re-read what it
    holds (the record may say it holds nodes): that read only reads."""
    add_nodes(env.db, 30)
    view = env.live({"a1": []})
    a1 = env.agent("a1")
    assert a1.refresh_inventory(view=view) == 30
    assert env.conductor.of("claim_share") == [] and a1.held() == {}


@BY_SHARE
def test_after_a_membership_change_an_agent_reads_only_the_arcs_it_gained(env: Fleet) -> None:
    nodes = add_nodes(env.db, 300)
    env.live({"a1": [], "a2": [], "a3": []})
    a1, _a2, a3 = env.agent("a1"), env.agent("a2"), env.agent("a3")
    env.settle()
    age_nodes(env.db, nodes)  # nothing changed lately: a change read is empty
    share3 = ring_share(["a1", "a2", "a3"], nodes, "a3")
    assert set(a3.held()) == share3
    # a3 leaves (its nodes stay with it until a claim takes them).
    view = env.live({"a1": [], "a2": []})
    del env.agents["a3"]
    env.conductor.calls.clear()
    read = a1.refresh_inventory()
    gained = ring_share(["a1", "a2"], nodes, "a1") - ring_share(["a1", "a2", "a3"], nodes, "a1")
    assert read == len(gained) > 0  # the arcs gained, nothing else
    [gained_read] = [c for c in _share_reads(env) if c.get("previous_ring") is not None]
    assert gained_read["previous_ring"]["members"] == {"a1": 1.0, "a2": 1.0, "a3": 1.0}
    env.settle()
    assert env.owners().keys() == set(nodes)
    assert {owner for owner, _epoch in env.owners().values()} == {"a1", "a2"}
    assert a1.desired(view) == ring_share(["a1", "a2"], nodes, "a1")
    # a3 comes back: a1 forgets what is a3's again, and releases it.
    env.live({"a1": [], "a2": [], "a3": []})
    a3 = env.agent("a3")
    env.settle()
    assert set(a3.held()) == share3
    assert a1.refresh_inventory() == 0
    assert a1.desired(env.view) == set(a1.held()) == ring_share(["a1", "a2", "a3"], nodes, "a1")
    assert a1._inventory.keys() == set(a1.held())


@BY_SHARE
def test_a_share_read_on_a_small_view_is_given_back_in_the_fewest_calls(
    env: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent that read and claimed its share while alone gives most of
    it back when the others join: in calls of up to the conductor's limit,
    not of ``claim_batch`` (each call waits its turn at a conductor behind
    every peer's claims, and sends the new owners to read again)."""
    nodes = add_nodes(env.db, 300)
    a1 = env.agent("a1", claim_batch=7)
    env.live({"a1": []})
    env.settle(1)
    assert set(a1.held()) == set(nodes)
    view = env.live({"a1": [], "a2": [], "a3": []})
    env.conductor.calls.clear()
    given = len(nodes) - len(ring_share(["a1", "a2", "a3"], nodes, "a1"))
    assert a1.release_first(view) == given > 100
    assert [len(claims) for claims in env.conductor.of("release")] == [given]
    # Up to the limit a call: more than that goes in several.
    env.live({"a1": []})
    env.settle(1)
    monkeypatch.setattr(releases, "_RELEASE_BATCH", 100)
    env.conductor.calls.clear()
    assert a1.release_first(env.live({"a1": [], "a2": [], "a3": []})) == given
    sizes = [len(c) for c in env.conductor.of("release")]
    assert sizes == [100] * (given // 100) + ([given % 100] if given % 100 else [])


@BY_SHARE
def test_on_a_join_staying_agents_release_before_they_read_and_read_no_gained_arcs(
    env: Fleet,
) -> None:
    """A joiner claims its share once every peer released its part: a staying
    agent releases it first, from the inventory it has (its reads wait their
    turn at a conductor with every peer's), and reads nothing then, since a
    join gives it nothing new: its next read reads what changed since the
    one before the join."""
    nodes = add_nodes(env.db, 300)
    assert env.agents == {}
    assert env.agent("a1").release_first(env.live({"a1": []})) == 0  # nothing read yet
    env.live({"a1": [], "a2": []})
    a1, a2 = env.agents["a1"], env.agent("a2")
    env.settle()
    age_nodes(env.db, nodes)  # nothing changed lately: a change read is empty
    assert a1.release_first(env.view) == 0  # the share it read: nothing to release
    view = env.live({"a1": [], "a2": [], "a3": []})
    a3 = env.agent("a3")
    env.conductor.calls.clear()
    theirs = ring_share(["a1", "a2", "a3"], nodes, "a3")
    released = a1.release_first(view)
    assert released == len(theirs & ring_share(["a1", "a2"], nodes, "a1")) > 0
    assert [name for name, _args in env.conductor.calls] == ["release"]  # no read first
    assert a1.release_first(view) == 0  # once per new share
    assert a2.release_first(view) > 0
    kept = sorted(ring_share(["a1", "a2", "a3"], nodes, "a1"))[0]
    age_nodes(env.db, [kept], hours=0.0)  # changed by someone else meanwhile, not hinted
    env.conductor.calls.clear()
    assert a1.refresh_inventory() == 0 and a2.refresh_inventory() == 0
    assert _share_reads(env) == []  # no read of gained arcs, nor of changes
    assert not a1._inventory.keys() & theirs  # the joiner's, forgotten
    assert a1.refresh_inventory() == 1  # the next pass's: the change since the last read
    assert [c for c in _share_reads(env) if c.get("previous_ring") is not None] == []
    # The joiner takes its whole share at its first pass: nothing is refused.
    a3.refresh_inventory()
    first = a3.reconcile(view)
    assert first is not None and (first.claimed, first.refused) == (len(theirs), 0)
    assert {o for n, (o, _e) in env.owners().items() if n in theirs} == {"a3"}
    # Another joins: after a hint (an operator changed nodes) the read is not
    # left for later.
    env.live({"a1": [], "a2": [], "a3": [], "a4": []})
    env.conductor.calls.clear()
    a2.expect_owner_changes()
    a2.refresh_inventory()
    hinted = len(_share_reads(env))
    assert hinted > 0
    a1.refresh_inventory()
    assert len(_share_reads(env)) == hinted  # a1 had no hint: left for later


@BY_SHARE
def test_when_a_peer_dies_survivors_claim_its_free_nodes_before_they_read_them(
    env: Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    """A survivor gains the dead peer's arcs: it claims their unpinned nodes
    by arcs at once (their reads wait their turn at a conductor with every
    survivor's), and the read that follows learns them as its own."""
    nodes = add_nodes(env.db, 300)
    env.live({"a1": [], "a2": [], "a3": []})
    a1, a2, _a3 = env.agent("a1"), env.agent("a2"), env.agent("a3")
    env.settle()
    pinned = sorted(ring_share(["a1", "a2", "a3"], nodes, "a3"))[0]
    pin(env.db, [pinned], "a3")
    age_nodes(env.db, nodes)  # nothing changed lately: a change read is empty
    view = env.live({"a1": [], "a2": []})  # a3 killed
    del env.agents["a3"]
    # Nodes imported meanwhile, not yet read: a claim of the arcs gained
    # leaves those of a1's old arcs to its pass.
    late = add_nodes(env.db, 60)
    age_nodes(env.db, late)
    env.conductor.calls.clear()
    gained = ring_share(["a1", "a2"], nodes, "a1") - ring_share(["a1", "a2", "a3"], nodes, "a1")
    gained_late = ring_share(["a1", "a2"], late, "a1") - ring_share(["a1", "a2", "a3"], late, "a1")
    assert a1.claim_first(view) == len(gained - {pinned}) + len(gained_late) > 0
    [claim] = env.conductor.of("claim_share")  # no read first, one call
    assert [name for name, _args in env.conductor.calls] == ["claim_share"]
    assert claim["previous_ring"]["members"] == {"a1": 1.0, "a2": 1.0, "a3": 1.0}
    assert claim["read"] == inventory_reads.PAGE  # the read of those arcs, with it
    old_share = ring_share(["a1", "a2", "a3"], late, "a1")
    assert old_share and {env.owner(n) for n in old_share} == {None}
    assert {env.owner(n) for n in gained - {pinned}} == {"a1"}
    assert env.owner(pinned) == "a3"  # a pin waits for rehome_grace, claimed by uuid
    caplog.set_level(logging.INFO, "compute_agent.ownership")
    assert a1.refresh_inventory() >= len(gained)  # the arcs gained, learnt
    assert [c for c in _share_reads(env) if c.get("previous_ring")] == []  # came with the claim
    assert gained - {pinned} <= set(a1.held())
    assert not [r for r in caplog.records if "adopts" in r.getMessage()]  # claimed, not handed
    assert a1.claim_first(view) == 0  # the share read now is this view's
    assert a2.release_first(view) == 0  # nothing of a2's went to a peer
    # Before the first read, nothing: the first pass reads, then claims.
    assert env.agent("a4").claim_first(view) == 0


def _three_settled(env: Fleet) -> tuple[list[str], OwnershipManager]:
    """300 nodes shared by a1, a2 and a3, settled: the nodes and a1."""
    nodes = add_nodes(env.db, 300)
    env.live({"a1": [], "a2": [], "a3": []})
    a1 = env.agent("a1")
    for peer in ("a2", "a3"):
        env.agent(peer)
    env.settle()
    return nodes, a1


@BY_SHARE
def test_gained_arcs_claimed_in_several_calls_are_read_after_the_last(
    env: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page a claim of gained arcs reads shows the nodes later calls take
    as the dead peer's: when one call could not take them all, the arcs are
    read after the claims, and no node claimed is taken for lost."""
    nodes, a1 = _three_settled(env)
    age_nodes(env.db, nodes)
    view = env.live({"a1": [], "a2": []})  # a3 killed
    del env.agents["a3"]
    gained = ring_share(["a1", "a2"], nodes, "a1") - ring_share(["a1", "a2", "a3"], nodes, "a1")
    monkeypatch.setattr(share_claims, "_LIMIT", len(gained) // 3)
    env.conductor.calls.clear()
    assert a1.claim_first(view) == len(gained) > 0
    claims = env.conductor.of("claim_share")
    assert len(claims) > 1 and [c["read"] for c in claims[1:]] == [None] * (len(claims) - 1)
    assert a1.refresh_inventory() >= len(gained)
    [gained_read] = [c for c in _share_reads(env) if c.get("previous_ring")]
    assert gained_read["since"] is None
    assert gained <= set(a1.held())


@BY_SHARE
def test_a_survivor_that_sees_a_peer_die_first_claims_again_once_the_conductor_does(
    env: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The conductors read the group on their own schedule: a survivor that
    saw the peer leave first is refused its nodes (their owner is live to
    the conductor, which says so).  Its pass comes back soon to claim again
    before its reads, until the conductor sees the peer leave too -- for a
    membership TTL at most."""
    nodes, a1 = _three_settled(env)
    conductors = env.view
    view = env.live({"a1": [], "a2": []})  # a3 killed: the agents see it ...
    env.fleet.on_change(conductors)  # ... the conductor not yet
    del env.agents["a3"]
    clock = [time.monotonic()]
    monkeypatch.setattr(share_claims.time, "monotonic", lambda: clock[0])
    tries = []
    for _ in range(19):  # half a second apart: 9 s of the TTL's 10
        tries.append(a1.claim_first(view))
        clock[0] += 0.5
    assert tries == [None] * 19  # more than the four an older conductor gets
    assert env.conductor.of("claim_share")[-1]["previous_ring"] is not None
    env.fleet.on_change(view)  # the conductor sees it
    gained = ring_share(["a1", "a2"], nodes, "a1") - ring_share(["a1", "a2", "a3"], nodes, "a1")
    assert a1.claim_first(view) == len(gained) > 0
    # A peer the conductor still sees live after a whole TTL is back, or
    # the agent's view is the odd one: its arcs are read, not claimed again.
    env.fleet.on_change(env.live({"a1": [], "a2": [], "a3": []}))
    a1.refresh_inventory()
    assert a1.claim_first(env.view) == 0  # nothing gained: the tries start afresh
    conductors = env.view
    view = env.live({"a1": [], "a2": []})  # a3 gone again, for the agents only
    env.fleet.on_change(conductors)
    assert a1.claim_first(view) is None
    clock[0] += 10.5
    assert a1.claim_first(view) == 0


@BY_SHARE
def test_a_survivor_claims_again_a_few_times_when_the_conductor_does_not_say(env: Fleet) -> None:
    """A conductor that does not say whom it still sees live (older): the
    pass claims again a few times, as before."""
    _nodes, a1 = _three_settled(env)
    env.conductor.says_still_live = False
    conductors = env.view
    view = env.live({"a1": [], "a2": []})
    env.fleet.on_change(conductors)
    del env.agents["a3"]
    assert [a1.claim_first(view) for _ in range(5)] == [None, None, None, None, 0]


@BY_SHARE
def test_a_survivor_reads_at_once_when_the_conductor_saw_the_peer_leave_and_nothing_was_free(
    env: Fleet,
) -> None:
    """The conductor saw the peer leave and took nothing: every node of the
    gained arcs is pinned (re-homed after ``rehome_grace``); the pass goes
    on to its reads without a second claim."""
    nodes, a1 = _three_settled(env)
    gained = ring_share(["a1", "a2"], nodes, "a1") - ring_share(["a1", "a2", "a3"], nodes, "a1")
    pin(env.db, sorted(gained), "a3")
    view = env.live({"a1": [], "a2": []})
    del env.agents["a3"]
    env.conductor.calls.clear()
    assert a1.claim_first(view) == 0
    [claim] = env.conductor.of("claim_share")
    assert claim["previous_ring"] is not None


@BY_SHARE
def test_change_reads_leave_out_what_the_agents_own_claims_changed(env: Fleet) -> None:
    uuids = add_nodes(env.db, 100)
    age_nodes(env.db, uuids)
    view = env.live({"a1": [], "a2": []})
    a1 = env.agent("a1")
    a1.refresh_inventory()
    result = a1.reconcile(view)
    assert result is not None and result.claimed == len(ring_share(["a1", "a2"], uuids, "a1")) > 0
    assert env.conductor.of("claim_share") and not env.conductor.of("claim")
    # The claims changed every node of its share: none of it is read back ...
    assert a1.refresh_inventory() == 0
    assert a1.refresh_inventory(deep=True) == 0
    # ... but a later change to one of them, by anything else, is.
    mine = sorted(a1.held())[0]
    nodes.set_maintenance(env.db, mine, True, "disk swap")
    # In its share; not a second time among the nodes it owns (the owner read
    # leaves its share out).
    assert a1.refresh_inventory() == 1


@BY_SHARE
def test_changes_are_read_by_share_too(env: Fleet) -> None:
    first = add_nodes(env.db, 50)
    age_nodes(env.db, first)
    env.live({"a1": [], "a2": []})
    a1 = env.agent("a1")
    a1.refresh_inventory()
    later = add_nodes(env.db, 50)
    env.conductor.calls.clear()
    assert a1.refresh_inventory() == len(ring_share(["a1", "a2"], later, "a1"))
    assert all(c["since"] is not None for c in env.conductor.of("share"))
    assert a1.desired(env.view) == ring_share(["a1", "a2"], first + later, "a1")


@BY_SHARE
def test_a_share_is_read_in_pages(env: Fleet) -> None:
    uuids = add_nodes(env.db, 5003)
    env.live({"a1": []})
    a1 = env.agent("a1")
    assert a1.refresh_inventory() == 5003
    reads = _share_reads(env)
    assert [c["marker"] is None for c in reads] == [True, False]
    assert a1.desired(env.view) == set(uuids)


# -- drain -----------------------------------------------------------------------------


def test_drain_hands_every_node_pins_included_to_its_ring_successor(env: Fleet) -> None:
    rack1 = grouped_nodes(env.db, "rack1", 20)
    lonely = grouped_nodes(env.db, "rack9", 3)  # nobody but a1 serves it
    env.live({"a1": []})
    a1 = env.agent("a1", claim_batch=7)
    env.settle(1)
    assert set(a1.held()) == set(rack1 + lonely)
    pinned = rack1[:2]
    [instance, _] = pin(env.db, pinned, "a1")
    a1.revalidate()
    assert a1.pinned() == set(pinned)
    epochs = a1.held()

    view = env.live({"a1": [], "a2": ["rack1"], "a3": ["rack1"]})
    env.conductor.calls.clear()
    handed, refused = a1.drain(view)
    assert (handed, refused) == (20, 0)
    assert all(len(t) <= 7 for t in env.conductor.of("transfer"))
    successor = Ring({"a2": 1.0, "a3": 1.0}, version=1)
    owners = env.owners()
    for node in rack1:
        assert owners[node] == (successor.owner(node), epochs[node] + 1)
    # The instance moved with its node, in the same transaction.
    assert instances.get_instance(env.db, instance).host == successor.owner(pinned[0])
    # What nobody else serves stays; the rest is forgotten, pins too.
    assert a1.held() == {n: epochs[n] for n in lonely}
    assert a1.pinned() == set()
    for node in lonely:
        assert owners[node] == ("a1", epochs[node])


def test_drain_with_no_peer_keeps_everything(env: Fleet) -> None:
    uuids = add_nodes(env.db, 4)
    view = env.live({"a1": []})
    a1 = env.agent("a1")
    env.settle(1)
    assert a1.drain(view) == (0, 0)
    assert set(a1.held()) == set(uuids)
    assert env.conductor.of("transfer") == []


class _TimedInventory:
    """A conductor whose inventory reads answer nothing, at the as_of the test sets."""

    def __init__(self) -> None:
        self.as_of = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
        self.since: list[str | None] = []

    def list_node_uuids(self, **kwargs: Any) -> dict[str, Any]:
        self.since.append(kwargs["since"])
        return {"nodes": [], "as_of": self.as_of.isoformat()}


def test_inventory_refreshes_re_read_a_short_overlap_and_a_deep_one_every_few_seconds() -> None:
    """Every refresh re-reads 0.5 s before the previous one (a commit of the usual
    milliseconds); one every 5 s goes back 5 s before the previous such one (a
    commit that stalled): every row is read about twice, not five or six times."""
    conductor = _TimedInventory()
    manager = OwnershipManager("a1", conductor, StubMembership())  # type: ignore[arg-type]
    t0 = conductor.as_of
    second = datetime.timedelta(seconds=1)
    manager.refresh_inventory()  # the whole inventory
    for tick in range(1, 12):
        conductor.as_of = t0 + tick * second
        manager.refresh_inventory()
    expected: list[str | None] = [None]
    for tick in range(1, 12):
        if tick == 6:  # the previous read (t0 + 5 s) is 5 s after the last deep one (t0)
            start = t0 - 5 * second
        else:
            start = t0 + (tick - 1) * second - datetime.timedelta(seconds=0.5)
        expected.append(start.isoformat())
    assert conductor.since == expected


def test_a_refresh_can_leave_the_deep_re_read_for_later() -> None:
    """The agent acts on the changes since its last refresh first and re-reads
    deep after the pass: a deep window can hold the whole fleet (after a cold
    start), and reading it first delayed the claims by 11 s at 100k nodes."""
    conductor = _TimedInventory()
    manager = OwnershipManager("a1", conductor, StubMembership())  # type: ignore[arg-type]
    t0 = conductor.as_of
    second = datetime.timedelta(seconds=1)
    manager.refresh_inventory(deep=False)  # the first one reads everything anyway
    assert conductor.since == [None]
    conductor.as_of = t0 + 20 * second  # a long pass later: a deep one is due ...
    manager.refresh_inventory(deep=False)
    assert manager.deep_refresh_due()
    conductor.as_of = t0 + 21 * second
    manager.refresh_inventory(deep=True)  # ... and comes after the pass
    assert not manager.deep_refresh_due()
    assert conductor.since[1:] == [
        (t0 - datetime.timedelta(seconds=0.5)).isoformat(),  # the short overlap only
        (t0 - 5 * second).isoformat(),  # back before the previous deep one
    ]


# -- by share: first read, claims by arcs, owner reads (API 1.19) ------------------


@BY_SHARE
def test_a_cold_start_claims_its_share_by_arcs_in_one_call(env: Fleet) -> None:
    """The free nodes of the share in one claim_share call, each with a new
    epoch; a live peer's node and a pinned node are not taken by it, and
    what is left is claimed by uuid (refused: the owner lives)."""
    uuids = add_nodes(env.db, 60)
    view = env.live({"a1": [], "a2": []})
    share = sorted(ring_share(["a1", "a2"], uuids, "a1"))
    kept_by_a2, pinned = share[0], share[1]
    with env.db.transaction() as session:
        session.execute(
            update(NodeModel).where(NodeModel.uuid == kept_by_a2).values(owner="a2", owner_epoch=4)
        )
        session.execute(
            update(NodeModel).where(NodeModel.uuid == pinned).values(owner="a9", owner_epoch=2)
        )
    # Hosting an instance, its owner gone within rehome_grace: by uuid only.
    pin(env.db, [pinned], "a9")
    a1 = env.agent("a1")
    a1.refresh_inventory()
    env.conductor.calls.clear()
    result = a1.reconcile(view)
    assert result is not None
    free = set(share) - {kept_by_a2, pinned}
    assert len(env.conductor.of("claim_share")) == 1
    owners = env.owners()
    assert {n for n, (o, _e) in owners.items() if o == "a1"} == free
    assert a1.held() == {n: owners[n][1] for n in free}
    assert all(owners[n][1] == 1 for n in free)  # a new epoch each
    assert owners[kept_by_a2] == ("a2", 4)  # a live owner is never robbed
    assert owners[pinned] == ("a9", 2)  # nor a pin within its grace
    # What is left goes by uuid, as before: refused while its owner lives.
    assert sorted(n for c in env.conductor.of("claim") for n in c) == sorted([kept_by_a2, pinned])
    assert result.claimed == len(free) and result.refused == 2
    # Nothing left to take: the next pass sends no claim by share.
    env.conductor.calls.clear()
    a1.reconcile(view)
    assert env.conductor.of("claim_share") == []


@BY_SHARE
def test_a_claim_by_share_skips_nodes_held_for_a_restart(env: Fleet) -> None:
    uuids = add_nodes(env.db, 30, owner="a2")
    env.live({"a2": []})
    env.conductor.hold_for_restart("a2")  # SIGTERM: a2 stops for a restart
    view = env.live({"a1": []})
    a1 = env.agent("a1")
    a1.refresh_inventory()
    result = a1.reconcile(view)
    assert result is not None and result.claimed == 0
    assert all(owner == "a2" for owner, _e in env.owners().values())
    assert set(env.owners()) == set(uuids)


@BY_SHARE
def test_an_older_conductor_gets_claims_by_uuid(env: Fleet) -> None:
    env.conductor.claims_by_share = False
    uuids = add_nodes(env.db, 20)
    view = env.live({"a1": []})
    a1 = env.agent("a1")
    a1.refresh_inventory()
    result = a1.reconcile(view)
    assert result is not None and result.claimed == 20
    assert sorted(n for c in env.conductor.of("claim") for n in c) == sorted(uuids)


@BY_SHARE
def test_the_first_read_waits_for_the_view_to_settle(env: Fleet, clock: list[float]) -> None:
    """Agents started together each see few peers at first: nothing is read
    until the share has stayed the same first_read_settle seconds, or
    first_read_wait_max has passed since the first view."""
    uuids = add_nodes(env.db, 40)
    view = env.live({"a1": []})
    a1 = env.agent("a1")
    a1._first_read_settle, a1._first_read_wait_max = 1.0, 3.0
    assert a1.refresh_inventory() == 0
    result = a1.reconcile(view)
    assert result is not None and result.claimed == 0 and result.retry_in == pytest.approx(1.0)
    # Nothing read, nothing asked: the held set comes with the first read's claim.
    assert env.conductor.of("share") == [] and env.conductor.of("owned") == []
    clock[0] += 0.8
    view = env.live({"a1": [], "a2": []})  # a peer appears: the wait starts again
    result = a1.reconcile(view)
    assert result is not None and result.retry_in == pytest.approx(1.0)
    clock[0] += 1.0
    assert a1.refresh_inventory(view=view) == len(ring_share(["a1", "a2"], uuids, "a1"))
    # A view that keeps changing waits first_read_wait_max at most.
    a3 = env.agent("a3")
    a3._first_read_settle, a3._first_read_wait_max = 1.0, 3.0
    for members in (["a3"], ["a1", "a3"], ["a1", "a2", "a3"], ["a1", "a3"]):
        assert a3.refresh_inventory(view=env.live({m: [] for m in members})) == 0
        clock[0] += 0.9
    assert a3.refresh_inventory(view=env.view) > 0  # 3.6 s after the first view


@BY_SHARE
def test_an_agent_that_holds_nothing_reads_no_nodes_of_its_own_outside_its_share(
    env: Fleet, clock: list[float]
) -> None:
    """At a cold start the conductor records no node as the agent's (read
    while its first read waits for the view): that read is its share alone;
    a hint (a node handed over) makes the next one look outside it."""
    uuids = add_nodes(env.db, 40)
    view = env.live({"a1": [], "a2": []})
    a1 = env.agent("a1")
    a1._first_read_settle, a1._first_read_wait_max = 1.0, 3.0
    result = a1.reconcile(view)  # waits; validates the held set meanwhile
    assert result is not None and result.retry_in == pytest.approx(1.0)
    clock[0] += 1.0
    assert a1.refresh_inventory(view=view) == len(ring_share(["a1", "a2"], uuids, "a1"))
    # The share came with its claim (one call), and no owner read.
    assert [c for c in env.conductor.of("claim_share") if c["read"]]
    assert all(c.get("ring") is not None for c in env.conductor.of("share"))
    a1.expect_owner_changes()
    a1.refresh_inventory(view=view)
    assert [c for c in env.conductor.of("share") if c.get("ring") is None]


def _first_pass(env: Fleet, host: str, view: MembershipView, clock: list[float]) -> Any:
    """``host``'s first passes on ``view``: the one that waits for the view
    to settle (1 s), then the one that reads; the second's result."""
    agent = env.agent(host)
    agent._first_read_settle, agent._first_read_wait_max = 1.0, 3.0
    waiting = agent.reconcile(view)
    assert waiting is not None and waiting.retry_in == pytest.approx(1.0)
    clock[0] += 1.0
    return agent, agent.reconcile(view)


@BY_SHARE
def test_a_new_process_reads_its_held_set_with_its_first_claim(
    env: Fleet, clock: list[float]
) -> None:
    """A new agent process (its lease expired before it came back: no
    earlier entry in the group) learns what the conductor records as its own
    from the call that claims and reads its share (1.28): no ``owned_nodes``
    first.  It holds those nodes at their epochs, pins included, reads
    those outside its share, and acts on none before that call."""
    free = add_nodes(env.db, 40)
    kept = add_nodes(env.db, 12, owner="a1", prefix="kept")
    pin(env.db, kept[:2], "a1")
    view = env.live({"a1": [], "a2": []})
    a1 = env.agent("a1")
    a1._first_read_settle, a1._first_read_wait_max = 1.0, 3.0
    assert a1.reconcile(view) is not None
    with pytest.raises(NotOwner):
        a1.check(kept[0], 0)
    clock[0] += 1.0
    result = a1.reconcile(view)
    assert result is not None and env.conductor.of("owned") == []
    [first, *_] = env.conductor.of("claim_share")
    assert first["held"] and first["read"]
    a1.check(kept[0], 0)  # held at the epoch the conductor records
    assert set(kept[:2]) <= a1.pinned() and a1.held_when_validated == len(kept)
    outside = set(kept) - ring_share(["a1", "a2"], free + kept, "a1")
    assert outside and [c for c in env.conductor.of("share") if c.get("outside")]
    recorded = {o.node_uuid for o in ownership.owned_by(env.db, "a1")}
    assert set(a1.held()) == recorded >= set(kept[:2])


@BY_SHARE
def test_a_restart_within_the_ttl_reads_its_held_set_at_once(
    env: Fleet, clock: list[float]
) -> None:
    """A process whose first join replaced an earlier one's entry in the
    group (a restart within the TTL) may hold nodes with work in flight: it
    reads them with ``owned_nodes`` on its first pass, and acts on them
    while its first read waits for the view to settle."""
    add_nodes(env.db, 20)
    kept = add_nodes(env.db, 5, owner="a1", prefix="kept")
    view = env.live({"a1": [], "a2": []})
    a1 = env.agent("a1")
    env.memberships["a1"].replaced_earlier_process = True
    a1._first_read_settle, a1._first_read_wait_max = 1.0, 3.0
    assert a1.reconcile(view) is not None
    assert env.conductor.of("owned") == ["a1"] and env.conductor.of("claim_share") == []
    a1.check(kept[0], 0)
    clock[0] += 1.0
    assert a1.reconcile(view) is not None
    assert env.conductor.of("owned") == ["a1"]
    assert not any(call["held"] for call in env.conductor.of("claim_share"))


@BY_SHARE
def test_a_conductor_older_than_1_28_is_asked_for_the_held_set_after_the_first_read(
    env: Fleet, clock: list[float]
) -> None:
    """A conductor whose claim does not say what the agent held (older than
    1.28): ``owned_nodes`` follows the first read in the same pass, and the
    nodes the claim took stay held."""
    free = add_nodes(env.db, 30)
    kept = add_nodes(env.db, 4, owner="a1", prefix="kept")
    view = env.live({"a1": []})
    env.conductor.reads_held = False
    a1, result = _first_pass(env, "a1", view, clock)
    assert result is not None and env.conductor.of("owned") == ["a1"]
    assert set(a1.held()) == set(free) | set(kept)
    a1.check(kept[0], 0)


@BY_SHARE
def test_the_owner_read_leaves_out_the_share_read(env: Fleet) -> None:
    """A restarted agent owns its share and some nodes outside it: its first
    read reads each of them once."""
    uuids = add_nodes(env.db, 60, owner="a1")
    view = env.live({"a1": [], "a2": []})
    a1 = env.agent("a1")
    share = ring_share(["a1", "a2"], uuids, "a1")
    assert 0 < len(share) < len(uuids)
    assert a1.refresh_inventory(view=view) == len(uuids)  # the share, then the rest
    owner_reads = [c for c in env.conductor.of("share") if c.get("ring") is None]
    assert owner_reads and all(c.get("outside") for c in owner_reads)
    assert a1.desired(view) == share and set(a1.held()) == set(uuids)


def test_a_pass_is_settled_only_when_none_of_its_share_waits_elsewhere(env: Fleet) -> None:
    """Converged with a node of its share pinned to a peer is not settled:
    the agent still waits for that pin to clear (it must not slow down)."""
    _uuids, a1, a2, view = _a2_joins_a1(env)
    pinned = sorted(a2.desired(view))[0]
    pin(env.db, [pinned], "a1")
    a1.revalidate()
    out = a1.reconcile(view)  # releases all but the pinned node
    assert out is not None and out.converged and out.settled
    a2.refresh_inventory()
    a2.reconcile(view)
    a2.refresh_inventory()
    waiting = a2.reconcile(view)
    assert waiting is not None and waiting.converged and not waiting.settled

    # The instance is gone: the node is a2's to take, and then a2 is settled.
    with env.db.transaction() as session:
        session.execute(
            update(NodeModel).where(NodeModel.uuid == pinned).values(instance_uuid=None)
        )
    a1.revalidate()
    env.settle()
    a2.refresh_inventory()
    done = a2.reconcile(view)
    assert done is not None and done.settled and pinned in a2.held()


def test_a_quiet_fleets_change_read_is_one_call(env: Fleet) -> None:
    """The conductor says nothing of the fleet changed since: the agent's
    other reads of the pass (its own nodes outside its share) are skipped."""
    if not env.conductor.by_share:
        pytest.skip("whole-fleet reads are one call anyway")
    uuids = add_nodes(env.db, 20)
    env.live({"a1": [], "a2": []})
    a1 = env.agent("a1")
    env.settle()
    age_nodes(env.db, uuids)  # the claims are long past
    env.conductor.calls.clear()
    assert a1.refresh_inventory(deep=False) == 0
    assert len(env.conductor.of("share")) == 1

    # A change anywhere: every read of the pass, as before (the owner read
    # due: a hint came).
    other = add_nodes(env.db, 1)
    env.conductor.calls.clear()
    a1.expect_owner_changes()
    a1.refresh_inventory(deep=False)
    assert len(env.conductor.of("share")) == 2

    # A conductor that does not say so (older): every read, as before.
    age_nodes(env.db, uuids + other)
    env.conductor.calls.clear()
    real = env.conductor.endpoint.list_node_uuids

    def older(*args: Any, **kwargs: Any) -> dict[str, Any]:
        reply = real(*args, **kwargs)
        reply.pop("unchanged", None)
        return reply

    env.conductor.endpoint.list_node_uuids = older  # type: ignore[method-assign]
    a1.expect_owner_changes()
    a1.refresh_inventory(deep=False)
    assert len(env.conductor.of("share")) == 2


def _owner_reads(env: Fleet) -> list[dict[str, Any]]:
    return [c for c in env.conductor.of("share") if c.get("outside") is not None]


@BY_SHARE
def test_a_pass_reads_its_own_nodes_outside_its_share_only_when_due(
    env: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nodes come to an agent outside its share only by a move or a
    hand-over, which a conductor hints at: passes in between leave that read
    out, and the read that comes misses nothing that changed meanwhile."""
    clock = [time.monotonic()]
    monkeypatch.setattr(inventory_reads.time, "monotonic", lambda: clock[0])
    nodes = add_nodes(env.db, 60)
    view = env.live({"a1": [], "a2": []})
    a1 = env.agent("a1")
    assert a1.refresh_inventory(view=view) > 0
    assert len(_owner_reads(env)) == 1  # the first read has it
    outside = sorted(set(nodes) - ring_share(["a1", "a2"], nodes, "a1"))[0]
    env.conductor.calls.clear()
    a1.refresh_inventory(deep=False, view=view)
    assert _owner_reads(env) == []  # a pass within the minute: left out
    # A node moved to a1 without a hint, then passes that leave the read out.
    ownership.claim_nodes(env.db, "a1", [outside], live_members={"a1", "a2"}, rehome_grace=0.0)
    time.sleep(0.6)  # past the passes' overlap: their change reads start after the move
    for _ in range(2):
        clock[0] += 1.0
        a1.refresh_inventory(deep=False, view=view)
    assert _owner_reads(env) == [] and outside not in a1.held()
    # The hint: the next pass reads back to the last owner read.
    a1.expect_owner_changes()
    a1.refresh_inventory(deep=False, view=view)
    assert len(_owner_reads(env)) == 1 and outside in a1.held()
    # No hint for a minute: due again all the same.
    env.conductor.calls.clear()
    clock[0] += 61.0
    a1.refresh_inventory(deep=False, view=view)
    assert len(_owner_reads(env)) == 1
