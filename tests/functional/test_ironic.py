# SPDX-License-Identifier: Apache-2.0
"""ringfleet on a real Ironic: sync, build, delete, adoption, fencing, claim race.

A real standalone Ironic (fake hardware, ``[fake] deploy_delay`` of a second
or two per step, so a deploy can be caught in the middle) started by
``tools/with-test-servers.sh``; real etcd, RabbitMQ and PostgreSQL; a
conductor and agents as processes with the ``ironic`` driver.  Each test
enrolls its nodes in a shard of its own and points the sync at that shard
only, so tests sharing the one Ironic never see each other's nodes.  What
happened is checked in Ironic's own records (through
:mod:`tests.harness.ironic`, plain HTTP), not only in ringfleet's.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest
from oslo_config import cfg

from compute_agent.drivers.base import ActionContext, load_driver
from conductor.common.conf import ironic as ironic_conf
from conductor.common.exception import NodeNotBuildable
from conductor.common.objects import Node
from tests.functional.fleet_harness import TTL, Fleet, log_tails, start_processes
from tests.harness import wait_for
from tests.harness.ironic import IronicHarness

#: The image the flavors of these tests deploy by default (Ironic's fake
#: deploy fetches nothing).
IMAGE = {
    "source": "http://images.test/ubuntu-24.04.qcow2",
    "os_hash_algo": "sha256",
    "os_hash_value": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "disk_format": "qcow2",
}

#: Ironic's provision states of a deploy under way.
DEPLOYING = ("deploying", "wait call-back")


@pytest.fixture
def fleet(fleet_on_ironic: Fleet) -> Fleet:
    return fleet_on_ironic


def _instances_in(fleet: Fleet, uuids: list[str], state: str) -> bool:
    return all(fleet.api.show_instance(u)["vm_state"] == state for u in uuids)


def _by_instance(ironic: IronicHarness, shard: str) -> dict[str, dict[str, Any]]:
    return {n["instance_uuid"]: n for n in ironic.nodes(shard) if n["instance_uuid"]}


def test_ironic_nodes_are_synced_built_deleted_and_follow_maintenance(
    fleet: Fleet, ironic: IronicHarness, shard: str
) -> None:
    nodes = ironic.enroll(
        4,
        shard=shard,
        traits=("CUSTOM_FAST",),
        properties={"cpus": 8, "capabilities": "boot_mode:uefi"},
    )
    start_processes(fleet, agents=("agent-1", "agent-2"))

    summary = fleet.api.sync_ironic_nodes()
    assert (summary["listed"], summary["created"], summary["retired"]) == (4, 4, 0)
    stored = {n["uuid"]: n for n in fleet.api.list_nodes()}
    assert set(stored) == set(nodes)
    for node in stored.values():
        assert node["group"] == shard
        assert node["traits"] == ["CUSTOM_FAST"]
        assert node["properties"]["capabilities"] == "boot_mode:uefi"
        assert node["provision_state"] == "available"
        assert node["power_state"] == "power on"
    # A second pass with nothing changed in Ironic changes nothing.
    again = fleet.api.sync_ironic_nodes()
    assert (again["created"], again["updated"], again["retired"]) == (0, 0, 0)

    # The flavor's default image and the request's config drive reach Ironic
    # (fake deploys write nothing, but Ironic keeps what it was given).
    fleet.api.create_flavor(
        {
            "name": "fast",
            "resource_class": "baremetal",
            "extra_specs": {"trait:CUSTOM_FAST": "required", "capabilities:boot_mode": "uefi"},
            "default_image": IMAGE,
        }
    )
    built = [
        i["uuid"]
        for i in fleet.api.build_instances(
            {
                "flavor": "fast",
                "count": 4,
                "user_data": "#cloud-config\nhostname: web\n",
                "meta_data": {"public_keys": {"ops": "ssh-ed25519 AAAAC3Nza ops@test"}},
                "network_data": {"links": [], "networks": [], "services": []},
            }
        )
    ]
    wait_for(lambda: _instances_in(fleet, built, "active"), 90, "4 instances ACTIVE")
    deployed = _by_instance(ironic, shard)
    assert set(deployed) == set(built)  # Ironic holds exactly our instances
    for record in deployed.values():
        assert record["provision_state"] == "active"
        info = record["instance_info"]
        assert info["ringfleet_host"] in ("agent-1", "agent-2")
        assert (info["image_source"], info["image_os_hash_algo"]) == (IMAGE["source"], "sha256")
        assert info["image_os_hash_value"] == IMAGE["os_hash_value"]
        assert info["image_disk_format"] == "qcow2"
        assert info["configdrive"] == "******"  # Ironic built it, and hides it
    for instance in built:
        node = fleet.api.show_instance(instance)["node_uuid"]
        assert deployed[instance]["uuid"] == node

    _power_verbs_show_in_ironic(fleet, ironic, built[0])

    for instance in built:
        fleet.api.delete_instance(instance)
    wait_for(lambda: _instances_in(fleet, built, "deleted"), 90, "4 instances deleted")
    for record in ironic.nodes(shard):
        assert record["provision_state"] == "available"
        assert record["instance_uuid"] is None

    # Maintenance set in Ironic takes the node out of scheduling at the next
    # pass; a removed node is retired, never deleted.
    ironic.set_maintenance(nodes[0], True, reason="fan failure")
    ironic.delete(nodes[3])
    summary = fleet.api.sync_ironic_nodes()
    assert summary["retired"] == 1
    first = fleet.api.show_node(nodes[0])
    assert first["maintenance"] and first["maintenance_reason"] == "ironic: fan failure"
    gone = fleet.api.show_node(nodes[3])
    assert gone["maintenance"] and "removed from Ironic" in gone["maintenance_reason"]
    again = [i["uuid"] for i in fleet.api.build_instances({"flavor": "fast", "count": 3})]
    wait_for(
        lambda: (
            {fleet.api.show_instance(u)["vm_state"] for u in again} <= {"active", "error"}
            and not any(fleet.api.show_instance(u)["vm_state"] == "building" for u in again)
        ),
        90,
        "3 more builds settled",
    )
    placed = {fleet.api.show_instance(u)["node_uuid"] for u in again}
    assert placed == set(nodes[1:3]) | {None} or placed == set(nodes[1:3])
    assert sum(fleet.api.show_instance(u)["vm_state"] == "active" for u in again) == 2

    # Ironic's maintenance ends: the node is scheduled again.
    ironic.set_maintenance(nodes[0], False)
    fleet.api.sync_ironic_nodes()
    assert not fleet.api.show_node(nodes[0])["maintenance"]


def _power_verbs_show_in_ironic(fleet: Fleet, ironic: IronicHarness, instance: str) -> None:
    """Stop, start, reboot and rebuild an instance: Ironic's power state follows
    each, and so does the node's in ringfleet; the rebuild is Ironic's own
    (a new deploy of the same node, still claimed by the instance); then a
    rebuild with a new image and user data: Ironic redeploys the new image,
    on the same node."""
    node = fleet.api.show_instance(instance)["node_uuid"]
    before = ironic.node(node)

    def settled() -> dict[str, Any] | None:
        found: dict[str, Any] = fleet.api.show_instance(instance)
        return found if found["task_state"] is None else None

    for verb, vm_state, power in (
        (fleet.api.stop_instance, "stopped", "power off"),
        (fleet.api.start_instance, "active", "power on"),
        (fleet.api.reboot_instance, "active", "power on"),
        (fleet.api.rebuild_instance, "active", "power on"),
    ):
        started = time.monotonic()
        assert verb(instance)["task_state"] is not None
        done = wait_for(settled, 60, f"{verb.__name__} of {instance} done")
        assert (done["vm_state"], done["fault"]) == (vm_state, None), done
        record = ironic.node(node)
        assert (record["power_state"], record["target_power_state"]) == (power, None)
        assert fleet.api.show_node(node)["power_state"] == power
        print(f"{verb.__name__}: {time.monotonic() - started:.2f} s")
    rebuilt = ironic.node(node)
    assert (rebuilt["provision_state"], rebuilt["instance_uuid"]) == ("active", instance)
    assert rebuilt["provision_updated_at"] != before["provision_updated_at"]
    assert rebuilt["instance_info"]["image_source"] == IMAGE["source"]  # the record's

    started = time.monotonic()
    new_image = {
        "source": "http://images.test/debian-13.raw",
        "os_hash_algo": "sha512",
        "os_hash_value": "0" * 128,
    }
    reply = fleet.api.rebuild_instance(instance, image=new_image, user_data="#cloud-config\n")
    assert reply["task_state"] == "rebuilding"
    done = wait_for(settled, 60, f"rebuild of {instance} with a new image done")
    assert (done["vm_state"], done["fault"], done["node_uuid"]) == ("active", None, node), done
    assert done["image"] == new_image
    assert done["config_drive"]["user_data"] == "#cloud-config\n"
    record = ironic.node(node)
    assert (record["provision_state"], record["instance_uuid"]) == ("active", instance)
    assert record["provision_updated_at"] != rebuilt["provision_updated_at"]
    info = record["instance_info"]
    assert (info["image_source"], info["image_os_hash_algo"]) == (new_image["source"], "sha512")
    assert info["image_os_hash_value"] == "0" * 128
    # The old image's disk format is gone: Ironic would use it.
    assert "image_disk_format" not in info
    assert info["configdrive"] == "******"  # rebuilt from the new user data
    print(f"rebuild with a new image: {time.monotonic() - started:.2f} s")
    # Ironic's fake power interface has the soft targets: no fallback was needed.
    assert not [
        line
        for name in ("agent-1", "agent-2")
        for line in fleet.procs[name].log().splitlines()
        if "falling back" in line
    ]


def _wait_deploying(ironic: IronicHarness, node: str) -> dict[str, Any]:
    return wait_for(
        lambda: (n := ironic.node(node))["provision_state"] in DEPLOYING and n,
        30,
        f"Ironic node {node} deploying",
        step=0.05,
    )


def _one_build(fleet: Fleet, ironic: IronicHarness, shard: str) -> tuple[str, str, str]:
    """Sync one enrolled node, start one build; (instance, node, owner) once Ironic deploys."""
    fleet.api.sync_ironic_nodes()
    fleet.api.create_flavor({"name": "bm", "resource_class": "baremetal"})
    wait_for(
        lambda: all(o is not None for o, _e, _i in fleet.owners().values()),
        30,
        "the node owned",
    )
    [reply] = fleet.api.build_instances({"flavor": "bm", "count": 1})
    instance = reply["uuid"]
    node = wait_for(lambda: fleet.api.show_instance(instance)["node_uuid"], 30, "placed")
    _wait_deploying(ironic, node)
    owner = fleet.owners()[node][0]
    assert owner is not None
    return instance, node, owner


def test_kill_of_the_agent_mid_deploy_is_adopted_by_the_new_owner(
    fleet: Fleet, ironic: IronicHarness, shard: str
) -> None:
    ironic.enroll(1, shard=shard)
    start_processes(fleet, agents=("agent-1", "agent-2"))
    instance, node, owner = _one_build(fleet, ironic, shard)

    killed_at = time.monotonic()
    fleet.procs[owner].kill()
    survivor = ({"agent-1", "agent-2"} - {owner}).pop()
    try:
        wait_for(
            lambda: fleet.api.show_instance(instance)["vm_state"] in ("active", "error"),
            # build_timeout is the default 1800 s: only adoption ends this soon.
            TTL + 60,
            "the adopted build settled",
        )
    except AssertionError:
        pytest.fail(log_tails(fleet, mentioning=[instance, node]))
    settled_after = time.monotonic() - killed_at
    shown = fleet.api.show_instance(instance)
    assert shown["vm_state"] == "active", shown
    record = ironic.node(node)
    assert (record["provision_state"], record["instance_uuid"]) == ("active", instance)
    assert fleet.owners()[node][0] == survivor
    # The node hosts a build, so it is pinned: re-homed after the TTL and
    # rehome_grace (an agent restarting in time keeps it), then adopted.
    print(f"kill -9 mid-deploy: ACTIVE {settled_after:.1f} s after the kill")


def test_a_paused_agent_touches_nothing_in_ironic_after_it_lost_the_node(
    fleet: Fleet, ironic: IronicHarness, shard: str
) -> None:
    ironic.enroll(1, shard=shard)
    start_processes(fleet, agents=("agent-1", "agent-2"))
    instance, node, owner = _one_build(fleet, ironic, shard)

    fleet.procs[owner].pause()  # SIGSTOP mid-deploy, past its TTL
    try:
        survivor = ({"agent-1", "agent-2"} - {owner}).pop()
        wait_for(
            lambda: fleet.api.show_instance(instance)["vm_state"] == "active",
            TTL + 60,
            "the build finished by the new owner",
        )
        assert fleet.owners()[node][0] == survivor
        # The new owner tears it down: the node is free in Ironic, which is
        # exactly where a stale deploy resumed unfenced would start again.
        fleet.api.delete_instance(instance)
        wait_for(lambda: fleet.api.show_instance(instance)["vm_state"] == "deleted", 60, "deleted")
        before = ironic.node(node)
        assert (before["provision_state"], before["instance_uuid"]) == ("available", None)
    finally:
        fleet.procs[owner].resume()
    # The resumed agent follows its deploy again: it must see it lost the
    # node and stop, changing nothing in Ironic.
    fleet.procs[owner].wait_log(f"Instance {instance} on node {node} abandoned", 30)
    time.sleep(2)
    after = ironic.node(node)
    for field in ("provision_state", "instance_uuid", "instance_info", "provision_updated_at"):
        assert after[field] == before[field], field
    assert after["updated_at"] == before["updated_at"]


def _driver(ironic_url: str, host: str) -> Any:
    conf = cfg.ConfigOpts()
    ironic_conf.OPTIONS.register(conf)
    conf([], project="ringfleet-test")
    conf.set_override("auth_type", "none", "ironic")
    conf.set_override("endpoint_override", ironic_url, "ironic")
    conf.set_override("poll_interval", 0.05, "ironic")
    return load_driver("ironic", conf, host)


def test_two_agents_racing_for_one_ironic_node_make_exactly_one_claim(
    ironic: IronicHarness, ironic_url: str, shard: str
) -> None:
    """Ringfleet's fence is bypassed on purpose (two drivers both told they
    own the node, as in a split brain): Ironic's claim is the fence beneath."""
    (node_uuid,) = ironic.enroll(1, shard=shard)
    node = Node(uuid=node_uuid, name="race", resource_class="baremetal", owner_epoch=1)
    contenders = {f"agent-{i}": str(uuid.uuid4()) for i in (1, 2, 3)}
    drivers = {host: _driver(ironic_url, host) for host in contenders}
    start = threading.Barrier(len(contenders))
    outcome: dict[str, str] = {}

    def deploy(host: str) -> None:
        try:
            ctx = ActionContext(node_uuid, host, 1, contenders[host])
            start.wait()
            drivers[host].deploy(ctx, node, lambda _step: None)
            outcome[host] = "deployed"
        except NodeNotBuildable as exc:
            outcome[host] = f"refused: {exc}"
        except Exception as exc:  # shown by the assertions below
            outcome[host] = f"failed: {exc!r}"

    threads = [threading.Thread(target=deploy, args=(h,)) for h in contenders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    winners = [h for h, result in outcome.items() if result == "deployed"]
    assert len(winners) == 1, outcome
    assert len(outcome) == len(contenders), outcome
    record = ironic.node(node_uuid)
    assert record["provision_state"] == "active"
    assert record["instance_uuid"] == contenders[winners[0]]
    assert record["instance_info"]["ringfleet_host"] == winners[0]
    for host, result in outcome.items():
        if host != winners[0]:
            assert "claimed by instance" in result, result

    # The winner tears it down: available again, claim cleared.
    drivers[winners[0]].destroy(
        ActionContext(node_uuid, winners[0], 1, contenders[winners[0]]), node
    )
    record = ironic.node(node_uuid)
    assert (record["provision_state"], record["instance_uuid"]) == ("available", None)
    for driver in drivers.values():
        driver.close()
