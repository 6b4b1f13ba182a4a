# SPDX-License-Identifier: Apache-2.0
"""``ringfleet flavor create|list|show|delete``."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

from cliff.command import Command
from cliff.lister import Lister
from cliff.show import ShowOne

from conductor.cli.command import ConductorCommand, key_value
from conductor.cli.instance import image_from, image_options

__all__ = ["FlavorCreate", "FlavorDelete", "FlavorList", "FlavorShow"]

_FIELDS = (
    "name",
    "resource_class",
    "required_traits",
    "forbidden_traits",
    "extra_specs",
    "default_image",
    "created_at",
)


def _show(flavor: dict[str, Any]) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    return _FIELDS, tuple(flavor.get(f) for f in _FIELDS)


class FlavorCreate(ConductorCommand, ShowOne):
    """Create a flavor: what a build asks of a node."""

    examples = (
        (
            "a flavor of baremetal nodes with a GPU trait",
            "--resource-class baremetal --required-trait CUSTOM_GPU gpu-large",
        ),
        (
            "one whose builds default to an image",
            (
                "--resource-class baremetal --default-image "
                "https://images.example.com/ubuntu.img --default-image-checksum "
                "md5:9e107d9d372bb6826bd81d3542a419d6 small"
            ),
        ),
    )

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        parser.add_argument("name", metavar="NAME", help="unique flavor name")
        parser.add_argument(
            "--resource-class",
            required=True,
            metavar="CLASS",
            help="the resource class of the nodes it builds on",
        )
        parser.add_argument("--required-trait", action="append", metavar="TRAIT", help="repeatable")
        parser.add_argument(
            "--forbidden-trait", action="append", metavar="TRAIT", help="repeatable"
        )
        parser.add_argument(
            "--extra-spec",
            action="append",
            type=key_value,
            metavar="KEY=VALUE",
            help="repeatable: 'capabilities:boot_mode=s== uefi', 'trait:CUSTOM_X=required'",
        )
        # The image of a build of this flavor that names none.
        image_options(parser, "default-image")
        return parser

    def take_action(
        self, parsed_args: argparse.Namespace
    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        spec: dict[str, Any] = {
            "name": parsed_args.name,
            "resource_class": parsed_args.resource_class,
        }
        if parsed_args.required_trait:
            spec["required_traits"] = parsed_args.required_trait
        if parsed_args.forbidden_trait:
            spec["forbidden_traits"] = parsed_args.forbidden_trait
        if parsed_args.extra_spec:
            spec["extra_specs"] = dict(parsed_args.extra_spec)
        default_image = image_from(parsed_args, "default-image")
        if default_image is not None:
            spec["default_image"] = default_image
        return _show(self.client.create_flavor(spec))


class FlavorList(ConductorCommand, Lister):
    """List flavors."""

    examples = (("every flavor, as JSON", "-f json"),)

    def take_action(
        self, parsed_args: argparse.Namespace
    ) -> tuple[tuple[str, ...], Iterable[tuple[Any, ...]]]:
        columns = ("Name", "Resource class", "Required traits", "Forbidden traits", "Extra specs")
        keys = ("name", "resource_class", "required_traits", "forbidden_traits", "extra_specs")
        return columns, [tuple(f.get(k) for k in keys) for f in self.client.list_flavors()]


class FlavorShow(ConductorCommand, ShowOne):
    """Show one flavor."""

    examples = (("one flavor", "gpu-large"),)

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        parser.add_argument("name", metavar="NAME", help="flavor name")
        return parser

    def take_action(
        self, parsed_args: argparse.Namespace
    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        return _show(self.client.show_flavor(parsed_args.name))


class FlavorDelete(ConductorCommand, Command):
    """Delete flavors (instances built from them keep their flavor name)."""

    examples = (("two flavors no instance uses", "gpu-large small"),)

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        parser.add_argument("names", metavar="NAME", nargs="+", help="flavor names")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        for name in parsed_args.names:
            self.client.delete_flavor(name)
        return 0
