# SPDX-License-Identifier: Apache-2.0
"""``ringfleet limits show``: a project's limits and usage as Nova's
``openstack limits show --absolute`` lists them, and per resource class."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

from cliff.lister import Lister

from conductor.cli.command import ConductorCommand
from conductor.common.exception import FieldError, InvalidInput
from conductor.common.nova_limits import nova_limits

__all__ = ["LimitsShow"]


class LimitsShow(ConductorCommand, Lister):
    """Show the absolute limits of your project (or --project's, admins):
    Nova's names, -1 unlimited; then the limit and usage per resource class."""

    examples = (
        ("your project's limits", ""),
        ("another project's (admins)", "--project 3f2a9c6e0b1d4e8f9a7b5c3d1e0f2a4b"),
    )

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
        show = getattr(self.client, "show_limits", None)
        if show is not None:  # the HTTP API's GET /v1/limits
            limits = show(parsed_args.project)
        elif parsed_args.project is None:
            # Over RPC the operator has no project of its own.
            raise InvalidInput([FieldError("project_id", "required over RPC (--project)")])
        else:
            limits = nova_limits(self.client.show_quota(parsed_args.project))
        rows: list[tuple[Any, ...]] = list(limits["absolute"].items())
        for resource_class, quota in limits["resource_classes"].items():
            rows.append((f"maxTotalNodes:{resource_class}", quota["limit"]))
            rows.append((f"totalNodesUsed:{resource_class}", quota["in_use"]))
        return ("Name", "Value"), rows
