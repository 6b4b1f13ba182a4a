# SPDX-License-Identifier: Apache-2.0
"""compute_agent.first_read: the first inventory read waits for peers to stop joining."""

from __future__ import annotations

from compute_agent.first_read import FirstReadSettle
from hashring.membership import Member, MembershipView

HOST = "agent-a"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def view(*hosts: str) -> MembershipView:
    return MembershipView(
        members={h: Member(h, 1, 1.0, {}) for h in hosts}, excluded={}, ring_version=1
    )


def test_a_start_that_sees_its_peers_at_once_reads_at_once() -> None:
    clock = Clock()
    settle = FirstReadSettle(HOST, quiet=1.0, limit=3.0, clock=clock)
    settle.saw(view(HOST, "agent-b", "agent-c"))
    settle.saw(view(HOST, "agent-b", "agent-c"))  # the same peers again
    assert settle.wait() == 0.0


def test_our_own_appearance_is_no_change() -> None:
    clock = Clock()
    settle = FirstReadSettle(HOST, quiet=1.0, limit=3.0, clock=clock)
    settle.saw(view("agent-b"))  # read while we were joining
    settle.saw(view(HOST, "agent-b"))
    assert settle.wait() == 0.0


def test_peers_joining_hold_the_first_read_until_quiet() -> None:
    clock = Clock()
    settle = FirstReadSettle(HOST, quiet=1.0, limit=3.0, clock=clock)
    settle.saw(view(HOST))
    clock.now += 0.2
    settle.saw(view(HOST, "agent-b"))
    assert settle.wait() == 1.0
    clock.now += 0.6
    settle.saw(view(HOST, "agent-b", "agent-c"))
    assert settle.wait() == 1.0
    clock.now += 1.0
    assert settle.wait() == 0.0
    # Only the first read waits: later changes are the reconcile's business.
    settle.saw(view(HOST))
    assert settle.wait() == 0.0


def test_peers_that_keep_changing_hold_it_no_longer_than_the_limit() -> None:
    clock = Clock()
    settle = FirstReadSettle(HOST, quiet=1.0, limit=3.0, clock=clock)
    settle.saw(view(HOST))
    for i in range(5):
        clock.now += 0.5
        settle.saw(view(HOST, *(f"agent-{j}" for j in range(i + 1))))
        assert 0.0 < settle.wait() <= 3.0 - 0.5 * (i + 1) + 1e-9
    clock.now += 0.5  # 3 s after the start
    settle.saw(view(HOST, "agent-x"))
    assert settle.wait() == 0.0
