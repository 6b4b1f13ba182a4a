# SPDX-License-Identifier: Apache-2.0
"""Ownership behaviour, run on SQLite (unit) and PostgreSQL and MariaDB (functional).

Each function takes a migrated :class:`Database` and asserts one rule of
conductor.db.ownership; the two test modules parametrize over them.
"""

from __future__ import annotations

import datetime
import multiprocessing
import random
from collections import Counter
from typing import Any

from sqlalchemy import func, select

from conductor.db import agents, ownership, share_claims, value_lists
from conductor.db import nodes as node_rows
from conductor.db.engine import Database
from conductor.db.models import InstanceModel, NodeModel, utcnow
from hashring.ring import POSITION_MAX, POSITION_MIN, Ring, node_position
from tests.dbutil import add_nodes, pin

GRACE = 60.0


def claim_free_nodes_bumps_epochs(db: Database) -> None:
    nodes = add_nodes(db, 5)
    out = ownership.claim_nodes(db, "a1", nodes, live_members={"a1"}, rehome_grace=GRACE)
    assert [o.node_uuid for o in out.granted] == nodes
    assert {o.epoch for o in out.granted} == {1}
    assert not out.refused and not out.missing and not out.rehomed
    # Claiming again what it owns: granted, same epoch (re-validation).
    again = ownership.claim_nodes(db, "a1", nodes, live_members={"a1"}, rehome_grace=GRACE)
    assert {o.epoch for o in again.granted} == {1}


def live_owner_is_never_robbed(db: Database) -> None:
    nodes = add_nodes(db, 3)
    ownership.claim_nodes(db, "a1", nodes, live_members={"a1", "a2"}, rehome_grace=GRACE)
    out = ownership.claim_nodes(db, "a2", nodes, live_members={"a1", "a2"}, rehome_grace=GRACE)
    assert not out.granted
    assert out.refused == dict.fromkeys(nodes, "a1")
    assert {o.epoch for o in ownership.ownership_of(db, nodes).values()} == {1}


def dead_owner_unpinned_nodes_taken_at_once(db: Database) -> None:
    nodes = add_nodes(db, 4)
    ownership.claim_nodes(db, "a1", nodes, live_members={"a1"}, rehome_grace=GRACE)
    out = ownership.claim_nodes(db, "a2", nodes, live_members={"a2"}, rehome_grace=GRACE)
    assert {o.owner for o in out.granted} == {"a2"}
    assert {o.epoch for o in out.granted} == {2}


def pinned_nodes_wait_for_rehome_grace(db: Database) -> None:
    nodes = add_nodes(db, 4)
    ownership.claim_nodes(db, "a1", nodes, live_members={"a1"}, rehome_grace=GRACE)
    instances = pin(db, nodes[:2], "a1")
    left_at = utcnow()
    agents.record_membership(db, {"a1": 1.0}, now=left_at - datetime.timedelta(seconds=5))
    agents.record_membership(db, {"a2": 1.0}, now=left_at)  # a1 gone since left_at
    early = ownership.claim_nodes(
        db, "a2", nodes, live_members={"a2"}, rehome_grace=GRACE, now=left_at
    )
    assert sorted(o.node_uuid for o in early.granted) == sorted(nodes[2:])
    assert set(early.refused) == set(nodes[:2])
    late = ownership.claim_nodes(
        db,
        "a2",
        nodes,
        live_members={"a2"},
        rehome_grace=GRACE,
        now=left_at + datetime.timedelta(seconds=GRACE + 1),
    )
    assert sorted(late.rehomed) == sorted(nodes[:2])
    assert {o.owner for o in late.granted} == {"a2"}
    with db.transaction() as session:
        hosts = {
            row.uuid: row.host
            for row in session.query(InstanceModel).filter(InstanceModel.uuid.in_(instances))
        }
    assert hosts == dict.fromkeys(instances, "a2")
    epochs = ownership.ownership_of(db, nodes[:2])
    assert {o.epoch for o in epochs.values()} == {2}
    assert all(o.pinned for o in epochs.values())


def pinned_nodes_are_rehomed_to_their_ring_owner_only(db: Database) -> None:
    """Whoever asks first does not get a departed agent's pins: the ring does
    (issue 13: pins re-homed by a claim storm stayed off their owner for good)."""
    nodes = add_nodes(db, 8)
    ownership.claim_nodes(db, "a1", nodes, live_members={"a1"}, rehome_grace=GRACE)
    pin(db, nodes, "a1")
    left_at = utcnow()
    agents.record_membership(db, {"a1": 1.0}, now=left_at - datetime.timedelta(seconds=5))
    agents.record_membership(db, {"a2": 1.0, "a3": 1.0}, now=left_at)
    ring = {n: ("a2" if i % 2 else "a3") for i, n in enumerate(nodes)}
    asked: list[tuple[str, str]] = []

    def ring_owners(pairs: Any) -> list[str | None]:
        asked.extend(pairs)
        return [ring[node] for node, _group in pairs]

    late = left_at + datetime.timedelta(seconds=GRACE + 1)
    out = ownership.claim_nodes(
        db,
        "a2",
        nodes,
        live_members={"a2", "a3"},
        rehome_grace=GRACE,
        now=late,
        rehome_owners=ring_owners,
    )
    assert sorted(out.rehomed) == sorted(n for n in nodes if ring[n] == "a2")
    assert set(out.refused) == {n for n in nodes if ring[n] == "a3"}
    assert sorted(node for node, _group in asked) == sorted(nodes)
    out = ownership.claim_nodes(
        db,
        "a3",
        nodes,
        live_members={"a2", "a3"},
        rehome_grace=GRACE,
        now=late,
        rehome_owners=ring_owners,
    )
    assert sorted(out.rehomed) == sorted(n for n in nodes if ring[n] == "a3")
    final = ownership.ownership_of(db, nodes)
    assert {n: o.owner for n, o in final.items()} == ring
    # No live agent serves the group: anyone may take it.
    more = add_nodes(db, 2)
    ownership.claim_nodes(db, "a1", more, live_members={"a1"}, rehome_grace=GRACE)
    pin(db, more, "a1")
    out = ownership.claim_nodes(
        db,
        "a2",
        more,
        live_members={"a2", "a3"},
        rehome_grace=GRACE,
        now=late,
        rehome_owners=lambda pairs: [None] * len(pairs),
    )
    assert sorted(out.rehomed) == sorted(more)


def owner_never_recorded_counts_as_gone(db: Database) -> None:
    nodes = add_nodes(db, 2, owner="ghost")
    pin(db, nodes, "ghost")
    then = utcnow()
    agents.record_membership(db, {"a2": 1.0}, now=then)
    out = ownership.claim_nodes(
        db,
        "a2",
        nodes,
        live_members={"a2"},
        rehome_grace=GRACE,
        now=then + datetime.timedelta(seconds=GRACE + 1),
    )
    assert sorted(out.rehomed) == sorted(nodes)


def returning_owner_keeps_grace_clock_reset(db: Database) -> None:
    nodes = add_nodes(db, 1)
    ownership.claim_nodes(db, "a1", nodes, live_members={"a1"}, rehome_grace=GRACE)
    pin(db, nodes, "a1")
    t0 = utcnow()
    agents.record_membership(db, {"a2": 1.0}, now=t0)  # a1 gone
    agents.record_membership(db, {"a1": 1.0, "a2": 1.0}, now=t0)  # a1 back
    out = ownership.claim_nodes(
        db,
        "a2",
        nodes,
        live_members={"a2"},  # a stale view that misses a1
        rehome_grace=GRACE,
        now=t0 + datetime.timedelta(seconds=GRACE * 2),
    )
    assert out.refused == {nodes[0]: "a1"}


def restart_hold_keeps_every_node_until_its_deadline(db: Database) -> None:
    nodes = add_nodes(db, 4)
    ownership.claim_nodes(db, "a1", nodes, live_members={"a1", "a2"}, rehome_grace=GRACE)
    pin(db, nodes[:1], "a1")
    t0 = utcnow()
    agents.record_membership(db, {"a1": 1.0, "a2": 1.0}, now=t0)
    until = agents.hold_for_restart(db, "a1", 30.0, now=t0)  # a1 stops for a restart
    agents.record_membership(db, {"a2": 1.0}, now=t0)  # and leaves the group
    # Within the hold nothing moves, pinned (even past rehome_grace) or not.
    for later in (1.0, 20.0, 29.0):
        out = ownership.claim_nodes(
            db,
            "a2",
            nodes,
            live_members={"a2"},
            rehome_grace=1.0,
            now=t0 + datetime.timedelta(seconds=later),
        )
        assert not out.granted and out.refused == dict.fromkeys(nodes, "a1")
        assert out.restarting == {"a1": (until - t0).total_seconds() - later}
    assert {o.epoch for o in ownership.ownership_of(db, nodes).values()} == {1}
    # Past the deadline, a longer absence behaves as without the hold.
    out = ownership.claim_nodes(
        db,
        "a2",
        nodes,
        live_members={"a2"},
        rehome_grace=1.0,
        now=t0 + datetime.timedelta(seconds=31),
    )
    assert {o.owner for o in out.granted} == {"a2"} and out.rehomed == nodes[:1]
    assert not out.restarting


def returning_agent_ends_its_restart_hold(db: Database) -> None:
    nodes = add_nodes(db, 4)
    ownership.claim_nodes(db, "a1", nodes, live_members={"a1"}, rehome_grace=GRACE)
    t0 = utcnow()
    agents.record_membership(db, {"a1": 1.0, "a2": 1.0}, now=t0)
    agents.hold_for_restart(db, "a1", 600.0, now=t0)
    agents.record_membership(db, {"a1": 1.0, "a2": 1.0}, now=t0)  # still there: hold kept
    agents.record_membership(db, {"a2": 1.0}, now=t0)  # gone ...
    held = ownership.claim_nodes(db, "a2", nodes[:1], live_members={"a2"}, rehome_grace=GRACE)
    assert held.refused == {nodes[0]: "a1"} and set(held.restarting) == {"a1"}
    agents.record_membership(db, {"a1": 1.0, "a2": 1.0}, now=t0)  # ... and back: hold served
    # If a1 now dies, its nodes move as usual (here: a view that misses it).
    out = ownership.claim_nodes(db, "a2", nodes[:2], live_members={"a2"}, rehome_grace=GRACE)
    assert {o.owner for o in out.granted} == {"a2"} and not out.restarting
    # A restart so quick that no conductor saw a1 leave: resume_work ends the hold.
    agents.hold_for_restart(db, "a1", 600.0, now=t0)
    assert ownership.claim_nodes(
        db, "a2", nodes[2:], live_members={"a2"}, rehome_grace=GRACE
    ).refused == dict.fromkeys(nodes[2:], "a1")
    agents.end_restart_hold(db, "a1")
    out = ownership.claim_nodes(db, "a2", nodes[2:], live_members={"a2"}, rehome_grace=GRACE)
    assert {o.owner for o in out.granted} == {"a2"}


def release_needs_the_current_epoch(db: Database) -> None:
    nodes = add_nodes(db, 3)
    ownership.claim_nodes(db, "a1", nodes, live_members={"a1"}, rehome_grace=GRACE)
    stale = ownership.release_nodes(db, "a1", {nodes[0]: 0})
    assert not stale.done
    assert stale.refused[nodes[0]] is not None
    assert stale.refused[nodes[0]].epoch == 1  # type: ignore[union-attr]
    other = ownership.release_nodes(db, "a2", {nodes[1]: 1})
    assert not other.done
    good = ownership.release_nodes(db, "a1", {nodes[1]: 1, nodes[2]: 1})
    assert good.done == {nodes[1]: 2, nodes[2]: 2}
    current = ownership.ownership_of(db, nodes)
    assert current[nodes[1]].owner is None and current[nodes[1]].epoch == 2


def pinned_node_cannot_be_released_only_transferred(db: Database) -> None:
    nodes = add_nodes(db, 1)
    ownership.claim_nodes(db, "a1", nodes, live_members={"a1"}, rehome_grace=GRACE)
    [instance] = pin(db, nodes, "a1")
    refused = ownership.release_nodes(db, "a1", {nodes[0]: 1})
    assert not refused.done
    moved = ownership.transfer_nodes(db, "a1", [ownership.Transfer(nodes[0], 1, "a3")])
    assert moved.done == {nodes[0]: 2}
    assert ownership.ownership_of(db, nodes)[nodes[0]].owner == "a3"
    with db.transaction() as session:
        assert session.query(InstanceModel).filter_by(uuid=instance).one().host == "a3"
    assert [o.node_uuid for o in ownership.owned_by(db, "a3")] == nodes


def missing_nodes_are_reported(db: Database) -> None:
    out = ownership.claim_nodes(
        db, "a1", ["00000000-0000-0000-0000-000000000000"], live_members={"a1"}, rehome_grace=1
    )
    assert out.missing == ["00000000-0000-0000-0000-000000000000"]


# Equal under MySQL's and MariaDB's default collations (case-insensitive,
# trailing spaces ignored), three agents everywhere else.
TWINS = ("Agent-1", "agent-1", "Agent-1 ")


def agents_differing_in_case_or_trailing_space_never_share_a_node(db: Database) -> None:
    node = add_nodes(db, 1)[0]
    first = ownership.claim_nodes(db, TWINS[0], [node], live_members=TWINS, rehome_grace=GRACE)
    assert [(o.owner, o.epoch) for o in first.granted] == [(TWINS[0], 1)]
    for twin in TWINS[1:]:
        # Neither its claim, nor its fence, release or transfer touches the node.
        out = ownership.claim_nodes(db, twin, [node], live_members=TWINS, rehome_grace=GRACE)
        assert out.granted == [] and out.refused == {node: TWINS[0]}
        assert ownership.owned_by(db, twin) == []
        with db.read() as connection:
            fenced = select(func.count()).where(
                NodeModel.uuid == node, ownership.holds(ownership.Fence(twin, 1))
            )
            assert connection.execute(fenced).scalar_one() == 0
        assert ownership.release_nodes(db, twin, {node: 1}).done == {}
        moved = ownership.transfer_nodes(db, twin, [ownership.Transfer(node, 1, twin)])
        assert moved.done == {}
    held = ownership.ownership_of(db, [node])[node]
    assert (held.owner, held.epoch) == (TWINS[0], 1)
    # A departed twin's node is free for others although its live twin is a member.
    orphan = add_nodes(db, 1, owner="agent-1", prefix="orphan")[0]
    out = ownership.claim_nodes(
        db, "a2", [orphan], live_members={TWINS[0], "a2"}, rehome_grace=GRACE
    )
    assert [(o.owner, o.epoch) for o in out.granted] == [("a2", 1)]


def agent_records_keep_hosts_weights_and_instants_exact(db: Database) -> None:
    now = utcnow().replace(microsecond=123456)
    weights = dict(zip(TWINS, (1.0, 0.1, 2.5), strict=True))
    agents.record_membership(db, weights, now=now)
    records = agents.list_agents(db)
    assert {r.host: r.weight for r in records} == weights
    assert {r.first_seen for r in records} == {now}


def _race_worker(url: str, agent: str, nodes: list[str], barrier: Any, results: Any) -> None:
    db = Database(url)
    order = nodes[:]
    random.Random(agent).shuffle(order)  # each racer in its own order
    won = []
    refused = 0
    barrier.wait()  # all three start claiming at the same moment
    for start in range(0, len(order), 50):
        out = ownership.claim_nodes(
            db,
            agent,
            order[start : start + 50],
            live_members={"r1", "r2", "r3"},
            rehome_grace=GRACE,
        )
        won.extend((o.node_uuid, o.epoch) for o in out.granted)
        refused += len(out.refused)
    db.dispose()
    results.put((agent, (won, refused)))


def _race(worker: Any, url: str, nodes: list[str]) -> dict[str, Any]:
    """Run ``worker(url, agent, nodes, barrier, results)`` in three processes
    (agents r1, r2, r3) started at once; what each put in ``results``."""
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(3), ctx.Queue()
    racers = [
        ctx.Process(target=worker, args=(url, agent, nodes, barrier, results))
        for agent in ("r1", "r2", "r3")
    ]
    for racer in racers:
        racer.start()
    collected = dict(results.get(timeout=120) for _ in racers)
    for racer in racers:
        racer.join(30)
        assert racer.exitcode == 0
    return collected


def racing_agents_never_both_win(db: Database) -> None:
    """Three processes claim the same 600 nodes at once, in different orders."""
    nodes = add_nodes(db, 600)
    collected = _race(_race_worker, db.url, nodes)
    winners: dict[str, set[str]] = {}
    for agent, (won, _refused) in collected.items():
        for node, epoch in won:
            assert epoch == 1  # one claim ever succeeded on each node
            winners.setdefault(node, set()).add(agent)
    assert set(winners) == set(nodes)
    assert all(len(agents_) == 1 for agents_ in winners.values())
    # Every node was asked for three times and granted once.
    assert sum(refused for _won, refused in collected.values()) == 2 * len(nodes)
    final = ownership.ownership_of(db, nodes)
    assert Counter(o.epoch for o in final.values()) == {1: 600}
    assert all(final[n].owner in winners[n] for n in nodes)


#: The whole circle as one arc.
EVERYWHERE = [(POSITION_MIN, POSITION_MAX)]


def claim_by_arcs_takes_only_unpinned_nodes_without_a_live_owner(db: Database) -> None:
    """claim_share's statement: the free nodes and a departed owner's unpinned
    ones, each with a new epoch; never a live owner's, a pinned one (re-homed
    by uuid only), or one of an owner stopped for a restart."""
    free = add_nodes(db, 6)
    live = add_nodes(db, 3, owner="a2")
    gone = add_nodes(db, 3, owner="a3")
    held = add_nodes(db, 2, owner="a4")
    hosted = add_nodes(db, 2, owner="a3")
    pin(db, hosted, "a3")
    t0 = utcnow()
    agents.record_membership(db, {"a1": 1.0, "a2": 1.0, "a3": 1.0, "a4": 1.0}, now=t0)
    agents.hold_for_restart(db, "a4", 30.0, now=t0)
    agents.record_membership(db, {"a1": 1.0, "a2": 1.0}, now=t0)
    before = ownership.ownership_of(db, free + live + gone + held + hosted)
    out = share_claims.claim_arcs(
        db,
        "a1",
        EVERYWHERE,
        live_members={"a1", "a2"},
        limit=100,
        now=t0 + datetime.timedelta(seconds=5),
    )
    assert sorted(out.uuids) == sorted(free + gone) and not out.more
    after = ownership.ownership_of(db, free + live + gone + held + hosted)
    assert dict(zip(out.uuids, out.epochs, strict=True)) == {u: after[u].epoch for u in out.uuids}
    assert all(
        after[u].epoch == before[u].epoch + 1 and after[u].owner == "a1" for u in free + gone
    )
    assert all(after[u] == before[u] for u in live + held + hosted)
    with db.read() as connection:
        stored = dict(connection.execute(select(NodeModel.uuid, NodeModel.node_group)).all())
    assert out.groups == [stored[u] for u in out.uuids] and out.changed_at is not None
    # Nothing left to take: a second call takes nothing and stamps nothing.
    again = share_claims.claim_arcs(db, "a1", EVERYWHERE, live_members={"a1", "a2"}, limit=100)
    assert again.uuids == [] and again.changed_at is None


def claim_by_arcs_keeps_to_the_arcs_groups_and_limit(db: Database) -> None:
    nodes = add_nodes(db, 40)
    ring = Ring({"a1": 1.0, "a2": 1.0}, version=1)
    arcs = ring.arcs("a1")
    mine = {n for n, o in zip(nodes, ring.assign(nodes), strict=True) if o == "a1"}
    assert 0 < len(mine) < len(nodes)
    first = share_claims.claim_arcs(db, "a1", arcs, live_members={"a1", "a2"}, limit=5)
    assert len(first.uuids) == 5 and first.more
    rest = share_claims.claim_arcs(db, "a1", arcs, live_members={"a1", "a2"}, limit=1000)
    assert set(first.uuids) | set(rest.uuids) == mine and not rest.more
    assert not set(first.uuids) & set(rest.uuids)
    assert all(any(a <= node_position(u) <= b for a, b in arcs) for u in first.uuids + rest.uuids)
    other = share_claims.claim_arcs(
        db, "a2", EVERYWHERE, live_members={"a1", "a2"}, limit=1000, groups=["rack9"]
    )
    assert other.uuids == []  # no node of that group
    left = share_claims.claim_arcs(
        db, "a2", EVERYWHERE, live_members={"a1", "a2"}, limit=1000, exclude_groups=["rack9"]
    )
    assert set(left.uuids) == set(nodes) - mine


def _arc_race_worker(url: str, agent: str, _nodes: list[str], barrier: Any, results: Any) -> None:
    db = Database(url)
    won: list[tuple[str, int]] = []
    barrier.wait()
    while True:
        out = share_claims.claim_arcs(
            db, agent, EVERYWHERE, live_members={"r1", "r2", "r3"}, limit=25
        )
        won.extend(zip(out.uuids, out.epochs, strict=True))
        if not out.uuids:
            break
    db.dispose()
    results.put((agent, won))


def racing_claims_by_arcs_never_both_win(db: Database) -> None:
    """Three processes claim the same arcs at once, 25 nodes a call."""
    nodes = add_nodes(db, 300)
    collected = _race(_arc_race_worker, db.url, nodes)
    won = [(node, epoch, agent) for agent, taken in collected.items() for node, epoch in taken]
    assert sorted(node for node, _e, _a in won) == sorted(nodes)  # each node once
    assert {epoch for _n, epoch, _a in won} == {1}
    final = ownership.ownership_of(db, nodes)
    assert all(final[node].owner == agent for node, _e, agent in won)


def value_lists_match_exactly_the_values_listed(db: Database) -> None:
    """The arrays PostgreSQL is sent a list as (elsewhere ``IN``) keep every
    value as it is: a comma, quote, backslash, brace, blank or ``NULL`` in one."""
    odd = ["a,b", 'q"uote', "back\\slash", "{brace}", "NULL", " blank ", "plain"]
    nodes = {owner: add_nodes(db, 1, owner=owner)[0] for owner in odd}
    dialect = db.engine.dialect
    owner = NodeModel.__table__.c.owner
    for listed in ([], ["plain"], odd[:3], odd, ["a", "b", "NULL "]):
        with db.read() as connection:
            found = connection.execute(
                select(NodeModel.uuid).where(value_lists.one_of(owner, listed, dialect))
            )
            left = connection.execute(
                select(NodeModel.uuid).where(value_lists.none_of(owner, listed, dialect))
            )
            assert set(found.scalars()) == {nodes[o] for o in odd if o in listed}, listed
            assert set(left.scalars()) == {nodes[o] for o in odd if o not in listed}, listed
    # A read by such a list: the group of each node that exists.
    asked = [*nodes.values(), "no-such-node"]
    assert node_rows.groups_of(db, asked) == dict.fromkeys(nodes.values(), "")


CASES = [
    claim_free_nodes_bumps_epochs,
    live_owner_is_never_robbed,
    dead_owner_unpinned_nodes_taken_at_once,
    pinned_nodes_wait_for_rehome_grace,
    pinned_nodes_are_rehomed_to_their_ring_owner_only,
    owner_never_recorded_counts_as_gone,
    returning_owner_keeps_grace_clock_reset,
    restart_hold_keeps_every_node_until_its_deadline,
    returning_agent_ends_its_restart_hold,
    release_needs_the_current_epoch,
    pinned_node_cannot_be_released_only_transferred,
    missing_nodes_are_reported,
    agents_differing_in_case_or_trailing_space_never_share_a_node,
    agent_records_keep_hosts_weights_and_instants_exact,
    racing_agents_never_both_win,
    claim_by_arcs_takes_only_unpinned_nodes_without_a_live_owner,
    claim_by_arcs_keeps_to_the_arcs_groups_and_limit,
    racing_claims_by_arcs_never_both_win,
    value_lists_match_exactly_the_values_listed,
]
