"""``fleet check`` against a real Ironic: a claim made in Ironic behind ringfleet's back.

A real standalone Ironic (``tools/with-test-servers.sh``), etcd, RabbitMQ and
PostgreSQL; a conductor and an agent of the ``ironic`` driver as processes;
the ``ringfleet`` console script as an operator runs it.  The claim is made
and released in Ironic directly (plain HTTP, :mod:`tests.harness.ironic`),
as another Nova or an operator would, and the check sees it through what
the inventory sync recorded.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.functional.fleet_harness import Fleet, ironic_fleet, log_tails, start_processes
from tests.harness import wait_for
from tests.harness.ironic import IronicHarness

RINGFLEET = Path(sys.executable).with_name("ringfleet")


@pytest.fixture
def fleet(
    tmp_path: Path,
    pg_url: str,
    transport_url: str,
    etcd_url: str,
    ironic_url: str,
    shard: str,
) -> Iterator[Fleet]:
    with ironic_fleet(
        tmp_path,
        db_url=pg_url,
        transport_url=transport_url,
        etcd_url=etcd_url,
        ironic_url=ironic_url,
        shards=[shard],
    ) as f:
        yield f


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
    assert (summary["created"], summary["updated"], summary["observed"]) == (0, 0, 1), summary

    check = _fleet_check(config)

    assert check.returncode == 1, check.stdout + check.stderr
    [line] = check.stdout.splitlines()
    assert line.startswith(
        f"BACKEND-MISMATCH: node {claimed} (owner agent-1): claimed in Ironic by instance "
        f"{stranger}, which ringfleet does not hold on this node (not a ringfleet instance); "
        f"ringfleet: no instance, node available; Ironic: available, claimed by {stranger}, "
        "as seen by the sync at "
    ), check.stdout
    [problem] = fleet.api.fleet_check()["problems"]
    assert (problem["kind"], problem["reason"]) == ("backend-mismatch", "orphan-claim")
    assert (problem["node_uuid"], problem["backend_instance_uuid"]) == (claimed, stranger)
    assert (problem["instance_uuid"], problem["backend_state"]) == (None, "available")
    # Nothing was built on it meanwhile: the node is still free in ringfleet.
    assert fleet.owners()[claimed][2] is None

    ironic.release(claimed)
    assert fleet.api.sync_ironic_nodes()["observed"] == 1
    final = _fleet_check(config)
    assert final.returncode == 0, final.stdout + final.stderr
    assert final.stdout.startswith("OK")
