"""``ringfleet demo``: the fleet's membership and ring, embedded, no servers.

What it shows today (the foundation: ring and membership; builds come with
the conductor and agents): N agents join a tooz ``file://`` group in a temp
directory, split the enrolled node ids with the ring computed from each
agent's own view of the group, one agent crashes (stops heartbeating without
leaving) and the survivors take its nodes once its lease expired, then a new
agent joins and only its share moves.  Every step checks the invariants it
can already check — all agents agree on the owner of every node (one view,
one map), no node is left without a live owner, no node moves between two
agents that both stayed — and the command exits non-zero if one broke.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TextIO

from hashring.membership import Membership, MembershipView
from hashring.ring import Ring, moves

__all__ = ["DemoResult", "add_arguments", "run_demo"]


@dataclass
class DemoResult:
    """What the demo measured; ``violations`` empty means every check held."""

    nodes: int
    takeover_seconds: float | None = None
    moved_on_crash: int = 0
    moved_on_join: int = 0
    violations: list[str] = field(default_factory=list)


class _DemoAgent:
    """A membership plus the ring it computes from its own latest view."""

    def __init__(self, url: str, host: str, watch_interval: float) -> None:
        self.host = host
        self.ring = Ring([])
        self._changed = threading.Condition()
        self.membership = Membership(
            url, host, on_change=self._on_change, watch_interval=watch_interval
        )

    def _on_change(self, view: MembershipView) -> None:
        ring = view.ring()
        with self._changed:
            self.ring = ring
            self._changed.notify_all()

    def members(self) -> set[str]:
        return set(self.ring.members)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--agents", type=int, default=3, help="agents at start (3)")
    parser.add_argument("--nodes", type=int, default=300, help="node ids to enroll (300)")
    parser.add_argument(
        "--ttl",
        type=float,
        default=3.0,
        help="membership TTL in seconds: how long a crashed agent stays a member (3)",
    )
    parser.add_argument("--seed", type=int, default=None, help="seed for node ids")


def _table(agents: Sequence[_DemoAgent], node_ids: Sequence[str], out: TextIO) -> None:
    ring = next((a.ring for a in agents if a.membership.can_act()), Ring([]))
    load = ring.load(node_ids) if len(ring) else {}
    width = max(10, *(len(a.host) for a in agents))
    out.write(f"  {'agent':<{width}}  {'state':<9}  {'nodes':>5}\n")
    for agent in agents:
        owned = load.get(agent.host, 0)
        bar = "#" * round(40 * owned / max(1, len(node_ids)))
        out.write(
            f"  {agent.host:<{width}}  {agent.membership.state.value:<9}  {owned:>5}  {bar}\n"
        )


def _wait_views(agents: Sequence[_DemoAgent], expected: set[str], timeout: float) -> float | None:
    """Wait until every agent's view is ``expected``; seconds taken, or None."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if all(a.members() == expected for a in agents):
            return time.monotonic() - start
        time.sleep(0.02)
    return None


def _check_agreement(
    agents: Sequence[_DemoAgent], node_ids: Sequence[str], result: DemoResult, step: str
) -> None:
    """One view, one map: every live agent computes the same owners."""
    maps = {a.host: a.ring.assign(node_ids) for a in agents}
    reference = next(iter(maps.values()))
    for host, owners in maps.items():
        if owners != reference:
            result.violations.append(f"{step}: {host} computes a different map")
    live = {a.host for a in agents}
    orphans = sum(owner not in live for owner in reference)
    if orphans:
        result.violations.append(f"{step}: {orphans} nodes owned by no live agent")


def run_demo(args: argparse.Namespace, out: TextIO = sys.stdout) -> DemoResult:
    """Run the demo; print as it goes; return what was measured."""
    if args.agents < 2:
        raise ValueError("--agents must be at least 2 (one of them crashes)")
    if args.nodes < 1:
        raise ValueError("--nodes must be at least 1")
    if args.ttl <= 0:
        raise ValueError("--ttl must be > 0")
    rnd = random.Random(args.seed)
    node_ids = [f"node-{rnd.getrandbits(64):016x}" for _ in range(args.nodes)]
    result = DemoResult(nodes=len(node_ids))
    directory = tempfile.mkdtemp(prefix="ringfleet-demo-")
    fleet = _Fleet(
        url=f"file://{directory}?timeout={args.ttl:g}",
        watch_interval=min(1.0, max(0.05, args.ttl / 10)),
        ttl=args.ttl,
        node_ids=node_ids,
        result=result,
        out=out,
    )
    try:
        out.write(f"Fleet of {args.agents} agents, {len(node_ids)} nodes, group in {fleet.url}\n")
        # Each step returns False when it could not complete: the rest is moot.
        if fleet.start(args.agents) and fleet.crash_one():
            fleet.join_one(f"agent-{args.agents + 1}")
    finally:
        fleet.stop()
        shutil.rmtree(directory, ignore_errors=True)
    _summary(result, args.ttl, out)
    return result


@dataclass
class _Fleet:
    url: str
    watch_interval: float
    ttl: float
    node_ids: list[str]
    result: DemoResult
    out: TextIO
    agents: list[_DemoAgent] = field(default_factory=list)

    def _hosts(self) -> set[str]:
        return {a.host for a in self.agents}

    def start(self, count: int) -> bool:
        self.agents = [
            _DemoAgent(self.url, f"agent-{i + 1}", self.watch_interval) for i in range(count)
        ]
        for agent in self.agents:
            agent.membership.start()
        if _wait_views(self.agents, self._hosts(), timeout=10 + self.ttl) is None:
            self.result.violations.append("start: agents did not all see each other")
            return False
        _check_agreement(self.agents, self.node_ids, self.result, "start")
        self.out.write("\nAll agents joined:\n")
        _table(self.agents, self.node_ids, self.out)
        return True

    def crash_one(self) -> bool:
        victim = self.agents.pop()
        before = self.agents[0].ring
        self.out.write(f"\nCrash of {victim.host} (no goodbye: its lease must expire)...\n")
        victim.membership.stop(leave=False)
        taken = _wait_views(self.agents, self._hosts(), timeout=self.ttl * 2 + 5)
        self.result.takeover_seconds = taken
        if taken is None:
            self.result.violations.append("crash: survivors never dropped the crashed agent")
            return False
        moved = moves(before, self.agents[0].ring, self.node_ids)
        self.result.moved_on_crash = len(moved)
        strays = [m for m in moved if m.old_owner != victim.host]
        if strays:
            self.result.violations.append(f"crash: {len(strays)} nodes moved between survivors")
        _check_agreement(self.agents, self.node_ids, self.result, "crash")
        self.out.write(
            f"Survivors took over {len(moved)} nodes {taken:.1f} s after the crash "
            f"(TTL {self.ttl:g} s); none moved between survivors.\n"
        )
        _table(self.agents, self.node_ids, self.out)
        return True

    def join_one(self, host: str) -> bool:
        before = self.agents[0].ring
        newcomer = _DemoAgent(self.url, host, self.watch_interval)
        self.out.write(f"\n{host} joins...\n")
        self.agents.append(newcomer)
        newcomer.membership.start()
        if _wait_views(self.agents, self._hosts(), timeout=10 + self.ttl) is None:
            self.result.violations.append("join: the newcomer was not seen by everyone")
            return False
        joined = moves(before, newcomer.ring, self.node_ids)
        self.result.moved_on_join = len(joined)
        strays = [m for m in joined if m.new_owner != host]
        if strays:
            self.result.violations.append(f"join: {len(strays)} nodes moved between others")
        _check_agreement(self.agents, self.node_ids, self.result, "join")
        self.out.write(f"Only its share moved: {len(joined)} nodes, all to {host}.\n")
        _table(self.agents, self.node_ids, self.out)
        return True

    def stop(self) -> None:
        for agent in self.agents:
            agent.membership.stop()


def _summary(result: DemoResult, ttl: float, out: TextIO) -> None:
    taken = f"{result.takeover_seconds:.1f} s" if result.takeover_seconds is not None else "never"
    out.write(
        f"\nSummary: {result.nodes} nodes; crash: {result.moved_on_crash} moved, taken over "
        f"in {taken} (TTL {ttl:g} s); join: {result.moved_on_join} moved.\n"
    )
    if result.violations:
        out.write("INVARIANTS VIOLATED:\n")
        for violation in result.violations:
            out.write(f"  - {violation}\n")
    else:
        out.write("All invariants held.\n")
