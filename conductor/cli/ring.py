# SPDX-License-Identifier: Apache-2.0
"""``ringfleet ring show``: how the nodes of each group are split between agents.

The table draws each agent's node count as a bar, scaled per group, next
to its fair share by ring weight (``Expected``), so an imbalance shows at a
glance; ``-f json`` (or any other format) gives the numbers without bars.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

from cliff.lister import Lister

from conductor.cli.command import ConductorCommand

__all__ = ["RingShow", "bar"]

BAR_WIDTH = 40
_COLUMNS = ("Group", "Host", "Member", "Weight", "Nodes", "Expected", "Deviation")


def bar(value: float, scale: float, width: int = BAR_WIDTH) -> str:
    """``value`` as a bar of ``#`` out of ``width`` for ``scale`` (at least one
    ``#`` for any non-zero value, so a tiny share is still visible)."""
    if scale <= 0 or value <= 0:
        return ""
    return "#" * max(1, round(width * value / scale))


def _deviation(nodes: int, expected: float) -> str:
    if not expected:
        return "-" if nodes == 0 else "not a member"
    return f"{100.0 * (nodes - expected) / expected:+.0f}%"


class RingShow(ConductorCommand, Lister):
    """Nodes per node group and agent, against each agent's fair share."""

    examples = (("the nodes per owner of group rack-1, against the ring", "--group rack-1"),)

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        parser.add_argument(
            "--group", metavar="GROUP", help="only this node group ('' is the default group)"
        )
        return parser

    def take_action(
        self, parsed_args: argparse.Namespace
    ) -> tuple[tuple[str, ...], Iterable[tuple[Any, ...]]]:
        status = self.client.ring_status()
        # Bars only where a human reads them: machine formats get numbers.
        with_bars = parsed_args.formatter == "table"
        columns = _COLUMNS + (("Nodes bar",) if with_bars else ())
        rows: list[tuple[Any, ...]] = []
        for group in status["groups"]:
            if parsed_args.group is not None and group["group"] != parsed_args.group:
                continue
            label = group["group"] or "(default)"
            scale = max(
                [max(a["nodes"], a["expected"]) for a in group["agents"]] + [group["unowned"]]
            )
            for agent in group["agents"]:
                row: tuple[Any, ...] = (
                    label,
                    agent["host"],
                    agent["member"],
                    agent["weight"],
                    agent["nodes"],
                    agent["expected"],
                    _deviation(agent["nodes"], agent["expected"]),
                )
                rows.append(row + ((bar(agent["nodes"], scale),) if with_bars else ()))
            if group["unowned"]:
                row = (label, None, False, None, group["unowned"], 0.0, "unowned")
                rows.append(row + ((bar(group["unowned"], scale),) if with_bars else ()))
        return columns, rows
