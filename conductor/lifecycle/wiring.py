# SPDX-License-Identifier: Apache-2.0
"""The build lifecycle wired once: queue, workers, router, results and sweeper.

Each piece gets what it depends on when it is made, in the one order the
dependencies allow (the queue; the results, which put work back on it; the
router, which retries through the queue and hands refusals to the results;
the workers, which use all three), so nothing is set after construction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from compute_agent.rpcapi import ComputeAPI
from conductor.common.exception import ConfigurationError
from conductor.common.objects import Flavor, Instance, Node
from conductor.db.carriage import PowerRequest
from conductor.db.engine import Database
from conductor.db.ownership import Fence
from conductor.fleet_view import FleetView
from conductor.lifecycle.actions import ACTION_LANE, ActionRouter
from conductor.lifecycle.owner_calls import OwnerCalls
from conductor.lifecycle.queue import BuildQueue
from conductor.lifecycle.results import BuildResults, CleanOrphan
from conductor.lifecycle.routing import ACCEPT_LANE, AgentRouter
from conductor.lifecycle.sweeper import BuildSweeper
from conductor.lifecycle.workers import BuildWorkers, Router
from conductor.metrics import ConductorMetrics
from conductor.notifications import Notifier
from conductor.scheduler.scheduler import Scheduler

__all__ = ["BuildLifecycle"]

#: Threads carrying instance actions and node power verbs, each waiting for its end.
_ACTION_SENDERS = 8


class BuildLifecycle:
    """Everything that moves a stored build or delete to its end, in one object.

    Routing goes to the agents over ``compute`` (an :class:`AgentRouter`),
    or to ``router`` when given instead (tests); with neither, an allocated
    build waits in ``building``/``spawning``.

    Callers use its verbs (submit, report a result, sweep, ...); its parts
    are its own.
    """

    def __init__(
        self,
        db: Database,
        scheduler: Scheduler,
        fleet: FleetView,
        *,
        workers: int,
        compute: ComputeAPI | None = None,
        router: Router | None = None,
        max_attempts: Callable[[], int] = lambda: 3,
        owner_wait: Callable[[], float] = lambda: 0.0,
        metrics: ConductorMetrics | None = None,
        accept_timeout: float = 10.0,
        accept_senders: int = 0,
        action_timeout: float = 300.0,
        notifier: Notifier | None = None,
        clean_late_deploy: CleanOrphan | None = None,
    ) -> None:
        """``notifier``: where the instances' versioned notifications go (none by default).

        ``clean_late_deploy``: how a deploy that may go on after its build
        was given up (timed out) is handed to the node's owner for a
        teardown, for a ``router`` given instead of ``compute`` (tests); by
        default the agents' router asks the owner (nothing without one).
        """
        if compute is not None and router is not None:
            raise ValueError("route over compute or through router, not both")
        metrics = metrics if metrics is not None else ConductorMetrics("-")
        notifier = notifier or Notifier.disabled()
        clean = clean_late_deploy or self._clean_late_deploy
        self._queue = BuildQueue()
        #: Agents' reports, applied (fenced) to the record.
        self._results = BuildResults(
            db,
            self._queue,
            # Hurries the freed node into this conductor's node index (its
            # refreshes would read the row anyway).
            nodes_freed=scheduler.refresh,
            max_attempts=max_attempts,
            metrics=metrics,
            clean_orphan=clean,
            notifier=notifier,
        )
        #: The last resort for builds that make no progress.
        self._sweeper = BuildSweeper(db, self._queue, self._results, clean_orphan=clean)
        self._agent_router: AgentRouter | None = None
        #: Power and lifecycle actions (reboot, stop, start; node power).
        self._actions: ActionRouter | None = None
        #: The one way to a node's owner, for every verb, and its threads.
        self._owners = OwnerCalls(
            db, fleet, {ACCEPT_LANE: accept_senders, ACTION_LANE: _ACTION_SENDERS}
        )
        if compute is not None:
            router = self._route_over(
                db,
                fleet,
                compute,
                accept_timeout=accept_timeout,
                action_timeout=action_timeout,
                notifier=notifier,
            )
        self._workers = BuildWorkers(
            db,
            scheduler,
            fleet,
            self._queue,
            router,
            workers=workers,
            max_attempts=max_attempts,
            owner_wait=owner_wait,
            metrics=metrics,
            actions=self._actions,
            notifier=notifier,
            unreachable=self._owners.unreachable,
        )

    def _route_over(
        self,
        db: Database,
        fleet: FleetView,
        compute: ComputeAPI,
        *,
        accept_timeout: float,
        action_timeout: float,
        notifier: Notifier,
    ) -> AgentRouter:
        """Make the routers to the agents, through the one owner call; the builds' router."""
        self._actions = ActionRouter(
            db,
            fleet,
            compute,
            self._queue,
            timeout=action_timeout,
            notifier=notifier,
            owners=self._owners,
        )
        self._agent_router = AgentRouter(
            db,
            fleet,
            compute,
            self._queue,
            self._results,
            accept_timeout=accept_timeout,
            owners=self._owners,
        )
        return self._agent_router

    def start(self, *, resume: bool = True) -> None:
        """Start the workers; with *resume*, every build, delete and action
        still in flight is queued again (a conductor with peers resumes only
        what it carries, :mod:`conductor.peers`)."""
        self._workers.start(resume=resume)

    def redrive(self, instance_uuids: Sequence[str]) -> None:
        """Drive on these stored instances as their state says (adopted)."""
        self._workers.redrive(instance_uuids)

    def repower(self, requests: Sequence[PowerRequest]) -> None:
        """Route again these stored node power requests (adopted)."""
        if self._actions is not None:
            self._actions.repower(requests)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop taking work (what is queued stays stored), then send the accepts
        already handed to the senders, for up to *timeout* seconds more;
        actions in flight are not waited for (their records stay)."""
        self._workers.stop(timeout)
        self._owners.close({ACCEPT_LANE: timeout})

    # -- what the endpoints and the Ironic sync ask for --------------------------------

    def submit(self, instance_uuids: Sequence[str]) -> None:
        self._queue.submit(instance_uuids)

    def submit_stored(self, stored: Sequence[Instance], flavor: Flavor) -> None:
        self._queue.submit_stored(stored, flavor)

    def delete(self, instance_uuid: str) -> None:
        self._queue.delete(instance_uuid)

    def act(self, instance_uuid: str) -> None:
        """Route the instance's action in flight (a verb just stored) to its owner."""
        self._queue.act(instance_uuid)

    def set_node_power(self, node: Node, target: str) -> None:
        """Route an operator's node power verb to the node's owner (in the background).

        :raises ConfigurationError: this lifecycle has no RPC client for the agents
        """
        if self._actions is None:
            raise ConfigurationError(
                "DEFAULT", "transport_url", "this conductor has no RPC client for the agents"
            )
        self._actions.set_node_power(node, target)

    def rehomed(self, node_uuids: list[str]) -> None:
        """Pinned nodes changed owner: their builds and teardowns go to the new owner."""
        self._workers.rehomed(node_uuids)

    def resume_agent(self, host: str) -> tuple[int, int]:
        """An agent (re)started: its nodes' builds and teardowns are routed again."""
        return self._workers.resume_agent(host)

    # -- what the agents report (the agents' endpoint) ----------------------------------

    def report_result(
        self,
        host: str,
        instance_uuid: str,
        node_uuid: str,
        epoch: int,
        *,
        success: bool,
        fault: str | None,
        node_clean: bool,
    ) -> bool:
        """An agent's report of a build it ran, applied fenced by its epoch;
        False when stale (ignored).  See :meth:`BuildResults.report_result`."""
        return self._results.report_result(
            host,
            instance_uuid,
            node_uuid,
            epoch,
            success=success,
            fault=fault,
            node_clean=node_clean,
        )

    def report_destroyed(
        self,
        host: str,
        instance_uuid: str,
        node_uuid: str,
        epoch: int,
        *,
        success: bool,
        fault: str | None,
    ) -> bool:
        """An agent tore a node down (or failed to), applied fenced by its
        epoch; False when stale.  See :meth:`BuildResults.report_destroyed`."""
        return self._results.report_destroyed(
            host, instance_uuid, node_uuid, epoch, success=success, fault=fault
        )

    def refused(
        self, instance_uuid: str, node_uuid: str, fault: str, fence: Fence, *, clean: bool = False
    ) -> None:
        """The node's owner (``fence``) refused the build for good: the attempt
        fails and the build is rescheduled now.  What the agents' router does
        with such a refusal; a ``router`` given instead reports it here."""
        self._results.refused(instance_uuid, node_uuid, fault, fence, clean=clean)

    # -- the service's timer -----------------------------------------------------------

    def sweep(self, build_timeout: float) -> int:
        """Act on the builds and teardowns without progress for *build_timeout*
        seconds (the last resort, :meth:`BuildSweeper.sweep`); how many."""
        return self._sweeper.sweep(build_timeout)

    def _clean_late_deploy(self, node: Node, instance_uuid: str) -> bool:
        """A build ringfleet gave up on (timed out) may still be deployed on
        *node*: ask its owner to tear it down (False without agents to ask)."""
        if self._agent_router is None:
            return False
        return self._agent_router.clean_orphan(
            node, instance_uuid, what=f"the build of instance {instance_uuid} was given up"
        )

    def clean_orphan(self, node: Node, instance_uuid: str) -> bool:
        """Ask *node*'s owner to tear down an orphan claim (see
        :meth:`AgentRouter.clean_orphan`); False without agents to ask."""
        if self._agent_router is None:
            return False
        return self._agent_router.clean_orphan(node, instance_uuid)
