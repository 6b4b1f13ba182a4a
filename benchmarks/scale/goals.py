# SPDX-License-Identifier: Apache-2.0
"""The scale benchmark's goals per agent count (times, rows read, the
join's bytes, RSS), each PASS or MISS, and the scaling goals between
counts (:mod:`benchmarks.scale.scaling`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.report import Goals
from benchmarks.scale.scaling import scaling_goals
from tests.functional.fleet_harness import TTL

__all__ = ["bytes_per_row", "goals", "join_share_mb"]


def _le(seconds: float | None, limit: float) -> bool:
    return seconds is not None and seconds <= limit


def _secs(seconds: float | None, step: Mapping[str, Any]) -> str:
    """Seconds, or what was left when the wait ended."""
    if seconds is not None:
        return f"{seconds:.1f} s"
    if "off" in step:
        return f"not converged ({step['off']} nodes off their ring owner)"
    return "not within the wait"


def bytes_per_row(cold: Mapping[str, Any]) -> float | None:
    """Broker bytes of a cold start per node row the agents read in it
    (``None``: bytes unknown or nothing read): an inventory entry's cost on
    the bus, with the claims, state reports and heartbeats of the cold
    start counted in (an upper bound of the entry's own bytes)."""
    mb = cold.get("traffic", {}).get("broker_mb")
    rows = cold.get("rows_read_total") or 0
    return None if mb is None or rows <= 0 else mb * 1e6 / rows


def join_share_mb(res: Mapping[str, Any]) -> float | None:
    """The joiner's share on the bus: N/(M+1) nodes x :func:`bytes_per_row`
    of the same fleet's cold start, in MB (``None``: not measured)."""
    per_row = bytes_per_row(res.get("cold", {}))
    if per_row is None or "join" not in res:
        return None
    return float(res["join"]["ideal"]) * per_row / 1e6


def _ratio(value: float | None, base: float | None) -> float | None:
    return None if value is None or not base else value / base


def _ratio_goal(
    goals: Goals, name: str, target: float, value: float | None, base: float | None, unit: str
) -> None:
    """``value <= target x base``; SKIP if either is unknown."""
    ratio = _ratio(value, base)
    detail = (
        None
        if ratio is None or value is None or base is None
        else f"{ratio:.2f} x ({value:,.1f} {unit} / {base:,.1f} {unit})"
    )
    goals.add(name, f"<= {target:g} x", ratio, None if ratio is None else ratio <= target, detail)


def goals(runs: Sequence[Mapping[str, Any]], nodes: int, ttl: int = TTL) -> list[dict[str, Any]]:
    """Every goal of every agent count, then each larger count against the smallest."""
    found = Goals()
    for res in runs:
        tag = f"[{res['agents']} agents]"
        _step_goals(found, tag, res, nodes, ttl)
        _resource_goals(found, tag, res)
    scaling_goals(found, runs, nodes)
    return found.items


def _step_goals(goals: Goals, tag: str, res: Mapping[str, Any], nodes: int, ttl: int) -> None:
    """Import, cold start, join and kill -9 of one agent count."""
    if "import" in res:
        s = res["import"]["seconds"]
        goals.add(f"{tag} node import of {nodes:,}", "<= 10 s", s, s <= 10, f"{s:.1f} s")
    if "cold" in res:
        s = res["cold"]["seconds"]
        goals.add(
            f"{tag} cold start, ring converged", "<= 15 s", s, _le(s, 15), _secs(s, res["cold"])
        )
    if "cold" in res and "rows_read_total" in res["cold"]:
        rows = res["cold"]["rows_read_total"]
        goals.add(
            f"{tag} cold start, rows read by all agents",
            "<= 1.2 x nodes",
            rows / nodes,
            rows <= 1.2 * nodes,
            f"{rows / nodes:.2f} x ({rows:,} rows / {nodes:,} nodes)",
        )
    if "join" in res and "cold" in res:
        _ratio_goal(
            goals,
            f"{tag} join, broker bytes against the joiner's share",
            2,
            res["join"].get("traffic", {}).get("broker_mb"),
            join_share_mb(res),
            "MB",
        )
    if "join" in res:
        j = res["join"]
        s, limit = j["seconds"], ttl + 5
        goals.add(
            f"{tag} one agent joins, ring converged",
            f"<= TTL + 5 s = {limit:g} s",
            s,
            _le(s, limit),
            _secs(s, j),
        )
        between = j["moved_between_stayed"]
        goals.add(f"{tag} join: moves between agents that stayed", "0", between, between == 0)
    if "kill" in res:
        s, limit = res["kill"]["owned_s"], ttl + 2
        goals.add(
            f"{tag} kill -9, every node owned again",
            f"<= TTL + 2 s = {limit:g} s",
            s,
            _le(s, limit),
            _secs(s, {}),
        )


def _resource_goals(goals: Goals, tag: str, res: Mapping[str, Any]) -> None:
    """Builds/s, node list and RSS of one agent count."""
    baseline = res.get("builds_baseline", {})
    base_rates = [wave["builds_per_s"] for wave in baseline.get("builds", [])]
    for i, wave in enumerate(res.get("builds", [])):
        rate, name = wave["builds_per_s"], f"{tag} builds/s, {wave['conductors']} conductor(s)"
        goals.add(name, ">= 200/s", rate, rate >= 200, f"{rate:.0f}/s")
        if i < len(base_rates) and base_rates[i] > 0:
            base = base_rates[i]
            goals.add(
                f"{name}, vs {baseline['nodes']} nodes",
                f">= 0.8 x {base:.0f}/s",
                rate / base,
                rate >= 0.8 * base,
                f"{rate:.0f}/s = {rate / base:.2f} x",
            )
    if "node_list" in res:
        s = res["node_list"]["seconds"]
        goals.add(f"{tag} node list", "<= 5 s", s, s <= 5, f"{s:.1f} s")
    rss = res["agent_rss_mb"]
    # 0: no agent ran in a process of its own (all in groups, no join).
    goals.add(
        f"{tag} agent RSS (max)", "<= 150 MB", rss, rss <= 150 if rss else None, f"{rss:.0f} MB"
    )
    if "agent_share_rss_mb" in res:
        rss, per_process = res["agent_share_rss_mb"], res["agents_per_process"]
        goals.add(
            f"{tag} agent RSS share, {per_process} to a process (max RSS / {per_process})",
            "<= 150 MB",
            rss,
            rss <= 150,
            f"{rss:.0f} MB",
        )
    rss = res["conductor_rss_mb"]
    goals.add(f"{tag} conductor RSS (max)", "<= 1024 MB", rss, rss <= 1024, f"{rss:.0f} MB")
    waves = [w["conductor_rss_mb"] for w in res.get("waves", [])]
    if len(waves) >= 3:
        # Bounded: the second half of the waves grows the conductor less
        # than 5 % of what it held after the first wave.
        growth = waves[-1] - waves[len(waves) // 2]
        goals.add(
            f"{tag} conductor RSS growth over waves {len(waves) // 2 + 1}-{len(waves)}",
            f"<= 5 % of {waves[0]:.0f} MB",
            growth,
            growth <= 0.05 * waves[0],
            f"{growth:+.0f} MB",
        )
