# SPDX-License-Identifier: Apache-2.0
"""The scale benchmark's wall times projected to one agent per host.

The benchmark runs every process on one machine (two cores here), so a
wall time measures the machine as much as the design.  The projection
keeps what the run measured of the design -- the CPU each role spent on a
step, the calls and bytes it sent -- and the protocol's fixed waits, and
puts each role on a host of its own: every agent on its own host, the
conductor on its own (``--conductor-cores N``, default 1: one Python
process is bound by its GIL), PostgreSQL on its own.

For a step (cold start, join, kill -9)::

    T_low  = S + F_low  + max(C / N, D, A)
    T_high = S + F_high + C / N + D + A + R + B

``S``
    an agent's start-up on an idle host: the CPU the joined agent, a
    process of its own, spent until it served (a cold start without a join:
    the agent processes' CPU until the last served, per process); none for
    a kill, nor for ``served``: the cold start from the moment the last
    agent served, whose goal is 5 s.
``F``
    the protocol's fixed waits (:class:`Protocol`, from
    ``compute_agent/service.py``, ``compute_agent/ownership.py`` and
    ``hashring/membership.py``): a cold start's and a joiner's first
    inventory read waits until its share of the view has not changed for
    ``TTL/4 + W`` (``first_read_settle``; W the watch interval; its claims'
    ``join_settle`` of W falls within it), counted from when it saw the
    last member join, up to W after the join (low: ``TTL/4 + W``; high:
    ``TTL/4 + 2W`` + the benchmark's poll of 0.25 s); a kill waits for the victim's
    lease to expire, a TTL after its last keep-alive, which came 0 to a
    beat (``TTL/4``) before the kill (low: ``TTL - TTL/4``), plus etcd's
    expiry check (every 0.5 s), the survivors' next read of the group (W)
    and one retry of a claim the conductor refused while it still saw the
    victim (1 s, ``_HANDOVER_POLL``) (high: ``TTL + 0.5 + W + 1``).
``C / N``
    the conductors' CPU over the step (measured, psutil) spread over the
    conductors, on ``N`` cores.
``D``
    PostgreSQL's CPU over the step (measured: the test server's processes).
``A``
    one agent's CPU over the step on its own host: the agents' CPU after
    the last one served / agents for a cold start (the mean: an agent with
    a larger share spends more), the joiner's own after it served for a
    join (or the others' per agent, if more), the survivors' / survivors for
    a kill.
``R``
    the round trips: the calls the conductors served over the step per
    agent x ``RTT`` (0.5 ms, a LAN), as if each agent's calls went one after
    another.
``B``
    the broker bytes over the step through a 1 Gb/s link (125 MB/s).

``T_low`` lets the roles overlap completely, ``T_high`` lets nothing
overlap; a measurement on a machine that is not the bottleneck should fall
between them.  What the model ignores: RabbitMQ's CPU (not measured) and
etcd's (measured, shown, not counted: etcd serves small reads); queuing
inside the conductor (its database pool, locks) beyond the serial sum; the
spread between agents (a mean stands for the slowest); that CPU time
measured on a loaded machine is inflated (caches, frequency) and that
another host's cores are faster or slower; disk I/O (the test servers'
PostgreSQL runs with ``fsync = off``); and a cold start's agents starting
at different moments (they start together here).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from benchmarks.report import Goals

__all__ = [
    "BANDWIDTH_MB_S",
    "RTT",
    "Protocol",
    "format_projection",
    "project",
    "project_report",
    "projection_goals",
]

#: Seconds per round trip between an agent's host and the conductor's (a LAN).
RTT = 0.0005
#: MB/s through the broker's link (1 Gb/s).
BANDWIDTH_MB_S = 125.0
#: etcd revokes expired leases on a 500 ms tick (its lessor's expiry check).
ETCD_EXPIRY_CHECK = 0.5
#: compute_agent.ownership._HANDOVER_POLL: a refused claim is retried this soon.
HANDOVER_POLL = 1.0
#: Seconds between two of the benchmark's reads of the nodes' owners.
POLL = 0.25


@dataclass(frozen=True)
class Protocol:
    """The protocol's fixed waits, from the membership TTL and watch interval."""

    ttl: float
    watch_interval: float

    @property
    def beat(self) -> float:
        """Seconds between two keep-alives (``hashring.membership``: TTL / 4)."""
        return max(0.1, self.ttl / 4)

    @property
    def first_read_settle(self) -> float:
        """How long a new agent's first read waits for its share to stay
        unchanged (``compute_agent.service``: TTL / 4 + watch interval)."""
        return self.ttl / 4 + self.watch_interval

    def fixed(self, step: str) -> tuple[float, float]:
        """(low, high) fixed wait of a step: ``cold``, ``join`` or ``kill``."""
        if step == "kill":
            low = self.ttl - self.beat
            high = self.ttl + ETCD_EXPIRY_CHECK + self.watch_interval + HANDOVER_POLL
            return low, high
        # The settle counts from when the agent saw the last member join: up
        # to a watch interval after it; then the benchmark's next poll.
        return self.first_read_settle, self.first_read_settle + self.watch_interval + POLL


def _data(res: Mapping[str, Any], step: str) -> Mapping[str, Any]:
    """A step's measurements (``served``: the cold start's)."""
    return res["cold" if step == "served" else step]  # type: ignore[no-any-return]


def _per_agent(res: Mapping[str, Any], step: str) -> float:
    """``A``: one agent's CPU over ``step`` on a host of its own."""
    data = _data(res, step)
    if step in ("cold", "served"):
        return float(data.get("agent_cpu_after_serving_s", 0.0)) / max(int(res["agents"]), 1)
    if step == "join":
        joiner = float(data.get("joiner_cpu_s", 0.0))
        others = (
            float(data.get("agent_cpu_s", 0.0)) - joiner - float(data.get("startup_cpu_s", 0.0))
        )
        return max(joiner, others / max(int(data.get("agents_before", 1)), 1))
    return float(data.get("agent_cpu_s", 0.0)) / max(int(data.get("survivors", 1)), 1)


def _startup(res: Mapping[str, Any], step: str) -> float:
    """``S``: an agent's start-up on an idle host (0 for a kill, and from
    the moment the last agent served)."""
    if step in ("kill", "served"):
        return 0.0
    join = res.get("join") or {}
    if "startup_cpu_s" in join:
        return float(join["startup_cpu_s"])
    cold = res["cold"]
    spent = float(cold.get("agent_cpu_s", 0.0)) - float(cold.get("agent_cpu_after_serving_s", 0.0))
    # Loaded before the start (at the gate), but a start-up all the same.
    spent += float(cold.get("boot_cpu_s", 0.0))
    return max(spent, 0.0) / max(int(cold.get("processes", 1)), 1)


#: The steps projected: ``served`` is the cold start from the moment the
#: last agent served (no start-up: what the design does once they run).
STEPS = ("cold", "served", "join", "kill")


def _measured(data: Mapping[str, Any], step: str) -> float | None:
    """The measured wall time the projection of ``step`` is compared with."""
    value = data.get("owned_s" if step == "kill" else "seconds")
    if value is None:
        return None
    if step == "served":
        return float(value) - float(data["serving_s"])
    return float(value)


def project(
    res: Mapping[str, Any], step: str, protocol: Protocol, cores: float = 1.0, conductors: int = 1
) -> dict[str, Any]:
    """One step of one agent count projected to one agent per host: the
    terms of the model, ``low`` and ``high``, and the measured wall time."""
    data = _data(res, step)
    startup = _startup(res, step)
    fixed_low, fixed_high = protocol.fixed(step)
    conductor = float(data.get("conductor_cpu_s", 0.0)) / max(conductors, 1) / cores
    database = float((data.get("server_cpu_s") or {}).get("postgres", 0.0))
    agent = _per_agent(res, step)
    traffic = data.get("traffic") or {}
    agents = data.get("survivors", res["agents"]) if step == "kill" else res["agents"]
    round_trips = traffic.get("calls", 0) / max(agents, 1) * RTT
    wire = (traffic.get("broker_mb") or 0.0) / BANDWIDTH_MB_S
    work = (conductor, database, agent)
    return {
        "step": step,
        "agents": res["agents"],
        "startup_s": startup,
        "fixed_s": (fixed_low, fixed_high),
        "conductor_s": conductor,
        "database_s": database,
        "agent_s": agent,
        "round_trips_s": round_trips,
        "wire_s": wire,
        "low": startup + fixed_low + max(work),
        "high": startup + fixed_high + sum(work) + round_trips + wire,
        "measured": _measured(data, step),
    }


def project_report(report: Mapping[str, Any]) -> dict[str, Any]:
    """Every step of every agent count, projected (the report's ``projection``)."""
    config = report["config"]
    protocol = Protocol(float(config["ttl_s"]), float(config.get("watch_interval_s", 0.2)))
    cores = float(config.get("conductor_cores", 1))
    conductors = int(config.get("conductors", 1))
    steps = [
        project(res, step, protocol, cores, conductors)
        for res in report["runs"]
        for step in STEPS
        if ("cold" if step == "served" else step) in res
    ]
    return {
        "ttl_s": protocol.ttl,
        "watch_interval_s": protocol.watch_interval,
        "conductor_cores": cores,
        "rtt_s": RTT,
        "bandwidth_mb_s": BANDWIDTH_MB_S,
        "steps": steps,
    }


def verdict(row: Mapping[str, Any]) -> str:
    """Where the measured wall time falls against the projected range."""
    measured = row["measured"]
    if measured is None:
        return "not converged"
    if measured < row["low"]:
        return f"below by {row['low'] - measured:.1f} s: the model over-counts"
    if measured <= row["high"]:
        return "within"
    return f"above by {measured - row['high']:.1f} s: the machine, or what the model ignores"


def goal_limit(step: str, agents: int, ttl: float) -> float:
    """The issue's wall-time goal of a step: cold start 15 s, converged 5 s
    after the last agent served, join TTL + 5 s, kill -9 TTL + 2 s (TTL + 5 s
    from 100 agents)."""
    if step == "cold":
        return 15.0
    if step == "served":
        return 5.0
    if step == "join":
        return ttl + 5
    return ttl + (5 if agents >= 100 else 2)


def projection_goals(goals: Goals, projection: Mapping[str, Any] | None) -> None:
    """Each projected wall time's upper bound against the issue's goal."""
    if not projection:
        return
    for row in projection["steps"]:
        limit = goal_limit(row["step"], row["agents"], projection["ttl_s"])
        high = row["high"]
        goals.add(
            f"[{row['agents']} agents] {row['step']}, projected to one agent per host (high)",
            f"<= {limit:g} s",
            high,
            high <= limit,
            f"{high:.1f} s (range {row['low']:.1f}-{high:.1f} s)",
        )


def format_projection(projection: Mapping[str, Any] | None) -> list[str]:
    """The projection's table and its model (lines); empty without one."""
    if not projection or not projection["steps"]:
        return []
    lines = [
        "",
        "projected to one agent per host (conductor on "
        f"{projection['conductor_cores']:g} core(s), PostgreSQL on its own host; "
        f"TTL {projection['ttl_s']:g} s, watch interval {projection['watch_interval_s']:g} s):",
        "  T_low = S + F_low + max(C/N, D, A);  T_high = S + F_high + C/N + D + A + R + B",
        "  S start-up, F fixed waits, C/N conductor CPU / cores, D PostgreSQL CPU, "
        "A one agent's CPU,",
        f"  R calls per agent x {projection['rtt_s'] * 1e3:g} ms, "
        f"B broker MB / {projection['bandwidth_mb_s']:g} MB/s.  Ignored: RabbitMQ and etcd "
        "CPU, queuing, the spread between agents, disk I/O.",
        f"  {'agents':>6} {'step':<6} {'S':>5} {'F':>9} {'C/N':>6} {'D':>6} {'A':>6} "
        f"{'R+B':>5} {'projected':>12} {'measured':>9}  measured against it",
    ]
    for row in projection["steps"]:
        fixed = row["fixed_s"]
        fixed_text = f"{fixed[0]:.1f}" if fixed[0] == fixed[1] else f"{fixed[0]:.1f}-{fixed[1]:.1f}"
        measured = row["measured"]
        lines.append(
            f"  {row['agents']:>6} {row['step']:<6} {row['startup_s']:>5.1f} {fixed_text:>9} "
            f"{row['conductor_s']:>6.1f} {row['database_s']:>6.1f} {row['agent_s']:>6.2f} "
            f"{row['round_trips_s'] + row['wire_s']:>5.1f} "
            f"{row['low']:>5.1f}-{row['high']:<6.1f} "
            f"{'-' if measured is None else f'{measured:.1f}':>9}  {verdict(row)}"
        )
    return lines
