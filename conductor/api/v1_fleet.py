# SPDX-License-Identifier: Apache-2.0
"""API v1's fleet: status, check and ring, and an agent's drain (operator calls)."""

from __future__ import annotations

from conductor.api.app import E400, E404, E409, E503, Call, Reply, Route

__all__ = ["FLEET_ROUTES"]


def fleet_status(call: Call) -> Reply:
    return Reply(200, call.api.fleet_status_details())


def fleet_check(call: Call) -> Reply:
    return Reply(200, call.api.fleet_check())


def ring_status(call: Call) -> Reply:
    return Reply(200, call.api.ring_status())


def drain_agent(call: Call) -> Reply:
    return Reply(202, call.api.drain_agent(call.path["host"]))


FLEET_ROUTES: tuple[Route, ...] = (
    Route(
        "GET",
        "/v1/fleet/status",
        fleet_status,
        "ringfleet:fleet:get",
        "fleetStatus",
        "Agents, their nodes and builds in flight.",
        response="Object",
        errors=(E503,),
        tag="fleet",
    ),
    Route(
        "GET",
        "/v1/fleet/check",
        fleet_check,
        "ringfleet:fleet:check",
        "fleetCheck",
        "Orphans, allocation mismatches, excluded peers, stuck builds and deletes, "
        "node state mismatches, back-end (Ironic) mismatches.",
        response="Object",
        errors=(E503,),
        tag="fleet",
    ),
    Route(
        "GET",
        "/v1/fleet/ring",
        ring_status,
        "ringfleet:fleet:get",
        "ringStatus",
        "Nodes per group and owner against the hash ring.",
        response="Object",
        errors=(E503,),
        tag="fleet",
    ),
    Route(
        "POST",
        "/v1/agents/{host}/drain",
        drain_agent,
        "ringfleet:agent:drain",
        "drainAgent",
        "Drain an agent: it hands its nodes over and stops (operator call).",
        status=202,
        response="Object",
        errors=(E400, E404, E409, E503),
        tag="fleet",
    ),
)
