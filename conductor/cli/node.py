# SPDX-License-Identifier: Apache-2.0
"""``ringfleet node create|list|show|set|move|owner|sync|power|delete``.

``node import`` is :mod:`conductor.cli.node_import` (its entry point names
this module, which re-exports it).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

from cliff.command import Command
from cliff.show import ShowOne

from conductor.cli.command import ConductorCommand, key_value
from conductor.cli.node_import import NodeImport
from conductor.cli.streaming import StreamingLister, prefetched_pages
from conductor.common.exception import FieldError, InvalidInput
from conductor.common.objects import PowerState, ProvisionState

__all__ = [
    "NodeCreate",
    "NodeImport",
    "NodeList",
    "NodeMove",
    "NodeOwner",
    "NodeSet",
    "NodeShow",
    "NodeSync",
]

_SHOW_FIELDS = (
    "uuid",
    "name",
    "resource_class",
    "group",
    "traits",
    "properties",
    "provision_state",
    "power_state",
    "maintenance",
    "maintenance_reason",
    "owner",
    "owner_epoch",
    "instance_uuid",
    "failed_builds",
    "created_at",
    "updated_at",
)
_LIST_COLUMNS = (
    ("UUID", "uuid"),
    ("Name", "name"),
    ("Resource class", "resource_class"),
    ("Group", "group"),
    ("Provision state", "provision_state"),
    ("Power state", "power_state"),
    ("Maintenance", "maintenance"),
    ("Owner", "owner"),
    ("Epoch", "owner_epoch"),
    ("Instance", "instance_uuid"),
)
_LONG_COLUMNS = (("Traits", "traits"), ("Properties", "properties"))
_PAGE = 5000  # at 100k nodes: 5.4 s for the list in pages of 5000, 8.9 s in pages of 1000


def _show(node: dict[str, Any]) -> tuple[tuple[str, ...], tuple[Any, ...]]:
    return _SHOW_FIELDS, tuple(node.get(field) for field in _SHOW_FIELDS)


# -- create -------------------------------------------------------------------------


class NodeCreate(ConductorCommand, ShowOne):
    """Enroll one node."""

    examples = (
        (
            "a node with its capabilities",
            (
                "--resource-class baremetal --property capabilities=boot_mode:uefi "
                "--trait CUSTOM_RAID node-01"
            ),
        ),
    )

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        parser.add_argument("name", metavar="NAME", help="unique node name")
        parser.add_argument(
            "--resource-class",
            required=True,
            metavar="CLASS",
            help="the node's resource class, which flavors select (e.g. baremetal)",
        )
        parser.add_argument("--uuid", metavar="UUID", help="node uuid (generated if absent)")
        parser.add_argument("--group", metavar="GROUP", help="node group (default: '')")
        parser.add_argument(
            "--trait", dest="traits", action="append", metavar="TRAIT", help="repeatable"
        )
        parser.add_argument(
            "--property",
            dest="properties",
            action="append",
            type=key_value,
            metavar="KEY=VALUE",
            help="repeatable; 'capabilities=k1:v1,k2:v2' sets the capabilities",
        )
        parser.add_argument(
            "--maintenance",
            action="store_true",
            default=None,
            help="enroll it in maintenance: never scheduled until cleared",
        )
        parser.add_argument("--maintenance-reason", metavar="TEXT", help="why it is in maintenance")
        parser.add_argument(
            "--provision-state",
            choices=[ProvisionState.ENROLL, ProvisionState.MANAGEABLE, ProvisionState.AVAILABLE],
            help="initial provision state (default: available, schedulable)",
        )
        parser.add_argument(
            "--power-state", choices=list(PowerState), help="power state as last known"
        )
        return parser

    def take_action(
        self, parsed_args: argparse.Namespace
    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        spec: dict[str, Any] = {"name": parsed_args.name}
        for field in (
            "resource_class",
            "uuid",
            "group",
            "traits",
            "maintenance",
            "maintenance_reason",
            "provision_state",
            "power_state",
        ):
            value = getattr(parsed_args, field)
            if value is not None:
                spec[field] = (
                    str(value) if isinstance(value, ProvisionState | PowerState) else value
                )
        if parsed_args.properties:
            spec["properties"] = dict(parsed_args.properties)
        return _show(self.client.create_node(spec))


# -- list, show ---------------------------------------------------------------------


class NodeList(ConductorCommand, StreamingLister):
    """List nodes (all of them, in uuid order, unless --limit).

    Pages of --page-size nodes are printed as they arrive with -f value,
    -f csv and -f json (the next page is fetched meanwhile); a table needs
    every row for its column widths, so it prints at the end.
    """

    examples = (
        ("the nodes in maintenance", "--maintenance"),
        ("every node of agent-1, with all columns, as JSON", "--owner agent-1 --long -f json"),
    )

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        parser.add_argument(
            "--resource-class", metavar="CLASS", help="only nodes of this resource class"
        )
        parser.add_argument("--group", metavar="GROUP", help="only nodes of this node group")
        parser.add_argument("--owner", metavar="HOST", help="only nodes this agent owns")
        parser.add_argument(
            "--provision-state",
            choices=list(ProvisionState),
            help="only nodes in this provision state",
        )
        parser.add_argument(
            "--maintenance",
            action=argparse.BooleanOptionalAction,
            help="only nodes in (--maintenance) or out of (--no-maintenance) maintenance",
        )
        parser.add_argument(
            "--pinned",
            action=argparse.BooleanOptionalAction,
            help="only nodes hosting (--pinned) or not hosting (--no-pinned) an instance",
        )
        parser.add_argument("--limit", type=int, metavar="N", help="at most N nodes")
        parser.add_argument("--marker", metavar="UUID", help="start after this node uuid")
        parser.add_argument("--long", action="store_true", help="also traits and properties")
        parser.add_argument(
            "--page-size",
            type=int,
            default=_PAGE,
            metavar="N",
            help=f"nodes per call to the conductor (1..10000, default {_PAGE})",
        )
        return parser

    def take_action(
        self, parsed_args: argparse.Namespace
    ) -> tuple[tuple[str, ...], Iterable[tuple[Any, ...]]]:
        if parsed_args.limit is not None and parsed_args.limit < 1:
            raise InvalidInput(
                [FieldError.about("--limit", "must be at least 1", parsed_args.limit)]
            )
        if not 1 <= parsed_args.page_size <= 10_000:
            raise InvalidInput(
                [FieldError.about("--page-size", "must be 1..10000", parsed_args.page_size)]
            )
        filters = {
            key: value
            for key in (
                "resource_class",
                "group",
                "owner",
                "provision_state",
                "maintenance",
                "pinned",
            )
            if (value := getattr(parsed_args, key)) is not None
        }
        if "provision_state" in filters:
            filters["provision_state"] = str(filters["provision_state"])
        columns = _LIST_COLUMNS + (_LONG_COLUMNS if parsed_args.long else ())
        start = parsed_args.marker
        client = self.client  # built here: a bad configuration fails before any output
        nodes = prefetched_pages(
            lambda n, m: client.list_nodes(filters=filters or None, limit=n, marker=m or start),
            parsed_args.limit,
            parsed_args.page_size,
        )
        keys = [key for _, key in columns]
        return (
            tuple(title for title, _ in columns),
            self.rows(nodes, lambda node: tuple(node.get(key) for key in keys), parsed_args),
        )


class NodeShow(ConductorCommand, ShowOne):
    """Show one node (by uuid or name)."""

    examples = (("one node, by name or uuid", "node-01"),)

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        parser.add_argument("node", metavar="NODE", help="uuid or name")
        return parser

    def take_action(
        self, parsed_args: argparse.Namespace
    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        return _show(self.client.show_node(parsed_args.node))


# -- set, move, owner ---------------------------------------------------------------


class NodeSet(ConductorCommand, Command):
    """Change a node: properties, traits, resource class, maintenance."""

    examples = (
        ("put a node in maintenance", "--maintenance --reason 'disk replacement' node-01"),
        ("add a trait", "--add-trait CUSTOM_GPU node-01"),
    )

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        parser.add_argument("node", metavar="NODE", help="uuid or name")
        parser.add_argument(
            "--property",
            dest="properties",
            action="append",
            type=key_value,
            metavar="KEY=VALUE",
            help="set a property (repeatable)",
        )
        parser.add_argument(
            "--unset-property",
            action="append",
            metavar="KEY",
            help="remove a property (repeatable)",
        )
        parser.add_argument("--add-trait", action="append", metavar="TRAIT", help="repeatable")
        parser.add_argument("--remove-trait", action="append", metavar="TRAIT", help="repeatable")
        parser.add_argument("--resource-class", metavar="CLASS", help="a new resource class")
        parser.add_argument(
            "--maintenance",
            action=argparse.BooleanOptionalAction,
            help="enter (--maintenance) or leave (--no-maintenance) maintenance",
        )
        parser.add_argument("--reason", metavar="TEXT", help="why, with --maintenance")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        changes: dict[str, Any] = {}
        if parsed_args.properties:
            changes["properties"] = dict(parsed_args.properties)
        for option, field in (
            ("unset_property", "remove_properties"),
            ("add_trait", "add_traits"),
            ("remove_trait", "remove_traits"),
        ):
            if getattr(parsed_args, option):
                changes[field] = getattr(parsed_args, option)
        if parsed_args.resource_class is not None:
            changes["resource_class"] = parsed_args.resource_class
        if parsed_args.reason is not None and parsed_args.maintenance is not True:
            raise InvalidInput(
                [FieldError.about("--reason", "only with --maintenance", parsed_args.reason)]
            )
        if not changes and parsed_args.maintenance is None:
            raise InvalidInput([FieldError("NODE", "nothing to change: give at least one option")])
        if changes:
            self.client.set_node(parsed_args.node, changes)
        if parsed_args.maintenance is not None:
            self.client.set_node_maintenance(
                parsed_args.node, parsed_args.maintenance, parsed_args.reason
            )
        return 0


class NodeMove(ConductorCommand, ShowOne):
    """Move a node whose owner is gone to a live agent (pinned nodes at once)."""

    examples = (("move a node whose owner is gone to agent-2", "node-01 agent-2"),)

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        parser.add_argument("node", metavar="NODE", help="uuid or name")
        parser.add_argument("host", metavar="HOST", help="the live agent to move it to")
        return parser

    def take_action(
        self, parsed_args: argparse.Namespace
    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        return _show(self.client.move_node(parsed_args.node, parsed_args.host))


class NodeOwner(ConductorCommand, ShowOne):
    """Who owns a node, at which epoch, and who the ring says should."""

    examples = (("who owns a node, and who the ring says should", "node-01"),)

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        parser.add_argument("node", metavar="NODE", help="uuid or name")
        return parser

    def take_action(
        self, parsed_args: argparse.Namespace
    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        owner = self.client.node_owner(parsed_args.node)
        fields = ("node_uuid", "owner", "epoch", "pinned", "ring_owner")
        return fields, tuple(owner.get(f) for f in fields)


class NodeSync(ConductorCommand, ShowOne):
    """Import Ironic's inventory now: new nodes, changed states, removed nodes retired,
    orphan claims handed to their owners.

    A conductor runs one pass (the same as its periodic [ironic]
    sync_interval pass) and answers what it did.
    """

    examples = (("import Ironic's nodes now", ""),)

    def take_action(
        self, parsed_args: argparse.Namespace
    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        summary = self.client.sync_ironic_nodes()
        fields = (
            "listed",
            "created",
            "updated",
            "retired",
            "observed",
            "orphans",
            "invalid",
            "invalid_nodes",
            "seconds",
        )
        return fields, tuple(summary.get(f) for f in fields)


#: ``node power`` verbs and the API's targets (Ironic's names).
_POWER_VERBS = {
    ("on", False): "power on",
    ("off", False): "power off",
    ("reboot", False): "rebooting",
    ("off", True): "soft power off",
    ("reboot", True): "soft rebooting",
}


class NodePower(ConductorCommand, ShowOne):
    """Power a node on or off, or reboot it (its owner does it in the background;
    'node show' then shows power_state).  An instance on it keeps its state."""

    examples = (("power a node off, softly", "--soft off node-01"),)

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        parser.add_argument(
            "verb", choices=("on", "off", "reboot"), help="power on, off, or reboot"
        )
        parser.add_argument("node", metavar="NODE", help="uuid or name")
        parser.add_argument(
            "--soft", action="store_true", help="off/reboot: ask the OS to shut down first"
        )
        return parser

    def take_action(
        self, parsed_args: argparse.Namespace
    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        target = _POWER_VERBS.get((parsed_args.verb, parsed_args.soft))
        if target is None:
            raise InvalidInput([FieldError.about("--soft", "only with off or reboot", True)])
        return _show(self.client.set_node_power_state(parsed_args.node, target))


class NodeDelete(ConductorCommand, Command):
    """Forget nodes in maintenance that host nothing (never deleted in Ironic).

    An imported Ironic node is refused while the next sync would import it
    again: tag it CUSTOM_RINGFLEET_EXCLUDE in Ironic (or remove it there) first.
    """

    examples = (("forget a node in maintenance", "node-01"),)

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        parser.add_argument("nodes", metavar="NODE", nargs="+", help="uuid or name")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        for node in parsed_args.nodes:
            self.client.delete_node(node)
        return 0
