# SPDX-License-Identifier: Apache-2.0
"""The scale benchmark's command line: ``python -m benchmarks.scale_bench``
(:mod:`benchmarks.scale_bench` is this module's entry point).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import argtypes
from benchmarks.report import log_line, publish
from benchmarks.scale.report import format_report
from benchmarks.scale.runner import judge, run
from tests.functional.fleet_harness import TTL

__all__ = ["STEPS", "main", "parse_args"]

STEPS = ("import", "cold", "join", "kill", "builds", "list")


def _agent_counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of numbers: {text!r}") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"agent counts must be >= 1: {text!r}")
    return counts


def _steps_list(text: str) -> list[str]:
    steps = [part.strip() for part in text.split(",") if part.strip()]
    unknown = sorted(set(steps) - set(STEPS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown steps {unknown}; known: {', '.join(STEPS)}")
    return steps


def _parser() -> argparse.ArgumentParser:
    """The options of the steps and of the fleet."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.scale_bench",
        description=(
            "Import, cold start, join, kill -9, builds and node list of a large fleet "
            "(issue 13). Run it through tools/with-test-servers.sh."
        ),
    )
    parser.add_argument(
        "--nodes", type=argtypes.at_least(1), default=100_000, help="nodes (100000)"
    )
    parser.add_argument(
        "--agents",
        type=_agent_counts,
        default=[10],
        help="agent processes, or a comma-separated list of counts run one after another (10)",
    )
    parser.add_argument(
        "--agents-per-process",
        type=argtypes.at_least(1),
        default=1,
        metavar="K",
        help="run the cold start's agents K to a Python process, as threads "
        "(benchmarks/multi_agent.py); the joined agent, and the killed one, in their own (1)",
    )
    parser.add_argument("--conductors", type=int, choices=(1, 2), default=1, help="(1)")
    parser.add_argument(
        "--steps",
        type=_steps_list,
        default=list(STEPS),
        help=f"comma-separated subset of {','.join(STEPS)} (all)",
    )
    parser.add_argument("--no-node-list", action="store_true", help="skip the node list step")
    parser.add_argument("--builds", type=argtypes.at_least(1), default=1000, help="(1000)")
    parser.add_argument(
        "--waves",
        type=argtypes.at_least(0),
        default=0,
        help="after the steps, this many waves of: one agent joins, --builds builds, kill -9 "
        "of that agent; the conductor RSS after each (0)",
    )
    parser.add_argument("--batch", type=argtypes.at_least(1), default=25, help="(25)")
    parser.add_argument(
        "--baseline-nodes",
        type=argtypes.at_least(0),
        default=1000,
        metavar="N",
        help="with builds: the same builds first on a fleet of N nodes (at least twice "
        "--builds) and the same agents, the rate the large fleet's is judged against "
        "(1000; 0: none)",
    )
    parser.add_argument(
        "--quiet",
        type=argtypes.seconds(allow_zero=True),
        default=0.0,
        metavar="SECONDS",
        help="after the cold start, measure the converged fleet left alone this long: "
        "conductor CPU and rows read per minute (0: not measured)",
    )
    _fleet_options(parser)
    return parser


def _fleet_options(parser: argparse.ArgumentParser) -> None:
    """The fleet's options: membership, waits, code, servers, output."""
    env = os.environ.get
    parser.add_argument(
        "--ttl",
        type=argtypes.at_least(1),
        default=TTL,
        help=f"the membership TTL, membership_timeout ({TTL}, the functional tests'; "
        "production's is 10)",
    )
    parser.add_argument(
        "--watch-interval",
        type=argtypes.seconds(allow_zero=False),
        default=0.2,
        help="seconds between two reads of the membership group (0.2; the default of "
        "the services is 1)",
    )
    parser.add_argument(
        "--timeout",
        type=argtypes.seconds(allow_zero=False),
        default=180.0,
        help="seconds each convergence is waited for; after it the step reports a timeout (180)",
    )
    parser.add_argument(
        "--conductor-cores",
        type=argtypes.at_least(1),
        default=1,
        metavar="N",
        help="cores the conductor's host gives it in the projection to one agent per "
        "host (1: one Python process, bound by its GIL)",
    )
    parser.add_argument(
        "--code",
        type=Path,
        help="run the services from this checkout of the project (default: this one)",
    )
    parser.add_argument("--db-url", default=env("RINGFLEET_TEST_DB_URL"))
    parser.add_argument("--transport-url", default=env("RINGFLEET_TEST_TRANSPORT_URL"))
    parser.add_argument("--etcd-url", default=env("RINGFLEET_TEST_ETCD_URL"))
    parser.add_argument("--json", type=Path, help="also write the report as JSON to this file")
    parser.add_argument(
        "--project",
        type=Path,
        metavar="JSON",
        help="run nothing: print the report of an earlier run's --json file, its "
        "projection to one agent per host and its goals computed again (e.g. with "
        "another --conductor-cores)",
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command-line options (server URLs default to ``RINGFLEET_TEST_*``)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.project is not None:
        return args  # an earlier run's report: no servers needed
    if args.no_node_list and "list" in args.steps:
        args.steps.remove("list")
    if args.code is not None:
        args.code = args.code.resolve()
    argtypes.require_servers(
        parser,
        args,
        "SERVERS=etcd,rabbit,postgres tools/with-test-servers.sh "
        ".venv/bin/python -m benchmarks.scale_bench",
    )
    return args


def reproject(path: Path, conductor_cores: int) -> dict[str, Any]:
    """An earlier run's ``--json`` report, its projection and goals computed
    again (with ``conductor_cores`` for the conductor's host)."""
    report: dict[str, Any] = json.loads(path.read_text())
    report["config"]["conductor_cores"] = conductor_cores
    return judge(report)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.project is not None:
        print(format_report(reproject(args.project, args.conductor_cores)))
        return 0
    return publish("scale_bench", lambda: run(args, log=log_line), format_report, args.json)


if __name__ == "__main__":
    sys.exit(main())
