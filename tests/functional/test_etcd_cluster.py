"""One etcd member is not the cluster: losing any one member of three changes nothing.

A real 3-member etcd cluster on 127.0.0.1, an ``etcd gateway`` in front of
it (the supported set-up, docs/operations.rst "etcd cluster"), and a fleet
(one conductor, three agents, ``membership_timeout`` 3 s) that talks to the
gateway only, under a steady stream of builds and deletes
(:class:`tests.functional.test_chaos.Load`).  Two faults, one after the
other:

1. kill -9 of the member the gateway forwards most connections to, for
   longer than the TTL (then it is started again: a cluster of three needs
   two for a quorum);
2. kill -9 of the leader.

Then, once the load stopped and the fleet settled:

* no node changed owner or epoch (no release and re-claim, no take-over);
* no service's membership went LOST: at most SUSPENDED for a moment
  (DEPENDENCY-FACTS.md measured 0.5-1.2 s for fault 1, nothing for
  fault 2), so no agent re-joined and no node action was fenced off for
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
from tests.functional.fleet_harness import TTL, Fleet, log_tails, start_processes, wait_for
from tests.functional.test_chaos import EXTRA_CONFIG, SETTLE, STEP_DURATION, Load, problems, summary

NODES = 36
AGENTS = ("agent-1", "agent-2", "agent-3")
WARMUP = 4.0
#: each member stays dead past the TTL: a lease that depended on it expires
DOWN = TTL + 2.0
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
) -> list[float]:
    """Seconds each suspension lasted (until CONNECTED again)."""
    spans = []
    since = None
    for stamp, _member, _old, new in transitions:
        if new == "suspended" and since is None:
            since = stamp
        elif new == "connected" and since is not None:
            spans.append((stamp - since).total_seconds())
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
def fleet(tmp_path: Path, pg_url: str, transport_url: str, cluster: EtcdCluster) -> Iterator[Fleet]:
    migrated(pg_url).dispose()
    f = Fleet(
        tmp_path,
        db_url=pg_url,
        transport_url=transport_url,
        etcd_url=cluster.url,
        step_duration=STEP_DURATION,
    )
    f.common += EXTRA_CONFIG
    try:
        start_processes(f, ("cond-1",), AGENTS)
        f.api.import_nodes(
            [{"name": f"node-{i:03d}", "resource_class": "baremetal"} for i in range(NODES)]
        )
        f.api.create_flavor({"name": "small", "resource_class": "baremetal"})
        wait_for(lambda: set(f.owned_by()) == set(AGENTS), 30, "the agents partition the nodes")
        yield f
    finally:
        f.close()


@pytest.mark.timeout(180)
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
        cluster.kill(used)
        notes.append(f"killed {cluster.names[used]} (gateway connections {connections})")
        time.sleep(DOWN)
        cluster.start_member(used)
        cluster.wait_healthy(used)

        # 2. The leader (maybe the member just restarted).
        leader = cluster.leader()
        cluster.kill(leader)
        notes.append(f"killed leader {cluster.names[leader]}")
        time.sleep(DOWN)
        cluster.start_member(leader)
        cluster.wait_healthy(leader)
        faults_over = time.monotonic()

        wait_for(
            lambda: load.confirmed_after(faults_over) >= 1 or not load.thread.is_alive(),
            30,
            "a build request acknowledged after the faults",
            step=0.5,
        )
        load.finish()
        last: list[str] = []

        def settled() -> bool:
            nonlocal last, concerned
            last, concerned = problems(fleet, load)
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

        states = load.states()
        requested = load.requested()
        errors = [u for u in requested if states.get(u) == "error"]
        assert errors == [], f"{len(errors)} builds ended ERROR"
        concerned = errors
        assert any(states.get(u) == "active" for u in requested)

        suspended: dict[str, list[float]] = {}
        for name, proc in fleet.procs.items():
            transitions = _transitions(proc.log()[marks[name] :])
            lost = [t for t in transitions if t[3] == "lost"]
            assert lost == [], f"{name} membership went LOST: {lost}"
            spans = _suspensions(transitions)
            if spans:
                suspended[name] = spans
        violations = fleet.fencing_violations()
        assert violations == [], "fencing violations:\n" + "\n".join(violations)
        print(
            f"\n{'; '.join(notes)}; suspensions (s): "
            + (
                ", ".join(
                    f"{name} {'/'.join(f'{s:.2f}' for s in spans)}"
                    for name, spans in sorted(suspended.items())
                )
                or "none"
            )
            + f"; {summary(load)}"
        )
    except BaseException:
        print(f"\n{'; '.join(notes)}; {summary(load)}")
        print(log_tails(fleet, mentioning=concerned[:5]))
        raise
    finally:
        load.close()
