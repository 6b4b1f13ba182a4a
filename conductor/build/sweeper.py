"""The last resort for builds and teardowns that make no progress.

Recovery does not wait for this: results are re-sent until taken, a
restarted agent's work is re-driven at once (``resume_work``), re-homed
nodes' builds are routed to their new owner.  The sweeper covers what is
left: a hung driver, a lost message nobody retried.
"""

from __future__ import annotations

import datetime
import logging

from conductor.build.queue import BuildQueue
from conductor.build.results import BuildResults
from conductor.common.clock import utcnow
from conductor.common.objects import Instance, VmState
from conductor.db import instances
from conductor.db.engine import Database

__all__ = ["BuildSweeper"]

LOG = logging.getLogger(__name__)


class BuildSweeper:
    """Finds builds and teardowns without progress for ``build_timeout``."""

    def __init__(self, db: Database, queue: BuildQueue, results: BuildResults) -> None:
        self._db = db
        self._queue = queue
        self._results = results
        # (instance, node, attempt) already re-routed once
        self._swept: set[tuple[str, str | None, int]] = set()

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
            self._queue.delete(deleting.uuid)
        self._queue.submit(unplaced)
        for uuid in reroute:
            self._queue.reroute(uuid)
        for uuid, node_uuid in timed_out:
            LOG.warning(
                "Instance %s: no progress on node %s for %.0f s", uuid, node_uuid, build_timeout
            )
            # The conductor's own decision, not a report: no fence.
            self._results.attempt_failed(
                uuid,
                node_uuid,
                f"build timed out after {build_timeout:.0f} s",
                clean=False,
                fence=None,
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
