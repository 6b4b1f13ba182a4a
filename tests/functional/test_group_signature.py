# SPDX-License-Identifier: Apache-2.0
"""A group's signature on a real etcd and a real Redis
(:func:`hashring.group_read.group_signature`).

A member reads its group in full only when the signature moved: every
change must move it (a join, an announcement, a leave, a lease that
expired), and nothing else may.  A membership watching a quiet group makes
no full read.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tooz import coordination

from benchmarks import membership_bench
from hashring.group_read import group_signature
from hashring.membership import Membership
from tests.harness import wait_for

TTL = 3  # etcd will not grant much less (docs/dependency-facts.rst)


@pytest.fixture(params=["etcd", "redis"])
def url(request: pytest.FixtureRequest) -> str:
    server: str = request.getfixturevalue(f"{request.param}_url")
    return f"{server}?membership_timeout={TTL}&timeout={TTL}"


@pytest.fixture
def group() -> bytes:
    return f"sig-{uuid.uuid4().hex[:8]}".encode()


def _member(url: str, name: str) -> coordination.CoordinationDriver:
    coordinator = coordination.get_coordinator(url, name.encode())
    coordinator.start(start_heart=True)
    return coordinator


@pytest.fixture
def members(url: str) -> Iterator[list[coordination.CoordinationDriver]]:
    started: list[coordination.CoordinationDriver] = []
    yield started
    for coordinator in started:
        coordinator.stop()


def test_every_change_of_the_group_moves_its_signature_and_nothing_else_does(
    url: str, group: bytes, members: list[coordination.CoordinationDriver]
) -> None:
    first = _member(url, "a")
    members.append(first)
    first.create_group(group).get()
    first.join_group(group, {"weight": 1}).get()
    joined = group_signature(first, group)
    assert joined is not None
    time.sleep(TTL)  # heartbeats (lease refreshes) change no entry
    assert group_signature(first, group) == joined

    second = _member(url, "b")
    second.join_group(group, {"weight": 1}).get()
    two = group_signature(first, group)
    assert two not in (None, joined)

    second.update_capabilities(group, {"weight": 2}).get()
    announced = group_signature(first, group)
    assert announced not in (None, joined, two)

    second.leave_group(group).get()
    left = group_signature(first, group)
    assert left not in (None, two, announced)

    third = coordination.get_coordinator(url, b"c")
    third.start(start_heart=False)  # joins, then never renews its lease
    third.join_group(group, {"weight": 1}).get()
    with_third = group_signature(first, group)
    wait_for(lambda: group_signature(first, group) != with_third, 4 * TTL, "c's lease expired")
    # The full read the change calls for (on Redis, tooz drops c's entry
    # then): the group is as it was before c joined, so is its signature.
    assert set(first.get_members_with_capabilities(group).get()) == {b"a"}
    assert group_signature(first, group) == left


def test_a_membership_reads_a_quiet_group_in_full_only_when_it_changed(
    url: str, group: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    members = [
        Membership(url, name, group=group.decode(), watch_interval=0.1) for name in ("a", "b")
    ]
    try:
        for membership in members:
            membership.start()
        wait_for(
            lambda: all(m.view is not None and len(m.view.members) == 2 for m in members),
            30,
            "both see both",
        )
        reads = {"full": 0}
        driver = type(coordination.get_coordinator(url, b"probe"))  # not started
        original = driver.get_members_with_capabilities

        def counted(self: coordination.CoordinationDriver, group_id: bytes) -> object:
            reads["full"] += 1
            return original(self, group_id)

        monkeypatch.setattr(driver, "get_members_with_capabilities", counted)
        time.sleep(2.0)  # 20 intervals each, nothing changing
        quiet = reads["full"]
        members[0].announce("serving", False)
        wait_for(
            lambda: (
                members[1].view is not None
                and members[1].view.members["a"].capabilities.get("serving") is False
            ),
            10,
            "b sees a's announcement",
        )
        assert quiet == 0, quiet
        assert reads["full"] >= 1
    finally:
        for membership in members:
            membership.stop()


def test_the_membership_benchmark_runs(etcd_url: str, redis_url: str, tmp_path: Path) -> None:
    """benchmarks/membership_bench.py at a tiny size: both ways timed, on both servers."""
    out = tmp_path / "bench.json"
    argv = ["--members", "2,3", "--reads", "3", "--json", str(out)]
    assert membership_bench.main(argv) == 0
    results = json.loads(out.read_text())
    assert set(results) == {"etcd", "redis"}
    for by_size in results.values():
        assert set(by_size) == {"2", "3"}
        for ways in by_size.values():
            assert set(ways) == {"full read", "signature"}
            assert all(way["wall_ms"] > 0 for way in ways.values())
