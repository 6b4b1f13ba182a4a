# SPDX-License-Identifier: Apache-2.0
"""The power-state sync: an instance follows power changes made outside ringfleet.

The back end's power is the truth, as in Nova's power-state sync.  A node
can change power without ringfleet: an operator's ``baremetal node power
off`` in Ironic, a ``poweroff`` inside the OS, a BMC.  Its record follows
(the Ironic inventory sync mirrors Ironic's ``power_state``; an agent whose
driver polls power reports it), and then the instance it hosts:

* an **idle** ``active`` instance (no task in flight) whose node is found
  ``power off`` becomes ``stopped``
  (:attr:`~conductor.common.instance_states.Event.FOUND_OFF`), with the
  notification ``instance.power_off.end`` and one INFO line naming
  instance and node, so that ``instance start`` works;
* an idle ``stopped`` instance whose node is found ``power on`` is
  **reported, not acted on**: one WARNING per conductor, and ``fleet check``
  (``power-mismatch``) while it lasts.  Nova would power it off again
  (``force_stop``): a hypervisor guest cannot power itself on, so Nova takes
  it for its own record's drift.  A stopped bare-metal node can only be
  powered on by someone with access to Ironic or its BMC, on purpose (to
  inspect it, update its firmware, recover data): powering it off under
  them would undo their work and fight them.  The operator decides:
  ``instance start`` accepts it running, ``baremetal node power off``
  puts it back as the user left it.

Never while ringfleet acts: an instance with a task state (a stop, start,
reboot, rebuild, build or delete in flight) is left to its action, whose
answer decides.  Each change is a compare-and-swap
(:func:`conductor.db.power_states.mark_found_off`) on the instance being
idle and ``active``, its record unchanged since the power was observed, and
its node still recorded ``power off``: a user's verb that landed meanwhile
wins, and two conductors change it once.

Two passes look, with two ways of knowing the observation is newer than
the instance's last change:

* each Ironic inventory pass (:meth:`InstancePowerSync.follow_listing`),
  at once, for the nodes it listed with a settled power (no
  ``target_power_state``) and ``active`` in Ironic: the listing began at
  ``seen_at``, so an instance record unchanged since then is older than
  what the listing showed;
* every ``[conductor] power_sync_interval``
  (:meth:`InstancePowerSync.run`), for every node, whoever recorded its
  power (an agent's report): the instance *and* the node record must have
  been unchanged for a whole interval.  An agent reads power without
  holding the node's action, so a report read just before an action's
  power change can land just after the action's answer; the agent's next
  read (every ``report_interval``) corrects it, and a record quiet for an
  interval above twice that is not such a report.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Collection, Mapping
from typing import Final

from conductor.common.clock import utcnow
from conductor.common.instance_states import Event
from conductor.common.objects import PowerState, VmState
from conductor.db import power_states
from conductor.db.engine import Database
from conductor.notifications import Notifier

__all__ = ["MAX_PER_PASS", "InstancePowerSync", "PowerSyncSummary", "report_after"]

LOG = logging.getLogger(__name__)

#: Mismatches one pass handles at most (the rest: the next passes).
MAX_PER_PASS: Final = 1000


@dataclasses.dataclass
class PowerSyncSummary:
    """What one pass did: instances stopped, stopped ones found powered on."""

    stopped: int = 0
    found_on: int = 0


def report_after(power_sync_interval: float, ironic_sync_interval: float, default: float) -> float:
    """Seconds a power mismatch's records must stay unchanged before
    ``fleet check`` reports it: two passes of the slower sync (the first
    may have begun just before the change; the second would have stopped
    an ``active`` instance found off), or ``default`` when neither runs."""
    longest = max(power_sync_interval, ironic_sync_interval)
    return 2 * longest if longest > 0 else default


class InstancePowerSync:
    """Makes instances follow their nodes' observed power (module docstring)."""

    def __init__(self, db: Database, notifier: Notifier | None = None) -> None:
        self._db = db
        self._notifier = notifier if notifier is not None else Notifier.disabled()
        # Stopped instances found powered on and said (WARNING) by this
        # conductor, with their node: said again only after it ended.
        self._said: dict[str, str] = {}

    def run(self, interval: float) -> PowerSyncSummary:
        """The periodic pass: every mismatch whose instance and node records
        have been unchanged for ``interval`` seconds.

        :raises DatabaseUnavailable: the database cannot be used
        """
        quiet_since = utcnow() - datetime.timedelta(seconds=interval)
        found = self._mismatches(unchanged_since=quiet_since, node_unchanged_since=quiet_since)
        return self._follow(found, quiet_since, scope=None)

    def follow_listing(
        self, observed: Mapping[str, PowerState], seen_at: datetime.datetime
    ) -> PowerSyncSummary:
        """After a back-end listing that began at ``seen_at`` and showed
        ``observed`` (settled power, by node uuid) and was mirrored: the
        mismatches on those nodes whose instance is unchanged since then.

        :raises DatabaseUnavailable: the database cannot be used
        """
        # All of them, then those of the listing: mismatches are few, a
        # listing may be the whole fleet (not a condition to send).  Only
        # what the listing itself showed: a record written since (an
        # action's answer) is the next pass's to compare.
        found = [
            m
            for m in self._mismatches(unchanged_since=seen_at)
            if m.node_uuid in observed and observed[m.node_uuid].value == m.power_state
        ]
        return self._follow(found, seen_at, scope=observed.keys())

    def _mismatches(
        self,
        *,
        unchanged_since: datetime.datetime,
        node_unchanged_since: datetime.datetime | None = None,
    ) -> list[power_states.PowerMismatch]:
        """Up to :data:`MAX_PER_PASS` of each kind: stopped instances found on
        (which stay, reported) never keep active ones found off waiting."""
        found: list[power_states.PowerMismatch] = []
        for vm_state in (VmState.ACTIVE, VmState.STOPPED):
            found += power_states.power_mismatches(
                self._db,
                unchanged_since=unchanged_since,
                node_unchanged_since=node_unchanged_since,
                vm_state=vm_state,
                sample=MAX_PER_PASS,
            )[1]
        return found

    def _follow(
        self,
        found: list[power_states.PowerMismatch],
        unchanged_since: datetime.datetime,
        scope: Collection[str] | None,
    ) -> PowerSyncSummary:
        summary = PowerSyncSummary()
        found_on: dict[str, str] = {}
        for mismatch in found:
            if mismatch.vm_state == VmState.ACTIVE.value:
                if self._stop(mismatch, unchanged_since):
                    summary.stopped += 1
            else:
                found_on[mismatch.instance_uuid] = mismatch.node_uuid
                self._say_found_on(mismatch)
        summary.found_on = len(found_on)
        self._forget_ended(found_on, scope)
        return summary

    def _forget_ended(self, found_on: Mapping[str, str], scope: Collection[str] | None) -> None:
        """Forget the mismatches said that ended (in this pass's scope), so that
        one coming back is said again.  Not found by this pass is not ended:
        a pass leaves out the records changed lately; read them all again."""
        unseen = {
            instance: node
            for instance, node in self._said.items()
            if instance not in found_on and (scope is None or node in scope)
        }
        if not unseen:
            return
        _total, still = power_states.power_mismatches(
            self._db, node_uuids=set(unseen.values()), sample=len(unseen)
        )
        lasting = {m.instance_uuid for m in still if m.vm_state == VmState.STOPPED.value}
        for instance in unseen.keys() - lasting:
            del self._said[instance]

    def _stop(
        self, mismatch: power_states.PowerMismatch, unchanged_since: datetime.datetime
    ) -> bool:
        if not power_states.mark_found_off(
            self._db, mismatch.instance_uuid, mismatch.node_uuid, unchanged_since=unchanged_since
        ):
            # A verb, an answer or another conductor came first: theirs.
            LOG.debug(
                "Instance %s on node %s changed meanwhile: not stopped for its power",
                mismatch.instance_uuid,
                mismatch.node_uuid,
            )
            return False
        LOG.info(
            "Instance %s stopped: its node %s was found powered off outside ringfleet "
            "(owner %s); 'instance start' powers it on",
            mismatch.instance_uuid,
            mismatch.node_uuid,
            mismatch.owner or "none",
        )
        self._notifier.instance(Event.FOUND_OFF, mismatch.instance_uuid)
        return True

    def _say_found_on(self, mismatch: power_states.PowerMismatch) -> None:
        if self._said.get(mismatch.instance_uuid) == mismatch.node_uuid:
            return
        self._said[mismatch.instance_uuid] = mismatch.node_uuid
        LOG.warning(
            "Instance %s is stopped but its node %s was found powered on outside ringfleet "
            "(owner %s): left running; 'instance start' accepts it, or power the node off",
            mismatch.instance_uuid,
            mismatch.node_uuid,
            mismatch.owner or "none",
        )
