# SPDX-License-Identifier: Apache-2.0
"""One etcd member is not the cluster: losing any one member of three changes nothing.

A real 3-member etcd cluster on 127.0.0.1, an ``etcd gateway`` in front of
it (the supported set-up, docs/operations.rst "An etcd cluster"), and a
fleet (one conductor, three agents) that talks to the gateway only, under a
steady stream of builds and deletes
(:class:`tests.functional.test_chaos.Load`).  Two faults, one after the
other:

1. kill -9 of the member the gateway forwards most connections to, for
   longer than the TTL (then it is started again: a cluster of three needs
   two for a quorum);
2. kill -9 of the leader.

The fleet's ``membership_timeout`` is 6 s here, not the 3 s of the other
fleet tests: TTL/2 must exceed a leader election for the loss of the
leader to go unnoticed (the operations guide's advice).  On this 2-core
machine, loaded, an election with etcd's default timings sometimes blocked
lease renewals past 3 s, so with a 3 s TTL services went LOST now and then
(2 runs in 7).

Then, once the load stopped and the fleet settled:

* no node changed owner or epoch (no release and re-claim, no take-over);
* no service's membership went LOST: at most SUSPENDED for a moment
  (measured 0.04-0.8 s at this TTL over both faults, docs/dependency-facts.rst
  "An etcd cluster and the gateway"), so no agent re-joined and no node action was fenced off for
  longer than that;
* every build of the stream ended ACTIVE (none ERROR), every delete
  DELETED, with the consistency checks of the chaos suite.

The durations of the suspensions are printed, not asserted: a loaded
machine may stretch them, the absence of LOST is the behaviour.
"""

from __future__ import annotations

import datetime
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dbutil import migrated
from tests.functional.etcd_cluster import EtcdCluster
from tests.functional.fleet_harness import TTL, Fleet, log_tails, start_processes
from tests.functional.test_chaos import EXTRA_CONFIG, SETTLE, STEP_DURATION, Load, problems, summary
from tests.harness import wait_for

NODES = 36
AGENTS = ("agent-1", "agent-2", "agent-3")
WARMUP = 4.0
#: the gateway test's membership_timeout (see the module doc)
GATEWAY_TTL = 6
#: a member stays dead past the TTL: a lease that depended on it expires
DOWN = TTL + 2.0
GATEWAY_DOWN = GATEWAY_TTL + 2.0
#: the stream: builds go on for this long at most (the faults take ~15 s)
LOAD_SECONDS = 35.0

_TRANSITION = re.compile(
    r"^(\S+ \S+) .*Membership of (\S+) in group \S+: (\w+) -> (\w+)", re.MULTILINE
)


def _transitions(text: str) -> list[tuple[datetime.datetime, str, str, str]]:
    """(time, member, old state, new state) of every membership state change logged."""
    return [
        (datetime.datetime.fromisoformat(stamp), member, old, new)
        for stamp, member, old, new in _TRANSITION.findall(text)
    ]


def _suspensions(
    transitions: list[tuple[datetime.datetime, str, str, str]],
) -> list[tuple[datetime.datetime, float]]:
    """(start, seconds) of each suspension (until CONNECTED again)."""
    spans = []
    since = None
    for stamp, _member, _old, new in transitions:
        if new == "suspended" and since is None:
            since = stamp
        elif new == "connected" and since is not None:
            spans.append((since, (stamp - since).total_seconds()))
            since = None
    return spans


@pytest.fixture
def cluster() -> Iterator[EtcdCluster]:
    etcd = EtcdCluster()
    try:
        etcd.start()
        yield etcd
    finally:
        etcd.stop()


@pytest.fixture
def fleet(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    pg_url: str,
    transport_url: str,
    cluster: EtcdCluster,
) -> Iterator[Fleet]:
    """The fleet on the gateway (TTL :data:`GATEWAY_TTL`), or (``indirect``
    param ``"m0"``) straight on member m0 (TTL 3 s)."""
    member = getattr(request, "param", None)
    url = cluster.url if member is None else cluster.member_url(cluster.names.index(member))
    migrated(pg_url).dispose()
    f = Fleet(
        tmp_path,
        db_url=pg_url,
        transport_url=transport_url,
        etcd_url=url,
        step_duration=STEP_DURATION,
    )
    f.common += EXTRA_CONFIG
    if member is None:
        # A later value of an option overrides an earlier one.
        f.common += f"[coordination]\nbackend_url = {url}?membership_timeout={GATEWAY_TTL}\n"
    try:
        start_processes(f, ("cond-1",), AGENTS)
        f.api.import_nodes(
            [{"name": f"node-{i:03d}", "resource_class": "baremetal"} for i in range(NODES)]
        )
        f.api.create_flavor({"name": "small", "resource_class": "baremetal"})
        wait_for(lambda: set(f.owned_by()) == set(AGENTS), 30, "the agents partition the nodes")
        ttl = GATEWAY_TTL if member is None else TTL
        assert f"(TTL {ttl:.1f} s)" in f.procs["agent-1"].log()
        yield f
    finally:
        f.close()


@pytest.mark.timeout(180)
def _settled_and_nothing_moved(
    fleet: Fleet,
    load: Load,
    before: dict[str, tuple[str | None, int]],
    since: float,
    what: str,
    concerned: list[str],
) -> None:
    """Builds are acknowledged again after ``since``; once the load stopped, all
    settles within SETTLE and no node changed owner or epoch since ``before``.
    ``concerned`` receives the instances the last check found wrong."""
    wait_for(
        lambda: load.confirmed_after(since) >= 1 or not load.thread.is_alive(),
        30,
        what,
        step=0.5,
    )
    load.finish()
    last: list[str] = []

    def settled() -> bool:
        nonlocal last
        last, concerned[:] = problems(fleet, load)
        return not last

    try:
        wait_for(settled, SETTLE, "settled", step=0.5)
    except AssertionError:
        raise AssertionError(
            f"not settled {SETTLE:.0f} s after the load stopped:\n  " + "\n  ".join(last)
        ) from None
    after = {node: (owner, epoch) for node, (owner, epoch, _) in fleet.owners().items()}
    moved = {n: (before[n], after.get(n)) for n in before if after.get(n) != before[n]}
    assert moved == {}, f"{len(moved)} nodes changed owner or epoch: {moved}"


def test_losing_any_one_etcd_member_behind_a_gateway_changes_nothing(
    cluster: EtcdCluster, fleet: Fleet, transport_url: str
) -> None:
    load = Load(fleet, transport_url, seed=10, max_seconds=LOAD_SECONDS)
    marks = {name: len(proc.log()) for name, proc in fleet.procs.items()}
    concerned: list[str] = []
    notes: list[str] = []
    try:
        load.start()
        time.sleep(WARMUP)
        before = {node: (owner, epoch) for node, (owner, epoch, _) in fleet.owners().items()}
        marks = {name: len(proc.log()) for name, proc in fleet.procs.items()}

        # 1. The member the gateway forwards most of our connections to.
        connections = cluster.gateway_connections()
        assert sum(connections) > 0, "the services hold no connection through the gateway"
        used = max(range(len(connections)), key=connections.__getitem__)
        kills = [datetime.datetime.now()]  # the clock of the services' log lines
        cluster.kill(used)
        notes.append(f"killed {cluster.names[used]} (gateway connections {connections})")
        time.sleep(GATEWAY_DOWN)
        cluster.start_member(used)
        cluster.wait_healthy(used)

        # 2. The leader (maybe the member just restarted).
        leader = cluster.leader()
        kills.append(datetime.datetime.now())
        cluster.kill(leader)
        notes.append(f"killed leader {cluster.names[leader]}")
        time.sleep(GATEWAY_DOWN)
        cluster.start_member(leader)
        cluster.wait_healthy(leader)
        faults_over = time.monotonic()

        _settled_and_nothing_moved(
            fleet,
            load,
            before,
            faults_over,
            "a build request acknowledged after the faults",
            concerned,
        )

        states = load.states()
        requested = load.requested()
        errors = [u for u in requested if states.get(u) == "error"]
        assert errors == [], f"{len(errors)} builds ended ERROR"
        concerned = errors
        assert any(states.get(u) == "active" for u in requested)

        # Per fault, the suspensions (s) of each service.
        suspended: list[dict[str, list[float]]] = [{} for _ in kills]
        for name, proc in fleet.procs.items():
            transitions = _transitions(proc.log()[marks[name] :])
            lost = [t for t in transitions if t[3] == "lost"]
            assert lost == [], f"{name} membership went LOST: {lost}"
            for start, seconds in _suspensions(transitions):
                fault = max(0, sum(1 for k in kills if k <= start) - 1)
                suspended[fault].setdefault(name, []).append(seconds)
        violations = fleet.fencing_violations()
        assert violations == [], "fencing violations:\n" + "\n".join(violations)
        for note, spans in zip(notes, suspended, strict=True):
            print(
                f"\n{note}: suspensions (s) "
                + (
                    ", ".join(
                        f"{name} {'/'.join(f'{s:.2f}' for s in spans)}"
                        for name, spans in sorted(spans.items())
                    )
                    or "none"
                )
            )
        print(summary(load))
    except BaseException:
        print(f"\n{'; '.join(notes)}; {summary(load)}")
        print(log_tails(fleet, mentioning=concerned[:5]))
        raise
    finally:
        load.close()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("fleet", ["m0"], indirect=True)
def test_services_on_one_member_come_back_with_it_and_nothing_moves(
    cluster: EtcdCluster, fleet: Fleet, transport_url: str
) -> None:
    """The unsupported set-up the gateway replaces, and the incident of issue 10
    item 9: every service on member m0, m0 down past the TTL, then back.

    Every lease expired meanwhile (the other two members kept the quorum),
    so every service is LOST and re-joins when m0 is back.  Agents must not
    act on the group as read before their own re-join (it lacks them: they
    released all their unpinned nodes and claimed them back 0.6 s later),
    nor take the nodes of peers that re-join a heartbeat after them, and
    the conductor must not fail builds because no owner has re-joined yet
    ("no valid node ... LiveOwnerFilter removed N"): they wait.
    """
    load = Load(fleet, transport_url, seed=11, max_seconds=LOAD_SECONDS)
    concerned: list[str] = []
    try:
        load.start()
        time.sleep(WARMUP)
        before = {node: (owner, epoch) for node, (owner, epoch, _) in fleet.owners().items()}
        cluster.kill(0)
        time.sleep(DOWN)
        cluster.start_member(0)
        cluster.wait_healthy(0)
        back = time.monotonic()
        _settled_and_nothing_moved(
            fleet, load, before, back, "a build request acknowledged after m0 came back", concerned
        )
        states = load.states()
        errors = [u for u in load.requested() if states.get(u) == "error"]
        concerned = errors
        assert errors == [], f"{len(errors)} builds ended ERROR"
        lost = {
            name: [t for t in _transitions(proc.log()) if t[3] == "lost"]
            for name, proc in fleet.procs.items()
        }
        assert all(lost.values()), f"every service should have been LOST: {lost}"
        violations = fleet.fencing_violations()
        assert violations == [], "fencing violations:\n" + "\n".join(violations)
        print(f"\nkilled m0 for {DOWN:.0f} s (all services on it); {summary(load)}")
    except BaseException:
        print(f"\n{summary(load)}")
        print(log_tails(fleet, mentioning=concerned[:5]))
        raise
    finally:
        load.close()
