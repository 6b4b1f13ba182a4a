# SPDX-License-Identifier: Apache-2.0
"""``ringfleet fleet status`` and ``ringfleet fleet check``.

``status`` is the per-agent table; ``check`` is meant for monitoring: it
prints every problem the conductor finds (orphaned nodes, double claims,
agents on another ring version, stuck builds, deletes and actions, node
records that disagree with their instance or with Ironic) and exits 1, or
prints ``OK`` and exits 0.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

from cliff.command import Command
from cliff.lister import Lister

from conductor.cli.command import ConductorCommand, add_check_format, write_document

__all__ = ["FleetCheck", "FleetStatus"]

_STATUS_COLUMNS = (
    "Host",
    "State",
    "Groups",
    "Owned",
    "Pinned",
    "In-flight",
    "Last seen",
    "Ring version",
)


def _status_row(agent: dict[str, Any]) -> tuple[Any, ...]:
    groups = agent.get("groups") or []
    state = agent["state"]
    if state == "gone" and agent.get("gone_since"):
        state = f"gone since {agent['gone_since']}"
    elif state == "excluded" and agent.get("reason"):
        state = f"excluded: {agent['reason']}"
    elif state == "up" and agent.get("serving") is False:
        state = "up, not serving: no call reaches it through the broker"
    elif state == "up" and agent.get("backend_problem"):
        state = f"up, back end unreachable: {agent['backend_problem']}"
    return (
        agent["host"],
        state,
        # Only a ring member serves groups; an empty list there means all.
        (",".join(groups) if groups else "(all)") if agent["state"] == "up" else "-",
        agent["owned"],
        agent["pinned"],
        agent.get("in_flight", 0),
        agent.get("last_seen"),
        agent.get("ring_version"),
    )


class FleetStatus(ConductorCommand, Lister):
    """Every agent as the answering conductor sees it, with its node counts.

    Ring members first, then live agents excluded from the ring (another
    ring version), then departed agents that still own nodes.
    """

    examples = (
        ("the agents, their nodes and builds in flight", ""),
        ("the same as JSON, for a script", "-f json"),
    )

    def take_action(
        self, parsed_args: argparse.Namespace
    ) -> tuple[tuple[str, ...], Iterable[tuple[Any, ...]]]:
        status = self.client.fleet_status_details()
        agents = list(status["agents"]) + list(status.get("excluded_agents") or [])
        # Ring members, then excluded, then departed: the order of concern.
        order = {"up": 0, "excluded": 1, "gone": 2}
        agents.sort(key=lambda a: (order.get(a["state"], 3), a["host"]))
        return _STATUS_COLUMNS, [_status_row(a) for a in agents]


class FleetCheck(ConductorCommand, Command):
    """Check the fleet for monitoring: exit 1 and list the problems, or print OK.

    Problems: nodes whose owner is not a live agent, schedulable nodes with
    no owner, allocations whose node and instance disagree (a double
    claim), live agents excluded from the ring (another ring version), a
    conductor that cannot tell who is alive, builds, deletes and instance
    power actions (reboot, stop, start, rebuild) whose instance has not
    changed for the conductor's [conductor] stuck_after, and nodes
    whose stored state disagrees with their instance (an ACTIVE instance
    on a node not active, a node deploying or active hosting nothing, a
    node gone from Ironic hosting an instance) or
    with Ironic as the Ironic sync last saw it (a claim ringfleet does not
    hold, an ACTIVE instance on a node Ironic does not show deployed with
    it, a node failed in Ironic hosting nothing).

    Its text output is one 'KIND: message' line per problem, as
    monitoring plugins expect; -f json or -f yaml gives the
    conductor's whole report, with the same exit status.
    """

    examples = (("orphans, allocation mismatches, excluded peers (exit 1 if any)", ""),)

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        add_check_format(parser)
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        report = self.client.fleet_check()
        problems = report["problems"]
        self.exit_code = 1 if problems else 0
        if parsed_args.output_format != "text":
            document = {"ok": not problems, **report}
            write_document(self.app.stdout, parsed_args.output_format, document)
            return self.exit_code
        if not problems:
            self.app.stdout.write(_ok_line(report))
            return 0
        for problem in problems:
            self.app.stdout.write(f"{problem['kind'].upper()}: {problem['message']}\n")
        self.exit_code = 1
        return 1


def _ok_line(report: dict[str, Any]) -> str:
    """The one line of a healthy check, with the stuck-work bound it used."""
    stuck_after = report.get("stuck_after")
    if stuck_after is None:  # a conductor before RPC API 1.9
        stuck = "stuck builds and deletes not checked by this conductor's version"
    else:
        stuck = f"no build or delete unchanged for over {stuck_after:.0f} s"
    return (
        f"OK: no problems seen by conductor {report['conductor']} "
        f"(ring version {report['ring_version']}; {stuck})\n"
    )
