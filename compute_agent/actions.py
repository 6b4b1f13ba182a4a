# SPDX-License-Identifier: Apache-2.0
"""Node actions of the agent: deploy, destroy, power, rebuild — what each asks its driver.

Each runs in a node task (:mod:`compute_agent.node_task`), which fences it
(the epoch held, a CONNECTED membership), marks the node busy, re-checks the
fence before every provision step, handles the agent's stop and reports the
outcome: a deploy whose node was taken over (the agent was paused past its
TTL, say) stops at the next step instead of touching a node another agent
now owns.  What is left here is what each verb decides and asks its driver.

``build`` is idempotent by instance id: the conductor may retry an accept
that timed out, and the second call finds the first one running or done.
``set_power`` and ``rebuild``, which the conductor waits for, are done at
most once per request id (:mod:`compute_agent.request_log`) when it sends one.

Nothing about a node is remembered between actions but the work running
on it now: whether a node already hosts the instance, or another one, is
read from the back end (:meth:`ComputeDriver.inspect`) at every accept.
An agent that acquired the node a moment ago (a takeover, a re-home, its
own restart) therefore sees what the previous owner left, never a stale
copy of what it once did there itself.  (The record of request ids keeps
answers to repeat to the same caller, never what a node holds.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container
from typing import TypeVar

from compute_agent.drivers.base import (
    NO_DEPLOY_SPEC,
    BackendNode,
    ComputeDriver,
    DeploySpec,
    PowerTarget,
)
from compute_agent.node_task import (
    PROGRESS_EVERY,
    AlreadyRunning,
    NodeTask,
    NodeTasks,
    Purpose,
    ResultSink,
    TaskCancelled,
)
from compute_agent.ownership import OwnershipManager
from compute_agent.request_log import Request, RequestLog
from conductor.common.exception import (
    ActionAbandoned,
    NodeNotBuildable,
    NotOwner,
    RingfleetError,
    ServiceUnavailable,
)
from conductor.common.objects import Node, PowerState, ProvisionState

__all__ = ["PROGRESS_EVERY", "NodeActions"]

LOG = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Provision states of the back end no deploy starts from.
_NOT_BUILDABLE = frozenset({ProvisionState.ENROLL, ProvisionState.MANAGEABLE})


class NodeActions(NodeTasks):
    """Runs driver actions on owned nodes, each in a node task (:mod:`compute_agent.node_task`)."""

    def __init__(
        self,
        host: str,
        driver: ComputeDriver,
        ownership: OwnershipManager,
        results: ResultSink,
        *,
        suspend_wait: float = 10.0,
        requests: RequestLog | None = None,
    ) -> None:
        """``requests``: the record of ``set_power`` and ``rebuild`` by request id
        (a new :class:`RequestLog` with its default bounds if none)."""
        super().__init__(host, ownership, results, suspend_wait=suspend_wait)
        self._driver = driver
        self._pins = ownership  # the tasks fence with it; the verbs pin and unpin
        self._requests = requests if requests is not None else RequestLog()

    def stop_accepting(self) -> None:
        """The agent stops: no new action, and no more waiting on the back end.

        Deploys and teardowns the back end runs on its own are abandoned
        at their next wait (:meth:`ComputeDriver.stop_waiting`): they go on
        there, and the next process (or owner) resumes them from the record.
        """
        super().stop_accepting()
        self._driver.stop_waiting()

    def wait_idle(
        self, timeout: float, *, left: Callable[[], Container[int]] | None = None
    ) -> bool:
        """As :meth:`NodeTasks.wait_idle`; once stopping, an action inside a
        request to its back end is left there
        (:meth:`ComputeDriver.threads_left_waiting`): a hung back end does
        not hold the stop up."""
        return super().wait_idle(timeout, left=left or self._driver.threads_left_waiting)

    def left_waiting(self) -> int:
        """How many actions are left inside a request to the back end."""
        return len(self._driver.threads_left_waiting())

    # -- the verbs -----------------------------------------------------------------

    def build(
        self, instance_uuid: str, node: Node, epoch: int, spec: DeploySpec | None = None
    ) -> str:
        """Accept a build: ``"accepted"``, ``"in-progress"`` or ``"done"``.

        *spec* is what the conductor stored with the instance (image, config
        drive): it comes with every accept, so a deploy resumed by another
        owner or process gets it from the record, never from memory.

        :raises NotOwner: the epoch is not the one held (re-read and retry)
        :raises Conflict: the node is busy or the agent stopping (retry)
        :raises NodeNotBuildable: the back end shows the node hosting another
            instance, or not deployable (reschedule; retrying cannot help)
        """
        try:
            # Held while the back end is read: a second accept of the same
            # build answers "in-progress", another action waits.
            task = self.acquire(
                node.uuid,
                epoch,
                Purpose("deploy", instance_uuid),
                instance_uuid=instance_uuid,
                idempotent=True,
            )
        except AlreadyRunning as running:
            return running.answer
        deploy = (self._deploy, instance_uuid, node, epoch, spec or NO_DEPLOY_SPEC)
        with task:
            found = self._inspect(task, node)
            if found is None:
                task.spawn_after(*deploy)
                return "accepted"
            ours = found.instance_uuid == instance_uuid
            if ours and found.provision_state is ProvisionState.ACTIVE:
                # Deployed already (by us or a previous owner): the conductor
                # asks again because the result was lost.
                self._pins.pin(node.uuid)
                task.report_build(success=True, fault=None, clean=True)
                return "done"
            LOG.info(
                "Agent %s accepted instance %s on node %s (epoch %d%s)",
                self._host,
                instance_uuid,
                node.uuid,
                epoch,
                f"; resuming from {found.provision_state.value}" if ours else "",
            )
            task.spawn_after(*deploy)
        return "accepted"

    def _inspect(self, task: NodeTask, node: Node) -> BackendNode | None:
        """What the back end shows of the node to build on; None when it is down.

        :raises NodeNotBuildable: it hosts another instance, or is not deployable
        """
        try:
            found = self._driver.inspect(task.ctx, node)
        except ServiceUnavailable as exc:
            # The back end is down (logged once by its client): accept, and
            # let the deploy wait for it and decide from what it then shows
            # (it refuses a node that hosts something else, as here).  A
            # refusal would have the conductor retry every few seconds.
            LOG.debug(
                "Instance %s on node %s: accepted while %s", task.ctx.instance_uuid, node.uuid, exc
            )
            return None
        if found.instance_uuid not in (None, task.ctx.instance_uuid):
            raise NodeNotBuildable(
                field="node_uuid",
                value=node.uuid,
                reason=(
                    f"node hosts instance {found.instance_uuid} "
                    f"({found.provision_state.value}); destroy it first"
                ),
            )
        if found.provision_state in _NOT_BUILDABLE:
            raise NodeNotBuildable(
                field="node_uuid",
                value=node.uuid,
                reason=f"node is {found.provision_state.value}, not deployable",
            )
        return found

    def destroy(self, instance_uuid: str, node: Node, epoch: int) -> str:
        """Accept a teardown: ``"accepted"`` or ``"in-progress"``.

        The instance deleted while it deploys: the deploy stops at its next
        step and tears the node down itself, so a delete never waits for a
        deploy that hangs.

        :raises NotOwner: the epoch is not the one held
        :raises Conflict: another action runs on the node (tear down only once
            it ends: the conductor retries), or the agent is stopping
        """
        try:
            task = self.acquire(
                node.uuid,
                epoch,
                Purpose("destroy", instance_uuid),
                instance_uuid=instance_uuid,
                idempotent=True,
                takes_over=Purpose("deploy", instance_uuid),
            )
        except AlreadyRunning as running:
            if running.took_over:
                LOG.info(
                    "Agent %s: instance %s deleted while it deploys on node %s; "
                    "stopping the deploy and tearing down",
                    self._host,
                    instance_uuid,
                    node.uuid,
                )
            return running.answer
        with task:
            task.spawn_after(self._destroy, instance_uuid, node, epoch)
        return "accepted"

    def set_power(
        self, node: Node, epoch: int, target: PowerTarget, request_id: str | None = None
    ) -> PowerState:
        """Power *node* and wait (an instance's reboot/stop/start, an operator's verb).

        With a *request_id*, at most once for it (see :meth:`_once`).

        :raises NotOwner: the epoch is not the one held: nothing is done
        :raises Conflict: another action runs on the node, or the agent is
            stopping (the conductor retries, with the next owner if need be)
        :raises InvalidInput: *request_id* was sent for another request
        """

        def power() -> PowerState:
            with self.acquire(node.uuid, epoch, Purpose("power", target)) as task:
                state = self._driver.set_power(task.ctx, node, target)
            return state

        return self._once(request_id, Request("power", node.uuid, target), epoch, power)

    def _once(
        self, request_id: str | None, request: Request, epoch: int, verb: Callable[[], _T]
    ) -> _T:
        """``verb()``, at most once per *request_id* (none given: every call runs).

        The fence comes first: a repeat at an epoch the agent no longer holds
        (the node was taken over since the first call) is ``NotOwner``, so the
        conductor re-reads the owner, never an answer from before the takeover.
        """
        if request_id is None:
            return verb()
        self._pins.check(request.node_uuid, epoch)
        return self._requests.run(request_id, request, verb)

    def rebuild(
        self,
        instance_uuid: str,
        node: Node,
        epoch: int,
        spec: DeploySpec = NO_DEPLOY_SPEC,
        request_id: str | None = None,
    ) -> str:
        """Re-image *node* in place for the instance it hosts, and wait: ``"active"``.

        *spec*: the image and config drive to deploy (the conductor's record);
        none given, the back end redeploys what its last deploy left.

        Fenced as a deploy: the epoch is checked first and again before every
        step (a SUSPENDED membership waited out), so a rebuild whose node was
        taken over stops at its next step; the new owner does it again when
        the conductor routes it there.

        With a *request_id*, at most once for it (see :meth:`_once`).

        :raises NotOwner: the epoch is not (or no longer) the one held
        :raises Conflict: another action runs on the node, or the agent is stopping
        :raises NodeNotBuildable: the back end shows the node hosting another instance
        :raises DriverError: the rebuild failed
        :raises InvalidInput: *request_id* was sent for another request
        """

        def rebuild() -> str:
            purpose = Purpose("rebuild", instance_uuid)
            with self.acquire(node.uuid, epoch, purpose, instance_uuid=instance_uuid) as task:
                self._driver.rebuild(task.ctx, node, task.progress, spec)
            LOG.info(
                "Agent %s rebuilt instance %s on node %s (epoch %d)",
                self._host,
                instance_uuid,
                node.uuid,
                epoch,
            )
            return "active"

        return self._once(request_id, Request("rebuild", node.uuid, instance_uuid), epoch, rebuild)

    # -- background work -----------------------------------------------------------

    def _deploy(
        self, instance_uuid: str, node: Node, epoch: int, spec: DeploySpec = NO_DEPLOY_SPEC
    ) -> None:
        purpose = Purpose("deploy", instance_uuid)
        with self.resume(node.uuid, epoch, purpose, instance_uuid=instance_uuid) as task:
            success, fault, clean = self._deploy_or_clean(task, node, spec)
            task.report_build(success=success, fault=fault, clean=clean)
        if task.superseded:
            # Deleted meanwhile: the teardown's result is the one awaited.
            self._destroy(instance_uuid, node, epoch)

    def _deploy_or_clean(
        self, task: NodeTask, node: Node, spec: DeploySpec
    ) -> tuple[bool, str | None, bool]:
        """Deploy; after a failure, tear the node down.  (success, fault, node clean).

        :raises NotOwner: the deploy lost the node (nothing more is done)
        :raises ActionAbandoned: the agent stops (nothing is reported)
        :raises TaskCancelled: the instance is being deleted
        """
        ctx = task.ctx
        try:
            self._driver.deploy(ctx, node, task.progress, spec)
        except (NotOwner, ActionAbandoned, TaskCancelled):
            raise
        except RingfleetError as exc:
            # Refused (the node hosts something else, or cannot deploy), or
            # failed before the first step on a node the back end does not
            # show hosting this instance: touching it would destroy what is
            # there.  (A deploy resumed after a restart can fail at its
            # first read: Ironic shows it failed, and it is ours to clean.)
            refused = isinstance(exc, NodeNotBuildable) or (
                not task.steps and not self._backend_hosts(task, node)
            )
            return False, str(exc), False if refused else self._clean_after_failure(task, node)
        except Exception as exc:  # a driver bug must not kill the agent
            LOG.exception("Instance %s on node %s: driver crashed", ctx.instance_uuid, node.uuid)
            return False, f"driver error: {exc}", self._clean_after_failure(task, node)
        self._pins.pin(node.uuid)
        return True, None, True

    def _backend_hosts(self, task: NodeTask, node: Node) -> bool:
        """Whether the back end shows *node* hosting the task's instance now."""
        try:
            return self._driver.inspect(task.ctx, node).instance_uuid == task.ctx.instance_uuid
        except Exception as exc:  # cannot tell: leave the node as it is
            LOG.debug("Node %s: back end not read after a failure: %s", node.uuid, exc)
            return False

    def _clean_after_failure(self, task: NodeTask, node: Node) -> bool:
        """Tear down after a failed deploy; whether the node is clean.

        :raises ActionAbandoned: the agent stops: the failed deploy is found
            again, and cleaned, when the build is resumed
        """
        try:
            task.check()
            self._driver.destroy(task.ctx, node)
            return True
        except ActionAbandoned:
            raise
        except Exception as exc:
            LOG.warning(
                "Node %s could not be cleaned after a failed deploy of instance %s: %s",
                node.uuid,
                task.ctx.instance_uuid,
                exc,
            )
            return False

    def _destroy(self, instance_uuid: str, node: Node, epoch: int) -> None:
        purpose = Purpose("destroy", instance_uuid)
        with self.resume(node.uuid, epoch, purpose, instance_uuid=instance_uuid) as task:
            try:
                task.check()
                self._driver.destroy(task.ctx, node)
                self._pins.unpin(node.uuid)
            except ActionAbandoned:
                raise  # our next process resumes it (the conductor routes it again)
            except Exception as exc:
                LOG.warning(
                    "Instance %s: destroy on node %s failed: %s", instance_uuid, node.uuid, exc
                )
                task.report_destroy(success=False, fault=str(exc))
            else:
                task.report_destroy(success=True, fault=None)
