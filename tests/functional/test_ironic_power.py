# SPDX-License-Identifier: Apache-2.0
"""Power changed behind ringfleet's back, on a real Ironic: the back end's power is the truth.

A real standalone Ironic (``tools/with-test-servers.sh``), etcd, RabbitMQ and
PostgreSQL; a conductor and an agent of the ``ironic`` driver as processes.
An operator powers nodes on and off in Ironic directly (``PUT
/v1/nodes/{uuid}/states/power``, what ``baremetal node power off`` does):

* an ``active`` instance whose node is powered off becomes ``stopped``
  within two inventory sync passes (the first may have listed just before
  the power-off), with one INFO line naming instance and node; ``instance
  start`` then works and powers the node on in Ironic;
* a ``stopped`` instance whose node is powered on is left stopped (not
  powered off again: :mod:`conductor.power_sync` says why), with one
  WARNING; ``fleet check`` reports ``POWER-MISMATCH`` once it has lasted
  two passes of the power sync, until ``instance start`` accepts it;
* no process logs an ERROR or a traceback.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.functional.fleet_harness import (
    Fleet,
    error_lines,
    log_lines,
    log_tails,
    start_processes,
)
from tests.harness import wait_for
from tests.harness.ironic import IronicHarness

#: ``[ironic] sync_interval`` of the test's conductor.
SYNC_INTERVAL = 2.0
#: ``[conductor] power_sync_interval``: fleet check reports a mismatch
#: whose records have been quiet for twice this (``report_after``).
POWER_SYNC_INTERVAL = 4.0
#: What a sync pass and the test's polling may add to the bounds.
MARGIN = 5.0


@pytest.fixture
def fleet(fleet_on_ironic: Fleet) -> Fleet:
    return fleet_on_ironic


def _settled(fleet: Fleet, instance: str) -> dict[str, Any] | None:
    found: dict[str, Any] = fleet.api.show_instance(instance)
    return found if found["task_state"] is None else None


def _wait(fleet: Fleet, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """:func:`wait_for`, with the processes' logs in the failure message."""
    try:
        return wait_for(predicate, timeout, what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{log_tails(fleet)}") from None


def _power_problems(fleet: Fleet) -> list[dict[str, Any]]:
    return [p for p in fleet.api.fleet_check()["problems"] if p["kind"] == "power-mismatch"]


def _start_and_check(fleet: Fleet, ironic: IronicHarness, instance: str, node: str) -> None:
    """``instance start`` works: the instance is active, its node on in Ironic."""
    assert fleet.api.start_instance(instance)["task_state"] == "powering-on"
    done = wait_for(lambda: _settled(fleet, instance), 60, f"start of {instance} done")
    assert (done["vm_state"], done["fault"]) == ("active", None), done
    record = ironic.node(node)
    assert (record["power_state"], record["target_power_state"]) == ("power on", None)


def test_power_changed_in_ironic_is_followed_or_reported(
    fleet: Fleet, ironic: IronicHarness, shard: str
) -> None:
    ironic.enroll(2, shard=shard)
    start_processes(
        fleet,
        agents=("agent-1",),
        extra={
            "cond-1": f"[ironic]\nsync_interval = {SYNC_INTERVAL:g}\n"
            f"[conductor]\npower_sync_interval = {POWER_SYNC_INTERVAL:g}\n"
        },
    )
    fleet.api.sync_ironic_nodes()
    fleet.api.create_flavor({"name": "bm", "resource_class": "baremetal"})
    wait_for(lambda: all(o[0] for o in fleet.owners().values()), 30, "the nodes owned")
    off, on = (i["uuid"] for i in fleet.api.build_instances({"flavor": "bm", "count": 2}))
    wait_for(
        lambda: all(fleet.api.show_instance(i)["vm_state"] == "active" for i in (off, on)),
        120,
        "both instances ACTIVE",
    )
    off_node = fleet.api.show_instance(off)["node_uuid"]
    on_node = fleet.api.show_instance(on)["node_uuid"]

    # -- an active instance's node powered off in Ironic ------------------------------
    ironic.set_power(off_node, on=False)
    powered_off = time.monotonic()
    _wait(
        fleet,
        lambda: fleet.api.show_instance(off)["vm_state"] == "stopped",
        2 * SYNC_INTERVAL + MARGIN,
        f"instance {off} stopped after its node was powered off in Ironic",
    )
    print(f"stopped {time.monotonic() - powered_off:.1f} s after the power-off in Ironic")
    found = fleet.api.show_instance(off)
    assert (found["vm_state"], found["task_state"], found["fault"]) == ("stopped", None, None)
    assert fleet.api.show_node(off_node)["power_state"] == "power off"
    lines = log_lines(fleet, "cond-1", f"Instance {off} stopped", off_node)
    assert len(lines) == 1 and " INFO " in lines[0], lines
    _start_and_check(fleet, ironic, off, off_node)

    # -- a stopped instance's node powered on in Ironic -------------------------------
    assert fleet.api.stop_instance(on)["task_state"] == "powering-off"
    done = wait_for(lambda: _settled(fleet, on), 60, f"stop of {on} done")
    assert done["vm_state"] == "stopped", done
    ironic.set_power(on_node, on=True)
    powered_on = time.monotonic()
    wait_for(
        lambda: fleet.api.show_node(on_node)["power_state"] == "power on",
        2 * SYNC_INTERVAL + MARGIN,
        f"node {on_node} recorded powered on",
    )
    problems = _wait(
        fleet,
        lambda: _power_problems(fleet),
        2 * POWER_SYNC_INTERVAL + 2 * SYNC_INTERVAL + MARGIN,
        "fleet check reporting the power mismatch",
    )
    print(f"POWER-MISMATCH {time.monotonic() - powered_on:.1f} s after the power-on in Ironic")
    [problem] = problems
    assert (problem["instance_uuid"], problem["node_uuid"]) == (on, on_node)
    assert problem["message"].startswith(
        f"instance {on} is stopped but its node {on_node} (owner agent-1) is power on"
    ), problem
    # Left as it is: stopped in ringfleet, on in Ironic, said once.
    assert fleet.api.show_instance(on)["vm_state"] == "stopped"
    assert ironic.node(on_node)["power_state"] == "power on"
    warned = log_lines(fleet, "cond-1", f"Instance {on} is stopped", on_node)
    assert len(warned) == 1 and " WARNING " in warned[0], warned
    # The operator accepts it running.
    _start_and_check(fleet, ironic, on, on_node)
    assert _power_problems(fleet) == []

    assert error_lines(fleet) == {"agent-1": [], "cond-1": []}
