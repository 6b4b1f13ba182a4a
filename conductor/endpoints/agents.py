# SPDX-License-Identifier: Apache-2.0
"""RPC endpoint for compute agents: ownership claims and state reports.

Every method that touches a node is fenced: the agent sends the epoch it
holds, and a stale one changes nothing (the reply says who owns the node).
"""

from __future__ import annotations

import datetime
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, cast

import oslo_messaging as messaging

from conductor import ring_share
from conductor.common import checks
from conductor.common.exception import (
    FieldError,
    InvalidInput,
    RingfleetError,
    ServiceUnavailable,
)
from conductor.common.objects import ClaimOutcome, Ownership
from conductor.db import agents as agents_db
from conductor.db import instances, node_pages, node_states, ownership, share_claims
from conductor.db import nodes as nodes_db
from conductor.db.engine import Database
from conductor.endpoints import share_replies, state_reports
from conductor.fleet_view import FleetView
from conductor.inventory_hints import InventoryHints
from conductor.lifecycle import BuildLifecycle
from conductor.notifications import Notifier
from conductor.rpcapi import API_VERSION
from conductor.validation import agent_reports, arguments
from hashring.ring import Ring

__all__ = ["AgentsEndpoint"]

LOG = logging.getLogger(__name__)

#: Inventory reads, and share claims apart, (a page of up to 50,000 rows each)
#: one conductor runs at once; more wait for a turn.  Each holds its rows, its
#: reply and an agent's arcs in memory while it runs, and a cold start of
#: 100 agents sent dozens at once, for no gain in speed: the reads share one
#: GIL and the database pool.  Claims have turns of their own: after a kill
#: -9 at 100 agents, the survivors' claims (invariant 2) waited behind the
#: hundreds of reads the same view change sent.
BULK_CALLS_AT_ONCE = 8


#: Claim times one read may leave out: an agent's claims of the last minute.
MAX_CLAIM_TIMES = 1000


def _claim_times(value: object) -> list[datetime.datetime]:
    """``not_claimed_at``: null or a list of ISO 8601 times."""
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_CLAIM_TIMES:
        raise InvalidInput(
            [
                FieldError.about(
                    "not_claimed_at", f"must be a list of at most {MAX_CLAIM_TIMES} times", value
                )
            ]
        )
    return [arguments.check_time(t, "not_claimed_at") for t in value]


class AgentsEndpoint:
    """Agent-facing methods of the conductor RPC API (since 1.0; 1.2 added
    ``report_build_results``, 1.4 ``resume_work``, 1.5 ``hold_for_restart``,
    1.19 ``claim_share``; ``report_node_states`` replies carry ``gone`` 1.20;
    ``claim_share`` reads the share it claimed 1.26, and the held set 1.28)."""

    target = messaging.Target(version=API_VERSION)

    def __init__(
        self,
        db: Database,
        fleet: FleetView,
        rehome_grace: Callable[[], float],
        builds: BuildLifecycle | None = None,
        restart_grace: Callable[[], float] = lambda: 0.0,
        *,
        notifier: Notifier | None = None,
        hints: InventoryHints | None = None,
        bulk_calls_at_once: int = BULK_CALLS_AT_ONCE,
    ) -> None:
        self._db = db
        self._bulk_turn = threading.BoundedSemaphore(bulk_calls_at_once)
        self._claim_turn = threading.BoundedSemaphore(bulk_calls_at_once)
        self._notifier = notifier or Notifier.disabled()
        self._fleet = fleet
        # Nodes released or handed over are the ring owner's or the
        # receiver's to learn of now, not at its next quiet pass.
        self._changed = hints.changed if hints is not None else lambda _g=None, _h=None: None
        # The build queue (re-routing after a re-home or a restart) and the
        # results it applies (reschedule, ERROR); None: a conductor without
        # build workers.
        self._builds = builds
        # Callables, so that a SIGHUP'd new value applies to the next call.
        self._rehome_grace = rehome_grace
        self._restart_grace = restart_grace

    def claim_nodes(self, ctxt: dict[str, Any], host: Any, node_uuids: Any) -> dict[str, Any]:
        """Claim nodes for ``host``; see :func:`conductor.db.ownership.claim_nodes`."""
        agent = arguments.check_host(host)
        wanted = arguments.check_uuid_list(node_uuids, "node_uuids")
        live = self._fleet.live_members()
        if agent not in live:
            # An agent the conductor does not see in the group must not take
            # nodes: it may be the stale half of a partition.
            raise InvalidInput.not_live_member(agent)
        out = ownership.claim_nodes(
            self._db,
            agent,
            wanted,
            live_members=live,
            rehome_grace=self._rehome_grace(),
            rehome_owners=self._ring_owners,
        )
        self._notifier.claimed(agent, out)
        if out.rehomed and self._builds is not None:
            self._builds.rehomed(out.rehomed)
        if out.rehomed:
            LOG.warning(
                "Agent %s re-homed %d pinned nodes: %s",
                agent,
                len(out.rehomed),
                ", ".join(out.rehomed[:20]),
            )
        LOG.info(
            "Agent %s claimed %d of %d nodes (%d refused, %d missing)",
            agent,
            len(out.granted),
            len(wanted),
            len(out.refused),
            len(out.missing),
        )
        return out.to_dict()

    def claim_share(
        self,
        ctxt: dict[str, Any],
        *,
        host: Any,
        ring: Any,
        groups: Any = None,
        exclude_groups: Any = None,
        limit: Any = 5000,
        previous_ring: Any = None,
        read: Any = None,
        held: Any = False,
    ) -> dict[str, Any]:
        """Claim the unpinned nodes of ``host``'s share of ``ring`` that have no
        live owner, at most ``limit``, in one statement (since 1.19); see
        :func:`conductor.db.share_claims.claim_arcs`.  With ``previous_ring``
        (1.25), only those of the arcs gained since that ring: a peer's
        departure gives each survivor a few dozen of its thousands of arcs.

        The reply, in columns: ``uuids``, ``epochs`` and ``groups`` of the
        nodes taken, ``changed_at`` (their change time), ``more`` (the limit
        was reached).  Nodes not taken are not listed: the agent claims what
        is left of its share by uuid (``claim_nodes``), which says why.

        ``read`` (1.26): also ``share``, the first page of at most ``read``
        nodes of those arcs as they stand after the claim, as
        ``list_node_uuids`` by share with ``columns`` replies (its ``next``
        is that call's ``marker``).  An agent's first read of its share is
        then the call that claims it: at a cold start that was a call of
        its three, each with its turn at a conductor.

        ``held`` (1.28): also ``held``, every node ``host`` owned just before
        the claim, as ``owned_nodes`` lists them, read in the claim's
        transaction.  A new agent process re-reads its held set with the
        call that claims and reads its share: at a cold start, with
        ``owned_nodes``, one call of its two.

        With ``previous_ring``, the reply also has ``still_live``: the
        members of that ring gone from ``ring`` that this conductor still
        sees live.  Each process reads the group on its own schedule: while
        the list is not empty nothing is taken (unless ``held`` is asked
        for) and this conductor reads the group at once; the agent claims
        again in a moment.
        """
        agent, spec, previous, group_list, excluded, most, page, with_held = _share_claim(
            host=host,
            ring=ring,
            previous_ring=previous_ring,
            groups=groups,
            exclude_groups=exclude_groups,
            limit=limit,
            read=read,
            held=held,
        )
        live = self._fleet.live_members()
        if agent not in live:
            raise InvalidInput.not_live_member(agent)
        still_live = None if previous is None else ring_share.departed(previous, spec) & live
        if still_live and not with_held:
            out = self._not_seen_leaving()
        else:
            with self._claim_turn:
                out = share_claims.claim_arcs(
                    self._db,
                    agent,
                    ring_share.share_arcs(spec, agent, previous),
                    live_members=live,
                    limit=most,
                    groups=group_list,
                    exclude_groups=excluded,
                    read=page,
                    held=with_held,
                )
            self._say_share_claimed(agent, out)
        reply = share_replies.claim_reply(out)
        if still_live is not None:
            # Additive: an agent that saw a peer leave before this conductor
            # did learns why nothing was taken, and claims again soon.
            reply["still_live"] = sorted(still_live)
        return reply

    def _not_seen_leaving(self) -> share_claims.ArcClaim:
        """The claim while members the agent saw leave are still live to this
        conductor: nothing taken, and the group read now (their nodes are
        not free yet, and the agent asks again in a moment: at a kill -9 of
        one of 100 agents, every survivor asks, twice a second, so no
        claim's work either)."""
        self._fleet.read_soon()
        return share_claims.ArcClaim(uuids=[], epochs=[], groups=[], changed_at=None, more=False)

    def _say_share_claimed(self, agent: str, out: share_claims.ArcClaim) -> None:
        """The notification and the log line of a claim by share."""
        if self._notifier.enabled:  # thousands of records made for nothing otherwise
            granted = [
                Ownership(node_uuid=uuid, owner=agent, epoch=epoch, pinned=False)
                for uuid, epoch in zip(out.uuids, out.epochs, strict=True)
            ]
            outcome = ClaimOutcome(granted=granted, taken=dict.fromkeys(out.uuids))
            self._notifier.claimed(agent, outcome)
        LOG.info(
            "Agent %s claimed %d of %d nodes (0 refused, 0 missing): its share's free nodes",
            agent,
            len(out.uuids),
            len(out.uuids),
        )

    def _ring_owners(self, nodes: Sequence[tuple[str, str]]) -> list[str | None]:
        """Each ``(node, group)``'s owner by this conductor's ring of the group;
        ``None`` where no live agent serves the group."""
        rings: dict[str, Ring] = {}
        owners: list[str | None] = []
        for node, group in nodes:
            ring = rings.get(group)
            if ring is None:
                ring = rings[group] = self._fleet.ring(group)
            owners.append(ring.owner(node) if len(ring) else None)
        return owners

    def hold_for_restart(self, ctxt: dict[str, Any], host: Any) -> dict[str, Any]:
        """``host`` stops for a restart: none of its nodes moves meanwhile (since 1.5).

        Called by an agent stopped with SIGTERM, before it leaves the group:
        for ``[conductor] restart_grace`` seconds no peer may claim its nodes,
        so an agent restarted within that time moves nothing.  ``seconds`` 0
        in the reply: no hold (the option is 0), its nodes move as before.
        """
        agent = arguments.check_host(host)
        if agent not in self._fleet.live_members():
            # Only a member may hold its nodes: not the stale half of a partition.
            raise InvalidInput.not_live_member(agent)
        seconds = self._restart_grace()
        if seconds <= 0:
            return {"host": agent, "seconds": 0.0, "until": None}
        until = agents_db.hold_for_restart(self._db, agent, seconds)
        LOG.info("Agent %s stops for a restart: its nodes stay for %.0f s", agent, seconds)
        return {"host": agent, "seconds": seconds, "until": until.isoformat()}

    def resume_work(self, ctxt: dict[str, Any], host: Any) -> dict[str, Any]:
        """Route again the builds and teardowns in flight on ``host``'s nodes (since 1.4).

        Called by an agent after it (re)started or re-validated its claims:
        its previous incarnation's accepted work is gone with it.
        """
        agent = arguments.check_host(host)
        # Back from a restart: its nodes move as usual again if it dies now.
        # Only once this conductor sees it live: until then a peer's claim
        # would find its nodes neither live nor held and take them (the
        # hold then ends when the view has it back, fleet_view's record).
        if self._sees_live(agent):
            agents_db.end_restart_hold(self._db, agent)
        if self._builds is None:
            raise ServiceUnavailable("this conductor routes no builds")
        builds, teardowns = self._builds.resume_agent(agent)
        return {"builds": builds, "teardowns": teardowns}

    def _sees_live(self, agent: str) -> bool:
        """Whether this conductor's view has ``agent`` live; False when it
        cannot vouch for its view (its membership suspended or lost)."""
        try:
            return agent in self._fleet.live_members()
        except ServiceUnavailable:
            return False

    def report_progress(self, ctxt: dict[str, Any], host: Any, nodes: Any) -> dict[str, Any]:
        """The back end moved the builds on these nodes on: a heartbeat (since 1.10).

        ``nodes`` maps node uuids to the epochs ``host`` holds.  The build or
        teardown in flight on each node ``host`` owns at that epoch counts
        as progressing: ``build_timeout`` starts again from now, so the
        sweeper never fails an attempt the back end is still moving on.
        """
        agent = arguments.check_host(host)
        touched = instances.touch_progressing(
            self._db, agent, arguments.check_epoch_map(nodes, "nodes")
        )
        return {"touched": len(touched)}

    def release_nodes(self, ctxt: dict[str, Any], host: Any, claims: Any) -> dict[str, Any]:
        """Give up nodes held at the given epochs (pinned nodes are refused)."""
        agent = arguments.check_host(host)
        out = ownership.release_nodes(self._db, agent, arguments.check_epoch_map(claims, "claims"))
        self._notifier.released(agent, out)
        LOG.info("Agent %s released %d nodes (%d refused)", agent, len(out.done), len(out.refused))
        if out.done:
            owners = self._new_owners(agent, list(out.done))
            if owners is None or owners:
                self._changed(None, owners)
        return out.to_dict()

    def _new_owners(self, agent: str, released: Sequence[str]) -> set[str] | None:
        """The agents this conductor's view gives the ``released`` nodes, to
        tell them alone; ``None`` (every agent) when it gives one of them to
        nobody.  A node it gives to ``agent`` still is left out: this view
        lags the agent's, and the new owner, a joiner that this conductor has
        not seen yet, reads and claims its share on its own (a refused claim
        is tried again every second).  Every agent was told instead: at a
        join of the 101st agent, seen here 7 s after the agents saw it, each
        release made all 100 others read their shares."""
        view = self._fleet.view()
        if view is None:
            return None
        rings: dict[str, Ring] = {}
        owners: set[str] = set()
        for uuid, group in nodes_db.groups_of(self._db, released).items():
            ring = rings.get(group)
            if ring is None:
                ring = rings[group] = view.ring(group)
            owner = ring.owner(uuid) if len(ring) else None
            if owner is None:
                return None
            if owner != agent:
                owners.add(owner)
        return owners

    def transfer_nodes(self, ctxt: dict[str, Any], host: Any, transfers: Any) -> dict[str, Any]:
        """Hand nodes (pinned ones too) to other live agents: drain and hand-over."""
        agent = arguments.check_host(host)
        checked = [
            ownership.Transfer(*transfer)
            for transfer in agent_reports.check_transfers(transfers, self._fleet.live_members())
        ]
        out = ownership.transfer_nodes(self._db, agent, checked)
        self._notifier.transferred(agent, {t.node_uuid: t.new_owner for t in checked}, out)
        LOG.info(
            "Agent %s handed over %d nodes (%d refused)", agent, len(out.done), len(out.refused)
        )
        if out.done:
            done = set(out.done)
            self._changed(None, {t.new_owner for t in checked if t.node_uuid in done})
        return out.to_dict()

    def list_node_uuids(
        self,
        ctxt: dict[str, Any],
        *,
        groups: Any = None,
        since: Any = None,
        marker: Any = None,
        limit: Any = 5000,
        columns: Any = False,
        ring: Any = None,
        member: Any = None,
        previous_ring: Any = None,
        exclude_groups: Any = None,
        owner: Any = None,
        not_claimed_at: Any = None,
        outside: Any = None,
    ) -> dict[str, Any]:
        """Node uuids, groups and claims, paged: what an agent splits with the ring.

        Each entry also carries the node's ``owner``, ``epoch`` and ``pinned``,
        so an agent learns of nodes handed to it (a drain, an operator's move)
        and of nodes it lost, from the same incremental read.

        ``groups`` limits to node groups (``None``: all); ``since`` (ISO 8601,
        from a previous reply's ``as_of``) returns only nodes changed since,
        so an agent refreshes its inventory without re-reading the fleet.

        ``columns`` (1.8): the same as one list per field (``uuids``,
        ``groups``, ``owners``, ``epochs``, ``pinned``) instead of one object
        per node: a third of the CPU and 40 % fewer bytes for a 5,000-node
        page, and every agent reads the whole fleet at start.

        By share (1.15): ``ring`` (``{"version", "members": {id: weight}}``)
        and ``member``: only the nodes the ring gives that member, read by
        their stored ring position (:mod:`conductor.ring_share`); with
        ``previous_ring``, only those it did not own in that ring (what a
        membership change gave it); ``exclude_groups``: none of these groups
        (the groups whose rings differ).  ``owner``: only the nodes that
        agent owns.  Replies of 1.15 calls carry ``next``, the ``marker`` of
        the next page (``None``: the last page).  ``not_claimed_at`` (1.15, with
        ``member`` or ``owner``): change times of that agent's own claims (their
        replies' ``changed_at``); the rows they changed last are left out.
        ``outside`` (1.19, with ``owner``): shares that agent reads by ring,
        ``[{"ring", "groups", "exclude_groups"}]``; its nodes in them are left
        out (read by share already).

        Each entry also has the recorded ``power_state`` (``power_states``
        in columns; no version: older agents read the fields they know):
        an agent's first state report sends only the states that differ.
        """
        group_list = None if groups is None else arguments.check_groups(groups)
        changed_after = None if since is None else arguments.check_time(since, "since")
        page = arguments.check_limit(limit, maximum=50_000)
        arguments.check_bool(columns, "columns")
        claims = _claim_times(not_claimed_at)
        with self._bulk_turn:
            if ring is not None:
                inventory, following = self._share_page(
                    claims=claims,
                    ring=ring,
                    member=member,
                    previous_ring=previous_ring,
                    exclude_groups=exclude_groups,
                    marker=marker,
                    limit=page,
                    groups=group_list,
                    changed_after=changed_after,
                )
                next_marker = share_replies.marker_of(following)
            else:
                inventory, next_marker = self._uuid_page(
                    owner=owner,
                    outside=outside,
                    marker=marker,
                    limit=page,
                    groups=group_list,
                    changed_after=changed_after,
                    claims=claims,
                )
        return share_replies.inventory_reply(inventory, next_marker, columns=columns)

    def _uuid_page(
        self,
        *,
        owner: Any,
        outside: Any,
        marker: Any,
        limit: int,
        groups: list[str] | None,
        changed_after: datetime.datetime | None,
        claims: list[datetime.datetime],
    ) -> tuple[node_pages.InventoryPage, str | None]:
        """A page of ``list_node_uuids`` in uuid order (not by share), and the
        next page's marker; with ``owner`` and ``outside`` (1.19), less that
        agent's nodes in those shares."""
        agent = None if owner is None else arguments.check_host(owner, "owner")
        shares = [] if outside is None else ring_share.check_shares(outside, "outside")
        if shares and agent is None:
            raise InvalidInput([FieldError.about("outside", "needs owner", outside)])
        inventory = node_pages.inventory_page(
            self._db,
            limit=limit,
            groups=groups,
            changed_after=changed_after,
            marker=None if marker is None else checks.validate_uuid(marker, "marker"),
            owner=agent,
            not_claimed_at=claims,
        )
        next_marker = inventory.uuids[-1] if len(inventory.uuids) >= limit else None
        if shares and agent is not None:
            inventory = share_replies.outside(inventory, agent, shares)
        return inventory, next_marker

    def _share_page(
        self,
        *,
        ring: Any,
        member: Any,
        previous_ring: Any,
        exclude_groups: Any,
        marker: Any,
        limit: int,
        groups: list[str] | None,
        changed_after: datetime.datetime | None,
        claims: list[datetime.datetime],
    ) -> tuple[node_pages.InventoryPage, tuple[int, str] | None]:
        """A page of ``list_node_uuids`` by share (1.15)."""
        spec, host, previous, excluded, after = checks.collect(
            lambda: ring_share.check_ring(ring, "ring"),
            lambda: arguments.check_host(member, "member"),
            lambda: (
                None
                if previous_ring is None
                else ring_share.check_ring(previous_ring, "previous_ring")
            ),
            lambda: (
                []
                if exclude_groups is None
                else arguments.check_groups(exclude_groups, "exclude_groups")
            ),
            lambda: None if marker is None else share_replies.share_marker(marker),
        )
        return node_pages.share_page(
            self._db,
            ring_share.share_arcs(spec, host, previous),
            limit=limit,
            groups=groups,
            exclude_groups=excluded,
            changed_after=changed_after,
            after=after,
            claimed=(host, claims) if claims else None,
        )

    def report_build_result(
        self,
        ctxt: dict[str, Any],
        *,
        host: Any,
        instance_uuid: Any,
        node_uuid: Any,
        epoch: Any,
        success: Any,
        fault: Any = None,
        node_clean: Any = True,
    ) -> dict[str, Any]:
        """The outcome of a build an agent ran; fenced by the node's epoch."""
        agent, result = checks.collect(
            lambda: arguments.check_host(host),
            lambda: agent_reports.check_build_result(
                {
                    "instance_uuid": instance_uuid,
                    "node_uuid": node_uuid,
                    "epoch": epoch,
                    "success": success,
                    "node_clean": node_clean,
                    "fault": fault,
                },
            ),
        )
        if self._builds is None:
            raise ServiceUnavailable(reason="this conductor runs no build workers")
        accepted = self._builds.report_result(
            agent,
            result["instance_uuid"],
            result["node_uuid"],
            result["epoch"],
            success=result["success"],
            fault=result["fault"],
            node_clean=result["node_clean"],
        )
        return {"accepted": accepted}

    def report_build_results(
        self, ctxt: dict[str, Any], *, host: Any, results: Any
    ) -> dict[str, Any]:
        """Several build outcomes of one agent in one call (since 1.2).

        The batch is validated whole first: a malformed item refuses the call
        (``InvalidInput`` naming every bad field) and changes nothing.  Then
        each item is applied on its own, exactly as ``report_build_result``
        would: a stale item, or one whose processing fails (a database error,
        say), does not affect the others.  The reply has one entry per item,
        in order: ``{"accepted": bool}``, plus ``"error"`` (text) when its
        processing failed, and ``"retry": true`` when it failed for a reason
        that may pass (the database is unreachable): the agent sends that
        item again later; it logs the others.
        """
        agent = arguments.check_host(host)
        items = agent_reports.check_build_results(results)
        if self._builds is None:
            raise ServiceUnavailable(reason="this conductor runs no build workers")
        replies: list[dict[str, Any]] = []
        for item in items:
            try:
                accepted = self._builds.report_result(agent, **item)
            except ServiceUnavailable as exc:
                # Neither applied nor refused: the agent sends it again.
                replies.append({"accepted": False, "error": str(exc), "retry": True})
            except Exception as exc:  # one failed item must not lose the others
                if not isinstance(exc, RingfleetError):
                    LOG.exception(
                        "Agent %s: build result for instance %s on node %s failed",
                        agent,
                        item["instance_uuid"],
                        item["node_uuid"],
                    )
                replies.append({"accepted": False, "error": f"{type(exc).__name__}: {exc}"})
            else:
                replies.append({"accepted": accepted})
        return {"results": replies}

    def report_destroy_result(
        self,
        ctxt: dict[str, Any],
        *,
        host: Any,
        instance_uuid: Any,
        node_uuid: Any,
        epoch: Any,
        success: Any,
        fault: Any = None,
    ) -> dict[str, Any]:
        """The outcome of a teardown an agent ran; fenced by the node's epoch."""
        agent, (instance, node, held, ok, text) = checks.collect(
            lambda: arguments.check_host(host),
            lambda: agent_reports.check_destroy_result(
                instance_uuid, node_uuid, epoch, success, fault
            ),
        )
        if self._builds is None:
            raise ServiceUnavailable(reason="this conductor runs no build workers")
        accepted = self._builds.report_destroyed(
            agent, instance, node, held, success=ok, fault=text
        )
        return {"accepted": accepted}

    def owned_nodes(self, ctxt: dict[str, Any], host: Any) -> list[dict[str, Any]]:
        """Every node ``host`` owns, with epochs and pins: re-validation after LOST."""
        agent = arguments.check_host(host)
        return [o.to_dict() for o in ownership.owned_by(self._db, agent)]

    def report_node_states(self, ctxt: dict[str, Any], host: Any, states: Any) -> dict[str, Any]:
        """Power/provision states of owned nodes, each fenced by its epoch.

        ``gone`` (since 1.20): the stale nodes that no longer exist (deleted
        while the agent held them), for the agent to forget.  ``changed_at``
        (since 1.27): the change time written on the rows the reports
        changed (``None``: none), which the agent's change reads may leave
        out as they do its claims' (``not_claimed_at``).
        """
        agent = arguments.check_host(host)
        reports = agent_reports.check_node_states(states)
        # The checks return exactly a StateReport's keys.
        return state_reports.record(self._db, agent, cast(list[node_states.StateReport], reports))


def _share_claim(
    *,
    host: Any,
    ring: Any,
    previous_ring: Any,
    groups: Any,
    exclude_groups: Any,
    limit: Any,
    read: Any,
    held: Any,
) -> list[Any]:
    """``claim_share``'s arguments, checked, every bad one named."""
    return checks.collect(
        lambda: arguments.check_host(host),
        lambda: ring_share.check_ring(ring, "ring"),
        lambda: (
            None if previous_ring is None else ring_share.check_ring(previous_ring, "previous_ring")
        ),
        lambda: None if groups is None else arguments.check_groups(groups),
        lambda: (
            []
            if exclude_groups is None
            else arguments.check_groups(exclude_groups, "exclude_groups")
        ),
        lambda: arguments.check_limit(limit, maximum=50_000),
        lambda: None if read is None else arguments.check_limit(read, "read", maximum=50_000),
        lambda: arguments.check_bool(held, "held"),
    )
