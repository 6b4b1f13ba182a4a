# SPDX-License-Identifier: Apache-2.0
"""The invariants the demo verifies, as pure functions of what it read back.

A :class:`FleetState` is one reading of the fleet: the nodes and instances
as the conductor records them (over its RPC API) and the claims every live
agent holds in memory.  Each ``check_*`` function returns human-readable
violations naming the node, instance or agent, empty when the invariant
holds, so a test can feed it a fabricated state and see it fail.  The
allocation check is the conductor's own (``fleet_check``): it reads the
reply, it does not check a second time.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compute_agent.drivers.simulated.action_log import check_fencing, read_log
from conductor.common.exception import ActionLogError
from conductor.common.objects import VmState

__all__ = [
    "FleetState",
    "InstanceRecord",
    "NodeRecord",
    "check_allocations",
    "check_builds",
    "check_fencing_log",
    "check_moves",
    "check_single_owner",
]

#: Instance states a build may end in.
FINAL_STATES = frozenset({VmState.ACTIVE.value, VmState.ERROR.value})


@dataclass(frozen=True)
class NodeRecord:
    """A node as the conductor records it."""

    uuid: str
    owner: str | None
    epoch: int
    instance_uuid: str | None


@dataclass(frozen=True)
class InstanceRecord:
    """An instance as the conductor records it."""

    uuid: str
    vm_state: str
    node_uuid: str | None
    host: str | None
    fault: str | None


@dataclass(frozen=True)
class FleetState:
    """One reading of the fleet.

    :ivar nodes: by uuid.
    :ivar instances: by uuid (deleted ones left out).
    :ivar held: per live agent, the claims it holds (node uuid -> epoch).
    """

    nodes: Mapping[str, NodeRecord]
    instances: Mapping[str, InstanceRecord]
    held: Mapping[str, Mapping[str, int]]

    @property
    def live(self) -> frozenset[str]:
        return frozenset(self.held)

    def owners(self) -> dict[str, str | None]:
        return {uuid: node.owner for uuid, node in self.nodes.items()}

    def owned_by(self, host: str) -> set[str]:
        return {uuid for uuid, node in self.nodes.items() if node.owner == host}

    def pinned(self) -> set[str]:
        return {uuid for uuid, node in self.nodes.items() if node.instance_uuid is not None}


def _listed(items: Iterable[str], limit: int = 5) -> str:
    items = sorted(items)
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


def check_single_owner(state: FleetState) -> list[str]:
    """Every node has exactly one live owner, and that agent knows it.

    The conductor's record must name a live agent, that agent must hold the
    node at the recorded epoch, and no other live agent may hold it at all.
    """
    violations: list[str] = []
    holders: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for host, claims in state.held.items():
        for node_uuid, epoch in claims.items():
            holders[node_uuid].append((host, epoch))
    for uuid, node in sorted(state.nodes.items()):
        held_by = sorted(holders.pop(uuid, []))
        if node.owner is None:
            violations.append(f"node {uuid} has no owner")
        elif node.owner not in state.live:
            violations.append(f"node {uuid} is owned by {node.owner}, which is not a live agent")
        elif held_by != [(node.owner, node.epoch)]:
            seen = ", ".join(f"{h} at epoch {e}" for h, e in held_by) or "no agent"
            violations.append(
                f"node {uuid} is recorded as {node.owner}'s at epoch {node.epoch} "
                f"but held by {seen}"
            )
    for uuid, held_by in sorted(holders.items()):
        hosts = ", ".join(h for h, _ in held_by)
        violations.append(f"node {uuid} is held by {hosts} but unknown to the conductor")
    return violations


def check_allocations(fleet_check: Mapping[str, Any]) -> list[str]:
    """Nodes and instances agree: one instance per node, both sides pointing at
    each other, the instance's host the node's owner.

    Checked by the conductor itself (``fleet_check``, the same check as
    ``ringfleet fleet check`` and the chaos suite's), not a second time here:
    *fleet_check* is its reply; its allocation problems are the violations.
    """
    return [
        f"allocation: {problem.get('message')}"
        for problem in fleet_check.get("problems", [])
        if problem.get("kind") == "double-claimed"
    ]


def check_builds(state: FleetState, instance_uuids: Iterable[str]) -> list[str]:
    """Every build requested ended ACTIVE, or ERROR with a reason."""
    violations: list[str] = []
    for uuid in sorted(instance_uuids):
        instance = state.instances.get(uuid)
        if instance is None:
            violations.append(f"instance {uuid} was requested but is not stored")
        elif instance.vm_state not in FINAL_STATES:
            violations.append(f"instance {uuid} is still {instance.vm_state}")
        elif instance.vm_state == VmState.ERROR and not instance.fault:
            violations.append(f"instance {uuid} is in ERROR without a reason")
    return violations


def check_moves(
    before: Mapping[str, str | None],
    after: Mapping[str, str | None],
    *,
    stayed: Iterable[str],
    step: str,
) -> list[str]:
    """No node moved between two agents that both stayed (design invariant 4)."""
    kept = set(stayed)
    strays = sorted(
        uuid
        for uuid, old in before.items()
        if old in kept and after.get(uuid) in kept and after.get(uuid) != old
    )
    if not strays:
        return []
    return [f"{step}: {len(strays)} nodes moved between agents that both stayed: {_listed(strays)}"]


def check_fencing_log(path: Path) -> list[str]:
    """The simulated driver's action log shows no two owners acting on one node."""
    if not path.exists():
        return []  # no action at all: nothing could overlap
    try:
        return check_fencing(read_log(path))
    except ActionLogError as exc:
        return [f"action log unreadable: {exc}"]
