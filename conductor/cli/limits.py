# SPDX-License-Identifier: Apache-2.0
"""``ringfleet limits show``: a project's limits and usage as Nova's
``openstack limits show --absolute`` lists them, and per resource class."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

from cliff.lister import Lister

from conductor.cli.command import ConductorCommand

__all__ = ["LimitsShow"]


class LimitsShow(ConductorCommand, Lister):
    """Show the absolute limits of your project (or --project's, admins):
    Nova's names, -1 unlimited; then the limit and usage per resource class."""

    def get_epilog(self) -> str:
        return "Examples:\n  ringfleet limits show\n  ringfleet limits show --project 3f2a..."

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        parser.add_argument(
            "--project",
            metavar="PROJECT",
            help="another project's limits (admins; required over RPC)",
        )
        return parser

    def take_action(
        self, parsed_args: argparse.Namespace
    ) -> tuple[tuple[str, ...], Iterable[tuple[Any, ...]]]:
        limits = self.client.show_limits(parsed_args.project)
        rows: list[tuple[Any, ...]] = list(limits["absolute"].items())
        for resource_class, quota in limits["resource_classes"].items():
            rows.append((f"maxTotalNodes:{resource_class}", quota["limit"]))
            rows.append((f"totalNodesUsed:{resource_class}", quota["in_use"]))
        return ("Name", "Value"), rows
