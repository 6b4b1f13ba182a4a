# SPDX-License-Identifier: Apache-2.0
"""Membership against real etcd and Redis (and the file backend), members as processes.

Faults are real: kill -9, SIGSTOP/SIGCONT of a member, SIGSTOP of etcd.
Deadlines come from the protocol: a crash is noticed within the TTL plus the
watch interval and some slack for a loaded machine.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.functional.harness import MemberProcess, unique_group
from tests.harness import server_ctl
from tests.harness.wait import wait_for

TTL = 3.0  # etcd will not grant much less (docs/dependency-facts.rst, "tooz and etcd")
SLACK = 4.0  # start-up and scheduling on a shared 2-core machine

Spawn = Callable[..., MemberProcess]


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Spawn]:
    started: list[MemberProcess] = []

    def _spawn(host: str, url: str, group: str, **kwargs: object) -> MemberProcess:
        member = MemberProcess(tmp_path, host, url, group=group, **kwargs)  # type: ignore[arg-type]
        started.append(member)
        return member.start()

    yield _spawn
    for member in started:
        member.cleanup()


@pytest.fixture(params=["etcd", "redis", "file"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A backend URL with the test TTL, for tests run on every backend."""
    if request.param == "etcd":
        etcd: str = request.getfixturevalue("etcd_url")
        return f"{etcd}?membership_timeout={TTL:g}"
    if request.param == "redis":
        redis: str = request.getfixturevalue("redis_url")
        return f"{redis}?membership_timeout={TTL:g}"
    directory = tmp_path / "tooz"
    directory.mkdir()
    return f"file://{directory}?timeout={TTL:g}"


# Joins, leaves and exclusions are the same on every backend (Redis: the unit
# tests on fakeredis); the lease, pauses and restarts are not.
@pytest.mark.parametrize("backend", ["etcd", "file"], indirect=True)
def test_join_and_leave_seen_by_all(spawn: Spawn, backend: str) -> None:
    group = unique_group("join-leave")
    # A long TTL here: a graceful leave must be seen without waiting for it.
    url = backend.replace(f"={TTL:g}", "=20")
    a, b, c = (spawn(h, url, group) for h in ("a", "b", "c"))
    for member in (a, b, c):
        member.wait_members({"a", "b", "c"}, timeout=15)
        member.wait_for(lambda e: e.get("state") == "connected", timeout=5)

    marks = {m.host: m.mark() for m in (a, b, c)}
    d = spawn("d", url, group)
    for member in (a, b, c, d):
        member.wait_members({"a", "b", "c", "d"}, 15, marks.get(member.host, 0))

    marks = {m.host: m.mark() for m in (a, c, d)}
    assert b.terminate() == 0
    assert b.events[-1]["event"] == "stopped"
    for member in (a, c, d):
        member.wait_members({"a", "c", "d"}, timeout=10, start=marks[member.host])


def test_kill_9_member_disappears_after_the_ttl(spawn: Spawn, backend: str) -> None:
    group = unique_group("kill")
    a, b, c = (spawn(h, backend, group) for h in ("a", "b", "c"))
    for member in (a, b, c):
        member.wait_members({"a", "b", "c"}, timeout=15)
    marks = {m.host: m.mark() for m in (a, b)}
    killed_at = time.time()
    c.kill()
    for member in (a, b):
        seen = member.wait_members({"a", "b"}, TTL + SLACK, marks[member.host])
        # Gone through lease expiry: not before most of the TTL has passed
        # (the last heartbeat was at most a quarter TTL before the kill).
        assert seen - killed_at >= TTL * 0.75 - 0.5
    # The survivors never stopped being able to act.
    assert "suspended" not in a.states(marks["a"])
    assert "lost" not in b.states(marks["b"])


def test_sigstop_past_ttl_then_sigcont_rejoins(spawn: Spawn, backend: str) -> None:
    group = unique_group("pause")
    a, b, c = (spawn(h, backend, group) for h in ("a", "b", "c"))
    for member in (a, b, c):
        member.wait_members({"a", "b", "c"}, timeout=15)
        member.wait_for(lambda e: e.get("state") == "connected", timeout=5)
    marks = {m.host: m.mark() for m in (a, b)}
    c.signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    for member in (a, b):
        member.wait_members({"a", "b"}, TTL + SLACK, marks[member.host])
    # Paused well past the TTL: its lease has certainly expired.
    time.sleep(max(0.0, TTL + 1 - (time.monotonic() - stopped_at)))

    resumed = c.mark()
    marks = {m.host: m.mark() for m in (a, b)}
    c.signal(signal.SIGCONT)
    c.wait_for(lambda e: e.get("state") == "connected", TTL + SLACK, resumed)
    states = c.states(resumed)
    # The first thing the resumed process saw was that it may not act.
    assert states[0] == "lost", states
    assert states[-1] == "connected", states
    for member in (a, b):
        member.wait_members({"a", "b", "c"}, TTL + SLACK, marks[member.host])
    # c's own view may never have changed (it was frozen while the others
    # saw it leave): read its latest view rather than wait for a change.
    c.wait_for(
        lambda e: e["event"] == "view" and set(e["members"]) == {"a", "b", "c"},
        TTL + SLACK,
    )
    assert c.last_view()["members"] == ["a", "b", "c"]


def test_fast_restart_with_the_same_id(spawn: Spawn, backend: str) -> None:
    group = unique_group("restart")
    url = backend.replace(f"={TTL:g}", "=20")  # the old entry outlives the restart
    a = spawn("a", url, group)
    first = spawn("b", url, group)
    a.wait_members({"a", "b"}, timeout=15)
    first.kill()
    second = spawn("b", url, group)
    second.wait_for(lambda e: e.get("state") == "connected", timeout=15)
    second.wait_members({"a", "b"}, timeout=10)
    assert "already in group" in second.log.read_text()
    # Still one "b", now the new incarnation, and it stays in the group.  (The
    # replacement leaves, then joins: a read of the group between the two
    # saw "a" alone; on a loaded machine "a" may read next a second later.)
    wait_for(lambda: a.last_view()["members"] == ["a", "b"], 10, "a sees the new b")
    time.sleep(1)
    assert a.last_view()["members"] == ["a", "b"]
    assert second.states()[-1] == "connected"


@pytest.mark.parametrize("backend", ["etcd", "file"], indirect=True)
def test_peer_with_another_ring_version_is_excluded(spawn: Spawn, backend: str) -> None:
    group = unique_group("version")
    a = spawn("a", backend, group)
    b = spawn("b", backend, group)
    odd = spawn("odd", backend, group, ring_version=2)
    for member in (a, b):
        event = member.wait_for(
            lambda e: e["event"] == "view" and "odd" in e["excluded"], timeout=15
        )
        assert "ring version 2" in event["excluded"]["odd"]
        assert "odd" not in member.last_view()["members"]
    assert "excluded from the ring" in a.log.read_text()
    # The odd one refuses the majority in the same way.
    odd.wait_for(lambda e: e["event"] == "view" and {"a", "b"} <= set(e["excluded"]), 15)


@pytest.mark.parametrize("server", ["etcd", "redis"])
def test_backend_paused_suspends_then_recovers(
    spawn: Spawn, server: str, request: pytest.FixtureRequest
) -> None:
    # The current pid: an earlier test may have restarted the server.
    etcd_pid = int(server_ctl(f"pid {server}").strip())
    group = unique_group(f"{server}-pause")
    base: str = request.getfixturevalue(f"{server}_url")
    # A short timeout so heartbeats fail fast while the server is paused
    # (Redis: ringfleet makes its socket timeout a quarter of the TTL).
    url = f"{base}?membership_timeout={TTL:g}" + ("&timeout=1" if server == "etcd" else "")
    a, b = spawn("a", url, group), spawn("b", url, group)
    for member in (a, b):
        member.wait_members({"a", "b"}, timeout=15)
        member.wait_for(lambda e: e.get("state") == "connected", timeout=5)
    marks = {m.host: m.mark() for m in (a, b)}
    os.kill(etcd_pid, signal.SIGSTOP)
    try:
        for member in (a, b):
            member.wait_for(lambda e: e.get("state") == "suspended", TTL, marks[member.host])
            member.wait_for(lambda e: e.get("state") == "lost", TTL + SLACK, marks[member.host])
    finally:
        os.kill(etcd_pid, signal.SIGCONT)
    for member in (a, b):
        member.wait_for(lambda e: e.get("state") == "connected", 20, marks[member.host])
        assert member.states(marks[member.host])[:2] == ["suspended", "lost"]
        member.wait_for(lambda e: e["event"] == "view" and set(e["members"]) == {"a", "b"}, 20)
