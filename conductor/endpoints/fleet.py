# SPDX-License-Identifier: Apache-2.0
"""RPC endpoint: the fleet at a glance (members, ownership counts, ring, checks).

Every report is built from a few grouped queries over all nodes (see
:mod:`conductor.db.fleet_report`), never one query per agent or node, and
from this conductor's own membership view.
"""

from __future__ import annotations

import datetime
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

import oslo_messaging as messaging

from compute_agent.rpcapi import ComputeAPI
from conductor.common import verbs
from conductor.common.clock import shown, utcnow
from conductor.common.conf.conductor import DEFAULT_STUCK_AFTER
from conductor.common.exception import FieldError, Forbidden, InvalidInput, ServiceUnavailable
from conductor.common.ironic import states as ironic_states
from conductor.common.objects import VmState
from conductor.common.tenancy import Caller
from conductor.db import carriage, fleet_report, power_states
from conductor.db.engine import Database
from conductor.fleet_view import FleetView
from conductor.ironic_sync import REMOVED_REASON
from conductor.rpcapi import API_VERSION
from conductor.validation import arguments
from hashring.membership import MembershipView, State

__all__ = ["PROBLEM_KINDS", "FleetEndpoint", "problem_counts"]

LOG = logging.getLogger(__name__)

#: The problem kind of a stuck instance, by its vm_state.
_STUCK_KINDS: Final = {
    VmState.BUILDING.value: "stuck-build",
    VmState.DELETING.value: "stuck-delete",
    fleet_report.STUCK_ACTION: "stuck-action",
}
#: The kinds of problem :func:`problem_counts` counts (every
#: kind of :meth:`FleetEndpoint.fleet_check` but ``membership``, which the
#: ``ringfleet_membership_state`` metric shows).
PROBLEM_KINDS: Final = (
    "orphaned",
    "excluded",
    "agent-unreachable",
    "backend-unreachable",
    "double-claimed",
    *_STUCK_KINDS.values(),
    "state-mismatch",
    "backend-mismatch",
    "power-mismatch",
    "conductor-gone",
)
#: What a stuck instance is doing, in a problem's message.
_STUCK_WORK: Final = {
    VmState.BUILDING.value: "builds",
    VmState.DELETING.value: "deletes",
    fleet_report.STUCK_ACTION: "actions",
}

Problem = dict[str, Any]

#: An RPC API version as announced in a membership (``1.4``).
_VERSION: Final = re.compile(r"[1-9][0-9]*\.[0-9]+")


class FleetEndpoint:
    """Fleet methods of the conductor RPC API (since 1.0; 1.1 adds the
    per-agent details of ``fleet_status``, ``ring_status`` and ``fleet_check``;
    1.9 stuck work, node state mismatches and back-end mismatches to
    ``fleet_check``; 1.16 the API versions to ``fleet_status``).

    ``stuck_after``: ``[conductor] stuck_after``, read at each check (the
    option is mutable).  ``power_mismatch_after``: how long an instance's
    state and its node's power must disagree, both records unchanged,
    before the check reports it (:func:`conductor.power_sync.report_after`).
    """

    target = messaging.Target(version=API_VERSION)

    def __init__(
        self,
        db: Database,
        fleet: FleetView,
        host: str,
        compute: ComputeAPI | None = None,
        *,
        stuck_after: Callable[[], float] = lambda: DEFAULT_STUCK_AFTER,
        power_mismatch_after: Callable[[], float] = lambda: DEFAULT_STUCK_AFTER,
        conductors: Callable[[], frozenset[str] | None] = lambda: None,
    ) -> None:
        """``conductors``: the live conductors (``None``: cannot tell)."""
        self._conductors = conductors
        self._db = db
        self._fleet = fleet
        self._host = host
        self._compute = compute  # compute_agent.rpcapi.ComputeAPI
        self._stuck_after = stuck_after
        self._power_mismatch_after = power_mismatch_after

    def drain_agent(self, ctxt: dict[str, Any], host: Any) -> dict[str, Any]:
        """Ask a live agent to hand all its nodes (pins too) over, then stop."""
        agent = arguments.check_host(host)
        if agent not in self._fleet.live_members():
            raise InvalidInput([FieldError.about("host", "is not a live agent", agent)])
        if self._compute is None:
            raise ServiceUnavailable(reason="this conductor cannot reach agents")
        try:
            state = self._compute.drain(agent)
        except messaging.MessagingTimeout:
            raise ServiceUnavailable(reason=f"agent {agent} did not answer the drain") from None
        return {"host": agent, "state": state}

    def fleet_status(self, ctxt: dict[str, Any]) -> dict[str, Any]:
        """Members as this conductor sees them, with owned and pinned counts.

        Since 1.1 each agent also has ``groups``, ``in_flight``,
        ``last_seen`` and ``ring_version``, and ``excluded_agents`` lists
        the live agents kept out of the ring the same way.  Three grouped
        queries in all: no per-agent round trips.
        """
        view = self._fleet.view()
        now = shown(utcnow())
        owned = fleet_report.owner_counts(self._db)
        in_flight = fleet_report.in_flight_by_host(self._db)
        departed = fleet_report.departed_agents(self._db)
        agents: list[dict[str, Any]] = []
        members = view.members if view else {}
        for host in sorted(members):
            member = members[host]
            agents.append(
                _agent_row(host, "up", owned, in_flight)
                | {
                    "weight": member.weight,
                    # In the group now: seen by this very read.
                    "last_seen": now,
                    "ring_version": member.ring_version,
                    "groups": sorted(member.capabilities.get("groups") or []),
                    "rpc_api": _announced_version(member.capabilities.get("rpc_api")),
                    # Since 1.16's reply: False while no call reaches it (it
                    # leaves the ring while a peer serves).
                    "serving": member.capabilities.get("serving", True) is not False,
                    # Why it cannot reach its back end (Ironic), or None.
                    "backend_problem": _backend_problem(member.capabilities),
                }
            )
        excluded = dict(view.excluded) if view else {}
        # A separate list: a 1.0 client counts ring members and departed
        # agents in "agents" and must not find live excluded peers there.
        excluded_agents = [
            _agent_row(host, "excluded", owned, in_flight)
            | {"reason": reason, "last_seen": now, "ring_version": None, "groups": []}
            for host, reason in sorted(excluded.items())
        ]
        for host, (last_seen, since) in sorted(departed.items()):
            if host in owned:
                agents.append(
                    _agent_row(host, "gone", owned, in_flight)
                    | {
                        "gone_since": shown(since),
                        "weight": None,
                        "last_seen": shown(last_seen),
                        "ring_version": None,
                        "groups": [],
                    }
                )
        return {
            "conductor": self._host,
            "conductor_api": API_VERSION,
            "membership": self._fleet.state.value,
            "ring_version": view.ring_version if view else None,
            "agents": agents,
            "excluded": excluded,
            "excluded_agents": excluded_agents,
            "nodes": sum(total for total, _ in owned.values()),
            "unowned": owned.get(None, (0, 0))[0],
        }

    def ring_status(self, ctxt: dict[str, Any]) -> dict[str, Any]:
        """Per node group: the ring members serving it, and nodes per owner (1.1).

        ``expected`` is each member's fair share of the group's nodes by ring
        weight, so an imbalance shows against it.
        """
        view = self._fleet.view()
        counts = fleet_report.group_owner_counts(self._db)
        members = view.members if view else {}
        groups: list[dict[str, Any]] = []
        for group in sorted(counts):
            by_owner = counts[group]
            total = sum(by_owner.values())
            serving = view.weights_for(group) if view else {}
            weight_sum = sum(serving.values()) or 1.0
            owners = sorted(set(serving) | {o for o in by_owner if o is not None})
            groups.append(
                {
                    "group": group,
                    "nodes": total,
                    "unowned": by_owner.get(None, 0),
                    "agents": [
                        {
                            "host": host,
                            "member": host in serving,
                            "weight": serving.get(host),
                            "nodes": by_owner.get(host, 0),
                            "expected": round(total * serving[host] / weight_sum, 1)
                            if host in serving
                            else 0.0,
                        }
                        for host in owners
                    ],
                }
            )
        return {
            "conductor": self._host,
            "membership": self._fleet.state.value,
            "ring_version": view.ring_version if view else None,
            "members": sorted(members),
            "groups": groups,
        }

    def fleet_check(self, ctxt: dict[str, Any]) -> dict[str, Any]:
        """Fleet problems for monitoring (1.1; stuck work, state and back-end mismatches 1.9).

        ``problems`` is a list of ``{"kind", "message", ...}``; empty means
        healthy.  A conductor whose membership is not connected cannot
        tell who is alive and says so as a problem of its own.  Since 1.9
        the reply carries ``stuck_after``, the bound the stuck work was
        checked against (seconds).

        Admins only (since 1.12): the problems name every project's
        instances (invariant 12).
        """
        if not Caller.from_ctxt(ctxt).is_admin:
            raise Forbidden("fleet check names every project's instances: admins only")
        view = self._fleet.view()
        state = self._fleet.state
        stuck_after = float(self._stuck_after())
        problems = [
            *self._membership_problems(view, state),
            *self._allocation_problems(),
            *self._stuck_problems(stuck_after),
            *self._state_problems(),
            *self._back_end_problems(),
            *self._power_problems(float(self._power_mismatch_after())),
            *_carrier_problems(self._db, self._conductors()),
        ]
        LOG.debug("Fleet check by conductor %s: %d problems", self._host, len(problems))
        return {
            "conductor": self._host,
            "membership": state.value,
            "ring_version": view.ring_version if view else None,
            "stuck_after": stuck_after,
            "ok": not problems,
            "problems": problems,
        }

    def _membership_problems(self, view: MembershipView | None, state: State) -> list[Problem]:
        """Orphaned nodes and excluded peers, or why they cannot be told."""
        if view is None or state is not State.CONNECTED:
            return [
                {
                    "kind": "membership",
                    "message": f"conductor {self._host} membership is {state.value}: "
                    "cannot tell which agents are alive",
                }
            ]
        problems: list[Problem] = []
        found = fleet_report.orphans(self._db, view.members)
        for owner, (nodes, pinned) in sorted(found.dead_owners.items()):
            problems.append(
                {
                    "kind": "orphaned",
                    "host": owner,
                    "nodes": nodes,
                    "pinned": pinned,
                    "message": f"{nodes} nodes ({pinned} pinned) owned by {owner}, "
                    "which is not a live agent",
                }
            )
        if found.unowned_schedulable:
            problems.append(
                {
                    "kind": "orphaned",
                    "host": None,
                    "nodes": found.unowned_schedulable,
                    "node_uuids": found.samples,
                    "message": f"{found.unowned_schedulable} schedulable nodes have "
                    f"no owner (e.g. {', '.join(found.samples[:3])})",
                }
            )
        for host, reason in sorted(view.excluded.items()):
            problems.append(
                {
                    "kind": "excluded",
                    "host": host,
                    "message": f"agent {host} is excluded from the ring: {reason}",
                }
            )
        for host in _not_serving(view):
            problems.append(
                {
                    "kind": "agent-unreachable",
                    "host": host,
                    "message": f"agent {host} says no call reaches it through the broker: "
                    "it leaves the ring while a peer serves (check its broker connection)",
                }
            )
        for host, problem in _backend_problems(view):
            problems.append(
                {
                    "kind": "backend-unreachable",
                    "host": host,
                    "message": f"agent {host} cannot reach its back end: {problem} "
                    "(its builds and actions wait; check the back end and the path to it)",
                }
            )
        return problems

    def _allocation_problems(self) -> list[Problem]:
        """Allocations whose node and instance sides disagree."""
        total, mismatches = fleet_report.allocation_mismatches(self._db)
        problems: list[Problem] = [
            {
                "kind": "double-claimed",
                "node_uuid": mismatch.node_uuid,
                "instance_uuid": mismatch.instance_uuid,
                "message": f"node {mismatch.node_uuid}, instance "
                f"{mismatch.instance_uuid}: {mismatch.reason}",
            }
            for mismatch in mismatches
        ]
        return problems + _more("double-claimed", total - len(mismatches), "allocation mismatches")

    def _stuck_problems(self, stuck_after: float) -> list[Problem]:
        """Builds and deletes whose instance record has not changed for ``stuck_after``."""
        problems: list[Problem] = []
        for vm_state, (total, items) in fleet_report.stuck_work(self._db, stuck_after).items():
            kind = _STUCK_KINDS[vm_state]
            problems.extend(_stuck_problem(kind, item) for item in items)
            problems += _more(kind, total - len(items), f"stuck {_STUCK_WORK[vm_state]}")
        return problems

    def _state_problems(self) -> list[Problem]:
        """Node records whose state disagrees with the instance they host (or not)."""
        total, mismatches = fleet_report.state_mismatches(self._db, REMOVED_REASON)
        problems: list[Problem] = [
            {
                "kind": "state-mismatch",
                **mismatch.to_dict(),
                "message": f"node {mismatch.node_uuid} (owner {mismatch.owner or 'none'}): "
                f"{mismatch.reason}",
            }
            for mismatch in mismatches
        ]
        return problems + _more("state-mismatch", total - len(mismatches), "state mismatches")

    def _back_end_problems(self) -> list[Problem]:
        """Nodes whose Ironic state or claim, as the sync last saw it, disagrees
        with ringfleet's records."""
        total, mismatches = fleet_report.back_end_mismatches(
            self._db,
            active_state=ironic_states.ACTIVE,
            failed_states=ironic_states.FAILED,
            retired_reason=REMOVED_REASON,
        )
        problems = [_back_end_problem(mismatch) for mismatch in mismatches]
        return problems + _more("backend-mismatch", total - len(mismatches), "back-end mismatches")

    def _power_problems(self, after: float) -> list[Problem]:
        """Idle instances whose state disagrees with their node's power, both
        records unchanged for ``after`` seconds (the power sync did not, or
        does not, settle it)."""
        since = _quiet_since(after)
        total, mismatches = power_states.power_mismatches(
            self._db, unchanged_since=since, node_unchanged_since=since, sample=_SAMPLE
        )
        problems = [_power_problem(mismatch) for mismatch in mismatches]
        return problems + _more("power-mismatch", total - len(mismatches), "power mismatches")


#: How many problems of one kind a check lists (the rest are counted).
_SAMPLE: Final = 50


def _quiet_since(seconds: float) -> datetime.datetime:
    """Since when a record unchanged for ``seconds`` has not changed."""
    return utcnow() - datetime.timedelta(seconds=seconds)


def _power_problem(item: power_states.PowerMismatch) -> Problem:
    if item.vm_state == VmState.ACTIVE.value:
        what = (
            "not stopped by the power sync (is [conductor] power_sync_interval 0?); "
            "'instance stop' records it stopped, or power the node on if it should run"
        )
    else:
        what = (
            "powered on outside ringfleet; 'instance start' accepts it running, "
            "or power the node off"
        )
    return {
        "kind": "power-mismatch",
        **item.to_dict(),
        "message": f"instance {item.instance_uuid} is {item.vm_state} but its node "
        f"{item.node_uuid} (owner {item.owner or 'none'}) is {item.power_state}: {what}",
    }


def _back_end_problem(item: fleet_report.BackEndMismatch) -> Problem:
    if item.reason == fleet_report.ORPHAN_CLAIM:
        if item.claimant_state is None:
            where = "not a ringfleet instance"
        else:
            where = f"ringfleet has it {item.claimant_state} on " + (
                f"node {item.claimant_node}" if item.claimant_node else "no node"
            )
        what = (
            f"claimed in Ironic by instance {item.backend_instance_uuid}, which ringfleet "
            f"does not hold on this node ({where})"
        )
    elif item.reason == fleet_report.NOT_DEPLOYED:
        what = f"instance {item.instance_uuid} is active, " + (
            f"Ironic shows its node {item.backend_state}"
            if item.backend_state != ironic_states.ACTIVE
            else "its node is not claimed by it in Ironic"
        )
    else:
        what = (
            f"node hosts no instance and Ironic shows it {item.backend_state}: out of service "
            "until fixed in Ironic"
        )
    ours = (
        f"instance {item.instance_uuid} ({item.vm_state or 'no record'})"
        if item.instance_uuid
        else "no instance"
    )
    claim = (
        f"claimed by {item.backend_instance_uuid}" if item.backend_instance_uuid else "unclaimed"
    )
    return {
        "kind": "backend-mismatch",
        **item.to_dict(),
        "message": f"node {item.node_uuid} (owner {item.owner or 'none'}): {what}; "
        f"ringfleet: {ours}, node {item.provision_state}; Ironic: {item.backend_state}, "
        f"{claim}, as seen by the sync at {shown(item.backend_seen_at)}",
    }


def _stuck_problem(kind: str, item: fleet_report.StuckWork) -> Problem:
    where = (
        f"on node {item.node_uuid} (owner {item.owner or 'none'})"
        if item.node_uuid
        else "on no node yet"
    )
    # The way out of a stuck action: the verb issued again routes it anew.
    hint = (
        f"; issue the verb again to route it anew ({_VERB_HINTS.get(item.task_state or '', '')})"
        if kind == "stuck-action"
        else ""
    )
    return {
        "kind": kind,
        **item.to_dict(),
        "message": f"instance {item.instance_uuid} {item.vm_state}/{item.task_state or '-'} "
        f"{where}: unchanged for {item.idle_seconds:.0f} s{hint}",
    }


#: The command that routes each stuck action again (the verb table's), by task state.
_VERB_HINTS: Final = {verb.task_state.value: f"ringfleet {verb.cli}" for verb in verbs.ACTIONS}


def _announced_version(value: Any) -> str | None:
    """A member's announced ``rpc_api``, or ``None`` when absent or not a
    version (a member of an older release announces none)."""
    if isinstance(value, str) and _VERSION.fullmatch(value):
        return value
    return None


def _more(kind: str, count: int, what: str) -> list[Problem]:
    """The one entry that stands for the ``count`` problems not listed, if any."""
    if count <= 0:
        return []
    return [{"kind": kind, "message": f"... and {count} more {what}"}]


def _not_serving(view: MembershipView) -> list[str]:
    """The members that say no call reaches them (capability ``serving``)."""
    return sorted(
        host
        for host, member in view.members.items()
        if member.capabilities.get("serving", True) is False
    )


def _backend_problem(capabilities: Mapping[str, Any]) -> str | None:
    """What an agent announces about its back end (compute_agent.backend_check)."""
    problem = capabilities.get("backend")
    return str(problem) if problem else None


def _backend_problems(view: MembershipView) -> list[tuple[str, str]]:
    """(host, why) of the members that say they cannot reach their back end."""
    found = ((host, _backend_problem(m.capabilities)) for host, m in view.members.items())
    return sorted((host, problem) for host, problem in found if problem is not None)


def _agent_row(
    host: str,
    state: str,
    owned: dict[str | None, tuple[int, int]],
    in_flight: dict[str, int],
) -> dict[str, Any]:
    total, pinned = owned.get(host, (0, 0))
    return {
        "host": host,
        "state": state,
        "owned": total,
        "pinned": pinned,
        "in_flight": in_flight.get(host, 0),
    }


def problem_counts(
    db: Database,
    fleet: FleetView,
    stuck_after: float,
    *,
    power_mismatch_after: float = DEFAULT_STUCK_AFTER,
    conductors: frozenset[str] | None = None,
) -> dict[str, int]:
    """How many of each kind of problem :meth:`FleetEndpoint.fleet_check` finds,
    counted in full (the check lists samples): the conductor's
    ``ringfleet_fleet_problems`` metric.  Not an endpoint method: those are
    all RPC methods, and this one answers nobody but the metrics.

    ``orphaned`` counts nodes (of dead owners, and schedulable nodes with no
    owner) and ``excluded`` agents; both are left out while the conductor's
    membership is not connected (it cannot tell who is alive).  The other
    kinds count instances or nodes.

    :raises DatabaseUnavailable: the database cannot be used.
    """
    counts = dict.fromkeys(PROBLEM_KINDS, 0)
    view, state = fleet.view(), fleet.state
    if view is None or state is not State.CONNECTED:
        for kind in ("orphaned", "excluded", "agent-unreachable", "backend-unreachable"):
            del counts[kind]
    else:
        found = fleet_report.orphans(db, view.members, sample=0)
        counts["orphaned"] = (
            sum(n for n, _pinned in found.dead_owners.values()) + found.unowned_schedulable
        )
        counts["excluded"] = len(view.excluded)
        counts["agent-unreachable"] = len(_not_serving(view))
        counts["backend-unreachable"] = len(_backend_problems(view))
    counts["double-claimed"] = fleet_report.allocation_mismatches(db, sample=0)[0]
    for vm_state, (total, _items) in fleet_report.stuck_work(db, stuck_after, sample=0).items():
        counts[_STUCK_KINDS[vm_state]] = total
    counts["state-mismatch"] = fleet_report.state_mismatches(db, REMOVED_REASON, sample=0)[0]
    counts["backend-mismatch"] = fleet_report.back_end_mismatches(
        db,
        active_state=ironic_states.ACTIVE,
        failed_states=ironic_states.FAILED,
        retired_reason=REMOVED_REASON,
        sample=0,
    )[0]
    since = _quiet_since(power_mismatch_after)
    counts["power-mismatch"] = power_states.power_mismatches(
        db, unchanged_since=since, node_unchanged_since=since, sample=0
    )[0]
    if conductors is None:
        del counts["conductor-gone"]
    else:
        counts["conductor-gone"] = sum(p["records"] for p in _carrier_problems(db, conductors))
    return counts


def _carrier_problems(db: Database, conductors: frozenset[str] | None) -> list[Problem]:
    """Work in flight carried by a conductor that is gone, or by none (its
    peers carry it on within seconds: one that lasts is a problem)."""
    if conductors is None:
        return []
    problems: list[Problem] = []
    for carrier, records in sorted(
        carriage.carriers(db).items(), key=lambda item: str(item[0] or "")
    ):
        if carrier in conductors:
            continue
        who = "no conductor" if carrier is None else f"conductor {carrier}, which is gone,"
        problems.append(
            {
                "kind": "conductor-gone",
                "host": carrier,
                "records": records,
                "message": f"{records} builds, deletes, actions or node power requests "
                f"are carried by {who} (a live conductor adopts them within seconds; "
                "check that the conductors are members of their group)",
            }
        )
    return problems
