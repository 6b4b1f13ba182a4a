# SPDX-License-Identifier: Apache-2.0
"""The demo's story, step by step, driven through the conductor's RPC API.

Start a conductor and N agents; enroll nodes of a few resource classes (and
a flavor per class); build instances; crash the agent with the most pins and
watch its unpinned nodes taken over after the TTL and its pinned ones
re-homed after ``rehome_grace`` (instances still ACTIVE, their host
updated); start a new agent and watch only its share move.  The fleet table
is printed around every step, the invariants of :mod:`.checks` are verified
along the way and at the end, and :func:`run_demo` returns what it measured.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
import uuid as uuidlib
from collections.abc import Callable
from typing import TextIO

from compute_agent.drivers.simulated.node_store import SqliteNodeStore
from conductor.common.objects import VmState
from conductor.rpcapi import ConductorAPI, pages
from conductor.validation import MAX_COUNT
from fleet_demo.checks import (
    FINAL_STATES,
    FleetState,
    InstanceRecord,
    NodeRecord,
    check_allocations,
    check_builds,
    check_fencing_log,
    check_moves,
    check_single_owner,
)
from fleet_demo.fleet import EmbeddedFleet, FleetError
from fleet_demo.options import DemoOptions
from fleet_demo.report import (
    AgentRow,
    DemoResult,
    ProgressBar,
    print_summary,
    print_table,
)
from hashring.ring import Ring

__all__ = ["RESOURCE_CLASSES", "DemoOptions", "run_demo"]

LOG = logging.getLogger(__name__)

#: (resource class, flavor) pairs the nodes are spread over, round robin.
RESOURCE_CLASSES = (
    ("baremetal-small", "bm.small"),
    ("baremetal-large", "bm.large"),
    ("baremetal-gpu", "bm.gpu"),
)
#: The image every demo flavor deploys by default (the simulator fetches nothing).
DEMO_IMAGE = {
    "source": "http://images.demo.test/ubuntu-24.04.qcow2",
    "os_hash_algo": "sha256",
    "os_hash_value": "5f1e0d8cb1a2f3e4d5c6b7a8998877665544332211ffeeddccbbaa0099887766",
    "disk_format": "qcow2",
}
#: The SSH key every demo build puts in its config drive.
DEMO_KEY = ("demo", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDemoKeyOfRingfleet demo@ringfleet")
#: Page size of the listing calls (the conductor's largest).
_PAGE = 1000
#: Seconds between two readings while waiting for the fleet.
_POLL = 0.1
#: Seconds of slack on top of what a wait should take (a busy 2-core box),
#: plus this much per node (claims and listings grow with the fleet).
_SLACK = 20.0
_SLACK_PER_NODE = 0.005


class _StepFailed(Exception):
    """A step could not complete; the rest of the story is moot."""


def run_demo(options: DemoOptions, out: TextIO) -> DemoResult:
    """Run the whole demo, printing as it goes; return what was measured.

    :raises conductor.common.extras.MissingExtra: for ``backend="redis"``
        without the ``demo-redis`` extra, before anything starts.
    """
    result = DemoResult(
        agents=options.agents,
        nodes=options.nodes,
        instances=options.instances,
        ttl=options.ttl,
        rehome_grace=options.rehome_grace,
    )
    started = time.monotonic()
    try:
        with EmbeddedFleet(options) as fleet:
            _Scenario(options, fleet, result, out).run()
    except FleetError as exc:
        result.violations.append(f"embedded fleet: {exc}")
    print_summary(result, out)
    LOG.info(
        "Demo done in %.1f s, %d violations", time.monotonic() - started, len(result.violations)
    )
    return result


class _Scenario:
    def __init__(
        self, options: DemoOptions, fleet: EmbeddedFleet, result: DemoResult, out: TextIO
    ) -> None:
        self.options = options
        self.fleet = fleet
        self.result = result
        self.out = out
        self.random = random.Random(options.seed)
        self.api: ConductorAPI = fleet.client()
        self.instance_uuids: list[str] = []
        self.started = time.monotonic()
        self.slack = _SLACK + _SLACK_PER_NODE * options.nodes
        # The owners before the join, the agents that stayed and the
        # newcomer's share: the final reading is checked against them too.
        self.join_baseline: tuple[dict[str, str | None], set[str], set[str]] | None = None

    def say(self, text: str) -> None:
        self.out.write(f"[{time.monotonic() - self.started:5.1f} s] {text}\n")
        self.out.flush()

    def run(self) -> None:
        try:
            self.start()
            self.enroll()
            self.build()
            self.crash()
            self.join()
        except _StepFailed as exc:
            self.result.violations.append(str(exc))
            self.say(f"Stopped: {exc}")
        except Exception as exc:  # an RPC or driver error: report it, stop cleanly
            LOG.exception("Demo aborted")
            self.result.violations.append(f"demo aborted: {type(exc).__name__}: {exc}")
            return
        self.final_checks()

    # -- reading the fleet ---------------------------------------------------------

    def owned_by(self, host: str) -> set[str]:
        """The nodes ``host`` owns: one filtered listing, not the whole fleet."""
        listing = pages(
            lambda n, m: self.api.list_nodes(filters={"owner": host}, limit=n, marker=m),
            page_size=_PAGE,
        )
        return {n["uuid"] for n in listing}

    def read_nodes(self) -> dict[str, NodeRecord]:
        return {
            n["uuid"]: NodeRecord(n["uuid"], n["owner"], n["owner_epoch"], n["instance_uuid"])
            for n in pages(lambda n, m: self.api.list_nodes(limit=n, marker=m), page_size=_PAGE)
        }

    def read_instances(self) -> dict[str, InstanceRecord]:
        return {
            i["uuid"]: InstanceRecord(
                i["uuid"], i["vm_state"], i["node_uuid"], i["host"], i["fault"]
            )
            for i in pages(lambda n, m: self.api.list_instances(limit=n, marker=m), page_size=_PAGE)
            if i["vm_state"] != VmState.DELETED
        }

    def read_state(self) -> FleetState:
        held = {
            host: agent.ownership.held()
            for host, agent in self.fleet.live_agents().items()
            if agent.ownership is not None
        }
        return FleetState(self.read_nodes(), self.read_instances(), held)

    def table(self, title: str) -> None:
        status = self.api.fleet_status()
        seen = {a["host"]: a for a in status["agents"]}
        rows = []
        for host in self.fleet.agents():
            entry = seen.get(host)
            if entry is None:
                state = "gone" if host in self.fleet.crashed() else "joining"
                rows.append(AgentRow(host, state, 0, 0))
            else:
                rows.append(AgentRow(host, entry["state"], entry["owned"], entry["pinned"]))
        if status["unowned"]:
            rows.append(AgentRow("(no owner)", "-", status["unowned"], 0))
        print_table(title, rows, status["nodes"], self.out)

    def wait(self, what: str, done: Callable[[], bool], timeout: float) -> float:
        """Seconds until ``done()``; :class:`_StepFailed` naming ``what`` on timeout."""
        start = time.monotonic()
        while not done():
            if time.monotonic() - start > timeout:
                raise _StepFailed(f"not within {timeout:.0f} s: {what}")
            time.sleep(_POLL)
        return time.monotonic() - start

    @property
    def _membership(self) -> str:
        if self.options.backend == "redis":
            return "tooz redis:// on an in-process fakeredis"
        return "tooz file://"

    # -- the steps -----------------------------------------------------------------

    def start(self) -> None:
        options = self.options
        self.say(
            f"Starting a conductor and {options.agents} compute agents in this process "
            f"(SQLite, kombu+memory, {self._membership} in {self.fleet.workdir})"
        )
        self.fleet.start_conductor()
        for i in range(options.agents):
            self.fleet.start_agent(f"agent-{i + 1}")
        live = set(self.fleet.live_agents())
        self.wait(
            "the conductor seeing every agent",
            lambda: live <= {a["host"] for a in self.api.fleet_status()["agents"]},
            timeout=options.ttl + self.slack,
        )
        self.table("Fleet started, no nodes yet:")

    def _uuid(self) -> str:
        return str(uuidlib.UUID(int=self.random.getrandbits(128), version=4))

    def enroll(self) -> None:
        options = self.options
        for resource_class, flavor in RESOURCE_CLASSES:
            self.api.create_flavor(
                {"name": flavor, "resource_class": resource_class, "default_image": DEMO_IMAGE}
            )
        specs = [
            {
                "name": f"node-{i + 1:04d}",
                "uuid": self._uuid(),
                "resource_class": RESOURCE_CLASSES[i % len(RESOURCE_CLASSES)][0],
            }
            for i in range(options.nodes)
        ]
        self.api.import_nodes(specs)
        classes = ", ".join(rc for rc, _ in RESOURCE_CLASSES)
        self.say(
            f"Enrolled {options.nodes} nodes ({classes}) and a flavor per class, "
            f"each with the default image {DEMO_IMAGE['source']}"
        )
        live = set(self.fleet.live_agents())
        seconds = self.wait(
            "every node claimed by an agent",
            lambda: all(n.owner in live for n in self.read_nodes().values()),
            timeout=self.options.ttl + self.slack,
        )
        self.say(f"Every node claimed by its ring owner in {seconds:.1f} s")
        self.table("Nodes split by the ring:")

    def build(self) -> None:
        options = self.options
        classes = len(RESOURCE_CLASSES)
        self.say(
            f"Building {options.instances} instances through build_instances, "
            f"with the SSH key {DEMO_KEY[0]!r} in their config drive"
        )
        for index, (_rc, flavor) in enumerate(RESOURCE_CLASSES):
            # Round robin like the nodes: no class gets more builds than nodes.
            count = options.instances // classes + (index < options.instances % classes)
            for start in range(0, count, MAX_COUNT):
                uuids = [self._uuid() for _ in range(min(MAX_COUNT, count - start))]
                self.instance_uuids.extend(uuids)
                self.api.build_instances(
                    {
                        "flavor": flavor,
                        "count": len(uuids),
                        "name": f"demo-{flavor}",
                        "instance_uuids": uuids,
                        "meta_data": {"public_keys": dict([DEMO_KEY])},
                    }
                )
        bar = ProgressBar(len(self.instance_uuids), self.out)
        wanted = set(self.instance_uuids)

        def finished() -> bool:
            states = [i.vm_state for u, i in self.read_instances().items() if u in wanted]
            active = states.count(VmState.ACTIVE)
            error = states.count(VmState.ERROR)
            bar.update(active + error, f"ACTIVE {active}  ERROR {error}")
            self.result.active, self.result.error = active, error
            return active + error == len(wanted)

        # Generous: every deploy one after the other, and a retry each.
        timeout = self.slack + 2 * 4 * options.step_duration * options.instances
        try:
            self.wait("every build ACTIVE or ERROR", finished, timeout)
        finally:
            bar.finish()
        self.table(f"Built: {self.result.active} ACTIVE, {self.result.error} ERROR:")
        self.check_machines()

    def check_machines(self) -> None:
        """What reached the simulated machines of the active instances: the
        flavor's image and the build's SSH key, read from the machines."""
        placed = {
            i.node_uuid: uuid
            for uuid, i in self.read_instances().items()
            if i.vm_state == VmState.ACTIVE and i.node_uuid is not None
        }
        store = SqliteNodeStore(self.fleet.node_store)
        try:
            machines = store.get_many(placed)
        finally:
            store.close()
        name, key = DEMO_KEY
        good = [
            node
            for node, machine in machines.items()
            if machine.instance_uuid == placed[node]
            and (machine.image or {}).get("source") == DEMO_IMAGE["source"]
            and ((machine.config_drive or {}).get("meta_data") or {}).get("public_keys")
            == {name: key}
        ]
        self.result.provisioned = len(good)
        self.say(
            f"Image {DEMO_IMAGE['source'].rsplit('/', 1)[-1]} and SSH key {name!r} "
            f"reached {len(good)} of {len(placed)} active machines"
        )
        if len(good) != len(placed):
            missing = sorted(set(placed) - set(good))
            self.result.violations.append(
                f"machines: {len(missing)} active nodes lack the image or the SSH key: "
                f"{', '.join(missing[:5])}"
            )

    def crash(self) -> None:
        before = self.read_state()
        pinned = before.pinned()
        live = sorted(self.fleet.live_agents())
        # The agent with the most pins: the most to re-home.
        victim = max(live, key=lambda h: (len(before.owned_by(h) & pinned), h))
        survivors = set(live) - {victim}
        own = before.owned_by(victim)
        pins, unpinned = own & pinned, own - pinned
        self.say(
            f"Crash of {victim} ({len(unpinned)} unpinned + {len(pins)} pinned nodes): "
            "no leave, no RPC, its membership left to expire"
        )
        self.result.crashed = victim
        # At a moment its membership is CONNECTED (its last heartbeat at most
        # half a TTL ago): the takeover then shows the lease's expiry, not a
        # heartbeat that a busy machine had delayed already.
        service = self.fleet.agents()[victim]
        self.wait(f"{victim} connected", service.membership.can_act, self.options.ttl + self.slack)
        crashed_at = time.monotonic()
        self.fleet.crash_agent(victim)

        def taken_over() -> bool:
            nodes = self.read_nodes()
            return all(nodes[n].owner in survivors for n in unpinned)

        timeout = self.options.ttl + self.slack
        self.wait(f"{victim}'s unpinned nodes taken over", taken_over, timeout)
        self.result.takeover_seconds = time.monotonic() - crashed_at
        self.say(
            f"Survivors took over its {len(unpinned)} unpinned nodes "
            f"{self.result.takeover_seconds:.1f} s after the crash (TTL {self.options.ttl:g} s); "
            f"its {len(pins)} pinned nodes wait rehome_grace ({self.options.rehome_grace:g} s)"
        )
        self.table("After the takeover:")

        def rehomed() -> bool:
            state = FleetState(self.read_nodes(), self.read_instances(), {})
            for node_uuid in pins:
                node = state.nodes[node_uuid]
                instance = state.instances.get(node.instance_uuid or "")
                if node.owner not in survivors or instance is None:
                    return False
                if instance.host != node.owner or instance.vm_state != VmState.ACTIVE:
                    return False
            return True

        self.wait(
            f"{victim}'s pinned nodes re-homed with their instances ACTIVE",
            rehomed,
            self.options.ttl + self.options.rehome_grace + self.slack,
        )
        self.result.rehome_seconds = time.monotonic() - crashed_at
        after = self.read_state()
        old, new = before.owners(), after.owners()
        moved = {n for n in old if new.get(n) != old[n]}
        self.result.moved_on_crash = len(moved)
        self.result.pins_rehomed = len(moved & pins)
        self.result.violations.extend(check_moves(old, new, stayed=survivors, step="crash"))
        strays = moved - own
        if strays:
            self.result.violations.append(
                f"crash: {len(strays)} nodes moved that {victim} did not own"
            )
        self.say(
            f"Its {len(pins)} pinned nodes re-homed {self.result.rehome_seconds:.1f} s after "
            "the crash; their instances are still ACTIVE, with the new host"
        )
        self.table("After re-homing:")

    def join(self) -> None:
        before = self.read_state()
        stayed = set(self.fleet.live_agents())
        newcomer = f"agent-{len(self.fleet.agents()) + 1}"
        ring = Ring(sorted(stayed | {newcomer}))
        pinned = before.pinned()
        expected = {n for n in before.nodes if n not in pinned and ring.owner(n) == newcomer}
        self.result.joined = newcomer
        self.result.expected_on_join = len(expected)
        self.say(f"{newcomer} joins; its ring share without pinned nodes: {len(expected)}")
        self.fleet.start_agent(newcomer)
        seconds = self.wait(
            f"{newcomer} owning its share",
            lambda: self.owned_by(newcomer) >= expected,
            self.options.ttl + self.slack,
        )
        after = self.read_state()
        old, new = before.owners(), after.owners()
        moved = {n for n in old if new.get(n) != old[n]}
        self.result.moved_on_join = len(moved)
        self.result.moved_to_newcomer = len({n for n in moved if new[n] == newcomer})
        self.join_baseline = (old, stayed, expected)
        self.say(
            f"{self.result.moved_to_newcomer} nodes moved to {newcomer} in {seconds:.1f} s, "
            f"{len(moved) - self.result.moved_to_newcomer} elsewhere"
        )
        self.table("After the join:")

    def final_checks(self) -> None:
        """Wait for the fleet to settle, then check every invariant once."""
        violations: list[str] = []

        def settled() -> bool:
            nonlocal violations
            violations = check_single_owner(self.read_state())
            return not violations

        # Not settled in time: reported below, with the last reading's details.
        with contextlib.suppress(_StepFailed):
            self.wait("one live owner per node", settled, timeout=5.0)
        state = self.read_state()
        self.result.violations.extend(violations)
        if self.join_baseline is not None:
            # On the settled state: a late move would escape the join step.
            old, stayed, expected = self.join_baseline
            new = state.owners()
            self.result.violations.extend(check_moves(old, new, stayed=stayed, step="join"))
            beyond = sorted(n for n in old if new.get(n) != old[n] and n not in expected)
            if beyond:
                self.result.violations.append(
                    f"join: {len(beyond)} nodes moved that are not the newcomer's unpinned "
                    f"ring share: {', '.join(beyond[:5])}"
                )
        self.result.violations.extend(check_allocations(self.api.fleet_check()))
        self.result.violations.extend(check_builds(state, self.instance_uuids))
        self.result.violations.extend(check_fencing_log(self.fleet.action_log))
        finished = [i for i in state.instances.values() if i.vm_state in FINAL_STATES]
        self.say(
            f"Checked: {len(state.nodes)} nodes, {len(finished)} instances, "
            f"the action log of {len(self.fleet.agents())} agents"
        )
