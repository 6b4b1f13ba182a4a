"""The build queue: stored requests are scheduled (and, later, routed) by workers.

A request is stored before it reaches the queue (see
:mod:`conductor.endpoints.instances`), so the queue itself holds only ids:
on start the conductor re-queues every instance still waiting for a node,
and a conductor killed mid-build loses nothing.

Routing the build to the owning agent (RPC ``build_instance`` with the
epoch) goes through a :class:`Router` (:class:`conductor.routing.AgentRouter`
in the service); without one, an allocated instance waits in
``building``/``spawning``.
"""

from __future__ import annotations

import datetime
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from conductor.common.exception import (
    Conflict,
    DatabaseUnavailable,
    FlavorNotFound,
    NotFound,
    NoValidNode,
    RingfleetError,
    ServiceUnavailable,
)
from conductor.common.objects import (
    Flavor,
    Instance,
    Node,
    Ownership,
    ProvisionState,
    TaskState,
    VmState,
)
from conductor.db import allocations, instances, nodes
from conductor.db.engine import Database
from conductor.db.models import utcnow
from conductor.fleet_view import FleetView
from conductor.metrics import ConductorMetrics
from conductor.scheduler.scheduler import Scheduler

__all__ = ["BuildWorkers", "Router"]

LOG = logging.getLogger(__name__)

_STOP = object()

# How soon work that met an unreachable database is tried again.
_DATABASE_RETRY_S = 2.0

# An instance as build_instances just stored it, and its flavor.
_Stored = tuple[Instance, Flavor]


class Router(Protocol):
    """Hands an allocated build to the agent that owns the node."""

    def route(self, instance: Instance, node: Node, claim: Ownership) -> None: ...

    def destroy(self, instance: Instance) -> bool:
        """Ask the owner to tear the node down; False when it cannot yet."""
        ...


class BuildWorkers:
    """Worker threads that schedule stored build requests and deletions."""

    def __init__(
        self,
        db: Database,
        scheduler: Scheduler,
        fleet: FleetView,
        *,
        workers: int,
        router: Router | None = None,
        max_attempts: Callable[[], int] = lambda: 3,
        owner_wait: Callable[[], float] = lambda: 0.0,
        metrics: ConductorMetrics | None = None,
    ) -> None:
        self._db = db
        self._metrics = metrics if metrics is not None else ConductorMetrics("-")
        self._scheduler = scheduler
        self._fleet = fleet
        self._router = router
        self._max_attempts = max_attempts
        self._owner_wait = owner_wait
        # Instance -> when (monotonic) it first found no node but for a live
        # owner; it waits for one up to owner_wait() from then.
        self._owner_waits: dict[str, float] = {}
        self._owner_waits_lock = threading.Lock()
        # (action, instance uuid, what build_instances just stored, if known)
        self._queue: queue.Queue[tuple[str, str, _Stored | None] | object] = queue.Queue()
        # (instance, node, attempt) already re-routed once by the sweeper
        self._swept: set[tuple[str, str | None, int]] = set()
        self._threads = [
            threading.Thread(target=self._work, name=f"build-worker-{i}", daemon=True)
            for i in range(workers)
        ]

    def set_router(self, router: Router) -> None:
        """Route allocated builds to agents (set before :meth:`start`)."""
        self._router = router

    def start(self) -> None:
        for thread in self._threads:
            thread.start()
        self.resume()

    def resume(self) -> int:
        """Queue every stored instance still waiting for a node (after a restart)."""
        building = instances.list_instances(self._db, vm_state=VmState.BUILDING, limit=10_000)
        waiting = [i.uuid for i in building if i.node_uuid is None]
        placed = [i.uuid for i in building if i.node_uuid is not None]
        deleting = instances.list_instances(self._db, vm_state=VmState.DELETING, limit=10_000)
        self.submit(waiting)
        for uuid in placed:
            self._queue.put(("route", uuid, None))  # the agent de-duplicates
        for instance in deleting:
            self.delete(instance.uuid)
        if building or deleting:
            LOG.info(
                "Resumed %d stored builds (%d already placed) and %d deletions",
                len(waiting) + len(placed),
                len(placed),
                len(deleting),
            )
        return len(building) + len(deleting)

    def submit(self, instance_uuids: list[str]) -> None:
        for uuid in instance_uuids:
            self._queue.put(("build", uuid, None))

    def submit_stored(self, stored: Sequence[Instance], flavor: Flavor) -> None:
        """Queue instances just stored, as stored: the worker need not read them again.

        Safe however stale the copy gets in the queue: the allocation is a
        compare-and-swap on the instance still building without a node.
        """
        for instance in stored:
            self._queue.put(("build", instance.uuid, (instance, flavor)))

    def delete(self, instance_uuid: str) -> None:
        self._queue.put(("delete", instance_uuid, None))

    def stop(self, timeout: float = 10.0) -> None:
        """Stop taking work; what is still queued stays stored for the next start."""
        for _ in self._threads:
            self._queue.put(_STOP)
        for thread in self._threads:
            thread.join(timeout)

    def pending(self) -> int:
        return self._queue.qsize()

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            assert isinstance(item, tuple)
            action, uuid, stored = item
            try:
                if action == "build":
                    self._build(uuid, stored)
                elif action == "route":
                    self._reroute(uuid)
                elif action == "resume":
                    self._resume(uuid)
                else:
                    self._delete(uuid)
            except DatabaseUnavailable:
                # Back on the queue, never dropped; the database logged once
                # that it is down.  The request is stored: it is re-read.
                # A build may have failed after its allocation: "resume"
                # routes it if it has a node by then, allocates it if not.
                LOG.debug("Instance %s: %s waits for the database", uuid, action)
                again = "resume" if action in ("build", "resume") else action
                self._retry_later(uuid, delay=_DATABASE_RETRY_S, action=again)
            except Exception:  # a worker must survive one bad request
                LOG.exception("Instance %s: %s failed", uuid, action)

    def _build(self, instance_uuid: str, stored: _Stored | None = None) -> None:
        flavor: Flavor | None
        if stored is not None:
            instance, flavor = stored
        else:
            try:
                instance, flavor = instances.get_build(self._db, instance_uuid)
            except NotFound:
                return
        if instance.vm_state is not VmState.BUILDING or instance.node_uuid is not None:
            self._end_owner_wait(instance.uuid)
            return
        try:
            if flavor is None:
                raise FlavorNotFound(instance.flavor)
            # Allocating also sets the task state to spawning (one transaction).
            node, claim = self._scheduler.select_and_allocate(
                flavor,
                instance.uuid,
                live_members=self._fleet.live_members(),
                group=instance.group_hint,
                exclude_nodes=instance.tried_nodes,
            )
        except NoValidNode as exc:
            self._no_valid_node(instance, exc)
            return
        except Conflict:
            self._end_owner_wait(instance.uuid)
            return  # deleted or placed meanwhile
        except ServiceUnavailable as exc:
            # This conductor cannot tell who is alive right now, or cannot
            # reach the database: the request stays stored and is tried
            # again, it does not fail.  The database says once that it is down.
            if not isinstance(exc, DatabaseUnavailable):
                LOG.warning("Instance %s waits: %s", instance.uuid, exc)
            self._retry_later(instance.uuid)
            return
        except RingfleetError as exc:
            self._fail(instance, str(exc))
            return
        self._end_owner_wait(instance.uuid)
        # The operator's line for the allocation, logged before the owner
        # answers; the router adds a line only when the answer is unusual.
        LOG.info(
            "Instance %s allocated to node %s of agent %s (epoch %d)",
            instance.uuid,
            node.uuid,
            claim.owner,
            claim.epoch,
        )
        if self._router is not None:
            self._router.route(instance, node, claim)

    def _no_valid_node(self, instance: Instance, exc: NoValidNode) -> None:
        """Fail the build, unless it fits nodes that lack only a live owner (it waits)."""
        if exc.awaiting_owner and self._waits_for_owner(instance.uuid, exc):
            return
        waited = self._end_owner_wait(instance.uuid)
        fault = str(exc)
        if waited is not None:
            fault += f"; waited {waited:.0f} s for a live owner"
        self._fail(instance, fault)

    def _waits_for_owner(self, instance_uuid: str, exc: NoValidNode) -> bool:
        """Whether a build that fits only nodes without a live owner waits (retried later).

        Owners are missing for a moment when agents re-join after their
        etcd member came back, or before a peer takes a dead agent's free
        nodes over (within the membership TTL): failing the build then
        would turn a blip into an ERROR.  The wait is bounded by
        ``owner_wait``; past it the build fails as before.
        """
        limit = self._owner_wait()
        now = time.monotonic()
        with self._owner_waits_lock:
            since = self._owner_waits.get(instance_uuid, now)
            if now - since >= limit:
                return False
            self._owner_waits[instance_uuid] = since
        if since == now:
            LOG.info(
                "Instance %s waits up to %.0f s for a live owner: %s", instance_uuid, limit, exc
            )
        self._retry_later(instance_uuid)
        return True

    def _end_owner_wait(self, instance_uuid: str) -> float | None:
        """Forget the build's wait for an owner; how long it waited, if it did."""
        with self._owner_waits_lock:
            since = self._owner_waits.pop(instance_uuid, None)
        return None if since is None else time.monotonic() - since

    def _retry_later(self, instance_uuid: str, delay: float = 2.0, action: str = "build") -> None:
        timer = threading.Timer(delay, lambda: self._queue.put((action, instance_uuid, None)))
        timer.daemon = True
        timer.start()

    def _resume(self, instance_uuid: str) -> None:
        """Allocate a build that has no node yet, route one that has."""
        try:
            instance = instances.get_instance(self._db, instance_uuid)
        except NotFound:
            return
        if instance.node_uuid is None:
            self._build(instance_uuid)
        else:
            self._reroute(instance_uuid)

    def _reroute(self, instance_uuid: str) -> None:
        """Route again a build whose node had no reachable owner."""
        if self._router is None:
            return
        try:
            instance = instances.get_instance(self._db, instance_uuid)
        except NotFound:
            return
        if instance.vm_state is not VmState.BUILDING or instance.node_uuid is None:
            return
        node = nodes.get_node(self._db, instance.node_uuid)
        claim = Ownership(node.uuid, node.owner, node.owner_epoch, pinned=True)
        self._router.route(instance, node, claim)

    def sweep(self, build_timeout: float) -> int:
        """Nothing stays BUILDING forever: act on builds without progress.

        A stuck build without a node is queued again; one with a node is
        routed again (the agent de-duplicates; a lost result is re-sent);
        one still stuck a whole ``build_timeout`` later counts as a failed
        attempt: the node is freed as ``error`` (its state is unknown) and
        the build is rescheduled or goes to ERROR.  Returns how many builds
        it acted on.
        """
        older_than = utcnow() - datetime.timedelta(seconds=build_timeout)
        stuck = instances.stuck_builds(self._db, older_than)
        self._forget_moved_on(stuck)
        deletes = instances.stuck_deletes(self._db, older_than)
        unplaced: list[str] = []
        reroute: list[str] = []
        timed_out: list[tuple[str, str]] = []
        for instance in stuck:
            if instance.node_uuid is None:
                unplaced.append(instance.uuid)
            elif (key := (instance.uuid, instance.node_uuid, instance.attempts)) not in self._swept:
                self._swept.add(key)
                reroute.append(instance.uuid)
            else:
                self._swept.discard(key)
                timed_out.append((instance.uuid, instance.node_uuid))
        # The retries count as progress: one write for all, before acting.
        instances.touch(self._db, [d.uuid for d in deletes] + unplaced + reroute)
        for deleting in deletes:
            self.delete(deleting.uuid)
        self.submit(unplaced)
        for uuid in reroute:
            self._queue.put(("route", uuid, None))
        for uuid, node_uuid in timed_out:
            LOG.warning(
                "Instance %s: no progress on node %s for %.0f s", uuid, node_uuid, build_timeout
            )
            self._attempt_failed(
                uuid, node_uuid, f"build timed out after {build_timeout:.0f} s", clean=False
            )
        return len(stuck)

    def _forget_moved_on(self, stuck: list[Instance]) -> None:
        """Drop sweep marks of builds that progressed (the set stays small)."""
        current = {(i.uuid, i.node_uuid, i.attempts) for i in stuck}
        others = self._swept - current
        still = {
            (i.uuid, i.node_uuid, i.attempts)
            for i in instances.get_instances(self._db, [key[0] for key in others])
            if i.vm_state is VmState.BUILDING
        }
        self._swept -= others - still

    def rehomed(self, node_uuids: list[str]) -> None:
        """Pinned nodes changed owner: builds still running there go to the new owner."""
        for instance in instances.building_on(self._db, node_uuids):
            LOG.info(
                "Instance %s: node %s re-homed, routing the build to its new owner",
                instance.uuid,
                instance.node_uuid,
            )
            self._queue.put(("route", instance.uuid, None))

    def resume_agent(self, host: str) -> tuple[int, int]:
        """An agent (re)started or re-joined: what it was doing is routed to it again.

        A process killed and restarted under the same host keeps its nodes
        (and a re-joined one may too), but not the builds and teardowns its
        previous incarnation had accepted: each is routed again now, to
        whoever owns the node, rather than wait for ``build_timeout``.  The
        agent de-duplicates by instance id and resumes from what the back
        end shows.  Returns (builds, teardowns) re-driven.
        """
        builds = teardowns = 0
        for instance in instances.in_flight_on_owner(self._db, host):
            if instance.vm_state is VmState.DELETING:
                teardowns += 1
                self.delete(instance.uuid)
            else:
                builds += 1
                self._queue.put(("route", instance.uuid, None))
        if builds or teardowns:
            LOG.info(
                "Agent %s resumed: routing %d builds and %d teardowns on its nodes again",
                host,
                builds,
                teardowns,
            )
        return builds, teardowns

    def retry_later(self, instance_uuid: str, action: str) -> None:
        self._retry_later(instance_uuid, delay=2.0, action=action)

    def refused(self, instance_uuid: str, node_uuid: str, fault: str) -> None:
        """The node's owner refused the build for good: reschedule it now.

        The node is freed as ``error``: its back end shows something the
        record does not (another instance), which an operator must look at.
        """
        self._attempt_failed(instance_uuid, node_uuid, fault, clean=False)

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
        """An agent's report of a build it ran; False when stale (ignored).

        Fenced: only the node's owner, at the epoch it holds, hosting that
        instance, is heard.  A failure frees the node (``available`` when the
        agent cleaned it, ``error`` otherwise) and reschedules the build to
        another node until ``max_attempts``; then the instance is ERROR with
        the fault of every attempt.
        """
        if success and allocations.complete(
            self._db, node_uuid, instance_uuid, owner=host, epoch=epoch
        ):
            # The usual case in one transaction: fenced and completed.
            self._metrics.build_ended("active")
            LOG.info("Instance %s ACTIVE on node %s of %s", instance_uuid, node_uuid, host)
            return True
        if not self._is_current(host, node_uuid, epoch, instance_uuid, "build"):
            return False
        if success:
            if instances.get_instance(self._db, instance_uuid).vm_state is VmState.DELETING:
                # Deleted while it was being built: it is deployed, so it is
                # torn down now.
                nodes.set_provision_state(self._db, node_uuid, ProvisionState.ACTIVE)
                self.delete(instance_uuid)
            return True
        self._attempt_failed(instance_uuid, node_uuid, fault or "unknown failure", clean=node_clean)
        return True

    def _is_current(
        self, host: str, node_uuid: str, epoch: int, instance_uuid: str, what: str
    ) -> bool:
        """The fence of agent reports: from the node's owner, at its epoch,
        about the instance the node hosts (one read of the node row)."""
        try:
            node = nodes.get_node(self._db, node_uuid)
        except NotFound:
            node = None
        if (
            node is not None
            and node.owner == host
            and node.owner_epoch == epoch
            and node.instance_uuid == instance_uuid
        ):
            return True
        LOG.warning(
            "Instance %s: stale %s report from %s for node %s at epoch %d (owner %s/%s)",
            instance_uuid,
            what,
            host,
            node_uuid,
            epoch,
            node.owner if node else None,
            node.owner_epoch if node else None,
        )
        return False

    def _attempt_failed(
        self, instance_uuid: str, node_uuid: str, fault: str, *, clean: bool
    ) -> None:
        attempts = allocations.fail_attempt(
            self._db, node_uuid, instance_uuid, fault, node_clean=clean
        )
        if attempts is None:
            return  # the build moved on meanwhile (a success won the race)
        self._scheduler.refresh()
        if attempts >= self._max_attempts():
            instances.set_state(
                self._db,
                instance_uuid,
                expected=[VmState.BUILDING],
                vm_state=VmState.ERROR,
                task_state=None,
            )
            self._metrics.build_ended("error")
            LOG.warning(
                "Instance %s ERROR after %d attempts (last on node %s): %s",
                instance_uuid,
                attempts,
                node_uuid,
                fault,
            )
        else:
            self._metrics.build_ended("rescheduled")
            LOG.info(
                "Instance %s failed on node %s (attempt %d): rescheduling",
                instance_uuid,
                node_uuid,
                attempts,
            )
            instances.set_state(
                self._db,
                instance_uuid,
                expected=[VmState.BUILDING],
                vm_state=VmState.BUILDING,
                task_state=TaskState.SCHEDULING,
            )
            self.submit([instance_uuid])

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
        """An agent tore a node down (or failed to); fenced like build results."""
        if not self._is_current(host, node_uuid, epoch, instance_uuid, "destroy"):
            return False
        if not success:
            # The node stays allocated and dirty; the delete is retried.
            LOG.warning(
                "Instance %s: teardown of node %s failed: %s", instance_uuid, node_uuid, fault
            )
            self._retry_later(instance_uuid, delay=10.0, action="delete")
            return True
        allocations.free(self._db, node_uuid, instance_uuid)
        instances.set_state(
            self._db,
            instance_uuid,
            expected=[VmState.DELETING],
            vm_state=VmState.DELETED,
            task_state=None,
        )
        self._scheduler.refresh()
        LOG.info("Instance %s deleted; node %s available again", instance_uuid, node_uuid)
        return True

    def _fail(self, instance: Instance, fault: str) -> None:
        # Only while it is still building: the copy scheduled may be older
        # than a delete (a queued copy is not read again).
        if (
            instances.record_failed_attempt(self._db, instance.uuid, fault, building_only=True)
            is None
        ):
            LOG.info("Instance %s is no longer building; not failed: %s", instance.uuid, fault)
            return
        instances.set_state(
            self._db,
            instance.uuid,
            expected=[VmState.BUILDING],
            vm_state=VmState.ERROR,
            task_state=None,
        )
        self._metrics.build_ended("error")
        LOG.warning("Instance %s failed: %s", instance.uuid, fault)

    def _delete(self, instance_uuid: str) -> None:
        try:
            instance = instances.get_instance(self._db, instance_uuid)
        except NotFound:
            return
        if instance.vm_state is not VmState.DELETING:
            return
        if instance.node_uuid is not None:
            if self._router is not None:
                # The owner tears the node down and reports; it frees the node.
                if not self._router.destroy(instance):
                    LOG.info(
                        "Instance %s delete waits for the owner of node %s",
                        instance.uuid,
                        instance.node_uuid,
                    )
                    self._retry_later(instance.uuid, delay=2.0, action="delete")
                return
            # No agent was ever asked to deploy it: nothing to tear down.
            allocations.free(self._db, instance.node_uuid, instance.uuid)
        instances.set_state(
            self._db,
            instance.uuid,
            expected=[VmState.DELETING],
            vm_state=VmState.DELETED,
            task_state=None,
        )
        LOG.info("Instance %s deleted", instance.uuid)
