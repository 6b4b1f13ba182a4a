# SPDX-License-Identifier: Apache-2.0
"""Issue 25: back-end progress is the sweeper's heartbeat.

"While the back end reports progress, the sweeper does not fail the
attempt; build_timeout counts from the last progress.  A deploy that
finishes after ringfleet gave up is torn down by its owner, not left
active."

One conductor and two agents (processes) on real etcd, RabbitMQ and
PostgreSQL, the simulated driver, ``build_timeout`` at its minimum (10 s,
so the sweeper looks every 2.5 s) and the agents' ``report_interval`` at
its minimum (1 s: their heartbeats go with their state reports).  Both
cases run at once, on one fleet, to keep the module near 40 s:

* **slow but healthy**: :data:`HEALTHY_BUILDS` deploys of four steps of
  :data:`STEP` s each, 2.6 x ``build_timeout`` in all, each step shorter
  than ``build_timeout``.  Every build ends ACTIVE on its first attempt,
  on the node it was first placed on, and the conductor logs no sweeper
  line about it.  Why 2.6 and not 1.6: the sweeper re-routes a build
  without progress once (which counts as progress) before it fails it, so
  without any heartbeat a build is failed between 2 x ``build_timeout``
  and 2 x (``build_timeout`` + a sweep period) = 20-25 s after its last
  progress; a 16 s deploy would pass with heartbeats disabled, a 26 s one
  does not (checked by hand: with ``_report_progress`` returning at once
  every healthy build was failed by the sweeper).
* **stalled**: one build of flavor ``stall`` lands on ``stall-0``, the
  only node of its resource class, listed in ``[simulated_driver]
  stall_nodes``: its first step takes far longer than ``build_timeout``.
  The sweeper fails the attempt within 2 x (``build_timeout`` + a sweep)
  of its last progress (and not before ``build_timeout``); the build is
  rescheduled (to ``stall-1``, imported once the first attempt is placed),
  and ``stall-0``'s owner stops the deploy and tears the node down: free
  in the record, ``available`` and empty in the simulated back end.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid as uuidlib
from collections.abc import Iterator

import pytest
from sqlalchemy import select

from compute_agent.drivers.simulated.node_store import open_store
from conductor.common.objects import ProvisionState
from conductor.db.models import InstanceModel, NodeModel
from tests.dbutil import fresh_database, migrated
from tests.functional.fleet_harness import Fleet, log_lines, log_tails, start_processes
from tests.harness import wait_for

BUILD_TIMEOUT = 10.0  # the minimum [conductor] build_timeout allows
SWEEP = BUILD_TIMEOUT / 4  # conductor.service: the sweeper's period
STEP = 6.5  # each of the 4 deploy steps: a deploy takes 26 s
DEPLOY = 4 * STEP
HEALTHY_BUILDS = 4
HEALTHY_NODES = 6
REPORT_INTERVAL = 1.0  # the minimum [compute_agent] report_interval allows
SLACK = 8.0
#: the longest a build without progress can wait for the sweeper to fail it:
#: re-routed after one build_timeout (+ a sweep), failed one later (+ a sweep)
SWEEPER_FAILS_WITHIN = 2 * (BUILD_TIMEOUT + SWEEP)
AGENTS = ("agent-1", "agent-2")
CONDUCTOR = "cond-1"
#: what the conductor logs when the sweeper or a report fails an attempt
FAILED_ATTEMPT_LINES = ("no progress on node", "failed on node", "ERROR after", "timed out")

EXTRA_CONFIG = (
    "[conductor]\n"
    f"build_timeout = {BUILD_TIMEOUT}\n"
    "max_attempts = 3\n"
    "[compute_agent]\n"
    f"report_interval = {REPORT_INTERVAL}\n"
    "[simulated_driver]\n"
    "stall_nodes = stall-0\n"
    "stall_step = power on\n"
    "stall_duration = 600\n"
)


@dataclasses.dataclass
class Run:
    """The fleet and what the watcher saw of the builds."""

    fleet: Fleet
    healthy: list[str]
    stalled: str
    requested_at: float
    #: instance -> monotonic time it was first seen ACTIVE
    active_at: dict[str, float] = dataclasses.field(default_factory=dict)
    #: instance -> the node of its first placement
    first_node: dict[str, str] = dataclasses.field(default_factory=dict)
    #: the stalled build: when it was first seen on stall-0, and failed there
    stalled_placed_at: float | None = None
    stalled_failed_at: float | None = None
    stalled_failed_wall: float = 0.0  # time.time() of stalled_failed_at
    stop: threading.Event = dataclasses.field(default_factory=threading.Event)
    errors: list[str] = dataclasses.field(default_factory=list)

    def instances(self) -> dict[str, InstanceModel]:
        with self.fleet.db.transaction() as session:
            rows = session.scalars(select(InstanceModel)).all()
            session.expunge_all()
        return {row.uuid: row for row in rows}

    def nodes_by_name(self) -> dict[str, NodeModel]:
        with self.fleet.db.transaction() as session:
            rows = session.scalars(select(NodeModel)).all()
            session.expunge_all()
        return {row.name: row for row in rows}

    def watch(self) -> None:
        """Poll the record every 0.2 s: placements, ACTIVE times, the stalled failure."""
        stall_0: str | None = None
        while not self.stop.wait(0.2):
            try:
                if stall_0 is None:
                    stall_0 = self.nodes_by_name()["stall-0"].uuid
                now = time.monotonic()
                for uuid, row in self.instances().items():
                    if row.node_uuid is not None:
                        self.first_node.setdefault(uuid, row.node_uuid)
                    if row.vm_state == "active":
                        self.active_at.setdefault(uuid, now)
                    if uuid == self.stalled:
                        if row.node_uuid == stall_0 and self.stalled_placed_at is None:
                            self.stalled_placed_at = now
                        if row.attempts >= 1 and self.stalled_failed_at is None:
                            self.stalled_failed_at = now
                            self.stalled_failed_wall = time.time()
            except Exception as exc:  # reported by the tests
                self.errors.append(f"{type(exc).__name__}: {exc}")


def _every_node_owned(fleet: Fleet) -> bool:
    """Every node imported is held by one of the agents.  (Not "each agent
    holds some": the ring may give one of two agents all seven nodes, 1.6 %
    of the runs with random uuids.)"""
    owned = fleet.owned_by()
    return set(owned) <= set(AGENTS) and sum(map(len, owned.values())) == HEALTHY_NODES + 1


@pytest.fixture(scope="module")
def run(
    tmp_path_factory: pytest.TempPathFactory,
    database_url: str,
    transport_url: str,
    etcd_url: str,
) -> Iterator[Run]:
    """The fleet, every build requested at once, and a thread watching them."""
    workdir = tmp_path_factory.mktemp("slow")
    with fresh_database(database_url, "slow") as url:
        migrated(url).dispose()
        fleet = Fleet(
            workdir,
            db_url=url,
            transport_url=transport_url,
            etcd_url=etcd_url,
            step_duration=STEP,
            common_extra=EXTRA_CONFIG,
        )
        watcher: threading.Thread | None = None
        current: Run | None = None
        try:
            start_processes(fleet, [CONDUCTOR], AGENTS)
            fleet.api.import_nodes(
                [
                    {"name": f"node-{i:02d}", "resource_class": "baremetal"}
                    for i in range(HEALTHY_NODES)
                ]
                + [{"name": "stall-0", "resource_class": "stall"}]
            )
            fleet.api.create_flavor({"name": "small", "resource_class": "baremetal"})
            fleet.api.create_flavor({"name": "stall", "resource_class": "stall"})
            wait_for(lambda: _every_node_owned(fleet), 30, "the agents own the nodes")
            healthy = [str(uuidlib.uuid4()) for _ in range(HEALTHY_BUILDS)]
            stalled = str(uuidlib.uuid4())
            current = Run(fleet, healthy, stalled, time.monotonic())
            watcher = threading.Thread(target=current.watch, name="watch", daemon=True)
            watcher.start()
            fleet.api.build_instances(
                {"flavor": "small", "count": len(healthy), "instance_uuids": healthy}
            )
            fleet.api.build_instances({"flavor": "stall", "count": 1, "instance_uuids": [stalled]})
            run = current
            wait_for(lambda: run.stalled_placed_at is not None, 20, "the stalled build on stall-0")
            # Somewhere to reschedule it to, now that its first attempt is placed.
            fleet.api.import_nodes([{"name": "stall-1", "resource_class": "stall"}])
            yield current
            assert fleet.fencing_violations() == []
        except BaseException:
            print(log_tails(fleet, mentioning=[] if current is None else [current.stalled]))
            raise
        finally:
            if current is not None:
                current.stop.set()
            if watcher is not None:
                watcher.join(5)
            fleet.close()


def _sweeper_lines(fleet: Fleet, instance: str) -> list[str]:
    return [
        line
        for text in FAILED_ATTEMPT_LINES
        for line in log_lines(fleet, CONDUCTOR, instance, text)
    ]


@pytest.mark.timeout(120)
def test_a_deploy_slower_than_build_timeout_that_makes_progress_is_not_failed(run: Run) -> None:
    fleet = run.fleet
    try:
        wait_for(
            lambda: all(u in run.active_at for u in run.healthy),
            DEPLOY + SWEEPER_FAILS_WITHIN + SLACK,
            "every healthy build ACTIVE",
        )
    except AssertionError:
        print(log_tails(fleet, mentioning=run.healthy))
        raise
    assert not run.errors, run.errors
    rows = run.instances()
    durations = sorted(run.active_at[u] - run.requested_at for u in run.healthy)
    print(
        f"\n{len(run.healthy)} deploys of {DEPLOY:.0f} s ({DEPLOY / BUILD_TIMEOUT:.1f} x "
        f"build_timeout {BUILD_TIMEOUT:.0f} s, steps of {STEP} s, heartbeats every "
        f"{REPORT_INTERVAL:.0f} s at most): ACTIVE after "
        + ", ".join(f"{d:.1f}" for d in durations)
        + " s"
    )
    for uuid in run.healthy:
        row = rows[uuid]
        assert (row.vm_state, row.attempts, row.fault) == ("active", 0, None), (
            f"{uuid}: {row.vm_state} after {row.attempts} failed attempts: {row.fault}"
        )
        assert not row.tried_nodes, f"{uuid} was rescheduled from {row.tried_nodes}"
        assert row.node_uuid == run.first_node[uuid], f"{uuid} moved node"
        assert _sweeper_lines(fleet, uuid) == [], _sweeper_lines(fleet, uuid)
    assert min(durations) >= DEPLOY, "a deploy was faster than its steps"


@pytest.mark.timeout(120)
def test_a_deploy_that_stops_making_progress_is_failed_and_torn_down(run: Run) -> None:
    fleet = run.fleet
    try:
        wait_for(
            lambda: run.stalled_failed_at is not None,
            SWEEPER_FAILS_WITHIN + SLACK,
            "the stalled build failed by the sweeper",
        )
        assert run.stalled_placed_at is not None and run.stalled_failed_at is not None
        failed_after = run.stalled_failed_at - run.stalled_placed_at
        by_name = run.nodes_by_name()
        stall_0, stall_1 = by_name["stall-0"].uuid, by_name["stall-1"].uuid
        row = run.instances()[run.stalled]
        assert row.attempts == 1 and row.tried_nodes == [stall_0], (
            f"{row.attempts} failed attempts on {row.tried_nodes}"
        )
        assert f"build timed out after {BUILD_TIMEOUT:.0f} s" in (row.fault or ""), row.fault
        assert _sweeper_lines(fleet, run.stalled), "no sweeper line about the stalled build"
        # Rescheduled: on stall-1, the only other node it fits.
        wait_for(
            lambda: run.instances()[run.stalled].node_uuid == stall_1,
            10,
            "the stalled build rescheduled on stall-1",
        )
        # Its first node torn down by its owner: free in the record, empty
        # and available in the back end, the teardown in the action log.
        owner = by_name["stall-0"].owner
        store = open_store(str(fleet.workdir / "nodes.sqlite"))

        def torn_down() -> bool:
            held = store.get(stall_0)
            return held is not None and (held.provision_state, held.instance_uuid) == (
                ProvisionState.AVAILABLE,
                None,
            )

        wait_for(torn_down, 10, "stall-0 torn down in the simulated back end")
        node = run.nodes_by_name()["stall-0"]
        assert node.instance_uuid is None and node.provision_state != "active", (
            node.instance_uuid,
            node.provision_state,
        )
        destroys = [
            a
            for a in fleet.actions()
            if a.node == stall_0 and a.action in ("destroy", "destroy_done")
        ]
        assert [(a.action, a.agent, a.instance) for a in destroys] == [
            ("destroy", owner, run.stalled),
            ("destroy_done", owner, run.stalled),
        ]
        torn_down_after = destroys[-1].ns / 1e9 - run.stalled_failed_wall
        assert not any(a.node == stall_0 and a.action == "deploy_done" for a in fleet.actions()), (
            "the stalled deploy went on"
        )
        store.close()
    except BaseException:
        print(log_tails(fleet, mentioning=[run.stalled]))
        raise
    print(
        f"\nstalled deploy on stall-0: failed by the sweeper {failed_after:.1f} s after it "
        f"was placed (build_timeout {BUILD_TIMEOUT:.0f} s, at most "
        f"{SWEEPER_FAILS_WITHIN:.0f} s after its last progress), rescheduled on stall-1, "
        f"stall-0 torn down by its owner {owner} {torn_down_after:.1f} s later "
        f"(record: {node.provision_state}, no instance)"
    )
    assert BUILD_TIMEOUT <= failed_after <= SWEEPER_FAILS_WITHIN + SLACK
