# SPDX-License-Identifier: Apache-2.0
"""What every conductor-calling command shares: the client, errors, exit codes.

An error the conductor raises on purpose (bad input, not found, conflict,
no valid node, unavailable) reaches the CLI as the exception itself, but its
``str()`` carries the remote traceback.  :func:`describe_error` rebuilds the
local message from the exception's attributes instead, so the operator sees
one line per problem, naming the field; a command then exits 1.  Usage
errors (argparse) exit 2, in :class:`conductor.cli.app.RingfleetApp`.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import TYPE_CHECKING, Any

import yaml
from cliff._argparse import SmartHelpFormatter
from oslo_config import cfg

from conductor.common.exception import InvalidInput, RingfleetError

if TYPE_CHECKING:
    import oslo_messaging as messaging

__all__ = [
    "ConductorCommand",
    "Examples",
    "command_line",
    "describe_error",
    "key_value",
    "own_epilog",
]

LOG = logging.getLogger(__name__)


def _local(exc: RingfleetError) -> RingfleetError:
    """The exception as raised on the conductor (not its ``*_Remote`` twin)."""
    cls: type[RingfleetError] = type(exc)
    if cls.__name__.endswith("_Remote"):
        # oslo.messaging subclasses the original class; rebuild the original
        # from the same primitives the remote side sent.
        for base in cls.__mro__[1:]:
            if issubclass(base, RingfleetError):
                try:
                    return base(**exc.kwargs)
                except TypeError:
                    break
    return exc


def _loaded_messaging() -> Any:
    """oslo.messaging if something imported it already (the RPC client), else None.

    Its exceptions are looked for only then: none can have been raised
    without it, and a command that never talked RPC (``--help``, the HTTP
    API, the demo) starts and fails without importing it (half a second of
    CPU, issue 36).
    """
    if "oslo_messaging" not in sys.modules:
        return None
    import oslo_messaging  # noqa: PLC0415 -- imported already (see above)

    return oslo_messaging


def _remote_error(exc: messaging.RemoteError) -> str:
    from conductor.common import rpc  # noqa: PLC0415 -- oslo.messaging: loaded already

    if exc.exc_type in rpc.NOT_SERVED:
        # The conductor runs an older RPC API than this client.
        return f"the conductor is too old for this command ({exc.exc_type}: {exc.value})"
    return f"the conductor failed: {exc.exc_type}: {exc.value}"


def describe_error(exc: BaseException, rpc_timeout: float | None = None) -> list[str]:
    """One line per problem, for the operator (no traceback).

    ``rpc_timeout``: the seconds the call waited, to say so on a timeout.
    """
    if isinstance(exc, InvalidInput):
        return [str(error) for error in exc.errors] or ["invalid input"]
    loaded = _loaded_messaging()
    if isinstance(exc, RingfleetError):
        line = str(_local(exc))
    elif loaded is not None and isinstance(exc, loaded.MessagingTimeout | loaded.RemoteError):
        line = _messaging_error(exc, rpc_timeout)
    elif isinstance(exc, cfg.Error):
        line = f"configuration: {exc}"
    else:
        line = str(exc) or type(exc).__name__
    return [line.splitlines()[0] if line else type(exc).__name__]


def _messaging_error(
    exc: messaging.MessagingTimeout | messaging.RemoteError, rpc_timeout: float | None
) -> str:
    """The line of an oslo.messaging timeout or remote error (the module is
    loaded: it raised it)."""
    import oslo_messaging as messaging  # noqa: PLC0415 -- loaded already

    from conductor.common import rpc  # noqa: PLC0415 -- oslo.messaging: loaded already

    if isinstance(exc, rpc.NoConsumer):
        # The broker returned the call: no conductor ever consumed the topic.
        return (
            f"no conductor consumes topic {exc.topic}: is a ringfleet-conductor running and "
            "connected to the same [DEFAULT] transport_url (and control_exchange)?"
        )
    if isinstance(exc, messaging.MessagingTimeout):
        within = f" within {rpc_timeout:g} s" if rpc_timeout is not None else " in time"
        return (
            f"no conductor answered{within} on topic {rpc.CONDUCTOR_TOPIC}: is a "
            "ringfleet-conductor running and connected to the same [DEFAULT] transport_url?"
        )
    return _remote_error(exc)


def add_check_format(parser: argparse.ArgumentParser) -> None:
    """``-f text|json|yaml`` of the check commands (``fleet check``,
    ``placement check``): one line per problem, or the whole report."""
    parser.add_argument(
        "-f",
        "--format",
        dest="output_format",
        choices=("text", "json", "yaml"),
        default="text",
        help="output format (default: text, one line per problem)",
    )


def write_document(stream: Any, output_format: str, document: Any) -> None:
    """A check's whole report as JSON or YAML (``output_format``), keys sorted."""
    if output_format == "json":
        stream.write(json.dumps(document, indent=2, sort_keys=True) + "\n")
    else:
        stream.write(yaml.safe_dump(document, sort_keys=True))


def own_epilog(command: Any) -> str | None:
    """The epilog cliff gives ``command``, one of ringfleet's, when ``ringfleet``
    runs it; None under another application (the openstack CLI): cliff's own.

    cliff ends a command's epilog with the name of its distribution when
    that is not the application's, and to know it reads the file list of
    every installed distribution: 0.1 to 0.2 s of CPU on every command, for a
    line it never prints here (every ringfleet command is ringfleet's).  This
    is cliff's epilog without that search: the command's own and its hooks'.
    """
    from conductor.cli.app import RingfleetApp  # noqa: PLC0415 -- loaded: it runs the command

    if not isinstance(command.app, RingfleetApp):
        return None
    parts = [command._epilog or ""]
    for hook in command._hooks:
        epilog = hook.obj.get_epilog() if hook.obj is not None else None
        if epilog is not None:
            parts.append(epilog)
    return "\n\n".join(parts)


def command_line(command: Any) -> str:
    """*command* as its user typed it, the program named once, for its
    messages: ``ringfleet node list``, or ``openstack ringfleet node list``
    under the openstack CLI (whose command names start with ``ringfleet``)."""
    from conductor.cli.app import RingfleetApp  # noqa: PLC0415 -- loaded: it runs the command

    name = getattr(command, "cmd_name", None) or ""
    program = "ringfleet" if isinstance(command.app, RingfleetApp) else "openstack"
    return f"{program} {name}".rstrip()


def key_value(text: str) -> tuple[str, str]:
    """argparse type of ``KEY=VALUE`` options (a bad one is a usage error)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


class _ExampleFormatter(SmartHelpFormatter):
    """cliff's help formatter, but an epilog's indented lines (the examples)
    are kept as they are, where argparse would run them into one line."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        blocks = []
        for block in text.split("\n\n"):
            lines = block.splitlines()
            if len(lines) > 1 and all(line.startswith("  ") for line in lines[1:]):
                blocks.append("\n".join(indent + line for line in lines))
            else:
                blocks.append(str(super()._fill_text(block, width, indent)))
        return "\n\n".join(blocks)


def _shell_lines(command: str, width: int = 76) -> list[str]:
    """*command* as shell lines of about *width*, continued with backslashes."""
    lines, line = [], "  "
    for word in command.split(" "):
        if line.strip() and len(line) + len(word) + 2 > width:
            lines.append(line + " \\")
            line = "     "
        line = f"{line} {word}" if line.strip() else f"{line}{word}"
    return [*lines, line]


class Examples:
    """Mixin: a command's examples at the end of its ``--help``.

    :attr:`examples` are ``(what it does, the arguments)``; each is shown
    as the command line its user types (``ringfleet node list ...``, or
    ``openstack ringfleet node list ...`` under the openstack CLI).
    ``tests/unit/test_cli_help.py`` checks that every command has one and
    that each parses.
    """

    app: Any
    #: (what it does, the command's arguments) of each example.
    examples: tuple[tuple[str, str], ...] = ()

    #: Examples as a reStructuredText literal block (the Sphinx build of the
    #: man pages reads epilogs as reStructuredText: ``docs/conf.py`` sets it).
    rst = False
    #: The program and command as :meth:`get_parser` was given them.
    _prog: str | None = None

    def examples_text(self) -> str:
        if not self.examples:
            return ""
        lines = ["Examples::", ""] if self.rst else ["Examples:"]
        for what, arguments in self.examples:
            typed = f"{self._prog or command_line(self)} {arguments}".rstrip()
            lines += [f"  # {what}", *_shell_lines(typed)]
        return "\n".join(lines)

    def get_epilog(self) -> str:
        epilog = own_epilog(self)
        if epilog is None:
            epilog = str(super().get_epilog())  # type: ignore[misc]
        return "\n\n".join(part for part in (self.examples_text(), epilog) if part)

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        # What the user typed (cliff's applications pass it; Sphinx too).
        self._prog = prog_name
        parser: argparse.ArgumentParser = super().get_parser(prog_name)  # type: ignore[misc]
        parser.formatter_class = _ExampleFormatter
        return parser


class ConductorCommand(Examples):
    """Mixin for cliff commands that call the conductor.

    Put it first in the bases (``class NodeList(ConductorCommand, Lister)``):
    its :meth:`run` turns expected failures into one line per problem on
    stderr and exit status 1.  A command sets :attr:`exit_code` when it
    succeeded in talking to the conductor but the outcome is a failure
    (``fleet check`` found problems, a waited-for build ended in ERROR).
    A check whose 1 means "problems found" sets :attr:`error_exit_code`
    so that "could not check" reads differently to a monitoring system.
    """

    app: Any
    cmd_name: str | None
    exit_code = 0
    #: The exit status of an expected failure (the lines on stderr).
    error_exit_code = 1

    @staticmethod
    def _expected() -> tuple[type[BaseException], ...]:
        """The failures :meth:`run` reports in a line: ours, the configuration's,
        and oslo.messaging's once it is loaded (none can be raised before)."""
        loaded = _loaded_messaging()
        if loaded is None:
            return (RingfleetError, cfg.Error)
        return (RingfleetError, loaded.MessagingTimeout, loaded.MessagingException, cfg.Error)

    @property
    def client(self) -> Any:
        """The :class:`conductor.rpcapi.ConductorAPI` of the app (``ringfleet``),
        or the API client of the openstack CLI's plugin
        (:mod:`conductor.cli.osc_plugin`)."""
        conductor_client = getattr(self.app, "conductor_client", None)
        if conductor_client is None:
            return self.app.client_manager.ringfleet
        return conductor_client()

    def run(self, parsed_args: argparse.Namespace) -> int:
        try:
            result = int(super().run(parsed_args) or 0)  # type: ignore[misc]
        except self._expected() as exc:
            LOG.debug("%s failed", command_line(self), exc_info=True)
            rpc_timeout = getattr(getattr(self.app, "options", None), "rpc_timeout", None)
            for line in describe_error(exc, rpc_timeout):
                self.app.stderr.write(f"{command_line(self)}: error: {line}\n")
            return self.error_exit_code
        return result or self.exit_code
