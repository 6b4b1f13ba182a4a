# SPDX-License-Identifier: Apache-2.0
"""A build's image and config drive on the agent side (compute API 1.2).

The endpoint hands them to the deploy; the ``ironic`` driver puts the image
in ``instance_info`` with its claim and the config drive in the request for
``active`` (against :class:`~tests.fake_ironic.FakeIronic`, which keeps and
hides it as Ironic does); the ``simulated`` driver's machines keep what
reached them, in the node store shared by the agents.
"""

from __future__ import annotations

import sqlite3
import types
import uuid as uuidlib
from pathlib import Path
from typing import Any

import pytest

from compute_agent.actions import NodeActions
from compute_agent.drivers.base import NO_DEPLOY_SPEC, DeploySpec
from compute_agent.drivers.simulated.node_store import SqliteNodeStore
from compute_agent.endpoints import ComputeEndpoint
from compute_agent.rpcapi import ComputeAPI
from conductor.common.exception import InvalidInput
from conductor.common.ironic.client import BaremetalClient
from conductor.common.objects import Node
from tests.fake_ironic import HIDDEN, FakeIronic
from tests.unit import test_drivers, test_ironic_driver
from tests.unit.test_ironic_driver import (
    EPOCH,
    HOST,
    Results,
    Steps,
    StubOwnership,
    ctx_for,
    make_conf,
    make_driver,
    new_instance,
    ring_node,
)

IMAGE = {
    "source": "https://images.test/ubuntu.qcow2",
    "os_hash_algo": "sha512",
    "os_hash_value": "c" * 128,
    "checksum": "d" * 32,
    "disk_format": "qcow2",
}
DRIVE = {
    "user_data": "#cloud-config\npassword: hunter2\n",
    "meta_data": {"public_keys": {"ops": "ssh-ed25519 AAAA ops@test"}, "uuid": "u", "name": "n"},
    "network_data": {"links": []},
}
SPEC = DeploySpec(image=IMAGE, config_drive=DRIVE)


# -- the endpoint ---------------------------------------------------------------------------


class RecordingActions:
    def __init__(self) -> None:
        self.specs: list[tuple[str, DeploySpec | None]] = []

    def build(self, instance: str, node: Node, epoch: int, spec: DeploySpec | None = None) -> str:
        self.specs.append((instance, spec))
        return "accepted"


def _endpoint() -> tuple[ComputeEndpoint, RecordingActions]:
    actions = RecordingActions()
    endpoint = ComputeEndpoint(HOST, actions, dict, lambda: None)  # type: ignore[arg-type]
    return endpoint, actions


def _node_dict() -> dict[str, Any]:
    return {"uuid": str(uuidlib.uuid4()), "name": "n1", "resource_class": "baremetal"}


def test_the_endpoint_hands_the_image_and_config_drive_to_the_deploy() -> None:
    endpoint, actions = _endpoint()
    instance = new_instance()
    endpoint.build_instance(
        {}, instance_uuid=instance, node=_node_dict(), epoch=1, image=IMAGE, config_drive=DRIVE
    )
    endpoint.build_instances(
        {},
        builds=[
            {"instance_uuid": instance, "node": _node_dict(), "epoch": 1, "image": IMAGE},
            {"instance_uuid": instance, "node": _node_dict(), "epoch": 1},
        ],
    )
    assert [spec for _, spec in actions.specs] == [
        SPEC,
        DeploySpec(image=IMAGE),
        DeploySpec(),
    ]


def test_a_malformed_config_drive_is_refused_naming_it_without_showing_it() -> None:
    endpoint, actions = _endpoint()
    with pytest.raises(InvalidInput) as refused:
        endpoint.build_instances(
            {},
            builds=[
                {
                    "instance_uuid": new_instance(),
                    "node": _node_dict(),
                    "epoch": 1,
                    "image": ["not", "an", "image"],
                    "config_drive": "password: hunter2",
                }
            ],
        )
    assert refused.value.fields == ["builds[0].image", "builds[0].config_drive"]
    assert "hunter2" not in str(refused.value)
    assert actions.specs == []  # nothing started


class _Client:
    """oslo.messaging's client: the version each call was prepared at."""

    def __init__(self, cap: str) -> None:
        self.cap = cap
        self.timeout = 1.0
        self.versions: list[str] = []

    def can_send_version(self, version: str) -> bool:
        return version <= self.cap

    def prepare(self, *, server: str, version: str, timeout: float | None) -> Any:
        self.versions.append(version)
        return types.SimpleNamespace(call=lambda ctxt, method, **kwargs: "accepted")


def test_a_build_with_an_image_is_sent_at_1_2_one_without_at_1_0(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = ComputeAPI.__new__(ComputeAPI)
    api.client = _Client("1.2")
    api._observe = None
    monkeypatch.setattr(
        "conductor.common.rpc.call", lambda client, method, observe, **kw: client.call({}, method)
    )
    node = _node_dict()
    api.build_instance("a1", instance_uuid=new_instance(), node=node, epoch=1)
    api.build_instance("a1", instance_uuid=new_instance(), node=node, epoch=1, image=IMAGE)
    api.build_instances("a1", [{"instance_uuid": "i", "node": node, "epoch": 1}])
    api.build_instances("a1", [{"instance_uuid": "i", "node": node, "epoch": 1, "image": IMAGE}])
    assert api.client.versions == ["1.0", "1.2", "1.1", "1.2"]


# -- the ironic driver ----------------------------------------------------------------------


def test_ironic_gets_the_image_in_instance_info_and_the_config_drive_at_deploy(
    tmp_path: Path,
) -> None:
    fake = FakeIronic()
    ironic_node = fake.add(properties={"local_gb": 100})
    node = Node(
        uuid=ironic_node.uuid, name="n1", resource_class="baremetal", properties={"local_gb": 100}
    )
    instance = new_instance()
    make_driver(tmp_path, fake).deploy(ctx_for(node, instance), node, Steps(), SPEC)
    assert ironic_node.provision_state == "active"
    info = {
        "ringfleet_host": HOST,
        "ringfleet_epoch": EPOCH,
        "image_source": IMAGE["source"],
        "image_os_hash_algo": "sha512",
        "image_os_hash_value": "c" * 128,
        "image_checksum": "d" * 32,
        "image_disk_format": "qcow2",
        "root_gb": 100,
    }
    # The image is set with the claim, in the same atomic PATCH.
    assert fake.writes[0] == ("claim", node.uuid, instance, info)
    assert fake.configdrives[node.uuid] == DRIVE
    # What Ironic shows: the drive hidden, the image type it derived.
    shown = fake.get_node(node.uuid, action="test").instance_info
    assert shown == {**info, "image_type": "whole-disk", "configdrive": HIDDEN}


def test_a_partition_image_sends_kernel_and_ramdisk(tmp_path: Path) -> None:
    fake = FakeIronic()
    ironic_node = fake.add()
    node, instance = ring_node(ironic_node), new_instance()
    partition = {
        "source": "http://i.test/root.img",
        "checksum": "e" * 32,
        "kernel": "http://i.test/vmlinuz",
        "ramdisk": "http://i.test/initrd",
    }
    make_driver(tmp_path, fake).deploy(
        ctx_for(node, instance), node, Steps(), DeploySpec(image=partition)
    )
    shown = fake.get_node(node.uuid, action="test").instance_info
    assert (shown["kernel"], shown["ramdisk"], shown["image_type"]) == (
        partition["kernel"],
        partition["ramdisk"],
        "partition",
    )
    assert "configdrive" not in shown and "root_gb" not in shown  # no local_gb, no drive


def test_without_an_image_the_claim_and_deploy_are_as_before(tmp_path: Path) -> None:
    fake = FakeIronic()
    ironic_node = fake.add()
    node, instance = ring_node(ironic_node), new_instance()
    make_driver(tmp_path, fake).deploy(ctx_for(node, instance), node, Steps(), NO_DEPLOY_SPEC)
    assert ironic_node.provision_state == "active"
    assert ironic_node.instance_info == {"ringfleet_host": HOST, "ringfleet_epoch": EPOCH}
    assert fake.configdrives == {}


def test_a_direct_deploy_without_an_image_fails_with_ironics_reason(tmp_path: Path) -> None:
    fake = FakeIronic()
    ironic_node = fake.add(deploy_interface="direct")
    node, instance = ring_node(ironic_node), new_instance()
    results = Results()
    actions = NodeActions(
        HOST,
        test_ironic_driver.CountingDriver(make_conf(tmp_path), HOST, client=fake),  # type: ignore[arg-type]
        StubOwnership(),  # type: ignore[arg-type]
        results,
    )
    actions._deploy(instance, node, EPOCH)
    [report] = results.builds
    assert not report["success"]
    assert "Missing are: ['instance_info.image_source']" in report["fault"]
    # With the image the same node deploys.
    again = new_instance()
    actions._deploy(again, node, EPOCH, DeploySpec(image=IMAGE))
    assert results.builds[-1]["success"], results.builds[-1]
    assert ironic_node.instance_info["image_source"] == IMAGE["source"]


def test_the_client_sends_the_config_drive_as_json() -> None:
    calls: list[tuple[str, str, Any]] = []

    class Proxy:
        def set_node_provision_state(
            self, node: str, target: str, *, config_drive: Any, wait: bool
        ) -> None:
            calls.append((node, target, config_drive))

    client = BaremetalClient(Proxy(), "http://ironic.test")
    client.set_provision_state("n1", "active", action="deploy", configdrive=DRIVE)
    client.set_provision_state("n1", "deleted", action="destroy")
    assert calls == [("n1", "active", DRIVE), ("n1", "deleted", None)]


# -- the simulated driver -------------------------------------------------------------------


def test_a_simulated_machine_keeps_what_reached_it_until_destroyed(tmp_path: Path) -> None:
    store = tmp_path / "nodes.sqlite"
    driver = test_drivers.make_driver(tmp_path, node_store=store)
    node = test_drivers.make_node()
    ctx = test_drivers.ctx_for(node)
    driver.deploy(ctx, node, lambda step: None, SPEC)
    # Another agent's driver on the same store sees the same machine.
    other = test_drivers.make_driver(tmp_path, host="agent-2", node_store=store)
    seen = other.node_state(node.uuid)
    assert seen is not None and seen.image == IMAGE and seen.config_drive == DRIVE
    assert "hunter2" not in repr(seen)
    driver.destroy(ctx, node)
    cleaned = other.node_state(node.uuid)
    assert cleaned is not None and (cleaned.image, cleaned.config_drive) == (None, None)


def test_a_node_store_of_an_older_release_gets_the_new_columns(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE nodes (uuid TEXT PRIMARY KEY, power_state TEXT NOT NULL, "
            "provision_state TEXT NOT NULL, instance_uuid TEXT, last_error TEXT)"
        )
        conn.execute("INSERT INTO nodes VALUES ('n1', 'power off', 'available', NULL, NULL)")
    store = SqliteNodeStore(path)
    try:
        old = store.get("n1")
        assert old is not None and old.image is None
        assert store.update("n1", image=IMAGE).image == IMAGE
        assert store.get("n1").image == IMAGE  # type: ignore[union-attr]
    finally:
        store.close()


# -- rebuild with the record's image (compute API 1.4) ------------------------------------

NEW_IMAGE = {"source": "https://images.test/debian.raw", "checksum": "e" * 32}


def test_a_simulated_rebuild_keeps_the_new_image_and_drive(tmp_path: Path) -> None:
    driver = test_drivers.make_driver(tmp_path)
    node = test_drivers.make_node()
    ctx = test_drivers.ctx_for(node)
    driver.deploy(ctx, node, lambda step: None, SPEC)
    new_drive = {**DRIVE, "user_data": "#cloud-config\n"}
    driver.rebuild(ctx, node, lambda step: None, DeploySpec(NEW_IMAGE, new_drive))
    seen = driver.node_state(node.uuid)
    assert seen is not None and (seen.image, seen.config_drive) == (NEW_IMAGE, new_drive)
    # Without a spec (an older conductor) the machine keeps what it had.
    driver.rebuild(ctx, node, lambda step: None)
    again = driver.node_state(node.uuid)
    assert again is not None and again.image == NEW_IMAGE


def test_the_endpoint_hands_the_rebuild_its_image_and_config_drive() -> None:
    rebuilt: list[DeploySpec] = []

    class Actions:
        def rebuild(
            self, instance: str, node: Node, epoch: int, spec: DeploySpec, request_id: None
        ) -> str:
            rebuilt.append(spec)
            return "active"

    endpoint = ComputeEndpoint(HOST, Actions(), dict, lambda: None)  # type: ignore[arg-type]
    node = _node_dict()
    endpoint.rebuild_instance(
        {}, instance_uuid=new_instance(), node=node, epoch=1, image=NEW_IMAGE, config_drive=DRIVE
    )
    endpoint.rebuild_instance({}, instance_uuid=new_instance(), node=node, epoch=1)
    assert rebuilt == [DeploySpec(NEW_IMAGE, DRIVE), DeploySpec()]
    with pytest.raises(InvalidInput) as refused:
        endpoint.rebuild_instance(
            {}, instance_uuid=new_instance(), node=node, epoch=1, config_drive="pw: hunter2"
        )
    assert refused.value.fields == ["config_drive"] and "hunter2" not in str(refused.value)


def test_a_rebuild_with_an_image_is_sent_at_1_4_one_without_at_1_3(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = ComputeAPI.__new__(ComputeAPI)
    api.client = _Client("1.4")
    api._observe = None
    monkeypatch.setattr(
        "conductor.common.rpc.call", lambda client, method, observe, **kw: client.call({}, method)
    )
    node = _node_dict()
    api.rebuild_instance("a1", instance_uuid=new_instance(), node=node, epoch=1)
    api.rebuild_instance("a1", instance_uuid=new_instance(), node=node, epoch=1, image=NEW_IMAGE)
    api.rebuild_instance("a1", instance_uuid=new_instance(), node=node, epoch=1, config_drive=DRIVE)
    assert api.client.versions == ["1.3", "1.4", "1.4"]
