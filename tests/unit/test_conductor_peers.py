# SPDX-License-Identifier: Apache-2.0
"""Conductors are peers: the carrier of each record, adoption and hand-back."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conductor.common.instance_states import Event
from conductor.common.list_filters import ListOrder
from conductor.common.objects import TaskState, VmState
from conductor.db import carriage, instance_listing, instances
from conductor.db.engine import Database
from conductor.peers import SETTLE_S, ConductorPeers
from conductor.validation import validate_build_request
from hashring.view import Member, MembershipView, State
from tests.dbutil import add_nodes, migrated, pin


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    yield database
    database.dispose()


def _build(db: Database, carrier: str | None, count: int = 1) -> list[str]:
    db.carrier = carrier
    stored, _ = instances.create_instances(
        db, validate_build_request({"flavor": "small", "count": count})
    )
    return [i.uuid for i in stored]


@dataclass
class Membership:
    """What :class:`ConductorPeers` reads of its membership of the conductors' group."""

    member_id: str
    members: list[str]
    state: State = State.CONNECTED
    started: bool = False
    left: bool = False

    @property
    def view(self) -> MembershipView:
        return MembershipView(
            members={m: Member(member_id=m, ring_version=1, weight=1.0) for m in self.members},
            ring_version=1,
            excluded={},
        )

    def start(self) -> None:
        self.started = True

    def stop(self, leave: bool = True) -> None:
        self.left = leave


@dataclass
class Peer:
    peers: ConductorPeers
    membership: Membership
    redriven: list[str] = field(default_factory=list)
    repowered: list[carriage.PowerRequest] = field(default_factory=list)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _peer(db: Database, me: str, members: Sequence[str], clock: Clock) -> Peer:
    membership = Membership(me, list(members))
    redriven: list[str] = []
    repowered: list[carriage.PowerRequest] = []
    peers = ConductorPeers(
        db,
        membership,  # type: ignore[arg-type]
        redrive=redriven.extend,
        repower=repowered.extend,
        clock=clock,
    )
    return Peer(peers, membership, redriven, repowered)


# -- the carrier of each record --------------------------------------------------------------


def test_a_stored_build_is_carried_by_the_conductor_that_stored_it(db: Database) -> None:
    [uuid] = _build(db, "cond-a")
    assert carriage.carried_by(db, "cond-a") == [uuid]
    assert carriage.carried_by(db, "cond-b") == []


def test_the_conductor_that_puts_work_in_flight_carries_it(db: Database) -> None:
    """A delete or an action applied by another conductor moves the carrier
    to it (its queue holds the work now); an event that ends work does not."""
    [node] = add_nodes(db, 1, owner="agent-1")
    [uuid] = pin(db, [node], "agent-1")
    assert carriage.carried_by(db, "cond-a") == []  # active: nothing in flight
    db.carrier = "cond-b"
    assert instances.set_state(db, uuid, Event.REBOOT)
    assert carriage.carried_by(db, "cond-b") == [uuid]
    db.carrier = "cond-c"
    assert instances.set_state(db, uuid, Event.POWERED_ON, task_state=TaskState.REBOOTING)
    assert carriage.carried_by(db, "cond-c") == []  # ended: carried by nobody new
    assert instances.set_state(db, uuid, Event.DELETE)
    assert carriage.carried_by(db, "cond-c") == [uuid]


def test_an_action_keeps_its_request_id_when_issued_again_and_a_new_verb_gets_a_new_one(
    db: Database,
) -> None:
    [node] = add_nodes(db, 1, owner="agent-1")
    [uuid] = pin(db, [node], "agent-1")
    assert carriage.action_request_id(db, uuid) is None  # nothing in flight
    assert instances.set_state(db, uuid, Event.REBOOT)
    first = carriage.action_request_id(db, uuid)
    assert first is not None
    # Issued again while in flight (to re-route it): the same request.
    assert instances.set_state(db, uuid, Event.REBOOT)
    assert carriage.action_request_id(db, uuid) == first
    # A hard reboot takes the soft one over: another verb, another id.
    assert instances.set_state(db, uuid, Event.REBOOT_HARD)
    second = carriage.action_request_id(db, uuid)
    assert second not in (None, first)
    assert instances.set_state(db, uuid, Event.POWERED_ON, task_state=TaskState.REBOOTING_HARD)
    assert carriage.action_request_id(db, uuid) is None
    assert instances.set_state(db, uuid, Event.REBOOT)
    assert carriage.action_request_id(db, uuid) not in (None, first, second)


def test_adoption_is_a_compare_and_swap_on_the_carrier_read(db: Database) -> None:
    uuids = _build(db, "cond-dead", count=3)
    read = carriage.orphaned(db, live={"cond-a", "cond-b"})
    assert read == dict.fromkeys(uuids, "cond-dead")
    assert carriage.adopt(db, read, "cond-a") == sorted(uuids)
    # A second adopter with the same (now stale) read wins nothing.
    assert carriage.adopt(db, read, "cond-b") == []
    assert carriage.carried_by(db, "cond-a") == sorted(uuids)
    assert carriage.orphaned(db, live={"cond-a"}) == {}


def test_a_stopping_conductor_hands_back_its_records_and_power_requests(db: Database) -> None:
    [uuid] = _build(db, "cond-a")
    [node] = add_nodes(db, 1, owner="agent-1")
    request = carriage.store_power_request(db, node, "power off")
    assert request.conductor == "cond-a"
    assert carriage.release(db, "cond-a") == 2
    assert carriage.orphaned(db, live={"cond-a", "cond-b"}) == {uuid: None}
    assert carriage.orphaned_power_requests(db, live={"cond-a", "cond-b"}) == {node: None}
    assert carriage.carriers(db) == {None: 2}


def test_a_power_request_replaced_by_a_later_one_is_not_ended_by_the_first(db: Database) -> None:
    [node] = add_nodes(db, 1, owner="agent-1")
    db.carrier = "cond-a"
    first = carriage.store_power_request(db, node, "power off")
    second = carriage.store_power_request(db, node, "power on")
    carriage.end_power_request(db, first)
    assert carriage.power_requests_of(db, [node]) == [second]
    carriage.end_power_request(db, second)
    assert carriage.power_requests_of(db, [node]) == []


# -- peers -----------------------------------------------------------------------------------


def test_a_gone_conductors_records_are_split_by_ring_between_the_survivors_once_settled(
    db: Database,
) -> None:
    uuids = _build(db, "cond-dead", count=40)
    clock = Clock()
    a = _peer(db, "cond-a", ["cond-a", "cond-b"], clock)
    b = _peer(db, "cond-b", ["cond-a", "cond-b"], clock)
    # Just seen gone: not yet (a conductor that just joined is not in every view).
    assert a.peers.adopt() == 0 and b.peers.adopt() == 0
    clock.now += SETTLE_S
    adopted = a.peers.adopt() + b.peers.adopt()
    assert adopted == 40
    assert sorted(a.redriven + b.redriven) == sorted(uuids)
    assert a.redriven and b.redriven  # split, not all on one
    assert set(a.redriven).isdisjoint(b.redriven)
    assert sorted(carriage.carried_by(db, "cond-a")) == sorted(a.redriven)


def test_records_carried_by_nobody_are_adopted_at_once_and_live_carriers_never(
    db: Database,
) -> None:
    released = _build(db, None, count=5)
    peers_own = _build(db, "cond-b", count=5)  # a live peer's own work
    members = ["cond-a", "cond-b"]
    a = _peer(db, "cond-a", members, Clock())
    b = _peer(db, "cond-b", members, Clock())
    assert a.peers.adopt() + b.peers.adopt() == 5  # no settling for records nobody carries
    assert sorted(a.redriven + b.redriven) == sorted(released)
    assert carriage.orphaned(db, live=set(members)) == {}
    assert set(peers_own) <= set(carriage.carried_by(db, "cond-b"))
    assert not set(peers_own) & set(carriage.carried_by(db, "cond-a"))


def test_a_conductor_that_cannot_tell_who_is_alive_adopts_nothing(db: Database) -> None:
    _build(db, None, count=3)
    a = _peer(db, "cond-a", ["cond-a"], Clock())
    a.membership.state = State.SUSPENDED
    assert a.peers.live() is None
    assert a.peers.adopt() == 0
    a.membership.state = State.CONNECTED
    assert a.peers.adopt() == 3


def test_a_restarted_conductor_resumes_what_it_carries_and_only_that(db: Database) -> None:
    own = _build(db, "cond-a", count=2)
    _build(db, "cond-b", count=2)
    a = _peer(db, "cond-a", ["cond-a", "cond-b"], Clock())
    assert a.peers.resume_own() == 2
    assert sorted(a.redriven) == sorted(own)


def test_adopted_power_requests_are_routed_again_with_their_request_id(db: Database) -> None:
    [node] = add_nodes(db, 1, owner="agent-1")
    db.carrier = "cond-dead"
    request = carriage.store_power_request(db, node, "rebooting")
    clock = Clock()
    a = _peer(db, "cond-a", ["cond-a"], clock)
    a.peers.adopt()
    clock.now += SETTLE_S
    assert a.peers.adopt() == 1
    assert a.repowered == [request._replace(conductor="cond-a")]


def test_stop_hands_the_records_back_then_leaves(db: Database) -> None:
    _build(db, "cond-a", count=2)
    a = _peer(db, "cond-a", ["cond-a"], Clock())
    a.peers.stop()
    assert a.membership.left
    assert carriage.carriers(db) == {None: 2}
    assert {i.vm_state for i in instance_listing.list_page(db, ListOrder())} == {VmState.BUILDING}
