# SPDX-License-Identifier: Apache-2.0
"""The scale benchmark's report as text: a table per agent count, the
scaling table between counts (:mod:`benchmarks.scale.scaling`), the
projection to one agent per host (:mod:`benchmarks.scale.projection`) and
the goals.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from benchmarks.report import format_goals
from benchmarks.scale.goals import bytes_per_row, join_share_mb
from benchmarks.scale.projection import format_projection
from benchmarks.scale.scaling import format_scaling

__all__ = ["cell", "format_report", "traffic_rows"]


def cell(seconds: float | None, off: int | None = None) -> str:
    """Seconds for the table (without unit), or what the wait ended on."""
    if seconds is not None:
        return f"{seconds:.1f}"
    return "timeout" if off is None else f"timeout, {off:,} off"


def traffic_rows(step: Mapping[str, Any]) -> list[tuple[str, str]]:
    traffic = step.get("traffic")
    if traffic is None:
        return []
    mb = traffic["broker_mb"]
    quiet_kb = traffic["quiet_broker_kb_s"]
    rows = [
        (
            f"  message bus over those {traffic['seconds']:.1f} s: broker MB / conductor calls",
            f"{'n/a' if mb is None else f'{mb:.1f}'} / {traffic['calls']:,}",
        )
    ]
    if traffic["quiet_calls_s"] is not None:  # a cold start has no quiet fleet before it
        rows.append(
            (
                "  (the same fleet quiet, before: kB/s / calls/s)",
                f"{'n/a' if quiet_kb is None else f'{quiet_kb:.0f}'} / "
                f"{traffic['quiet_calls_s']:.1f}",
            )
        )
    spent = traffic.get("cpu_s_by_method") or {}
    if spent:  # (conductors older than the metric say nothing)
        top = sorted(spent.items(), key=lambda item: -item[1])[:4]
        rows.append(
            (
                "  conductor CPU in its calls, by method (s)",
                ", ".join(f"{method} {seconds:.2f}" for method, seconds in top),
            )
        )
    if traffic.get("node_index_cpu_s"):  # (nor about their node index)
        rows.append(("  conductor CPU in its node index (s)", f"{traffic['node_index_cpu_s']:.2f}"))
    return rows


def _rows_cell(total: int, most: int) -> str:
    return f"{total:,} / {most:,}"


def _mb(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _cpu_rows(step: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A step's CPU (conductors, agents, servers) and etcd requests: until
    the ring converged and, since ``settled_s``, the conductors idle again."""
    rows = []
    if "settled_s" in step:
        rows.append(("  then the conductors idle again after (s)", f"{step['settled_s']:.1f}"))
    rows.append(("  conductor CPU during it (s)", f"{step['conductor_cpu_s']:.1f}"))
    if "agent_cpu_s" in step:
        rows.append(("  agent processes' CPU during it (s)", f"{step['agent_cpu_s']:.1f}"))
    servers = step.get("server_cpu_s") or {}
    if servers:
        rows.append(
            (
                "  servers' CPU during it (s): " + " / ".join(sorted(servers)),
                " / ".join(f"{servers[s]:.1f}" for s in sorted(servers)),
            )
        )
    etcd = step.get("etcd")
    if etcd is not None:
        rows.append(
            (
                f"  etcd requests: all / per client ({etcd['clients']} clients)",
                f"{etcd['requests']:,} / {etcd['per_client']:.0f}",
            )
        )
    return rows


def _cold_rows(c: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The cold start's rows, and the quiet fleet's after it."""
    rows = []
    if "boot_s" in c:  # the agents' code loaded before the start (their gate)
        rows.append(
            (
                "agent processes loaded before the start: wall / CPU (s)",
                f"{c['boot_s']:.1f} / {c['boot_cpu_s']:.1f}",
            )
        )
    rows += [
        ("cold start: ring converged, from start (s)", cell(c["seconds"], c["off"])),
        ("  all agents serving after (s)", f"{c['serving_s']:.1f}"),
        ("  claims granted", f"{c['granted']:,}"),
        ("  claims refused", f"{c['refused']:,}"),
        ("  nodes released", f"{c['released']:,}"),
        ("  claim / release calls", f"{c['claim_calls']:,} / {c['release_calls']:,}"),
        *_cpu_rows(c),
        *traffic_rows(c),
    ]
    if "agent_cpu_after_serving_s" in c:
        rows.append(
            ("  agents' CPU after the last served (s)", f"{c['agent_cpu_after_serving_s']:.1f}")
        )
    if "quiet" in c:
        rows += _quiet_rows(c["quiet"])
    if "rows_read_total" in c:
        rows += [
            (
                "  inventory rows read: all agents / most by one",
                _rows_cell(c["rows_read_total"], c["rows_read_max"]),
            ),
            ("  broker bytes per row read", _mb(bytes_per_row(c), 0)),
        ]
    return rows


def _quiet_rows(q: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The quiet fleet's rows: costs per minute, calls by method."""
    rows = [
        ("quiet fleet: conductor CPU (s/min)", f"{q['conductor_cpu_s_per_min']:.2f}"),
        ("  inventory rows read (per minute)", f"{q['rows_read_per_min']:,.0f}"),
        ("  broker MB (per minute)", _mb(q.get("broker_mb_per_min"))),
    ]
    if "agent_cpu_s_per_min" in q:
        rows.append(("  agent processes' CPU (s/min)", f"{q['agent_cpu_s_per_min']:.2f}"))
    if q.get("etcd_per_client_per_min") is not None:
        rows.append(
            ("  etcd requests per client (per minute)", f"{q['etcd_per_client_per_min']:.0f}")
        )
    spent = q.get("call_seconds_per_min", {})
    for method, calls in sorted(
        q.get("calls_per_min", {}).items(), key=lambda item: -spent.get(item[0], 0.0)
    ):
        rows.append(
            (
                f"  {method}: calls / s served (per minute)",
                f"{calls:,.0f} / {spent.get(method, 0.0):.2f}",
            )
        )
    return rows


def _join_rows(j: Mapping[str, Any], share_mb: float | None) -> list[tuple[str, str]]:
    """The join's rows."""
    rows = [
        ("one agent joins: ring converged (s)", cell(j["seconds"], j["off"])),
        ("  nodes moved / ideal N/(M+1)", f"{j['moved']:,} / {j['ideal']:,.0f}"),
        ("  moved between agents that stayed", str(j["moved_between_stayed"])),
        ("  unowned when the wait ended", f"{j.get('unowned_after', 0):,}"),
        ("  claims granted / refused", f"{j['granted']:,} / {j['refused']:,}"),
        *_cpu_rows(j),
    ]
    if "startup_cpu_s" in j:
        rows.append(
            (
                "  the joiner's CPU: to serve / after (s)",
                f"{j['startup_cpu_s']:.1f} / {j['joiner_cpu_s']:.1f}",
            )
        )
    return [
        *rows,
        *traffic_rows(j),
        ("  the joiner's share on the bus (MB)", _mb(share_mb)),
        ("  inventory rows read by the joiner", f"{j['rows_read_joiner']:,}"),
        (
            "  by the others: all / most by one",
            _rows_cell(j["rows_read_others"], j["rows_read_others_max"]),
        ),
    ]


def _kill_rows(k: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The kill -9's rows."""
    return [
        (f"kill -9 ({k['nodes_owned']:,} nodes): all owned again (s)", cell(k["owned_s"])),
        ("  none left on the killed agent (s)", cell(k.get("victim_s"))),
        ("  nodes unowned before the kill", f"{k.get('unowned_before', 0):,}"),
        ("  nodes unowned when that wait ended", f"{k.get('unowned_end', 0):,}"),
        ("  ring converged again (s)", cell(k["ring_s"])),
        *_cpu_rows(k),
        *traffic_rows(k),
        (
            "  inventory rows read by the survivors: all / most by one",
            _rows_cell(k["rows_read_survivors"], k["rows_read_survivors_max"]),
        ),
    ]


def _rows(res: Mapping[str, Any]) -> list[tuple[str, str]]:
    """One agent count's rows, step by step."""
    rows: list[tuple[str, str]] = []
    if "import" in res:
        rows.append(("node import (CLI, CSV) (s)", f"{res['import']['seconds']:.1f}"))
    if "cold" in res:
        rows += _cold_rows(res["cold"])
    if "join" in res:
        rows += _join_rows(res["join"], join_share_mb(res))
    if "kill" in res:
        rows += _kill_rows(res["kill"])
    return rows + _other_rows(res)


def _builds_row(wave: Mapping[str, Any], on: str = "") -> tuple[str, str]:
    """The row of one wave of builds (``on``: the fleet, if not the run's)."""
    return (
        f"builds/s ({wave['builds']} in requests of {wave['batch']}, "
        f"{wave['conductors']} conductor(s){on})",
        f"{wave['builds_per_s']:.0f}",
    )


def _other_rows(res: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Builds, waves, node list and the resources of the whole run."""
    rows: list[tuple[str, str]] = []
    baseline = res.get("builds_baseline")
    if baseline is not None:
        on = f", on {baseline['nodes']:,} nodes"
        rows += [_builds_row(wave, on) for wave in baseline["builds"]]
    rows += [_builds_row(wave) for wave in res.get("builds", [])]
    for number, wave in enumerate(res.get("waves", []), 1):
        rows.append(
            (
                f"wave {number}: join (s) / builds/s / kill -9 owned (s) / conductor RSS (MB)",
                f"{cell(wave['join_s'])} / {wave['builds_per_s']:.0f} / "
                f"{cell(wave['owned_s'])} / {wave['conductor_rss_mb']:.0f}",
            )
        )
    if "node_list" in res:
        n = res["node_list"]
        rows.append((f"ringfleet node list ({n['rows']:,} rows) (s)", f"{n['seconds']:.1f}"))
    rows += [
        ("conductor CPU, whole run (s)", f"{res['conductor_cpu_s']:.1f}"),
        ("conductor RSS, max (MB)", f"{res['conductor_rss_mb']:.0f}"),
        ("agent RSS, max (MB)", f"{res['agent_rss_mb']:.0f}"),
    ]
    if "agent_share_rss_mb" in res:
        per_process = res["agents_per_process"]
        rows += [
            (
                f"agent RSS share, {per_process} to a process, max (MB; RSS / {per_process})",
                f"{res['agent_share_rss_mb']:.0f}",
            ),
            (f"{per_process}-agent process RSS, max (MB)", f"{res['agent_group_rss_mb']:.0f}"),
        ]
    return rows


def format_report(report: Mapping[str, Any]) -> str:
    """The human-readable table of a :func:`run` report."""
    config, env = report["config"], report["environment"]
    lines = [
        f"scale benchmark: {config['nodes']:,} nodes, {config['conductors']} conductor(s), "
        f"agents {', '.join(str(a) for a in config['agents'])}"
        + (
            f" ({config['agents_per_process']} to a process)"
            if config.get("agents_per_process", 1) > 1
            else ""
        )
        + "; membership_timeout "
        f"{config['ttl_s']:g} s, watch interval {config.get('watch_interval_s', 0.2):g} s, "
        f"deploy time 0; code {config['commit']}"
        + (f" ({config['code']})" if config["code"] else "")
        + f"; Python {env['python']}, {env['cpus']} CPUs, load {env['load_before']:.1f} before",
    ]
    for res in report["runs"]:
        rows = _rows(res)
        width = max(len(label) for label, _v in rows) + 2
        load = res.get("load_end")
        lines += [
            "",
            f"{res['agents']} agents (wall {res['wall_s']:.0f} s"
            + ("" if load is None else f", load {load:.1f} at the end")
            + ")",
        ]
        lines += [f"  {label:<{width}}{value:>16}" for label, value in rows]
    lines += format_scaling(report["runs"], config["nodes"])
    lines += format_projection(report.get("projection"))
    lines += format_goals(report["goals"])
    return "\n".join(lines)
