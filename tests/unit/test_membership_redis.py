# SPDX-License-Identifier: Apache-2.0
"""hashring.membership on tooz's real Redis driver, against fakeredis: no server.

What is specific to a backend is proven here on Redis as tests/functional
proves it on etcd and a real redis-server: the lease (a heartbeat key that
expires after the TTL), outage detection, the re-join after the lease or the
whole group was lost, and the self-check (our own entry, our incarnation)
before acting.  tooz's driver, its Lua scripts and the key expiry are real;
only the server is fakeredis, in this process
(:mod:`fleet_demo.fake_redis`: fakeredis answers no INFO, which
tooz's ``start()`` calls, so its client gets a one-method shim).

TTLs are one second: a member that stops heart-beating is gone from its
peers' views about a second later, so the whole module runs in seconds.
What a test asserts never depends on a one-second lease outliving a
loaded machine's pauses, though: a lease that must not run out is long
(:data:`LONG_TTL`), a member's own connection state is read from a clock the
test moves (:class:`FakeClock`) where the test looks at it, and states a
pause may flip for a moment (CONNECTED) are waited for, not asserted once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from fleet_demo.fake_redis import FakeRedisServer, in_process_redis
from hashring.backend_url import tooz_url, ttl_from_url
from hashring.membership import Membership, State
from tests.harness import wait_for

TTL = 1.0
URL = f"redis://127.0.0.1:6379?membership_timeout={TTL:g}"
GROUP = "redis-unit"
#: How long a test waits for something that must happen: the TTL and a few
#: watch periods and beats, with room for a loaded 2-core machine (4 s
#: more was short once, for a second process taking over an id; only a
#: failure waits it out).
DEADLINE = TTL + 20.0
#: A lease that outlives every test (and DEADLINE): what is seen gone was
#: removed, never expired meanwhile.
LONG_TTL = 60.0


def url_with_ttl(ttl: float) -> str:
    return URL.replace(f"={TTL:g}", f"={ttl:g}")


class FakeClock:
    """A member's monotonic clock, moved by the test alone: its state goes
    SUSPENDED or LOST when the test says, not when a loaded machine pauses
    its threads.  (Redis's own key expiry stays real time.)"""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def redis() -> Iterator[FakeRedisServer]:
    with in_process_redis() as server:
        yield server


@pytest.fixture
def started(redis: FakeRedisServer) -> Iterator[list[Membership]]:
    members: list[Membership] = []
    yield members
    redis.start()
    # Together: stopping tooz's coordinator takes about a second each.
    stoppers = [threading.Thread(target=m.stop, kwargs={"leave": False}) for m in members]
    for thread in stoppers:
        thread.start()
    for thread in stoppers:
        thread.join()


def member(started: list[Membership], member_id: str, url: str = URL, **kwargs: Any) -> Membership:
    m = Membership(url, member_id, group=GROUP, watch_interval=0.05, **kwargs)
    m.start()
    started.append(m)
    return m


def members_seen(m: Membership) -> set[str]:
    return set(m.view.members) if m.view is not None else set()


def sees(m: Membership, expected: set[str]) -> bool:
    return members_seen(m) == expected


def beat_key(redis: FakeRedisServer, member_id: str) -> bytes:
    """tooz's heartbeat key of ``member_id`` (its lease)."""
    keys = [k for k in redis.client().keys("*") if k.endswith(b"_beats:" + member_id.encode())]
    assert len(keys) == 1, keys
    return bytes(keys[0])


def drop_lease(redis: FakeRedisServer, member_id: str) -> None:
    """Delete ``member_id``'s heartbeat key, if it did not expire already."""
    client = redis.client()
    for key in client.keys("*"):
        if key.endswith(b"_beats:" + member_id.encode()):
            client.delete(key)


def test_members_see_each_other_and_a_graceful_leave_at_once(
    started: list[Membership],
) -> None:
    # b's lease outlives the test: it can be seen gone only because it left.
    a, c = member(started, "a"), member(started, "c")
    b = member(started, "b", url=url_with_ttl(LONG_TTL))
    watcher = member(started, "cond", join=False)
    for m in (a, b, c, watcher):
        wait_for(lambda m=m: sees(m, {"a", "b", "c"}), DEADLINE, f"{m.member_id} sees a, b, c")
    wait_for(lambda: all(m.can_act() for m in (a, b, c)), DEADLINE, "a, b and c may act")
    b.stop(leave=True)
    started.remove(b)
    # Leaving deletes the entry: no waiting for the lease.
    for m in (a, c, watcher):
        wait_for(lambda m=m: sees(m, {"a", "c"}), DEADLINE, f"{m.member_id} sees b leave")


def test_a_crashed_member_is_gone_once_its_lease_expires(
    redis: FakeRedisServer, started: list[Membership]
) -> None:
    # b's lease outlives its stop (which joins its threads: about a second)
    # however slow a loaded machine makes that.
    a, b = member(started, "a"), member(started, "b", url=url_with_ttl(LONG_TTL))
    for m in (a, b):
        wait_for(lambda m=m: sees(m, {"a", "b"}), DEADLINE, f"{m.member_id} sees a and b")
    lease = beat_key(redis, "b")
    b.stop(leave=False)  # no leave: as after kill -9
    started.remove(b)
    # Stopped without leaving, its lease is left to expire: tooz's stop()
    # would delete it (peers would see a leave, not a crash).
    assert redis.client().pttl(lease) > 0
    time.sleep(0.2)  # a few of a's reads (0.05 s apart): b's entry stays with its lease
    assert sees(a, {"a", "b"})
    redis.client().pexpire(lease, 1)  # time passes: the lease runs out
    wait_for(lambda: sees(a, {"a"}), DEADLINE, "a sees b gone")
    assert not redis.client().exists(lease)
    wait_for(a.can_act, DEADLINE, "a may act")


def test_outage_suspends_then_loses_then_rejoins(
    redis: FakeRedisServer, started: list[Membership], caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    a, b = member(started, "a", clock=clock), member(started, "b", clock=clock)
    for m in (a, b):
        assert m.wait_connected(DEADLINE)
        wait_for(lambda m=m: sees(m, {"a", "b"}), DEADLINE, f"{m.member_id} sees a and b")
    generations = {m.member_id: m.join_generation for m in (a, b)}
    states: dict[str, list[State]] = {"a": [], "b": []}
    for m in (a, b):
        m._on_state_change = lambda _old, new, mid=m.member_id: states[mid].append(new)
    caplog.set_level(logging.DEBUG, logger="hashring")
    redis.stop()
    # Both see the outage (a call failed) before their clock moves on: no
    # beat works from now on, and every one that did started before.
    wait_for(lambda: a.backend_failing and b.backend_failing, DEADLINE, "a and b fail")
    clock.now += 0.75 * TTL
    wait_for(lambda: all(State.SUSPENDED in s for s in states.values()), DEADLINE, "suspended")
    for m in (a, b):
        assert m.state is State.SUSPENDED and not m.can_act()
    clock.now += TTL
    wait_for(lambda: all(State.LOST in s for s in states.values()), DEADLINE, "a and b lost")
    for m in (a, b):
        assert m.state is State.LOST and not m.can_act()
        assert m.backend_failing
    redis.start()
    for m in (a, b):
        wait_for(lambda m=m: m.can_act(), DEADLINE, f"{m.member_id} connected again")
        wait_for(lambda m=m: sees(m, {"a", "b"}), DEADLINE, f"{m.member_id} sees a and b")
        # Suspended first (no beat for half the TTL), then lost (a whole TTL):
        # peers may have seen its lease expire, so it joined again.
        assert states[m.member_id][:3] == [State.SUSPENDED, State.LOST, State.CONNECTED], states
        assert m.join_generation > generations[m.member_id]
        assert not m.backend_failing
    # One WARNING per member when the outage began, one INFO when it ended.
    for mid in ("a", "b"):
        began = [
            r
            for r in caplog.records
            if r.levelno == logging.WARNING
            and r.getMessage().startswith(f"Member {mid}: ")
            and "failed at redis://127.0.0.1:6379" in r.getMessage()
        ]
        assert len(began) == 1, [r.getMessage() for r in caplog.records if r.levelno >= 30]
        assert "emulating a connection error" in began[0].getMessage()
        ended = [r for r in caplog.records if r.getMessage().startswith(f"Member {mid}: redis://")]
        assert len(ended) == 1 and "answers again" in ended[0].getMessage()
    assert "Traceback" not in caplog.text


def test_a_restart_that_lost_the_data_makes_every_member_rejoin(
    redis: FakeRedisServer, started: list[Membership], caplog: pytest.LogCaptureFixture
) -> None:
    """Redis restarted without persistence: the group, every entry and every
    lease are gone, while heartbeats go on working.  Each agent finds the
    group missing, stops acting, re-joins (creating the group) and may act
    again only then; a watcher sees them back."""
    a, b = member(started, "a"), member(started, "b")
    watcher = member(started, "cond", join=False)
    for m in (a, b, watcher):
        wait_for(lambda m=m: sees(m, {"a", "b"}), DEADLINE, f"{m.member_id} sees a and b")
    generations = {m.member_id: m.join_generation for m in (a, b)}
    caplog.set_level(logging.INFO, logger="hashring")
    redis.lose_data()
    for m in (a, b):
        wait_for(
            lambda m=m: m.join_generation > generations[m.member_id] and m.can_act(),
            DEADLINE,
            f"{m.member_id} re-joined",
        )
    wait_for(lambda: sees(watcher, {"a", "b"}), DEADLINE, "the watcher sees a and b again")
    assert "Group redis-unit is gone from redis://127.0.0.1:6379" in caplog.text


def test_lease_expired_while_paused_is_lost_first_then_rejoined(
    redis: FakeRedisServer, started: list[Membership]
) -> None:
    """The process was paused past the TTL (its clock jumps ten TTLs): the
    first state it reads says it may not act, before any of its threads ran;
    its keeper then sees the gap and re-joins (replacing its own entry)."""
    offset = [0.0]

    def clock() -> float:
        return time.monotonic() + offset[0]

    a = member(started, "a", clock=clock)
    b = member(started, "b")
    for m in (a, b):
        wait_for(lambda m=m: sees(m, {"a", "b"}), DEADLINE, f"{m.member_id} sees a and b")
    generation = a.join_generation
    offset[0] = 10 * TTL
    assert a.state is State.LOST and not a.can_act()
    wait_for(lambda: a.join_generation > generation and a.can_act(), DEADLINE, "a re-joined")
    wait_for(lambda: sees(b, {"a", "b"}), DEADLINE, "b sees a")


def test_own_entry_removed_by_a_peer_is_noticed_and_rejoined(
    redis: FakeRedisServer, started: list[Membership]
) -> None:
    """Redis keeps an entry and its lease apart: a reader removes the entries
    whose heartbeat key expired, except its own.  A member whose lease was
    lost (a failover to a replica that missed its last beats) finds itself
    missing from the group, stops acting and re-joins."""
    a, b = member(started, "a"), member(started, "b")
    for m in (a, b):
        wait_for(lambda m=m: sees(m, {"a", "b"}), DEADLINE, f"{m.member_id} sees a and b")
    generation = a.join_generation
    lost: list[State] = []
    a._on_state_change = lambda _old, new: lost.append(new)
    # Its beats succeed but never reach Redis, as in a failover to a replica
    # that missed them: a's own clock says CONNECTED, only the missing entry
    # can tell it otherwise.  Dropped, not delayed: however late this thread
    # runs, the lease is gone once deleted (or expired) and stays gone.  Its
    # re-join waits for the test, which looks at the gap in between.
    dropping, joining, may_join = threading.Event(), threading.Event(), threading.Event()
    dropping.set()
    coordinator = a._coordinator
    beat, join = coordinator.heartbeat, coordinator.join_group

    def held_join(*args: Any, **kwargs: Any) -> Any:
        joining.set()
        may_join.wait(DEADLINE)
        return join(*args, **kwargs)

    coordinator.heartbeat = lambda: None if dropping.is_set() else beat()
    coordinator.join_group = held_join
    try:
        drop_lease(redis, "a")
        wait_for(joining.is_set, DEADLINE, "a finds itself missing and re-joins")
        assert a.state is State.LOST and not a.can_act()
        wait_for(lambda: State.LOST in lost, DEADLINE, "a says it is lost")
        assert a.join_generation == generation
        dropping.clear()
    finally:
        may_join.set()
    wait_for(lambda: a.join_generation > generation, DEADLINE, "a re-joined")
    wait_for(lambda: a.can_act() and sees(b, {"a", "b"}), DEADLINE, "b sees a back")


def test_another_process_with_our_id_wins_and_we_never_act_again(
    started: list[Membership],
) -> None:
    first = member(started, "a")
    assert first.wait_connected(DEADLINE)
    second = member(started, "a")  # a second process with the same host
    assert second.wait_connected(DEADLINE)
    wait_for(lambda: first.superseded_by == second.incarnation, DEADLINE, "first superseded")
    assert first.state is State.LOST and not first.can_act()
    time.sleep(4 * 0.05)  # a few of first's reads: it does not fight back
    assert first.superseded_by == second.incarnation and second.superseded_by is None
    wait_for(second.can_act, DEADLINE, "second may act")


def test_fast_restart_replaces_the_previous_incarnation(started: list[Membership]) -> None:
    peer = member(started, "peer")
    old = member(started, "a")
    wait_for(lambda: sees(peer, {"a", "peer"}), DEADLINE, "peer sees a")
    old.stop(leave=False)  # crashed: its entry and lease remain
    started.remove(old)
    new = member(started, "a")
    assert new.wait_connected(DEADLINE)
    wait_for(
        lambda: (
            peer.view is not None
            and "a" in peer.view.members
            and peer.view.members["a"].capabilities.get("incarnation") == new.incarnation
        ),
        DEADLINE,
        "peer sees the new incarnation",
    )
    assert new.superseded_by is None


def test_a_redis_socket_timeout_follows_the_ttl() -> None:
    """A hung Redis must fail a heartbeat within one beat, not after
    redis-py's 30 s: ringfleet sets the socket timeouts unless the URL does."""
    assert tooz_url(URL, TTL) == (
        URL + "&socket_timeout=0.5&socket_connect_timeout=0.5&executor=sync"
    )
    assert tooz_url("redis://h?membership_timeout=10", 10) == (
        "redis://h?membership_timeout=10&socket_timeout=2.5&socket_connect_timeout=2.5"
        "&executor=sync"
    )
    mine = "redis://h?membership_timeout=10&socket_timeout=1"
    assert tooz_url(mine, 10) == mine + "&socket_connect_timeout=2.5&executor=sync"
    mine = "etcd3+http://h:2379?membership_timeout=10&timeout=7"
    # The URL's own request timeout wins.
    assert tooz_url(mine, 10) == mine + "&executor=sync"
    assert tooz_url("file:///tmp/x", 10) == "file:///tmp/x?executor=sync"


def test_tooz_runs_the_membership_calls_in_the_caller() -> None:
    """No thread of tooz's own per member (the membership waits for every
    answer at once); an executor the URL names stays."""
    assert tooz_url("etcd3+http://h:2379?timeout=5", 10).endswith("&executor=sync")
    mine = "etcd3+http://h:2379?timeout=5&executor=threaded"
    assert tooz_url(mine, 10) == mine


@pytest.mark.parametrize(
    ("url", "ttl", "tooz"),
    [
        # The lease TTL stays 10 s; each request waits 5 s at most.
        (
            "etcd3+http://h:2379?membership_timeout=10",
            10,
            "etcd3+http://h:2379?membership_timeout=10&lock_timeout=30&timeout=5&executor=sync",
        ),
        # No TTL in the URL: tooz's default (30 s) stays, pinned, requests 15 s.
        (
            "etcd3+https://h:2379",
            30,
            "etcd3+https://h:2379?membership_timeout=30&lock_timeout=30&timeout=15&executor=sync",
        ),
        # TTL 3 (the tests'): 2 s, whole seconds as tooz reads them.
        (
            "etcd3+http://h:2379?membership_timeout=3&lock_timeout=4",
            3,
            "etcd3+http://h:2379?membership_timeout=3&lock_timeout=4&timeout=2&executor=sync",
        ),
    ],
)
def test_an_etcd_request_timeout_follows_the_ttl(url: str, ttl: float, tooz: str) -> None:
    """A hung etcd must fail a heartbeat within half the TTL, not after
    tooz's 30 s, and the lease TTL must not change with it."""
    assert tooz_url(url, ttl) == tooz
    assert ttl_from_url(tooz) == ttl


def test_a_quiet_group_is_read_in_full_only_when_it_changed(
    redis: FakeRedisServer, started: list[Membership], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between changes a member reads the group's signature only (the
    server's digest); a change (an announcement, a lease run out) is seen
    at the next read, and a server that forgot the script is sent it again."""
    from tooz.drivers.redis import RedisDriver  # noqa: PLC0415 (loaded by the fixture's URL)

    # Long leases: one that lapsed on a loaded machine is a change.
    a, b = (member(started, name, url=url_with_ttl(LONG_TTL)) for name in ("a", "b"))
    wait_for(lambda: sees(a, {"a", "b"}) and sees(b, {"a", "b"}), DEADLINE, "a and b see both")
    reads = {"full": 0}
    original = RedisDriver.get_members_with_capabilities

    def counted(self: RedisDriver, group_id: bytes) -> object:
        reads["full"] += 1
        return original(self, group_id)

    monkeypatch.setattr(RedisDriver, "get_members_with_capabilities", counted)

    def no_full_read_for(seconds: float) -> bool:
        before = reads["full"]
        time.sleep(seconds)
        return reads["full"] == before

    # A read of the last change may still be under way when both see both
    # (the test failed once in CI on that one read): quiet is a window with
    # no full read, and then none comes while nothing changes.
    wait_for(lambda: no_full_read_for(0.3), DEADLINE, "no full read for 0.3 s")
    reads["full"] = 0
    time.sleep(0.5)  # about ten reads each, nothing changing
    assert reads["full"] == 0
    redis.client().script_flush()
    b.announce("serving", False)
    wait_for(
        lambda: a.view is not None and a.view.members["b"].capabilities.get("serving") is False,
        DEADLINE,
        "a sees b's announcement",
    )
    b.stop(leave=False)  # as after kill -9: its entry stays...
    started.remove(b)
    drop_lease(redis, "b")  # ...and its lease runs out: no entry changed, its lease did
    wait_for(lambda: sees(a, {"a"}), DEADLINE, "a sees b gone")
    assert reads["full"] >= 2
