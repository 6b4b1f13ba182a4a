# SPDX-License-Identifier: Apache-2.0
"""What the demo prints: the fleet table, the build progress bar, the summary.

Everything writes to the stream it is given (the cliff app's stdout), so the
tests read the same text an operator sees.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TextIO

__all__ = ["AgentRow", "DemoResult", "ProgressBar", "print_summary", "print_table"]


@dataclass(frozen=True)
class AgentRow:
    """One line of the fleet table."""

    host: str
    state: str
    owned: int
    pinned: int


@dataclass
class DemoResult:
    """What the demo measured; ``violations`` empty means every check held.

    :ivar takeover_seconds: from the crash until every unpinned node of the
        crashed agent had a live owner.
    :ivar rehome_seconds: from the crash until its pinned nodes were
        re-homed with their instances' host updated.
    """

    agents: int
    nodes: int
    instances: int
    ttl: float
    rehome_grace: float
    active: int = 0
    error: int = 0
    crashed: str | None = None
    joined: str | None = None
    moved_on_crash: int = 0
    pins_rehomed: int = 0
    moved_on_join: int = 0
    moved_to_newcomer: int = 0
    expected_on_join: int = 0
    takeover_seconds: float | None = None
    rehome_seconds: float | None = None
    #: active instances whose simulated machine got the demo's image and SSH key
    provisioned: int = 0
    violations: list[str] = field(default_factory=list)


def print_table(title: str, rows: Sequence[AgentRow], total: int, out: TextIO) -> None:
    """The fleet, one agent a line, with a bar of its share of the nodes."""
    width = max(8, *(len(r.host) for r in rows)) if rows else 8
    out.write(f"\n{title}\n")
    out.write(f"  {'host':<{width}}  {'state':<7}  {'owned':>5}  {'pinned':>6}\n")
    for row in rows:
        bar = "#" * round(30 * row.owned / max(1, total))
        out.write(
            f"  {row.host:<{width}}  {row.state:<7}  {row.owned:>5}  {row.pinned:>6}  {bar}\n"
        )
    out.flush()


class ProgressBar:
    """Build progress: a bar redrawn in place on a terminal, plain lines otherwise.

    Off a terminal (a log, a pipe, a test) a line is written each time
    another tenth of the work is done, so the output stays short and stable.
    """

    def __init__(
        self,
        total: int,
        out: TextIO,
        *,
        label: str = "builds",
        width: int = 30,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = max(1, total)
        self.out = out
        self.label = label
        self.width = width
        self._clock = clock
        self._start = clock()
        self._tty = bool(getattr(out, "isatty", lambda: False)())
        self._last_tenth = -1
        self._drawn = False

    def update(self, done: int, detail: str = "") -> None:
        fraction = min(1.0, done / self.total)
        text = f"{self.label} {done:>{len(str(self.total))}}/{self.total}"
        if detail:
            text += f"  {detail}"
        text += f"  {self._clock() - self._start:5.1f} s"
        if self._tty:
            filled = round(self.width * fraction)
            bar = "#" * filled + "." * (self.width - filled)
            self.out.write(f"\r  [{bar}] {text}\x1b[K")
            self._drawn = True
            self.out.flush()
            return
        tenth = int(fraction * 10)
        if tenth > self._last_tenth:
            self._last_tenth = tenth
            self.out.write(f"  {round(fraction * 100):>3}%  {text}\n")
            self.out.flush()

    def finish(self) -> None:
        if self._tty and self._drawn:
            self.out.write("\n")
            self.out.flush()


def _seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f} s"


def print_summary(result: DemoResult, out: TextIO) -> None:
    """The closing summary, then every violation (or that all checks held)."""
    out.write(
        f"\nSummary: {result.agents} agents, {result.nodes} nodes, "
        f"TTL {result.ttl:g} s, rehome_grace {result.rehome_grace:g} s\n"
        f"  builds:  {result.active} ACTIVE, {result.error} ERROR "
        f"of {result.instances}\n"
    )
    if result.crashed is not None:
        out.write(
            f"  crash of {result.crashed}:  {result.moved_on_crash} nodes moved "
            f"({result.pins_rehomed} of them pinned), "
            f"taken over in {_seconds(result.takeover_seconds)}, "
            f"pins re-homed in {_seconds(result.rehome_seconds)}\n"
        )
    if result.joined is not None:
        out.write(
            f"  join of {result.joined}:  {result.moved_on_join} nodes moved, "
            f"{result.moved_to_newcomer} of them to it "
            f"(its ring share without the pinned ones: {result.expected_on_join})\n"
        )
    if result.violations:
        out.write(f"INVARIANTS VIOLATED ({len(result.violations)}):\n")
        for violation in result.violations[:50]:
            out.write(f"  - {violation}\n")
        if len(result.violations) > 50:
            out.write(f"  ... and {len(result.violations) - 50} more\n")
    else:
        out.write("All invariants held.\n")
    out.flush()
