# SPDX-License-Identifier: Apache-2.0
"""The conductor's hint to the agents that members left their group (compute
API 1.7), and the agents' side: it has the membership read the group now."""

from __future__ import annotations

import logging
import threading
from unittest import mock

import pytest

from compute_agent.endpoints import ComputeEndpoint
from compute_agent.rpcapi import ComputeAPI
from conductor.group_hints import GroupHints
from hashring.membership import Member, MembershipView
from tests.harness.wait import wait_for


def _view(*members: str) -> MembershipView:
    return MembershipView(
        members={m: Member(member_id=m, ring_version=1, weight=1.0) for m in members},
        excluded={},
        ring_version=1,
    )


class Sender:
    """Counts the casts; ``fail`` makes them raise."""

    def __init__(self) -> None:
        self.casts = 0
        self.fail = False
        self.sent = threading.Semaphore(0)

    def group_changed(self) -> bool:
        try:
            if self.fail:
                raise OSError("broker gone")
            self.casts += 1
            return True
        finally:
            self.sent.release()


def test_a_view_that_lost_members_is_cast_once_and_a_join_is_not() -> None:
    sender = Sender()
    hints = GroupHints(sender)
    hints.on_view(_view("a1", "a2", "a3"))  # the first view: nothing to compare
    hints.on_view(_view("a1", "a2", "a3", "a4"))  # a join: the joiner claims on its own
    assert not sender.sent.acquire(timeout=0.2)
    hints.on_view(_view("a1", "a2", "a4"))  # a3 left
    assert sender.sent.acquire(timeout=5)
    hints.on_view(_view("a1", "a2", "a4"))  # the same members again
    hints.on_view(_view("a1", "a5"))  # two left while one joined
    assert sender.sent.acquire(timeout=5)
    assert not sender.sent.acquire(timeout=0.2)
    assert sender.casts == 2
    hints.stop()
    hints.on_view(_view("a1"))
    assert not sender.sent.acquire(timeout=0.2) and sender.casts == 2


def test_a_broker_that_cannot_take_the_cast_is_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sender = Sender()
    sender.fail = True
    hints = GroupHints(sender)
    caplog.set_level(logging.INFO, "conductor.group_hints")
    hints.on_view(_view("a1", "a2", "a3"))
    for members in (("a1", "a2"), ("a1", "a2", "a3"), ("a1",)):  # two casts, both refused
        hints.on_view(_view(*members))
        if len(members) < 3:
            assert sender.sent.acquire(timeout=5)
            wait_for(lambda: caplog.records, 5, "the WARNING of the first refusal")
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    sender.fail = False
    hints.on_view(_view("a1", "a2"))
    hints.on_view(_view("a2"))
    assert sender.sent.acquire(timeout=5)
    wait_for(lambda: len(caplog.records) > 1, 5, "the INFO after the cast")
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.INFO]


def test_the_cast_is_a_fanout_and_not_sent_to_agents_capped_below_1_7() -> None:
    with mock.patch("conductor.common.rpc.get_client") as get_client:
        client = get_client.return_value
        client.can_send_version.side_effect = lambda version: version != "1.7"
        api = ComputeAPI(mock.MagicMock())
        assert api.group_changed() is False
        client.prepare.assert_not_called()
        client.can_send_version.side_effect = None
        client.can_send_version.return_value = True
        assert api.group_changed() is True
        client.prepare.assert_called_once_with(fanout=True, version="1.7")
        client.prepare.return_value.cast.assert_called_once_with({}, "group_changed")


def test_the_agent_endpoint_has_the_group_read_now() -> None:
    reads: list[None] = []
    endpoint = ComputeEndpoint(
        "agent-a", mock.Mock(), dict, lambda: None, group_changed=lambda: reads.append(None)
    )
    endpoint.group_changed({})
    assert reads == [None]
