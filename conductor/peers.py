# SPDX-License-Identifier: Apache-2.0
"""Conductors are peers: when one goes, the others carry on its work.

Each conductor joins the conductors' group (``[coordination]
conductor_group``) with a lease, as the agents join theirs, so its peers see
it leave or die within the TTL.  Every build, teardown, instance action and
node power request in flight names the conductor carrying it
(:mod:`conductor.db.carriage`).  Each conductor, at every change of the group
and every few seconds, reads the records no live conductor carries and
adopts those that the ring over the live conductors gives it — a
compare-and-swap on the carrier read, so that one peer wins each record —
then drives them on at once, as their state says: schedule, route, tear
down, act or power.

A carrier is adopted from only once this conductor has seen it absent for
:data:`SETTLE_S`: a conductor that has just joined stores records before
every peer has read the group again, and those are its own.  Records carried
by nobody (a stopping conductor hands its records back before it leaves)
are adopted at the next pass.  Driving one record twice — two conductors
whose views differ for a moment — is safe: an allocation is a
compare-and-swap, an agent de-duplicates builds and teardowns by instance
id and actions by their request id.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from conductor.common.exception import ServiceUnavailable
from conductor.db import carriage
from conductor.db.engine import Database
from hashring.membership import Membership
from hashring.ring import Ring
from hashring.view import MembershipView, State

__all__ = ["SETTLE_S", "ConductorPeers"]

LOG = logging.getLogger(__name__)

#: Seconds a carrier must have been absent from this conductor's view
#: before its records are adopted (a few reads of the group).
SETTLE_S = 3.0
#: Seconds between two passes when the group does not change.
_PASS_S = 5.0


class ConductorPeers:
    """This conductor's membership of the conductors' group, and the adoption of orphaned work.

    :param redrive: drives on the instances adopted (by uuid), as their state says
    :param repower: routes again the node power requests adopted
    """

    def __init__(
        self,
        db: Database,
        membership: Membership,
        *,
        redrive: Callable[[Sequence[str]], None],
        repower: Callable[[Sequence[carriage.PowerRequest]], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._db = db
        self._membership = membership
        self._me = membership.member_id
        self._redrive = redrive
        self._repower = repower
        self._clock = clock
        self._wake = threading.Event()
        self._stopping = threading.Event()
        # carrier -> when this conductor first saw it absent (monotonic)
        self._absent_since: dict[str, float] = {}
        self._thread: threading.Thread | None = None

    @property
    def member_id(self) -> str:
        return self._me

    def on_change(self, _view: MembershipView) -> None:
        """Membership callback: a conductor joined or left; adopt what is left at once."""
        self._wake.set()

    def live(self) -> frozenset[str] | None:
        """The live conductors, or ``None`` while this conductor cannot tell
        (not connected to the coordination backend)."""
        view = self._membership.view
        if view is None or self._membership.state is not State.CONNECTED:
            return None
        return frozenset(view.members)

    def start(self) -> None:
        """Join the group and drive on the records this conductor carried
        before a restart; then adopt, in the background, at every change."""
        self._membership.start()
        self.resume_own()
        self._thread = threading.Thread(target=self._run, name="conductor-peers", daemon=True)
        self._thread.start()

    def resume_own(self) -> int:
        """Drive on what this conductor's previous incarnation carried (a
        restart under the same host): nobody else adopts a live carrier's work."""
        own = carriage.carried_by(self._db, self._me)
        if own:
            LOG.info("Conductor %s: resuming the %d records it carries", self._me, len(own))
            self._redrive(own)
        return len(own)

    def adopt(self) -> int:
        """One pass: adopt the records no live conductor carries that the
        ring gives this conductor, and drive them on.  How many."""
        live = self.live()
        if live is None:
            return 0
        ring = Ring(sorted(live | {self._me}))
        now = self._clock()
        for gone in [c for c in self._absent_since if c in live]:
            del self._absent_since[gone]

        def adoptable(carrier: str | None) -> bool:
            if carrier is None:
                return True
            if carrier in live:
                return False
            since = self._absent_since.setdefault(carrier, now)
            return now - since >= SETTLE_S

        instances = {
            uuid: carrier
            for uuid, carrier in carriage.orphaned(self._db, live).items()
            if adoptable(carrier) and ring.owner(uuid) == self._me
        }
        requests = {
            node: carrier
            for node, carrier in carriage.orphaned_power_requests(self._db, live).items()
            if adoptable(carrier) and ring.owner(node) == self._me
        }
        adopted = carriage.adopt(self._db, instances, self._me) if instances else []
        powers = carriage.adopt_power_requests(self._db, requests, self._me) if requests else []
        if adopted or powers:
            LOG.info(
                "Conductor %s: carrying on %d instances and %d node power requests of %s",
                self._me,
                len(adopted),
                len(powers),
                ", ".join(sorted({str(c) for c in (*instances.values(), *requests.values())})),
            )
            self._redrive(adopted)
            self._repower(powers)
        return len(adopted) + len(powers)

    def _pending(self) -> bool:
        """Whether a carrier seen absent is still settling (pass again soon)."""
        now = self._clock()
        return any(now - since < SETTLE_S for since in self._absent_since.values())

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self.adopt()
            except ServiceUnavailable as exc:  # the database: said once by it
                LOG.debug("Conductor %s: adoption pass skipped: %s", self._me, exc)
            except Exception:  # the next pass tries again
                LOG.exception("Conductor %s: adoption pass failed", self._me)
            self._wake.wait(1.0 if self._pending() else _PASS_S)
            self._wake.clear()

    def stop(self) -> None:
        """Hand this conductor's records back (its peers adopt them at once), then leave."""
        self._stopping.set()
        self._wake.set()
        try:
            released = carriage.release(self._db, self._me)
        except ServiceUnavailable as exc:
            # Its peers adopt them once its lease is gone, TTL later.
            LOG.warning("Conductor %s: records not handed back: %s", self._me, exc)
        else:
            if released:
                LOG.info("Conductor %s: handed %d records back to its peers", self._me, released)
        self._membership.stop(leave=True)
