# SPDX-License-Identifier: Apache-2.0
"""``ringfleet instance set|unset``: an instance's metadata and tags (Nova's server metadata, tags).

As ``openstack server set|unset --property K=V --tag T``.  ``instance show``
shows them.  See ``docs/http-api.rst``, "Instance metadata and tags".
"""

from __future__ import annotations

import argparse

from cliff.command import Command

from conductor.cli.command import ConductorCommand, key_value
from conductor.common.exception import FieldError, InvalidInput

__all__ = ["InstanceSet", "InstanceUnset"]


def _options(parser: argparse.ArgumentParser, prop: str, prop_help: str) -> None:
    parser.add_argument("instance", metavar="UUID", help="instance uuid")
    parser.add_argument(
        "--property",
        dest="properties",
        type=key_value if prop == "KEY=VALUE" else str,
        action="append",
        default=[],
        metavar=prop,
        help=prop_help,
    )
    parser.add_argument(
        "--tag", dest="tags", action="append", default=[], metavar="TAG", help="(repeatable)"
    )


def _given(parsed_args: argparse.Namespace) -> None:
    if not parsed_args.properties and not parsed_args.tags:
        raise InvalidInput([FieldError("--property", "give --property or --tag")])


class InstanceSet(ConductorCommand, Command):
    """Set metadata keys and add tags of an instance (active or stopped)."""

    examples = (("a metadata item and a tag", "UUID --property role=db --tag prod"),)

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        _options(parser, "KEY=VALUE", "a metadata key and value (repeatable)")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> None:
        _given(parsed_args)
        if parsed_args.properties:
            self.client.set_instance_metadata(
                parsed_args.instance, dict(parsed_args.properties), False
            )
        for tag in parsed_args.tags:
            self.client.add_instance_tag(parsed_args.instance, tag)


class InstanceUnset(ConductorCommand, Command):
    """Delete metadata keys and tags of an instance (active or stopped)."""

    examples = (("drop a metadata item and a tag", "UUID --property role --tag prod"),)

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        _options(parser, "KEY", "a metadata key (repeatable)")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> None:
        _given(parsed_args)
        for key in parsed_args.properties:
            self.client.delete_instance_metadata(parsed_args.instance, key)
        for tag in parsed_args.tags:
            self.client.delete_instance_tag(parsed_args.instance, tag)
