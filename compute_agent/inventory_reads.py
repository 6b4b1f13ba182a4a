# SPDX-License-Identifier: Apache-2.0
"""Reading an agent's inventory from the conductor: the nodes of its ring share.

An agent follows the nodes it may have to own -- those the rings of its node
groups give it, and those it holds -- with each one's group; after a first
read whole, it reads only what changed (:meth:`InventoryReader.refresh_inventory`).
:class:`InventoryReader` is the reading part of
:class:`compute_agent.ownership.OwnershipManager`, which holds the state it
reads into (under the manager's lock) and decides what a row read means
(``_learn``) and what the agent's ring share is (``_ring_share``).
"""

from __future__ import annotations

import datetime
import functools
import logging
import math
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from compute_agent.conductor_client import OwnershipCalls
from compute_agent.metrics import AgentMetrics
from hashring.membership import Membership, MembershipView
from hashring.ring import ring_of, subtract_arc_columns

__all__ = ["PAGE", "InventoryReader", "ShareKey", "share_rings", "share_where"]

#: The ownership manager's logger: these reads are its own.
LOG = logging.getLogger("compute_agent.ownership")

#: A node row is stamped (``updated_at``) before its transaction commits, and
#: by its conductor's clock: a refresh can miss a row committed just after
#: it read, stamped just before.  So a refresh re-reads _RECENT_OVERLAP before
#: the previous one, which covers a commit of the usual milliseconds; and
#: one every _DEEP_EVERY goes back _DEEP_OVERLAP before the previous such
#: one, for a commit that stalled or a conductor whose clock is behind.
#: (Re-reading 5 s at every refresh made the agents' inventory reads the
#: conductor's largest cost at 100k nodes: every claim of a cold start or
#: a join was read by every agent five or six times.)
_RECENT_OVERLAP = datetime.timedelta(seconds=0.5)
_DEEP_OVERLAP = datetime.timedelta(seconds=5)
_DEEP_EVERY = datetime.timedelta(seconds=5)
#: Nodes per inventory page.
PAGE = 5000

#: Seconds after which a pass reads our own nodes outside the share again
#: though no hint came (see InventoryReader.expect_owner_changes).
_OWNER_READ_EVERY = 60.0

#: Which node groups one ring of a view covers: (the groups, or None for
#: every group but the excluded ones; the excluded groups).
ShareKey = tuple[tuple[str, ...] | None, tuple[str, ...]]


def share_rings(
    view: MembershipView, host: str, groups: Sequence[str] = ()
) -> dict[ShareKey, dict[str, Any]]:
    """The rings of ``view`` in which ``host`` has a share, by the groups each covers.

    Each node group has its own ring, of the members serving it
    (:meth:`hashring.membership.MembershipView.weights_for`); groups whose
    rings are the same are read together.  An agent of ``groups`` reads
    those; one serving every group reads the groups some member names, and
    "every other group" (whose ring is that of the members serving all).
    Each ring as the conductor takes it: ``{"version", "members"}``.
    """
    named = sorted(view.named_groups())
    by_members: dict[tuple[tuple[str, float], ...], list[str]] = {}
    for group in groups or named:
        weights = view.weights_for(group)
        by_members.setdefault(tuple(sorted(weights.items())), []).append(group)
    rings: dict[ShareKey, dict[str, Any]] = {
        (tuple(sorted(names)), ()): {"version": view.ring_version, "members": dict(members)}
        for members, names in by_members.items()
        if host in dict(members)
    }
    others = view.weights_for_unnamed()
    if not groups and host in others:
        rings[(None, tuple(named))] = {"version": view.ring_version, "members": others}
    return rings


def share_where(key: ShareKey, ring: Mapping[str, Any]) -> dict[str, Any]:
    """The share of ``ring`` for the node groups of ``key``, as the
    conductor's calls name it: ``{"ring", "groups", "exclude_groups"}``."""
    groups, excluded = key
    return {
        "ring": ring,
        "groups": None if groups is None else list(groups),
        "exclude_groups": list(excluded) or None,
    }


def _share_queries(
    host: str,
    rings: Mapping[ShareKey, dict[str, Any]],
    previous: Mapping[ShareKey, dict[str, Any]] | None,
    since: str | None,
) -> list[dict[str, Any]]:
    """The reads of ``host``'s share of each ring: all of it when new to us,
    else the arcs gained since ``previous`` (whole, if any) and the share's
    changes."""
    reads: list[dict[str, Any]] = []
    for key, ring in rings.items():
        where = share_where(key, ring)
        before = None if previous is None else previous.get(key)
        if since is None or before is None:
            reads.append({**where, "since": None})  # all of it: new to us
            continue
        if before != ring and gains(host, before, ring):
            reads.append({**where, "previous_ring": before, "since": None})  # gained
        reads.append({**where, "since": since})
    return reads


def gains(host: str, before: Mapping[str, Any] | None, ring: Mapping[str, Any]) -> bool:
    """Whether ``ring`` gives ``host`` positions ``before`` did not.  On a
    join no staying agent gains any: each read of its gained arcs found
    nothing, a call to a conductor each, in the queue the joiner waits in.
    ``before`` ``None``: a ring new to us, all gained."""
    if before is None or host not in before["members"]:
        return True
    return _gains(host, _ring_key(before), _ring_key(ring))


def _ring_key(ring: Mapping[str, Any]) -> tuple[int, tuple[tuple[str, float], ...]]:
    return ring["version"], tuple(sorted(ring["members"].items()))


@functools.lru_cache(maxsize=64)
def _gains(
    host: str,
    before: tuple[int, tuple[tuple[str, float], ...]],
    after: tuple[int, tuple[tuple[str, float], ...]],
) -> bool:
    """:func:`gains`, kept: a pass on a new view asks it three times (the
    claim of gained arcs, whether the read may wait, the reads), each an
    arc walk of two rings of 4,096 points a member."""
    then = ring_of(dict(before[1]), version=before[0]).arc_columns(host)
    now = ring_of(dict(after[1]), version=after[0]).arc_columns(host)
    return bool(len(subtract_arc_columns(*now, *then)[0]))


def only_lost(
    host: str,
    rings: Mapping[ShareKey, dict[str, Any]],
    previous: Mapping[ShareKey, dict[str, Any]] | None,
) -> bool:
    """Whether ``rings`` changed from ``previous`` only by taking arcs from
    ``host`` (a peer joined): the same node groups, no position gained."""
    if previous is None or rings == previous or rings.keys() != previous.keys():
        return False
    return not any(
        gains(host, previous[key], ring) for key, ring in rings.items() if previous[key] != ring
    )


def _moment(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text)


def _shares(rings: Mapping[ShareKey, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The shares of ``rings`` as an owner read leaves them out (``outside``)."""
    return [share_where(key, ring) for key, ring in rings.items()]


class InventoryReader:
    """Reads the inventory of :class:`~compute_agent.ownership.OwnershipManager`.

    A base of the manager only: the attributes below are the manager's
    (set by its ``__init__``), and the three hooks are its methods.
    """

    host: str
    _conductor: OwnershipCalls
    _membership: Membership
    _metrics: AgentMetrics
    _groups: list[str]
    _lock: threading.Lock
    _held: dict[str, int]
    _inventory: dict[str, str]
    # Each inventory node's power state as the conductor recorded it when
    # last read (none for a conductor that does not say): see recorded_power.
    _recorded_power: dict[str, str]
    _inventory_version: int
    _pinned_elsewhere: set[str]
    _refused_by: dict[str, tuple[str, float]]
    _since: datetime.datetime | None
    _deep_since: datetime.datetime | None
    # The change times of our own writes (claims, state reports), parsed
    # and as the conductor said them: see _wrote.
    _write_times: list[tuple[datetime.datetime, str]]
    _read_rings: dict[ShareKey, dict[str, Any]] | None
    _by_share: bool
    #: The manager's claims by share (:class:`compute_agent.share_claims.ShareClaimer`):
    #: whether claims on a view may be made now; and the first page of a
    #: whole share from the call that claims its free nodes (``None``: read
    #: it as usual).
    _may_claim_now: Callable[[MembershipView], bool]
    _claim_and_read: Callable[[Mapping[str, Any], int], dict[str, Any] | None]
    #: The first page of a read of gained arcs, from the call that claimed
    #: them (:meth:`compute_agent.share_claims.ShareClaimer.claim_first`).
    _gained_page: Callable[[Mapping[str, Any]], dict[str, Any] | None]
    _first_read_settle: float
    _first_read_wait_max: float
    # The share the first read would read, since when (monotonic), and when
    # the first view came: see first_read_wait.
    _settle_key: dict[ShareKey, dict[str, Any]] | None = None
    _settle_since = 0.0
    _first_view_at: float | None = None
    _settle_said = False
    # The nodes the read under way found taken over (see _say_lost).
    _lost_now: list[str]
    # When our own nodes outside the share were last read (monotonic; None:
    # due at the next read, see expect_owner_changes).
    _owner_read_at: float | None = None
    _owner_as_of: str | None = None  # that read's as_of
    # When the inventory was last read (monotonic; None: never), and in which
    # join generation: see read_age.
    _read_at: float | None = None
    _read_generation: int | None = None

    def expect_owner_changes(self) -> None:
        """The next read also reads our own nodes outside the share: a
        conductor hinted at a change (an operator moved nodes, a peer
        handed some over), or our held set was re-read (a re-join).

        Nodes come to us outside our share only that way, so a pass after
        a membership change or a claim leaves that read out (within
        :data:`_OWNER_READ_EVERY` of the last): at a cold start it was one
        of an agent's three or four reads, each a call to a conductor.
        The next read is not left for later either (see :meth:`_read_share`)."""
        self._owner_read_at = None

    def hold_nothing(self) -> None:
        """The conductor records no node as ours (just read): the next reads
        leave out our nodes outside the share, as if just read, until a hint
        or :data:`_OWNER_READ_EVERY` (at a cold start that read was one call
        of an agent's four, for nothing)."""
        self._owner_read_at, self._owner_as_of = time.monotonic(), None

    def _owner_read_due(self) -> bool:
        at = self._owner_read_at
        return at is None or time.monotonic() - at >= _OWNER_READ_EVERY

    def _learn(self, item: Mapping[str, Any]) -> int:
        """One inventory row (under the lock); 1 for a node found taken over."""
        raise NotImplementedError

    def _learn_page(self, items: Sequence[Mapping[str, Any]]) -> int:
        """A page's rows (under the lock), with their recorded power states:
        the nodes found taken over."""
        lost = 0
        for item in items:
            lost += self._learn(item)
            power = item.get("power_state")
            if isinstance(power, str):
                # One string per state, not one per node: an agent reading
                # the whole fleet keeps 100,000 of these.
                self._recorded_power[item["uuid"]] = sys.intern(power)
            else:  # not recorded, or not said (an older conductor)
                self._recorded_power.pop(item["uuid"], None)
        return lost

    def recorded_power(self, nodes: Iterable[str]) -> dict[str, str]:
        """The power states the conductor recorded for ``nodes``, as last read
        (a node whose record was not read, or does not say, is left out).

        The reporter takes a node whose power it reads as recorded for
        already reported (:class:`compute_agent.state_reports.StateReports`):
        at a cold start, a join or a takeover every node it claims would
        otherwise be sent again, each agent's whole share, for nothing.
        """
        with self._lock:
            return {n: p for n in nodes if (p := self._recorded_power.get(n)) is not None}

    def _say_lost(self) -> None:
        """The nodes a read found taken over (:attr:`_lost_now`), in one INFO line.

        A live member is never robbed (invariant 1): its nodes go to a peer
        only while it is away (its lease expired, it stepped aside; said
        when it happened) or by an operator's move or drain.  Either way
        this is a consequence, said once per read, not a line per node.
        """
        with self._lock:
            lost, self._lost_now = self._lost_now, []
        if lost:
            LOG.info(
                "Agent %s lost %d nodes to their new owners (taken over while it was "
                "away, or moved): %s",
                self.host,
                len(lost),
                ", ".join(sorted(lost)[:20]) + (" ..." if len(lost) > 20 else ""),
            )

    def _ring_share(self, view: MembershipView) -> frozenset[str]:
        """The nodes of the inventory that the rings of ``view`` give this agent."""
        raise NotImplementedError

    def _wrote(self, changed_at: str) -> None:
        """A write of ours (a claim, a state report) stamped the rows it
        changed ``changed_at``; our change reads leave out the rows it
        changed last (``not_claimed_at``): we know what it did.  Under the lock."""
        at = datetime.datetime.fromisoformat(changed_at)
        if at.tzinfo is not None:  # the conductor's times are naive UTC
            at = at.astimezone(datetime.UTC).replace(tzinfo=None)
        self._write_times.append((at, changed_at))

    def _own_write_times(self) -> list[str] | None:
        """The change times of our writes that a change read may still reach:
        those from where the earliest next one may start (the deep read's,
        or the owner read's), the latest 1,000.  (Kept for a fixed time,
        they were gone by the next read of a quiet agent, which reads every
        ``quiet_reconcile_interval``: after a cold start its first state
        report changed every node it holds, and that read read them all.)"""
        with self._lock:
            floor = None if self._deep_since is None else self._deep_since - _DEEP_OVERLAP
            if floor is not None and self._owner_as_of is not None:
                floor = min(floor, _moment(self._owner_as_of) - _DEEP_OVERLAP)
            kept = [(at, said) for at, said in self._write_times if floor is None or at >= floor]
            self._write_times = kept[-1000:]
            return [said for _at, said in self._write_times] or None

    def wrote_states(self, changed_at: str, powers: Mapping[str, str]) -> None:
        """Our state reports changed rows at ``changed_at`` (the reply of a
        conductor of API 1.27), recording these power states: our change
        reads leave those rows out, and what was recorded is what we wrote."""
        with self._lock:
            self._wrote(changed_at)
            for node, power in powers.items():
                if node in self._inventory:
                    self._recorded_power[node] = sys.intern(power)

    def first_read_wait(self, view: MembershipView) -> float:
        """Seconds the first read of the inventory waits yet (0: read now).

        Agents started together each join seeing few peers: a first read of
        the share of such a view reads what belongs to the peers about to
        appear (one agent read all 100,000 nodes of a cold start).  So the
        first read waits until the share ``view`` gives us has not changed
        for a while -- half of ``rejoin_settle`` (what peers cut off with us
        need to re-join), at least ``join_settle`` -- and at most
        ``rejoin_settle + join_settle`` after the first view we saw.
        """
        if self._since is not None:
            return 0.0
        now = time.monotonic()
        if self._first_view_at is None:
            self._first_view_at = now
        share = share_rings(view, self.host, self._groups)
        if share != self._settle_key:
            self._settle_key, self._settle_since = share, now
        wait = (
            min(
                self._settle_since + self._first_read_settle,
                self._first_view_at + self._first_read_wait_max,
            )
            - now
        )
        if wait > 0 and not self._settle_said:
            self._settle_said = True
            LOG.info(
                "Agent %s: its first inventory read waits up to %.1f s for the view "
                "(%d members) to settle",
                self.host,
                wait,
                len(view.members),
            )
        return max(wait, 0.0)

    def read_age(self) -> float:
        """Seconds since the inventory was last read (infinite: never).  A
        pass on a view that only took arcs from us reads nothing
        (:meth:`_read_share`): the reconcile loop then brings the next pass
        no later than ``quiet_reconcile_interval`` after this read."""
        return math.inf if self._read_at is None else time.monotonic() - self._read_at

    @property
    def reads_by_share(self) -> bool:
        """Whether the inventory was read by share (a conductor of API 1.15)."""
        return self._read_rings is not None

    def deep_refresh_due(self) -> bool:
        """Whether the next refresh should go back before the previous deep one."""
        return (
            self._since is None
            or self._deep_since is None
            or self._since - self._deep_since >= _DEEP_EVERY
        )

    def refresh_inventory(
        self, deep: bool | None = None, view: MembershipView | None = None
    ) -> int:
        """Learn the nodes of our share (all at first, then only changes).

        With ``view`` (by default the membership's latest), and a conductor
        that reads by share (API 1.15), the
        inventory is this agent's ring share in that view and the nodes it
        holds: the first read is the share, after a membership change the
        arcs gained are read whole and the nodes no longer ours forgotten,
        and every other read is the share's changes.  Without (an older
        conductor), the nodes of our groups, the whole fleet at first.

        ``deep``: re-read back to :data:`_DEEP_OVERLAP` before the previous
        deep refresh (``None``: when :meth:`deep_refresh_due`; ``False``:
        only the short overlap).  The first refresh reads everything.
        The first read waits for the view to settle (:meth:`first_read_wait`):
        until then nothing is read.  Returns the rows read.
        """
        view = view if view is not None else self._membership.view
        if view is not None and self.first_read_wait(view) > 0:
            return 0
        # After a hint (the owner read is due at once), or since a re-join,
        # no read is left for later.
        generation = self._membership.join_generation
        may_wait = (
            deep is not True
            and self._owner_read_at is not None
            and self._read_generation == generation
        )
        deep = self.deep_refresh_due() if deep is None else (deep or self._since is None)
        since = None
        if self._since is not None and self._deep_since is not None:
            start = self._deep_since - _DEEP_OVERLAP if deep else self._since - _RECENT_OVERLAP
            since = start.isoformat()
        read = None if view is None else self._read_share(view, since, may_wait=may_wait)
        how = "by share"
        if read is None:
            if view is not None and self._by_share:
                self._by_share = False
                LOG.info(
                    "Agent %s: the conductor does not read inventories by share (older "
                    "than API 1.15, or [upgrade_levels] conductor pins it below): this "
                    "agent reads the whole fleet",
                    self.host,
                )
            read, how = self._read_groups(since), "whole fleet"
        seen, lost, as_of = read
        if as_of is None:  # nothing to read now (a peer joined)
            return 0
        self._read_at, self._read_generation = time.monotonic(), generation
        if seen:
            LOG.debug(
                "Agent %s read %d inventory rows (%s, %s)",
                self.host,
                seen,
                how,
                "changes" if since else "all",
            )
        self._since = datetime.datetime.fromisoformat(as_of)
        if deep:
            self._deep_since = self._since
        self._say_lost()
        self._metrics.lost(lost)
        self._metrics.inventory_read(seen)
        return seen

    def _read_groups(self, since: str | None) -> tuple[int, int, str]:
        """Every node of our groups (changed since ``since``): (rows, lost, as_of)."""
        marker = None
        seen = lost = 0
        as_of = None
        while True:
            page = self._conductor.list_node_uuids(
                groups=self._groups or None, since=since, marker=marker, limit=PAGE
            )
            as_of = as_of or page["as_of"]
            with self._lock:
                lost += self._learn_page(page["nodes"])
            seen += len(page["nodes"])
            if len(page["nodes"]) < PAGE:
                return seen, lost, as_of
            marker = page["nodes"][-1]["uuid"]

    def _read_share(
        self, view: MembershipView, since: str | None, *, may_wait: bool = False
    ) -> tuple[int, int, str | None] | None:
        """Our share of ``view``'s rings and our nodes, by share: (rows, lost, as_of),
        or ``None`` when the conductor does not read by share.

        A view that only took arcs from us (a peer joined) is read later if
        ``may_wait`` (not a deep read, no hint, no re-join since the last read):
        nothing of what it left us is new, and the change read waits for the
        next pass (as_of ``None``: nothing read).  At a join of the 101st
        agent each of the 100 others read its share's changes and its own
        nodes outside it then, two calls each, for nothing."""
        rings = share_rings(view, self.host, self._groups)
        previous = self._read_rings
        if may_wait and since is not None and only_lost(self.host, rings, previous):
            self._forget_outside(view)
            self._read_rings = rings
            return 0, 0, None
        reads = _share_queries(self.host, rings, previous, since)
        # The nodes we own outside the shares read above (those in them came
        # with the share reads), when due: its changes since the last such
        # read (passes may have left it out since).
        owner_read = self._owner_read_due()
        if owner_read:
            reads.append({"since": self._owner_since(since), "outside": _shares(rings)})
        if since is not None:
            # What our own claims changed we know from their replies.
            claimed = self._own_write_times()
            reads = [q if q["since"] is None else {**q, "not_claimed_at": claimed} for q in reads]
        done = self._run_queries(reads, claim=self._may_claim_now(view))
        if done is None:
            return None
        if previous is not None and previous != rings:
            self._forget_outside(view)
        self._read_rings = rings
        if owner_read:
            self._owner_read_at, self._owner_as_of = time.monotonic(), done[2]
        return done

    def _run_queries(
        self, reads: list[dict[str, Any]], *, claim: bool = False
    ) -> tuple[int, int, str] | None:
        """Each read, page by page, learnt: (rows, lost, the first as_of);
        ``None`` when the conductor does not read by share.  ``claim``: the
        first page of a whole share comes from the call that claims its free
        nodes (:meth:`_claim_and_read`); that of gained arcs may have come
        with their claim (:meth:`_gained_page`)."""
        seen = lost = 0
        as_of = None
        unchanged: datetime.datetime | None = None  # nothing changed since then
        for query in reads:
            if "outside" in query and not self._owner_read_due():
                continue  # the claim that re-read our held set found none
            start = None if query["since"] is None else _moment(query["since"])
            if unchanged is not None and start is not None and start >= unchanged:
                # The conductor found no node of the fleet changed since: this
                # read would find nothing either (a quiet fleet's pass is
                # then one call, not one per read).
                continue
            marker = None
            page = None
            if "previous_ring" in query:
                page = self._gained_page(query)
            elif claim and query.get("ring") and start is None:
                page = self._claim_and_read(query, PAGE)
            while True:
                if page is None:
                    page = self._conductor.list_node_share(
                        self.host, marker=marker, limit=PAGE, **query
                    )
                if page is None:
                    return None
                as_of = as_of or page["as_of"]
                if page.get("unchanged") and start is not None:
                    unchanged = start if unchanged is None else min(unchanged, start)
                with self._lock:
                    lost += self._learn_page(page["nodes"])
                seen += len(page["nodes"])
                marker, page = page["next"], None
                if marker is None:
                    break
        assert as_of is not None
        return seen, lost, as_of

    def _owner_since(self, since: str | None) -> str | None:
        """Where the owner read starts: all of it on a first read, else back
        to the last one's ``as_of`` (with the deep overlap, for a commit
        that came late)."""
        if since is None or self._owner_as_of is None:
            return None
        start = datetime.datetime.fromisoformat(self._owner_as_of) - _DEEP_OVERLAP
        return min(start, datetime.datetime.fromisoformat(since)).isoformat()

    def _forget_outside(self, view: MembershipView) -> None:
        """Drop the inventory's nodes that are neither our share of ``view`` nor
        held: after a membership change they are another agent's to follow."""
        share = self._ring_share(view)
        with self._lock:
            self._drop([n for n in self._inventory if n not in share and n not in self._held])

    def _drop(self, nodes: Collection[str]) -> None:
        """Forget nodes of the inventory (under the lock)."""
        for node in nodes:
            self._inventory.pop(node, None)
            self._recorded_power.pop(node, None)
            self._pinned_elsewhere.discard(node)
            self._refused_by.pop(node, None)
        if nodes:
            self._inventory_version += 1
