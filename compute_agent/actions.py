# SPDX-License-Identifier: Apache-2.0
"""Node actions of the agent: deploy, destroy, power — fenced and in the background.

Every action starts with :meth:`OwnershipManager.check` (the epoch held, a
CONNECTED membership) and every provision step re-checks it, so a deploy
whose node was taken over (the agent was paused past its TTL, say) stops at
the next step instead of touching a node another agent now owns.

``build`` is idempotent by instance id: the conductor may retry an accept
that timed out, and the second call finds the first one running or done.

Nothing about a node is remembered between actions but the work running
on it now: whether a node already hosts the instance, or another one, is
read from the back end (:meth:`ComputeDriver.inspect`) at every accept.
An agent that acquired the node a moment ago (a takeover, a re-home, its
own restart) therefore sees what the previous owner left, never a stale
copy of what it once did there itself.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any, Protocol

from compute_agent.drivers.base import (
    NO_DEPLOY_SPEC,
    ActionContext,
    ComputeDriver,
    DeploySpec,
    PowerTarget,
    ProgressCallback,
)
from compute_agent.ownership import OwnershipManager
from conductor.common.exception import (
    ActionAbandoned,
    Conflict,
    NodeNotBuildable,
    NotOwner,
    RingfleetError,
    ServiceUnavailable,
)
from conductor.common.objects import Node, PowerState, ProvisionState

__all__ = ["PROGRESS_EVERY", "NodeActions"]

LOG = logging.getLogger(__name__)

#: Seconds a deploy runs before the agent reports the back end's progress
#: on it, and between two such reports, unless the caller of
#: NodeActions.take_progress says otherwise (the agent passes its
#: ``report_interval``, whose default this is).
PROGRESS_EVERY = 30.0

#: Provision states of the back end no deploy starts from.
_NOT_BUILDABLE = frozenset({ProvisionState.ENROLL, ProvisionState.MANAGEABLE})


class ResultSink(Protocol):
    """Where build and teardown outcomes go (:class:`compute_agent.reporting.ResultReporter`).

    One way only: the reporter keeps a result until the conductor takes it,
    so no outcome depends on the sweeper.
    """

    def report(self, result: dict[str, Any]) -> None: ...

    def report_destroy(self, result: dict[str, Any]) -> None: ...


class NodeActions:
    """Runs driver actions on owned nodes and reports their outcome."""

    def __init__(
        self,
        host: str,
        driver: ComputeDriver,
        ownership: OwnershipManager,
        results: ResultSink,
        *,
        suspend_wait: float = 10.0,
    ) -> None:
        self._suspend_wait = suspend_wait
        self._results = results
        self._host = host
        self._driver = driver
        self._ownership = ownership
        self._lock = threading.Lock()
        self._in_flight: dict[str, tuple[str, str]] = {}  # node -> (action, instance)
        # Deploys a delete of their own instance arrived for: they stop at
        # their next step and tear the node down instead.
        self._cancelled: set[str] = set()
        # node -> the back end's progress on its deploy: see take_progress.
        self._progress: dict[str, _Progress] = {}
        self._threads: set[threading.Thread] = set()
        self._accepting = True

    def busy_nodes(self) -> set[str]:
        with self._lock:
            return set(self._in_flight)

    def in_flight(self) -> int:
        with self._lock:
            return len(self._in_flight)

    def take_progress(
        self, now: float | None = None, every: float = PROGRESS_EVERY
    ) -> dict[str, int]:
        """Deploys the back end moved on that are due a heartbeat: node -> epoch.

        A deploy is reported once it has run *every* seconds, then at most
        every *every* seconds while the back end moves it on (a new
        provision step): the conductor's ``build_timeout`` then counts from
        the back end's progress, and deploys shorter than *every* cost
        nothing.
        """
        now = time.monotonic() if now is None else now
        due: dict[str, int] = {}
        with self._lock:
            for node_uuid, seen in self._progress.items():
                if (
                    seen.moved > seen.reported
                    and now - seen.started >= every
                    and now - seen.told_at >= every
                ):
                    due[node_uuid] = seen.epoch
                    seen.reported, seen.told_at = seen.moved, now
        return due

    def _moved_on(self, node_uuid: str, epoch: int) -> None:
        """The back end moved the deploy on *node_uuid* to a new step."""
        now = time.monotonic()
        with self._lock:
            seen = self._progress.setdefault(node_uuid, _Progress(epoch, started=now))
            seen.moved = now

    def stop_accepting(self) -> None:
        """The agent stops: no new action, and no more waiting on the back end.

        Deploys and teardowns the back end runs on its own are abandoned
        at their next wait (:meth:`ComputeDriver.stop_waiting`): they go on
        there, and the next process (or owner) resumes them from the record.
        """
        with self._lock:
            self._accepting = False
        self._driver.stop_waiting()

    def wait_idle(self, timeout: float) -> bool:
        """Wait up to *timeout* s in all for running actions; False if some still run."""
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in threads)

    # -- accept ----------------------------------------------------------------

    def _check_accepting(self) -> None:
        """Under the lock: refuse while stopping or draining.  The nodes are
        about to move; the conductor retries with whoever owns them next."""
        if not self._accepting:
            raise Conflict(field="host", value=self._host, reason="agent is stopping")

    def _occupy(self, node_uuid: str, action: tuple[str, str]) -> None:
        """Mark the node busy with *action* (kind, subject), or refuse: one
        action at a time per node, the conductor retries the others."""
        with self._lock:
            self._check_accepting()
            running = self._in_flight.get(node_uuid)
            if running is not None:
                raise _busy(node_uuid, running)
            self._in_flight[node_uuid] = action

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
        self._ownership.check(node.uuid, epoch)
        with self._lock:
            self._check_accepting()
            running = self._in_flight.get(node.uuid)
            if running == ("deploy", instance_uuid):
                return "in-progress"
            if running is not None:
                raise _busy(node.uuid, running)
            # Held while the back end is read: a second accept of the same
            # build answers "in-progress", another action waits.
            self._in_flight[node.uuid] = ("deploy", instance_uuid)
        try:
            found = self._driver.inspect(
                ActionContext(node.uuid, self._host, epoch, instance_uuid), node
            )
        except ServiceUnavailable as exc:
            # The back end is down (logged once by its client): accept, and
            # let the deploy wait for it and decide from what it then shows
            # (it refuses a node that hosts something else, as here).  A
            # refusal would have the conductor retry every few seconds.
            LOG.debug("Instance %s on node %s: accepted while %s", instance_uuid, node.uuid, exc)
            self._start(self._deploy, instance_uuid, node, epoch, spec or NO_DEPLOY_SPEC)
            return "accepted"
        except BaseException:
            self._finish(node.uuid)
            raise
        try:
            if found.instance_uuid not in (None, instance_uuid):
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
        except BaseException:
            self._finish(node.uuid)
            raise
        if found.instance_uuid == instance_uuid and found.provision_state is ProvisionState.ACTIVE:
            # Deployed already (by us or a previous owner): the conductor
            # asks again because the result was lost.
            self._finish(node.uuid)
            self._ownership.pin(node.uuid)
            self._start(self._report_done, instance_uuid, node, epoch)
            return "done"
        self._start(self._deploy, instance_uuid, node, epoch, spec or NO_DEPLOY_SPEC)
        LOG.info(
            "Agent %s accepted instance %s on node %s (epoch %d%s)",
            self._host,
            instance_uuid,
            node.uuid,
            epoch,
            f"; resuming from {found.provision_state.value}"
            if found.instance_uuid == instance_uuid
            else "",
        )
        return "accepted"

    def destroy(self, instance_uuid: str, node: Node, epoch: int) -> str:
        self._ownership.check(node.uuid, epoch)
        with self._lock:
            self._check_accepting()
            running = self._in_flight.get(node.uuid)
            if running == ("destroy", instance_uuid):
                return "in-progress"
            if running == ("deploy", instance_uuid):
                if node.uuid in self._cancelled:
                    return "in-progress"
                # The instance is being deleted while it deploys: the deploy
                # stops at its next step and tears the node down itself, so
                # a delete never waits for a deploy that hangs.
                self._cancelled.add(node.uuid)
                LOG.info(
                    "Agent %s: instance %s deleted while it deploys on node %s; "
                    "stopping the deploy and tearing down",
                    self._host,
                    instance_uuid,
                    node.uuid,
                )
                return "accepted"
            if running is not None:
                # Tear down only once the other action ends: the conductor retries.
                raise _busy(node.uuid, running)
            self._in_flight[node.uuid] = ("destroy", instance_uuid)
        self._start(self._destroy, instance_uuid, node, epoch)
        return "accepted"

    def set_power(self, node: Node, epoch: int, target: PowerTarget) -> PowerState:
        """Power *node* and wait (an instance's reboot/stop/start, an operator's verb).

        :raises NotOwner: the epoch is not the one held: nothing is done
        :raises Conflict: another action runs on the node, or the agent is
            stopping (the conductor retries, with the next owner if need be)
        """
        self._ownership.check(node.uuid, epoch)
        self._occupy(node.uuid, ("power", target))
        try:
            ctx = ActionContext(node.uuid, self._host, epoch)
            return self._driver.set_power(ctx, node, target)
        finally:
            self._finish(node.uuid)

    def rebuild(
        self, instance_uuid: str, node: Node, epoch: int, spec: DeploySpec = NO_DEPLOY_SPEC
    ) -> str:
        """Re-image *node* in place for the instance it hosts, and wait: ``"active"``.

        *spec*: the image and config drive to deploy (the conductor's record);
        none given, the back end redeploys what its last deploy left.

        Fenced as a deploy: the epoch is checked first and again before every
        step (a SUSPENDED membership waited out), so a rebuild whose node was
        taken over stops at its next step; the new owner does it again when
        the conductor routes it there.

        :raises NotOwner: the epoch is not (or no longer) the one held
        :raises Conflict: another action runs on the node, or the agent is stopping
        :raises NodeNotBuildable: the back end shows the node hosting another instance
        :raises DriverError: the rebuild failed
        """
        self._ownership.check(node.uuid, epoch)
        self._occupy(node.uuid, ("rebuild", instance_uuid))

        def progress(step: str) -> None:
            self._ownership.wait_can_act(node.uuid, epoch, self._suspend_wait)
            LOG.debug("Instance %s on node %s: rebuild: %s", instance_uuid, node.uuid, step)

        try:
            self._driver.rebuild(
                ActionContext(node.uuid, self._host, epoch, instance_uuid), node, progress, spec
            )
        finally:
            self._finish(node.uuid)
        LOG.info(
            "Agent %s rebuilt instance %s on node %s (epoch %d)",
            self._host,
            instance_uuid,
            node.uuid,
            epoch,
        )
        return "active"

    def _start(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(
            target=target,
            args=args,
            daemon=True,
            name=f"{target.__name__.strip('_')}-{args[1].uuid[:8]}",
        )
        with self._lock:
            self._threads = {t for t in self._threads if t.is_alive()}
            self._threads.add(thread)
        thread.start()

    # -- background work -----------------------------------------------------------

    def _deploy(
        self, instance_uuid: str, node: Node, epoch: int, spec: DeploySpec = NO_DEPLOY_SPEC
    ) -> None:
        ctx = ActionContext(node.uuid, self._host, epoch, instance_uuid)

        steps: list[str] = []  # each step once, as the driver reports it

        def progress(step: str) -> None:
            # Re-checked at every call: stop as soon as the node is not ours
            # (a SUSPENDED membership is waited out, up to its TTL) or its
            # instance is being deleted.  A driver following a long
            # transition calls it before every read.
            self._ownership.wait_can_act(node.uuid, epoch, self._suspend_wait)
            if self._is_cancelled(node.uuid):
                raise _DeployCancelled(node.uuid)
            if not steps or steps[-1] != step:
                steps.append(step)
                self._moved_on(node.uuid, epoch)
                LOG.debug("Instance %s on node %s: %s", instance_uuid, node.uuid, step)

        try:
            success, fault, clean = self._deploy_or_clean(ctx, node, progress, steps, spec)
        except _DeployCancelled:
            self._destroy(instance_uuid, node, epoch)
            return
        except (NotOwner, ActionAbandoned) as exc:
            LOG.log(
                logging.WARNING if isinstance(exc, NotOwner) else logging.INFO,
                "Instance %s on node %s abandoned: %s",
                instance_uuid,
                node.uuid,
                exc,
            )
            self._finish(node.uuid)
            return  # the new owner, or our next process, carries on
        if self._deploy_ended(node.uuid):
            # Deleted meanwhile: the teardown's result is the one awaited.
            self._destroy(instance_uuid, node, epoch)
            return
        self._report_build(
            instance_uuid, node.uuid, epoch, success=success, fault=fault, clean=clean
        )

    def _deploy_or_clean(
        self,
        ctx: ActionContext,
        node: Node,
        progress: ProgressCallback,
        steps: list[str],
        spec: DeploySpec,
    ) -> tuple[bool, str | None, bool]:
        """Deploy; after a failure, tear the node down.  (success, fault, node clean).

        :raises NotOwner: the deploy lost the node (nothing more is done)
        :raises ActionAbandoned: the agent stops (nothing is reported)
        """
        try:
            self._driver.deploy(ctx, node, progress, spec)
        except (NotOwner, ActionAbandoned, _DeployCancelled):
            raise
        except RingfleetError as exc:
            # Refused (the node hosts something else, or cannot deploy), or
            # failed before the first step on a node the back end does not
            # show hosting this instance: touching it would destroy what is
            # there.  (A deploy resumed after a restart can fail at its
            # first read: Ironic shows it failed, and it is ours to clean.)
            refused = isinstance(exc, NodeNotBuildable) or (
                not steps and not self._backend_hosts(ctx, node)
            )
            return False, str(exc), False if refused else self._clean_after_failure(ctx, node)
        except Exception as exc:  # a driver bug must not kill the agent
            LOG.exception("Instance %s on node %s: driver crashed", ctx.instance_uuid, node.uuid)
            return False, f"driver error: {exc}", self._clean_after_failure(ctx, node)
        self._ownership.pin(node.uuid)
        return True, None, True

    def _report_done(self, instance_uuid: str, node: Node, epoch: int) -> None:
        self._report_build(instance_uuid, node.uuid, epoch, success=True, fault=None, clean=True)

    def _backend_hosts(self, ctx: ActionContext, node: Node) -> bool:
        """Whether the back end shows *node* hosting ``ctx.instance_uuid`` now."""
        try:
            return self._driver.inspect(ctx, node).instance_uuid == ctx.instance_uuid
        except Exception as exc:  # cannot tell: leave the node as it is
            LOG.debug("Node %s: back end not read after a failure: %s", node.uuid, exc)
            return False

    def _clean_after_failure(self, ctx: ActionContext, node: Node) -> bool:
        """Tear down after a failed deploy; whether the node is clean.

        :raises ActionAbandoned: the agent stops: the failed deploy is found
            again, and cleaned, when the build is resumed
        """
        try:
            self._ownership.check(node.uuid, ctx.epoch)
            self._driver.destroy(ctx, node)
            return True
        except ActionAbandoned:
            raise
        except Exception as exc:
            LOG.warning(
                "Node %s could not be cleaned after a failed deploy of instance %s: %s",
                node.uuid,
                ctx.instance_uuid,
                exc,
            )
            return False

    def _report_build(
        self,
        instance_uuid: str,
        node_uuid: str,
        epoch: int,
        *,
        success: bool,
        fault: str | None,
        clean: bool,
    ) -> None:
        result: dict[str, Any] = {
            "instance_uuid": instance_uuid,
            "node_uuid": node_uuid,
            "epoch": epoch,
            "success": success,
            "fault": fault,
            "node_clean": clean,
        }
        self._results.report(result)

    def _destroy(self, instance_uuid: str, node: Node, epoch: int) -> None:
        with self._lock:
            self._in_flight[node.uuid] = ("destroy", instance_uuid)
            self._cancelled.discard(node.uuid)
        ctx = ActionContext(node.uuid, self._host, epoch, instance_uuid)
        success, fault = True, None
        try:
            self._ownership.check(node.uuid, epoch)
            self._driver.destroy(ctx, node)
            self._ownership.unpin(node.uuid)
        except ActionAbandoned as exc:
            LOG.info("Instance %s on node %s: %s", instance_uuid, node.uuid, exc)
            self._finish(node.uuid)
            return  # our next process resumes it (the conductor routes it again)
        except Exception as exc:
            success, fault = False, str(exc)
            LOG.warning("Instance %s: destroy on node %s failed: %s", instance_uuid, node.uuid, exc)
        self._finish(node.uuid)
        result: dict[str, Any] = {
            "instance_uuid": instance_uuid,
            "node_uuid": node.uuid,
            "epoch": epoch,
            "success": success,
            "fault": fault,
        }
        self._results.report_destroy(result)

    def _deploy_ended(self, node_uuid: str) -> bool:
        """The deploy on *node_uuid* is over: True if a delete cancelled it.

        One step under the lock, so a delete accepted at this very moment
        is either seen here or finds the node free (and starts its own).
        """
        with self._lock:
            self._progress.pop(node_uuid, None)
            if node_uuid in self._cancelled:
                return True
            self._in_flight.pop(node_uuid, None)
            return False

    def _is_cancelled(self, node_uuid: str) -> bool:
        with self._lock:
            return node_uuid in self._cancelled

    def _finish(self, node_uuid: str) -> None:
        with self._lock:
            self._in_flight.pop(node_uuid, None)
            self._cancelled.discard(node_uuid)
            self._progress.pop(node_uuid, None)


@dataclasses.dataclass
class _Progress:
    """The back end's progress on one deploy (times from time.monotonic())."""

    epoch: int
    started: float  # its first step
    moved: float = float("-inf")  # its latest step
    reported: float = float("-inf")  # the step the last heartbeat was for
    told_at: float = float("-inf")  # when that heartbeat was sent


class _DeployCancelled(Exception):
    """The deploy's instance is being deleted: stop and tear down (internal)."""

    def __init__(self, node_uuid: str) -> None:
        super().__init__(f"deploy on node {node_uuid} cancelled by a delete")


def _busy(node_uuid: str, running: tuple[str, str]) -> Conflict:
    """The refusal of an action on a node busy with another (retried)."""
    return Conflict(
        field="node_uuid",
        value=node_uuid,
        reason=f"node is busy with {running[0]} of {running[1]}; retry",
    )
