# SPDX-License-Identifier: Apache-2.0
"""``ringfleet quota show|set|delete|list``: projects' quotas (admins).

Resources are ``instances``, ``key_pairs`` (per user, as Nova's: each
user's limit in the project; ``In use`` is the caller's own) and
``resource_class:<class>`` (nodes of that class); a limit of -1 is
unlimited.  See ``docs/operations.rst``, "Quotas".
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

from cliff.lister import Lister

from conductor.cli.command import ConductorCommand, key_value
from conductor.common.exception import FieldError, InvalidInput

__all__ = ["QuotaDelete", "QuotaList", "QuotaSet", "QuotaShow"]

_COLUMNS = ("Resource", "Limit", "In use", "Default")


def _rows(quota: dict[str, Any]) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
    return _COLUMNS, [
        (resource, q["limit"], q["in_use"], q["default"])
        for resource, q in sorted(quota["quotas"].items())
    ]


class _OneProject(ConductorCommand, Lister):
    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        parser.add_argument("project", metavar="PROJECT", help="the Keystone project id")
        return parser


class QuotaShow(_OneProject):
    """Show a project's limits and usage, per resource."""

    examples = (("a project's limits and usage", "7f3c2b1a9e8d4c6b5a4f3e2d1c0b9a8f"),)

    def take_action(
        self, parsed_args: argparse.Namespace
    ) -> tuple[tuple[str, ...], Iterable[tuple[Any, ...]]]:
        return _rows(self.client.show_quota(parsed_args.project))


def _limit(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


class QuotaSet(_OneProject):
    """Set some of a project's own limits (the others are kept); -1 is unlimited."""

    examples = (
        (
            "at most 10 instances and 4 GPU nodes",
            "--instances 10 --resource-class gpu=4 7f3c2b1a9e8d4c6b5a4f3e2d1c0b9a8f",
        ),
        (
            "at most 5 key pairs per user of the project",
            "--key-pairs 5 7f3c2b1a9e8d4c6b5a4f3e2d1c0b9a8f",
        ),
    )

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        parser.add_argument("--instances", type=_limit, metavar="N", help="instances")
        parser.add_argument(
            "--key-pairs",
            type=_limit,
            metavar="N",
            help="key pairs each user may have when creating one in the project (Nova's "
            "key_pairs, counted per user)",
        )
        parser.add_argument(
            "--resource-class",
            dest="classes",
            type=key_value,
            action="append",
            default=[],
            metavar="CLASS=N",
            help="nodes of a resource class, e.g. baremetal-gold=4 (repeatable)",
        )
        return parser

    def take_action(
        self, parsed_args: argparse.Namespace
    ) -> tuple[tuple[str, ...], Iterable[tuple[Any, ...]]]:
        limits: dict[str, Any] = {}
        if parsed_args.instances is not None:
            limits["instances"] = parsed_args.instances
        if parsed_args.key_pairs is not None:
            limits["key_pairs"] = parsed_args.key_pairs
        for resource_class, text in parsed_args.classes:
            try:
                limits[f"resource_class:{resource_class}"] = int(text)
            except ValueError:
                field = f"--resource-class {resource_class}"
                raise InvalidInput([FieldError.about(field, "a whole number", text)]) from None
        if not limits:
            raise InvalidInput(
                [FieldError("--instances", "give --instances, --key-pairs or --resource-class")]
            )
        return _rows(self.client.set_quota(parsed_args.project, limits))


class QuotaDelete(_OneProject):
    """Drop a project's own limits: the [quota] defaults apply again."""

    examples = (("back to the defaults", "7f3c2b1a9e8d4c6b5a4f3e2d1c0b9a8f"),)

    def take_action(
        self, parsed_args: argparse.Namespace
    ) -> tuple[tuple[str, ...], Iterable[tuple[Any, ...]]]:
        return _rows(self.client.delete_quota(parsed_args.project))


class QuotaList(ConductorCommand, Lister):
    """List the projects with limits of their own."""

    examples = (("the projects with limits of their own", ""),)

    def take_action(
        self, parsed_args: argparse.Namespace
    ) -> tuple[tuple[str, ...], Iterable[tuple[Any, ...]]]:
        rows = [
            (entry["project_id"], resource, limit)
            for entry in self.client.list_quotas()
            for resource, limit in sorted(entry["limits"].items())
        ]
        return ("Project", "Resource", "Limit"), rows
