# SPDX-License-Identifier: Apache-2.0
"""An agent that cannot serve steps aside from the ring (:mod:`compute_agent.serving`).

The calls to itself and the clock are scripted; the membership is a stand-in
that records what the check announces and asks.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from compute_agent.serving import MIN_LIMIT_S, ServingCheck
from hashring.membership import Member, MembershipView


@dataclass
class FakeMembership:
    ttl: float = 10.0
    peers: dict[str, bool | str | None] = field(default_factory=lambda: {"agent-2": True})
    announced: list[tuple[str, Any]] = field(default_factory=list)
    asides: list[str] = field(default_factory=list)
    backs: int = 0

    @property
    def view(self) -> MembershipView:
        members = {
            host: Member(host, 1, 1.0, {} if serving is None else {"serving": serving})
            for host, serving in {"agent-1": None, **self.peers}.items()
        }
        return MembershipView(members=members, excluded={}, ring_version=1)

    def announce(self, name: str, value: Any) -> bool:
        self.announced.append((name, value))
        return True

    aside: str | None = None

    def step_aside(self, why: str) -> None:
        self.asides.append(why)
        self.aside = why

    def step_back(self) -> None:
        self.backs += 1
        self.aside = None


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Calls:
    """The agent's calls to itself: they fail while ``broken`` is set."""

    def __init__(self) -> None:
        self.broken: Exception | None = None
        self.count = 0

    def __call__(self, timeout: float) -> object:
        self.count += 1
        if self.broken is not None:
            raise self.broken
        return {"host": "agent-1"}


def _check(membership: FakeMembership, clock: Clock, calls: Calls) -> ServingCheck:
    return ServingCheck(
        "agent-1",
        calls,
        membership,  # type: ignore[arg-type]
        interval=1.0,
        clock=clock,
    )


def _step(check: ServingCheck, clock: Clock, seconds: float) -> None:
    """*seconds* pass, one check per second; each call ends before the next."""
    for _ in range(int(seconds)):
        clock.now += 1.0
        check.check()
        deadline = time.monotonic() + 5
        while check._calling and time.monotonic() < deadline:  # the call's own thread
            time.sleep(0.001)


def test_a_blip_shorter_than_the_limit_moves_nothing() -> None:
    membership, clock, calls = FakeMembership(), Clock(), Calls()
    check = _check(membership, clock, calls)
    calls.broken = OSError("connection reset")
    _step(check, clock, 9)  # TTL 10 s
    calls.broken = None
    _step(check, clock, 2)
    assert check.serving and membership.announced == [] and membership.asides == []
    assert calls.count == 11


def test_an_agent_no_call_reaches_announces_it_and_steps_aside_while_peers_serve(
    caplog: pytest.LogCaptureFixture,
) -> None:
    membership, clock, calls = FakeMembership(), Clock(), Calls()
    check = _check(membership, clock, calls)
    calls.broken = OSError("connection reset")
    with caplog.at_level(logging.INFO, logger="compute_agent.serving"):
        _step(check, clock, 11)
        assert not check.serving
        assert membership.announced == [("serving", False)]
        assert membership.asides == []  # the peers get time to say they fail too
        _step(check, clock, 3)
        assert len(membership.asides) == 1 and "connection reset" in membership.asides[0]
        _step(check, clock, 5)  # stays aside: asked once
        assert len(membership.asides) == 1
        calls.broken = None
        _step(check, clock, 1)
    assert check.serving and membership.backs == 1
    assert membership.announced == [("serving", False), ("serving", True)]
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in said] == ["WARNING", "INFO"], said
    assert "leaves the ring" in said[0][1] and "serves again" in said[1][1]


def test_when_no_peer_serves_either_the_broker_is_down_and_nothing_moves(
    caplog: pytest.LogCaptureFixture,
) -> None:
    membership = FakeMembership(peers={"agent-2": False, "agent-3": False})
    clock, calls = Clock(), Calls()
    check = _check(membership, clock, calls)
    calls.broken = OSError("connection refused")
    with caplog.at_level(logging.INFO, logger="compute_agent.serving"):
        _step(check, clock, 30)
    assert membership.asides == [] and not check.serving
    said = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert len(said) == 1 and said[0].levelname == "INFO"  # the broker said its outage
    assert "nor can any peer" in said[0].getMessage()
    # A peer serves again, this agent still cannot: now it steps aside.
    membership.peers["agent-3"] = True
    _step(check, clock, 1)
    assert len(membership.asides) == 1


@pytest.mark.parametrize("peer", [None, "stopping", False])
def test_a_peer_that_does_not_say_it_serves_is_not_counted_on(peer: str | bool | None) -> None:
    """A peer of an older release (says nothing), one that stops or one that
    fails too: stepping aside for it could leave the ring empty."""
    membership = FakeMembership(peers={"agent-2": peer})
    clock, calls = Clock(), Calls()
    check = _check(membership, clock, calls)
    calls.broken = OSError("connection refused")
    _step(check, clock, 20)
    assert membership.asides == [] and not check.serving
    check.stop(announce="stopping")
    assert membership.announced[-1] == ("serving", "stopping")


def test_a_call_that_hangs_does_not_hold_the_judgement() -> None:
    membership, clock = FakeMembership(ttl=3.0), Clock()
    hang = threading.Event()
    started: list[float] = []

    def hung(timeout: float) -> object:
        started.append(timeout)
        hang.wait(30)  # a publish on a cut connection
        return None

    check = _check(membership, clock, hung)  # type: ignore[arg-type]
    for _ in range(int(MIN_LIMIT_S) + 1 + 3):
        clock.now += 1.0
        check.check()
    assert len(started) == 1  # one call at a time
    assert not check.serving and len(membership.asides) == 1  # judged all the same
    hang.set()


def test_the_limit_is_the_ttl_but_never_below_the_floor() -> None:
    for ttl, limit in [(3.0, MIN_LIMIT_S), (10.0, 10.0)]:
        membership, clock, calls = FakeMembership(ttl=ttl), Clock(), Calls()
        check = _check(membership, clock, calls)
        calls.broken = OSError("x")
        _step(check, clock, int(limit))
        assert check.serving, ttl
        _step(check, clock, 1)
        assert not check.serving, ttl
