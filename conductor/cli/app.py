# SPDX-License-Identifier: Apache-2.0
"""The ``ringfleet`` cliff application.

The configuration is read only when a command first asks for the conductor
client, so ``ringfleet demo`` and ``ringfleet help`` never need a config file,
and a bad option in one fails only the commands that talk to the conductor.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import Any

from cliff.app import App
from cliff.commandmanager import CommandManager
from cliff.complete import CompleteCommand
from cliff.help import HelpCommand
from oslo_config import cfg

from conductor.cli import login
from conductor.cli.client import client_from_conf, load_config
from conductor.cli.command import Examples

__all__ = ["COMMAND_NAMESPACE", "RingfleetApp", "main"]

# Libraries whose warnings are shown only with -v.
_QUIET_LIBRARIES = (
    "kombu",
    "oslo.messaging",
    "oslo_messaging",
    "amqp",
    "keystoneauth",
    "openstack",
    # An OpenStack service's outage (Placement, for "placement check") is
    # the command's own error line; the services' one WARNING would repeat it.
    "conductor.common.service_outage",
)

# Entry point namespace of the CLI's commands (pyproject.toml).
COMMAND_NAMESPACE = "ringfleet.cli"


class _Help(Examples, HelpCommand):
    """Print detailed help for another command."""

    examples = (("every command", ""), ("one command's options and examples", "node list"))


class _Complete(Examples, CompleteCommand):
    """Print a bash completion script for ringfleet's commands."""

    examples = (("the bash completion script, for /etc/bash_completion.d", "--shell bash"),)


class RingfleetApp(App):
    """``ringfleet``: operate a ringfleet bare-metal fleet."""

    def __init__(self) -> None:
        super().__init__(
            description="Operate a ringfleet bare-metal fleet.",
            version=metadata.version("ringfleet"),
            command_manager=CommandManager(COMMAND_NAMESPACE),
            deferred_help=True,
        )
        # cliff's own commands, with examples in their help as ours have.
        self.command_manager.add_command("help", _Help)
        self.command_manager.add_command("complete", _Complete)
        self._client: Any = None
        self._transport: Any = None
        self._conf: tuple[cfg.ConfigOpts, str] | None = None

    def build_option_parser(
        self,
        description: str | None,
        version: str | None,
        argparse_kwargs: dict[str, Any] | None = None,
    ) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().build_option_parser(
            description, version, argparse_kwargs
        )
        parser.add_argument(
            "--config-file",
            action="append",
            default=[],
            metavar="PATH",
            help="ringfleet configuration file (repeatable; default: "
            "/etc/ringfleet/ringfleet.conf when it exists)",
        )
        parser.add_argument(
            "--rpc-timeout",
            type=float,
            default=60.0,
            metavar="SECONDS",
            help="how long to wait for the conductor to answer (60)",
        )
        parser.add_argument(
            "--os-endpoint",
            default=os.environ.get("OS_ENDPOINT"),
            metavar="URL",
            help="go through the HTTP API (ringfleet-api) at URL instead of RPC "
            "(env OS_ENDPOINT); the config file is then not read. With a "
            "Keystone login and no --os-endpoint, the catalog's baremetal-fleet "
            "endpoint",
        )
        parser.add_argument(
            "--os-token",
            default=os.environ.get("OS_TOKEN"),
            metavar="TOKEN",
            help="a token: sent as it is with only --os-endpoint; with --os-cloud or "
            "--os-auth-url, a Keystone token to log in with (env OS_TOKEN)",
        )
        login.add_arguments(parser)
        return parser

    def configure_logging(self) -> None:
        # cliff logs INFO to the console by default; an operator's command
        # should print its result and only warnings: -v for INFO, -vv DEBUG.
        super().configure_logging()
        level = {0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO}.get(
            self.options.verbose_level, logging.DEBUG
        )
        for handler in logging.getLogger().handlers:
            if getattr(handler, "stream", None) is self.stderr:
                handler.setLevel(logging.DEBUG if self.options.debug else level)
        if self.options.verbose_level < 2 and not self.options.debug:
            # The messaging libraries warn about their own setup (a broker
            # URL without host, heartbeats unsupported by the memory
            # driver): noise in an operator's output unless asked for.
            for name in _QUIET_LIBRARIES:
                logging.getLogger(name).setLevel(logging.ERROR)

    def run_subcommand(self, argv: list[str]) -> int:
        # argparse ends a bad command line with SystemExit(2) (and --help
        # with 0); an embedding caller of run() wants the status, not an exit.
        try:
            return int(super().run_subcommand(argv))
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else 2

    def config(self) -> tuple[cfg.ConfigOpts, str]:
        """The configuration of RPC mode (``--config-file``, or the default
        file), parsed on first use, and where it came from in words."""
        if self._conf is None:
            self._conf = load_config(self.options.config_file)
        return self._conf

    def conductor_client(self) -> Any:
        """The :class:`conductor.rpcapi.ConductorAPI`, built on first use."""
        if self._client is None:
            if login.wants_http(self.options):
                # requests and keystoneauth: for the HTTP API only.
                from conductor.cli.http_client import HttpConductorAPI  # noqa: PLC0415 -- see above

                self._client = HttpConductorAPI(
                    login.log_in(self.options, self.options.rpc_timeout),
                    self.options.rpc_timeout,
                )
            else:
                conf, source = self.config()
                self._transport, self._client = client_from_conf(
                    conf, self.options.rpc_timeout, source
                )
        return self._client

    def clean_up(self, cmd: Any, result: int, err: BaseException | None) -> None:
        if self._transport is not None:
            self._transport.cleanup()
            self._transport = self._client = None
        elif self._client is not None:
            from conductor.cli.http_client import HttpConductorAPI  # noqa: PLC0415 -- loaded: in use

            if isinstance(self._client, HttpConductorAPI):
                self._client.close()
                self._client = None


def main(argv: Sequence[str] | None = None) -> int:
    return int(RingfleetApp().run(list(sys.argv[1:] if argv is None else argv)))
