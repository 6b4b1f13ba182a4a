# SPDX-License-Identifier: Apache-2.0
"""The one way the conductor reaches a node's owner (:mod:`conductor.lifecycle.owner_calls`).

One reading of an owner's answer for every verb: these tests hold the
outcome of each refusal, the re-read on ``NotOwner``, the guard against a
second call for the same work, and the lanes' bounded stop.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import oslo_messaging as messaging
import pytest
from oslo_messaging._drivers import common as rpc_common
from sqlalchemy import update

from conductor.common import exception as errors
from conductor.common import rpc
from conductor.common.objects import Node
from conductor.db import nodes
from conductor.db.engine import Database
from conductor.db.models import NodeModel
from conductor.db.ownership import Fence
from conductor.lifecycle.outages import Outages
from conductor.lifecycle.owner_calls import (
    CallPool,
    Outcome,
    OwnerCalls,
    outcome_of_error,
)
from tests.dbutil import add_nodes, migrated


@dataclass
class Fleet:
    live: set[str] = field(default_factory=lambda: {"agent-1", "agent-2"})

    def live_members(self) -> frozenset[str]:
        return frozenset(self.live)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    db = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    yield db
    db.dispose()


def _node(db: Database, owner: str = "agent-1") -> Node:
    [uuid] = add_nodes(db, 1, owner=owner)
    return nodes.get_node(db, uuid)


def _move(db: Database, uuid: str, owner: str, epoch: int) -> None:
    with db.transaction() as session:
        session.execute(
            update(NodeModel).where(NodeModel.uuid == uuid).values(owner=owner, owner_epoch=epoch)
        )


@pytest.mark.parametrize(
    ("name", "outcome"),
    [
        ("NotOwner", None),  # re-read and re-routed, never the caller's
        ("NodeNotBuildable", Outcome.REFUSED),  # the back end hosts another instance
        ("InvalidInput", Outcome.REFUSED),  # retrying cannot fix bad input
        ("NoSuchMethod", Outcome.REFUSED),  # an older agent: another owner may serve it
        ("UnsupportedVersion", Outcome.REFUSED),
        ("Conflict", Outcome.WAIT),  # busy with another verb
        ("ServiceUnavailable", Outcome.WAIT),  # stopping, or its back end is down
        ("ActionAbandoned", Outcome.WAIT),
        ("MessagingTimeout", Outcome.WAIT),  # not ours: transport trouble waits
        ("KeyError", Outcome.WAIT),  # an unexpected remote error waits
        ("malformed reply", Outcome.WAIT),
    ],
)
def test_each_refusal_has_one_outcome_for_every_verb(name: str, outcome: Outcome | None) -> None:
    assert outcome_of_error(name) is outcome


def test_an_owner_not_live_is_waited_for_without_a_call(db: Database) -> None:
    node = _node(db)
    calls: list[Fence] = []
    owners = OwnerCalls(db, Fleet(live={"agent-2"}))  # type: ignore[arg-type]
    reply = owners.call("Instance x", node, lambda fence, _n: calls.append(fence))
    assert calls == []
    assert reply.outcome is Outcome.WAIT and reply.error is None
    assert "agent-1 is not live" in reply.reason


def test_not_owner_re_reads_the_node_and_calls_the_new_owner(db: Database) -> None:
    node = _node(db)
    calls: list[Fence] = []

    def send(fence: Fence, _node: Node) -> str:
        calls.append(fence)
        if fence.owner == "agent-1":
            _move(db, node.uuid, "agent-2", 5)
            raise errors.NotOwner(node.uuid, "agent-2", 5)
        return "accepted"

    reply = OwnerCalls(db, Fleet()).call("Instance x", node, send)  # type: ignore[arg-type]
    assert calls == [Fence("agent-1", node.owner_epoch), Fence("agent-2", 5)]
    assert (reply.outcome, reply.answer, reply.fence) == (
        Outcome.ACCEPTED,
        "accepted",
        Fence("agent-2", 5),
    )


def test_a_node_that_no_longer_holds_the_work_is_moot(db: Database) -> None:
    node = _node(db)

    def send(_fence: Fence, _node: Node) -> None:
        raise errors.NotOwner(node.uuid, "agent-1", 9)

    owners = OwnerCalls(db, Fleet())  # type: ignore[arg-type]
    reply = owners.call("Instance x", node, send, holds=lambda read: False)
    assert reply.outcome is Outcome.MOOT
    # Without *holds*, the calls stop after a few re-reads: the work waits.
    reply = owners.call("Instance x", node, send)
    assert (reply.outcome, reply.reason) == (Outcome.WAIT, "its owner kept changing")


def test_refusals_are_read_the_same_way_as_exceptions(db: Database) -> None:
    node = _node(db)
    owners = OwnerCalls(db, Fleet())  # type: ignore[arg-type]
    for exc, outcome in [
        (errors.NodeNotBuildable(field="node_uuid", value="n", reason="hosts y"), Outcome.REFUSED),
        (errors.Conflict(field="node_uuid", value="n", reason="busy"), Outcome.WAIT),
        (messaging.MessagingTimeout("slow"), Outcome.WAIT),
        (messaging.RemoteError("NoSuchMethod", "build_instances"), Outcome.REFUSED),
        (OSError("connection reset"), Outcome.WAIT),
    ]:

        def send(_fence: Fence, _node: Node, exc: Exception = exc) -> None:
            raise exc

        reply = owners.call("Instance x", node, send)
        assert reply.outcome is outcome, exc
        assert reply.error is not None and reply.reason
    reply = owners.call(
        "Instance x",
        node,
        lambda *_: (_ for _ in ()).throw(messaging.RemoteError("NoSuchMethod", "x")),
    )
    assert reply.untouched
    reply = owners.call("Instance x", node, lambda *_: (_ for _ in ()).throw(OSError("x")))
    assert not reply.untouched
    # The reason of a timeout names the owner; NodeNotBuildable's is its own, without traceback.
    reply = owners.call(
        "Instance x", node, lambda *_: (_ for _ in ()).throw(messaging.MessagingTimeout("t"))
    )
    assert "agent-1" in reply.reason


def test_a_second_call_for_the_same_work_and_epoch_is_moot_while_one_runs(db: Database) -> None:
    node = _node(db)
    owners = OwnerCalls(db, Fleet())  # type: ignore[arg-type]
    inside, release = threading.Event(), threading.Event()

    def slow(_fence: Fence, _node: Node) -> str:
        inside.set()
        release.wait(5)
        return "done"

    replies = []
    first = threading.Thread(
        target=lambda: replies.append(owners.call("Instance x", node, slow, once_per="x"))
    )
    first.start()
    assert inside.wait(5)
    second = owners.call("Instance x", node, lambda *_: "again", once_per="x")
    other = owners.call("Instance y", node, lambda *_: "other", once_per="y")
    release.set()
    first.join(5)
    assert second.outcome is Outcome.MOOT
    assert (other.outcome, other.answer) == (Outcome.ACCEPTED, "other")
    assert [(r.outcome, r.answer) for r in replies] == [(Outcome.ACCEPTED, "done")]
    # Once it ended, the work can be called again.
    assert owners.call("Instance x", node, lambda *_: "later", once_per="x").answer == "later"


def test_a_lane_runs_calls_in_the_background_and_its_stop_is_bounded() -> None:
    pool = CallPool(2, "test-sender")
    ran: list[int] = []
    hang = threading.Event()
    assert pool.submit(ran.append, 1)
    assert pool.submit(hang.wait, 30)  # a call hung on a dead agent
    deadline = time.monotonic() + 5
    while not ran and time.monotonic() < deadline:
        time.sleep(0.01)
    pool.close(drain=0.2)
    # Back while the hung call still hangs: a stop never waits it out.
    hung = [t for t in threading.enumerate() if t.name.startswith("test-sender")]
    assert any(t.is_alive() for t in hung) and not hang.is_set()
    assert ran == [1]
    assert pool.submit(ran.append, 2) is False  # closed: the caller keeps the record
    hang.set()
    assert CallPool(0, "none").submit(ran.append, 3) is False  # no threads: caller runs it
    with pytest.raises(ValueError, match="senders"):
        CallPool(-1, "bad")


def test_an_outage_is_said_once_for_all_the_work_waiting_on_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outages = Outages("Agent")
    with caplog.at_level(logging.DEBUG, logger="conductor.lifecycle.outages"):
        for _ in range(50):  # 50 builds, each retried: one WARNING
            outages.failed("a1", "no answer in time")
        outages.failed("a1", "stopping")  # a new cause is said
        outages.failed("a2", "no answer in time")  # another agent's own outage
        assert outages.ongoing("a1")
        outages.answered("a1")
        outages.answered("a1")  # over: nothing more
        outages.answered("a3")  # never failed: nothing
    said = [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno > logging.DEBUG]
    assert [level for level, _ in said] == ["WARNING", "WARNING", "WARNING", "INFO"]
    assert "a1" in said[0][1] and "no answer in time" in said[0][1]
    assert "stopping" in said[1][1] and "a2" in said[2][1]
    assert "a1 works again" in said[3][1] and "(51 waits)" in said[3][1]
    assert not outages.ongoing("a1") and outages.ongoing("a2")


def test_an_owner_that_cannot_take_work_is_an_outage_a_busy_node_is_not(db: Database) -> None:
    node = _node(db)
    owners = OwnerCalls(db, Fleet())  # type: ignore[arg-type]

    def failing(exc: Exception) -> Callable[[Fence, Node], None]:
        def send(_fence: Fence, _node: Node) -> None:
            raise exc

        return send

    for exc, outage in [
        (messaging.MessagingTimeout("id 1"), True),
        (errors.ServiceUnavailable("stopping"), True),
        (OSError("connection reset"), True),
        (errors.Conflict(field="node_uuid", value="n", reason="busy"), False),
        (messaging.RemoteError("KeyError", "x"), False),
    ]:
        reply = owners.call("Instance x", node, failing(exc))
        assert (reply.outcome, reply.outage) == (Outcome.WAIT, outage), exc
        assert owners.outages.ongoing("agent-1") is outage  # a refusal is an answer
    owners.call("Instance x", node, failing(messaging.MessagingTimeout("id 2")))
    assert owners.outages.ongoing("agent-1")
    assert owners.unreachable() == {"agent-1"}  # not chosen for new builds
    owners.call("Instance x", node, lambda *_: "accepted")
    assert not owners.outages.ongoing("agent-1")
    assert owners.unreachable() == frozenset()


def _as_received(exc: Exception) -> Exception:
    """*exc* as a conductor receives it from an agent: serialized by
    oslo.messaging and rebuilt on this side (a ``<Name>_Remote`` subclass)."""
    try:
        raise exc
    except Exception:
        data = rpc_common.serialize_remote_exception(sys.exc_info())
    rebuilt = rpc_common.deserialize_remote_exception(data, rpc.ALLOWED_EXMODS)
    assert isinstance(rebuilt, Exception)
    return rebuilt


@pytest.mark.parametrize(
    ("exc", "outcome"),
    [
        (errors.NodeNotBuildable(field="node_uuid", value="n", reason="gone"), Outcome.REFUSED),
        (errors.Conflict(field="node_uuid", value="n", reason="busy"), Outcome.WAIT),
        (errors.ServiceUnavailable("stopping"), Outcome.WAIT),
        (
            errors.InvalidInput([{"field": "epoch", "value": "x", "reason": "not an integer"}]),
            Outcome.REFUSED,
        ),
        (KeyError("a bug on the agent"), Outcome.WAIT),
    ],
)
def test_an_agents_exception_as_received_over_rpc_has_its_outcome(
    db: Database, exc: Exception, outcome: Outcome
) -> None:
    """The agent's NodeNotBuildable reaches the conductor as a class
    oslo.messaging makes (NodeNotBuildable_Remote): classed by what it is."""
    received = _as_received(exc)
    node = _node(db)

    def send(_fence: Fence, _node: Node) -> None:
        raise received

    reply = OwnerCalls(db, Fleet()).call("Instance x", node, send)  # type: ignore[arg-type]
    assert reply.outcome is outcome, type(received).__name__
    assert reply.error in (type(exc).__name__, "KeyError")
    if outcome is Outcome.REFUSED and isinstance(exc, errors.NodeNotBuildable):
        assert reply.reason == "gone"  # its reason, without the remote traceback
