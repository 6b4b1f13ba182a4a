# SPDX-License-Identifier: Apache-2.0
"""The unit tests' fake Ironic and a real one, put through the same cases.

The ``ironic`` driver's unit tests run against :class:`tests.fake_ironic.FakeIronic`;
they prove something only while the fake does what Ironic does.  Each case
here runs twice, through the same :class:`BaremetalClient` methods: on the
fake, and on the real standalone Ironic of ``tools/with-test-servers.sh``
(fake hardware, a deploy step of a second or two), restarted for real
(``kill -9``) where the case needs it.  A case that passes on the real
Ironic and fails on the fake means the fake lies, and the driver's unit
tests with it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import pytest
from oslo_config import cfg

from conductor.common.conf import ironic as ironic_conf
from conductor.common.exception import DriverError
from conductor.common.ironic import states
from conductor.common.ironic.client import (
    BaremetalClient,
    IronicClaimConflict,
    IronicNode,
    IronicNodeGone,
    IronicNodeLocked,
)
from tests.fake_ironic import FakeIronic
from tests.harness import wait_for
from tests.harness.ironic import IronicHarness
from tests.harness.servers import server_ctl


class Backend(Protocol):
    """One Ironic, fake or real, as the cases see it."""

    client: Any  # BaremetalClient, or the fake with its methods

    def new_node(self) -> str: ...

    def restart(self) -> None: ...


class FakeBackend:
    def __init__(self) -> None:
        self.client = FakeIronic()

    def new_node(self) -> str:
        return self.client.add(power_state="power on").uuid

    def restart(self) -> None:
        self.client.restart()


class RealBackend:
    def __init__(self, url: str, harness: IronicHarness, shard: str) -> None:
        conf = cfg.ConfigOpts()
        ironic_conf.OPTIONS.register(conf)
        conf([], project="ringfleet-test")
        conf.set_override("auth_type", "none", "ironic")
        conf.set_override("endpoint_override", url, "ironic")
        self.client = BaremetalClient.from_conf(conf)
        self._harness = harness
        self._shard = shard

    def new_node(self) -> str:
        [node] = self._harness.enroll(1, shard=self._shard)
        return node

    def restart(self) -> None:
        server_ctl("kill-ironic")
        server_ctl("start-ironic")


@pytest.fixture(params=["fake", "real"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "fake":
        yield FakeBackend()
        return
    url: str = request.getfixturevalue("ironic_url")
    harness: IronicHarness = request.getfixturevalue("ironic")
    yield RealBackend(url, harness, request.getfixturevalue("shard"))


def _read(backend: Backend, node: str) -> IronicNode:
    node_view: IronicNode = backend.client.get_node(node, action="contract")
    return node_view


def _until(
    backend: Backend, node: str, done: Callable[[IronicNode], bool], what: str
) -> IronicNode:
    def reached() -> IronicNode | None:
        found = _read(backend, node)
        return found if done(found) else None

    result: IronicNode = wait_for(reached, 60, what, step=0.05)
    return result


def _at_rest(backend: Backend, node: str) -> IronicNode:
    return _until(
        backend, node, lambda n: not states.in_transition(n.provision_state), f"{node} at rest"
    )


#: An image reference for the fake deploy interface (never fetched: image_type is given).
IMAGE = {"image_source": "http://127.0.0.1:9/contract.img", "image_type": "whole-disk"}
#: What the ``ironic`` driver sets for a build with an image and a config drive.
IMAGE_INFO = {
    "image_source": "http://images.test/contract.qcow2",
    "image_os_hash_algo": "sha256",
    "image_os_hash_value": "ab" * 32,
    "image_disk_format": "qcow2",
}
CONFIG_DRIVE = {
    "user_data": "#cloud-config\n",
    "meta_data": {"public_keys": {"k": "ssh-ed25519 AAAA k@test"}, "uuid": "u", "name": "n"},
    "network_data": {"links": []},
}


def _deploy(
    backend: Backend,
    node: str,
    image: dict[str, Any] | None = None,
    configdrive: dict[str, Any] | None = None,
) -> str:
    instance = str(uuid.uuid4())
    info = {"ringfleet_host": "contract", "ringfleet_epoch": 1, **(image or {})}
    backend.client.claim(node, instance, info)
    extra = {} if configdrive is None else {"configdrive": configdrive}
    backend.client.set_provision_state(node, "active", action="contract", **extra)
    return instance


def test_a_deploy_and_a_teardown_end_where_ironic_says(backend: Backend) -> None:
    node = backend.new_node()
    instance = _deploy(backend, node, IMAGE_INFO, CONFIG_DRIVE)
    deployed = _at_rest(backend, node)
    assert (deployed.provision_state, deployed.target_provision_state) == ("active", None)
    assert deployed.instance_uuid == instance
    # The image as given, the type Ironic derives, the config drive hidden.
    assert {k: deployed.instance_info.get(k) for k in IMAGE_INFO} == IMAGE_INFO
    assert deployed.instance_info["image_type"] == "whole-disk"
    assert deployed.instance_info["configdrive"] == "******"
    backend.client.set_provision_state(node, "deleted", action="contract")
    torn_down = _at_rest(backend, node)
    assert (torn_down.provision_state, torn_down.target_provision_state) == ("available", None)
    assert (torn_down.instance_uuid, dict(torn_down.instance_info)) == (None, {})
    assert torn_down.provision_updated_at is not None
    assert torn_down.provision_updated_at != deployed.provision_updated_at


def test_a_second_claim_is_refused_and_an_unknown_node_is_gone(backend: Backend) -> None:
    node = backend.new_node()
    backend.client.claim(node, str(uuid.uuid4()), {})
    with pytest.raises(IronicClaimConflict):
        backend.client.claim(node, str(uuid.uuid4()), {})
    with pytest.raises(IronicNodeGone):
        backend.client.get_node(str(uuid.uuid4()), action="contract")
    backend.client.release(node)
    assert _read(backend, node).instance_uuid is None


def test_a_node_deploying_is_locked_to_other_writes(backend: Backend) -> None:
    node = backend.new_node()
    _deploy(backend, node)
    assert _read(backend, node).provision_state == "deploying"
    with pytest.raises(IronicNodeLocked, match="is locked by host"):
        backend.client.set_power_state(node, "power off")
    _at_rest(backend, node)


@pytest.mark.parametrize(
    ("target", "expected"),
    [("soft power off", "power off"), ("power on", "power on"), ("soft rebooting", "power on")],
)
def test_a_power_request_ends_in_its_power_state(
    backend: Backend, target: str, expected: str
) -> None:
    """What the driver follows: target_power_state set, then null with power_state there."""
    node = backend.new_node()
    backend.client.set_power_state(node, target)
    done = _until(backend, node, lambda n: n.target_power_state is None, f"{node} {target}")
    assert done.power_state == expected


def test_a_rebuild_redeploys_an_active_node_and_is_refused_on_an_available_one(
    backend: Backend,
) -> None:
    node = backend.new_node()
    with pytest.raises(DriverError, match=r"refused \(400\)"):
        backend.client.set_provision_state(node, "rebuild", action="contract")
    # An image, as a real deploy has (without one Ironic 39.0.0 answers a
    # rebuild with 500); image_type set: Ironic does not fetch the URL.
    instance = _deploy(backend, node, image=IMAGE)
    deployed = _at_rest(backend, node)
    backend.client.set_provision_state(node, "rebuild", action="contract")
    assert _read(backend, node).provision_state != "active"  # moved before answering
    rebuilt = _at_rest(backend, node)
    assert (rebuilt.provision_state, rebuilt.instance_uuid) == ("active", instance)
    assert rebuilt.provision_updated_at != deployed.provision_updated_at


def test_an_unknown_power_target_is_refused_with_400(backend: Backend) -> None:
    """A refusal retrying cannot fix (the driver raises it at once)."""
    node = backend.new_node()
    with pytest.raises(DriverError, match=r"refused \(400\)"):
        backend.client.set_power_state(node, "power cycle")
    assert _read(backend, node).power_state == "power on"


def test_a_restart_fails_an_interrupted_deploy_and_keeps_its_target(backend: Backend) -> None:
    node = backend.new_node()
    _deploy(backend, node)
    assert _read(backend, node).provision_state == "deploying"
    backend.restart()
    failed = _at_rest(backend, node)
    assert (failed.provision_state, failed.target_provision_state) == ("deploy failed", "active")
    assert "can't be resumed" in (failed.last_error or "")
    # ... and a failed deploy is torn down like an active one.
    backend.client.set_provision_state(node, "deleted", action="contract")
    assert _at_rest(backend, node).provision_state == "available"


def test_a_restart_fails_an_interrupted_teardown(backend: Backend) -> None:
    node = backend.new_node()
    _deploy(backend, node)
    _at_rest(backend, node)
    backend.client.set_provision_state(node, "deleted", action="contract")
    caught = _read(backend, node).provision_state
    print(f"teardown interrupted in {caught}")
    backend.restart()
    after = _at_rest(backend, node)
    if caught == "deleting":
        assert (after.provision_state, after.target_provision_state) == ("error", None)
        assert "can't be resumed" in (after.last_error or "")
        # Asking "deleted" again ends it.
        backend.client.set_provision_state(node, "deleted", action="contract")
        assert _at_rest(backend, node).provision_state == "available"
    else:  # the teardown was past its deleting step: it went on or cleaning failed
        assert after.provision_state in ("available", "clean failed"), (caught, after)
