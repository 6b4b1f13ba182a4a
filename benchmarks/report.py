# SPDX-License-Identifier: Apache-2.0
"""What every benchmark's report shares: one percentile, and goals stated one way.

A benchmark reports, tests check: each goal is PASS, MISS, or SKIP (not
measured in this run), printed after the table, never turned into an exit
status or a test failure (the machine is shared and noisy).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["Goals", "format_goals", "log_line", "percentile", "publish"]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100), linear between the closest ranks; NaN if empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


class Goals:
    """The goals of one run, in the order they were stated (a JSON-ready list)."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def add(
        self,
        name: str,
        target: str,
        value: float | None,
        ok: bool | None,
        detail: str | None = None,
    ) -> None:
        """One goal: ``ok`` None when the run did not measure it (SKIP).

        :param detail: how to show the value (default: from the value and target)
        """
        status = "SKIP" if ok is None else ("PASS" if ok else "MISS")
        goal: dict[str, Any] = {"name": name, "target": target, "value": value, "status": status}
        if detail is not None:
            goal["detail"] = detail
        self.items.append(goal)


def _shown(goal: dict[str, Any]) -> str:
    if "detail" in goal:
        return str(goal["detail"])
    value = goal["value"]
    if value is None:
        return "n/a"
    if str(goal["target"]).endswith("x"):
        return f"{value:.1f}x"
    if isinstance(value, int):
        return str(value)
    return f"{value:.3f}"


def format_goals(
    goals: Sequence[dict[str, Any]], shown: Callable[[dict[str, Any]], str] = _shown
) -> list[str]:
    """The lines that end a report: a ``goals`` heading, then one line per goal."""
    return ["", "goals"] + [
        f"  {goal['status']:<5} {goal['name']}: {shown(goal)} (target {goal['target']})"
        for goal in goals
    ]


def log_line(line: str) -> None:
    """Progress of a run, on stderr (the report goes to stdout)."""
    print(line, file=sys.stderr, flush=True)


def publish(
    prog: str,
    produce: Callable[[], dict[str, Any]],
    render: Callable[[dict[str, Any]], str],
    json_path: Path | None,
) -> int:
    """Run a benchmark, print its report (and write it as JSON); an exit code.

    A run that fails or misses a deadline of its own (``RuntimeError``,
    ``AssertionError``) is one line and exit 1; a missed goal is not a
    failure (see the module docstring).
    """
    try:
        report = produce()
    except (RuntimeError, AssertionError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    print(render(report))
    if json_path:
        json_path.write_text(json.dumps(report, indent=2, sort_keys=True), encoding="utf-8")
    return 0
