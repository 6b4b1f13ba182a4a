# SPDX-License-Identifier: Apache-2.0
"""Power changed behind ringfleet's back, on a driver that polls power (the simulated one).

Real etcd, RabbitMQ and PostgreSQL; a conductor and an agent of the
``simulated`` driver as processes.  The simulated hardware (the node store
the agents share, a SQLite file) is changed directly, as a ``poweroff``
inside the OS would: the agent reads the node's power at its next report
(``[compute_agent] report_interval``), and the conductor's periodic power
sync (``[conductor] power_sync_interval``) stops the instance once its
record and its node's have been quiet for an interval.  ``instance start``
then powers it on again.  No process logs an ERROR or a traceback.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from compute_agent.drivers.simulated.node_store import open_store
from conductor.common.objects import PowerState
from tests.dbutil import migrated
from tests.functional.fleet_harness import (
    Fleet,
    error_lines,
    log_lines,
    log_tails,
    start_processes,
)
from tests.harness import wait_for

REPORT_INTERVAL = 1.0
POWER_SYNC_INTERVAL = 3.0
#: What the test's polling and a slow machine may add.
MARGIN = 5.0


@pytest.fixture
def fleet(tmp_path: Path, pg_url: str, transport_url: str, etcd_url: str) -> Iterator[Fleet]:
    migrated(pg_url).dispose()
    fleet = Fleet(
        tmp_path,
        db_url=pg_url,
        transport_url=transport_url,
        etcd_url=etcd_url,
        common_extra=(
            f"[compute_agent]\nreport_interval = {REPORT_INTERVAL:g}\n"
            f"[conductor]\npower_sync_interval = {POWER_SYNC_INTERVAL:g}\n"
        ),
    )
    try:
        yield fleet
    finally:
        fleet.close()


def test_a_node_powered_off_under_an_active_instance_stops_it(fleet: Fleet) -> None:
    start_processes(fleet, agents=("agent-1",))
    fleet.api.import_nodes([{"name": "node-0", "resource_class": "baremetal"}])
    fleet.api.create_flavor({"name": "bm", "resource_class": "baremetal"})
    wait_for(lambda: set(fleet.owned_by()) == {"agent-1"}, 30, "the node owned")
    [built] = fleet.api.build_instances({"flavor": "bm", "count": 1})
    instance = built["uuid"]
    wait_for(lambda: fleet.api.show_instance(instance)["vm_state"] == "active", 60, "ACTIVE")
    node = fleet.api.show_instance(instance)["node_uuid"]
    store = open_store(str(fleet.workdir / "nodes.sqlite"))
    try:
        assert store.update(node, power_state=PowerState.OFF).power_state is PowerState.OFF
        powered_off = time.monotonic()
        bound = REPORT_INTERVAL + 2 * POWER_SYNC_INTERVAL + MARGIN
        try:
            wait_for(
                lambda: fleet.api.show_instance(instance)["vm_state"] == "stopped",
                bound,
                f"instance {instance} stopped after its node was powered off",
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{log_tails(fleet)}") from None
        print(f"stopped {time.monotonic() - powered_off:.1f} s after the power-off")
        lines = log_lines(fleet, "cond-1", f"Instance {instance} stopped", node)
        assert len(lines) == 1 and " INFO " in lines[0], lines

        assert fleet.api.start_instance(instance)["task_state"] == "powering-on"
        wait_for(
            lambda: fleet.api.show_instance(instance)["vm_state"] == "active",
            30,
            f"instance {instance} started",
        )
        held = store.get(node)
        assert held is not None and held.power_state is PowerState.ON
    finally:
        store.close()
    assert error_lines(fleet) == {"agent-1": [], "cond-1": []}
