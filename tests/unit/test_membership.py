# SPDX-License-Identifier: Apache-2.0
"""Unit tests of hashring.membership with a fake tooz coordinator and clock.

The real backends are exercised in tests/functional; here the coordinator
is scripted so that each state rule can be driven to its edge.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tooz import coordination

from hashring.backend_url import ttl_from_url
from hashring.exceptions import MembershipError
from hashring.membership import Membership, MembershipView, State


class _Result:
    def __init__(self, fn: Callable[[], Any]) -> None:
        self._fn = fn

    def get(self) -> Any:
        return self._fn()


class FakeBackend:
    """One shared group store, standing in for etcd."""

    def __init__(self) -> None:
        self.groups: dict[bytes, dict[bytes, dict[str, Any]]] = {}
        self.heartbeat_error: Exception | None = None
        self.read_error: Exception | None = None
        self.start_error: Exception | None = None
        self.join_error: Exception | None = None
        self.starts = 0
        self.joins = 0
        self.join_tries = 0
        self.reads = 0
        # When set, joins wait for it: a join that takes a while (a slow or
        # just restarted etcd member), during which the group is read.
        self.join_gate: threading.Event | None = None
        self.lock = threading.Lock()


class FakeCoordinator:
    def __init__(self, backend: FakeBackend, member_id: bytes) -> None:
        self.backend = backend
        self.member_id = member_id

    def start(self, start_heart: bool = False) -> None:
        assert not start_heart  # the membership beats by itself
        self.backend.starts += 1
        if self.backend.start_error is not None:
            raise self.backend.start_error

    def stop(self) -> None:
        pass

    def heartbeat(self) -> float:
        if self.backend.heartbeat_error is not None:
            raise self.backend.heartbeat_error
        return 1.0

    def create_group(self, group: bytes) -> _Result:
        def run() -> None:
            if group in self.backend.groups:
                raise coordination.GroupAlreadyExist(group)
            self.backend.groups[group] = {}

        return _Result(run)

    def join_group(self, group: bytes, caps: dict[str, Any]) -> _Result:
        def run() -> None:
            gate = self.backend.join_gate
            if gate is not None:
                assert gate.wait(10)
            with self.backend.lock:
                self.backend.join_tries += 1
                if self.backend.join_error is not None:
                    raise self.backend.join_error
                members = self.backend.groups[group]
                if self.member_id in members:
                    raise coordination.MemberAlreadyExist(group, self.member_id)
                members[self.member_id] = dict(caps)
                self.backend.joins += 1

        return _Result(run)

    def leave_group(self, group: bytes) -> _Result:
        def run() -> None:
            with self.backend.lock:
                if self.backend.groups[group].pop(self.member_id, None) is None:
                    raise coordination.MemberNotJoined(group, self.member_id)

        return _Result(run)

    def update_capabilities(self, group: bytes, caps: dict[str, Any]) -> _Result:
        def run() -> None:
            with self.backend.lock:
                members = self.backend.groups[group]
                if self.member_id not in members:
                    raise coordination.MemberNotJoined(group, self.member_id)
                members[self.member_id] = dict(caps)

        return _Result(run)

    def get_members_with_capabilities(self, group: bytes) -> _Result:
        def run() -> dict[bytes, dict[str, Any]]:
            with self.backend.lock:
                self.backend.reads += 1
                if self.backend.read_error is not None:
                    raise self.backend.read_error
                return dict(self.backend.groups[group])

        return _Result(run)

    def get_member_capabilities(self, group: bytes, member: bytes) -> _Result:
        return _Result(lambda: self.backend.groups[group][member])


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def backend(monkeypatch: pytest.MonkeyPatch) -> FakeBackend:
    store = FakeBackend()
    monkeypatch.setattr(
        coordination,
        "get_coordinator",
        lambda url, member_id: FakeCoordinator(store, member_id),
    )
    return store


@pytest.fixture
def started() -> Iterator[list[Membership]]:
    members: list[Membership] = []
    yield members
    for m in members:
        m.stop()


URL = "etcd3+http://127.0.0.1:2379?membership_timeout=8"
GROUP = b"ringfleet-compute"


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.01)


def make(started: list[Membership], member_id: str = "agent-1", **kwargs: Any) -> Membership:
    m = Membership(URL, member_id, watch_interval=0.02, **kwargs)
    started.append(m)
    m.start()
    return m


def test_state_follows_the_last_successful_heartbeat(
    backend: FakeBackend, started: list[Membership]
) -> None:
    clock = FakeClock()
    transitions: list[tuple[State, State]] = []
    m = make(started, clock=clock, on_state_change=lambda o, n: transitions.append((o, n)))
    assert m.wait_connected(5)
    backend.heartbeat_error = ConnectionError("etcd unreachable")
    beat = m._last_beat
    assert beat is not None
    clock.now = beat + m.ttl / 2  # exactly half the TTL: still fine
    assert m.state is State.CONNECTED and m.can_act()
    clock.now = beat + m.ttl / 2 + 0.01
    assert m.state is State.SUSPENDED and not m.can_act()
    clock.now = beat + m.ttl + 0.01
    assert m.state is State.LOST
    wait_until(
        lambda: (
            (State.SUSPENDED, State.LOST) in transitions
            or (State.CONNECTED, State.LOST) in transitions
        )
    )
    # The backend comes back after the lease expired: the member re-joins.
    backend.heartbeat_error = None
    joins = backend.joins
    wait_until(lambda: m.state is State.CONNECTED)
    assert backend.joins == joins + 1
    assert transitions[-1][1] is State.CONNECTED


def _keeper_waits(m: Membership) -> list[float]:
    """Each wait the keeper makes between two beats from now on, in seconds."""
    waits: list[float] = []
    real_wait = m._wake_keeper.wait

    def wait(timeout: float | None = None) -> bool:
        waits.append(float(timeout or 0.0))
        return real_wait(timeout)

    m._wake_keeper.wait = wait  # type: ignore[method-assign]
    return waits


def test_a_failed_beat_is_tried_again_soon_not_a_beat_interval_later(
    backend: FakeBackend, started: list[Membership]
) -> None:
    """A beat that timed out took TTL/2 already (an etcd election behind a
    gateway): the next must come at once, or the lease runs out while the
    back end is fine again.  A beat that worked waits the interval."""
    m = make(started)
    assert m.wait_connected(5)
    waits = _keeper_waits(m)
    backend.heartbeat_error = ConnectionError("etcd: election in progress")
    m._wake_keeper.set()
    wait_until(lambda: len(waits) >= 2)
    assert m.ttl / 4 == 2.0 and all(w <= 0.25 for w in waits[:2]), waits
    backend.heartbeat_error = None
    count = len(waits)
    wait_until(lambda: len(waits) >= count + 2)
    assert waits[-1] == m.ttl / 4, waits


def test_a_slow_beat_is_followed_by_another_at_once(
    backend: FakeBackend, started: list[Membership]
) -> None:
    """A beat sent during a freeze and answered at its end renewed the lease
    as of its sending, long ago: the member beats again at once rather than
    be SUSPENDED until the next interval."""
    clock = FakeClock()
    m = make(started, clock=clock)
    assert m.wait_connected(5)
    waits = _keeper_waits(m)
    coordinator = m._coordinator
    assert coordinator is not None
    quick = coordinator.heartbeat
    slow = [True]

    def heartbeat() -> float:
        if slow and slow.pop():
            clock.now += m.ttl / 2  # answered at the thaw
        return quick()

    coordinator.heartbeat = heartbeat
    m._wake_keeper.set()
    wait_until(lambda: len(waits) >= 2)
    assert waits[:2] == [0.0, m.ttl / 4], waits


def test_a_suspension_just_after_an_outage_ended_is_info_not_a_second_warning(
    backend: FakeBackend, started: list[Membership], caplog: pytest.LogCaptureFixture
) -> None:
    """A beat sent during the outage and answered at its end is old: the
    member may be SUSPENDED within a TTL of the outage's end.  The outage's
    WARNING said it; later, the same change is a WARNING again."""
    clock = FakeClock()
    m = make(started, clock=clock)
    assert m.wait_connected(5)
    caplog.set_level(logging.INFO, logger="hashring")
    m._outage.failed("heartbeat", ConnectionError("etcd frozen"))
    m._outage.succeeded("heartbeat")  # it answers again
    beat = m._last_beat
    assert beat is not None
    clock.now = beat + m.ttl / 2 + 0.01
    m._report_state()
    said = [
        (r.levelname, r.getMessage()) for r in caplog.records if "-> suspended" in r.getMessage()
    ]
    assert [level for level, _ in said] == ["INFO"], said
    clock.now = beat
    m._report_state()  # connected again
    m._outage._ended = time.monotonic() - m.ttl - 1  # the outage long over
    clock.now = beat + m.ttl / 2 + 0.01
    caplog.clear()
    m._report_state()
    said = [
        (r.levelname, r.getMessage()) for r in caplog.records if "-> suspended" in r.getMessage()
    ]
    assert [level for level, _ in said] == ["WARNING"], said


def _etcd_unreachable() -> coordination.ToozConnectionError:
    """What tooz raises when etcd is away: no message, the reason in its cause."""
    try:
        try:
            raise ConnectionRefusedError(111, "Connection refused")
        except ConnectionRefusedError as exc:
            raise coordination.ToozConnectionError("") from exc
    except coordination.ToozConnectionError as error:
        return error


def test_a_backend_outage_is_one_warning_in_words_then_one_info_when_it_ends(
    backend: FakeBackend, started: list[Membership], caplog: pytest.LogCaptureFixture
) -> None:
    m = make(started)
    assert m.wait_connected(5)
    caplog.set_level(logging.DEBUG, logger="hashring")
    reads = backend.reads
    backend.read_error = backend.heartbeat_error = _etcd_unreachable()
    m._wake_keeper.set()  # a heartbeat now, not in TTL/4
    wait_until(lambda: backend.reads > reads + 10)  # the group read fails every 20 ms
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings  # whichever failed first
    action = "heartbeat" if "heartbeat" in warnings[0] else "reading group ringfleet-compute"
    assert warnings[0] == (
        f"Member agent-1: {action} failed at etcd3+http://127.0.0.1:2379: "
        "ToozConnectionError <- ConnectionRefusedError: [Errno 111] Connection refused; "
        "retrying (repeats logged at debug level until it answers)"
    )
    backend.read_error = backend.heartbeat_error = None
    m._wake_keeper.set()
    wait_until(lambda: any("answers again" in r.getMessage() for r in caplog.records))
    infos = [r for r in caplog.records if "answers again" in r.getMessage()]
    assert len(infos) == 1 and infos[0].levelno == logging.INFO
    assert (
        infos[0]
        .getMessage()
        .startswith("Member agent-1: etcd3+http://127.0.0.1:2379 answers again (failures for ")
    )


def test_two_memberships_sharing_their_outage_say_it_once_and_its_end_once(
    backend: FakeBackend, started: list[Membership], caplog: pytest.LogCaptureFixture
) -> None:
    """A conductor's two groups on one etcd (the agents' it watches, its
    peers' it joins): one WARNING and one INFO for the process, and one
    group answering again does not end the other's failure."""
    watcher = Membership(URL, "conductor.cond-1", watch_interval=0.02, join=False)
    started.append(watcher)
    peer = Membership(
        URL, "cond-1", group="ringfleet-conductors", watch_interval=0.02, outage=watcher.outage
    )
    started.append(peer)
    watcher.start()
    peer.start()
    assert peer.wait_connected(5)
    caplog.set_level(logging.DEBUG, logger="hashring")
    reads = backend.reads
    backend.read_error = backend.heartbeat_error = _etcd_unreachable()
    peer._wake_keeper.set()
    wait_until(lambda: backend.reads > reads + 10)
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert watcher.backend_failing and peer.backend_failing
    backend.read_error = None  # the reads answer, the heartbeats still fail
    wait_until(lambda: backend.reads > reads + 30)
    assert not any("answers again" in r.getMessage() for r in caplog.records)
    assert peer.backend_failing
    backend.heartbeat_error = None
    peer._wake_keeper.set()
    wait_until(lambda: any("answers again" in r.getMessage() for r in caplog.records))
    infos = [r for r in caplog.records if "answers again" in r.getMessage()]
    assert len(infos) == 1 and infos[0].levelno == logging.INFO


def test_a_backend_away_at_start_is_one_warning_not_a_traceback_each_beat(
    backend: FakeBackend, started: list[Membership], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="hashring")
    backend.start_error = _etcd_unreachable()
    # TTL 1 s: a connection attempt every 0.25 s.
    m = Membership(URL.replace("=8", "=1"), "agent-1", watch_interval=0.02)
    started.append(m)
    m.start()
    wait_until(lambda: backend.starts >= 3)
    loud = [(r.levelno, r.getMessage()) for r in caplog.records if r.levelno >= logging.WARNING]
    assert loud == [
        (
            logging.WARNING,
            "Member agent-1: connecting failed at etcd3+http://127.0.0.1:2379: "
            "ToozConnectionError <- ConnectionRefusedError: [Errno 111] Connection refused; "
            "retrying (repeats logged at debug level until it answers)",
        )
    ]
    # What a service waiting for the group asks before a WARNING of its own.
    assert m.backend_failing
    backend.start_error = None
    assert m.wait_connected(5)
    assert any("answers again" in r.getMessage() for r in caplog.records)
    assert not m.backend_failing


def test_never_joined_is_lost(backend: FakeBackend) -> None:
    m = Membership(URL, "agent-1")
    assert m.state is State.LOST
    assert not m.can_act()


def test_missing_from_the_group_rejoins(backend: FakeBackend, started: list[Membership]) -> None:
    m = make(started)
    assert m.wait_connected(5)
    joins = backend.joins
    with backend.lock:
        del backend.groups[GROUP][b"agent-1"]  # as if the lease had expired
    wait_until(lambda: backend.joins == joins + 1)
    wait_until(lambda: m.state is State.CONNECTED and b"agent-1" in backend.groups[GROUP])


def test_a_join_the_back_end_refuses_is_said_once_and_tried_again(
    backend: FakeBackend, started: list[Membership], caplog: pytest.LogCaptureFixture
) -> None:
    """The lease the beat just renewed expired before the join used it (a
    process starved of CPU past its TTL): etcd says "Not Found".  One
    WARNING, no traceback per try, and the member joins once it can."""
    caplog.set_level(logging.DEBUG, logger="hashring")
    m = make(started)
    assert m.wait_connected(5)
    joins = backend.joins
    backend.join_error = coordination.ToozError("Not Found")
    with backend.lock:
        tries = backend.join_tries
        del backend.groups[GROUP][b"agent-1"]  # the lease expired
    wait_until(lambda: backend.join_tries >= tries + 3)
    assert m.state is not State.CONNECTED and backend.joins == joins
    backend.join_error = None
    wait_until(lambda: backend.joins == joins + 1 and m.state is State.CONNECTED)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    refused = [text for text in said if "joining failed" in text]
    assert len(refused) == 1 and "Not Found" in refused[0], said
    assert any("answers again" in r.getMessage() for r in caplog.records)


def test_no_view_without_this_member_is_published_while_it_re_joins(
    backend: FakeBackend, started: list[Membership]
) -> None:
    """The etcd member in use came back after longer than the TTL: our lease
    is gone and we re-join.  The group read meanwhile lacks us; an agent
    acting on it released all its unpinned nodes (agent -> none -> agent)."""
    clock = FakeClock()
    views: list[MembershipView] = []
    with backend.lock:
        backend.groups[GROUP] = {b"peer": {"ring_version": 1, "weight": 1.0}}
    m = make(started, clock=clock, on_change=views.append)
    assert m.wait_connected(5)
    assert views and "agent-1" in views[-1].members
    generation = m.join_generation
    gate = threading.Event()
    backend.join_gate = gate
    with backend.lock:
        del backend.groups[GROUP][b"agent-1"]  # the lease expired in etcd
        reads = backend.reads
    clock.now += m.ttl * 2  # no heartbeat got through for two TTLs
    # The group is read several times while the re-join is under way.
    wait_until(lambda: backend.reads >= reads + 5)
    gate.set()
    wait_until(lambda: m.join_generation == generation + 1 and m.can_act())
    wait_until(lambda: backend.reads >= reads + 10)  # views after the re-join too
    absent = [sorted(v.members) for v in views if "agent-1" not in v.members]
    assert absent == []
    assert m.view is not None and set(m.view.members) == {"agent-1", "peer"}


def test_a_member_that_cannot_serve_steps_aside_and_back(
    backend: FakeBackend, started: list[Membership], caplog: pytest.LogCaptureFixture
) -> None:
    """Alive but unable to serve: out of the group (its peers take its share
    as for a dead member), LOST meanwhile, and in again with a new join
    generation (what it holds is re-read) once it serves."""
    peer = make(started, "agent-2")
    m = make(started)
    assert m.wait_connected(5) and peer.wait_connected(5)
    wait_until(lambda: peer.view is not None and "agent-1" in peer.view.members)
    generation = m.join_generation
    caplog.set_level(logging.INFO, logger="hashring")
    m.step_aside("no answer over the broker for 12 s")
    m.step_aside("said twice")  # stepping aside twice is once
    wait_until(lambda: b"agent-1" not in backend.groups[GROUP])
    wait_until(lambda: peer.view is not None and "agent-1" not in peer.view.members)
    assert m.state is State.LOST and not m.can_act()
    assert m.aside == "no answer over the broker for 12 s"
    m._wake_keeper.set()  # more beats: it stays out
    time.sleep(0.1)
    assert b"agent-1" not in backend.groups[GROUP]
    assert m.announce("serving", False) is False  # out of the group: kept for the join
    m.step_back()
    wait_until(lambda: m.state is State.CONNECTED)
    assert backend.groups[GROUP][b"agent-1"]["serving"] is False
    assert m.announce("serving", True) is True
    wait_until(
        lambda: (
            peer.view is not None
            and peer.view.members.get("agent-1") is not None
            and peer.view.members["agent-1"].capabilities.get("serving") is True
        )
    )
    assert m.join_generation == generation + 1 and m.aside is None
    wait_until(lambda: peer.view is not None and "agent-1" in peer.view.members)
    said = [
        r for r in caplog.records if r.name == "hashring.membership" and "agent-1" in r.getMessage()
    ]
    assert not [r for r in said if r.levelno >= logging.WARNING], said  # deliberate
    assert any("while it cannot serve" in r.getMessage() for r in said)


def test_stale_entry_of_a_previous_incarnation_is_replaced(
    backend: FakeBackend, started: list[Membership]
) -> None:
    backend.groups[GROUP] = {b"agent-1": {"incarnation": "old", "ring_version": 1}}
    m = make(started)
    assert m.wait_connected(5)
    assert backend.groups[GROUP][b"agent-1"]["incarnation"] == m.incarnation


def test_superseded_by_another_process_stops_acting_for_good(
    backend: FakeBackend, started: list[Membership]
) -> None:
    m = make(started)
    assert m.wait_connected(5)
    joins = backend.joins
    with backend.lock:
        backend.groups[GROUP][b"agent-1"] = {
            **backend.groups[GROUP][b"agent-1"],
            "incarnation": "newer",
        }
    wait_until(lambda: m.superseded_by == "newer")
    assert m.state is State.LOST
    time.sleep(0.2)
    assert backend.joins == joins  # it does not fight the newer process
    assert backend.groups[GROUP][b"agent-1"]["incarnation"] == "newer"


def test_views_exclude_other_ring_versions_and_bad_weights(
    backend: FakeBackend, started: list[Membership]
) -> None:
    views: list[MembershipView] = []
    backend.groups[GROUP] = {
        b"v2": {"ring_version": 2, "weight": 1.0},
        b"heavy": {"ring_version": 1, "weight": -3},
        b"nocaps": None,  # type: ignore[dict-item]
        b"peer": {"ring_version": 1, "weight": 2.0},
    }
    m = make(started, on_change=views.append)
    wait_until(lambda: bool(views) and "agent-1" in views[-1].members)
    view = views[-1]
    assert set(view.members) == {"agent-1", "peer"}
    assert view.weights == {"agent-1": 1.0, "peer": 2.0}
    assert set(view.excluded) == {"v2", "heavy", "nocaps"}
    assert "ring version 2" in view.excluded["v2"]
    assert "> 0" in view.excluded["heavy"]
    assert view.ring().members == {"agent-1": 1.0, "peer": 2.0}
    count = len(views)
    time.sleep(0.2)
    assert len(views) == count  # no change, no callback
    with backend.lock:
        del backend.groups[GROUP][b"peer"]
    wait_until(lambda: set(views[-1].members) == {"agent-1"})
    assert m.view is views[-1]


def test_a_failing_callback_does_not_stop_the_watch(
    backend: FakeBackend, started: list[Membership]
) -> None:
    calls: list[int] = []

    def broken(view: MembershipView) -> None:
        calls.append(len(view.members))
        raise RuntimeError("bug in the caller")

    make(started, on_change=broken)
    wait_until(lambda: calls[-1:] == [1])
    with backend.lock:
        backend.groups[GROUP][b"peer"] = {"ring_version": 1, "weight": 1.0}
    wait_until(lambda: calls[-1:] == [2])


def test_observer_does_not_join(backend: FakeBackend, started: list[Membership]) -> None:
    backend.groups[GROUP] = {b"peer": {"ring_version": 1, "weight": 1.0}}
    m = make(started, "conductor-1", join=False)
    assert m.wait_connected(5)
    assert set(m.view.members) == {"peer"}  # type: ignore[union-attr]
    assert b"conductor-1" not in backend.groups[GROUP]


def test_read_soon_reads_the_group_before_the_watch_interval(
    backend: FakeBackend, started: list[Membership]
) -> None:
    """A conductor told by an agent that a member left reads the group at
    once, not at its next interval."""
    backend.groups[GROUP] = {b"peer": {"ring_version": 1, "weight": 1.0}}
    m = make(started, "conductor-1", join=False)
    assert m.wait_connected(5)
    m._watch_interval = 3600.0  # from its next wait on, only a wake-up reads
    time.sleep(0.1)  # that wait begun
    with backend.lock:
        del backend.groups[GROUP][b"peer"]
    m.read_soon()
    wait_until(lambda: m.view is not None and not m.view.members)


def test_stop_leaves_the_group(backend: FakeBackend) -> None:
    m = Membership(URL, "agent-1", watch_interval=0.02)
    m.start()
    assert m.wait_connected(5)
    m.stop()
    assert b"agent-1" not in backend.groups[GROUP]
    assert m.state is State.LOST


def test_start_twice_is_refused(backend: FakeBackend, started: list[Membership]) -> None:
    m = make(started)
    with pytest.raises(MembershipError, match="already started"):
        m.start()


@pytest.mark.parametrize(
    ("url", "ttl"),
    [
        ("etcd3+http://h:2379", 30.0),
        ("etcd3+https://h:2379?timeout=7", 7.0),
        ("etcd3+http://h:2379?timeout=7&membership_timeout=3", 3.0),
        ("file:///tmp/x?timeout=2", 2.0),
        ("file:///tmp/x", 10.0),
        ("redis://h:6379", 30.0),
        ("redis://h:6379?timeout=5", 5.0),
        ("redis://h:6379?timeout=5&membership_timeout=2.5", 2.5),
    ],
)
def test_ttl_from_url(url: str, ttl: float) -> None:
    assert ttl_from_url(url) == ttl


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"backend_url": "memcached://h"}, "backend_url"),
        ({"backend_url": "etcd3+http://h?membership_timeout=0"}, "backend_url"),
        ({"backend_url": "etcd3+http://h?timeout=soon"}, "backend_url"),
        ({"member_id": ""}, "member_id"),
        ({"member_id": " a"}, "member_id"),
        ({"weight": 0}, "weight"),
        ({"weight": float("nan")}, "weight"),
        ({"ring_version": 0}, "ring_version"),
        ({"watch_interval": 5}, "watch_interval"),
        ({"watch_interval": 0}, "watch_interval"),
        ({"group": ""}, "group"),
    ],
)
def test_bad_parameters_name_the_field(kwargs: dict[str, Any], field: str) -> None:
    args: dict[str, Any] = {"backend_url": URL, "member_id": "agent-1", **kwargs}
    with pytest.raises(MembershipError) as err:
        Membership(args.pop("backend_url"), args.pop("member_id"), **args)
    assert err.value.field == field
    assert field in str(err.value)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("etcd3+http://127.0.0.1:2379,127.0.0.1:22379", "etcd gateway start --endpoints="),
        ("etcd3+http://a:2379,b:2379?membership_timeout=3", "several etcd endpoints"),
        ("etcd3+https://a:2379;b:2379", "several etcd endpoints"),
        ("etcd3+http://h:99999", "1..65535"),
        ("etcd3+http://h:0", "1..65535"),
        ("etcd3+http://h:port", "1..65535"),
        ("etcd3+http://user:secret@h:2379", "credentials"),
        ("etcd3+http://h:2379?membership_timeout=2.5", "whole number"),
        ("etcd3+http://h:2379?lock_timeout=x", "whole number"),
        ("etcd3://h:2379", "unsupported scheme"),
        ("etcd3gw://h:2379", "unsupported scheme"),
        ("file://", "needs a directory"),
        ("redis://a:6379,b:6379", "sentinel_fallback=S2:26379"),
        ("redis://h:6379?timeout=1.5", "whole number"),
        ("redis://h:6379?membership_timeout=0", "number of seconds > 0"),
        ("redis://h:6379?socket_timeout=soon", "number of seconds > 0"),
        ("redis://h:26379?sentinel=m&sentinel_fallback=h2", "HOST:PORT"),
        ("redis://h:26379?sentinel_fallback=h2:26379", "needs sentinel=NAME"),
        ("redis:///var/run/redis.sock", "needs a host"),
        ("rediss://h:6379", "unsupported scheme"),
    ],
)
def test_an_unusable_backend_url_is_refused_at_construction(url: str, says: str) -> None:
    """tooz would accept these and fail at every connection attempt, forever."""
    with pytest.raises(MembershipError) as err:
        Membership(url, "agent-1")
    assert err.value.field == "backend_url"
    assert says in err.value.reason


@pytest.mark.parametrize(
    "url",
    [
        "etcd3+http://127.0.0.1:2379?membership_timeout=10",
        "etcd3+https://etcd.example.org:2379",
        "etcd3+http://[::1]:2379",
        "etcd3+http://localhost",
        "file:///tmp/x?timeout=2",
        "redis://127.0.0.1:6379?membership_timeout=10&timeout=2",
        "redis://:secret@redis.example.org:6379?membership_timeout=10",
        "redis://s1:26379?sentinel=ringfleet&sentinel_fallback=s2:26379"
        "&sentinel_fallback=s3:26379&membership_timeout=10",
    ],
)
def test_a_usable_backend_url_is_accepted(url: str) -> None:
    Membership(url, "agent-1")


def test_a_pause_past_the_ttl_is_reported_as_lost_before_the_rejoin(
    backend: FakeBackend, started: list[Membership]
) -> None:
    """Even when the keeper sees the gap and re-joins in one go (the other
    threads still asleep), callers are told LOST and see a new generation."""
    clock = FakeClock()
    transitions: list[tuple[State, State]] = []
    m = make(started, clock=clock, on_state_change=lambda o, n: transitions.append((o, n)))
    assert m.wait_connected(5)
    generation = m.join_generation
    assert generation == 1
    clock.now += m.ttl * 3  # a SIGSTOP: every heartbeat since then missed
    wait_until(lambda: m.join_generation == generation + 1)
    wait_until(lambda: bool(transitions) and transitions[-1][1] is State.CONNECTED)
    lost = [i for i, (_, new) in enumerate(transitions) if new is State.LOST]
    assert lost, transitions
    assert transitions[lost[-1] + 1 :][-1] == (State.LOST, State.CONNECTED)


def test_a_view_gives_the_address_each_member_announces(
    backend: FakeBackend, started: list[Membership]
) -> None:
    views: list[MembershipView] = []
    m = make(started, capabilities={"host_ip": "192.0.2.5"}, on_change=views.append)
    assert m.wait_connected(5)
    version = m._capabilities["ring_version"]
    backend.groups[GROUP][b"garbled"] = {"ring_version": version, "host_ip": "192.0.2.300"}
    backend.groups[GROUP][b"older"] = {"ring_version": version}  # announces none
    backend.groups[GROUP][b"v6"] = {"ring_version": version, "host_ip": "2001:DB8::1"}
    wait_until(lambda: bool(views) and len(views[-1].members) == 4)
    assert views[-1].host_ips() == {"agent-1": "192.0.2.5", "v6": "2001:db8::1"}
    assert views[-1].members["garbled"].host_ip is None
