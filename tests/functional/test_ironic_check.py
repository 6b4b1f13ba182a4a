# SPDX-License-Identifier: Apache-2.0
"""``fleet check`` against a real Ironic: a claim made in Ironic behind
ringfleet's back, and an orphan claim of a ringfleet instance cleaned.

A real standalone Ironic (``tools/with-test-servers.sh``), etcd, RabbitMQ and
PostgreSQL; a conductor and an agent of the ``ironic`` driver as processes;
the ``ringfleet`` console script as an operator runs it.  The claims are made
(and deployed, and released) in Ironic directly (plain HTTP,
:mod:`tests.harness.ironic`), as another Nova or an operator would, and the
check sees them through what the inventory sync recorded.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.functional.fleet_harness import Fleet, log_lines, log_tails, start_processes
from tests.harness import wait_for
from tests.harness.ironic import IronicHarness

RINGFLEET = Path(sys.executable).with_name("ringfleet")


@pytest.fixture
def fleet(fleet_on_ironic: Fleet) -> Fleet:
    return fleet_on_ironic


def _fleet_check(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(RINGFLEET), "--config-file", str(config), "fleet", "check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_fleet_check_reports_a_claim_made_in_ironic_until_it_is_released(
    fleet: Fleet, ironic: IronicHarness, shard: str, transport_url: str
) -> None:
    claimed, other = ironic.enroll(2, shard=shard)
    start_processes(fleet, agents=("agent-1",))
    assert fleet.api.sync_ironic_nodes()["created"] == 2
    wait_for(
        lambda: fleet.owned_by() == {"agent-1": {claimed, other}},
        60,
        "both nodes owned by agent-1",
    )
    config = fleet.workdir / "cli.conf"
    config.write_text(f"[DEFAULT]\ntransport_url = {transport_url}\n")
    fleet.api.sync_ironic_nodes()  # seen after the agent's claims
    healthy = _fleet_check(config)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr + log_tails(fleet)

    stranger = str(uuid.uuid4())
    assert ironic.claim(claimed, stranger)["instance_uuid"] == stranger
    summary = fleet.api.sync_ironic_nodes()
    # Out of service while claimed (not a ringfleet instance: not touched).
    assert (summary["created"], summary["updated"], summary["observed"]) == (0, 1, 1), summary
    assert summary["orphans"] == 0, summary

    check = _fleet_check(config)

    assert check.returncode == 1, check.stdout + check.stderr
    [line] = check.stdout.splitlines()
    assert line.startswith(
        f"BACKEND-MISMATCH: node {claimed} (owner agent-1): claimed in Ironic by instance "
        f"{stranger}, which ringfleet does not hold on this node (not a ringfleet instance); "
        f"ringfleet: no instance, node error; Ironic: available, claimed by {stranger}, "
        "as seen by the sync at "
    ), check.stdout
    [problem] = fleet.api.fleet_check()["problems"]
    assert (problem["kind"], problem["reason"]) == ("backend-mismatch", "orphan-claim")
    assert (problem["node_uuid"], problem["backend_instance_uuid"]) == (claimed, stranger)
    assert (problem["instance_uuid"], problem["backend_state"]) == (None, "available")
    # Nothing was built on it meanwhile: the node is still free in ringfleet.
    assert fleet.owners()[claimed][2] is None

    ironic.release(claimed)
    summary = fleet.api.sync_ironic_nodes()
    assert (summary["updated"], summary["observed"]) == (1, 1), summary
    assert fleet.api.show_node(claimed)["provision_state"] == "available"
    final = _fleet_check(config)
    assert final.returncode == 0, final.stdout + final.stderr
    assert final.stdout.startswith("OK")


def test_an_orphan_claim_of_a_ringfleet_instance_is_cleaned_by_the_nodes_owner(
    fleet: Fleet, ironic: IronicHarness, shard: str, transport_url: str
) -> None:
    """Instance X was built on node A and deleted; Ironic shows node B
    claimed by X and deployed (as a failed build whose teardown could not
    run leaves it).  The first sync pass puts B out of service and hands
    the claim to B's owner, whose agent tears B down in Ironic; a later
    pass makes B schedulable again.  A node claimed by an instance that is
    not ringfleet's stays as it is, however many passes run."""
    enrolled = ironic.enroll(3, shard=shard)
    start_processes(fleet, agents=("agent-1",))
    assert fleet.api.sync_ironic_nodes()["created"] == 3
    fleet.api.create_flavor({"name": "bm", "resource_class": "baremetal"})
    wait_for(lambda: fleet.owned_by() == {"agent-1": set(enrolled)}, 60, "nodes owned")
    [built] = fleet.api.build_instances({"flavor": "bm"})
    x = built["uuid"]
    shown = wait_for(
        lambda: (i := fleet.api.show_instance(x))["vm_state"] == "active" and i, 120, "X active"
    )
    a = shown["node_uuid"]
    fleet.api.delete_instance(x)
    wait_for(lambda: fleet.api.show_instance(x)["vm_state"] == "deleted", 120, "X deleted")
    assert (ironic.node(a)["provision_state"], ironic.node(a)["instance_uuid"]) == (
        "available",
        None,
    )
    b, stranger_node = (n for n in enrolled if n != a)
    stranger = str(uuid.uuid4())
    for node, claimant in ((b, x), (stranger_node, stranger)):
        ironic.claim(node, claimant)
        ironic.set_provision_state(node, "active", until="active")

    first = fleet.api.sync_ironic_nodes()
    handed = time.monotonic()

    assert first["orphans"] == 1, first
    assert first["updated"] >= 2, first  # both out of service
    for node in (b, stranger_node):
        assert fleet.api.show_node(node)["provision_state"] == "error"
    ironic.wait_for(
        b,
        lambda n: (
            n["provision_state"] == "available"
            and n["target_provision_state"] is None
            and n["instance_uuid"] is None
        ),
        60,
        what="B torn down and released in Ironic",
    )
    cleaned = time.monotonic() - handed
    report = f"Orphan claim of instance {x} on node {b} cleaned by agent-1"
    wait_for(lambda: log_lines(fleet, "cond-1", report), 30, "the teardown reported")
    reported = time.monotonic() - handed
    second = fleet.api.sync_ironic_nodes()
    assert second["orphans"] == 0, second
    back = time.monotonic() - handed
    print(
        f"orphan claim: Ironic shows B clean {cleaned:.1f} s after the pass that handed it, "
        f"reported {reported:.1f} s after, schedulable again at the next pass ({back:.1f} s)"
    )
    assert fleet.api.show_node(b)["provision_state"] == "available"
    assert fleet.owners()[b][2] is None
    handed_lines = log_lines(
        fleet, "cond-1", f"Node {b}: Ironic still holds instance {x}", "its owner agent-1 tears"
    )
    assert len(handed_lines) == 1, handed_lines
    torn_down = log_lines(fleet, "agent-1", f"Ironic node {b} torn down for instance {x}")
    assert len(torn_down) == 1, log_tails(fleet, mentioning=[x, b])
    # X keeps its record.
    after = fleet.api.show_instance(x)
    assert (after["vm_state"], after["node_uuid"]) == ("deleted", None)
    # Another's claim: out of service, never touched in Ironic.
    for _ in range(2):
        assert fleet.api.sync_ironic_nodes()["orphans"] == 0
    assert fleet.api.show_node(stranger_node)["provision_state"] == "error"
    theirs = ironic.node(stranger_node)
    assert (theirs["provision_state"], theirs["instance_uuid"]) == ("active", stranger)
    assert not log_lines(fleet, "agent-1", stranger), log_tails(fleet, mentioning=[stranger])
    assert not log_lines(fleet, "cond-1", f"Node {stranger_node}: Ironic still holds")
    [problem] = fleet.api.fleet_check()["problems"]
    assert (problem["kind"], problem["reason"]) == ("backend-mismatch", "orphan-claim")
    assert (problem["node_uuid"], problem["backend_instance_uuid"]) == (stranger_node, stranger)

    # Its owner (the operator here) tears it down: schedulable again, all OK.
    ironic.set_provision_state(stranger_node, "deleted", until="available")
    if ironic.node(stranger_node)["instance_uuid"] is not None:
        ironic.release(stranger_node)
    fleet.api.sync_ironic_nodes()
    assert fleet.api.show_node(stranger_node)["provision_state"] == "available"
    config = fleet.workdir / "cli.conf"
    config.write_text(f"[DEFAULT]\ntransport_url = {transport_url}\n")
    fleet.api.sync_ironic_nodes()  # observed after every change
    final = _fleet_check(config)
    assert final.returncode == 0, final.stdout + final.stderr + log_tails(fleet)
    assert final.stdout.startswith("OK")
