# SPDX-License-Identifier: Apache-2.0
"""Agents' build and teardown reports, applied to the record.

Every write a report causes is fenced in its own statement by the
reporting agent's ``(owner, epoch)`` (:func:`conductor.db.ownership.holds`):
a report from an agent that lost the node, however late, changes nothing.
A failure frees the node and reschedules the build (through the build
queue) until ``max_attempts``; then the instance is ERROR with the fault of
every attempt.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from conductor.common.exception import NotFound
from conductor.common.instance_states import Event
from conductor.common.objects import Node, ProvisionState, VmState
from conductor.db import allocations, instances, nodes
from conductor.db.engine import Database
from conductor.db.ownership import Fence
from conductor.lifecycle.queue import BuildQueue
from conductor.metrics import ConductorMetrics
from conductor.notifications import Notifier

__all__ = ["BuildResults", "CleanOrphan"]

LOG = logging.getLogger(__name__)

#: Asks a node's owner to tear down what its back end may still hold of an
#: instance ringfleet no longer places there; whether the owner took it.
CleanOrphan = Callable[[Node, str], bool]


class BuildResults:
    """Applies what agents report about the builds and teardowns they ran."""

    def __init__(
        self,
        db: Database,
        queue: BuildQueue,
        *,
        nodes_freed: Callable[[], object],
        max_attempts: Callable[[], int],
        metrics: ConductorMetrics,
        clean_orphan: CleanOrphan | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        """``nodes_freed``: called after a report freed a node (the write is
        committed), so that whoever keeps a view of the free nodes reads it
        now rather than at its next refresh (the scheduler's node index).
        ``clean_orphan``: how a deploy that succeeded after its attempt
        was given up is handed to the node's owner for a teardown (``None``:
        the success is only ignored)."""
        self._db = db
        self._notifier = notifier or Notifier.disabled()
        self._clean_orphan = clean_orphan
        self._nodes_freed = nodes_freed
        self._queue = queue
        self._max_attempts = max_attempts
        self._metrics = metrics

    def refused(
        self, instance_uuid: str, node_uuid: str, fault: str, fence: Fence, *, clean: bool = False
    ) -> None:
        """The node's owner (``fence``) refused the build for good: reschedule it now.

        The node is freed as ``error`` unless *clean*: its back end shows
        something the record does not (another instance), which an operator
        must look at.  A build no agent was ever asked to run (it needs a
        newer compute API) leaves the node clean.
        """
        self.attempt_failed(instance_uuid, node_uuid, fault, clean=clean, fence=fence)

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
        fence = Fence(host, epoch)
        if success:
            if allocations.complete(self._db, node_uuid, instance_uuid, fence=fence):
                # The usual case in one transaction: fenced and completed.
                self._metrics.build_ended("active")
                LOG.info("Instance %s ACTIVE on node %s of %s", instance_uuid, node_uuid, host)
                self._notifier.instance(Event.DEPLOYED, instance_uuid)
                return True
            if allocations.deployed_while_deleting(self._db, node_uuid, instance_uuid, fence):
                # Deleted while it was being built: it is deployed, so it is
                # torn down now.
                self._queue.delete(instance_uuid)
                return True
            given_up = self._free_node(host, node_uuid, epoch)
            if given_up is not None and given_up.provision_state is ProvisionState.ERROR:
                # Deployed after the sweeper gave the attempt up (freed the
                # node as error, rescheduled the build): the node's owner
                # tears it down rather than leave it active with nobody's
                # instance.
                LOG.info(
                    "Instance %s: deployed on node %s by %s after its build was given up; "
                    "tearing it down",
                    instance_uuid,
                    node_uuid,
                    host,
                )
                if self._clean_orphan is not None:
                    self._clean_orphan(given_up, instance_uuid)
                return False
        else:
            if self.attempt_failed(
                instance_uuid, node_uuid, fault or "unknown failure", clean=node_clean, fence=fence
            ):
                return True
            if self._is_current(host, node_uuid, epoch, instance_uuid, "build"):
                # From the owner about the instance the node hosts, but the
                # build is over (active, or being deleted): nothing to apply,
                # and the agent is told so (issue 16: it was told accepted).
                LOG.info(
                    "Instance %s: failure report from %s for node %s ignored: "
                    "the instance is no longer building",
                    instance_uuid,
                    host,
                    node_uuid,
                )
            return False
        # Nothing changed: a stale report, or one about a build that has
        # moved on (a duplicate).  Read only to answer and to log: every
        # write above was fenced in its own statement.
        return self._is_current(host, node_uuid, epoch, instance_uuid, "build")

    def _is_current(
        self, host: str, node_uuid: str, epoch: int, instance_uuid: str, what: str
    ) -> bool:
        """Whether a report is from the node's owner, at its epoch, about the
        instance the node hosts; a stale one is logged.

        Only to answer and to log: a read followed by a write is no fence (a
        takeover can come between them); the writes carry their own
        (:func:`conductor.db.ownership.holds`).
        """
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

    def _not_freed(self, host: str, instance_uuid: str, node_uuid: str, epoch: int) -> bool:
        """A teardown success that freed nothing: an orphan claim cleaned
        (True), or a stale or repeated report (False)."""
        free = self._free_node(host, node_uuid, epoch)
        if free is None:
            # Stale, or about an instance the node hosts no longer.
            return self._is_current(host, node_uuid, epoch, instance_uuid, "destroy")
        if free.provision_state is ProvisionState.AVAILABLE:
            # A report sent again after it was applied, or an orphan claim's
            # teardown that the sync saw finished first (it made the node
            # available): nothing to apply, and the report is refused as a
            # repeated one always was.
            LOG.info(
                "Instance %s: teardown report from %s for node %s: nothing to apply, "
                "the node hosts nothing and is available",
                instance_uuid,
                host,
                node_uuid,
            )
            return False
        LOG.info(
            "Orphan claim of instance %s on node %s cleaned by %s; "
            "the next Ironic sync pass puts the node back in service",
            instance_uuid,
            node_uuid,
            host,
        )
        return True

    def _free_node(self, host: str, node_uuid: str, epoch: int) -> Node | None:
        """*node_uuid* if it hosts no instance and *host* holds it at *epoch*.

        Read only to choose what to log and answer: a teardown report about
        such a node changes nothing (every write needs the instance on the
        node).
        """
        try:
            node = nodes.get_node(self._db, node_uuid)
        except NotFound:
            return None
        if node.instance_uuid is None and node.owner == host and node.owner_epoch == epoch:
            return node
        return None

    def attempt_failed(
        self, instance_uuid: str, node_uuid: str, fault: str, *, clean: bool, fence: Fence | None
    ) -> bool:
        """Count a failed attempt, free the node, reschedule or fail the build.

        False when nothing changed: the build moved on meanwhile (a success
        won the race) or ``fence`` (the reporting agent's) no longer holds.
        """
        max_attempts = self._max_attempts()
        attempts = allocations.fail_attempt(
            self._db,
            node_uuid,
            instance_uuid,
            fault,
            node_clean=clean,
            fence=fence,
            max_attempts=max_attempts,
        )
        if attempts is None:
            return False
        self._nodes_freed()
        if attempts >= max_attempts:
            self._metrics.build_ended("error")
            LOG.warning(
                "Instance %s ERROR after %d attempts (last on node %s): %s",
                instance_uuid,
                attempts,
                node_uuid,
                fault,
            )
            self._notifier.instance(Event.FAIL, instance_uuid)
        else:
            self._metrics.build_ended("rescheduled")
            LOG.info(
                "Instance %s failed on node %s (attempt %d): rescheduling",
                instance_uuid,
                node_uuid,
                attempts,
            )
            self._queue.submit([instance_uuid])
        return True

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
        """An agent tore a node down (or failed to); fenced like build results.

        A teardown of a node that hosts no instance and is out of service
        (``error``), reported by its owner at its epoch, is the cleanup of
        an orphan claim the Ironic sync handed over
        (:meth:`conductor.lifecycle.routing.AgentRouter.clean_orphan`): accepted, and
        the instance's record is not touched (it may be ACTIVE on another
        node, or deleted long ago).  The next sync pass puts the node back
        in service once Ironic shows it available.
        """
        if not success:
            free = self._free_node(host, node_uuid, epoch)
            if free is not None and free.provision_state is not ProvisionState.AVAILABLE:
                LOG.warning(
                    "Orphan claim of instance %s on node %s: teardown by %s failed: %s; "
                    "the node stays out of service, the next Ironic sync pass asks again",
                    instance_uuid,
                    node_uuid,
                    host,
                    fault,
                )
                return True
            # The agent already waited out what retrying can fix (Ironic
            # locked or unreachable) and asked for the teardown again: this
            # failure needs someone to look.  The delete ends in ERROR with
            # the reason, the node stays allocated to the instance (out of
            # scheduling, never handed to another build dirty), and a new
            # delete tries again, as with Nova.
            if not self._is_current(host, node_uuid, epoch, instance_uuid, "destroy"):
                return False
            reason = f"teardown of node {node_uuid} by {host} failed: {fault}"
            if instances.set_state(self._db, instance_uuid, Event.TEARDOWN_FAILED, fault=reason):
                LOG.warning(
                    "Instance %s ERROR: %s; the node stays allocated to it until a delete succeeds",
                    instance_uuid,
                    reason,
                )
                self._notifier.instance(Event.TEARDOWN_FAILED, instance_uuid)
            return True
        if not allocations.release(self._db, node_uuid, instance_uuid, fence=Fence(host, epoch)):
            return self._not_freed(host, instance_uuid, node_uuid, epoch)
        self._nodes_freed()
        LOG.info("Instance %s deleted; node %s available again", instance_uuid, node_uuid)
        # Only if it was deleting: a repeated teardown of an instance in
        # error frees the node and keeps the error.
        self._notifier.instance(Event.TORN_DOWN, instance_uuid, if_state=VmState.DELETED)
        return True
