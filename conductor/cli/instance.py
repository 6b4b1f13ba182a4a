# SPDX-License-Identifier: Apache-2.0
"""``ringfleet instance create|list|show|delete|reboot|stop|start|rebuild``.

``instance create --wait`` follows the builds until every instance is
ACTIVE or ERROR (progress on stderr) and exits 1 if any ended in ERROR.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid as uuidlib
from collections.abc import Iterable
from typing import Any, ClassVar

from cliff.command import Command
from cliff.lister import Lister
from cliff.show import ShowOne

from conductor.cli.command import ConductorCommand, command_line, key_value
from conductor.common.exception import FieldError, InvalidInput
from conductor.common.list_filters import SORT_DIRS, SORT_KEYS, TAG_FILTERS
from conductor.common.nova_status import STATUSES, status_of
from conductor.common.objects import VmState
from conductor.common.paging import pages
from conductor.common.verbs import VERBS, Verb

__all__ = [
    "InstanceCreate",
    "InstanceDelete",
    "InstanceList",
    "InstanceReboot",
    "InstanceRebuild",
    "InstanceShow",
    "InstanceStart",
    "InstanceStop",
]

_FIELDS = (
    "uuid",
    "name",
    "flavor",
    "status",
    "vm_state",
    "task_state",
    "node_uuid",
    "host",
    "group_hint",
    "fault",
    "attempts",
    "project_id",
    "user_id",
    "key_name",
    "metadata",
    "tags",
    "created_at",
    "updated_at",
    "image",
    "config_drive",
    "addresses",
)
_LIST_COLUMNS = (
    ("UUID", "uuid"),
    ("Name", "name"),
    ("Flavor", "flavor"),
    ("Status", "status"),
    ("State", "vm_state"),
    ("Task", "task_state"),
    ("Node", "node_uuid"),
    ("Host", "host"),
    ("Fault", "fault"),
)
_FINAL = frozenset({VmState.ACTIVE.value, VmState.ERROR.value})
_PAGE = 1000


def _rows(instances: Iterable[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [tuple(_with_status(i).get(key) for _, key in _LIST_COLUMNS) for i in instances]


def _with_status(instance: dict[str, Any]) -> dict[str, Any]:
    """*instance* with Nova's status (the API's since 1.10; computed over RPC)."""
    if "status" in instance or "vm_state" not in instance:
        return instance
    return instance | {"status": status_of(instance["vm_state"], instance.get("task_state"))}


def _titles() -> tuple[str, ...]:
    return tuple(title for title, _ in _LIST_COLUMNS)


def _hint(text: str) -> tuple[str, str]:
    name, equals, value = text.partition("=")
    if not equals or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def _read_text(path: str) -> str:
    """A file's text, for an option that takes a FILE ('-' is stdin)."""
    try:
        if path == "-":
            return sys.stdin.read()
        with open(path, encoding="utf-8") as stream:
            return stream.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise argparse.ArgumentTypeError(f"cannot read {path}: {exc}") from None


def _json_file(path: str) -> Any:
    try:
        return json.loads(_read_text(path))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{path} is not JSON: {exc}") from None


def _public_key(text: str) -> tuple[str, str]:
    """``NAME=FILE``: the key named NAME, read from FILE (an ``.pub`` file)."""
    name, path = key_value(text)
    return name, _read_text(path).strip()


def _checksum(text: str) -> tuple[str, str]:
    """``ALGO:HEX`` (md5, sha256, sha512), or a bare md5 hex digest."""
    algo, sep, digest = text.partition(":")
    return (algo.lower(), digest) if sep else ("md5", text)


def image_options(parser: argparse.ArgumentParser, prefix: str = "image") -> None:
    """``--image URL``, ``--image-checksum ALGO:HEX``, ``--image-disk-format``,
    ``--image-kernel``/``--image-ramdisk`` (a partition image),
    ``--image-property KEY=VALUE`` (repeatable), under *prefix*."""
    parser.add_argument(
        f"--{prefix}", metavar="URL", help="http(s) URL of the image Ironic writes to the node"
    )
    parser.add_argument(
        f"--{prefix}-checksum",
        type=_checksum,
        metavar="ALGO:HEX",
        help="the image's checksum: md5, sha256 or sha512, e.g. sha256:9f86d0...",
    )
    parser.add_argument(
        f"--{prefix}-disk-format", metavar="FORMAT", help="raw, qcow2, iso... (Glance's names)"
    )
    parser.add_argument(f"--{prefix}-kernel", metavar="URL", help="partition images: kernel")
    parser.add_argument(f"--{prefix}-ramdisk", metavar="URL", help="partition images: ramdisk")
    parser.add_argument(
        f"--{prefix}-property",
        type=key_value,
        action="append",
        metavar="KEY=VALUE",
        help="an image property for Nova's filters (hw_architecture=aarch64, "
        "img_hv_type=baremetal...), checked by Nova's rules; repeatable",
    )


def image_from(parsed_args: argparse.Namespace, prefix: str = "image") -> dict[str, Any] | None:
    """The image of :func:`image_options` (``None`` without ``--image``);
    the conductor validates it and names a bad field."""
    attr = prefix.replace("-", "_")
    source = getattr(parsed_args, attr)
    if source is None:
        return None
    image: dict[str, Any] = {"source": source}
    checksum = getattr(parsed_args, f"{attr}_checksum")
    if checksum is not None:
        algo, digest = checksum
        if algo == "md5":
            image["checksum"] = digest
        else:
            image["os_hash_algo"], image["os_hash_value"] = algo, digest
    for option, key in (
        ("disk_format", "disk_format"),
        ("kernel", "kernel"),
        ("ramdisk", "ramdisk"),
    ):
        value = getattr(parsed_args, f"{attr}_{option}")
        if value is not None:
            image[key] = value
    properties = getattr(parsed_args, f"{attr}_property")
    if properties:
        image["properties"] = dict(properties)
    return image


def config_drive_options(parser: argparse.ArgumentParser) -> None:
    """``--user-data FILE``, ``--public-key NAME=FILE`` and ``--meta K=V``
    (meta_data), ``--network-data FILE``: a config drive's parts."""
    parser.add_argument(
        "--user-data",
        type=_read_text,
        metavar="FILE",
        help="the config drive's user data (cloud-init); '-' reads stdin",
    )
    parser.add_argument(
        "--public-key",
        "--key",
        dest="public_keys",
        type=_public_key,
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="an SSH public key for the config drive's meta_data (repeatable)",
    )
    parser.add_argument(
        "--network-data",
        type=_json_file,
        metavar="FILE",
        help="the config drive's network_data.json (OpenStack's format)",
    )
    parser.add_argument(
        "--meta",
        type=key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="metadata for the config drive's meta_data 'meta' (repeatable)",
    )


def config_drive_from(parsed_args: argparse.Namespace) -> dict[str, Any]:
    """The parts of :func:`config_drive_options` given: ``user_data``,
    ``meta_data`` (public keys and meta together), ``network_data``."""
    drive: dict[str, Any] = {}
    if parsed_args.user_data is not None:
        drive["user_data"] = parsed_args.user_data
    meta_data: dict[str, Any] = {}
    if parsed_args.public_keys:
        meta_data["public_keys"] = dict(parsed_args.public_keys)
    if parsed_args.meta:
        meta_data["meta"] = dict(parsed_args.meta)
    if meta_data:
        drive["meta_data"] = meta_data
    if parsed_args.network_data is not None:
        drive["network_data"] = parsed_args.network_data
    return drive


#: The examples ending the commands' --help.
class InstanceCreate(ConductorCommand, Lister):
    """Build instances of a flavor (--count of them)."""

    examples = (
        (
            "three instances of flavor small, waiting until they are ACTIVE or ERROR",
            "--flavor small --count 3 --wait",
        ),
        (
            "one with an image and user data",
            (
                "--flavor small --name web-1 --image "
                "https://images.example.com/ubuntu.img --image-checksum "
                "md5:9e107d9d372bb6826bd81d3542a419d6 --user-data cloud-init.yaml"
            ),
        ),
        (
            "one with a key pair, user data, metadata and a tag",
            (
                "--flavor baremetal --name web --key-name mykey "
                "--user-data cloud-init.yaml --property role=web --tag prod --wait"
            ),
        ),
    )

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        parser.add_argument(
            "--flavor", required=True, metavar="FLAVOR", help="flavor name (flavor list)"
        )
        parser.add_argument("--count", type=int, default=1, metavar="N", help="(default 1)")
        parser.add_argument("--name", metavar="NAME", help="name (NAME-1..NAME-N for N > 1)")
        parser.add_argument("--group", metavar="GROUP", help="node group to build in")
        parser.add_argument(
            "--hint",
            dest="hints",
            type=_hint,
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="scheduler hint for the scheduler's filters, e.g. Nova's JsonFilter "
            "query=...; the value is a string, as with 'nova boot --hint' (repeatable)",
        )
        image_options(parser)
        config_drive_options(parser)
        parser.add_argument(
            "--key-name",
            metavar="KEYPAIR",
            help="a key pair of yours (keypair list): its public key goes into the config "
            "drive, as with 'openstack server create --key-name'",
        )
        parser.add_argument(
            "--property",
            dest="properties",
            type=key_value,
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="instance metadata, as 'openstack server create --property' (repeatable)",
        )
        parser.add_argument(
            "--tag",
            dest="tags",
            action="append",
            default=[],
            metavar="TAG",
            help="an instance tag (repeatable)",
        )
        parser.add_argument(
            "--wait",
            action="store_true",
            help="wait until every instance is ACTIVE or ERROR; exit 1 if any is ERROR",
        )
        parser.add_argument(
            "--wait-timeout",
            type=float,
            default=3600.0,
            metavar="SECONDS",
            help="give up waiting after this long, exit 1 (default 3600)",
        )
        parser.add_argument(
            "--poll-interval", type=float, default=1.0, metavar="SECONDS", help=argparse.SUPPRESS
        )
        return parser

    def take_action(
        self, parsed_args: argparse.Namespace
    ) -> tuple[tuple[str, ...], Iterable[tuple[Any, ...]]]:
        request: dict[str, Any] = {
            "flavor": parsed_args.flavor,
            "count": parsed_args.count,
            # Our own ids: a retry after a timeout returns the same instances.
            "instance_uuids": [str(uuidlib.uuid4()) for _ in range(max(parsed_args.count, 0))],
        }
        if parsed_args.name is not None:
            request["name"] = parsed_args.name
        if parsed_args.group is not None:
            request["group"] = parsed_args.group
        if parsed_args.hints:
            request["scheduler_hints"] = dict(parsed_args.hints)
        image = image_from(parsed_args)
        if image is not None:
            request["image"] = image
        request |= config_drive_from(parsed_args)
        if parsed_args.key_name is not None:
            request["key_name"] = parsed_args.key_name
        if parsed_args.properties:
            request["metadata"] = dict(parsed_args.properties)
        if parsed_args.tags:
            request["tags"] = parsed_args.tags
        if not 1 <= parsed_args.count <= 1000:
            request.pop("instance_uuids")  # let the conductor name the bad count
        instances = self.client.build_instances(request)
        if parsed_args.wait:
            instances = self._wait(instances, parsed_args.wait_timeout, parsed_args.poll_interval)
        return _titles(), _rows(instances)

    def _wait(
        self, instances: list[dict[str, Any]], timeout: float, interval: float
    ) -> list[dict[str, Any]]:
        current = {i["uuid"]: i for i in instances}
        deadline = time.monotonic() + timeout
        tty = self.app.stderr.isatty()
        while True:
            states = [i["vm_state"] for i in current.values()]
            line = (
                f"{states.count(VmState.ACTIVE.value)} active, "
                f"{states.count(VmState.ERROR.value)} error, "
                f"{sum(s not in _FINAL for s in states)} building, of {len(states)}"
            )
            self.app.stderr.write(f"\r{line}\x1b[K" if tty else f"{line}\n")
            self.app.stderr.flush()
            pending = [u for u, i in current.items() if i["vm_state"] not in _FINAL]
            if not pending:
                break
            if time.monotonic() > deadline:
                if tty:
                    self.app.stderr.write("\n")
                self.app.stderr.write(
                    f"{command_line(self)}: error: {len(pending)} instances not "
                    f"ACTIVE or ERROR after {timeout:g} s\n"
                )
                self.exit_code = 1
                return list(current.values())
            time.sleep(interval)
            for uuid in pending:
                current[uuid] = self.client.show_instance(uuid)
        if tty:
            self.app.stderr.write("\n")
        if any(i["vm_state"] == VmState.ERROR.value for i in current.values()):
            self.exit_code = 1
        return list(current.values())


class InstanceList(ConductorCommand, Lister):
    """List instances (all of them, unless --limit), Nova's filters and order too."""

    examples = (
        ("the instances in error", "--state error"),
        ("every project's (admins)", "--all-projects"),
        ("Nova's status filter, oldest first", "--status ACTIVE --sort-key created_at"),
        (
            "by name, changed since a moment",
            "--name '^web-' --changes-since 2026-11-29T20:00:00Z",
        ),
        ("tagged prod and web, none of them canary", "--tags prod,web --not-tags-any canary"),
    )

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        parser.add_argument("--state", choices=list(VmState), help="only this vm_state")
        parser.add_argument("--host", metavar="HOST", help="only on this agent")
        parser.add_argument("--limit", type=int, metavar="N", help="at most N instances")
        parser.add_argument(
            "--all-projects",
            action="store_true",
            help="every project's instances (admins; the default over RPC, as the operator)",
        )
        parser.add_argument("--project", metavar="PROJECT", help="only this project's (admins)")
        parser.add_argument(
            "--name", metavar="REGEX", help="only names matching this regular expression"
        )
        parser.add_argument(
            "--status", choices=STATUSES, type=str.upper, help="only this Nova status"
        )
        parser.add_argument(
            "--changes-since",
            metavar="TIME",
            help="only instances changed since (ISO 8601), deleted ones included",
        )
        parser.add_argument("--sort-key", choices=list(SORT_KEYS), help="sort by this key")
        parser.add_argument(
            "--sort-dir", choices=SORT_DIRS, help="asc or desc (default desc with --sort-key)"
        )
        for option, what in (
            ("--tags", "with every one of these tags"),
            ("--tags-any", "with at least one of these tags"),
            ("--not-tags", "leaving out those with every one of these tags"),
            ("--not-tags-any", "with none of these tags"),
        ):
            parser.add_argument(option, metavar="TAG[,TAG...]", help=f"only instances {what}")
        return parser

    def take_action(
        self, parsed_args: argparse.Namespace
    ) -> tuple[tuple[str, ...], Iterable[tuple[Any, ...]]]:
        if parsed_args.limit is not None and parsed_args.limit < 1:
            raise InvalidInput(
                [FieldError.about("--limit", "must be at least 1", parsed_args.limit)]
            )
        state = None if parsed_args.state is None else str(parsed_args.state)
        scope: dict[str, Any] = {}
        if parsed_args.all_projects or parsed_args.project is not None:
            scope = {"all_projects": parsed_args.all_projects, "project_id": parsed_args.project}
        for key in (
            "name",
            "status",
            "changes_since",
            "sort_key",
            "sort_dir",
            *TAG_FILTERS,
        ):
            if getattr(parsed_args, key) is not None:
                scope[key] = getattr(parsed_args, key)
        found = pages(
            lambda n, m: self.client.list_instances(
                vm_state=state, host=parsed_args.host, limit=n, marker=m, **scope
            ),
            parsed_args.limit,
            _PAGE,
        )
        return _titles(), _rows(found)


class InstanceShow(ConductorCommand, ShowOne):
    """Show one instance."""

    examples = (("one instance", "0b6a1c3e-5f2d-4c8b-9a7e-2d4f6b8c0e1a"),)

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        parser.add_argument("instance", metavar="UUID", help="instance uuid")
        return parser

    def take_action(
        self, parsed_args: argparse.Namespace
    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        found = _with_status(self.client.show_instance(parsed_args.instance))
        return _FIELDS, tuple(found.get(f) for f in _FIELDS)


class InstanceDelete(ConductorCommand, Command):
    """Delete instances: each node is torn down, then freed."""

    examples = (
        (
            "two instances",
            "0b6a1c3e-5f2d-4c8b-9a7e-2d4f6b8c0e1a 5e7f9a1b-3c5d-4e6f-8a0b-1c2d3e4f5a6b",
        ),
    )

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        parser.add_argument("instances", metavar="UUID", nargs="+", help="instance uuids")
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        for instance in parsed_args.instances:
            self.client.delete_instance(instance)
        return 0


class _InstanceVerb(ConductorCommand, Lister):
    """A verb on instances: each answers at once, its task state showing it.

    :attr:`command` names the verb table's rows it runs
    (:mod:`conductor.common.verbs`): their options (reboot's ``--hard``)
    pick one, whose conductor method is called for each instance.
    """

    #: The command (``instance reboot``) of the verb table's rows.
    command: ClassVar[str]

    @classmethod
    def verbs(cls) -> tuple[Verb, ...]:
        """The verb table's rows of :attr:`command`, the plainest first."""
        rows = (verb for verb in VERBS if verb.cli_command == cls.command)
        return tuple(sorted(rows, key=lambda verb: len(verb.cli_options)))

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        parser.add_argument("instances", metavar="UUID", nargs="+", help="instance uuids")
        for verb in self.verbs():
            for option in verb.cli_options:
                parser.add_argument(option, action="store_true", help=verb.summary)
        return parser

    def take_action(
        self, parsed_args: argparse.Namespace
    ) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
        return _titles(), _rows(self._verb(parsed_args, i) for i in parsed_args.instances)

    def _chosen(self, parsed_args: argparse.Namespace) -> Verb:
        """The row whose options were all given, the one with most of them."""
        given = [
            verb
            for verb in self.verbs()
            if all(
                getattr(parsed_args, option.lstrip("-").replace("-", "_"))
                for option in verb.cli_options
            )
        ]
        return given[-1]

    def _verb(self, parsed_args: argparse.Namespace, instance: str) -> dict[str, Any]:
        verb = self._chosen(parsed_args)
        conductor_method = getattr(self.client, verb.conductor_method)
        answer: dict[str, Any] = conductor_method(
            instance, **verb.conductor_arguments, **self._arguments(parsed_args)
        )
        return answer

    def _arguments(self, parsed_args: argparse.Namespace) -> dict[str, Any]:
        """The verb's own arguments beyond the table's (a rebuild's new image)."""
        return {}


class InstanceReboot(_InstanceVerb):
    """Reboot active instances: soft (the OS restarts; hard where the hardware
    cannot) or --hard (a power cycle).  Issued again while one hangs, it
    routes it anew (see the stuck-action problem of 'fleet check')."""

    examples = (("a hard reboot (power cycle)", "--hard 0b6a1c3e-5f2d-4c8b-9a7e-2d4f6b8c0e1a"),)

    command = "instance reboot"


class InstanceStop(_InstanceVerb):
    """Power active instances off (a clean shutdown first): stopped."""

    examples = (("power an instance off", "0b6a1c3e-5f2d-4c8b-9a7e-2d4f6b8c0e1a"),)

    command = "instance stop"


class InstanceStart(_InstanceVerb):
    """Power stopped instances on: active."""

    examples = (("power a stopped instance on", "0b6a1c3e-5f2d-4c8b-9a7e-2d4f6b8c0e1a"),)

    command = "instance start"


class InstanceRebuild(_InstanceVerb):
    """Re-image active or stopped instances on their nodes: active.

    With the image and config drive they were deployed with, or a new
    --image and/or config drive parts (--user-data, --public-key
    and --meta as meta_data, --network-data): each given replaces
    the instance's, the others are kept.  --key-name replaces the
    instance's key pair (Nova's rebuild --key-name), --no-key-name
    drops it.
    """

    examples = (
        ("re-image an instance with the image it has", "0b6a1c3e-5f2d-4c8b-9a7e-2d4f6b8c0e1a"),
        (
            "with a new image",
            (
                "--image https://images.example.com/ubuntu-24.img --image-checksum "
                "md5:9e107d9d372bb6826bd81d3542a419d6 "
                "0b6a1c3e-5f2d-4c8b-9a7e-2d4f6b8c0e1a"
            ),
        ),
        ("with another key pair", "--key-name laptop 0b6a1c3e-5f2d-4c8b-9a7e-2d4f6b8c0e1a"),
    )

    command = "instance rebuild"

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = super().get_parser(prog_name)
        image_options(parser)
        config_drive_options(parser)
        keys = parser.add_mutually_exclusive_group()
        keys.add_argument(
            "--key-name", metavar="NAME", help="a key pair of yours replaces the instance's"
        )
        keys.add_argument(
            "--no-key-name",
            action="store_true",
            help="the instance keeps no key pair (its public key leaves meta_data)",
        )
        return parser

    def _arguments(self, parsed_args: argparse.Namespace) -> dict[str, Any]:
        new = config_drive_from(parsed_args)
        image = image_from(parsed_args)
        if image is not None:
            new["image"] = image
        if parsed_args.key_name is not None:
            new["key_name"] = parsed_args.key_name
        elif parsed_args.no_key_name:
            new["key_name"] = ""  # none (the HTTP client sends Nova's null)
        return new
