# SPDX-License-Identifier: Apache-2.0
"""Claiming an agent's share by its arcs: the free nodes of its rings in one call each.

At a cold start or a join an agent's share is thousands of nodes that nobody
holds.  Claimed by uuid they went 500 to a call, one call after another on
one conductor (206 to 302 calls at 100k nodes on 10 agents).  Here the
agent sends the ring of each of its shares and the conductor takes, in one
statement, the unpinned nodes of its arcs that have no live owner
(``claim_share``, conductor API 1.19; :mod:`conductor.db.share_claims`),
each with a new epoch as a claim by uuid would have.  What that leaves --
nodes a live or restarting owner still holds, pinned nodes of a departed
one -- :class:`compute_agent.ownership.OwnershipManager` claims by uuid, as
before, and learns from the refusals.

:class:`ShareClaimer` is a base of the manager, like
:class:`compute_agent.inventory_reads.InventoryReader`: the attributes
below are the manager's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, NamedTuple

from compute_agent.conductor_client import OwnershipCalls
from compute_agent.inventory_reads import PAGE, ShareKey, gains, share_rings, share_where
from conductor.common.exception import InvalidInput
from conductor.common.objects import Ownership
from hashring.membership import Membership, MembershipView

__all__ = ["ShareClaimer"]

#: The ownership manager's logger: these claims are its own.
LOG = logging.getLogger("compute_agent.ownership")

#: Nodes one call may take: a call's reply stays a few hundred kilobytes.
_LIMIT = 10_000
#: Passes that claim first again, half a second apart, while the conductors
#: may not have seen a peer leave, when the conductor does not say whether it
#: has (older than its ``still_live``: :meth:`ShareClaimer.claim_first`).
_FIRST_CLAIM_TRIES = 4


class ShareClaimed(NamedTuple):
    """What :meth:`ShareClaimer._claim_share` did."""

    #: The nodes newly ours.
    claimed: int
    #: Stopped because our share changed: the rest is the next pass's.
    stopped: bool
    #: The peers gone from the ring the arcs were gained from that the
    #: conductor still sees live (it took none of their nodes); ``None``: it
    #: did not say (an older conductor, or no arcs gained).
    still_live: frozenset[str] | None = None


class ShareClaimer:
    """Claims the free nodes of the manager's share by arcs (a base of the manager)."""

    host: str
    _conductor: OwnershipCalls
    _membership: Membership
    _groups: list[str]
    _lock: threading.Lock
    _held: dict[str, int]
    _inventory: dict[str, str]
    _inventory_version: int
    _inventory_groups: set[str]
    _refused_by: dict[str, tuple[str, float]]
    #: Our own writes' change times (:meth:`InventoryReader._wrote`).
    _wrote: Callable[[str], None]
    _share: tuple[Hashable, frozenset[str]] | None
    _pinned_elsewhere: set[str]
    _read_rings: dict[ShareKey, dict[str, Any]] | None
    _reconcile_lock: threading.RLock
    _claims_after: float
    #: Nodes claimed by reads (:meth:`ShareClaimer._claim_and_read`), not yet
    #: counted in a pass's result.
    _claimed_by_reads: int
    #: When the passes that found nothing to claim first where a peer left
    #: began, and how many, by view.
    _first_claim_tries: dict[frozenset[str], tuple[float, int]]
    #: The first pages of the arcs :meth:`claim_first` claimed, read by its
    #: calls, each with the read it stands for (:meth:`_gained_page`).
    _gained_pages: list[tuple[dict[str, Any], dict[str, Any]]]

    def needs_revalidation(self) -> bool:
        raise NotImplementedError

    def _validates_by_claim(self) -> bool:
        raise NotImplementedError

    def _replace_held(self, generation: int, owned: Sequence[Ownership]) -> tuple[int, int]:
        raise NotImplementedError

    def claim_first(self, view: MembershipView) -> int | None:
        """On a view that gave us arcs (a peer left, or died), claim their free
        nodes by arcs now, before the read of them; the nodes claimed.

        The conductor finds them (unpinned, no live owner), and the read that
        follows learns them as ours.  After a kill -9 every survivor's read
        of what it gained waited its turn at a conductor with all the
        others' before its claim (invariant 2: no orphans past the TTL +
        2 s).  Pins are claimed by uuid after the read, as before; nothing
        before the first read, while the held set awaits its re-validation,
        or while claims wait for the view to settle after a (re-)join.  The
        call that claims also reads the first page of those arcs, for the
        read that follows (:meth:`_gained_page`): at a kill -9 of one of 100
        agents a call of each survivor's five.

        ``None``: nothing taken where a peer left, and the conductor still
        sees it live (each process reads the group on its own schedule: at
        100 agents on two cores the conductor saw a kill -9 3.5 s after the
        first agents, whose four tries half a second apart had all found
        nothing, and the nodes waited for later passes, 20 s in all): the
        pass comes back in a moment to claim again before its reads, until
        the conductor has seen the peer leave too, for a membership TTL at
        most (:meth:`_claim_again`).
        """
        self._gained_pages = []
        previous = self._read_rings
        if previous is None or not self._may_claim_now(view):
            return 0
        rings = share_rings(view, self.host, self._groups)
        gained = {
            key: previous.get(key)
            for key, ring in rings.items()
            if ring != previous.get(key) and gains(self.host, previous.get(key), ring)
        }
        if not gained:
            self._first_claim_tries = {}  # the next departure's tries start afresh
            return 0
        with self._reconcile_lock:
            by_share = self._claim_share(view, gained)
        if by_share is None:
            return 0
        if by_share.claimed:
            self._first_claim_tries = {}
            LOG.info(
                "Agent %s claimed %d nodes of the arcs the view of %d members gave it, "
                "before reading them",
                self.host,
                by_share.claimed,
                len(view.members),
            )
            return by_share.claimed
        left = any(
            before and before["members"].keys() - view.members.keys() for before in gained.values()
        )
        return self._claim_again(view, by_share.still_live) if left else 0

    def _claim_again(self, view: MembershipView, still_live: frozenset[str] | None) -> int | None:
        """After a claim of the arcs a peer's departure gave us took nothing:
        ``None`` to claim them again in a moment, 0 to read them now.

        Again while the conductor still sees a departed peer live (it took
        none of its nodes), for a membership TTL at most: the conductor's
        view is no older than that, or the peer is back.  A conductor that
        does not say (older): a few times.  One that saw them all leave took
        all there was (the rest is pinned, or held for a restart).
        """
        members = frozenset(view.members)
        now = time.monotonic()
        began, tries = self._first_claim_tries.get(members, (now, 0))
        if still_live is None:
            if tries >= _FIRST_CLAIM_TRIES:
                return 0
        elif not still_live or now - began > self._membership.ttl:
            return 0
        elif not tries:
            LOG.info(
                "Agent %s: the conductor still sees %s live; claiming their arcs again shortly",
                self.host,
                ", ".join(sorted(still_live)),
            )
        self._first_claim_tries = {members: (began, tries + 1)}
        return None

    def _may_claim_now(self, view: MembershipView) -> bool:
        """Whether claims on ``view`` may be made now: we are of it and
        connected, our held set was re-validated since we (re-)joined (or
        the claim re-reads it: :meth:`_claim_and_read`), and the view had
        its time to settle after that."""
        return (
            self.host in view.members
            and self._membership.can_act()
            and (not self.needs_revalidation() or self._validates_by_claim())
            and time.monotonic() >= self._claims_after
        )

    def _claim_and_read(self, query: Mapping[str, Any], page: int) -> dict[str, Any] | None:
        """The first page (at most ``page`` nodes) of our whole share of
        ``query``'s ring, from the call that claims its free nodes (conductor
        API 1.26); ``None`` when the conductor claims or reads otherwise:
        read as usual then, and the pass claims.

        At a cold start an agent read its share, then claimed it: two calls,
        each with its turn at a conductor, for the same arcs.  The nodes
        taken are ours before the page is learnt, which lists them as ours.
        Our held set is re-read with it if due (a new process's first read):
        what we held before it, then what it took.
        """
        with self._reconcile_lock:
            generation = self._membership.join_generation
            try:
                out = self._conductor.claim_share(
                    self.host,
                    query["ring"],
                    groups=query["groups"],
                    exclude_groups=query["exclude_groups"],
                    limit=_LIMIT,
                    read=page,
                    held=self.needs_revalidation(),
                )
            except InvalidInput as exc:
                if not exc.is_not_live_member:
                    raise
                # The conductor has not seen us join yet: read now, claim later.
                return None
            if out is None:
                return None
            if "held" in out:
                self._replace_held(generation, out["held"])
            claimed = self._took_share(out)
        with self._lock:
            self._claimed_by_reads += claimed
        if claimed:
            LOG.info(
                "Agent %s claimed %d nodes of its share with its first read of it",
                self.host,
                claimed,
            )
        share: dict[str, Any] | None = out.get("share")
        return share

    def _gained_page(self, query: Mapping[str, Any]) -> dict[str, Any] | None:
        """The first page of ``query``'s read of gained arcs, if the call of
        :meth:`claim_first` that claimed them read it (once)."""
        for index, (read, page) in enumerate(self._gained_pages):
            if all(query.get(name) == value for name, value in read.items()):
                del self._gained_pages[index]
                return page
        return None

    def claimed_by_reads(self) -> int:
        """The nodes reads claimed (:meth:`_claim_and_read`) since last asked."""
        with self._lock:
            claimed, self._claimed_by_reads = self._claimed_by_reads, 0
        return claimed

    def _claim_share_first(
        self, nodes: list[str], view: MembershipView
    ) -> tuple[list[str], int, bool]:
        """Before claiming ``nodes`` by uuid: the free ones of our share by arcs.

        Returns what is left to claim by uuid (a live or restarting owner's
        nodes, pins; all of them when the conductor claims by uuid only),
        the nodes newly ours, and whether the pass stops (our share changed).
        Only when some unpinned node is wanted: pins are claimed by uuid.
        """
        with self._lock:
            unpinned = any(n not in self._pinned_elsewhere for n in nodes)
        if not unpinned or self._read_rings is None:
            return nodes, 0, False
        by_share = self._claim_share(view)
        if by_share is None:
            return nodes, 0, False
        claimed, stopped, _still_live = by_share
        if stopped:
            LOG.info("Agent %s: the membership changed; claims left for the next pass", self.host)
            return [], claimed, True
        with self._lock:
            return [n for n in nodes if n not in self._held], claimed, False

    def _claim_share(
        self,
        view: MembershipView,
        gained: Mapping[ShareKey, dict[str, Any] | None] | None = None,
    ) -> ShareClaimed | None:
        """Claim the free unpinned nodes of our shares of ``view``, or ``None``
        when the conductor cannot (older than 1.19).  ``gained``: only those shares,
        each of the arcs gained since the ring given (all of it for ``None``),
        and the first page of each read by its claim, kept when that one
        call took all there was (a later call's nodes would be on the page
        as another's).

        Stops when the membership's latest view gives us another share: the
        rest is the next pass's, on the new view.  A node taken that our
        inventory did not have yet (added since our last read) enters it
        with its group: ours by the ring, it is desired, not released on
        the next pass.
        """
        claimed = calls = 0
        still_live: set[str] | None = None
        rings = share_rings(view, self.host, self._groups)
        for key, ring in rings.items():
            if gained is not None and key not in gained:
                continue
            previous = None if gained is None else gained[key]
            read = {**share_where(key, ring), "previous_ring": previous}
            page = None if gained is None else PAGE
            more = True
            while more:
                latest = self._membership.view
                # Before every call after the first, as claims by uuid do.  (A
                # view equal to ours is often another object: compare shares.)
                if (
                    calls
                    and latest is not view
                    and (latest is None or share_rings(latest, self.host, self._groups) != rings)
                ):
                    return ShareClaimed(claimed, True)
                calls += 1
                out = self._conductor.claim_share(
                    self.host,
                    ring,
                    groups=read["groups"],
                    exclude_groups=read["exclude_groups"],
                    limit=_LIMIT,
                    previous_ring=previous,
                    read=page,
                )
                if out is None:
                    return None
                claimed += self._took_share(out)
                if "still_live" in out:
                    still_live = (still_live or set()) | set(out["still_live"])
                more = bool(out.get("more"))
                if page is not None and out.get("share") is not None and not more:
                    self._gained_pages.append((read, out["share"]))
                page = None
        return ShareClaimed(claimed, False, None if still_live is None else frozenset(still_live))

    def _took_share(self, out: Mapping[str, Any]) -> int:
        """Record what a ``claim_share`` reply took, and its change time (our
        change reads leave out the rows it changed); the nodes newly held."""
        claimed = self._took(out["uuids"], out["epochs"], out["groups"])
        if out.get("changed_at") is not None:
            with self._lock:
                self._wrote(out["changed_at"])
        return claimed

    def _took(self, uuids: list[str], epochs: list[int], groups: list[str]) -> int:
        """Record the nodes a claim by share took; how many were not held before."""
        new = 0
        with self._lock:
            for uuid, epoch, group in zip(uuids, epochs, groups, strict=True):
                if uuid not in self._held:
                    new += 1
                self._held[uuid] = epoch
                self._refused_by.pop(uuid, None)
                if self._inventory.get(uuid) != group:
                    self._inventory[uuid] = group
                    self._inventory_groups.add(group)
                    self._inventory_version += 1
        return new
