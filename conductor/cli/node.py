# SPDX-License-Identifier: Apache-2.0
"""``ringfleet node create|import|list|show|set|move|owner|sync``.

``node import`` validates every row locally with the conductor's own
validation (:func:`conductor.validation.validate_node_specs`) before it
sends anything, reports bad rows with their file line (the first
``--max-problems``, then a count), and imports
nothing unless every row is good; then it imports in batches.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterable, Sequence
from typing import IO, Any

from cliff.command import Command
from cliff.show import ShowOne

from conductor.cli import node_files
from conductor.cli.command import ConductorCommand, describe_error, key_value
from conductor.cli.streaming import StreamingLister, prefetched_pages
from conductor.common.exception import Conflict, FieldError, InvalidInput
from conductor.common.objects import PowerState, ProvisionState
from conductor.validation import NodeSpec, validate_node_specs

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


# -- import -------------------------------------------------------------------------

_INDEX = re.compile(r"nodes\[(\d+)\]\.?")


class _Progress:
    """Progress lines on stderr: rewritten in place on a terminal."""

    def __init__(self, stream: IO[str], enabled: bool) -> None:
        self._stream = stream
        self._enabled = enabled
        self._tty = enabled and stream.isatty()

    def update(self, text: str) -> None:
        if not self._enabled:
            return
        if self._tty:
            self._stream.write(f"\r{text}\x1b[K")
        else:
            self._stream.write(f"{text}\n")
        self._stream.flush()

    def done(self) -> None:
        if self._tty:
            self._stream.write("\n")
            self._stream.flush()


def _label(path: str) -> str:
    """How messages name the imported file."""
    return "<stdin>" if path == "-" else path


def _in_file(path: str, error: FieldError) -> FieldError:
    """A problem of the file itself (field '' or 'line N'), naming the file."""
    where = f"{_label(path)}: {error.field}" if error.field else _label(path)
    return FieldError(where, error.reason, error.value)


def _row_errors(errors: Sequence[FieldError], lines: Sequence[int]) -> list[tuple[int, str]]:
    """``(line, message)`` for validation errors on ``nodes[i]`` paths."""

    def line_of(match: re.Match[str]) -> str:
        return f"line {lines[int(match.group(1))]} "

    out: list[tuple[int, str]] = []
    for error in errors:
        match = _INDEX.match(error.field)
        if match is None:
            out.append((0, str(error)))
            continue
        field = error.field[match.end() :]
        # "duplicate of nodes[3].name" -> "duplicate of line 5 name"
        reason = _INDEX.sub(line_of, error.reason)
        where = f"{field}: " if field else ""
        got = f" (got {error.value})" if error.value is not None else ""
        out.append((lines[int(match.group(1))], f"{where}{reason}{got}"))
    return out


class NodeImport(ConductorCommand, Command):
    """Import nodes from a YAML, JSON or CSV file: every row, or none.

    Every row is validated first, and checked against the nodes stored
    already; bad rows are reported with their line and field (the first
    --max-problems of them, then how many more), and then nothing is
    imported.  Good files are imported in batches (each batch all or
    nothing on the conductor; a concurrent import of the same names can
    still make a later batch fail, and the message says what was
    imported), and one summary line is printed.  YAML and JSON files hold
    a list of node specs (or a mapping whose 'nodes' is that list); see
    'ringfleet node create' for the fields.  CSV columns: name, uuid,
    resource_class, traits (space/comma/semicolon separated), group,
    maintenance, maintenance_reason, provision_state, power_state,
    capabilities, and properties.<name> for any other property.
    """

    # --format was this command's first spelling of --input-format; it is
    # still read (with a warning) because the command has no -f/--format of
    # its own to clash with.
    _DEPRECATED_FORMAT = "--format"

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        parser.add_argument("file", metavar="FILE", help="the file ('-' reads stdin)")
        parser.add_argument(
            "--input-format",
            dest="file_format",
            choices=node_files.FORMATS,
            help="the file's format (default: from its extension)",
        )
        parser.add_argument(
            self._DEPRECATED_FORMAT,
            dest="deprecated_file_format",
            choices=node_files.FORMATS,
            help="deprecated spelling of --input-format",
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            # 5000: a fifth of the round trips of 1000, each still well
            # inside the RPC timeout (~0.3 s on the conductor).
            default=5000,
            metavar="N",
            help="nodes per import call (1..10000, default 5000)",
        )
        parser.add_argument(
            "--max-problems",
            type=int,
            default=20,
            metavar="N",
            help="print the first N problems of a bad file, then how many more (0: all; 20)",
        )
        parser.add_argument(
            "--progress",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="show progress on stderr (default: only when stderr is a terminal)",
        )
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        if not 1 <= parsed_args.batch_size <= 10_000:
            raise InvalidInput(
                [FieldError.about("--batch-size", "must be 1..10000", parsed_args.batch_size)]
            )
        if parsed_args.max_problems < 0:
            raise InvalidInput(
                [FieldError.about("--max-problems", "must be 0 or more", parsed_args.max_problems)]
            )
        fmt = self._input_format(parsed_args)
        path = parsed_args.file
        try:
            fmt = node_files.detect_format("" if path == "-" else path, fmt)
            text = self._read(path)
            rows, bad_rows = node_files.read_nodes(text, fmt)
        except InvalidInput as exc:
            # The file itself is unusable: name it in every problem.
            raise InvalidInput([_in_file(path, error) for error in exc.errors]) from None
        enabled = parsed_args.progress
        progress = _Progress(
            self.app.stderr, self.app.stderr.isatty() if enabled is None else enabled
        )
        progress.update(f"read {len(rows)} rows from {path}; validating")
        lines = [line for line, _ in rows]
        problems = [(int(e.field.split()[1]), e.reason) for e in bad_rows]
        specs: list[NodeSpec] = []
        try:
            specs = validate_node_specs([spec for _, spec in rows])
        except InvalidInput as exc:
            problems.extend(_row_errors(exc.errors, lines))
        # Built once for both passes, without the fields at their defaults.
        payloads = [spec.to_payload() for spec in specs]
        if not problems:
            # Rows can also clash with nodes stored already: check the whole
            # file before importing any of it.
            problems = self._stored_clashes(payloads, lines, parsed_args.batch_size, progress)
        if problems:
            progress.done()
            self._report(path, sorted(problems, key=lambda p: p[0]), parsed_args.max_problems)
            bad = len({line for line, _ in problems})
            raise InvalidInput(
                [
                    FieldError(
                        _label(path),
                        f"{bad} of {len(rows) + len(bad_rows)} rows are bad; nothing imported",
                    )
                ]
            )
        imported = self._import(payloads, lines, parsed_args.batch_size, progress, path)
        progress.done()
        batches = (len(payloads) + parsed_args.batch_size - 1) // parsed_args.batch_size
        self.app.stdout.write(
            f"Imported {imported} nodes from {_label(path)} ({fmt}) in {batches} batches\n"
        )
        return 0

    def _input_format(self, parsed_args: argparse.Namespace) -> str | None:
        old = parsed_args.deprecated_file_format
        if old is None:
            return parsed_args.file_format  # type: ignore[no-any-return]
        if parsed_args.file_format not in (None, old):
            raise InvalidInput(
                [
                    FieldError.about(
                        self._DEPRECATED_FORMAT,
                        f"contradicts --input-format {parsed_args.file_format}",
                        old,
                    )
                ]
            )
        self.app.stderr.write(
            f"ringfleet {self.cmd_name}: warning: {self._DEPRECATED_FORMAT} is deprecated, "
            "use --input-format\n"
        )
        return old  # type: ignore[no-any-return]

    def _report(self, path: str, problems: Sequence[tuple[int, str]], most: int) -> None:
        """The first ``most`` problems (0: all), then how many more: a
        re-imported 100,000-row file has 100,000 or more."""
        shown = problems[:most] if most else problems
        for line, message in shown:
            where = f"line {line}: " if line else ""
            self.app.stderr.write(f"{_label(path)}: {where}{message}\n")
        if len(shown) < len(problems):
            self.app.stderr.write(
                f"{_label(path)}: ... and {len(problems) - len(shown):,} more problems "
                "(--max-problems 0 prints every one)\n"
            )

    def _read(self, path: str) -> str:
        if path == "-":
            return sys.stdin.read()
        try:
            with open(path, encoding="utf-8") as handle:
                return handle.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInput([FieldError("", f"cannot read: {exc}")]) from None

    def _stored_clashes(
        self,
        payloads: Sequence[dict[str, Any]],
        lines: Sequence[int],
        size: int,
        progress: _Progress,
    ) -> list[tuple[int, str]]:
        """``(line, message)`` for every row whose name or uuid is stored already."""
        problems: list[tuple[int, str]] = []
        for start in range(0, len(payloads), size):
            batch = payloads[start : start + size]
            try:
                self.client.import_nodes(list(batch), dry_run=True)
            except InvalidInput as exc:
                problems.extend(_row_errors(exc.errors, lines[start : start + size]))
            progress.update(f"checked {start + len(batch)}/{len(payloads)} nodes")
        return problems

    def _import(
        self,
        payloads: Sequence[dict[str, Any]],
        lines: Sequence[int],
        size: int,
        progress: _Progress,
        path: str,
    ) -> int:
        imported = 0
        for start in range(0, len(payloads), size):
            batch = payloads[start : start + size]
            try:
                self.client.import_nodes(list(batch))
            except Conflict as exc:
                # Validated rows can still clash with nodes already stored.
                progress.done()
                line = lines[start + exc.index] if exc.index is not None else None
                where = f"line {line}: " if line is not None else ""
                first = lines[start] if start < len(lines) else 0
                self.app.stderr.write(f"{_label(path)}: {where}{describe_error(exc)[0]}\n")
                raise InvalidInput(
                    [
                        FieldError(
                            _label(path),
                            f"{imported} nodes imported, before the batch starting at "
                            f"line {first}; that batch and the rest were not",
                        )
                    ]
                ) from None
            imported += len(batch)
            progress.update(f"imported {imported}/{len(payloads)} nodes")
        return imported


# -- list, show ---------------------------------------------------------------------


class NodeList(ConductorCommand, StreamingLister):
    """List nodes (all of them, in uuid order, unless --limit).

    Pages of --page-size nodes are printed as they arrive with -f value,
    -f csv and -f json (the next page is fetched meanwhile); a table needs
    every row for its column widths, so it prints at the end.
    """

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

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        parser.add_argument("nodes", metavar="NODE", nargs="+", help="uuid or name")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        for node in parsed_args.nodes:
            self.client.delete_node(node)
        return 0
