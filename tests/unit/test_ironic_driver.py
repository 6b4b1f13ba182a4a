# SPDX-License-Identifier: Apache-2.0
"""The ``ironic`` compute driver and the Ironic client, against an in-memory fake Ironic.

:class:`~tests.fake_ironic.FakeIronic` has the methods of
:class:`BaremetalClient` and moves its nodes through Ironic's states as
Ironic does (checked against a real one by test_ironic_contract), one step
per read, so the driver's polling follows them; ``[ironic] poll_interval``
is tiny.  The
client's error translation is tested on its own with a fake openstacksdk
proxy raising the SDK's and keystoneauth's real exceptions.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import types
import uuid as uuidlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openstack.exceptions
import pytest
import requests
from keystoneauth1 import exceptions as ks_exceptions
from oslo_config import cfg

from compute_agent.actions import NodeActions
from compute_agent.drivers import ActionContext, BackendNode
from compute_agent.drivers.base import DeploySpec
from compute_agent.drivers.ironic import watch as ironic_watch
from compute_agent.drivers.ironic.driver import IronicDriver
from conductor.common.conf import ironic as ironic_conf
from conductor.common.exception import (
    ActionAbandoned,
    DriverError,
    NodeNotBuildable,
    NotOwner,
    ServiceUnavailable,
)
from conductor.common.ironic.client import BaremetalClient, IronicClaimConflict
from conductor.common.ironic.states import power_state_of, provision_state_of
from conductor.common.objects import Node, PowerState, ProvisionState
from tests.fake_ironic import FakeIronic, FakeNode
from tests.harness import wait_for

HOST = "agent-1"
EPOCH = 4
#: the logger of the Ironic client (conductor/common/ironic/client.py)
# The client logs an outage through the shared outage tracker.
CLIENT_LOGGER = "conductor.common.service_outage"


# -- helpers -------------------------------------------------------------------------------


def make_conf(directory: Path, **values: object) -> cfg.ConfigOpts:
    # A config file, not set_override: overrides of a module-level OptGroup leak.
    options = {"poll_interval": 0.01, "poll_max_interval": 0.05, **values}
    path = directory / f"{uuidlib.uuid4()}.conf"
    path.write_text("[ironic]\n" + "".join(f"{k} = {v}\n" for k, v in options.items()))
    conf = cfg.ConfigOpts()
    ironic_conf.OPTIONS.register(conf)
    conf(["--config-file", str(path)], project="ringfleet", default_config_files=[])
    return conf


def make_driver(directory: Path, fake: FakeIronic, **values: object) -> IronicDriver:
    return IronicDriver(make_conf(directory, **values), HOST, client=fake)  # type: ignore[arg-type]


def ring_node(fake_node: FakeNode) -> Node:
    return Node(uuid=fake_node.uuid, name=f"n-{fake_node.uuid[:8]}", resource_class="baremetal")


def ctx_for(node: Node, instance: str | None) -> ActionContext:
    return ActionContext(node.uuid, HOST, EPOCH, instance)


def new_instance() -> str:
    return str(uuidlib.uuid4())


class Steps:
    """A progress callback recording its steps; optionally raising at one."""

    def __init__(self, raise_at: str | None = None) -> None:
        self.steps: list[str] = []
        self.raise_at = raise_at
        self.on_step: Callable[[str], None] | None = None

    def __call__(self, step: str) -> None:
        self.steps.append(step)
        if self.on_step is not None:
            self.on_step(step)
        if step == self.raise_at:
            raise NotOwner(self.node_uuid, "agent-2", EPOCH + 1)

    node_uuid = "-"


#: Whether Ironic saves a failure's reason with its state, or in a second
#: save (its periodic timeouts): the driver's faults carry the reason either way.
REASON_SAVED = pytest.mark.parametrize("reason_after_state", [False, True])


@pytest.fixture
def fake() -> FakeIronic:
    return FakeIronic()


# -- deploy --------------------------------------------------------------------------------


def test_deploy_from_available_claims_and_ends_active(tmp_path: Path, fake: FakeIronic) -> None:
    ironic_node = fake.add()
    node, instance = ring_node(ironic_node), new_instance()
    progress = Steps()
    make_driver(tmp_path, fake).deploy(ctx_for(node, instance), node, progress)
    assert ironic_node.provision_state == "active"
    assert ironic_node.instance_uuid == instance
    assert ironic_node.instance_info == {"ringfleet_host": HOST, "ringfleet_epoch": EPOCH}
    info = {"ringfleet_host": HOST, "ringfleet_epoch": EPOCH}
    assert fake.writes == [
        ("claim", node.uuid, instance, info),
        ("provision", node.uuid, "active"),
    ]
    assert progress.steps[:2] == ["claim", "deploy"]
    assert "deploying" in progress.steps


def test_deploy_needs_an_instance(tmp_path: Path, fake: FakeIronic) -> None:
    node = ring_node(fake.add())
    with pytest.raises(ValueError, match="instance_uuid"):
        make_driver(tmp_path, fake).deploy(ctx_for(node, None), node, Steps())
    assert fake.writes == []


def test_a_node_claimed_by_another_instance_is_refused_untouched(
    tmp_path: Path, fake: FakeIronic
) -> None:
    other = new_instance()
    ironic_node = fake.add(provision_state="active", instance_uuid=other)
    node = ring_node(ironic_node)
    progress = Steps()
    with pytest.raises(NodeNotBuildable, match=other):
        make_driver(tmp_path, fake).deploy(ctx_for(node, new_instance()), node, progress)
    assert fake.writes == [] and progress.steps == []
    assert (ironic_node.provision_state, ironic_node.instance_uuid) == ("active", other)


@pytest.mark.parametrize(
    "fields",
    [
        {"maintenance": True, "maintenance_reason": "bad disk"},
        {"provision_state": "manageable"},
        {"provision_state": "enroll"},
        {"provision_state": "clean failed"},
    ],
)
def test_an_unclaimed_undeployable_node_is_refused_untouched(
    tmp_path: Path, fake: FakeIronic, fields: dict[str, Any]
) -> None:
    node = ring_node(fake.add(**fields))
    with pytest.raises(NodeNotBuildable):
        make_driver(tmp_path, fake).deploy(ctx_for(node, new_instance()), node, Steps())
    assert fake.writes == []


def test_a_claim_lost_to_another_instance_in_a_race_is_not_buildable(
    tmp_path: Path, fake: FakeIronic
) -> None:
    ironic_node = fake.add()
    node, other = ring_node(ironic_node), new_instance()

    def race(claimed: FakeNode) -> None:
        claimed.instance_uuid = other  # claimed between our read and our claim

    fake.before_claim = race
    with pytest.raises(NodeNotBuildable, match=other):
        make_driver(tmp_path, fake).deploy(ctx_for(node, new_instance()), node, Steps())
    assert [w[0] for w in fake.writes] == ["claim"]  # refused: no provision, no release
    assert ironic_node.instance_uuid == other and ironic_node.provision_state == "available"


def test_a_claim_refused_while_locked_is_retried(tmp_path: Path, fake: FakeIronic) -> None:
    ironic_node = fake.add()
    node, instance = ring_node(ironic_node), new_instance()
    refusals = [2]

    def locked(claimed: FakeNode) -> None:
        if refusals[0]:
            refusals[0] -= 1
            raise IronicClaimConflict("node is locked by host ironic-1")

    fake.before_claim = locked
    make_driver(tmp_path, fake).deploy(ctx_for(node, instance), node, Steps())
    assert ironic_node.provision_state == "active" and ironic_node.instance_uuid == instance


def test_a_deploy_in_progress_for_our_instance_is_adopted(tmp_path: Path, fake: FakeIronic) -> None:
    instance = new_instance()
    ironic_node = fake.add(
        provision_state="deploying",
        target_provision_state="active",
        instance_uuid=instance,
        script=[
            {},
            {"provision_state": "wait call-back"},
            {},
            {"provision_state": "active", "target_provision_state": None},
        ],
    )
    node = ring_node(ironic_node)
    progress = Steps()
    make_driver(tmp_path, fake).deploy(ctx_for(node, instance), node, progress)
    assert ironic_node.provision_state == "active"
    assert fake.writes == []  # no second claim, no second provision request
    assert "claim" not in progress.steps and "deploy" not in progress.steps


def test_a_failed_deploy_of_our_instance_is_a_driver_error_with_ironics_reason(
    tmp_path: Path, fake: FakeIronic
) -> None:
    instance = new_instance()
    # Ironic keeps the target on a failed deploy: the state alone says it ended.
    ironic_node = fake.add(
        provision_state="deploy failed",
        target_provision_state="active",
        instance_uuid=instance,
        last_error="IPA timed out",
    )
    node = ring_node(ironic_node)
    with pytest.raises(DriverError, match="IPA timed out") as err:
        make_driver(tmp_path, fake).deploy(ctx_for(node, instance), node, Steps())
    assert err.value.action == "deploy"
    assert fake.writes == []


@REASON_SAVED
def test_a_deploy_failing_in_ironic_is_a_driver_error(
    tmp_path: Path, fake: FakeIronic, reason_after_state: bool
) -> None:
    fake.deploy_error = "Failed to prepare to deploy: no PXE reply"
    fake.reason_after_state = reason_after_state
    ironic_node = fake.add()
    node = ring_node(ironic_node)
    with pytest.raises(DriverError, match="no PXE reply"):
        make_driver(tmp_path, fake).deploy(ctx_for(node, new_instance()), node, Steps())
    assert [w[0] for w in fake.writes] == ["claim", "provision"]
    assert ironic_node.provision_state == "deploy failed"


@pytest.mark.parametrize(
    "change",
    [
        {"maintenance": True, "maintenance_reason": "BMC unreachable"},
        {"provision_state": "manageable"},
    ],
)
def test_a_node_undeployable_after_our_claim_is_released_and_not_buildable(
    tmp_path: Path, fake: FakeIronic, change: dict[str, Any]
) -> None:
    ironic_node = fake.add()
    node, instance = ring_node(ironic_node), new_instance()

    def operator_acts(claimed: FakeNode) -> None:
        for key, value in change.items():
            setattr(claimed, key, value)

    fake.after_claim = operator_acts
    progress = Steps()
    with pytest.raises(NodeNotBuildable):
        make_driver(tmp_path, fake).deploy(ctx_for(node, instance), node, progress)
    assert [w[0] for w in fake.writes] == ["claim", "release"]
    assert ironic_node.instance_uuid is None
    assert [s for s in progress.steps if s in ("claim", "deploy", "release")] == [
        "claim",
        "release",
    ]


def test_a_deploy_whose_node_is_lost_mid_follow_stops_touching_nothing(
    tmp_path: Path, fake: FakeIronic
) -> None:
    fake.steps = 50
    ironic_node = fake.add()
    node = ring_node(ironic_node)
    progress = Steps(raise_at="deploying")
    progress.node_uuid = node.uuid
    with pytest.raises(NotOwner):
        make_driver(tmp_path, fake).deploy(ctx_for(node, new_instance()), node, progress)
    assert [w[0] for w in fake.writes] == ["claim", "provision"]
    assert progress.steps[-1] == "deploying"
    assert ironic_node.provision_state == "deploying"


def test_a_follow_rides_out_an_unreachable_ironic(tmp_path: Path, fake: FakeIronic) -> None:
    ironic_node = fake.add()
    node, instance = ring_node(ironic_node), new_instance()
    progress = Steps()

    def ironic_goes_down(step: str) -> None:
        if step == "deploy":  # just before the provision request
            fake.unreachable_reads = 4

    progress.on_step = ironic_goes_down
    make_driver(tmp_path, fake).deploy(ctx_for(node, instance), node, progress)
    assert fake.unreachable_reads == 0
    assert ironic_node.provision_state == "active" and ironic_node.instance_uuid == instance
    assert [w[0] for w in fake.writes] == ["claim", "provision"]


def test_a_deploy_stuck_past_its_timeout_is_a_driver_error(
    tmp_path: Path, fake: FakeIronic
) -> None:
    instance = new_instance()
    ironic_node = fake.add(
        provision_state="wait call-back",
        target_provision_state="active",
        instance_uuid=instance,
        last_error="IPA heartbeat late",
    )
    node = ring_node(ironic_node)
    with pytest.raises(
        DriverError,
        match="still wait call-back: IPA heartbeat late; no progress in Ironic for 1 s",
    ):
        make_driver(tmp_path, fake, deploy_timeout=1).deploy(ctx_for(node, instance), node, Steps())
    assert fake.writes == []


def test_an_ironic_restart_mid_deploy_fails_the_deploy_at_once_with_its_reason(
    tmp_path: Path, fake: FakeIronic
) -> None:
    """Ironic's restart moves the deploy to ``deploy failed`` and keeps the
    target ``active``: the deploy ends there, not at its timeout."""
    fake.steps = 50
    ironic_node = fake.add()
    node, instance = ring_node(ironic_node), new_instance()
    progress = Steps()

    def ironic_restarts(step: str) -> None:
        if step == "deploying":
            fake.restart()

    progress.on_step = ironic_restarts
    with pytest.raises(DriverError, match="can't be resumed") as err:
        make_driver(tmp_path, fake).deploy(ctx_for(node, instance), node, progress)
    assert "deploy failed" in err.value.reason
    assert (ironic_node.provision_state, ironic_node.target_provision_state) == (
        "deploy failed",
        "active",
    )


def test_a_write_refused_as_locked_is_retried(tmp_path: Path, fake: FakeIronic) -> None:
    fake.locked_writes = 3
    ironic_node = fake.add()
    node, instance = ring_node(ironic_node), new_instance()
    make_driver(tmp_path, fake).deploy(ctx_for(node, instance), node, Steps())
    assert ironic_node.provision_state == "active" and ironic_node.instance_uuid == instance
    assert [w[0] for w in fake.writes] == ["locked", "locked", "locked", "claim", "provision"]


def test_a_write_locked_past_the_timeout_is_a_driver_error(
    tmp_path: Path, fake: FakeIronic
) -> None:
    fake.locked_writes = 10**6
    node = ring_node(fake.add())
    with pytest.raises(DriverError, match="locked in Ironic"):
        make_driver(tmp_path, fake, deploy_timeout=1).deploy(
            ctx_for(node, new_instance()), node, Steps()
        )
    assert {w[0] for w in fake.writes} == {"locked"}


def test_a_node_gone_from_ironic_is_not_buildable_and_its_teardown_is_done(
    tmp_path: Path, fake: FakeIronic
) -> None:
    node = Node(uuid=str(uuidlib.uuid4()), name="gone", resource_class="baremetal")
    driver = make_driver(tmp_path, fake)
    instance = new_instance()
    with pytest.raises(NodeNotBuildable, match="no such node"):
        driver.inspect(ctx_for(node, instance), node)
    with pytest.raises(NodeNotBuildable, match="no such node"):
        driver.deploy(ctx_for(node, instance), node, Steps())
    driver.destroy(ctx_for(node, instance), node)  # nothing there: done
    assert fake.writes == []


def test_ironics_progress_keeps_a_long_deploy_alive(
    tmp_path: Path, fake: FakeIronic, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The timeout counts from Ironic's last change of state, not from the start.

    The driver's clock is the test's: each read of Ironic comes half a second
    after the one before (half the timeout), whatever a loaded machine does
    to the real gaps between them."""
    clock = [1000.0]
    monkeypatch.setattr(ironic_watch, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    read = fake.get_node

    def later_read(node_uuid: str, *, action: str) -> Any:
        clock[0] += 0.5
        return read(node_uuid, action=action)

    monkeypatch.setattr(fake, "get_node", later_read)
    instance = new_instance()
    ironic_node = fake.add(
        provision_state="deploying", target_provision_state="active", instance_uuid=instance
    )
    moving = [{"provision_state": s} for s in ("wait call-back", "deploying")] * 150
    ironic_node.script = [*moving, {"provision_state": "active", "target_provision_state": None}]
    node = ring_node(ironic_node)
    driver = make_driver(tmp_path, fake, deploy_timeout=1)
    started = clock[0]
    driver.deploy(ctx_for(node, instance), node, Steps())
    assert clock[0] - started > 100  # far longer than the timeout, yet not cut
    assert ironic_node.provision_state == "active"


def test_a_stop_abandons_a_followed_deploy_at_once(tmp_path: Path, fake: FakeIronic) -> None:
    instance = new_instance()
    ironic_node = fake.add(
        provision_state="wait call-back", target_provision_state="active", instance_uuid=instance
    )
    node = ring_node(ironic_node)
    driver = make_driver(tmp_path, fake)
    outcome: list[BaseException] = []

    def deploy() -> None:
        try:
            driver.deploy(ctx_for(node, instance), node, Steps())
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=deploy)
    thread.start()
    time.sleep(0.2)
    assert thread.is_alive()  # following the wait call-back
    driver.stop_waiting()
    thread.join(2)
    assert not thread.is_alive()
    [abandoned] = outcome
    assert isinstance(abandoned, ActionAbandoned)
    assert fake.writes == []  # nothing changed in Ironic: the next process resumes it


# -- destroy -------------------------------------------------------------------------------


def test_destroy_tears_an_active_node_down_to_available(tmp_path: Path, fake: FakeIronic) -> None:
    instance = new_instance()
    ironic_node = fake.add(
        provision_state="active", instance_uuid=instance, instance_info={"ringfleet_host": HOST}
    )
    node = ring_node(ironic_node)
    make_driver(tmp_path, fake).destroy(ctx_for(node, instance), node)
    assert ironic_node.provision_state == "available"
    assert ironic_node.instance_uuid is None and ironic_node.instance_info == {}
    assert fake.writes == [("provision", node.uuid, "deleted")]


def test_destroy_releases_a_claim_that_was_never_deployed(tmp_path: Path, fake: FakeIronic) -> None:
    instance = new_instance()
    ironic_node = fake.add(instance_uuid=instance)
    node = ring_node(ironic_node)
    make_driver(tmp_path, fake).destroy(ctx_for(node, instance), node)
    assert fake.writes == [("release", node.uuid)]
    assert ironic_node.instance_uuid is None


def test_destroy_of_a_node_held_by_another_instance_touches_nothing(
    tmp_path: Path, fake: FakeIronic
) -> None:
    other = new_instance()
    ironic_node = fake.add(provision_state="active", instance_uuid=other)
    node = ring_node(ironic_node)
    with pytest.raises(DriverError, match="not touched"):
        make_driver(tmp_path, fake).destroy(ctx_for(node, new_instance()), node)
    assert fake.writes == []
    assert (ironic_node.provision_state, ironic_node.instance_uuid) == ("active", other)


def test_a_cleaning_that_failed_deletes_the_instance_and_says_why(
    tmp_path: Path, fake: FakeIronic, caplog: pytest.LogCaptureFixture
) -> None:
    """Ironic tore the instance down and cleared its claim before cleaning:
    the delete succeeds (retrying it could not fix the node), touching
    nothing, and the operator is told why the node stays unschedulable."""
    ironic_node = fake.add(provision_state="clean failed", last_error="disk erase failed")
    node = ring_node(ironic_node)
    instance = new_instance()
    make_driver(tmp_path, fake).destroy(ctx_for(node, instance), node)
    assert fake.writes == []
    [warning] = [r for r in caplog.records if r.levelname == "WARNING"]
    assert "disk erase failed" in warning.getMessage()
    assert instance in warning.getMessage()


def test_destroy_of_a_failed_deploy_tears_it_down(tmp_path: Path, fake: FakeIronic) -> None:
    instance = new_instance()
    ironic_node = fake.add(
        provision_state="deploy failed", instance_uuid=instance, last_error="boom"
    )
    node = ring_node(ironic_node)
    make_driver(tmp_path, fake).destroy(ctx_for(node, instance), node)
    assert ironic_node.provision_state == "available" and ironic_node.instance_uuid is None
    assert fake.writes == [("provision", node.uuid, "deleted")]


def test_a_teardown_that_ironic_failed_is_asked_again(tmp_path: Path, fake: FakeIronic) -> None:
    """An interrupted teardown ends in ``error``: asking ``deleted`` again ends it."""
    instance = new_instance()
    ironic_node = fake.add(provision_state="active", instance_uuid=instance)
    node = ring_node(ironic_node)
    fake.teardown_error = "The deleting state can't be resumed"
    driver = make_driver(tmp_path, fake)
    reads = fake.reads
    # The first request fails in Ironic (error); the second succeeds.
    original = fake.set_provision_state

    def second_succeeds(node_uuid: str, target: str, *, action: str) -> None:
        original(node_uuid, target, action=action)
        fake.teardown_error = None

    fake.set_provision_state = second_succeeds  # type: ignore[method-assign]
    driver.destroy(ctx_for(node, instance), node)
    assert fake.reads > reads
    assert (ironic_node.provision_state, ironic_node.instance_uuid) == ("available", None)
    assert fake.writes == [("provision", node.uuid, "deleted"), ("provision", node.uuid, "deleted")]


@REASON_SAVED
def test_a_teardown_failing_every_time_is_a_driver_error_with_ironics_reason(
    tmp_path: Path, fake: FakeIronic, reason_after_state: bool
) -> None:
    instance = new_instance()
    ironic_node = fake.add(provision_state="error", instance_uuid=instance)
    node = ring_node(ironic_node)
    fake.teardown_error = "BMC refused"
    fake.reason_after_state = reason_after_state
    with pytest.raises(DriverError, match="BMC refused"):
        make_driver(tmp_path, fake).destroy(ctx_for(node, instance), node)
    assert [w[0] for w in fake.writes] == ["provision"] * 3


def test_destroy_waits_out_a_node_locked_by_ironic(tmp_path: Path, fake: FakeIronic) -> None:
    instance = new_instance()
    ironic_node = fake.add(provision_state="active", instance_uuid=instance)
    node = ring_node(ironic_node)
    fake.locked_writes = 2
    make_driver(tmp_path, fake).destroy(ctx_for(node, instance), node)
    assert [w[0] for w in fake.writes] == ["locked", "locked", "provision"]
    assert ironic_node.provision_state == "available"


def test_a_teardown_whose_answer_was_lost_is_not_failed_by_the_refused_retry(
    tmp_path: Path, fake: FakeIronic
) -> None:
    """Ironic did the teardown but its answer timed out: the retry waits
    out the lock, then is refused (400: the node is ``available`` by then).
    The node moved on: the teardown is done, not a driver error."""
    instance = new_instance()
    ironic_node = fake.add(provision_state="active", instance_uuid=instance)
    node = ring_node(ironic_node)
    fake.lost_answers = 1
    make_driver(tmp_path, fake).destroy(ctx_for(node, instance), node)
    assert (ironic_node.provision_state, ironic_node.instance_uuid) == ("available", None)
    kinds = [w[0] for w in fake.writes]
    assert kinds[0] == "provision" and kinds[-1] == "refused", fake.writes


def test_a_refused_teardown_of_a_node_that_did_not_move_is_a_driver_error(
    tmp_path: Path, fake: FakeIronic
) -> None:
    """A refusal is still one when nothing moved the node (nothing was taken)."""
    instance = new_instance()
    ironic_node = fake.add(provision_state="active", instance_uuid=instance)
    node = ring_node(ironic_node)

    def refused(node_uuid: str, target: str, *, action: str) -> None:
        raise DriverError(node_uuid, action, "Ironic refused (400): not now")

    fake.set_provision_state = refused  # type: ignore[method-assign]
    with pytest.raises(DriverError, match="not now"):
        make_driver(tmp_path, fake).destroy(ctx_for(node, instance), node)
    assert ironic_node.provision_state == "active"


def test_a_fake_ironic_restart_fails_what_it_interrupted() -> None:
    """The fake does what Ironic does at start (test_ironic_contract checks it on a real one)."""
    fake = FakeIronic()
    deploying = fake.add(provision_state="deploying", target_provision_state="active")
    deleting = fake.add(provision_state="deleting", target_provision_state="available")
    fake.restart()
    assert (deploying.provision_state, deploying.target_provision_state) == (
        "deploy failed",
        "active",
    )
    assert (deleting.provision_state, deleting.target_provision_state) == ("error", None)
    assert "can't be resumed" in (deploying.last_error or "")


# -- power and reads -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "ironic_target", "expected"),
    [
        ("reboot", "rebooting", PowerState.ON),
        ("power on", "power on", PowerState.ON),
        ("power off", "power off", PowerState.OFF),
        ("soft reboot", "soft rebooting", PowerState.ON),
        ("soft power off", "soft power off", PowerState.OFF),
    ],
)
def test_set_power_follows_ironic_to_the_target(
    tmp_path: Path, fake: FakeIronic, target: Any, ironic_target: str, expected: PowerState
) -> None:
    ironic_node = fake.add(power_state="power on")
    node = ring_node(ironic_node)
    driver = make_driver(tmp_path, fake)
    assert driver.set_power(ctx_for(node, None), node, target) is expected
    assert fake.writes == [("power", node.uuid, ironic_target)]
    assert driver.get_power_state(ctx_for(node, None), node) is expected


IMAGE = "http://images.example/ubuntu.qcow2"


def test_rebuild_redeploys_an_active_node_in_place(tmp_path: Path, fake: FakeIronic) -> None:
    ironic_node = fake.add()
    node, instance = ring_node(ironic_node), new_instance()
    driver = make_driver(tmp_path, fake)
    driver.deploy(ctx_for(node, instance), node, Steps())
    ironic_node.instance_info["image_source"] = IMAGE  # what the deploy's image left
    fake.writes.clear()
    fake.locked_writes = 1  # Ironic busy with its own task: waited out
    steps = Steps()
    driver.rebuild(ctx_for(node, instance), node, steps)
    assert fake.writes == [
        ("locked", node.uuid, "rebuild"),
        ("provision", node.uuid, "rebuild"),
    ]
    assert (ironic_node.provision_state, ironic_node.instance_uuid) == ("active", instance)


def test_a_rebuild_with_a_new_image_patches_it_then_rebuilds_with_the_configdrive(
    tmp_path: Path, fake: FakeIronic
) -> None:
    """Ironic redeploys what instance_info says: the new image goes there
    first (the old image's md5 removed), the config drive with the rebuild."""
    ironic_node = fake.add()
    node, instance = ring_node(ironic_node), new_instance()
    driver = make_driver(tmp_path, fake)
    old = DeploySpec(image={"source": IMAGE, "checksum": "a" * 32})
    driver.deploy(ctx_for(node, instance), node, Steps(), old)
    fake.writes.clear()
    new_image = {
        "source": "http://images.example/debian.raw",
        "os_hash_algo": "sha256",
        "os_hash_value": "b" * 64,
        "disk_format": "raw",
    }
    drive = {"user_data": "#cloud-config\n", "meta_data": {"uuid": instance, "name": "i"}}
    driver.rebuild(ctx_for(node, instance), node, Steps(), DeploySpec(new_image, drive))
    assert fake.writes == [
        (
            "instance_info",
            node.uuid,
            {
                "image_source": "http://images.example/debian.raw",
                "image_os_hash_algo": "sha256",
                "image_os_hash_value": "b" * 64,
                "image_disk_format": "raw",
            },
            ["image_checksum"],
        ),
        ("provision", node.uuid, "rebuild"),
    ]
    info = ironic_node.instance_info
    assert info["image_source"] == "http://images.example/debian.raw"
    assert "image_checksum" not in info
    assert fake.configdrives[node.uuid] == drive
    assert (ironic_node.provision_state, ironic_node.instance_uuid) == ("active", instance)


def test_a_rebuild_with_the_image_ironic_has_patches_nothing(
    tmp_path: Path, fake: FakeIronic
) -> None:
    ironic_node = fake.add()
    node, instance = ring_node(ironic_node), new_instance()
    driver = make_driver(tmp_path, fake)
    spec = DeploySpec(image={"source": IMAGE, "checksum": "a" * 32})
    driver.deploy(ctx_for(node, instance), node, Steps(), spec)
    fake.writes.clear()
    driver.rebuild(ctx_for(node, instance), node, Steps(), spec)
    assert fake.writes == [("provision", node.uuid, "rebuild")]


def test_client_sets_instance_info_fields_in_one_patch() -> None:
    client, proxy = make_client()
    client.set_instance_info("n-1", {"image_source": IMAGE}, ["image_checksum"])
    assert proxy.patches == [
        (
            "n-1",
            [
                {"op": "add", "path": "/instance_info/image_source", "value": IMAGE},
                {"op": "remove", "path": "/instance_info/image_checksum"},
            ],
            False,
        )
    ]


@REASON_SAVED
def test_a_rebuild_failing_in_ironic_is_a_driver_error_with_ironics_reason(
    tmp_path: Path, fake: FakeIronic, reason_after_state: bool
) -> None:
    ironic_node = fake.add()
    node, instance = ring_node(ironic_node), new_instance()
    driver = make_driver(tmp_path, fake)
    driver.deploy(ctx_for(node, instance), node, Steps())
    ironic_node.instance_info["image_source"] = IMAGE
    fake.deploy_error = "image checksum mismatch"
    fake.reason_after_state = reason_after_state
    with pytest.raises(DriverError, match="image checksum mismatch"):
        driver.rebuild(ctx_for(node, instance), node, Steps())
    assert ironic_node.instance_uuid == instance  # the instance keeps its node


def test_a_rebuild_without_an_image_is_refused_at_once(tmp_path: Path, fake: FakeIronic) -> None:
    """A refusal retrying cannot fix (Ironic 39.0.0 would answer 500, an
    outage waited out until the deadline)."""
    ironic_node = fake.add()
    node, instance = ring_node(ironic_node), new_instance()
    driver = make_driver(tmp_path, fake)
    driver.deploy(ctx_for(node, instance), node, Steps())
    fake.writes.clear()
    with pytest.raises(DriverError, match="no image_source"):
        driver.rebuild(ctx_for(node, instance), node, Steps())
    assert fake.writes == []


def test_a_rebuild_of_a_node_claimed_by_another_instance_touches_nothing(
    tmp_path: Path, fake: FakeIronic
) -> None:
    ironic_node = fake.add(provision_state="active", instance_uuid=new_instance())
    node = ring_node(ironic_node)
    with pytest.raises(NodeNotBuildable, match="claimed by"):
        make_driver(tmp_path, fake).rebuild(ctx_for(node, new_instance()), node, Steps())
    assert fake.writes == []


@pytest.mark.parametrize(
    ("target", "refused", "hard", "expected"),
    [
        ("soft reboot", "soft rebooting", "rebooting", PowerState.ON),
        ("soft power off", "soft power off", "power off", PowerState.OFF),
    ],
)
def test_a_soft_target_ironic_refuses_falls_back_to_the_hard_one(
    tmp_path: Path,
    fake: FakeIronic,
    caplog: pytest.LogCaptureFixture,
    target: Any,
    refused: str,
    hard: str,
    expected: PowerState,
) -> None:
    fake.soft_power = False  # a BMC that cannot ask the OS to shut down: 400
    node = ring_node(fake.add(power_state="power on"))
    with caplog.at_level("WARNING"):
        assert make_driver(tmp_path, fake).set_power(ctx_for(node, None), node, target) is expected
    assert fake.writes == [("refused", node.uuid, refused), ("power", node.uuid, hard)]
    assert (
        f"Ironic refused {target}" in caplog.text
        and f"falling back to {hard.replace('rebooting', 'reboot')}" in caplog.text
    )


def test_a_power_write_refused_as_locked_is_retried_then_done(
    tmp_path: Path, fake: FakeIronic
) -> None:
    fake.locked_writes = 2  # Ironic busy with its own task: 409 "locked"
    node = ring_node(fake.add(power_state="power off"))
    assert make_driver(tmp_path, fake).set_power(ctx_for(node, None), node, "power on") is (
        PowerState.ON
    )
    assert [w[0] for w in fake.writes] == ["locked", "locked", "power"]


def test_a_hard_power_refusal_is_not_retried(tmp_path: Path, fake: FakeIronic) -> None:
    """A 400 retrying cannot fix is raised at once, with Ironic's reason."""
    fake.soft_power = False
    node = ring_node(fake.add(power_state="power on"))
    driver = make_driver(tmp_path, fake)
    with pytest.raises(DriverError, match=r"refused \(400\)"):
        driver._ironic.set_power_state(node.uuid, "power cycle")  # not an Ironic target
    assert fake.writes == [("refused", node.uuid, "power cycle")]


def test_an_unknown_power_state_is_a_driver_error(tmp_path: Path, fake: FakeIronic) -> None:
    node = ring_node(fake.add(power_state=None))
    with pytest.raises(DriverError, match="power state"):
        make_driver(tmp_path, fake).get_power_state(ctx_for(node, None), node)


def test_inspect_maps_ironics_states(tmp_path: Path, fake: FakeIronic) -> None:
    instance = new_instance()
    driver = make_driver(tmp_path, fake)
    cases: list[tuple[dict[str, Any], BackendNode]] = [
        (
            {"provision_state": "clean wait", "power_state": "power on"},
            BackendNode(ProvisionState.CLEANING, PowerState.ON, None, None),
        ),
        (
            {"provision_state": "active", "instance_uuid": instance},
            BackendNode(ProvisionState.ACTIVE, PowerState.OFF, instance, None),
        ),
        (
            {"provision_state": "deploy failed", "last_error": "x", "power_state": None},
            BackendNode(ProvisionState.ERROR, None, None, "x"),
        ),
        (
            {"provision_state": "inspect wait"},
            BackendNode(ProvisionState.MANAGEABLE, PowerState.OFF, None, None),
        ),
    ]
    for fields, expected in cases:
        node = ring_node(fake.add(**fields))
        assert driver.inspect(ctx_for(node, None), node) == expected
    assert fake.writes == []


# -- state mapping -------------------------------------------------------------------------

IRONIC_STATES = {
    "enroll": ProvisionState.ENROLL,
    "verifying": ProvisionState.ENROLL,
    "manageable": ProvisionState.MANAGEABLE,
    "inspecting": ProvisionState.MANAGEABLE,
    "inspect wait": ProvisionState.MANAGEABLE,
    "inspect failed": ProvisionState.MANAGEABLE,
    "adopting": ProvisionState.MANAGEABLE,
    "adopt failed": ProvisionState.MANAGEABLE,
    "available": ProvisionState.AVAILABLE,
    "deploying": ProvisionState.DEPLOYING,
    "wait call-back": ProvisionState.DEPLOYING,
    "deploy hold": ProvisionState.DEPLOYING,
    "active": ProvisionState.ACTIVE,
    "rescuing": ProvisionState.ACTIVE,
    "rescue wait": ProvisionState.ACTIVE,
    "rescue": ProvisionState.ACTIVE,
    "rescue failed": ProvisionState.ACTIVE,
    "unrescuing": ProvisionState.ACTIVE,
    "unrescue failed": ProvisionState.ACTIVE,
    "servicing": ProvisionState.ACTIVE,
    "service wait": ProvisionState.ACTIVE,
    "service hold": ProvisionState.ACTIVE,
    "service failed": ProvisionState.ACTIVE,
    "deleting": ProvisionState.DELETING,
    "cleaning": ProvisionState.CLEANING,
    "clean wait": ProvisionState.CLEANING,
    "clean hold": ProvisionState.CLEANING,
    "deploy failed": ProvisionState.ERROR,
    "clean failed": ProvisionState.ERROR,
    "error": ProvisionState.ERROR,
}


@pytest.mark.parametrize(("ironic_state", "expected"), sorted(IRONIC_STATES.items()))
def test_provision_state_of_every_ironic_state(ironic_state: str, expected: ProvisionState) -> None:
    assert provision_state_of(ironic_state) is expected


def test_provision_state_of_an_unknown_or_missing_state() -> None:
    assert provision_state_of("some future state") is ProvisionState.ERROR
    assert provision_state_of(None) is ProvisionState.AVAILABLE


def test_power_state_of() -> None:
    assert power_state_of("power on") is PowerState.ON
    assert power_state_of("power off") is PowerState.OFF
    assert power_state_of(None) is None
    assert power_state_of("soft power off") is None


# -- the client's error translation --------------------------------------------------------


def _http(cls: type[openstack.exceptions.HttpException], status: int, details: str) -> Exception:
    response = requests.Response()
    response.status_code = status
    return cls(message=f"HTTP {status}", response=response, details=details)


class FakeProxy:
    """openstacksdk's baremetal proxy, raising what it is told to."""

    def __init__(self) -> None:
        self.errors: list[Exception] = []
        self.patches: list[tuple[str, list[dict[str, Any]], bool]] = []

    def _next(self) -> None:
        if self.errors:
            raise self.errors.pop(0)

    def get(self, path: str, *, params: dict[str, str], microversion: str, raise_exc: bool) -> Any:
        """A plain GET through the SDK's session (one node, with every field)."""
        self._next()
        assert (path.rsplit("/", 1)[0], raise_exc) == ("/nodes", False)
        assert "provision_updated_at" in params["fields"].split(",")
        node = vars(_sdk_node(path.rsplit("/", 1)[1]))
        body = {
            "uuid": node.pop("id"),
            "maintenance": node.pop("is_maintenance"),
            "instance_uuid": node.pop("instance_id"),
            "provision_updated_at": "2026-11-26T07:00:00+00:00",
            **node,
        }
        return types.SimpleNamespace(status_code=200, json=lambda: body)

    def nodes(self, **query: Any) -> Iterator[Any]:
        self._next()
        yield _sdk_node(str(uuidlib.uuid4()))

    def patch_node(
        self, node_uuid: str, patch: list[dict[str, Any]], *, retry_on_conflict: bool
    ) -> None:
        self._next()
        self.patches.append((node_uuid, patch, retry_on_conflict))


def _sdk_node(node_uuid: str) -> Any:
    return types.SimpleNamespace(
        id=node_uuid,
        name="n1",
        resource_class="baremetal",
        traits=["CUSTOM_GPU"],
        properties={"cpus": 8},
        conductor_group=None,
        shard="s1",
        is_maintenance=None,
        maintenance_reason=None,
        power_state="power on",
        target_power_state=None,
        provision_state="available",
        target_provision_state=None,
        instance_id=None,
        instance_info=None,
        last_error=None,
    )


def make_client() -> tuple[BaremetalClient, FakeProxy]:
    proxy = FakeProxy()
    return BaremetalClient(proxy, "http://x"), proxy


def test_client_reads_nodes_into_the_frozen_view() -> None:
    client, _ = make_client()
    found = client.get_node("n-1", action="inspect")
    assert (found.uuid, found.traits, found.conductor_group, found.maintenance) == (
        "n-1",
        ("CUSTOM_GPU",),
        "",
        False,
    )
    assert found.instance_info == {} and found.properties == {"cpus": 8}
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.name = "other"  # type: ignore[misc]
    assert len(list(client.list_nodes(shard="s1"))) == 1


@pytest.mark.parametrize(
    ("error", "expected", "match"),
    [
        (
            openstack.exceptions.NotFoundException(message="not found"),
            DriverError,
            "Ironic has no such node",
        ),
        (
            _http(openstack.exceptions.ConflictException, 409, "node locked"),
            DriverError,
            r"Ironic refused \(409\): node locked",
        ),
        (
            _http(openstack.exceptions.HttpException, 400, "bad field"),
            DriverError,
            r"Ironic refused \(400\): bad field",
        ),
        (
            _http(openstack.exceptions.HttpException, 503, "no conductor"),
            ServiceUnavailable,
            "Ironic answered 503: no conductor",
        ),
        (
            ks_exceptions.ConnectFailure("connection refused"),
            ServiceUnavailable,
            "Ironic at http://x unreachable: connection refused",
        ),
        (
            ks_exceptions.ConnectTimeout("timed out"),
            ServiceUnavailable,
            "unreachable",
        ),
        (
            openstack.exceptions.SDKException("odd"),
            ServiceUnavailable,
            "Ironic request failed: odd",
        ),
    ],
)
def test_client_translates_sdk_errors(
    error: Exception, expected: type[Exception], match: str
) -> None:
    client, proxy = make_client()
    proxy.errors.append(error)
    with pytest.raises(expected, match=match) as err:
        client.get_node("n-1", action="inspect")
    if isinstance(err.value, DriverError):
        assert (err.value.node_uuid, err.value.action) == ("n-1", "inspect")
    assert err.value.__cause__ is error


def test_client_claim_conflict_is_a_claim_conflict() -> None:
    client, proxy = make_client()
    proxy.errors.append(_http(openstack.exceptions.ConflictException, 409, "held"))
    with pytest.raises(IronicClaimConflict):
        client.claim("n-1", "inst-1", {"ringfleet_epoch": 1})
    client.claim("n-1", "inst-1", {"ringfleet_epoch": 1})
    client.release("n-1")
    assert [(p[0], [op["op"] for op in p[1]], p[2]) for p in proxy.patches] == [
        ("n-1", ["add", "add"], False),
        ("n-1", ["remove", "remove"], False),
    ]


def test_client_logs_one_warning_while_down_and_one_info_when_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client, proxy = make_client()
    proxy.errors = [
        ks_exceptions.ConnectFailure("refused"),
        _http(openstack.exceptions.HttpException, 503, "no conductor"),
    ]
    with caplog.at_level(logging.INFO, logger=CLIENT_LOGGER):
        for _ in range(2):
            with pytest.raises(ServiceUnavailable):
                client.get_node("n-1", action="inspect")
        client.get_node("n-1", action="inspect")
        client.get_node("n-1", action="inspect")
    records = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == CLIENT_LOGGER]
    assert records == [
        (logging.WARNING, "Ironic unavailable: Ironic at http://x unreachable: refused"),
        (logging.INFO, "Ironic at http://x answers again"),
    ]


def test_client_is_up_again_after_a_refusal() -> None:
    client, proxy = make_client()
    proxy.errors = [
        ks_exceptions.ConnectFailure("refused"),
        openstack.exceptions.NotFoundException(message="nf"),
        ks_exceptions.ConnectFailure("refused"),
    ]
    with pytest.raises(ServiceUnavailable):
        client.get_node("n-1", action="inspect")
    with pytest.raises(DriverError):
        client.get_node("n-1", action="inspect")  # Ironic answered: up again
    assert client.outage.down is False
    with pytest.raises(ServiceUnavailable):
        client.get_node("n-1", action="inspect")
    assert client.outage.down is True


# -- the agent: a refused build is never torn down -----------------------------------------


class StubOwnership:
    def __init__(self) -> None:
        self.pinned: list[str] = []

    def wait_can_act(self, node_uuid: str, epoch: int, wait: float) -> None:
        pass

    def check(self, node_uuid: str, epoch: int) -> None:
        pass

    def pin(self, node_uuid: str) -> None:
        self.pinned.append(node_uuid)


class Results:
    def __init__(self) -> None:
        self.builds: list[dict[str, Any]] = []

    def report(self, result: dict[str, Any]) -> None:
        self.builds.append(result)

    def report_destroy(self, result: dict[str, Any]) -> None:
        raise AssertionError("no destroy expected")


class CountingDriver(IronicDriver):
    destroyed = 0

    def destroy(self, ctx: ActionContext, node: Node) -> None:
        self.destroyed += 1
        super().destroy(ctx, node)


def _run_deploy(
    tmp_path: Path, fake: FakeIronic, ironic_node: FakeNode, instance: str
) -> tuple[CountingDriver, dict[str, Any]]:
    driver = CountingDriver(make_conf(tmp_path), HOST, client=fake)  # type: ignore[arg-type]
    results = Results()
    actions = NodeActions(HOST, driver, StubOwnership(), results)  # type: ignore[arg-type]
    actions._deploy(instance, ring_node(ironic_node), EPOCH)
    [report] = results.builds
    return driver, report


def test_not_buildable_after_the_claim_step_is_not_torn_down(
    tmp_path: Path, fake: FakeIronic
) -> None:
    ironic_node = fake.add()

    def maintenance(claimed: FakeNode) -> None:
        claimed.maintenance, claimed.maintenance_reason = True, "hardware swap"

    fake.after_claim = maintenance
    driver, report = _run_deploy(tmp_path, fake, ironic_node, new_instance())
    assert (report["success"], report["node_clean"]) == (False, False)
    assert "hardware swap" in report["fault"]
    assert driver.destroyed == 0
    assert [w[0] for w in fake.writes] == ["claim", "release"]


def test_not_buildable_at_the_first_read_is_not_torn_down(tmp_path: Path, fake: FakeIronic) -> None:
    other = new_instance()
    ironic_node = fake.add(provision_state="active", instance_uuid=other)
    driver, report = _run_deploy(tmp_path, fake, ironic_node, new_instance())
    assert report["success"] is False and driver.destroyed == 0
    assert fake.writes == [] and ironic_node.instance_uuid == other


def test_a_failure_after_the_first_step_is_torn_down(tmp_path: Path, fake: FakeIronic) -> None:
    fake.deploy_error = "deploy step failed"
    ironic_node = fake.add()
    instance = new_instance()
    driver, report = _run_deploy(tmp_path, fake, ironic_node, instance)
    assert (report["success"], report["node_clean"]) == (False, True)
    assert "deploy step failed" in report["fault"]
    assert driver.destroyed == 1
    assert [w[0] for w in fake.writes] == ["claim", "provision", "provision"]
    assert ironic_node.provision_state == "available" and ironic_node.instance_uuid is None


def test_a_stopping_agent_abandons_its_followed_actions_at_once_and_reports_nothing(
    tmp_path: Path, fake: FakeIronic
) -> None:
    """SIGTERM never waits for Ironic: two deploys Ironic is still running
    (one per node) end their follow loops at once, each reports nothing, and
    the whole stop is bounded by one timeout, not one per action."""
    driver = CountingDriver(make_conf(tmp_path), HOST, client=fake)  # type: ignore[arg-type]
    results = Results()
    actions = NodeActions(HOST, driver, StubOwnership(), results)  # type: ignore[arg-type]
    for _ in range(2):
        instance = new_instance()
        ironic_node = fake.add(
            provision_state="wait call-back",
            target_provision_state="active",
            instance_uuid=instance,
        )
        assert actions.build(instance, ring_node(ironic_node), EPOCH) == "accepted"
    time.sleep(0.2)
    assert actions.in_flight() == 2
    actions.stop_accepting()
    assert actions.wait_idle(5.0)  # the deploy_timeout is an hour
    assert actions.in_flight() == 0
    assert results.builds == [] and driver.destroyed == 0
    assert fake.writes == []


def test_a_stop_leaves_an_action_inside_a_request_to_a_hung_ironic(
    tmp_path: Path, fake: FakeIronic
) -> None:
    """Ironic frozen while a deploy reads it: the stop does not wait for the
    request's timeout; the action is left there (counted), reports nothing,
    and ends at its next wait once the request returns."""
    driver = CountingDriver(make_conf(tmp_path), HOST, client=fake)  # type: ignore[arg-type]
    results = Results()
    actions = NodeActions(HOST, driver, StubOwnership(), results)  # type: ignore[arg-type]
    instance = new_instance()
    ironic_node = fake.add(
        provision_state="wait call-back", target_provision_state="active", instance_uuid=instance
    )
    assert actions.build(instance, ring_node(ironic_node), EPOCH) == "accepted"
    fake.request_timeout = 3600.0
    fake.answering.clear()
    wait_for(lambda: fake.hanging == 1, 5, "the deploy's read hangs")
    assert actions.left_waiting() == 0  # not stopping: nothing is left
    assert not actions.wait_idle(0.3)
    actions.stop_accepting()
    assert actions.wait_idle(5.0)
    assert (actions.in_flight(), actions.left_waiting()) == (1, 1)
    fake.answering.set()
    wait_for(lambda: actions.in_flight() == 0, 5, "the action ends at its next wait")
    assert actions.left_waiting() == 0
    assert results.builds == [] and driver.destroyed == 0 and fake.writes == []


def test_a_stop_leaves_an_accept_inside_its_read_of_a_hung_ironic(
    tmp_path: Path, fake: FakeIronic
) -> None:
    """An accept (an RPC call's thread) reading a frozen Ironic is named to
    the stop, which leaves it (the RPC server does not wait for it)."""
    driver = CountingDriver(make_conf(tmp_path), HOST, client=fake)  # type: ignore[arg-type]
    actions = NodeActions(HOST, driver, StubOwnership(), Results())  # type: ignore[arg-type]
    ironic_node = fake.add()
    fake.request_timeout = 3600.0
    fake.answering.clear()
    accepting: set[int] = set()

    def accept() -> None:
        accepting.add(threading.get_ident())
        actions.build(new_instance(), ring_node(ironic_node), EPOCH)

    caller = threading.Thread(target=accept, daemon=True)
    caller.start()
    try:
        wait_for(lambda: fake.hanging == 1, 5, "the accept's read hangs")
        assert driver.threads_left_waiting() == frozenset()  # not stopping
        actions.stop_accepting()
        assert driver.threads_left_waiting() == accepting
    finally:
        fake.answering.set()
    caller.join(5)
    assert driver.threads_left_waiting() == frozenset()


def test_a_build_accepted_while_ironic_is_down_waits_for_it_and_deploys(
    tmp_path: Path, fake: FakeIronic
) -> None:
    """An Ironic outage is not a refusal the conductor would retry every few
    seconds: the agent accepts and the deploy waits for Ironic to answer."""
    driver = CountingDriver(make_conf(tmp_path), HOST, client=fake)  # type: ignore[arg-type]
    results = Results()
    actions = NodeActions(HOST, driver, StubOwnership(), results)  # type: ignore[arg-type]
    ironic_node = fake.add()
    instance = new_instance()
    fake.unreachable_reads = 5  # the accept's read and the deploy's first reads
    assert actions.build(instance, ring_node(ironic_node), EPOCH) == "accepted"
    assert actions.wait_idle(10.0)
    [report] = results.builds
    assert (report["instance_uuid"], report["success"]) == (instance, True)
    assert fake.unreachable_reads == 0
    assert (ironic_node.provision_state, ironic_node.instance_uuid) == ("active", instance)


def test_a_stop_during_the_teardown_of_a_failed_deploy_reports_nothing(
    tmp_path: Path, fake: FakeIronic
) -> None:
    """The build is resumed from Ironic's record after the restart; a report
    now ("failed, node not clean") would leave Ironic's claim behind."""
    fake.steps = 10_000  # a teardown that takes its time
    driver = CountingDriver(make_conf(tmp_path), HOST, client=fake)  # type: ignore[arg-type]
    results = Results()
    actions = NodeActions(HOST, driver, StubOwnership(), results)  # type: ignore[arg-type]
    instance = new_instance()
    ironic_node = fake.add(
        provision_state="deploy failed",
        target_provision_state="active",
        instance_uuid=instance,
        last_error="IPA timed out",
    )
    actions.build(instance, ring_node(ironic_node), EPOCH)
    wait_for(lambda: ("provision", ironic_node.uuid, "deleted") in fake.writes, 5, "teardown")
    actions.stop_accepting()
    assert actions.wait_idle(5.0)
    assert driver.destroyed == 1 and results.builds == []


def test_a_resumed_build_that_ironic_failed_is_torn_down_at_once(
    tmp_path: Path, fake: FakeIronic
) -> None:
    """After a restart (of the agent or of Ironic) the first read finds the
    deploy failed: it is this instance's, so it is torn down and reported
    clean -- not left claimed in Ironic as a "failed before the first step"."""
    instance = new_instance()
    ironic_node = fake.add(
        provision_state="deploy failed",
        target_provision_state="active",
        instance_uuid=instance,
        last_error="The deploying state can't be resumed by conductor",
    )
    driver, report = _run_deploy(tmp_path, fake, ironic_node, instance)
    assert (report["success"], report["node_clean"]) == (False, True)
    assert "can't be resumed" in report["fault"]
    assert driver.destroyed == 1
    assert (ironic_node.provision_state, ironic_node.instance_uuid) == ("available", None)


def test_client_takes_no_answer_to_a_request_sent_before_the_outage_as_ironic_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A slow answer to a request sent before Ironic went must not read as
    "answers again": one outage is one WARNING and one INFO, not a flapping."""
    client, proxy = make_client()
    sent, answer = threading.Event(), threading.Event()
    original = proxy.get

    def slow_get(*args: Any, **kwargs: Any) -> Any:
        sent.set()
        assert answer.wait(5)
        return original(*args, **kwargs)

    proxy.get = slow_get  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger=CLIENT_LOGGER):
        early = threading.Thread(target=client.get_node, args=("n-1",), kwargs={"action": "a"})
        early.start()
        assert sent.wait(5)
        proxy.get = original  # type: ignore[method-assign]
        proxy.errors.append(ks_exceptions.ConnectFailure("refused"))
        with pytest.raises(ServiceUnavailable):
            client.get_node("n-1", action="inspect")  # Ironic goes
        answer.set()
        early.join(5)  # the answer to the early request arrives
        assert client.outage.down is True
        client.get_node("n-1", action="inspect")  # sent after: Ironic is back
    records = [r.levelno for r in caplog.records if r.name == CLIENT_LOGGER]
    assert records == [logging.WARNING, logging.INFO]
