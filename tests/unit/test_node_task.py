# SPDX-License-Identifier: Apache-2.0
"""The agent's node task (compute_agent.node_task): fence, busy mark, stop, results."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from compute_agent.node_task import AlreadyRunning, NodeTasks, Purpose, TaskCancelled
from conductor.common.exception import ActionAbandoned, Conflict, NotOwner

HOST = "agent-1"
NODE = "7c1b2a4e-0000-4000-8000-000000000001"
INSTANCE = "9f0e8d7c-0000-4000-8000-000000000002"
EPOCH = 4
DEPLOY = Purpose("deploy", INSTANCE)
DESTROY = Purpose("destroy", INSTANCE)
REBOOT = Purpose("power", "reboot")


class Fence:
    """Holds NODE at EPOCH until told otherwise; counts the checks."""

    def __init__(self) -> None:
        self.held: dict[str, int] = {NODE: EPOCH}
        self.checks = 0

    def check(self, node_uuid: str, epoch: int) -> None:
        self.checks += 1
        if self.held.get(node_uuid) != epoch:
            raise NotOwner(node_uuid, None, -1)

    def wait_can_act(self, node_uuid: str, epoch: int, timeout: float) -> None:
        self.check(node_uuid, epoch)


class Results:
    """The results sink; notes whether the node was still busy at each report."""

    def __init__(self) -> None:
        self.tasks: NodeTasks | None = None
        self.builds: list[dict[str, Any]] = []
        self.destroys: list[dict[str, Any]] = []
        self.busy_at_report: list[bool] = []

    def _busy(self, result: dict[str, Any]) -> None:
        assert self.tasks is not None
        self.busy_at_report.append(result["node_uuid"] in self.tasks.busy_nodes())

    def report(self, result: dict[str, Any]) -> None:
        self._busy(result)
        self.builds.append(result)

    def report_destroy(self, result: dict[str, Any]) -> None:
        self._busy(result)
        self.destroys.append(result)


@pytest.fixture
def fence() -> Fence:
    return Fence()


@pytest.fixture
def results() -> Results:
    return Results()


@pytest.fixture
def tasks(fence: Fence, results: Results) -> NodeTasks:
    made = NodeTasks(HOST, fence, results, suspend_wait=0.0)
    results.tasks = made
    return made


# -- acquiring -------------------------------------------------------------------------


def test_a_task_is_fenced_and_marks_its_node_busy_until_it_ends(
    tasks: NodeTasks, fence: Fence
) -> None:
    with tasks.acquire(NODE, EPOCH, DEPLOY, instance_uuid=INSTANCE) as task:
        assert fence.checks == 1
        assert tasks.busy_nodes() == {NODE} and tasks.in_flight() == 1
        assert (task.ctx.node_uuid, task.ctx.host, task.ctx.epoch) == (NODE, HOST, EPOCH)
        assert task.ctx.instance_uuid == INSTANCE
    assert tasks.busy_nodes() == set()


def test_a_refused_fence_raises_not_owner_and_nothing_runs(tasks: NodeTasks, fence: Fence) -> None:
    ran = []
    with pytest.raises(NotOwner), tasks.acquire(NODE, EPOCH + 1, REBOOT):
        ran.append("body")
    fence.held.clear()  # the node taken over
    with pytest.raises(NotOwner), tasks.acquire(NODE, EPOCH, REBOOT):
        ran.append("body")
    assert ran == [] and tasks.busy_nodes() == set()


def test_a_busy_node_refuses_another_task_with_conflict(tasks: NodeTasks) -> None:
    with tasks.acquire(NODE, EPOCH, REBOOT):
        with pytest.raises(Conflict) as err:
            tasks.acquire(NODE, EPOCH, DEPLOY, idempotent=True)
        assert err.value.field == "node_uuid"
        assert "node is busy with power of reboot; retry" in str(err.value)
        # The same purpose again, not idempotent (a verb that waits): busy too.
        with pytest.raises(Conflict, match="busy"):
            tasks.acquire(NODE, EPOCH, REBOOT)
        assert tasks.busy_nodes() == {NODE}  # the running task keeps its mark
    assert tasks.busy_nodes() == set()


def test_an_idempotent_repeat_is_answered_in_progress(tasks: NodeTasks) -> None:
    with tasks.acquire(NODE, EPOCH, DEPLOY, idempotent=True):
        with pytest.raises(AlreadyRunning) as running:
            tasks.acquire(NODE, EPOCH, DEPLOY, idempotent=True)
        assert running.value.answer == "in-progress" and not running.value.took_over


def test_a_stopping_agent_refuses_every_new_task(tasks: NodeTasks, fence: Fence) -> None:
    tasks.stop_accepting()
    with pytest.raises(Conflict) as err:
        tasks.acquire(NODE, EPOCH, DEPLOY)
    assert err.value.field == "host" and err.value.value == HOST
    assert "agent is stopping" in str(err.value)
    assert tasks.busy_nodes() == set()
    # The fence first, as before: a stale epoch is told so, stopping or not.
    with pytest.raises(NotOwner):
        tasks.acquire(NODE, EPOCH + 1, DEPLOY)


# -- releasing -------------------------------------------------------------------------


@pytest.mark.parametrize("background", [False, True])
def test_an_exception_in_the_driver_releases_the_node_and_is_raised(
    tasks: NodeTasks, results: Results, background: bool
) -> None:
    start = tasks.resume if background else tasks.acquire
    task = start(NODE, EPOCH, DESTROY, instance_uuid=INSTANCE)
    with pytest.raises(RuntimeError, match="driver bug"), task:
        raise RuntimeError("driver bug")
    assert tasks.busy_nodes() == set()
    assert results.destroys == []


@pytest.mark.parametrize("exc", [NotOwner(NODE, "agent-2", 5), ActionAbandoned(NODE, "deploy")])
def test_a_verb_that_waits_sees_the_fence_lost_or_the_stop(
    tasks: NodeTasks, exc: Exception
) -> None:
    task = tasks.acquire(NODE, EPOCH, Purpose("rebuild", INSTANCE), instance_uuid=INSTANCE)
    with pytest.raises(type(exc)), task:
        raise exc
    assert tasks.busy_nodes() == set()


@pytest.mark.parametrize("exc", [NotOwner(NODE, "agent-2", 5), ActionAbandoned(NODE, "deploy")])
def test_background_work_lost_or_stopped_is_abandoned_and_nothing_reported(
    tasks: NodeTasks, results: Results, exc: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="compute_agent.node_task")
    with tasks.resume(NODE, EPOCH, DEPLOY, instance_uuid=INSTANCE) as task:
        task.report_build(success=True, fault=None, clean=True)
        raise exc
    assert tasks.busy_nodes() == set()
    assert results.builds == [] and not task.superseded
    assert f"Instance {INSTANCE} on node {NODE} abandoned" in caplog.text


# -- results ---------------------------------------------------------------------------


def test_a_result_is_reported_once_after_the_node_is_released(
    tasks: NodeTasks, results: Results
) -> None:
    with tasks.resume(NODE, EPOCH, DEPLOY, instance_uuid=INSTANCE) as task:
        task.report_build(success=True, fault=None, clean=True)
        assert results.builds == []  # not before the task ends
        with pytest.raises(RuntimeError, match="reported twice"):
            task.report_build(success=False, fault="again", clean=False)
    assert results.builds == [
        {
            "instance_uuid": INSTANCE,
            "node_uuid": NODE,
            "epoch": EPOCH,
            "success": True,
            "fault": None,
            "node_clean": True,
        }
    ]
    assert results.busy_at_report == [False]


def test_a_failure_is_reported_once_too(tasks: NodeTasks, results: Results) -> None:
    with tasks.resume(NODE, EPOCH, DESTROY, instance_uuid=INSTANCE) as task:
        task.report_destroy(success=False, fault="cleaning failed")
    assert results.destroys == [
        {
            "instance_uuid": INSTANCE,
            "node_uuid": NODE,
            "epoch": EPOCH,
            "success": False,
            "fault": "cleaning failed",
        }
    ]
    assert results.builds == [] and results.busy_at_report == [False]


# -- progress and taking over ----------------------------------------------------------


def test_progress_fences_every_step_and_keeps_each_once(tasks: NodeTasks, fence: Fence) -> None:
    with tasks.resume(NODE, EPOCH, DEPLOY, instance_uuid=INSTANCE) as task:
        for step in ("deploying", "deploying", "wait call-back", "active"):
            task.progress(step)
        assert task.steps == ["deploying", "wait call-back", "active"]
        assert fence.checks == 4
        assert tasks.take_progress(every=0.0) == {NODE: EPOCH}  # a deploy's heartbeat
        fence.held[NODE] = EPOCH + 1  # taken over
        with pytest.raises(NotOwner):
            task.progress("deploy again")
    assert tasks.take_progress(every=0.0) == {}


def test_only_a_deploys_steps_are_heartbeats(tasks: NodeTasks) -> None:
    with tasks.acquire(NODE, EPOCH, Purpose("rebuild", INSTANCE), instance_uuid=INSTANCE) as task:
        task.progress("rebuilding")
        assert tasks.take_progress(every=0.0) == {}


def test_a_task_taking_over_stops_the_running_one_at_its_next_step(
    tasks: NodeTasks, results: Results
) -> None:
    with tasks.resume(NODE, EPOCH, DEPLOY, instance_uuid=INSTANCE) as task:
        task.progress("deploying")
        with pytest.raises(AlreadyRunning) as first:
            tasks.acquire(NODE, EPOCH, DESTROY, idempotent=True, takes_over=DEPLOY)
        assert (first.value.answer, first.value.took_over) == ("accepted", True)
        with pytest.raises(AlreadyRunning) as again:
            tasks.acquire(NODE, EPOCH, DESTROY, idempotent=True, takes_over=DEPLOY)
        assert (again.value.answer, again.value.took_over) == ("in-progress", False)
        with pytest.raises(TaskCancelled):
            task.progress("wait call-back")
        raise TaskCancelled(NODE, DEPLOY)  # as a driver re-raises it
    assert task.superseded
    assert tasks.busy_nodes() == {NODE}  # kept for the teardown
    # The teardown resumes the mark, and ends it.
    with tasks.resume(NODE, EPOCH, DESTROY, instance_uuid=INSTANCE) as teardown:
        teardown.report_destroy(success=True, fault=None)
    assert tasks.busy_nodes() == set() and len(results.destroys) == 1


def test_a_deploy_taken_over_as_it_ends_reports_nothing(tasks: NodeTasks, results: Results) -> None:
    with tasks.resume(NODE, EPOCH, DEPLOY, instance_uuid=INSTANCE) as task:
        with pytest.raises(AlreadyRunning):
            tasks.acquire(NODE, EPOCH, DESTROY, takes_over=DEPLOY)
        task.report_build(success=True, fault=None, clean=True)
    assert task.superseded and results.builds == []
    assert tasks.busy_nodes() == {NODE}


# -- background work -------------------------------------------------------------------


def test_spawned_work_keeps_the_node_busy_until_it_ends(tasks: NodeTasks, results: Results) -> None:
    go = threading.Event()

    def work() -> None:
        with tasks.resume(NODE, EPOCH, DESTROY, instance_uuid=INSTANCE) as task:
            go.wait(10)
            task.report_destroy(success=True, fault=None)

    with tasks.acquire(NODE, EPOCH, DESTROY, instance_uuid=INSTANCE) as task:
        task.spawn_after(work)
    assert tasks.busy_nodes() == {NODE}
    go.set()
    assert tasks.wait_idle(10)
    assert tasks.busy_nodes() == set() and len(results.destroys) == 1


def test_nothing_is_spawned_when_the_accept_fails(tasks: NodeTasks) -> None:
    ran = []
    with pytest.raises(Conflict), tasks.acquire(NODE, EPOCH, DEPLOY) as task:
        task.spawn_after(lambda: ran.append("spawned"))
        raise Conflict(field="node_uuid", value=NODE, reason="refused")
    assert tasks.wait_idle(10)
    assert ran == [] and tasks.busy_nodes() == set()
