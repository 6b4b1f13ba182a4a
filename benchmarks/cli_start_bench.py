# SPDX-License-Identifier: Apache-2.0
"""How much CPU the ``ringfleet`` CLI spends before it does anything, beside ``openstack``'s.

Run from the repository root, with ringfleet installed in the interpreter's
environment (the ``ringfleet`` and ``openstack`` console scripts next to it)::

    python -m benchmarks.cli_start_bench
    python -m benchmarks.cli_start_bench --runs 20 --code /tmp/other --json cli.json

Each command runs ``--runs`` times as a child process (one untimed run of
each first), the commands taking turns so that a change of the machine's
load falls on all of them alike.  A run's cost is the child's CPU time,
user + system (``resource.getrusage(RUSAGE_CHILDREN)`` before and after
it), not its wall time: on a shared machine the CPU time is what the
command itself spent.  The commands:

* ``ringfleet --help``: cliff's help loads every command class;
* ``ringfleet node list --help`` and ``ringfleet demo --help``: one
  command's parser;
* ``ringfleet --os-endpoint URL node list``: a command up to its first call
  to the conductor (URL a port of 127.0.0.1 nobody listens on: the call is
  refused at once, one error line, exit 1);
* the prior art, in the same run: ``openstack --help`` (python-openstackclient,
  also cliff), and the floor, ``python -c pass``.

Goal: each ``ringfleet`` command's median <= 0.5 s of CPU (issue 36).  The
goals print PASS/MISS and the exit status is 0 either way (non-zero on bad
options, a missing console script, or a command that did not do what it
should: its number would be meaningless).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import argtypes
from benchmarks.report import Goals, format_goals, log_line, publish

__all__ = ["GOAL_CPU_S", "main", "run"]

#: Each ringfleet command's median CPU seconds, at most (issue 36).
GOAL_CPU_S = 0.5


@dataclass(frozen=True)
class Case:
    """One command line to measure; ``{endpoint}`` is a refused URL."""

    name: str
    script: str
    args: tuple[str, ...]
    status: int
    ours: bool


CASES = (
    Case("ringfleet --help", "ringfleet", ("--help",), 0, True),
    Case("ringfleet node list --help", "ringfleet", ("node", "list", "--help"), 0, True),
    Case("ringfleet demo --help", "ringfleet", ("demo", "--help"), 0, True),
    Case(
        "ringfleet --os-endpoint URL node list",
        "ringfleet",
        ("--os-endpoint", "{endpoint}", "node", "list"),
        1,
        True,
    ),
    Case("openstack --help (prior art)", "openstack", ("--help",), 0, False),
    Case("python -c pass (the floor)", "python", ("-c", "pass"), 0, False),
)


@contextlib.contextmanager
def refused_endpoint() -> Iterator[str]:
    """A URL on 127.0.0.1 whose port is bound but not listening: refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(argv: Sequence[str], env: dict[str, str], cwd: str) -> tuple[float, float, int, str]:
    """(CPU seconds, wall seconds, exit status, stderr) of one child run."""
    cpu, started = _children_cpu(), time.perf_counter()
    done = subprocess.run(
        list(argv),
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
        timeout=120,
    )
    return _children_cpu() - cpu, time.perf_counter() - started, done.returncode, done.stderr


def _check(case: Case, label: str, status: int, stderr: str) -> None:
    """A run that did not do what the case says makes the numbers meaningless."""
    if status != case.status:
        raise RuntimeError(
            f"{case.name} ({label}) exited {status}, not {case.status}: {stderr.strip()[-500:]}"
        )
    if case.status == 1:
        lines = stderr.strip().splitlines()
        if len(lines) != 1 or not lines[0].startswith("ringfleet node list: error: "):
            raise RuntimeError(f"{case.name} ({label}): not one error line: {stderr!r}")


def _scripts(args: argparse.Namespace) -> dict[str, str | None]:
    bindir = Path(sys.executable).parent

    def find(name: str, given: str | None) -> str | None:
        if given is not None:
            return given or None
        path = bindir / name
        return str(path) if path.exists() else None

    return {
        "ringfleet": find("ringfleet", args.ringfleet),
        "openstack": find("openstack", args.openstack),
        "python": sys.executable,
    }


def _code_label(code: Path) -> str:
    try:
        commit = subprocess.run(
            ["git", "-C", str(code), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return str(code)
    return f"{code} ({commit})"


def _environments(args: argparse.Namespace) -> list[tuple[str, dict[str, str]]]:
    """(label, environment) of each code tree measured: this one, then --code's."""
    # The caller's OS_* variables (a cloud, a token) would change what a
    # command does; a pager is never started (stdout is no terminal) anyway.
    base = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    base.pop("PYTHONPATH", None)
    trees = [("this tree", base)]
    if args.code is not None:
        trees.append((_code_label(args.code), {**base, "PYTHONPATH": str(args.code)}))
    return trees


def _summary(cpu: list[float], wall: list[float]) -> dict[str, Any]:
    return {
        "cpu_s": cpu,
        "cpu_best_s": min(cpu),
        "cpu_median_s": statistics.median(cpu),
        "wall_median_s": statistics.median(wall),
    }


def run(args: argparse.Namespace, log: Callable[[str], None] = log_line) -> dict[str, Any]:
    scripts = _scripts(args)
    if scripts["ringfleet"] is None:
        raise RuntimeError(f"no ringfleet console script next to {sys.executable}")
    trees = _environments(args)
    # (case, tree label, environment) in the order one round runs them.
    plan = [
        (case, label, env)
        for case in CASES
        if scripts[case.script] is not None
        for label, env in (trees if case.ours else trees[:1])
    ]
    samples: dict[tuple[str, str], tuple[list[float], list[float]]] = {
        (case.name, label): ([], []) for case, label, _ in plan
    }
    load_before = os.getloadavg()
    with refused_endpoint() as endpoint, tempfile.TemporaryDirectory() as cwd:
        for round_ in range(args.runs + 1):
            for case, label, env in plan:
                argv = [str(scripts[case.script])]
                argv += (arg.format(endpoint=endpoint) for arg in case.args)
                cpu, wall, status, stderr = measure(argv, env, cwd)
                _check(case, label, status, stderr)
                if round_:  # round 0 warms the page cache and the .pyc files
                    samples[case.name, label][0].append(cpu)
                    samples[case.name, label][1].append(wall)
            log(f"round {round_}/{args.runs} done")
    results: dict[str, dict[str, Any]] = {}
    for (name, label), (cpu_runs, wall_runs) in samples.items():
        results.setdefault(name, {})[label] = _summary(cpu_runs, wall_runs)
    goals = Goals()
    for case in CASES:
        if case.ours:
            median = results[case.name][trees[0][0]]["cpu_median_s"]
            goals.add(
                f"{case.name}, median CPU", f"<= {GOAL_CPU_S} s", median, median <= GOAL_CPU_S
            )
    return {
        "config": {"runs": args.runs, "code": str(args.code) if args.code else None},
        "environment": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "load_before": list(load_before),
            "load_after": list(os.getloadavg()),
        },
        "trees": [label for label, _ in trees],
        "commands": [case.name for case in CASES if case.name in results],
        "results": results,
        "goals": goals.items,
    }


def render(report: dict[str, Any]) -> str:
    env = report["environment"]
    trees = report["trees"]
    lines = [
        "ringfleet CLI start-up: CPU seconds of the child (user + system), "
        f"best / median of {report['config']['runs']} runs",
        f"Python {env['python']}, {env['cpus']} CPUs, load average "
        f"{env['load_before'][0]:.2f} before, {env['load_after'][0]:.2f} after",
        "",
        f"{'command':<40}" + "".join(f"  {label[-26:]:>26}" for label in trees),
    ]
    for name in report["commands"]:
        cells = []
        for label in trees:
            found = report["results"][name].get(label)
            cell = f"{found['cpu_best_s']:.3f} / {found['cpu_median_s']:.3f}" if found else ""
            cells.append(f"  {cell:>26}")
        lines.append(f"{name:<40}" + "".join(cells))
    lines += format_goals(report["goals"], lambda goal: f"{goal['value']:.3f} s")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.cli_start_bench",
        description="CPU seconds of ringfleet --help & co, beside openstack --help",
    )
    parser.add_argument(
        "--runs", type=argtypes.at_least(1), default=10, help="timed runs per command (10)"
    )
    parser.add_argument(
        "--code",
        type=Path,
        help="also measure the ringfleet commands with this source tree first on "
        "PYTHONPATH (another commit's worktree), beside this one",
    )
    parser.add_argument(
        "--ringfleet", help="the ringfleet console script (default: next to this Python)"
    )
    parser.add_argument(
        "--openstack",
        help="the openstack console script (default: next to this Python; '' to skip it)",
    )
    parser.add_argument("--json", type=Path, help="also write the report as JSON to this file")
    args = parser.parse_args(argv)
    if args.code is not None and not (args.code / "conductor" / "cli").is_dir():
        parser.error(f"--code {args.code}: no conductor/cli in it")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return publish("cli_start_bench", lambda: run(args), render, args.json)


if __name__ == "__main__":
    sys.exit(main())
