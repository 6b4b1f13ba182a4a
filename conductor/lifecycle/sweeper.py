# SPDX-License-Identifier: Apache-2.0
"""The last resort for builds and teardowns that make no progress.

Recovery does not wait for this: results are re-sent until taken, a
restarted agent's work is re-driven at once (``resume_work``), re-homed
nodes' builds are routed to their new owner.  The sweeper covers what is
left: a hung driver, a lost message nobody retried.
"""

from __future__ import annotations

import datetime
import logging

from conductor.common.clock import utcnow
from conductor.common.exception import NotFound
from conductor.common.objects import Instance, ProvisionState, VmState
from conductor.db import instance_sweeps, instances, nodes
from conductor.db.engine import Database
from conductor.lifecycle.queue import BuildQueue
from conductor.lifecycle.results import BuildResults, CleanOrphan

__all__ = ["BuildSweeper"]

LOG = logging.getLogger(__name__)


class BuildSweeper:
    """Finds builds and teardowns without progress for ``build_timeout``."""

    def __init__(
        self,
        db: Database,
        queue: BuildQueue,
        results: BuildResults,
        *,
        clean_orphan: CleanOrphan | None = None,
    ) -> None:
        """``clean_orphan``: how a timed-out attempt's node is handed to its
        owner for a teardown (``None``: it is only freed as ``error``)."""
        self._db = db
        self._queue = queue
        self._results = results
        self._clean_orphan = clean_orphan
        # (instance, node, attempt) already re-routed once
        self._swept: set[tuple[str, str | None, int]] = set()

    def sweep(self, build_timeout: float) -> int:
        """Nothing stays BUILDING forever: act on builds without progress.

        A stuck build without a node is queued again; one with a node is
        routed again (the agent de-duplicates; a lost result is re-sent);
        one still stuck a whole ``build_timeout`` later counts as a failed
        attempt: the node is freed as ``error`` (its state is unknown), the
        build is rescheduled or goes to ERROR, and the node's owner is asked
        to tear the node down: a deploy that hangs stops there and then, one
        that was only slow is not left active with nobody's instance.
        Returns how many builds it acted on.
        """
        older_than = utcnow() - datetime.timedelta(seconds=build_timeout)
        stuck = instance_sweeps.stuck_builds(self._db, older_than)
        self._forget_moved_on(stuck)
        deletes = instance_sweeps.stuck_deletes(self._db, older_than)
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
        instance_sweeps.touch(self._db, [d.uuid for d in deletes] + unplaced + reroute)
        for deleting in deletes:
            self._queue.delete(deleting.uuid)
        self._queue.submit(unplaced)
        for uuid in reroute:
            self._queue.reroute(uuid)
        for uuid, node_uuid in timed_out:
            LOG.warning(
                "Instance %s: no progress on node %s for %.0f s", uuid, node_uuid, build_timeout
            )
            # The conductor's own decision, not a report: no fence.
            if self._results.attempt_failed(
                uuid,
                node_uuid,
                f"build timed out after {build_timeout:.0f} s",
                clean=False,
                fence=None,
            ):
                self._tear_down(uuid, node_uuid)
        return len(stuck)

    def _tear_down(self, instance_uuid: str, node_uuid: str) -> None:
        """Ask the owner of a timed-out attempt's node to tear it down.

        The owner stops the deploy if it still runs (as for a delete of a
        deploying instance) and reports the teardown, which leaves the node
        ``error`` and free (:meth:`BuildResults.report_destroyed`).  Best
        effort: a deploy that ends anyway is reported, and its late success
        asks again (:meth:`BuildResults.report_result`).
        """
        if self._clean_orphan is None:
            return
        try:
            node = nodes.get_node(self._db, node_uuid)
        except NotFound:
            return
        if node.instance_uuid is not None or node.provision_state is not ProvisionState.ERROR:
            return  # taken meanwhile: not ours to tear down
        self._clean_orphan(node, instance_uuid)

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
