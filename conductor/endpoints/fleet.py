"""RPC endpoint: the fleet at a glance (members, ownership counts, ring)."""

from __future__ import annotations

from typing import Any

import oslo_messaging as messaging
from sqlalchemy import func, select

from conductor.db.engine import Database
from conductor.db.models import AgentModel, NodeModel
from conductor.endpoints import payload
from conductor.exception import FieldError, InvalidInput, ServiceUnavailable
from conductor.fleet_view import FleetView

__all__ = ["FleetEndpoint"]


class FleetEndpoint:
    """Fleet methods of the conductor RPC API (since 1.0)."""

    target = messaging.Target(version="1.0")

    def __init__(self, db: Database, fleet: FleetView, host: str, compute: Any = None) -> None:
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

        One query groups the nodes by owner: no per-agent round trips.
        """
        view = self._fleet.view()
        with self._db.transaction() as session:
            counts = session.execute(
                select(
                    NodeModel.owner,
                    func.count(),
                    func.count(NodeModel.instance_uuid),
                ).group_by(NodeModel.owner)
            ).all()
            departed = {
                row.host: row.gone_since
                for row in session.scalars(
                    select(AgentModel).where(AgentModel.gone_since.is_not(None))
                )
            }
        owned = {owner: (total, pinned) for owner, total, pinned in counts}
        members = sorted(view.members) if view else []
        agents = [
            {
                "host": host,
                "state": "up",
                "weight": view.members[host].weight if view else None,
                "owned": owned.get(host, (0, 0))[0],
                "pinned": owned.get(host, (0, 0))[1],
            }
            for host in members
        ]
        for host, since in sorted(departed.items()):
            if host in owned:
                agents.append(
                    {
                        "host": host,
                        "state": "gone",
                        "gone_since": since.isoformat() if since else None,
                        "weight": None,
                        "owned": owned[host][0],
                        "pinned": owned[host][1],
                    }
                )
        unowned = owned.get(None, (0, 0))[0]
        return {
            "conductor": self._host,
            "membership": self._fleet.state.value,
            "ring_version": view.ring_version if view else None,
            "agents": agents,
            "excluded": dict(view.excluded) if view else {},
            "nodes": sum(total for total, _ in owned.values()),
            "unowned": unowned,
        }
