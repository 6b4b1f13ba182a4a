"""RPC endpoint: the fleet at a glance (members, ownership counts, ring, checks).

Every report is built from a few grouped queries over all nodes (see
:mod:`conductor.db.fleet_report`), never one query per agent or node, and
from this conductor's own membership view.
"""

from __future__ import annotations

from typing import Any

import oslo_messaging as messaging
from sqlalchemy import select

from compute_agent.rpcapi import ComputeAPI
from conductor.common.exception import FieldError, InvalidInput, ServiceUnavailable
from conductor.db import fleet_report
from conductor.db.engine import Database
from conductor.db.models import AgentModel, utcnow
from conductor.endpoints import payload
from conductor.fleet_view import FleetView
from conductor.rpcapi import API_VERSION
from hashring.membership import State

__all__ = ["FleetEndpoint"]


class FleetEndpoint:
    """Fleet methods of the conductor RPC API (since 1.0; 1.1 adds the
    per-agent details of ``fleet_status``, ``ring_status`` and ``fleet_check``)."""

    target = messaging.Target(version=API_VERSION)

    def __init__(
        self, db: Database, fleet: FleetView, host: str, compute: ComputeAPI | None = None
    ) -> None:
        self._db = db
        self._fleet = fleet
        self._host = host
        self._compute = compute  # compute_agent.rpcapi.ComputeAPI

    def drain_agent(self, ctxt: dict[str, Any], host: Any) -> dict[str, Any]:
        """Ask a live agent to hand all its nodes (pins too) over, then stop."""
        agent = payload.check_host(host)
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
        now = utcnow().isoformat()
        owned = fleet_report.owner_counts(self._db)
        in_flight = fleet_report.in_flight_by_host(self._db)
        with self._db.reading() as session:
            departed = {
                row.host: (row.last_seen, row.gone_since)
                for row in session.scalars(
                    select(AgentModel).where(AgentModel.gone_since.is_not(None))
                )
            }
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
            if since is not None and host in owned:  # (the query's filter, for mypy)
                agents.append(
                    _agent_row(host, "gone", owned, in_flight)
                    | {
                        "gone_since": since.isoformat(),
                        "weight": None,
                        "last_seen": last_seen.isoformat(),
                        "ring_version": None,
                        "groups": [],
                    }
                )
        return {
            "conductor": self._host,
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
        """Fleet problems for monitoring: orphans, double claims, excluded peers (1.1).

        ``problems`` is a list of ``{"kind", "message", ...}``; empty means
        healthy.  A conductor whose membership is not connected cannot
        tell who is alive and says so as a problem of its own.
        """
        problems: list[dict[str, Any]] = []
        view = self._fleet.view()
        state = self._fleet.state
        if view is None or state is not State.CONNECTED:
            problems.append(
                {
                    "kind": "membership",
                    "message": f"conductor {self._host} membership is {state.value}: "
                    "cannot tell which agents are alive",
                }
            )
        else:
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
        total, mismatches = fleet_report.allocation_mismatches(self._db)
        for mismatch in mismatches:
            problems.append(
                {
                    "kind": "double-claimed",
                    "node_uuid": mismatch.node_uuid,
                    "instance_uuid": mismatch.instance_uuid,
                    "message": f"node {mismatch.node_uuid}, instance "
                    f"{mismatch.instance_uuid}: {mismatch.reason}",
                }
            )
        if total > len(mismatches):
            problems.append(
                {
                    "kind": "double-claimed",
                    "message": f"... and {total - len(mismatches)} more allocation mismatches",
                }
            )
        return {
            "conductor": self._host,
            "membership": state.value,
            "ring_version": view.ring_version if view else None,
            "ok": not problems,
            "problems": problems,
        }


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
