# SPDX-License-Identifier: Apache-2.0
"""The compute agent's reconciler: its loop, its failures, resuming work after a join.

:class:`Reconciler` is a base of :class:`compute_agent.service.AgentService`:
the attributes below are the service's.  Every membership change (and every
``reconcile_interval``) the loop reads what changed of the agent's share,
reconciles its held nodes with the ring, and once per validation of its
claims has its in-flight work routed to it again.

A quiet agent slows down (:class:`QuietPasses`): after a pass that read no
change and had nothing to do the next waits twice ``reconcile_interval``
(a burst of changes may go on), after two such passes in a row
``quiet_reconcile_interval``, as after a pass that settled the agent's
share (took it whole, or released what a new view gives peers); anything
else -- a change read, a refusal, a membership change (which also wakes
the loop at once) -- brings it back to ``reconcile_interval``.  Every
agent's change reads are a call to a conductor; at any fixed pace their
sum grows with the agent count, and was most of what a quiet fleet cost
its conductor.  What others change while the fleet is quiet a conductor
says (``inventory_changed``, a fanout cast after an operator's change of
nodes): the next pass comes at once.
So it does when the agent's broker connection comes back: a cast sent
while it was away is lost if its queue went meanwhile (a broker restart,
or ``rabbit_transient_queues_ttl`` passed without a consumer).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import oslo_messaging as messaging
from oslo_config import cfg

from compute_agent.ownership import OwnershipManager, ReconcileResult
from compute_agent.placement_report import PlacementReporter
from conductor.common import broker_outage, rpc
from conductor.common.exception import InvalidInput, first_line
from conductor.common.repeated_failure import RepeatedFailure
from conductor.rpcapi import ConductorAPI
from hashring.membership import MembershipView

__all__ = ["QuietPasses", "Reconciler"]

#: The service's logger: the reconciler's lines are the agent's.
LOG = logging.getLogger("compute_agent.service")

#: Seconds before retrying a reconcile the conductors' view was behind for.
_RETRY_SOON = 0.5


class QuietPasses:
    """The wait before the next pass: ``interval``; twice that after a quiet
    pass; ``quiet_interval`` after two in a row (never below ``interval``).

    A pass that settled the agent's share -- took all of it (every claim
    granted), or released all that a new view gives peers -- counts as two,
    on a new view too: what it did is done, what a peer does next in its
    share -- a release, a hand-over -- is hinted, and a membership change
    wakes the loop.  (At a cold start of 100 agents, each pass that only
    confirmed it was one call per agent: first a sixth of the conductor's
    calls, then, at twice the interval, 70-86 calls of 286; at a join, two
    calls per staying agent.)
    """

    def __init__(self) -> None:
        self._quiet = 0  # quiet passes in a row
        self._view: MembershipView | None = None
        self._generation: int | None = None

    def unchanged(self, view: MembershipView, generation: int) -> bool:
        """Whether the last pass was quiet and ``view`` and the join
        ``generation`` are still those it ran on: a wake-up then has
        nothing new to read (a heartbeat that came late: SUSPENDED, then
        CONNECTED again in the same generation)."""
        return self._quiet > 0 and view == self._view and generation == self._generation

    def delay(
        self,
        interval: float,
        quiet_interval: float,
        *,
        view: MembershipView,
        rows_read: int,
        result: ReconcileResult | None,
        generation: int = 0,
        acted: int = 0,
    ) -> float:
        """After a pass on ``view`` (in join ``generation``) that read
        ``rows_read`` inventory rows and ended in ``result`` (``None``:
        postponed), having released or claimed ``acted`` nodes before its
        read (a new view's releases, a departed peer's arcs): seconds until
        the next."""
        same_view, self._view = view == self._view, view
        self._generation = generation
        # Settled, and nothing refused, lost or waits: all that may differ
        # between a quiet pass and one that settled the share is what it
        # claimed and released.
        done = (
            result is not None
            and result.settled
            and not (result.refused or result.lost or result.rehomed)
            and not result.retry_soon
            and result.retry_in is None
        )
        moved = acted > 0 or (result is not None and (result.claimed > 0 or result.released > 0))
        quiet = done and same_view and rows_read == 0 and not moved
        self._quiet = self._quiet + 1 if quiet else 2 if done and moved else 0
        if self._quiet == 0:
            return interval
        if self._quiet == 1:
            return max(interval, min(2.0 * interval, quiet_interval))
        return max(interval, quiet_interval)


class Reconciler:
    """The reconcile loop of :class:`~compute_agent.service.AgentService`."""

    conf: cfg.ConfigOpts
    host: str
    membership: Any
    ownership: OwnershipManager | None
    placement: PlacementReporter | None
    _conductor: ConductorAPI | None
    _stopped: threading.Event
    _wake: threading.Event

    def _stop_superseded(self, incarnation: str) -> None:
        raise NotImplementedError

    def _init_reconciler(self) -> None:
        """The reconciler's own state (called by the service's ``__init__``)."""
        self._reconcile_failures = RepeatedFailure(
            LOG,
            "Agent %s: reconcile failed: %s; retrying",
            "Agent %s: reconcile failed again: %s",
            "Agent %s: reconcile works again",
            self.host,
        )
        # The join generation whose in-flight work the conductors were last
        # asked to route to us again (see _resume_work).
        self._resumed_generation = -1
        self._quiet_passes = QuietPasses()
        # A conductor said an operator changed nodes (inventory_changed).
        self._hinted = False

    def inventory_changed(self, groups: list[str] | None) -> None:
        """A conductor's hint that an operator changed nodes of ``groups``
        (``None``: any): the next pass now, at the busy pace, if we may serve
        one of them.  A quiet agent otherwise learns of such a change only
        at its next quiet pass, ``quiet_reconcile_interval`` away."""
        ours = self.conf.compute_agent.groups
        if groups is not None and ours and not set(groups) & set(ours):
            return
        self._hinted = True
        self._wake.set()

    def broker_reconnected(self) -> None:
        """A broker connection of this process was made again: a hint cast
        while it was down is lost if its fanout queue went meanwhile (a
        broker restart, the queue's expiry), so the next pass comes now, as
        after a hint."""
        self.inventory_changed(None)

    def _reconcile_loop(self) -> None:
        assert self.ownership is not None
        delay = self.conf.compute_agent.reconcile_interval
        due = time.monotonic() + delay
        while not self._stopped.is_set():
            self._wake.wait(max(due - time.monotonic(), 0.0))
            self._wake.clear()
            delay = self.conf.compute_agent.reconcile_interval
            if self._stopped.is_set():
                return
            superseded = self.membership.superseded_by
            if superseded is not None:
                # Also here: it may come while the membership is LOST already,
                # with no state change to tell us.
                self._stop_superseded(superseded)
                return
            view = self.membership.view
            if view is None or not self.membership.can_act():
                # Look again in a moment (a state change wakes us sooner),
                # but a suspension does not cut a quiet wait short either.
                due = max(due, time.monotonic() + delay)
                continue
            generation = self.membership.join_generation
            # Taken before the read: a hint that comes during it (for a
            # change it may have missed) makes another pass.
            hinted, self._hinted = self._hinted, False
            if hinted:
                self._quiet_passes = QuietPasses()
                # Nodes moved or handed over may be ours outside our share.
                self.ownership.expect_owner_changes()
            elif time.monotonic() < due and self._quiet_passes.unchanged(view, generation):
                continue  # the quiet wait goes on: nothing to read yet
            try:
                delay = self._reconcile_pass(view, generation, delay)
            except Exception as exc:  # the next wake-up tries again, soon
                self._quiet_passes = QuietPasses()
                self._reconcile_failed(exc)
                # E.g. the conductors have not seen us join yet: a moment,
                # not a whole interval (invariant 2: no orphans for long).
                delay = _RETRY_SOON
            else:
                self._reconcile_failed(None)
            due = time.monotonic() + delay

    def _reconcile_pass(self, view: MembershipView, generation: int, delay: float) -> float:
        """One pass of the loop on ``view``: release, read, reconcile; the wait
        before the next one."""
        assert self.ownership is not None
        # By share, one read a pass, deep when due: what it reads back is our
        # arcs' changes by others, few (our own claims are left out), so a
        # quiet agent costs its conductor one change read and one owner read
        # per interval.  The whole fleet (an older conductor): the changes
        # since the last refresh first, the deep re-read (for a commit that
        # came late, which is rare) after acting: its window reaches back to
        # the previous deep one, and after a cold start of 100k nodes that
        # was the whole fleet again, 11 s under load, before the pass could
        # claim the last nodes a peer had just released.
        by_share = self.ownership.reads_by_share
        # What a new view gives peers goes first, and what it gives us from
        # nobody's: a joiner waits for the former, invariant 2 for the latter,
        # and our reads wait their turn at a conductor.
        released = self.ownership.release_first(view)
        claimed = self.ownership.claim_first(view)
        if claimed is None:
            return _RETRY_SOON  # the conductors may not have seen a peer leave yet
        acted = released + claimed
        rows = self.ownership.refresh_inventory(deep=None if by_share else False, view=view)
        result = self.ownership.reconcile(view)
        if (
            self.placement is not None
            and result is not None
            and (acted or result.claimed or result.released or result.lost)
        ):
            self.placement.wake()  # its providers are ours to write now
        if not by_share and self.ownership.deep_refresh_due():
            rows += self.ownership.refresh_inventory(deep=True, view=view)
        delay = self._quiet_passes.delay(
            delay,
            self.conf.compute_agent.quiet_reconcile_interval,
            view=view,
            rows_read=rows,
            result=result,
            generation=generation,
            acted=acted,
        )
        # A pass on a view that only took arcs from us read nothing: the
        # next reads no later than the quiet interval after the last read.
        options = self.conf.compute_agent
        latest = options.quiet_reconcile_interval - self.ownership.read_age()
        delay = min(delay, max(options.reconcile_interval, latest))
        if result is not None and result.retry_soon:
            delay = _RETRY_SOON
        elif result is not None and result.retry_in is not None:
            # A peer's restart hold ends: its nodes may be claimed then.
            delay = min(delay, result.retry_in + _RETRY_SOON)
        self._resume_work()
        return delay

    def _reconcile_failed(self, exc: Exception | None) -> None:
        """One line per new reason a reconcile fails, one INFO when it works again.

        While the conductor's database is down every try (two a second)
        fails alike: the operator needs to know once, not 7,000 times.  A
        conductor that does not see us in the group yet is no fault: we
        joined since it last read the group (a restart), and it will.
        """
        if exc is None:
            self._reconcile_failures.worked()
        elif isinstance(exc, InvalidInput) and exc.is_not_live_member:
            self._reconcile_failures.failed(
                "the conductor does not see this agent in the group yet", logging.INFO
            )
        elif isinstance(exc, messaging.MessagingTimeout) and not isinstance(exc, rpc.NoConsumer):
            # Each names its message id: one reason for them all, not a
            # WARNING per call.
            self._reconcile_failures.failed(
                f"no reply from a conductor within {self.conf.compute_agent.conductor_timeout:g} s",
                broker_outage.warning_level(),
            )
        else:
            self._reconcile_failures.failed(first_line(exc))

    def _resume_work(self) -> None:
        """Once per validation of our claims: have our in-flight work routed to us.

        A new process (a restart under the same host) or a re-joined one
        (after LOST) holds its nodes but knows nothing of the builds and
        teardowns accepted before: the conductor routes them again, and
        :class:`NodeActions` resumes each from what the back end shows.
        Failures are retried on the next pass.
        """
        assert self.ownership is not None and self._conductor is not None
        generation = self.ownership.validated_generation
        if generation < 0 or generation == self._resumed_generation:
            return
        if self.ownership.held_when_validated == 0:
            # Work in flight is on nodes we held (an instance pins its node;
            # those we claim later come with theirs, re-homed): none here.
            # (At a cold start of 100 agents, a sixth of the conductor's calls.)
            self._resumed_generation = generation
            return
        if not self._conductor.can_send_version("1.4"):
            # Pinned below resume_work: the sweeper re-drives, as before.
            self._resumed_generation = generation
            return
        try:
            out = self._conductor.resume_work(self.host)
        except messaging.RemoteError as exc:
            if exc.exc_type not in rpc.NOT_SERVED:
                raise
            LOG.warning(
                "Agent %s: the conductor cannot resume work (%s); in-flight builds wait "
                "for its sweeper",
                self.host,
                exc.exc_type,
            )
        else:
            if out.get("builds") or out.get("teardowns"):
                LOG.info(
                    "Agent %s: %s builds and %s teardowns in flight on its nodes routed to it "
                    "again",
                    self.host,
                    out.get("builds"),
                    out.get("teardowns"),
                )
        self._resumed_generation = generation
