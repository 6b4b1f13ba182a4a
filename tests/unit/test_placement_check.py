# SPDX-License-Identifier: Apache-2.0
"""``ringfleet placement check`` against an embedded conductor and the in-memory Placement.

Each test starts from a Placement written by the reporter's own rules
(:func:`conductor.common.placement.provider.mend`, as an agent writes it),
so it agrees with the fleet; a test then changes what Placement shows the
way drift would, and reads the check's lines and exit status.
"""

from __future__ import annotations

import datetime
import io
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from keystoneauth1 import exceptions as ks_exceptions
from oslo_config import cfg

from conductor.cli.app import RingfleetApp
from conductor.cli.placement import PlacementCheck
from conductor.common.placement import provider
from conductor.common.placement.client import PlacementClient
from conductor.db.models import InstanceModel, NodeModel, utcnow
from conductor.rpcapi import pages
from tests.embedded_fleet import Embedded, embedded_fleet
from tests.fake_placement import FakePlacement

AGGREGATE = "0b6c3b8e-7f1d-4a57-9d2e-5a0c2f9e1b33"
PLACEMENT_CONFIG = (
    "[placement]\n"
    "auth_type = none\n"
    "endpoint_override = http://placement.test\n"
    f"aggregate = {AGGREGATE}\n"
    "concurrency = 3\n"
)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Embedded]:
    """Five nodes owned by agent-1: two free (one with a standard and a
    custom trait), one in maintenance, one hosting an instance, one of class
    ``baremetal-gold``."""
    with embedded_fleet(
        tmp_path_factory.mktemp("placement-check"), "placement-check", PLACEMENT_CONFIG
    ) as embedded:
        specs: list[dict[str, Any]] = [
            {"name": "pc-free", "resource_class": "baremetal"},
            {
                "name": "pc-traits",
                "resource_class": "baremetal",
                "traits": ["HW_CPU_X86_AVX2", "CUSTOM_GPU"],
            },
            {"name": "pc-maint", "resource_class": "baremetal"},
            {"name": "pc-busy", "resource_class": "baremetal"},
            {"name": "pc-gold", "resource_class": "baremetal-gold"},
        ]
        uuids = embedded.api.import_nodes(specs)["uuids"]
        embedded.api.claim_nodes("agent-1", uuids)
        embedded.api.set_node_maintenance(uuids[2], True, "disk swap")
        db = embedded.service.db
        assert db is not None
        instance = str(uuidlib.uuid4())
        with db.transaction() as session:
            session.add(
                InstanceModel(
                    uuid=instance,
                    name="vm-busy",
                    flavor="f",
                    vm_state="active",
                    task_state=None,
                    node_uuid=uuids[3],
                    host="agent-1",
                    updated_at=utcnow() - datetime.timedelta(seconds=5),
                )
            )
            session.query(NodeModel).filter(NodeModel.uuid == uuids[3]).update(
                {"instance_uuid": instance, "provision_state": "active"}
            )
        yield embedded


def _nodes(fleet: Embedded) -> dict[str, dict[str, Any]]:
    """The fleet's nodes by name."""
    listed = pages(lambda n, m: fleet.api.list_nodes(limit=n, marker=m))
    return {node["name"]: node for node in listed}


@pytest.fixture
def placement(fleet: Embedded, monkeypatch: pytest.MonkeyPatch) -> FakePlacement:
    """A Placement showing every node as an agent writes it; the check's client."""
    fake = FakePlacement()
    client = PlacementClient(fake, "fake")
    for node in _nodes(fleet).values():
        want = provider.wanted(node, None, "ringfleet")
        entry = provider.mend(client, want, None, AGGREGATE)
        if entry is not None:
            client.put_allocations({want.consumer: entry})  # type: ignore[dict-item]
    fake.requests.clear()

    def placement_client(self: PlacementCheck, conf: cfg.ConfigOpts) -> PlacementClient:
        return PlacementClient(fake, "fake")

    monkeypatch.setattr(PlacementCheck, "placement_client", placement_client)
    return fake


def test_a_fleet_placement_agrees_with_is_ok(fleet: Embedded, placement: FakePlacement) -> None:
    result = fleet.run("placement", "check")
    assert result.code == 0, result.out + result.err
    assert result.out == (
        "OK: Placement at fake shows the 5 nodes as their records say, "
        "and no provider of a node it lacks\n"
    )
    assert result.err.startswith("checked 5 nodes in ")
    assert "providers/s" in result.err
    # Read only: 1 list, 1 standard trait lookup, 5 GETs for each node.
    assert {method for method, _ in placement.requests} == {"GET"}
    assert len(placement.requests) == 2 + 5 * 5


def test_drift_missing_and_orphans_are_one_line_each(
    fleet: Embedded, placement: FakePlacement
) -> None:
    nodes = _nodes(fleet)
    free, traits, maint = nodes["pc-free"], nodes["pc-traits"], nodes["pc-maint"]
    busy, gold = nodes["pc-busy"], nodes["pc-gold"]
    # A free node made unschedulable, a maintenance one schedulable.
    placement.providers[free["uuid"]].inventories["CUSTOM_BAREMETAL"]["reserved"] = 1
    placement.providers[maint["uuid"]].inventories["CUSTOM_BAREMETAL"]["reserved"] = 0
    placement.providers[traits["uuid"]].traits.discard("CUSTOM_GPU")
    # The busy node's allocation now another consumer's.
    other = str(uuidlib.uuid4())
    placement.consumers[other] = placement.consumers.pop(busy["instance_uuid"])
    del placement.providers[gold["uuid"]]
    # A provider of a node ringfleet no longer has, with an allocation.
    client = PlacementClient(placement, "fake")
    gone = str(uuidlib.uuid4())
    gone_node = {"uuid": gone, "name": "pc-gone", "resource_class": "baremetal"}
    want = provider.wanted({**gone_node, "provision_state": "available"}, None, "p")
    provider.mend(client, want, None, AGGREGATE)
    client.put_allocations(
        {
            str(uuidlib.uuid4()): {
                "allocations": {gone: {"resources": {"CUSTOM_BAREMETAL": 1}}},
                "project_id": "p",
                "user_id": "u",
                "consumer_generation": None,
                "consumer_type": "INSTANCE",
            }
        }
    )
    # Nova's own provider, in no ringfleet aggregate: none of the check's business.
    client.create_provider(str(uuidlib.uuid4()), "compute-1")

    result = fleet.run("placement", "check")
    assert result.code == 1, result.err
    expected = {
        free["uuid"]: (
            f"DRIFT: node {free['uuid']} (pc-free, owner agent-1): inventory "
            f"{placement.providers[free['uuid']].inventories}, not "
            f"{provider.inventory(provider.wanted(free, None, 'x'))}"
        ),
        maint["uuid"]: f"DRIFT: node {maint['uuid']} (pc-maint, owner agent-1): inventory ",
        traits["uuid"]: (
            f"DRIFT: node {traits['uuid']} (pc-traits, owner agent-1): traits "
            "['HW_CPU_X86_AVX2'], not ['CUSTOM_GPU', 'HW_CPU_X86_AVX2']"
        ),
        busy["uuid"]: (
            f"DRIFT: node {busy['uuid']} (pc-busy, owner agent-1): allocations of "
            f"['{other}'], not ['{busy['instance_uuid']}']"
        ),
        gold["uuid"]: (
            f"MISSING: node {gold['uuid']} (pc-gold, owner agent-1): no resource provider"
        ),
    }
    lines = result.out.splitlines()
    assert len(lines) == 6, result.out
    # Nodes in uuid order, then the orphan.
    for line, uuid in zip(lines[:5], sorted(expected), strict=True):
        assert line.startswith(expected[uuid]), (line, expected[uuid])
    assert lines[5] == (
        f"ORPHAN: provider {gone} (pc-gone) is in ringfleet's aggregate {AGGREGATE} "
        "but is no ringfleet node (allocations: 1)"
    )
    assert result.err.startswith("checked 5 nodes in ")


def test_json_and_yaml_carry_every_problem(fleet: Embedded, placement: FakePlacement) -> None:
    gold = _nodes(fleet)["pc-gold"]
    placement.providers[gold["uuid"]].aggregates.clear()
    as_json = fleet.run("placement", "check", "-f", "json")
    assert as_json.code == 1
    report = as_json.json()
    assert report == {
        "ok": False,
        "nodes": 5,
        "aggregate": AGGREGATE,
        "placement": "fake",
        "problems": [
            {
                "kind": "drift",
                "node": gold["uuid"],
                "name": "pc-gold",
                "owner": "agent-1",
                "differences": [f"not in aggregate {AGGREGATE}"],
                "message": (
                    f"node {gold['uuid']} (pc-gold, owner agent-1): not in aggregate {AGGREGATE}"
                ),
            }
        ],
    }
    as_yaml = fleet.run("placement", "check", "-f", "yaml")
    assert as_yaml.code == 1 and yaml.safe_load(as_yaml.out) == report
    placement.providers[gold["uuid"]].aggregates.add(AGGREGATE)
    ok = fleet.run("placement", "check", "-f", "json")
    assert ok.code == 0 and ok.json()["ok"] is True and ok.json()["problems"] == []


def test_a_standard_trait_placement_lacks_is_no_drift(
    fleet: Embedded, placement: FakePlacement
) -> None:
    # The reporter leaves out a trait Placement's catalogue lacks (it would
    # refuse the whole set): the check does not count it either.
    placement.traits.discard("HW_CPU_X86_AVX2")
    traits = _nodes(fleet)["pc-traits"]
    placement.providers[traits["uuid"]].traits.discard("HW_CPU_X86_AVX2")
    assert fleet.run("placement", "check").code == 0


def test_node_limits_the_check_and_skips_orphans(fleet: Embedded, placement: FakePlacement) -> None:
    nodes = _nodes(fleet)
    placement.providers[nodes["pc-free"]["uuid"]].name = "renamed"
    del placement.providers[nodes["pc-gold"]["uuid"]]
    result = fleet.run(
        "placement", "check", "--node", "pc-free", "--node", nodes["pc-free"]["uuid"]
    )
    assert result.code == 1
    assert result.out == (
        f"DRIFT: node {nodes['pc-free']['uuid']} (pc-free, owner agent-1): "
        "name 'renamed', not 'pc-free'\n"
    )
    assert result.err.startswith("checked 1 nodes in ")
    assert placement.count("GET", "/resource_providers") == 5  # no listing: one node's reads
    unknown = fleet.run("placement", "check", "--node", "no-such-node")
    assert unknown.code == 2
    assert unknown.err == "ringfleet placement check: error: node 'no-such-node' not found\n"


@pytest.mark.parametrize("failures", [1, 50])
def test_placement_down_is_one_line_and_exit_2(
    fleet: Embedded, placement: FakePlacement, failures: int
) -> None:
    # 1: the provider listing fails; 50: every read in flight fails too.
    placement.fail_next = [
        ks_exceptions.ConnectFailure("Unable to establish connection to http://placement.test")
    ] * failures
    result = fleet.run("placement", "check")
    assert result.code == 2
    assert result.out == ""
    assert result.err == (
        "ringfleet placement check: error: service unavailable: Placement at fake "
        "unreachable: Unable to establish connection to http://placement.test\n"
    )


def test_placement_refusing_is_exit_2(fleet: Embedded, placement: FakePlacement) -> None:
    placement.fail_next = [(403, {"errors": [{"status": 403, "detail": "Access was denied."}]})]
    result = fleet.run("placement", "check")
    assert result.code == 2
    assert result.err == (
        "ringfleet placement check: error: Placement refused to list providers (403): "
        "Access was denied.\n"
    )


def test_a_real_client_on_a_closed_port_is_exit_2(
    fleet: Embedded, tmp_path: Path, closed_port: int
) -> None:
    # No fake: the client from [placement], and a connection refused.
    config = tmp_path / "placement.conf"
    config.write_text(f"[placement]\nendpoint_override = http://127.0.0.1:{closed_port}\n")
    result = fleet.run("placement", "check", config=(config,))
    assert result.code == 2
    lines = result.err.splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith(
        f"ringfleet placement check: error: service unavailable: Placement at "
        f"http://127.0.0.1:{closed_port} unreachable"
    )


def test_unconfigured_placement_names_the_option(tmp_path: Path) -> None:
    config = tmp_path / "ringfleet.conf"
    config.write_text("[DEFAULT]\ntransport_url = kombu+memory:////\n")
    result = _run(RingfleetApp(), "--config-file", str(config), "placement", "check")
    assert result == (
        2,
        "",
        f"ringfleet placement check: error: [placement] auth_type: not set (config {config}): "
        "the check needs Placement's endpoint and credentials\n",
    )


def test_http_mode_is_refused() -> None:
    result = _run(RingfleetApp(), "--os-endpoint", "http://api.test", "placement", "check")
    assert result[0] == 2
    assert result[2] == (
        "ringfleet placement check: error: placement check needs RPC mode (a configuration "
        "file with [DEFAULT] transport_url and [placement] credentials), not the HTTP API\n"
    )


def _run(app: RingfleetApp, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    app.stdout, app.stderr = out, err
    code = app.run(list(argv))
    return code, out.getvalue(), err.getvalue()
