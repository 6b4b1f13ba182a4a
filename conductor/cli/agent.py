# SPDX-License-Identifier: Apache-2.0
"""``ringfleet agent drain HOST``: hand every node of an agent over, then stop it."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

from cliff.show import ShowOne

from conductor.cli.command import ConductorCommand

__all__ = ["AgentDrain"]


class AgentDrain(ConductorCommand, ShowOne):
    """Ask a live agent to hand all its nodes (pinned ones too) to the others, then stop.

    The hand-over happens afterwards, in the agent: follow it with
    'ringfleet fleet status'.
    """

    examples = (("hand agent-3's nodes to the other agents before its maintenance", "agent-3"),)

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        parser.add_argument("host", metavar="HOST", help="the agent's [DEFAULT] host")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[tuple[str, ...], Iterable[Any]]:
        reply = self.client.drain_agent(parsed_args.host)
        return ("host", "state"), (reply["host"], reply["state"])
