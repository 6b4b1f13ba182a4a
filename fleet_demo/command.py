# SPDX-License-Identifier: Apache-2.0
"""``ringfleet demo``: the embedded fleet demo as a cliff command.

Exit status: 0 when every invariant held, 1 when one was violated (each is
listed at the end), 2 for a bad option (named in the error).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from cliff.command import Command

from conductor.cli.command import Examples
from conductor.common.extras import MissingExtra
from fleet_demo.options import DemoOptions

__all__ = ["Demo"]


def _number(
    kind: type[int] | type[float], minimum: float, maximum: float | None = None
) -> Callable[[str], float]:
    """An argparse ``type=`` accepting ``kind`` in [minimum, maximum]."""

    def convert(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {'an integer' if kind is int else 'a number'}, got {text!r}"
            ) from None
        if not value >= minimum or (maximum is not None and not value <= maximum):
            bound = f"from {minimum:g} to {maximum:g}" if maximum is not None else f">= {minimum:g}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {text}")
        return value

    return convert


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's options; argparse refuses bad values (exit 2, naming the option)."""
    defaults = DemoOptions()
    parser.add_argument(
        "--agents",
        type=_number(int, 2, 50),
        default=defaults.agents,
        help=f"compute agents at start, one of them crashes (2-50; {defaults.agents})",
    )
    parser.add_argument(
        "--nodes",
        type=_number(int, 1, 20000),
        default=defaults.nodes,
        help=f"nodes to enroll (1-20000; {defaults.nodes})",
    )
    parser.add_argument(
        "--instances",
        type=_number(int, 1, 20000),
        default=defaults.instances,
        help=f"instances to build, at most --nodes ({defaults.instances})",
    )
    parser.add_argument(
        "--ttl",
        type=_number(float, 1.0, 60.0),
        default=defaults.ttl,
        metavar="SECONDS",
        help=f"membership TTL: how long a crashed agent stays a member (1-60; {defaults.ttl:g})",
    )
    parser.add_argument(
        "--rehome-grace",
        type=_number(float, 0.0, 300.0),
        default=defaults.rehome_grace,
        metavar="SECONDS",
        help=(
            "how long a departed agent keeps its pinned nodes before they are "
            f"re-homed (0-300; {defaults.rehome_grace:g})"
        ),
    )
    parser.add_argument(
        "--step-duration",
        type=_number(float, 0.0, 5.0),
        default=defaults.step_duration,
        metavar="SECONDS",
        help=(
            f"seconds per simulated deploy step, 4 steps a deploy (0-5; {defaults.step_duration:g})"
        ),
    )
    parser.add_argument(
        "--failure-rate",
        type=_number(float, 0.0, 1.0),
        default=defaults.failure_rate,
        help=(
            "probability that a simulated deploy fails (then rescheduled, up to "
            f"3 nodes; 0-1; {defaults.failure_rate:g})"
        ),
    )
    parser.add_argument(
        "--backend",
        choices=("file", "redis"),
        default=defaults.backend,
        help=(
            "membership backend: tooz file:// in a temp directory, or tooz's redis:// "
            "driver on fakeredis in this process (needs the demo-redis extra; "
            f"{defaults.backend})"
        ),
    )
    parser.add_argument(
        "--seed",
        type=_number(int, 0),
        default=defaults.seed,
        help=f"seed of the node and instance ids and of the simulated failures ({defaults.seed})",
    )


# What --help says (the module docstrings are for developers: they carry markup).
_DESCRIPTION = """\
Run a whole fleet in this process, no servers, and show it at work.

Start a conductor and N agents; enroll nodes of a few resource classes (and
a flavor per class); build instances; crash the agent with the most pins and
watch its unpinned nodes taken over after the TTL and its pinned ones
re-homed after rehome_grace (instances still ACTIVE, their host updated);
start a new agent and watch only its share move.  The fleet table is printed
around every step, and the invariants are verified along the way and at the
end.

Exit status: 0 when every invariant held, 1 when one was violated (each is
listed at the end), 2 for a bad option (named in the error)."""


class Demo(Examples, Command):
    """Run a whole fleet in this process, no servers, and show it at work."""

    examples = (
        (
            "a small fleet with some failing deploys",
            "--agents 3 --nodes 30 --instances 12 --failure-rate 0.1",
        ),
    )

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        parser.description = _DESCRIPTION
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        add_arguments(parser)
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        if parsed_args.instances > parsed_args.nodes:
            self.app.stderr.write(
                f"ringfleet demo: error: argument --instances: must be at most --nodes "
                f"({parsed_args.nodes}), got {parsed_args.instances}\n"
            )
            return 2
        # The whole fleet (both services, SQLAlchemy, oslo.messaging, tooz):
        # imported to run it, not for every ringfleet command's --help.
        from fleet_demo import scenario  # noqa: PLC0415 -- see above

        options = DemoOptions(
            agents=int(parsed_args.agents),
            nodes=int(parsed_args.nodes),
            instances=int(parsed_args.instances),
            ttl=float(parsed_args.ttl),
            rehome_grace=float(parsed_args.rehome_grace),
            step_duration=float(parsed_args.step_duration),
            failure_rate=float(parsed_args.failure_rate),
            seed=int(parsed_args.seed),
            backend=str(parsed_args.backend),
        )
        try:
            with self._quiet_fleet():
                result = scenario.run_demo(options, self.app.stdout)
        except MissingExtra as exc:  # --backend redis without its extra: nothing ran
            self.app.stderr.write(f"ringfleet demo: error: {exc}\n")
            return 1
        return 1 if result.violations else 0

    @contextmanager
    def _quiet_fleet(self) -> Iterator[None]:
        """Keep the fleet's expected warnings (the crash is on purpose) off the console.

        Without ``-v`` the console shows only errors while the demo runs;
        with ``-v`` (or ``--debug``) the services' log lines show as the app
        configured them.
        """
        options = getattr(self.app, "options", None)
        if options is None or options.verbose_level > 1 or options.debug:
            yield
            return
        handlers = [
            h for h in logging.getLogger().handlers if getattr(h, "stream", None) is self.app.stderr
        ]
        levels = [h.level for h in handlers]
        for handler in handlers:
            handler.setLevel(max(handler.level, logging.ERROR))
        try:
            yield
        finally:
            for handler, level in zip(handlers, levels, strict=True):
                handler.setLevel(level)
