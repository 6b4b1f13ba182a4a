# SPDX-License-Identifier: Apache-2.0
"""Power and lifecycle verbs: the endpoints, the routing to the owner, node delete.

The database is real (SQLite, migrated); the agents are a scripted stub of
:class:`compute_agent.rpcapi.ComputeAPI`'s ``set_power_state``, the fleet a
stub of its live members.  The agent's own fence (a stale epoch refused,
the driver untouched) is tested with the real :class:`NodeActions`.
"""

from __future__ import annotations

import datetime
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import oslo_messaging as messaging
import pytest
from sqlalchemy import update

from conductor.common.exception import (
    Conflict,
    DriverError,
    InstanceStateConflict,
    InvalidInput,
    NodeInUse,
    NodeNotBuildable,
    NodeNotFound,
    NotOwner,
    ServiceUnavailable,
)
from conductor.common.objects import PowerState, TaskState, VmState
from conductor.db import carriage, instances, nodes
from conductor.db.engine import Database
from conductor.db.models import InstanceModel, NodeModel, utcnow
from conductor.endpoints.fleet import FleetEndpoint
from conductor.endpoints.instances import InstancesEndpoint
from conductor.endpoints.inventory import InventoryEndpoint
from conductor.fleet_view import FleetView
from conductor.ironic_sync import EXCLUDE_TRAIT, REMOVED_REASON, SHARD_PROPERTY
from conductor.lifecycle.actions import ActionRouter
from conductor.lifecycle.queue import Action, BuildQueue
from conductor.lifecycle.workers import BuildWorkers
from conductor.validation import validate_rebuild
from tests.dbutil import add_nodes, migrated, pin
from tests.unit.test_endpoints import StubMembership, view_of

CTXT: dict[str, Any] = {"request_id": "req-test"}


@dataclass
class Queue:
    """The build queue, recording: ``act`` and ``retry_later``."""

    acted: list[str] = field(default_factory=list)
    later: list[tuple[str, Action]] = field(default_factory=list)

    def submit(self, instance_uuids: list[str]) -> None: ...

    def submit_stored(self, stored: Any, flavor: Any) -> None: ...

    def delete(self, instance_uuid: str) -> None: ...

    def act(self, instance_uuid: str) -> None:
        self.acted.append(instance_uuid)

    def retry_later(self, instance_uuid: str, action: Action, delay: float = 2.0) -> None:
        self.later.append((instance_uuid, action))


@dataclass
class Fleet:
    live: set[str] = field(default_factory=lambda: {"agent-1", "agent-2"})

    def live_members(self) -> frozenset[str]:
        return frozenset(self.live)

    def host_ips(self) -> dict[str, str]:
        return {}


@dataclass
class Agents:
    """``set_power_state`` by script: each call pops the next answer (an
    exception is raised), or ends the node where the target leads."""

    answers: list[Any] = field(default_factory=list)
    calls: list[tuple[str, str, int, str]] = field(default_factory=list)
    version_cap: str = "1.4"
    before: Callable[[], None] | None = None
    rebuilt: list[tuple[str, str, int, str]] = field(default_factory=list)
    #: the image and config drive each rebuild was sent with
    rebuilt_with: list[tuple[Any, Any]] = field(default_factory=list)
    #: the request id of every call (power and rebuild), in order
    request_ids: list[str | None] = field(default_factory=list)

    def can_send_version(self, version: str) -> bool:
        return tuple(map(int, version.split("."))) <= tuple(map(int, self.version_cap.split(".")))

    def set_power_state(
        self,
        host: str,
        *,
        node: dict[str, Any],
        epoch: int,
        target: str,
        timeout: Any = None,
        request_id: str | None = None,
    ) -> str:
        self.calls.append((host, node["uuid"], epoch, target))
        self.request_ids.append(request_id)
        if self.before is not None:
            self.before()
        if self.answers:
            answer = self.answers.pop(0)
            if isinstance(answer, BaseException):
                raise answer
            return str(answer)
        return "power off" if target.endswith("power off") else "power on"

    def rebuild_instance(
        self,
        host: str,
        *,
        instance_uuid: str,
        node: dict[str, Any],
        epoch: int,
        image: Any = None,
        config_drive: Any = None,
        timeout: Any = None,
        request_id: str | None = None,
    ) -> str:
        self.rebuilt.append((host, node["uuid"], epoch, instance_uuid))
        self.request_ids.append(request_id)
        self.rebuilt_with.append((image, config_drive))
        if self.before is not None:
            self.before()
        if self.answers:
            answer = self.answers.pop(0)
            if isinstance(answer, BaseException):
                raise answer
            return str(answer)
        return "active"


@dataclass
class Env:
    db: Database
    queue: Queue
    fleet: Fleet
    agents: Agents
    router: ActionRouter
    instances: InstancesEndpoint
    inventory: InventoryEndpoint
    node: str
    instance: str

    def stored(self) -> tuple[VmState, TaskState | None, str | None]:
        found = instances.get_instance(self.db, self.instance)
        return found.vm_state, found.task_state, found.fault

    def set(self, **values: Any) -> None:
        with self.db.transaction() as session:
            session.execute(
                update(InstanceModel).where(InstanceModel.uuid == self.instance).values(**values)
            )

    def epoch(self) -> int:
        return nodes.get_node(self.db, self.node).owner_epoch


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    db = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    [node] = add_nodes(db, 1, owner="agent-1")
    with db.transaction() as session:
        session.execute(update(NodeModel).where(NodeModel.uuid == node).values(owner_epoch=7))
    [instance] = pin(db, [node], "agent-1")
    queue, fleet, agents = Queue(), Fleet(), Agents()
    router = ActionRouter(db, fleet, agents, queue, timeout=5.0)  # type: ignore[arg-type]
    yield Env(
        db=db,
        queue=queue,
        fleet=fleet,
        agents=agents,
        router=router,
        instances=InstancesEndpoint(db, queue),
        inventory=InventoryEndpoint(db, fleet, power=router),  # type: ignore[arg-type]
        node=node,
        instance=instance,
    )
    router.close()
    db.dispose()


# -- the verbs: stored, then routed ------------------------------------------------------


@pytest.mark.parametrize(
    ("verb", "kwargs", "task"),
    [
        ("reboot_instance", {}, TaskState.REBOOTING),
        ("reboot_instance", {"hard": True}, TaskState.REBOOTING_HARD),
        ("stop_instance", {}, TaskState.POWERING_OFF),
    ],
)
def test_a_verb_stores_the_action_in_flight_and_routes_it(
    env: Env, verb: str, kwargs: dict[str, Any], task: TaskState
) -> None:
    reply = getattr(env.instances, verb)(CTXT, instance=env.instance, **kwargs)
    assert (reply["vm_state"], reply["task_state"]) == ("active", task.value)
    assert env.stored()[:2] == (VmState.ACTIVE, task)
    assert env.queue.acted == [env.instance]


@pytest.mark.parametrize(
    ("vm_state", "task", "verb", "message"),
    [
        ("stopped", None, "reboot_instance", "instance is in state stopped, cannot reboot"),
        ("active", None, "start_instance", "instance is in state active, cannot start"),
        (
            "active",
            "powering-off",
            "reboot_instance",
            "instance is in state active (powering-off), cannot reboot",
        ),
        ("error", None, "stop_instance", "instance is in state error, cannot stop"),
        ("deleting", "deleting", "start_instance", "in state deleting (deleting), cannot start"),
    ],
)
def test_a_verb_the_state_does_not_allow_is_a_409_naming_it_and_changes_nothing(
    env: Env, vm_state: str, task: str | None, verb: str, message: str
) -> None:
    env.set(vm_state=vm_state, task_state=task)
    before = instances.get_instance(env.db, env.instance)
    with pytest.raises(InstanceStateConflict, match=re.escape(message)) as caught:
        getattr(env.instances, verb)(CTXT, instance=env.instance)
    assert caught.value.field == "vm_state"
    assert instances.get_instance(env.db, env.instance) == before
    assert env.queue.acted == []


def test_a_verb_on_an_instance_without_a_node_is_refused(env: Env) -> None:
    env.set(vm_state="active", node_uuid=None)
    with pytest.raises(InstanceStateConflict, match="without a node, cannot reboot"):
        env.instances.reboot_instance(CTXT, instance=env.instance)
    assert env.stored()[1] is None


def test_bad_input_names_the_field_and_changes_nothing(env: Env) -> None:
    with pytest.raises(InvalidInput) as caught:
        env.instances.reboot_instance(CTXT, instance=env.instance, hard="yes")
    assert caught.value.fields == ["hard"]
    with pytest.raises(InvalidInput) as caught:
        env.instances.stop_instance(CTXT, instance="not-a-uuid")
    assert caught.value.fields == ["instance"]
    assert env.stored()[:2] == (VmState.ACTIVE, None) and env.queue.acted == []


def test_issuing_the_verb_in_flight_again_routes_it_anew(env: Env) -> None:
    """The way out of an action stuck on a dead agent: the same verb again."""
    env.instances.stop_instance(CTXT, instance=env.instance)
    env.instances.stop_instance(CTXT, instance=env.instance)
    assert env.queue.acted == [env.instance, env.instance]
    # ... and a hard reboot takes over a soft one, never the reverse
    env.set(task_state="rebooting")
    env.instances.reboot_instance(CTXT, instance=env.instance, hard=True)
    with pytest.raises(InstanceStateConflict):
        env.instances.reboot_instance(CTXT, instance=env.instance)


# -- routing to the owner ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("verb", "target", "vm_state"),
    [
        ("reboot", "soft reboot", VmState.ACTIVE),
        ("hard", "reboot", VmState.ACTIVE),
        ("stop", "soft power off", VmState.STOPPED),
    ],
)
def test_the_owner_is_called_at_its_epoch_and_its_answer_ends_the_action(
    env: Env, verb: str, target: str, vm_state: VmState
) -> None:
    if verb == "stop":
        env.instances.stop_instance(CTXT, instance=env.instance)
    else:
        env.instances.reboot_instance(CTXT, instance=env.instance, hard=verb == "hard")
    env.router._act(env.instance)
    assert env.agents.calls == [("agent-1", env.node, 7, target)]
    assert env.stored() == (vm_state, None, None)
    expected = PowerState.OFF if vm_state is VmState.STOPPED else PowerState.ON
    assert nodes.get_node(env.db, env.node).power_state is expected


def test_start_powers_a_stopped_instance_on(env: Env) -> None:
    env.set(vm_state="stopped")
    env.instances.start_instance(CTXT, instance=env.instance)
    env.router._act(env.instance)
    assert env.agents.calls == [("agent-1", env.node, 7, "power on")]
    assert env.stored() == (VmState.ACTIVE, None, None)


def test_not_owner_re_reads_the_claim_and_routes_to_the_new_owner(env: Env) -> None:
    env.instances.reboot_instance(CTXT, instance=env.instance)

    def taken_over() -> None:
        # agent-2 took the node at epoch 8 just before agent-1 was asked
        if len(env.agents.calls) == 1:
            with env.db.transaction() as session:
                session.execute(
                    update(NodeModel)
                    .where(NodeModel.uuid == env.node)
                    .values(owner="agent-2", owner_epoch=8)
                )

    env.agents.before = taken_over
    env.agents.answers = [NotOwner(env.node, "agent-2", 8)]
    env.router._act(env.instance)
    assert env.agents.calls == [
        ("agent-1", env.node, 7, "soft reboot"),
        ("agent-2", env.node, 8, "soft reboot"),
    ]
    assert env.stored() == (VmState.ACTIVE, None, None)
    assert env.queue.later == []


@pytest.mark.parametrize(
    "refusal",
    [
        Conflict(field="node_uuid", value="n", reason="node is busy with deploy; retry"),
        messaging.MessagingTimeout("no reply"),
        ServiceUnavailable("Ironic answered 503"),
    ],
)
def test_a_refusal_retrying_can_fix_keeps_the_action_and_retries_it(
    env: Env, refusal: BaseException
) -> None:
    env.instances.stop_instance(CTXT, instance=env.instance)
    env.agents.answers = [refusal]
    env.router._act(env.instance)
    assert env.stored()[:2] == (VmState.ACTIVE, TaskState.POWERING_OFF)
    assert env.queue.later == [(env.instance, "act")]


def test_a_refusal_retrying_cannot_fix_ends_the_action_where_it_was(env: Env) -> None:
    env.instances.stop_instance(CTXT, instance=env.instance)
    env.agents.answers = [DriverError(env.node, "set_power", "BMC says no")]
    env.router._act(env.instance)
    vm_state, task, fault = env.stored()
    assert (vm_state, task) == (VmState.ACTIVE, None)
    assert fault is not None and "powering-off failed" in fault and "BMC says no" in fault
    assert env.queue.later == [] and len(env.agents.calls) == 1


def test_an_owner_not_live_is_not_called_the_action_waits(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    env.instances.reboot_instance(CTXT, instance=env.instance)
    env.fleet.live = {"agent-2"}
    with caplog.at_level("DEBUG", logger="conductor.lifecycle.actions"):
        for _retry in range(3):
            env.router._act(env.instance)
    assert env.agents.calls == []
    assert env.queue.later == [(env.instance, "act")] * 3
    assert env.stored()[1] is TaskState.REBOOTING
    # One line for the cause, not one per retry.
    waits = [r for r in caplog.records if "waits for a live owner" in r.getMessage()]
    assert [r.levelname for r in waits] == ["INFO", "DEBUG", "DEBUG"]


@pytest.mark.parametrize("vm_state", ["active", "stopped"])
def test_a_rebuild_is_routed_to_the_owner_and_ends_active(env: Env, vm_state: str) -> None:
    env.set(vm_state=vm_state)
    reply = env.instances.rebuild_instance(CTXT, instance=env.instance)
    assert (reply["vm_state"], reply["task_state"]) == (vm_state, "rebuilding")
    env.router._act(env.instance)
    assert env.agents.rebuilt == [("agent-1", env.node, 7, env.instance)]
    assert env.agents.calls == []  # no power call: the rebuild powers the node on
    assert env.stored() == (VmState.ACTIVE, None, None)
    assert nodes.get_node(env.db, env.node).power_state is PowerState.ON


def test_a_rebuild_refused_for_good_is_not_retried(env: Env) -> None:
    """The back end shows another instance on the node: NodeNotBuildable, a
    Conflict retrying cannot fix, ends the rebuild (the instance stays)."""
    env.instances.rebuild_instance(CTXT, instance=env.instance)
    env.agents.answers = [
        NodeNotBuildable(field="node_uuid", value=env.node, reason="node hosts instance X")
    ]
    env.router._act(env.instance)
    vm_state, task, fault = env.stored()
    assert (vm_state, task) == (VmState.ACTIVE, None)
    assert fault is not None and "node hosts instance X" in fault
    assert env.queue.later == [] and len(env.agents.rebuilt) == 1


def test_a_rebuild_with_agents_pinned_below_1_3_fails_saying_why(env: Env) -> None:
    env.agents.version_cap = "1.1"
    env.instances.rebuild_instance(CTXT, instance=env.instance)
    env.router._act(env.instance)
    assert env.agents.rebuilt == []
    fault = env.stored()[2]
    assert fault is not None and "[upgrade_levels] compute" in fault


# -- rebuild with a new image and config drive (1.14) ----------------------------------

OLD_IMAGE = {"source": "http://images.example/old.qcow2", "checksum": "a" * 32}
NEW_IMAGE = {
    "source": "http://images.example/new.raw",
    "os_hash_algo": "sha256",
    "os_hash_value": "B" * 64,
    "disk_format": "raw",
}


def _deployed_with_old(env: Env) -> None:
    env.set(
        image=dict(OLD_IMAGE),
        config_drive={
            "user_data": "old secret",
            "meta_data": {"uuid": env.instance, "name": "vm", "meta": {"a": "1"}},
            "network_data": {"links": []},
        },
        name="vm",
    )


def test_a_rebuild_stores_the_new_image_with_its_state_and_routes_it(env: Env) -> None:
    """What is given replaces the stored value (meta_data with the instance's
    own uuid and name), what is not is kept; the agent gets the record's."""
    _deployed_with_old(env)
    reply = env.instances.rebuild_instance(
        CTXT,
        instance=env.instance,
        image=NEW_IMAGE,
        user_data="new secret",
        meta_data={"public_keys": {"k": "ssh-ed25519 AAAA"}},
    )
    assert reply["task_state"] == "rebuilding"
    stored = instances.get_instance(env.db, env.instance)
    assert stored.task_state is TaskState.REBUILDING
    expected_image = {**NEW_IMAGE, "os_hash_value": "b" * 64}  # normalized as a build's
    expected_drive = {
        "user_data": "new secret",
        "meta_data": {"public_keys": {"k": "ssh-ed25519 AAAA"}, "uuid": env.instance, "name": "vm"},
        "network_data": {"links": []},
    }
    assert (stored.image, stored.config_drive) == (expected_image, expected_drive)
    env.router._act(env.instance)
    assert env.agents.rebuilt_with == [(expected_image, expected_drive)]
    assert env.stored() == (VmState.ACTIVE, None, None)


def test_a_takeover_re_routes_the_rebuild_with_the_new_image(env: Env) -> None:
    """The owner died mid-rebuild: the new owner gets the new image, from the record."""
    _deployed_with_old(env)
    env.instances.rebuild_instance(CTXT, instance=env.instance, image=NEW_IMAGE)
    env.agents.answers = [messaging.MessagingTimeout("agent-1 died")]
    env.router._act(env.instance)
    assert env.stored()[1] is TaskState.REBUILDING
    with env.db.transaction() as session:
        session.execute(
            update(NodeModel)
            .where(NodeModel.uuid == env.node)
            .values(owner="agent-2", owner_epoch=8)
        )
    env.fleet.live = {"agent-2"}
    env.router._act(env.instance)
    assert [(host, epoch) for host, _n, epoch, _i in env.agents.rebuilt] == [
        ("agent-1", 7),
        ("agent-2", 8),
    ]
    assert [image["source"] for image, _drive in env.agents.rebuilt_with] == [
        NEW_IMAGE["source"]
    ] * 2
    assert env.stored() == (VmState.ACTIVE, None, None)


@pytest.mark.parametrize(
    ("kwargs", "field_name"),
    [
        ({"image": {**NEW_IMAGE, "os_hash_value": "zz"}}, "image.os_hash_value"),
        ({"image": {"source": "file:///etc/passwd", "checksum": "a" * 32}}, "image.source"),
        ({"image": {"source": "http://i/x"}}, "image.os_hash_value"),
        ({"meta_data": {"uuid": "mine"}}, "meta_data.uuid"),
        ({"network_data": {"links": "no"}}, "network_data.links"),
        ({"image": NEW_IMAGE, "user_data": "x" * 65537}, "user_data"),
    ],
)
def test_a_bad_rebuild_field_is_named_and_changes_nothing(
    env: Env, kwargs: dict[str, Any], field_name: str
) -> None:
    _deployed_with_old(env)
    before = instances.get_instance(env.db, env.instance)
    with pytest.raises(InvalidInput) as refused:
        env.instances.rebuild_instance(CTXT, instance=env.instance, **kwargs)
    assert [e.field for e in refused.value.errors] == [field_name]
    assert "xxxx" not in str(refused.value)  # user data is never shown
    after = instances.get_instance(env.db, env.instance)
    assert (after.task_state, after.image, after.config_drive) == (
        None,
        before.image,
        before.config_drive,
    )
    assert env.queue.acted == []


def test_a_rebuild_in_flight_issued_again_with_another_image_is_refused(env: Env) -> None:
    """The call in flight may be deploying the stored image and its answer
    ends the action: a different image waits for it to end (409)."""
    _deployed_with_old(env)
    env.instances.rebuild_instance(CTXT, instance=env.instance, image=NEW_IMAGE)
    with pytest.raises(InstanceStateConflict, match="another image or config drive"):
        env.instances.rebuild_instance(CTXT, instance=env.instance, image=OLD_IMAGE)
    assert instances.get_instance(env.db, env.instance).image["source"] == NEW_IMAGE["source"]
    # The same image again, or none: routed anew, as any verb in flight.
    env.instances.rebuild_instance(CTXT, instance=env.instance, image=NEW_IMAGE)
    env.instances.rebuild_instance(CTXT, instance=env.instance)
    assert env.queue.acted == [env.instance] * 3


def test_a_rebuild_with_a_new_image_the_state_refuses_stores_nothing(env: Env) -> None:
    _deployed_with_old(env)
    env.set(vm_state="error")
    with pytest.raises(InstanceStateConflict, match="cannot rebuild"):
        env.instances.rebuild_instance(CTXT, instance=env.instance, image=NEW_IMAGE)
    assert instances.get_instance(env.db, env.instance).image == OLD_IMAGE


def test_the_db_compare_and_swap_stores_no_image_when_the_state_moved(env: Env) -> None:
    """A delete won between the endpoint's read and its write: nothing stored."""
    _deployed_with_old(env)
    env.set(vm_state="deleting")
    request = validate_rebuild(image=NEW_IMAGE)
    assert instances.request_rebuild(env.db, env.instance, request) is False
    assert instances.get_instance(env.db, env.instance).image == OLD_IMAGE


def test_a_rebuild_with_an_image_and_agents_pinned_below_1_4_fails_saying_why(env: Env) -> None:
    """An older agent would redeploy the back end's (old) image: refused."""
    _deployed_with_old(env)
    env.agents.version_cap = "1.3"
    env.instances.rebuild_instance(CTXT, instance=env.instance, image=NEW_IMAGE)
    env.router._act(env.instance)
    assert env.agents.rebuilt == []
    fault = env.stored()[2]
    assert fault is not None and "compute API 1.4" in fault


def test_a_rebuild_without_image_or_drive_goes_to_agents_pinned_at_1_3(env: Env) -> None:
    env.agents.version_cap = "1.3"
    env.instances.rebuild_instance(CTXT, instance=env.instance)
    env.router._act(env.instance)
    assert env.agents.rebuilt_with == [(None, None)]
    assert env.stored() == (VmState.ACTIVE, None, None)


def test_a_rebuild_is_refused_from_error(env: Env) -> None:
    env.set(vm_state="error")
    with pytest.raises(InstanceStateConflict, match="in state error, cannot rebuild"):
        env.instances.rebuild_instance(CTXT, instance=env.instance)


def test_agents_pinned_below_1_3_get_the_hard_target(env: Env) -> None:
    env.agents.version_cap = "1.1"
    env.instances.reboot_instance(CTXT, instance=env.instance)
    env.router._act(env.instance)
    assert env.agents.calls[0][3] == "reboot"


def test_a_late_answer_does_not_end_a_later_action(env: Env) -> None:
    """A soft reboot answered after a hard one took over: the hard one stays."""
    env.instances.reboot_instance(CTXT, instance=env.instance)
    env.agents.before = lambda: env.set(task_state="rebooting_hard")
    env.router._act(env.instance)
    assert env.stored()[1] is TaskState.REBOOTING_HARD


def test_a_second_call_for_the_same_owner_epoch_waits_for_the_first(env: Env) -> None:
    """Two routes of one action at once (a retry and a takeover's re-drive):
    one call per owner epoch, never a second reboot of the node."""
    env.instances.reboot_instance(CTXT, instance=env.instance)
    release = threading.Event()
    entered = threading.Event()

    def slow() -> None:
        entered.set()
        release.wait(5)

    env.agents.before = slow
    first = threading.Thread(target=env.router._act, args=(env.instance,))
    first.start()
    assert entered.wait(5)
    env.router._act(env.instance)  # the duplicate: not sent
    release.set()
    first.join(5)
    assert len(env.agents.calls) == 1
    assert env.stored() == (VmState.ACTIVE, None, None)


def test_act_runs_in_the_background_pool(env: Env) -> None:
    env.instances.reboot_instance(CTXT, instance=env.instance)
    env.router.act(env.instance)
    deadline = time.monotonic() + 5
    while env.stored()[1] is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert env.stored() == (VmState.ACTIVE, None, None)
    # Daemon threads: a call hung on a dead agent never holds up the exit.
    senders = [t for t in threading.enumerate() if t.name.startswith("action-sender")]
    assert senders and all(t.daemon for t in senders)
    env.router.close()
    env.instances.reboot_instance(CTXT, instance=env.instance)
    env.router.act(env.instance)  # stopping: not routed, the record stays
    time.sleep(0.05)
    assert env.stored()[1] is TaskState.REBOOTING and len(env.agents.calls) == 1
    # A node power verb is stored, not sent: a peer carries it on.
    env.inventory.set_node_power_state(CTXT, node=env.node, target="power on")
    time.sleep(0.05)
    [stored] = carriage.power_requests_of(env.db, [env.node])
    assert stored.target == "power on" and len(env.agents.calls) == 1


def test_the_owners_answer_on_a_node_it_lost_meanwhile_is_not_recorded(env: Env) -> None:
    """The node's power_state follows only the owner at the epoch it acted under."""
    _node_row(env, power_state="power on")
    env.instances.stop_instance(CTXT, instance=env.instance)

    def moved() -> None:  # another agent took the node while the call ran
        _node_row(env, owner="agent-2", owner_epoch=8)

    env.agents.before = moved
    env.router._act(env.instance)
    assert nodes.get_node(env.db, env.node).power_state is PowerState.ON
    # The instance's own action is over either way (the owner did it).
    assert env.stored() == (VmState.STOPPED, None, None)


# -- node power and delete -------------------------------------------------------------


def test_node_power_is_routed_to_the_owner_and_power_state_follows(env: Env) -> None:
    reply = env.inventory.set_node_power_state(CTXT, node=env.node, target="soft rebooting")
    assert reply["uuid"] == env.node
    deadline = time.monotonic() + 5
    while not env.agents.calls and time.monotonic() < deadline:
        time.sleep(0.01)
    env.router.close()  # waits for nothing more: the call was made
    assert env.agents.calls == [("agent-1", env.node, 7, "soft reboot")]


@pytest.mark.parametrize("target", ["reboot", "on", "", None, 3])
def test_node_power_bad_target_names_the_field(env: Env, target: Any) -> None:
    with pytest.raises(InvalidInput) as caught:
        env.inventory.set_node_power_state(CTXT, node=env.node, target=target)
    assert caught.value.fields == ["target"]
    time.sleep(0.05)
    assert env.agents.calls == []


def _node_row(env: Env, **values: Any) -> None:
    with env.db.transaction() as session:
        session.execute(update(NodeModel).where(NodeModel.uuid == env.node).values(**values))


@pytest.mark.parametrize(
    ("setup", "field_name", "reason"),
    [
        ({"maintenance": True}, "instance_uuid", "node hosts instance"),
        ({"instance_uuid": None}, "maintenance", "not in maintenance"),
        (
            {
                "instance_uuid": None,
                "maintenance": True,
                "properties": {SHARD_PROPERTY: ""},
            },
            "traits",
            "next sync pass would import it again",
        ),
    ],
)
def test_node_delete_refusals_name_why_and_change_nothing(
    env: Env, setup: dict[str, Any], field_name: str, reason: str
) -> None:
    _node_row(env, **setup)
    before = nodes.get_node(env.db, env.node)
    with pytest.raises(NodeInUse, match=reason) as caught:
        env.inventory.delete_node(CTXT, node=env.node)
    assert caught.value.field == field_name
    assert nodes.get_node(env.db, env.node) == before


def test_node_delete_refused_while_a_build_is_placed_on_it(env: Env) -> None:
    """The node's pin cleared but an instance row still placed there (not deleted)."""
    _node_row(env, instance_uuid=None, maintenance=True)
    with pytest.raises(NodeInUse, match="being placed"):
        env.inventory.delete_node(CTXT, node=env.node)
    assert nodes.get_node(env.db, env.node).uuid == env.node


@pytest.mark.parametrize(
    "setup",
    [
        {},
        {"properties": {SHARD_PROPERTY: ""}, "traits": [EXCLUDE_TRAIT]},
        {"properties": {SHARD_PROPERTY: ""}, "maintenance_reason": REMOVED_REASON},
    ],
)
def test_node_delete_forgets_a_node_in_maintenance_hosting_nothing(
    env: Env, setup: dict[str, Any]
) -> None:
    env.set(vm_state="deleted", node_uuid=None)
    _node_row(env, instance_uuid=None, maintenance=True, **setup)
    env.inventory.delete_node(CTXT, node=env.node)
    with pytest.raises(NodeNotFound):
        nodes.get_node(env.db, env.node)


# -- fleet check and re-drives ------------------------------------------------------------


def test_fleet_check_reports_a_stuck_action_with_the_way_out(env: Env) -> None:
    env.instances.stop_instance(CTXT, instance=env.instance)
    env.set(updated_at=utcnow() - datetime.timedelta(seconds=900))
    endpoint = FleetEndpoint(
        env.db,
        _fleet_view(env),
        "cond-1",
        object(),  # type: ignore[arg-type]
        stuck_after=lambda: 600.0,
    )
    problems = [p for p in endpoint.fleet_check(CTXT)["problems"] if p["kind"] == "stuck-action"]
    assert [p["instance_uuid"] for p in problems] == [env.instance]
    assert "ringfleet instance stop" in problems[0]["message"]


def _fleet_view(env: Env) -> FleetView:
    fleet = FleetView(env.db)
    fleet.attach(StubMembership())  # type: ignore[arg-type]
    fleet.on_change(view_of("agent-1"))
    return fleet


def test_a_takeover_re_drives_the_action_in_flight(env: Env) -> None:
    env.instances.reboot_instance(CTXT, instance=env.instance)
    queue = BuildQueue()
    workers = BuildWorkers(
        env.db,
        None,  # type: ignore[arg-type]
        env.fleet,  # type: ignore[arg-type]
        queue,
        None,
        workers=0,
        max_attempts=lambda: 3,
        owner_wait=lambda: 0.0,
        metrics=None,  # type: ignore[arg-type]
    )
    workers.rehomed([env.node])
    assert queue.get() == ("act", env.instance, None)
    assert workers.resume_agent("agent-1") == (1, 0)
    assert queue.get() == ("act", env.instance, None)
    assert workers.resume() == 1  # a conductor's start routes it again too
    assert queue.get() == ("act", env.instance, None)
