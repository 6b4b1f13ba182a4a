# SPDX-License-Identifier: Apache-2.0
"""The scale benchmark's entry point: ``python -m benchmarks.scale_bench``.

The benchmark is the package :mod:`benchmarks.scale` (its docstring says
what each step measures); this module keeps the command and the names
other benchmarks and the tests import.
"""

from __future__ import annotations

import sys

from benchmarks.scale.cli import STEPS, main, parse_args
from benchmarks.scale.goals import bytes_per_row, join_share_mb
from benchmarks.scale.observe import ConvergenceWatch, converged, read_nodes, ring_owners
from benchmarks.scale.procs import spawn
from benchmarks.scale.report import format_report
from benchmarks.scale.run import Run
from benchmarks.scale.runner import make_fleet, run, steps

__all__ = [
    "STEPS",
    "ConvergenceWatch",
    "Run",
    "bytes_per_row",
    "converged",
    "format_report",
    "join_share_mb",
    "main",
    "make_fleet",
    "parse_args",
    "read_nodes",
    "ring_owners",
    "run",
    "spawn",
    "steps",
]

if __name__ == "__main__":
    sys.exit(main())
