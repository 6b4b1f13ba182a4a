# SPDX-License-Identifier: Apache-2.0
"""The build workers: threads that schedule, route and tear down queued instances.

Each takes an item off the :class:`~conductor.lifecycle.queue.BuildQueue`:
a build is scheduled and allocated a node (one compare-and-swap, which also
makes it ``spawning``) and handed to the :class:`Router`; a delete is handed
to the node's owner (or, with no node, ends at once).  A build no node fits
fails, unless it fits nodes that lack only a live owner (it waits for one).
Work that meets an unreachable database goes back on the queue, never lost.
"""

from __future__ import annotations

import logging
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
    first_line,
)
from conductor.common.instance_states import ACTION_TASKS, Event
from conductor.common.list_filters import ListOrder
from conductor.common.objects import Flavor, Instance, Node, Ownership, VmState
from conductor.db import allocations, instance_listing, instance_sweeps, instances, nodes
from conductor.db.engine import Database
from conductor.fleet_view import FleetView
from conductor.lifecycle.outages import Outages
from conductor.lifecycle.queue import Action, BuildQueue, Stored
from conductor.metrics import ConductorMetrics
from conductor.notification_payloads import FlavorPayload, ImagePayload, RequestSpecPayload
from conductor.notifications import Notifier
from conductor.scheduler.scheduler import Scheduler

__all__ = ["BuildWorkers", "Router"]

LOG = logging.getLogger(__name__)

# How soon work that met an unreachable database is tried again.
_DATABASE_RETRY_S = 2.0


class Router(Protocol):
    """Hands an allocated build to the agent that owns the node."""

    def route(self, instance: Instance, node: Node, claim: Ownership) -> None: ...

    def destroy(self, instance: Instance) -> bool:
        """Ask the owner to tear the node down; False when it cannot yet."""
        ...


class Actions(Protocol):
    """Routes an instance's power or lifecycle action (:mod:`conductor.lifecycle.actions`)."""

    def act(self, instance_uuid: str) -> None: ...


class BuildWorkers:
    """Worker threads that schedule stored build requests and deletions."""

    def __init__(
        self,
        db: Database,
        scheduler: Scheduler,
        fleet: FleetView,
        queue: BuildQueue,
        router: Router | None,
        *,
        workers: int,
        max_attempts: Callable[[], int],
        owner_wait: Callable[[], float],
        metrics: ConductorMetrics,
        actions: Actions | None = None,
        notifier: Notifier | None = None,
        unreachable: Callable[[], frozenset[str]] = frozenset,
    ) -> None:
        """``unreachable``: the live agents not to choose for new builds now."""
        self._unreachable = unreachable
        self._actions = actions
        self._notifier = notifier or Notifier.disabled()
        self._db = db
        self._metrics = metrics
        self._scheduler = scheduler
        self._fleet = fleet
        self._queue = queue
        self._router = router
        self._max_attempts = max_attempts
        self._owner_wait = owner_wait
        # Instance -> when (monotonic) it first found no node but for a live
        # owner; it waits for one up to owner_wait() from then.
        self._owner_waits: dict[str, float] = {}
        self._owner_waits_lock = threading.Lock()
        # What stops every build from being scheduled (the fleet view is lost).
        self._outages = Outages("Conductor")
        self._threads = [
            threading.Thread(target=self._work, name=f"build-worker-{i}", daemon=True)
            for i in range(workers)
        ]

    def start(self, *, resume: bool = True) -> None:
        """Start the workers; with *resume*, queue every stored instance in
        flight (a conductor with peers resumes only what it carries)."""
        for thread in self._threads:
            thread.start()
        if resume:
            self.resume()

    def redrive(self, instance_uuids: Sequence[str]) -> None:
        """Drive on these stored instances as their state says (adopted from
        a conductor that is gone): schedule, route, tear down or act."""
        for instance in instances.get_instances(self._db, instance_uuids):
            if instance.vm_state is VmState.BUILDING and instance.node_uuid is None:
                self._queue.submit([instance.uuid])
            elif instance.vm_state is VmState.DELETING or instance.node_uuid is not None:
                self._redrive(instance)

    def resume(self) -> int:
        """Queue every stored instance still waiting for a node (after a restart)."""
        building = instance_listing.list_page(
            self._db, ListOrder(), vm_state=VmState.BUILDING, limit=10_000
        )
        waiting = [i.uuid for i in building if i.node_uuid is None]
        placed = [i.uuid for i in building if i.node_uuid is not None]
        deleting = instance_listing.list_page(
            self._db, ListOrder(), vm_state=VmState.DELETING, limit=10_000
        )
        acting = instance_sweeps.acting(self._db, limit=10_000)
        self._queue.submit(waiting)
        for instance in acting:
            self._queue.act(instance.uuid)
        for uuid in placed:
            self._queue.reroute(uuid)  # the agent de-duplicates
        for instance in deleting:
            self._queue.delete(instance.uuid)
        if building or deleting or acting:
            LOG.info(
                "Resumed %d stored builds (%d already placed), %d deletions and %d actions",
                len(waiting) + len(placed),
                len(placed),
                len(deleting),
                len(acting),
            )
        return len(building) + len(deleting) + len(acting)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop taking work; what is still queued stays stored for the next start."""
        self._queue.stop_workers(len(self._threads))
        for thread in self._threads:
            thread.join(timeout)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            action, uuid, stored = item
            try:
                if action == "build":
                    self._build(uuid, stored)
                elif action == "route":
                    self._reroute(uuid)
                elif action == "resume":
                    self._resume(uuid)
                elif action == "act":
                    if self._actions is not None:
                        self._actions.act(uuid)
                else:
                    self._delete(uuid)
            except DatabaseUnavailable:
                # Back on the queue, never dropped; the database logged once
                # that it is down.  The request is stored: it is re-read.
                # A build may have failed after its allocation: "resume"
                # routes it if it has a node by then, allocates it if not.
                LOG.debug("Instance %s: %s waits for the database", uuid, action)
                again: Action = "resume" if action in ("build", "resume") else action
                self._queue.retry_later(uuid, again, delay=_DATABASE_RETRY_S)
            except Exception:  # a worker must survive one bad request
                LOG.exception("Instance %s: %s failed", uuid, action)

    def _build(self, instance_uuid: str, stored: Stored | None = None) -> None:
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
            self._notify_selection(instance, flavor)
            # Allocating also sets the task state to spawning (one transaction).
            node, claim = self._scheduler.select_and_allocate(
                flavor,
                instance.uuid,
                # An agent that fails its calls now is not chosen (its
                # nodes count as waiting for a live owner).
                live_members=self._fleet.live_members() - self._unreachable(),
                host_ips=self._fleet.host_ips(),
                group=instance.group_hint,
                exclude_nodes=instance.tried_nodes,
                scheduler_hints=instance.scheduler_hints,
                project_id=instance.project_id,
                image=instance.image,
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
                # Once for every build waiting on it, not once per build and retry.
                # INFO when the membership said its back end's outage.
                level = logging.INFO if self._fleet.backend_failing else logging.WARNING
                self._outages.failed("scheduling", first_line(exc), "builds wait", level)
                LOG.debug("Instance %s waits: %s", instance.uuid, exc)
            self._queue.retry_later(instance.uuid, "build")
            return
        except RingfleetError as exc:
            self._fail(instance, str(exc))
            return
        self._end_owner_wait(instance.uuid)
        self._outages.answered("scheduling")
        self._notify_selection(instance, flavor, node_uuid=node.uuid, host=claim.owner)
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

    def _notify_selection(
        self,
        instance: Instance,
        flavor: Flavor,
        *,
        node_uuid: str | None = None,
        host: str | None = None,
    ) -> None:
        """``scheduler.select_destinations.start`` (no node yet) or ``.end``, as Nova's."""
        if not self._notifier.enabled:
            return
        payload = RequestSpecPayload(
            instance_uuid=instance.uuid,
            project_id=instance.project_id,
            flavor=FlavorPayload.of(flavor),
            image=ImagePayload.of(instance.image),
            num_instances=1,
            group_hint=instance.group_hint,
            scheduler_hints=dict(instance.scheduler_hints),
            ignore_nodes=tuple(instance.tried_nodes),
            node_uuid=node_uuid,
            host=host,
        )
        phase = "start" if node_uuid is None else "end"
        self._notifier.send(f"scheduler.select_destinations.{phase}", payload)

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
        self._queue.retry_later(instance_uuid, "build")
        return True

    def _end_owner_wait(self, instance_uuid: str) -> float | None:
        """Forget the build's wait for an owner; how long it waited, if it did."""
        with self._owner_waits_lock:
            since = self._owner_waits.pop(instance_uuid, None)
        return None if since is None else time.monotonic() - since

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

    def rehomed(self, node_uuids: list[str]) -> None:
        """Pinned nodes changed owner: builds and teardowns still running there
        go to the new owner at once (a teardown the departed owner accepted
        but never reported waited for the sweeper)."""
        for instance in instance_sweeps.in_flight_on(self._db, node_uuids):
            LOG.info(
                "Instance %s: node %s re-homed, routing its %s to the new owner",
                instance.uuid,
                instance.node_uuid,
                _work(instance),
            )
            self._redrive(instance)

    def _redrive(self, instance: Instance) -> None:
        """Route an in-flight build or teardown again, to whoever owns its node now."""
        if instance.vm_state is VmState.DELETING:
            self._queue.delete(instance.uuid)
        elif instance.task_state in ACTION_TASKS:
            self._queue.act(instance.uuid)
        else:
            self._queue.reroute(instance.uuid)

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
        for instance in instance_sweeps.in_flight_on_owner(self._db, host):
            # An action (reboot...) counts with the builds: work to finish.
            if instance.vm_state is VmState.DELETING:
                teardowns += 1
            else:
                builds += 1
            self._redrive(instance)
        if builds or teardowns:
            LOG.info(
                "Agent %s resumed: routing %d builds and %d teardowns on its nodes again",
                host,
                builds,
                teardowns,
            )
        return builds, teardowns

    def _fail(self, instance: Instance, fault: str) -> None:
        # Only while it is still building: the copy scheduled may be older
        # than a delete (a queued copy is not read again).
        if instances.fail_build(self._db, instance.uuid, fault) is None:
            LOG.info("Instance %s is no longer building; not failed: %s", instance.uuid, fault)
            return
        self._metrics.build_ended("error")
        LOG.warning("Instance %s failed: %s", instance.uuid, fault)
        self._notifier.instance(Event.FAIL, instance.uuid)

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
                    LOG.debug(
                        "Instance %s delete waits for the owner of node %s",
                        instance.uuid,
                        instance.node_uuid,
                    )
                    self._queue.retry_later(instance.uuid, "delete")
                return
            # No agent was ever asked to deploy it: nothing to tear down.
            deleted = allocations.release(self._db, instance.node_uuid, instance.uuid, fence=None)
        else:
            deleted = instances.set_state(self._db, instance.uuid, Event.TORN_DOWN)
        LOG.info("Instance %s deleted", instance.uuid)
        if deleted:
            self._notifier.instance(Event.TORN_DOWN, instance.uuid, if_state=VmState.DELETED)


def _work(instance: Instance) -> str:
    """What an agent does for *instance*, in log lines."""
    if instance.vm_state is VmState.DELETING:
        return "teardown"
    if instance.task_state in ACTION_TASKS:
        return f"action ({instance.task_state})"
    return "build"
