# SPDX-License-Identifier: Apache-2.0
"""The conductor's hints to the agents that an operator changed nodes, and the
agents' side: a hint wakes the reconciler of an agent that may serve them."""

from __future__ import annotations

import logging
import threading
import time
import types
from collections.abc import Sequence
from typing import Any
from unittest import mock

import pytest

from compute_agent.endpoints import ComputeEndpoint
from compute_agent.reconcile_loop import Reconciler
from compute_agent.rpcapi import ComputeAPI
from conductor.db import nodes as node_db
from conductor.db import ownership
from conductor.endpoints.agents import AgentsEndpoint
from conductor.endpoints.inventory import InventoryEndpoint
from conductor.fleet_view import FleetView
from conductor.inventory_hints import InventoryHints
from hashring.membership import Member, MembershipView, State
from hashring.ring import Ring
from tests.dbutil import migrated


class Sender:
    """Records each cast; ``fail`` makes the next casts raise."""

    def __init__(self) -> None:
        self.casts: list[tuple[float, list[str] | None]] = []
        self.hosts: list[list[str] | None] = []
        self.sent = threading.Event()
        self.fail = False

    def inventory_changed(
        self, groups: Sequence[str] | None = None, hosts: Sequence[str] | None = None
    ) -> bool:
        if self.fail:
            self.sent.set()
            raise OSError("broker gone")
        self.casts.append((time.monotonic(), None if groups is None else list(groups)))
        self.hosts.append(None if hosts is None else list(hosts))
        self.sent.set()
        return True

    def wait(self, count: int) -> None:
        deadline = time.monotonic() + 10
        while len(self.casts) < count and time.monotonic() < deadline:
            self.sent.wait(0.05)
            self.sent.clear()
        assert len(self.casts) >= count, self.casts


def test_changes_within_the_gap_go_in_one_cast_naming_every_group() -> None:
    sender = Sender()
    hints = InventoryHints(sender, min_gap=0.5)
    hints.changed(["gold"])
    sender.wait(1)
    hints.changed(["silver"])
    hints.changed(["bronze", "silver"])
    sender.wait(2)
    time.sleep(0.6)  # no third cast comes
    assert [groups for _at, groups in sender.casts] == [["gold"], ["bronze", "silver"]]
    assert sender.casts[1][0] - sender.casts[0][0] >= 0.5


def test_a_change_of_any_group_makes_the_cast_name_none() -> None:
    sender = Sender()
    hints = InventoryHints(sender, min_gap=0.3)
    hints.changed(["gold"])
    sender.wait(1)
    hints.changed(["silver"])
    hints.changed(None)
    hints.changed(["gold"])
    sender.wait(2)
    assert sender.casts[1][1] is None


def test_a_failing_cast_is_said_once_and_its_recovery_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sender = Sender()
    sender.fail = True
    hints = InventoryHints(sender, min_gap=0.0)
    with caplog.at_level(logging.INFO, logger="conductor.inventory_hints"):
        for _ in range(3):
            sender.sent.clear()
            hints.changed(["gold"])
            assert sender.sent.wait(5)
            time.sleep(0.05)
        sender.fail = False
        hints.changed(["gold"])
        sender.wait(1)
        time.sleep(0.05)
    messages = [r.getMessage() for r in caplog.records]
    assert sum("Could not tell the agents" in m for m in messages) == 1, messages
    assert sum("works again" in m for m in messages) == 1, messages


def test_a_stopped_conductor_sends_no_pending_cast() -> None:
    sender = Sender()
    hints = InventoryHints(sender, min_gap=0.3)
    hints.changed(["gold"])
    sender.wait(1)
    hints.changed(["silver"])  # waits for the gap
    hints.stop()
    hints.changed(["bronze"])
    time.sleep(0.5)
    assert [groups for _at, groups in sender.casts] == [["gold"]]


def test_releases_are_told_to_their_new_owners_alone_unless_anything_else_changed() -> None:
    sender = Sender()
    # A gap no stall of a loaded machine spans: the two changes after the
    # first cast are sent together.
    hints = InventoryHints(sender, min_gap=1.0)
    hints.changed(None, ["agent-b"])
    sender.wait(1)  # the first goes at once
    hints.changed(None, ["agent-c"])
    hints.changed(None, ["agent-b"])
    sender.wait(2)
    hints.changed(None, ["agent-d"])
    hints.changed(["gold"])  # an operator's change: every agent
    sender.wait(3)
    time.sleep(1.2)  # nothing more is sent
    assert sender.hosts == [["agent-b"], ["agent-b", "agent-c"], None]


def test_the_cast_is_a_fanout_and_not_sent_to_agents_capped_below_1_6() -> None:
    transport = mock.MagicMock()
    with mock.patch("conductor.common.rpc.get_client") as get_client:
        client = get_client.return_value
        client.can_send_version.return_value = True
        api = ComputeAPI(transport)
        assert api.inventory_changed(["silver", "gold"]) is True
        client.prepare.assert_called_once_with(fanout=True, version="1.6")
        client.prepare.return_value.cast.assert_called_once_with(
            {}, "inventory_changed", groups=["gold", "silver"]
        )
        client.prepare.reset_mock()
        assert api.inventory_changed(None, ["agent-b", "agent-a"]) is True  # one cast each
        assert client.prepare.call_args_list == [
            mock.call(server="agent-a", version="1.6"),
            mock.call(server="agent-b", version="1.6"),
        ]
        client.can_send_version.return_value = False
        client.prepare.reset_mock()
        assert api.inventory_changed(None) is False
        client.prepare.assert_not_called()


def test_the_agent_endpoint_passes_the_groups_and_reads_all_on_a_bad_value() -> None:
    heard: list[list[str] | None] = []
    endpoint = ComputeEndpoint(
        "agent-a", mock.Mock(), dict, lambda: None, inventory_changed=heard.append
    )
    endpoint.inventory_changed({}, groups=["gold"])
    endpoint.inventory_changed({}, groups=None)
    endpoint.inventory_changed({}, groups="gold")
    endpoint.inventory_changed({}, groups=[1])
    assert heard == [["gold"], None, None, None]


class _Agent(Reconciler):
    def __init__(self, groups: list[str]) -> None:
        self.conf = mock.Mock()
        self.conf.compute_agent.groups = groups
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self.host = "agent-a"
        self._init_reconciler()


@pytest.mark.parametrize(
    ("ours", "changed", "woken"),
    [
        ([], ["gold"], True),  # an agent of every group
        ([], None, True),
        (["gold"], ["gold", "silver"], True),
        (["gold"], None, True),
        (["gold"], ["silver"], False),
    ],
)
def test_a_hint_wakes_an_agent_that_may_serve_the_groups(
    ours: list[str], changed: list[str] | None, woken: bool
) -> None:
    agent = _Agent(ours)
    agent.inventory_changed(changed)
    assert agent._wake.is_set() is woken
    assert agent._hinted is woken


def _inventory(tmp_path: Any) -> tuple[InventoryEndpoint, mock.Mock]:
    db = migrated(f"sqlite:///{tmp_path / 'db.sqlite'}")
    hints = mock.Mock(spec=InventoryHints)
    return InventoryEndpoint(db, FleetView(db), hints=hints), hints


def test_an_operators_change_of_nodes_is_hinted_with_their_groups(tmp_path: Any) -> None:
    inventory, hints = _inventory(tmp_path)
    node = inventory.create_node({}, {"name": "n1", "resource_class": "rc", "group": "gold"})
    hints.changed.assert_called_once_with(["gold"])
    inventory.import_nodes(
        {},
        [
            {"name": "n2", "resource_class": "rc", "group": "silver"},
            {"name": "n3", "resource_class": "rc", "group": "gold"},
        ],
    )
    assert set(hints.changed.call_args.args[0]) == {"gold", "silver"}
    inventory.set_node_maintenance({}, node["uuid"], True, "fans")
    inventory.set_node({}, node["uuid"], {"add_traits": ["CUSTOM_X"]})
    inventory.delete_node({}, node["uuid"])
    assert [c.args[0] for c in hints.changed.call_args_list[2:]] == [["gold"]] * 3


def test_a_dry_run_or_a_refused_change_hints_nothing(tmp_path: Any) -> None:
    inventory, hints = _inventory(tmp_path)
    inventory.import_nodes({}, [{"name": "n2", "resource_class": "rc"}], dry_run=True)
    with pytest.raises(Exception, match="n1"):
        inventory.set_node_maintenance({}, "n1", True, "fans")
    hints.changed.assert_not_called()
    assert node_db.list_node_dicts(inventory._db, limit=10) == []


def test_nodes_released_are_hinted_a_refused_release_is_not(tmp_path: Any) -> None:
    inventory, _ = _inventory(tmp_path)
    db = inventory._db
    node = inventory.create_node({}, {"name": "n1", "resource_class": "rc"})
    claim = ownership.claim_nodes(
        db, "agent-a", [node["uuid"]], live_members=["agent-a"], rehome_grace=0.0
    )
    [granted] = claim.granted
    hints = mock.Mock(spec=InventoryHints)
    agents = AgentsEndpoint(db, FleetView(db), lambda: 0.0, hints=hints)
    agents.release_nodes({}, "agent-a", {node["uuid"]: granted.epoch + 1})
    hints.changed.assert_not_called()
    agents.release_nodes({}, "agent-a", {node["uuid"]: granted.epoch})
    hints.changed.assert_called_once_with(None, None)  # no view yet: every agent


def test_nodes_released_are_hinted_to_their_ring_owners_not_to_all_if_the_view_lags(
    tmp_path: Any,
) -> None:
    """Only the agent this conductor's ring gives a released node has
    anything to read; when that ring still gives it to the releaser (the
    conductor saw the join later than the agents), nobody is told: the
    joiner claims its share on its own.  (Every agent was, and each read.)"""
    inventory, _ = _inventory(tmp_path)
    db = inventory._db
    uuids = [
        inventory.create_node({}, {"name": f"n{i}", "resource_class": "rc"})["uuid"]
        for i in range(40)
    ]
    fleet = FleetView(db)
    two = MembershipView(
        members={h: Member(h, 1, 1.0, {"groups": []}) for h in ("agent-a", "agent-b")},
        excluded={},
        ring_version=1,
    )
    fleet.on_change(two)
    ring = Ring({"agent-a": 1.0, "agent-b": 1.0}, version=1)
    theirs = [u for u in uuids if ring.owner(u) == "agent-b"]
    mine = [u for u in uuids if ring.owner(u) == "agent-a"]
    held = ownership.claim_nodes(db, "agent-a", uuids, live_members=["agent-a"], rehome_grace=0.0)
    epochs = {o.node_uuid: o.epoch for o in held.granted}
    hints = mock.Mock(spec=InventoryHints)
    agents = AgentsEndpoint(db, fleet, lambda: 0.0, hints=hints)
    agents.release_nodes({}, "agent-a", {u: epochs[u] for u in theirs[1:]})
    hints.changed.assert_called_once_with(None, {"agent-b"})
    agents.release_nodes({}, "agent-a", {mine[0]: epochs[mine[0]]})
    hints.changed.assert_called_once()  # not again
    agents.release_nodes({}, "agent-a", {u: epochs[u] for u in [mine[1], theirs[0]]})
    assert hints.changed.call_count == 2
    assert hints.changed.call_args == mock.call(None, {"agent-b"})  # agent-b's, alone


def test_nodes_handed_over_are_hinted_to_their_receivers(tmp_path: Any) -> None:
    inventory, _ = _inventory(tmp_path)
    db = inventory._db
    node = inventory.create_node({}, {"name": "n1", "resource_class": "rc"})["uuid"]
    fleet = FleetView(db)
    fleet.attach(types.SimpleNamespace(state=State.CONNECTED))  # type: ignore[arg-type]
    fleet.on_change(
        MembershipView(
            members={h: Member(h, 1, 1.0, {"groups": []}) for h in ("agent-a", "agent-c")},
            excluded={},
            ring_version=1,
        )
    )
    [held] = ownership.claim_nodes(
        db, "agent-a", [node], live_members=["agent-a"], rehome_grace=0.0
    ).granted
    hints = mock.Mock(spec=InventoryHints)
    agents = AgentsEndpoint(db, fleet, lambda: 0.0, hints=hints)
    transfer = {"node_uuid": node, "epoch": held.epoch, "new_owner": "agent-c"}
    agents.transfer_nodes({}, "agent-a", [transfer])
    hints.changed.assert_called_once_with(None, {"agent-c"})
