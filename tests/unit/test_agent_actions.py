# SPDX-License-Identifier: Apache-2.0
"""NodeActions: fenced background deploy/destroy/power on the real simulated driver.

The driver is the real :class:`SimulatedDriver` (tiny step durations, its
action log in ``tmp_path``); the ownership is a real
:class:`OwnershipManager` whose held epochs come from a fake conductor's
claim replies; the conductor records the results the agent reports.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from oslo_config import cfg

from compute_agent.actions import PROGRESS_EVERY, NodeActions
from compute_agent.drivers import ActionContext
from compute_agent.drivers.simulated import DEPLOY_STEPS, SimulatedDriver
from compute_agent.drivers.simulated.action_log import Action, check_fencing, read_log
from compute_agent.endpoints import ComputeEndpoint
from compute_agent.ownership import OwnershipManager
from conductor.common.conf import simulated_driver as simulated_conf
from conductor.common.exception import Conflict, InvalidInput, NodeNotBuildable, NotOwner
from conductor.common.objects import (
    ClaimOutcome,
    Node,
    Ownership,
    PowerState,
    ProvisionState,
    ReleaseOutcome,
)
from hashring.membership import Member, MembershipView, State

HOST = "agent-1"


# -- fakes -----------------------------------------------------------------------------


class StubMembership:
    def __init__(self) -> None:
        self.state = State.CONNECTED
        self.join_generation = 1
        self.view: MembershipView | None = None  # the latest view, as Membership.view
        self.refused = threading.Event()  # set whenever can_act() says no

    def can_act(self) -> bool:
        if self.state is not State.CONNECTED:
            self.refused.set()
            return False
        return True


@dataclass
class FakeConductor:
    """Grants every claim at the epoch the test chose; records reported results."""

    epochs: dict[str, int] = field(default_factory=dict)
    builds: list[dict[str, Any]] = field(default_factory=list)
    destroys: list[dict[str, Any]] = field(default_factory=list)
    fail_reports: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def list_node_uuids(self, **_: Any) -> dict[str, Any]:
        return {
            "nodes": [{"uuid": u, "group": ""} for u in sorted(self.epochs)],
            "as_of": "2024-01-01T00:00:00+00:00",
        }

    def list_node_share(self, member: str, **_: Any) -> dict[str, Any] | None:
        return None  # a conductor before API 1.15: the whole fleet is read

    def claim_nodes(self, host: str, node_uuids: list[str]) -> ClaimOutcome:
        return ClaimOutcome(granted=[Ownership(u, host, self.epochs[u]) for u in node_uuids])

    def release_nodes(self, host: str, claims: dict[str, int]) -> ReleaseOutcome:
        return ReleaseOutcome(done=dict(claims))

    def owned_nodes(self, host: str) -> list[Ownership]:
        return []  # a fresh agent: nothing held from before

    def report_build_result(self, host: str, **result: Any) -> dict[str, Any]:
        with self.lock:
            self.builds.append({"host": host, **result})
        if self.fail_reports:
            raise TimeoutError("conductor unreachable")
        return {"accepted": True}

    def report_destroy_result(self, host: str, **result: Any) -> dict[str, Any]:
        with self.lock:
            self.destroys.append({"host": host, **result})
        return {"accepted": True}


@dataclass
class DirectResults:
    """The results sink, synchronous: each outcome is one call to the conductor at
    once; a call that fails is lost (the reporter's retries are its own tests')."""

    conductor: FakeConductor

    def report(self, result: dict[str, Any]) -> None:
        with contextlib.suppress(Exception):
            self.conductor.report_build_result(HOST, **result)

    def report_destroy(self, result: dict[str, Any]) -> None:
        with contextlib.suppress(Exception):
            self.conductor.report_destroy_result(HOST, **result)


@dataclass
class Agent:
    actions: NodeActions
    ownership: OwnershipManager
    membership: StubMembership
    conductor: FakeConductor
    driver: SimulatedDriver
    log_path: Path
    nodes: list[Node]

    def epoch(self, node: Node) -> int:
        held = self.ownership.epoch(node.uuid)
        assert held is not None
        return held

    def log(self) -> list[Action]:
        return read_log(self.log_path) if self.log_path.exists() else []

    def log_of(self, node: Node) -> list[tuple[str, str | None]]:
        return [(a.action, a.step) for a in self.log() if a.node == node.uuid]


#: How long a test waits for what must happen (it normally comes in
#: milliseconds): a last resort, for a machine loaded by other jobs.
LONG = 30.0


def wait_for(check: Callable[[], bool], timeout: float = LONG) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.005)


class Hold:
    """The back end moves on when the test says, not when a step's time is up.

    Every deploy of the agent's driver stops at each of *steps*: after
    NodeActions was told of the step (its progress callback: the fence
    check, the progress kept for :meth:`NodeActions.take_progress`) and
    before the driver carries it out.  A teardown stops before it starts,
    when *destroys*.  The test then looks at a deploy that is certainly
    still running, and lets it go on (:meth:`release`); whatever is still
    held when the test ends is let go.
    """

    def __init__(
        self, agent: Agent, steps: tuple[str, ...], destroys: bool, mp: pytest.MonkeyPatch
    ) -> None:
        self._steps = steps
        self._lock = threading.Lock()
        self._open = False
        self._reached: dict[tuple[str, str], threading.Event] = {}
        self._go: dict[tuple[str, str], threading.Event] = {}
        deploy, destroy = agent.driver.deploy, agent.driver.destroy

        def held_deploy(ctx: ActionContext, node: Node, progress: Any, *rest: Any) -> None:
            def held_progress(step: str) -> None:
                progress(step)
                if step in self._steps:
                    self._stop(node.uuid, step)

            deploy(ctx, node, held_progress, *rest)

        def held_destroy(ctx: ActionContext, node: Node) -> None:
            self._stop(node.uuid, "destroy")
            destroy(ctx, node)

        mp.setattr(agent.driver, "deploy", held_deploy)
        if destroys:
            mp.setattr(agent.driver, "destroy", held_destroy)

    def _events(self, node_uuid: str, where: str) -> tuple[threading.Event, threading.Event]:
        with self._lock:
            key = (node_uuid, where)
            return (
                self._reached.setdefault(key, threading.Event()),
                self._go.setdefault(key, threading.Event()),
            )

    def _stop(self, node_uuid: str, where: str) -> None:
        with self._lock:
            if self._open:
                return
        reached, go = self._events(node_uuid, where)
        if reached.is_set():
            return  # a step's progress is reported again while it runs: once is enough
        reached.set()
        go.wait(LONG)

    def wait_at(self, node: Node, where: str) -> None:
        """Wait until the node's deploy is held at step *where* (or its
        teardown, at ``"destroy"``)."""
        reached, _go = self._events(node.uuid, where)
        assert reached.wait(LONG), f"node {node.name} never reached {where!r}"

    def release(self, node: Node, where: str) -> None:
        """Let the node's deploy go on from step *where* (or its teardown)."""
        self._events(node.uuid, where)[1].set()

    def release_all(self) -> None:
        """Let every deploy and teardown go on, now and later."""
        with self._lock:
            self._open = True
            goes = list(self._go.values())
        for go in goes:
            go.set()


def make_conf(directory: Path, **values: object) -> cfg.ConfigOpts:
    # A config file, not set_override: overrides of a module-level OptGroup leak.
    path = directory / f"{uuidlib.uuid4()}.conf"
    path.write_text(
        "[simulated_driver]\n" + "".join(f"{key} = {value}\n" for key, value in values.items())
    )
    conf = cfg.ConfigOpts()
    simulated_conf.OPTIONS.register(conf)
    conf(["--config-file", str(path)], project="ringfleet", default_config_files=[])
    return conf


def make_agent(
    tmp_path: Path, *, nodes: int = 3, suspend_wait: float = 10.0, **driver_options: object
) -> Agent:
    log_path = tmp_path / "actions.log"
    options: dict[str, object] = {
        "step_duration": 0.005,
        "clean_duration": 0.005,
        "power_duration": 0,
        "action_log": log_path,
        **driver_options,
    }
    driver = SimulatedDriver(make_conf(tmp_path, **options), HOST)
    node_objs = [
        Node(uuid=str(uuidlib.uuid4()), name=f"n{i}", resource_class="baremetal")
        for i in range(nodes)
    ]
    conductor = FakeConductor(epochs={n.uuid: 3 + i for i, n in enumerate(node_objs)})
    membership = StubMembership()
    holder: list[NodeActions] = []
    ownership = OwnershipManager(
        HOST,
        conductor,
        membership,  # type: ignore[arg-type]
        busy_nodes=lambda: holder[0].busy_nodes() if holder else set(),
    )
    actions = NodeActions(
        HOST, driver, ownership, DirectResults(conductor), suspend_wait=suspend_wait
    )
    holder.append(actions)
    view = MembershipView(members={HOST: Member(HOST, 1, 1.0, {})}, excluded={}, ring_version=1)
    ownership.refresh_inventory()
    result = ownership.reconcile(view)
    assert result is not None and result.claimed == nodes
    return Agent(actions, ownership, membership, conductor, driver, log_path, node_objs)


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    made = make_agent(tmp_path)
    yield made
    made.actions.stop_accepting()
    assert made.actions.wait_idle(LONG)


@pytest.fixture
def hold(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Hold]]:
    """``hold(agent, steps=DEPLOY_STEPS, destroys=False)``: a :class:`Hold` on
    that agent's driver, let go at the end of the test."""
    made: list[Hold] = []

    def make(agent: Agent, steps: tuple[str, ...] = DEPLOY_STEPS, destroys: bool = False) -> Hold:
        made.append(Hold(agent, steps, destroys, monkeypatch))
        return made[-1]

    yield make
    for held in made:
        held.release_all()


def instance_id() -> str:
    return str(uuidlib.uuid4())


FULL_DEPLOY = [
    ("deploy_start", None),
    *[("deploy_step", step) for step in DEPLOY_STEPS],
    ("deploy_done", None),
]


# -- build -----------------------------------------------------------------------------


def test_build_is_accepted_deployed_reported_and_pinned(agent: Agent) -> None:
    node = agent.nodes[0]
    epoch = agent.epoch(node)
    instance = instance_id()
    assert agent.actions.build(instance, node, epoch) == "accepted"
    wait_for(lambda: len(agent.conductor.builds) == 1)
    assert agent.conductor.builds == [
        {
            "host": HOST,
            "instance_uuid": instance,
            "node_uuid": node.uuid,
            "epoch": epoch,
            "success": True,
            "fault": None,
            "node_clean": True,
        }
    ]
    assert agent.ownership.pinned() == {node.uuid}
    assert agent.actions.busy_nodes() == set() and agent.actions.in_flight() == 0
    assert agent.log_of(node) == FULL_DEPLOY
    assert {(a.agent, a.epoch, a.instance) for a in agent.log()} == {(HOST, epoch, instance)}
    state = agent.driver.node_state(node.uuid)
    assert state is not None and state.provision_state is ProvisionState.ACTIVE
    assert state.instance_uuid == instance


def test_same_instance_again_is_in_progress_then_done_and_re_reported(
    agent: Agent, hold: Callable[..., Hold]
) -> None:
    node = agent.nodes[0]
    epoch = agent.epoch(node)
    instance = instance_id()
    held = hold(agent, steps=DEPLOY_STEPS[:1])
    assert agent.actions.build(instance, node, epoch) == "accepted"
    assert agent.actions.build(instance, node, epoch) == "in-progress"
    assert agent.actions.busy_nodes() == {node.uuid}
    held.release(node, DEPLOY_STEPS[0])
    wait_for(lambda: len(agent.conductor.builds) == 1)
    assert agent.actions.wait_idle(LONG)

    # The conductor asks again (its accept or our report was lost): no second
    # deploy, the result is sent again.
    assert agent.actions.build(instance, node, epoch) == "done"
    wait_for(lambda: len(agent.conductor.builds) == 2)
    first, second = agent.conductor.builds
    assert first == second and second["success"] is True
    assert agent.log_of(node) == FULL_DEPLOY  # deployed once
    assert agent.actions.wait_idle(LONG)


def test_a_lost_report_is_sent_again_when_the_conductor_asks(agent: Agent) -> None:
    node = agent.nodes[0]
    epoch = agent.epoch(node)
    instance = instance_id()
    agent.conductor.fail_reports = True  # the first report does not arrive
    agent.actions.build(instance, node, epoch)
    wait_for(lambda: len(agent.conductor.builds) == 1)
    assert agent.actions.wait_idle(LONG)  # the failed report does not kill the thread
    agent.conductor.fail_reports = False
    assert agent.actions.build(instance, node, epoch) == "done"
    wait_for(lambda: len(agent.conductor.builds) == 2)
    assert agent.conductor.builds[1]["success"] is True
    assert agent.log_of(node) == FULL_DEPLOY


def test_another_instance_on_a_busy_node_is_a_conflict(
    agent: Agent, hold: Callable[..., Hold]
) -> None:
    node = agent.nodes[0]
    epoch = agent.epoch(node)
    first = instance_id()
    held = hold(agent, steps=DEPLOY_STEPS[:1])
    agent.actions.build(first, node, epoch)
    with pytest.raises(Conflict) as err:
        agent.actions.build(instance_id(), node, epoch)
    assert err.value.field == "node_uuid" and err.value.value == node.uuid
    assert first in str(err.value)
    with pytest.raises(Conflict):  # nor the teardown of another instance
        agent.actions.destroy(instance_id(), node, epoch)
    held.release(node, DEPLOY_STEPS[0])
    assert agent.actions.wait_idle(LONG)
    assert [b["instance_uuid"] for b in agent.conductor.builds] == [first]


def test_a_long_deploy_the_back_end_moves_on_is_reported_as_progress(
    agent: Agent, hold: Callable[..., Hold]
) -> None:
    """A heartbeat for the conductor's sweeper: a deploy that has run
    PROGRESS_EVERY seconds is due once per PROGRESS_EVERY while the back end
    moves it on to new steps; short and finished deploys are never due.
    (The deploy waits at each step for the test; the times are the test's.)"""
    node = agent.nodes[0]
    epoch = agent.epoch(node)
    held = hold(agent)
    agent.actions.build(instance_id(), node, epoch)
    held.wait_at(node, DEPLOY_STEPS[0])
    now = time.monotonic()
    assert agent.actions.take_progress(now) == {}  # a deploy this young costs nothing
    later = now + PROGRESS_EVERY
    assert agent.actions.take_progress(later) == {node.uuid: epoch}
    assert agent.actions.take_progress(later) == {}  # said: not again so soon
    # Not moved on since: nothing to say, however long it waits.
    assert agent.actions.take_progress(later + PROGRESS_EVERY) == {}
    held.release(node, DEPLOY_STEPS[0])
    held.wait_at(node, DEPLOY_STEPS[1])  # the back end moves on
    assert agent.actions.take_progress(later + PROGRESS_EVERY) == {node.uuid: epoch}
    held.release_all()
    wait_for(lambda: len(agent.conductor.builds) == 1)
    assert agent.actions.wait_idle(LONG)
    assert agent.actions.take_progress(later + 10 * PROGRESS_EVERY) == {}  # over


def test_progress_is_due_at_the_pace_the_caller_asks(
    agent: Agent, hold: Callable[..., Hold]
) -> None:
    """The agent passes its report_interval: with a build_timeout of 10 s a
    heartbeat every 30 s came too late for a deploy moving every 4 s."""
    node = agent.nodes[0]
    epoch = agent.epoch(node)
    held = hold(agent)
    agent.actions.build(instance_id(), node, epoch)
    held.wait_at(node, DEPLOY_STEPS[0])
    now = time.monotonic()
    assert agent.actions.take_progress(now + 1.0, every=2.0) == {}
    assert agent.actions.take_progress(now + 2.0, every=2.0) == {node.uuid: epoch}
    assert agent.actions.take_progress(now + 3.0, every=2.0) == {}
    held.release(node, DEPLOY_STEPS[0])
    held.wait_at(node, DEPLOY_STEPS[1])
    assert agent.actions.take_progress(now + 4.0, every=2.0) == {node.uuid: epoch}
    held.release_all()
    assert agent.actions.wait_idle(LONG)


def test_a_delete_of_a_deploying_instance_stops_the_deploy_and_tears_down(
    tmp_path: Path, hold: Callable[..., Hold]
) -> None:
    """A delete never waits for a deploy that may hang: the deploy stops at
    its next step, the node is torn down, and only the teardown is reported."""
    agent = make_agent(tmp_path)
    node = agent.nodes[0]
    epoch = agent.epoch(node)
    instance = instance_id()
    held = hold(agent, steps=DEPLOY_STEPS[:1])
    agent.actions.build(instance, node, epoch)
    held.wait_at(node, DEPLOY_STEPS[0])
    assert agent.actions.destroy(instance, node, epoch) == "accepted"
    assert agent.actions.destroy(instance, node, epoch) == "in-progress"
    held.release(node, DEPLOY_STEPS[0])
    wait_for(lambda: len(agent.conductor.destroys) == 1)
    assert agent.actions.wait_idle(LONG)
    [destroyed] = agent.conductor.destroys
    assert (destroyed["instance_uuid"], destroyed["success"]) == (instance, True)
    assert agent.conductor.builds == []  # the build's outcome is the delete's
    assert ("deploy_done", None) not in agent.log_of(node)
    state = agent.driver.node_state(node.uuid)
    assert state is not None and state.provision_state is ProvisionState.AVAILABLE
    assert state.instance_uuid is None
    assert agent.ownership.pinned() == set()
    assert agent.actions.busy_nodes() == set()


@pytest.mark.parametrize("delta", [1, -1])
def test_a_stale_epoch_is_refused_and_nothing_is_done(agent: Agent, delta: int) -> None:
    node = agent.nodes[0]
    epoch = agent.epoch(node)
    with pytest.raises(NotOwner) as err:
        agent.actions.build(instance_id(), node, epoch + delta)
    assert (err.value.owner, err.value.epoch) == (HOST, epoch)
    with pytest.raises(NotOwner):
        agent.actions.destroy(instance_id(), node, epoch + delta)
    with pytest.raises(NotOwner):
        agent.actions.set_power(node, epoch + delta, "power on")
    with pytest.raises(NotOwner):  # an instance's soft reboot routed at a stale epoch
        agent.actions.set_power(node, epoch + delta, "soft reboot")
    with pytest.raises(NotOwner):
        agent.actions.rebuild(instance_id(), node, epoch + delta)
    stranger = Node(uuid=str(uuidlib.uuid4()), name="x", resource_class="baremetal")
    with pytest.raises(NotOwner) as unknown:
        agent.actions.build(instance_id(), stranger, 1)
    assert unknown.value.owner is None
    assert agent.actions.wait_idle(1.0)
    assert agent.log() == [] and agent.actions.in_flight() == 0
    assert agent.conductor.builds == [] and agent.conductor.destroys == []


def test_a_brief_suspension_is_ridden_out(tmp_path: Path, hold: Callable[..., Hold]) -> None:
    """SUSPENDED (a heartbeat hiccup) pauses a deployment; it goes on once
    CONNECTED again, rather than abandon the build."""
    # The suspension lasts as long as the test makes it: not long enough
    # to give up, however slowly this thread runs.
    agent = make_agent(tmp_path, suspend_wait=LONG)
    node = agent.nodes[0]
    instance = instance_id()
    held = hold(agent, steps=("deploying image",))
    assert agent.actions.build(instance, node, agent.epoch(node)) == "accepted"
    held.wait_at(node, "deploying image")
    agent.membership.state = State.SUSPENDED
    held.release(node, "deploying image")
    # The next step is due: it asks, is refused, and asks again (it waits,
    # neither runs nor gives up).
    for _ in range(2):
        assert agent.membership.refused.wait(LONG)
        agent.membership.refused.clear()
    steps = agent.log_of(node)
    assert ("deploy_step", "deploying image") in steps
    assert ("deploy_step", "writing config drive") not in steps
    agent.membership.state = State.CONNECTED
    assert agent.actions.wait_idle(LONG)
    assert ("deploy_done", None) in agent.log_of(node)
    assert [b["success"] for b in agent.conductor.builds] == [True]


def test_nothing_is_accepted_unless_connected(agent: Agent) -> None:
    node = agent.nodes[0]
    agent.membership.state = State.SUSPENDED
    with pytest.raises(NotOwner):
        agent.actions.build(instance_id(), node, agent.epoch(node))
    assert agent.log() == []


def _lose_the_node(agent: Agent, node: Node) -> None:
    agent.ownership.forget([node.uuid])


def _lose_membership(agent: Agent, node: Node) -> None:
    agent.membership.state = State.LOST


@pytest.mark.parametrize(
    "lose", [_lose_the_node, _lose_membership], ids=["taken-over", "membership-lost"]
)
def test_a_deploy_whose_node_is_lost_stops_at_the_next_step(
    tmp_path: Path, lose: Callable[[Agent, Node], None], hold: Callable[..., Hold]
) -> None:
    agent = make_agent(tmp_path)
    node = agent.nodes[0]
    epoch = agent.epoch(node)
    held = hold(agent, steps=("deploying image",))
    assert agent.actions.build(instance_id(), node, epoch) == "accepted"
    held.wait_at(node, "deploying image")
    lose(agent, node)  # during that step
    held.release(node, "deploying image")
    assert agent.actions.wait_idle(LONG)
    assert agent.log_of(node) == [
        ("deploy_start", None),
        ("deploy_step", "power on"),
        ("deploy_step", "deploying image"),
    ]
    assert agent.conductor.builds == []  # the new owner deals with it
    assert agent.actions.busy_nodes() == set()
    assert node.uuid not in agent.ownership.pinned()
    state = agent.driver.node_state(node.uuid)
    assert state is not None and state.provision_state is ProvisionState.ERROR
    assert check_fencing(agent.log()) == []


def test_a_failed_deploy_is_cleaned_and_reported(tmp_path: Path) -> None:
    agent = make_agent(tmp_path, failure_rate=1.0)
    node = agent.nodes[0]
    epoch = agent.epoch(node)
    instance = instance_id()
    planned = agent.driver.planned_failure(node.uuid, instance)
    assert planned is not None
    assert agent.actions.build(instance, node, epoch) == "accepted"
    wait_for(lambda: len(agent.conductor.builds) == 1)
    [report] = agent.conductor.builds
    assert (report["success"], report["node_clean"], report["epoch"]) == (False, True, epoch)
    assert f"simulated failure during {planned!r}" in report["fault"]
    actions = [a for a, _ in agent.log_of(node)]
    assert actions[0] == "deploy_start"
    assert actions[-3:] == ["deploy_failed", "destroy", "destroy_done"]
    assert agent.ownership.pinned() == set()
    state = agent.driver.node_state(node.uuid)
    assert state is not None and state.provision_state is ProvisionState.AVAILABLE
    # Not remembered as done: a retry of that instance deploys again.
    assert agent.actions.wait_idle(LONG)
    assert agent.actions.build(instance, node, epoch) == "accepted"
    wait_for(lambda: len(agent.conductor.builds) == 2)


class CrashingDriver(SimulatedDriver):
    def deploy(self, ctx: Any, node: Node, progress: Any, spec: Any = None) -> None:
        raise RuntimeError("driver bug")


def test_a_driver_crash_is_cleaned_and_reported_as_a_failure(tmp_path: Path) -> None:
    agent = make_agent(tmp_path)
    crashing = CrashingDriver(
        make_conf(tmp_path, clean_duration=0, action_log=agent.log_path), HOST
    )
    actions = NodeActions(HOST, crashing, agent.ownership, DirectResults(agent.conductor))
    node = agent.nodes[0]
    actions.build(instance_id(), node, agent.epoch(node))
    wait_for(lambda: len(agent.conductor.builds) == 1)
    [report] = agent.conductor.builds
    assert report["success"] is False and report["node_clean"] is True
    assert "driver error: driver bug" in report["fault"]
    assert actions.wait_idle(LONG) and actions.in_flight() == 0


def test_a_failed_deploy_whose_cleaning_is_fenced_off_reports_a_dirty_node(
    tmp_path: Path, hold: Callable[..., Hold]
) -> None:
    agent = make_agent(tmp_path, failure_rate=1.0)
    node = agent.nodes[0]
    epoch = agent.epoch(node)
    # An instance whose deploy fails at the first step.
    instance = next(
        i
        for i in iter(instance_id, None)
        if agent.driver.planned_failure(node.uuid, i) == "power on"
    )
    held = hold(agent, steps=("power on",))
    agent.actions.build(instance, node, epoch)
    held.wait_at(node, "power on")
    agent.membership.state = State.SUSPENDED  # the step fails after this: no cleaning
    held.release(node, "power on")
    wait_for(lambda: len(agent.conductor.builds) == 1)
    [report] = agent.conductor.builds
    assert (report["success"], report["node_clean"]) == (False, False)
    assert [a for a, _ in agent.log_of(node)] == ["deploy_start", "deploy_step", "deploy_failed"]
    assert agent.actions.wait_idle(LONG)


# -- destroy ---------------------------------------------------------------------------


def test_destroy_tears_down_unpins_and_reports(agent: Agent) -> None:
    node = agent.nodes[0]
    epoch = agent.epoch(node)
    instance = instance_id()
    agent.actions.build(instance, node, epoch)
    wait_for(lambda: len(agent.conductor.builds) == 1)
    assert agent.actions.wait_idle(LONG)
    assert agent.ownership.pinned() == {node.uuid}

    assert agent.actions.destroy(instance, node, epoch) == "accepted"
    wait_for(lambda: len(agent.conductor.destroys) == 1)
    assert agent.conductor.destroys == [
        {
            "host": HOST,
            "instance_uuid": instance,
            "node_uuid": node.uuid,
            "epoch": epoch,
            "success": True,
            "fault": None,
        }
    ]
    assert agent.ownership.pinned() == set()
    assert agent.log_of(node)[-2:] == [("destroy", None), ("destroy_done", None)]
    state = agent.driver.node_state(node.uuid)
    assert state is not None and state.provision_state is ProvisionState.AVAILABLE
    assert state.instance_uuid is None and state.power_state is PowerState.OFF
    # The instance is no longer "done" here: a build of it deploys again.
    assert agent.actions.wait_idle(LONG)
    assert agent.actions.build(instance, node, epoch) == "accepted"
    wait_for(lambda: len(agent.conductor.builds) == 2)


def test_destroy_same_instance_again_is_in_progress(
    agent: Agent, hold: Callable[..., Hold]
) -> None:
    node = agent.nodes[0]
    epoch = agent.epoch(node)
    instance = instance_id()
    held = hold(agent, steps=(), destroys=True)
    assert agent.actions.destroy(instance, node, epoch) == "accepted"
    assert agent.actions.destroy(instance, node, epoch) == "in-progress"
    with pytest.raises(Conflict):
        agent.actions.build(instance_id(), node, epoch)
    held.release(node, "destroy")
    wait_for(lambda: len(agent.conductor.destroys) == 1)
    assert agent.actions.wait_idle(LONG)
    assert [a for a, _ in agent.log_of(node)] == ["destroy", "destroy_done"]


def test_destroy_with_the_membership_lost_meanwhile_reports_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = make_agent(tmp_path)
    node = agent.nodes[0]
    epoch = agent.epoch(node)
    # Accepted while connected; the background check fails once suspended.
    gate = threading.Event()
    original = agent.ownership.check

    def check(node_uuid: str, held: int) -> None:
        if threading.current_thread() is not threading.main_thread():
            gate.wait(LONG)
        original(node_uuid, held)

    monkeypatch.setattr(agent.ownership, "check", check)
    instance = instance_id()
    assert agent.actions.destroy(instance, node, epoch) == "accepted"
    agent.membership.state = State.LOST
    gate.set()
    wait_for(lambda: len(agent.conductor.destroys) == 1)
    [report] = agent.conductor.destroys
    assert report["success"] is False and "owned by" in report["fault"]
    assert agent.log_of(node) == []
    assert agent.actions.wait_idle(LONG) and agent.actions.in_flight() == 0


# -- power -----------------------------------------------------------------------------


def test_power_actions_are_fenced_and_logged(agent: Agent) -> None:
    node = agent.nodes[1]
    epoch = agent.epoch(node)
    assert agent.actions.set_power(node, epoch, "power on") is PowerState.ON
    assert agent.actions.set_power(node, epoch, "reboot") is PowerState.ON
    assert agent.actions.set_power(node, epoch, "power off") is PowerState.OFF
    assert agent.actions.set_power(node, epoch, "soft reboot") is PowerState.ON
    assert agent.actions.set_power(node, epoch, "soft power off") is PowerState.OFF
    assert [a for a, _ in agent.log_of(node)] == [
        "power_on",
        "reboot",
        "power_off",
        "soft_reboot",
        "soft_power_off",
    ]
    assert {a.epoch for a in agent.log()} == {epoch}


def test_a_rebuild_is_fenced_at_every_step_and_busy_nodes_refuse_it(agent: Agent) -> None:
    node = agent.nodes[2]
    epoch = agent.epoch(node)
    instance = instance_id()
    agent.actions.build(instance, node, epoch)
    assert agent.actions.wait_idle(LONG)
    assert agent.actions.rebuild(instance, node, epoch) == "active"
    assert [a for a, _ in agent.log_of(node)][-1] == "rebuild_done"
    assert agent.actions.in_flight() == 0
    # Another action on the node: the conductor retries (Conflict).
    with agent.actions._lock:
        agent.actions._in_flight[node.uuid] = ("power", "reboot")
    with pytest.raises(Conflict, match="busy"):
        agent.actions.rebuild(instance, node, epoch)
    agent.actions._finish(node.uuid)


# -- lifecycle -------------------------------------------------------------------------


def test_stop_accepting_refuses_new_builds(agent: Agent) -> None:
    node = agent.nodes[0]
    agent.actions.stop_accepting()
    with pytest.raises(Conflict) as err:
        agent.actions.build(instance_id(), node, agent.epoch(node))
    assert err.value.field == "host" and "stopping" in str(err.value)
    assert agent.log() == [] and agent.actions.in_flight() == 0


def test_wait_idle_waits_for_running_actions(agent: Agent, hold: Callable[..., Hold]) -> None:
    started = [instance_id() for _ in agent.nodes]
    held = hold(agent, steps=DEPLOY_STEPS[:1])
    for instance, node in zip(started, agent.nodes, strict=True):
        agent.actions.build(instance, node, agent.epoch(node))
    assert agent.actions.in_flight() == 3
    assert agent.actions.busy_nodes() == {n.uuid for n in agent.nodes}
    assert agent.actions.wait_idle(0.01) is False
    held.release_all()
    assert agent.actions.wait_idle(LONG) is True
    assert agent.actions.in_flight() == 0
    assert sorted(b["instance_uuid"] for b in agent.conductor.builds) == sorted(started)
    assert agent.ownership.pinned() == {n.uuid for n in agent.nodes}
    assert check_fencing(agent.log()) == []


def test_busy_nodes_are_not_released_by_reconcile(agent: Agent, hold: Callable[..., Hold]) -> None:
    node = agent.nodes[0]
    held = hold(agent, steps=DEPLOY_STEPS[:1])
    agent.actions.build(instance_id(), node, agent.epoch(node))
    # The agent no longer wants the node (it now serves another rack only,
    # another agent serves this one): it is busy, so kept.
    elsewhere = MembershipView(
        members={
            HOST: Member(HOST, 1, 1.0, {"groups": ["other-rack"]}),
            "agent-2": Member("agent-2", 1, 1.0, {}),
        },
        excluded={},
        ring_version=1,
    )
    result = agent.ownership.reconcile(elsewhere)
    assert result is not None and result.released == 2
    assert set(agent.ownership.held()) == {node.uuid}
    held.release_all()
    assert agent.actions.wait_idle(LONG)
    assert agent.conductor.builds[0]["success"] is True


def test_a_build_never_tears_down_another_instance_deployed_on_the_node(agent: Agent) -> None:
    node = agent.nodes[0]
    epoch = agent.epoch(node)
    hosted = instance_id()
    agent.actions.build(hosted, node, epoch)
    wait_for(lambda: len(agent.conductor.builds) == 1)
    assert agent.actions.wait_idle(LONG)
    with contextlib.suppress(Conflict):  # refusing at accept would be right too
        agent.actions.build(instance_id(), node, epoch)
    assert agent.actions.wait_idle(LONG)
    state = agent.driver.node_state(node.uuid)
    assert state is not None and state.instance_uuid == hosted
    assert ("destroy", None) not in agent.log_of(node)


# -- build_instances (the RPC endpoint, API 1.1) -----------------------------------------


def _endpoint(agent: Agent) -> ComputeEndpoint:
    return ComputeEndpoint(HOST, agent.actions, status=dict, drain=lambda: None)


def _item(instance: str, node: Node, epoch: int) -> dict[str, Any]:
    return {"instance_uuid": instance, "node": node.to_dict(), "epoch": epoch}


def test_build_instances_accepts_each_build_on_its_own(
    agent: Agent, hold: Callable[..., Hold]
) -> None:
    """A stale epoch, a node taken over and a busy node refuse their own items only."""
    fresh, stale, lost = agent.nodes
    held = hold(agent, steps=DEPLOY_STEPS[:1])  # busy until the replies are in
    first, second = instance_id(), instance_id()
    _lose_the_node(agent, lost)  # the conductor's claim predates a takeover
    reply = _endpoint(agent).build_instances(
        {},
        builds=[
            _item(first, fresh, agent.epoch(fresh)),
            _item(instance_id(), stale, agent.epoch(stale) - 1),
            _item(instance_id(), lost, 7),
            _item(second, fresh, agent.epoch(fresh)),  # another instance, same node
            _item(first, fresh, agent.epoch(fresh)),  # the first one again
        ],
    )
    results = reply["results"]
    assert results[0] == {"answer": "accepted"}
    assert results[1]["error"] == "NotOwner" and stale.uuid in results[1]["reason"]
    assert results[2]["error"] == "NotOwner" and lost.uuid in results[2]["reason"]
    assert results[3]["error"] == "Conflict" and "busy" in results[3]["reason"]
    assert results[4] == {"answer": "in-progress"}
    assert len(results) == 5
    held.release_all()
    assert agent.actions.wait_idle(LONG)
    # Only the accepted build ran, once, and only on its node.
    assert [(b["instance_uuid"], b["success"]) for b in agent.conductor.builds] == [(first, True)]
    assert {a.node for a in agent.log()} == {fresh.uuid}
    assert check_fencing(agent.log()) == []


def test_build_instances_is_idempotent_by_instance(agent: Agent) -> None:
    node = agent.nodes[0]
    instance = instance_id()
    endpoint = _endpoint(agent)
    batch = [_item(instance, node, agent.epoch(node))]
    assert endpoint.build_instances({}, builds=batch) == {"results": [{"answer": "accepted"}]}
    assert agent.actions.wait_idle(LONG)
    wait_for(lambda: len(agent.conductor.builds) == 1)
    # Sent again after it was deployed: not deployed again, the result is re-sent.
    assert endpoint.build_instances({}, builds=batch) == {"results": [{"answer": "done"}]}
    wait_for(lambda: len(agent.conductor.builds) == 2)
    assert agent.actions.wait_idle(LONG)
    assert [a.action for a in agent.log()].count("deploy_start") == 1


def test_build_instances_refuses_a_malformed_batch_whole(agent: Agent) -> None:
    node = agent.nodes[0]
    good = _item(instance_id(), node, agent.epoch(node))
    endpoint = _endpoint(agent)
    with pytest.raises(InvalidInput) as err:
        endpoint.build_instances(
            {},
            builds=[
                good,
                {**good, "instance_uuid": "nope", "epoch": -1},
                {**good, "extra": 1},
                "x",
                {"epoch": 1},
            ],
        )
    fields = [e.field for e in err.value.errors]
    assert fields == [
        "builds[1].instance_uuid",
        "builds[1].epoch",
        "builds[2].extra",
        "builds[3]",
        "builds[4].instance_uuid",
        "builds[4].node",
    ]
    for bad in ([], None, [good] * 1001):
        with pytest.raises(InvalidInput) as whole:
            endpoint.build_instances({}, builds=bad)
        assert [e.field for e in whole.value.errors] == ["builds"]
    assert agent.actions.wait_idle(1.0)
    assert agent.log() == [] and agent.actions.in_flight() == 0


# -- what the agent knows of a node comes from the back end, never from memory ----------


def _other_driver(tmp_path: Path, store: Path, host: str = "agent-b") -> SimulatedDriver:
    """A second agent process's driver on the same simulated hardware."""
    return SimulatedDriver(
        make_conf(tmp_path, node_store=store, step_duration=0.005, clean_duration=0.005), host
    )


def test_a_node_torn_down_by_another_agent_takes_a_new_build_at_once(tmp_path: Path) -> None:
    store = tmp_path / "nodes.sqlite"
    agent = make_agent(tmp_path, node_store=store)
    node = agent.nodes[0]
    epoch = agent.epoch(node)
    first = instance_id()
    assert agent.actions.build(first, node, epoch) == "accepted"
    wait_for(lambda: len(agent.conductor.builds) == 1)
    assert agent.actions.wait_idle(LONG)
    # Meanwhile (this agent partitioned away) another agent owned the node
    # and tore the instance down, on the same hardware.
    other = _other_driver(tmp_path, store)
    other.destroy(ActionContext(node.uuid, "agent-b", epoch + 1, first), node)
    # Back with this agent: a new build is accepted, not refused as if the
    # node still hosted the first instance.
    second = instance_id()
    assert agent.actions.build(second, node, epoch) == "accepted"
    wait_for(lambda: len(agent.conductor.builds) == 2)
    assert agent.conductor.builds[1]["success"] is True
    state = agent.driver.node_state(node.uuid)
    assert state is not None and state.instance_uuid == second


def test_a_node_hosting_another_instance_is_refused_for_good(tmp_path: Path) -> None:
    store = tmp_path / "nodes.sqlite"
    agent = make_agent(tmp_path, node_store=store)
    node = agent.nodes[0]
    hosted = instance_id()
    _other_driver(tmp_path, store).deploy(
        ActionContext(node.uuid, "agent-b", 1, hosted), node, lambda _step: None
    )
    with pytest.raises(NodeNotBuildable) as caught:
        agent.actions.build(instance_id(), node, agent.epoch(node))
    assert caught.value.field == "node_uuid" and hosted in str(caught.value)
    assert agent.actions.in_flight() == 0  # nothing left reserved
    assert agent.log_of(node) == []  # this agent touched nothing
    state = agent.driver.node_state(node.uuid)
    assert state is not None and state.instance_uuid == hosted


def test_a_restarted_agent_resumes_a_deploy_its_previous_process_left(tmp_path: Path) -> None:
    store = tmp_path / "nodes.sqlite"
    node = Node(uuid=str(uuidlib.uuid4()), name="n0", resource_class="baremetal")
    build = instance_id()

    def crash(step: str) -> None:
        if step == DEPLOY_STEPS[1]:
            raise SystemExit("killed")  # the process dies mid-deploy

    with contextlib.suppress(SystemExit):
        _other_driver(tmp_path, store, HOST).deploy(
            ActionContext(node.uuid, HOST, 3, build), node, crash
        )
    agent = make_agent(tmp_path, node_store=store)  # the new process, nothing in memory
    agent.conductor.epochs[node.uuid] = 3
    agent.ownership.refresh_inventory()
    agent.ownership.reconcile(
        MembershipView(members={HOST: Member(HOST, 1, 1.0, {})}, excluded={}, ring_version=1)
    )
    assert agent.actions.build(build, node, 3) == "accepted"
    wait_for(lambda: len(agent.conductor.builds) == 1)
    assert agent.conductor.builds[0]["success"] is True
    state = agent.driver.node_state(node.uuid)
    assert state is not None and state.provision_state is ProvisionState.ACTIVE
    # Asked again (its result was lost): done, nothing deployed twice.
    assert agent.actions.build(build, node, 3) == "done"
    assert agent.actions.wait_idle(LONG)
    assert [a for a, _s in agent.log_of(node)].count("deploy_done") == 1
