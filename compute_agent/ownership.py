# SPDX-License-Identifier: Apache-2.0
"""Which nodes this agent owns, at which epochs, and keeping that true.

On every membership change (and every ``reconcile_interval``) the agent
computes its desired set — the nodes the ring of each of its node groups
gives it, plus the nodes pinned to it (hosting its instances) — then
releases the nodes it should no longer own once their in-flight work is
done, and claims the desired nodes it does not hold, in batches, through the
conductor.  The conductor's compare-and-swap decides: a live owner is never
robbed, so a node moving from a live agent moves when that agent releases
it (on its own reconcile).

The epoch of every claim is kept; :meth:`OwnershipManager.check` is called
before every node action and refuses when the epoch is not the one held or
when the membership is not CONNECTED.  After the membership was LOST, the
held set is re-read from the conductor (:meth:`revalidate`) before anything
else: a peer may have taken nodes over meanwhile.

Reading the inventory, the nodes of the agent's share that it follows, is
:class:`compute_agent.inventory_reads.InventoryReader`'s, a base of the
manager.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from compute_agent.conductor_client import OwnershipCalls
from compute_agent.inventory_reads import InventoryReader, ShareKey, share_rings
from compute_agent.metrics import AgentMetrics, group_counts
from compute_agent.releases import Releaser
from compute_agent.share_claims import ShareClaimer
from conductor.common.exception import NotOwner
from conductor.common.objects import Ownership
from hashring.membership import Membership, MembershipView, State
from hashring.ring import ring_of

__all__ = ["OwnershipManager", "ReconcileResult", "ShareKey", "share_rings"]

LOG = logging.getLogger(__name__)

#: How long a live owner's refusal keeps a node from being asked for again.
#: It bounds how long a missed release leaves a node unowned (seen at 100k
#: nodes: releases whose ``updated_at``, taken when their transaction began,
#: fell before the next inventory window because they committed late); a
#: node still refused is asked for once more per period, one claim batch.
_REFUSAL_MEMORY = 10.0
#: After a live owner refused a node, reconcile again every _HANDOVER_POLL
#: seconds for _HANDOVER_WAIT: an owner that saw the same membership change
#: releases the node on its own pass, within a second or two, and the next
#: inventory refresh shows it.  (Waiting for reconcile_interval, or for the
#: refusal to be forgotten, left a cold start of 100k nodes with a few
#: hundred nodes unowned for 12-15 s after everything else had converged.)
_HANDOVER_POLL = 1.0
_HANDOVER_WAIT = 5.0


@dataclass(frozen=True)
class ReconcileResult:
    desired: int
    held: int
    claimed: int
    released: int
    refused: int
    #: Some refusals came from owners our view says are gone: the conductor
    #: has not seen them leave yet; try again in a moment, not an interval.
    retry_soon: bool = False
    #: Pinned nodes of a departed agent taken over by this pass.
    rehomed: int = 0
    #: Nodes found taken over by a peer (re-validation after LOST).
    lost: int = 0
    #: We own exactly our share and pins, less the nodes pinned elsewhere.
    converged: bool = False
    #: Seconds until the earliest restart hold on nodes we want ends, or
    #: the settle after a re-join, or until a live owner that refused nodes
    #: lately may have released them (then reconcile again: they may be
    #: claimed), None when there is none of these.
    retry_in: float | None = None
    #: Converged and nothing left to wait for: none of our share is pinned
    #: elsewhere (a node we take once its instance is gone).
    settled: bool = False


class OwnershipManager(InventoryReader, ShareClaimer, Releaser):
    """The agent's held nodes and epochs; thread-safe."""

    #: The join generation whose settle ``_claims_after`` holds claims back for.
    _settling_generation = 0

    def __init__(
        self,
        host: str,
        conductor: OwnershipCalls,
        membership: Membership,
        *,
        groups: Sequence[str] = (),
        claim_batch: int = 500,
        busy_nodes: Callable[[], set[str]] = set,
        metrics: AgentMetrics | None = None,
        rejoin_settle: float = 0.0,
        join_settle: float = 0.0,
        first_read_settle: float = 0.0,
        first_read_wait_max: float = 0.0,
    ) -> None:
        self.host = host
        self._metrics = metrics if metrics is not None else AgentMetrics(host)
        self._conductor = conductor
        self._membership = membership
        self._groups = list(groups)
        self._batch = claim_batch
        self._busy_nodes = busy_nodes
        self._lock = threading.Lock()
        self._reconcile_lock = threading.RLock()  # a pass's first read claims too
        self._held: dict[str, int] = {}
        self._lost_now: list[str] = []
        self._pinned: set[str] = set()
        self._inventory: dict[str, str] = {}
        self._recorded_power: dict[str, str] = {}
        # Bumped whenever a node enters the inventory or changes group: the cached ring
        # share (_share) is computed again only then, or when a group's ring changes.
        self._inventory_version = 0
        self._inventory_groups: set[str] = set()
        self._share: tuple[Hashable, frozenset[str]] | None = None
        # Nodes hosting another agent's instance: in our ring share maybe,
        # but never ours while that agent lives (not "unconverged").
        self._pinned_elsewhere: set[str] = set()
        # Nodes a claim was refused for: the owner that keeps each, and when
        # (monotonic).  Not asked for again while that owner is in our view
        # and the node's record is unchanged (a live owner is never robbed;
        # asking every reconcile only loads the conductor) -- but only for
        # _REFUSAL_MEMORY: the change that would clear the entry (the owner
        # released the node) can be missed by the inventory's time window
        # when its transaction commits late, and a node nobody asks for stays
        # unowned for good (issue 13: thousands at 100k nodes under load).
        self._refused_by: dict[str, tuple[str, float]] = {}
        # Owners stopped for a restart: their nodes wait for the hold's end (monotonic).
        self._restart_holds: dict[str, float] = {}
        self._since: datetime.datetime | None = None  # the last refresh's as_of
        # The rings our inventory was read under, by share (None: not yet, or
        # a conductor that does not read by share).
        self._read_rings: dict[ShareKey, dict[str, Any]] | None = None
        self._by_share = True  # until the conductor says it does not read by share
        # (monotonic, change time) of our claims: our change reads leave out
        # the rows they changed last (we know those from the replies).
        self._write_times: list[tuple[datetime.datetime, str]] = []
        self._deep_since: datetime.datetime | None = None  # the last deep one's
        # When we adopted nodes handed to us: a drained agent hands its nodes
        # over just before it leaves, and our view may still show it for a
        # moment; releasing them back to it meanwhile would only churn.
        self._adopted_at: dict[str, float] = {}
        # The join generation our held set was read under; how many it found.
        self._validated_generation, self._validated_held = -1, 0
        # After a re-join, no claim before this (monotonic): peers that were
        # cut off with us (the etcd member we all use was away past the TTL)
        # re-join within a heartbeat of us, and until then our view lacks
        # them -- claiming their nodes would move them away and back.
        self._rejoin_settle = rejoin_settle
        # After our first join, no claim before this either: agents started
        # together each join seeing few peers, and a pass on that first view
        # claims nodes that belong to peers about to appear (the claim storm
        # of issue 13: 105,888 claims and 204,260 refusals for 100k nodes).
        self._join_settle = join_settle
        self._claims_after, self._first_claim_tries, self._claimed_by_reads = 0.0, {}, 0
        self._gained_pages = []
        # Before the first read of the inventory, the view must have been
        # the same this long, or that long have passed since the first view
        # (InventoryReader.first_read_wait).
        self._first_read_settle = first_read_settle
        self._first_read_wait_max = first_read_wait_max

    # -- the fence -------------------------------------------------------------

    def check(self, node_uuid: str, epoch: int) -> None:
        """Refuse unless this agent may act on the node at that epoch, now.

        :raises NotOwner: carrying the owner and epoch this agent knows.
        """
        with self._lock:
            held = self._held.get(node_uuid)
            validated = self._validated_generation
        if (
            held is None
            or held != epoch
            or not self._membership.can_act()
            # Re-joined since our claims were last read: until they are read
            # again, a peer may own what we think is ours.
            or validated != self._membership.join_generation
        ):
            owner = self.host if held is not None else None
            raise NotOwner(node_uuid, owner, held if held is not None else -1)

    def wait_can_act(self, node_uuid: str, epoch: int, timeout: float) -> None:
        """Like :meth:`check`, but rides out a SUSPENDED membership.

        A heartbeat hiccup (SUSPENDED) may clear up within the TTL: an
        in-flight deployment waits for it rather than abandon the build.
        LOST, a new join generation or a changed epoch end the wait at once.
        """
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.check(node_uuid, epoch)
                return
            except NotOwner:
                with self._lock:
                    same = self._held.get(node_uuid) == epoch
                    validated = self._validated_generation
                recoverable = (
                    same
                    and self._membership.state is State.SUSPENDED
                    and validated == self._membership.join_generation
                )
                if not recoverable or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def epoch(self, node_uuid: str) -> int | None:
        with self._lock:
            return self._held.get(node_uuid)

    def held(self) -> dict[str, int]:
        with self._lock:
            return dict(self._held)

    def pinned(self) -> set[str]:
        with self._lock:
            return set(self._pinned)

    def pin(self, node_uuid: str) -> None:
        self._set_pin(node_uuid, True)

    def unpin(self, node_uuid: str) -> None:
        self._set_pin(node_uuid, False)

    def _set_pin(self, node_uuid: str, pinned: bool) -> None:
        with self._lock:
            changed = pinned != (node_uuid in self._pinned) and node_uuid in self._held
            if pinned:
                self._pinned.add(node_uuid)
            else:
                self._pinned.discard(node_uuid)
            group = self._inventory.get(node_uuid, "")
        # Said now, by one: a quiet agent's next pass (which sets every
        # count again) may be quiet_reconcile_interval away, and a recount
        # of all it holds on every build was O(nodes held) per build.
        if changed:
            self._metrics.pinned_by(group, 1 if pinned else -1)

    def forget(self, node_uuids: Iterable[str]) -> None:
        with self._lock:
            for node in node_uuids:
                self._held.pop(node, None)
                self._pinned.discard(node)

    def forget_deleted(self, node_uuids: Collection[str]) -> None:
        """Forget nodes the conductor no longer records (deleted while held):
        neither reported nor claimed again."""
        with self._lock:
            for node in node_uuids:
                self._held.pop(node, None)
                self._pinned.discard(node)
            self._drop(node_uuids)

    # -- reading the conductor ---------------------------------------------------

    @property
    def validated_generation(self) -> int:
        """The membership join generation the held set was last read under."""
        with self._lock:
            return self._validated_generation

    @property
    def held_when_validated(self) -> int:
        """How many nodes the conductor recorded as ours at the last validation."""
        with self._lock:
            return self._validated_held

    def needs_revalidation(self) -> bool:
        return self._validated_generation != self._membership.join_generation

    def revalidate(self) -> int:
        """Replace the held set with what the conductor records (after LOST)."""
        held, lost = self._revalidate()
        self._metrics.lost(lost)
        return held

    def _revalidate(self) -> tuple[int, int]:
        """:meth:`revalidate`, without metrics: (held, lost)."""
        generation = self._membership.join_generation
        return self._replace_held(generation, self._conductor.owned_nodes(self.host))

    def _replace_held(self, generation: int, owned: Sequence[Ownership]) -> tuple[int, int]:
        """Hold what the conductor recorded as ours (``owned``), read in join
        ``generation``: (held, lost)."""
        with self._lock:
            self._validated_generation = generation
            before = dict(self._held)
            self._held = {o.node_uuid: o.epoch for o in owned}
            self._validated_held = len(self._held)
            self._pinned = {o.node_uuid for o in owned if o.pinned}
        if set(self._held) - set(before):
            self.expect_owner_changes()  # held now, and maybe outside our share
        elif not owned:
            self.hold_nothing()  # nothing of ours outside the share to read
        lost = [n for n, e in before.items() if self._held.get(n) != e]
        if lost:
            # Taken over while away, as designed; the absence was said.
            LOG.info(
                "Agent %s lost %d nodes while away (taken over): %s",
                self.host,
                len(lost),
                ", ".join(sorted(lost)[:20]),
            )
        return len(self._held), len(lost)

    def _learn(self, item: Mapping[str, Any]) -> int:
        """One inventory entry (under the lock): its group, and its claim.

        A node recorded as ours that we do not hold was handed to us (a
        drain, an operator's move): adopt it at its epoch.  A node we hold
        that is recorded as someone else's, or at another epoch, was taken
        over: forget it.  Returns 1 for a node lost that way, else 0.
        """
        uuid = item["uuid"]
        if self._inventory.get(uuid) != item["group"]:
            self._inventory[uuid] = item["group"]
            self._inventory_groups.add(item["group"])
            self._inventory_version += 1
        owner, epoch = item.get("owner"), item.get("epoch")
        refused = self._refused_by.get(uuid)
        if refused is not None and refused[0] != owner:
            # Its owner changed (released, handed over): worth asking again.
            del self._refused_by[uuid]
        if item.get("pinned") and owner not in (None, self.host):
            self._pinned_elsewhere.add(uuid)
        else:
            self._pinned_elsewhere.discard(uuid)
        if epoch is None:
            return 0
        held = self._held.get(uuid)
        if owner == self.host and held != epoch:
            if held is None:
                LOG.info("Agent %s adopts node %s at epoch %d", self.host, uuid, epoch)
                self._adopted_at[uuid] = time.monotonic()
            self._held[uuid] = epoch
            if item.get("pinned"):
                self._pinned.add(uuid)
        elif owner != self.host and held is not None:
            LOG.debug("Agent %s lost node %s to %s (epoch %d)", self.host, uuid, owner, epoch)
            self._lost_now.append(uuid)  # said in one line per read
            self._held.pop(uuid, None)
            self._pinned.discard(uuid)
            return 1
        return 0

    # -- the desired set -----------------------------------------------------------

    def desired(self, view: MembershipView) -> set[str]:
        """The ring's share of each of our groups, plus our pins."""
        with self._lock:
            wanted = set(self._pinned)
        wanted.update(self._ring_share(view))
        return wanted

    def _ring_share(self, view: MembershipView) -> frozenset[str]:
        """The nodes of our inventory that the rings of *view* give this agent.

        It depends only on the inventory and on each group's ring, so it is
        computed again only when one of them changed.  (Computed on every
        reconcile, it was each agent's largest cost at 100k nodes: a ring
        and a placement of every node in the fleet per pass, while nothing
        had changed.)
        """
        with self._lock:
            rings = {group: view.weights_for(group) for group in self._inventory_groups}
            key = (
                self._inventory_version,
                view.ring_version,
                tuple(sorted((g, tuple(sorted(w.items()))) for g, w in rings.items())),
            )
            cached = self._share
            if cached is not None and cached[0] == key:
                return cached[1]
            by_group: dict[str, list[str]] = {}
            for node, group in self._inventory.items():
                by_group.setdefault(group, []).append(node)
        share: set[str] = set()
        for group, node_ids in by_group.items():
            if self.host not in rings[group]:
                continue
            owners = ring_of(rings[group], version=view.ring_version).assign(node_ids)
            share.update(n for n, owner in zip(node_ids, owners, strict=True) if owner == self.host)
        frozen = frozenset(share)
        self._share = (key, frozen)
        return frozen

    def reconcile(self, view: MembershipView) -> ReconcileResult | None:
        """Release what we should not own, claim what we should; one pass."""
        with self._reconcile_lock:
            outcome = self._reconcile(view)
        if outcome is None:
            return None
        # Metrics after the pass, none of our locks held.
        result, counts = outcome
        self._metrics.claimed(result.claimed, result.refused)
        self._metrics.released(result.released)
        self._metrics.rehomed(result.rehomed)
        self._metrics.lost(result.lost)
        self._metrics.owned(counts)
        self._metrics.reconciled(view, result.converged)
        return result

    def _reconcile(
        self, view: MembershipView
    ) -> tuple[ReconcileResult, dict[str, tuple[int, int]]] | None:
        """One pass (under the reconcile lock): the result and (owned, pinned) per group."""
        if not self._may_reconcile(view):
            return None
        lost = 0
        if self._since is None:
            # Nothing read yet (the first read waits for the view to settle):
            # with no inventory, every node we hold would look undesired.
            # What the conductor records as ours first: the first read then
            # reads our nodes outside the share only if there are any.
            lost = self._validate_held()
            self.refresh_inventory(deep=False, view=view)
            if self._since is None:
                wait = self.first_read_wait(view)
                result = ReconcileResult(0, len(self.held()), 0, 0, 0, lost=lost, retry_in=wait)
                return result, {}
        lost += self._catch_up(view)
        desired = self.desired(view)
        busy = self._busy_nodes()
        members = view.members
        with self._lock:
            releasable = self._releasable(desired, busy)
            to_claim = self._to_claim(desired, members)
        released = self._release(releasable)
        claimed, refused, rehomed, refusals, stale = self._claim(to_claim, view)
        claimed += self.claimed_by_reads()  # by this pass's reads, or since the last pass
        with self._lock:
            held_now = len(self._held)
            # Converged: we own our share and pins, nothing more, except
            # what stays with another agent's instances.
            converged = self._held.keys() == desired - self._pinned_elsewhere
            settled = converged and desired.isdisjoint(self._pinned_elsewhere)
            counts = group_counts(self._held, self._inventory, self._pinned)
            retry_soon = stale or self._retry_soon(refusals, members)
            retry_in = self._retry_in(members)
        result = ReconcileResult(
            desired=len(desired),
            held=held_now,
            claimed=claimed,
            released=released,
            refused=refused,
            retry_soon=retry_soon,
            rehomed=rehomed,
            lost=lost,
            converged=converged,
            retry_in=None if retry_in is None else max(retry_in, 0.0),
            settled=settled,
        )
        if claimed or released:
            LOG.info(
                "Agent %s reconciled: %d desired, %d held, +%d claimed, -%d released, %d refused",
                self.host,
                result.desired,
                result.held,
                claimed,
                released,
                refused,
            )
        return result, counts

    def _may_reconcile(self, view: MembershipView) -> bool:
        """Whether a pass may act on *view* now (else it is postponed, and logged)."""
        if not self._membership.can_act():
            LOG.info(
                "Agent %s: membership %s, reconcile postponed",
                self.host,
                self._membership.state.value,
            )
            return False
        if self.host not in view.members:
            # Not a view to act on: we are CONNECTED, so it was read while we
            # were (re-)joining.  Acting on it would release every unpinned
            # node we own, to claim them back on the next view.
            LOG.warning(
                "Agent %s: view of %d members does not contain this agent, reconcile postponed",
                self.host,
                len(view.members),
            )
            return False
        return True

    def _catch_up(self, view: MembershipView) -> int:
        """Before a pass on *view*: read the inventory of its share if ours is
        another view's, and the held set after a (re-)join.  Returns the nodes
        found taken over by a peer meanwhile."""
        if self._read_rings is not None and self._read_rings != share_rings(
            view, self.host, self._groups
        ):
            # Our inventory is the share of another view: read what this
            # one gives us first (a pass's caller may not have refreshed).
            self.refresh_inventory(deep=False, view=view)
        return self._validate_held()

    def _validate_held(self) -> int:
        """Read the held set again after a (re-)join, and hold claims back
        while the view settles; the nodes found taken over meanwhile.  A new
        process reads it with its first claim instead (:meth:`_validates_by_claim`)."""
        generation = self._membership.join_generation
        if self._settling_generation != generation:
            self._settling_generation = generation
            settle = self._rejoin_settle if generation > 1 else self._join_settle
            self._claims_after = time.monotonic() + settle
        if not self.needs_revalidation() or self._validates_by_claim():
            return 0
        return self._revalidate()[1]

    def _validates_by_claim(self) -> bool:
        """Whether the first read's claim of our share re-reads our held set
        (``held``, conductor API 1.28), not ``owned_nodes`` before it: our
        process's first join, whose settle has begun (a pass ran), nothing
        read yet, and no earlier process of ours replaced in the group (a
        restart within the TTL may hold nodes: it reads them at once, to act
        on them).  At a cold start of 100 agents ``owned_nodes`` was half the
        conductor's calls, each finding nothing.  A read without it is
        followed by ``owned_nodes``: nothing acts on a node before either."""
        return (
            self._membership.join_generation == 1 == self._settling_generation
            and self._since is None
            and not self._membership.replaced_earlier_process
        )

    def _to_claim(self, desired: set[str], members: Mapping[str, object]) -> list[str]:
        """The desired nodes not held to claim now, sorted (under the lock):
        not those a live or restarting owner keeps (:meth:`_kept`), and none
        while the view settles after a (re-)join."""
        now = time.monotonic()
        self._restart_holds = {h: t for h, t in self._restart_holds.items() if t > now}
        keepers = members.keys() | self._restart_holds.keys()
        to_claim = sorted(
            n for n in desired.difference(self._held) if not self._kept(n, keepers, now)
        )
        settling = self._claims_after - now
        if settling > 0 and to_claim:
            LOG.info(
                "Agent %s joined: %d claims wait %.1f s for the view to settle",
                self.host,
                len(to_claim),
                settling,
            )
            to_claim = []
        return to_claim

    def _retry_soon(
        self, refusals: Mapping[str, str | None], members: Mapping[str, object]
    ) -> bool:
        """Whether some refusals came from owners our view says are gone (under
        the lock).

        The conductor still saw them: it will in a moment, so ask again soon
        -- but not for pinned nodes, which wait for rehome_grace whatever we
        do.  (Nor for owners stopped for a restart: their hold has a deadline.)
        """
        return any(
            owner is not None
            and owner not in members
            and owner not in self._restart_holds
            and node not in self._pinned_elsewhere
            for node, owner in refusals.items()
        )

    def _retry_in(self, members: Mapping[str, object]) -> float | None:
        """Seconds until the next pass may claim what this one could not
        (:attr:`ReconcileResult.retry_in`, not yet clamped at 0; under the lock)."""
        now = time.monotonic()
        waits = [t - now for t in self._restart_holds.values()]
        if self._claims_after > now:
            waits.append(self._claims_after - now)
        if any(
            owner in members and now - when < _HANDOVER_WAIT
            for node, (owner, when) in self._refused_by.items()
            if node not in self._pinned_elsewhere
        ):
            waits.append(_HANDOVER_POLL)
        return min(waits, default=None)

    def _kept(self, node: str, keepers: Collection[str], now: float) -> bool:
        """Whether *node* is left alone this pass: a live owner refused it lately
        (under the lock).  A node pinned to a live owner is left alone as long as
        the record says so: it moves only once that owner is gone."""
        refused = self._refused_by.get(node)
        if refused is None or refused[0] not in keepers:
            return False
        return node in self._pinned_elsewhere or now - refused[1] < _REFUSAL_MEMORY

    def _claim(
        self, nodes: list[str], view: MembershipView
    ) -> tuple[int, int, int, dict[str, str | None], bool]:
        """Claim in batches: (newly claimed, refused, re-homed, refused node -> owner,
        stopped because the view changed).

        The view is looked at again before every batch after the first: when
        it changed (peers joined or left), the rest of *nodes* was computed
        from a ring that is no longer ours, so the pass stops and the next
        one, on the new view, starts at once.
        """
        claimed = rehomed = 0
        refusals: dict[str, str | None] = {}
        nodes, claimed, stopped = self._claim_share_first(nodes, view)
        if stopped:
            return claimed, 0, 0, refusals, True
        for start in range(0, len(nodes), self._batch):
            if start and self._membership.view is not view:
                LOG.info(
                    "Agent %s: the membership changed; %d claims left for the next pass",
                    self.host,
                    len(nodes) - start,
                )
                return claimed, len(refusals), rehomed, refusals, True
            out = self._conductor.claim_nodes(self.host, nodes[start : start + self._batch])
            with self._lock:
                for own in out.granted:
                    if own.node_uuid not in self._held:
                        claimed += 1
                    self._held[own.node_uuid] = own.epoch
                    self._refused_by.pop(own.node_uuid, None)
                    if own.pinned:
                        self._pinned.add(own.node_uuid)
                now = time.monotonic()
                for node, owner in out.refused.items():
                    if owner is not None:
                        self._refused_by[node] = (owner, now)
                # (Replies of conductors before API 1.5 carry no holds.)
                for owner, seconds in out.restarting.items():
                    self._restart_holds[owner] = time.monotonic() + seconds
            if out.changed_at is not None:
                with self._lock:
                    self._wrote(out.changed_at)
            rehomed += len(out.rehomed)
            if out.rehomed:
                LOG.warning(
                    "Agent %s re-homed pinned nodes of a departed agent: %s",
                    self.host,
                    ", ".join(out.rehomed[:20]),
                )
            refusals.update(out.refused)
        return claimed, len(refusals), rehomed, refusals, False
