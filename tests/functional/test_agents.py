# SPDX-License-Identifier: Apache-2.0
"""Compute agents as processes: partition, join, crash, pause, restart, drain.

Real etcd, RabbitMQ and PostgreSQL; one conductor; agents are separate
processes running the simulated driver, whose shared action log must never
show two agents acting on one node with overlapping ownership.
"""

from __future__ import annotations

import contextlib
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conductor.common.exception import InstanceStateConflict
from hashring.ring import Ring
from tests.dbutil import migrated
from tests.functional.fleet_harness import REHOME_GRACE, TTL, Fleet
from tests.harness import ServiceProcess, wait_for

NODES = 60


@pytest.fixture
def fleet(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    pg_url: str,
    transport_url: str,
    etcd_url: str,
) -> Iterator[Fleet]:
    migrated(pg_url).dispose()
    marker = request.node.get_closest_marker("step_duration")
    restart = request.node.get_closest_marker("restart_grace")
    f = Fleet(
        tmp_path,
        db_url=pg_url,
        transport_url=transport_url,
        etcd_url=etcd_url,
        step_duration=marker.args[0] if marker else 0.05,
        restart_grace=restart.args[0] if restart else 60.0,
    )
    try:
        f.conductor()
        f.api.import_nodes(
            [{"name": f"node-{i:03d}", "resource_class": "baremetal"} for i in range(NODES)]
        )
        f.api.create_flavor({"name": "small", "resource_class": "baremetal"})
        yield f
        assert f.fencing_violations() == []
    finally:
        f.close()


def _partitioned(fleet: Fleet, hosts: set[str]) -> dict[str | None, set[str]] | None:
    """The ownership map once every node is owned by exactly the ring's choice."""
    owned = fleet.owned_by()
    if set(owned) - hosts or None in owned:
        return None
    ring = Ring(sorted(hosts))
    owners = fleet.owners()
    if any(ring.owner(n) != o and inst is None for n, (o, _e, inst) in owners.items()):
        return None
    return owned


def _build(fleet: Fleet, count: int) -> list[str]:
    reply = fleet.api.build_instances({"flavor": "small", "count": count})
    uuids = [i["uuid"] for i in reply]
    wait_for(
        lambda: all(fleet.api.show_instance(u)["vm_state"] == "active" for u in uuids),
        60,
        f"{count} instances ACTIVE",
    )
    return uuids


def test_agents_partition_join_and_crash(fleet: Fleet) -> None:
    """Through a join and a kill -9, with agent-2 as in a rolling upgrade: pinned
    below API 1.15, it reads the whole fleet; the others read their share."""
    fleet.agent("agent-1")
    fleet.agent("agent-2", extra="[upgrade_levels]\nconductor = 1.14\n")
    fleet.agent("agent-3")
    three = {"agent-1", "agent-2", "agent-3"}
    owned = wait_for(lambda: _partitioned(fleet, three), 30, "3 agents partition the nodes")
    assert sum(len(v) for v in owned.values()) == NODES  # disjoint, covering
    assert "this agent reads the whole fleet" in fleet.procs["agent-2"].log()
    assert f"read {NODES} inventory rows (whole fleet, all)" in fleet.procs["agent-2"].log()
    # agent-3 joined two peers: its first read is about a third of the fleet.
    # (Said just after the call that claimed what it read: the partition may
    # be seen in the record a few milliseconds before the line is written.)
    shared = wait_for(
        lambda: re.findall(
            r"read (\d+) inventory rows \(by share, all\)", fleet.procs["agent-3"].log()
        ),
        10,
        "agent-3 says its first read",
    )
    assert int(shared[0]) < NODES
    assert "reads the whole fleet" not in fleet.procs["agent-3"].log()
    instances = _build(fleet, 6)
    pins = {n: o for n, (o, _e, i) in fleet.owners().items() if i is not None}
    assert len(pins) == 6

    # A 4th joins: only nodes moving to it move; pinned nodes stay.
    before = fleet.owners()
    fleet.agent("agent-4")
    four = three | {"agent-4"}
    wait_for(lambda: _partitioned(fleet, four), 30, "4 agents partition the nodes")
    after = fleet.owners()
    for node, (owner, epoch, inst) in after.items():
        if owner != before[node][0]:
            assert owner == "agent-4", f"{node} moved {before[node][0]} -> {owner}"
            assert inst is None
            assert epoch > before[node][1]
    assert {n: after[n][0] for n in pins} == pins

    # kill -9 of an agent: its unpinned nodes are owned by survivors within
    # TTL + 2 s (+ slack for a loaded machine); pins wait for rehome_grace.
    victim = next(o for o in pins.values())
    victim_pins = {n for n, o in pins.items() if o == victim}
    killed_at = time.monotonic()
    fleet.procs[victim].kill()
    survivors = four - {victim}
    wait_for(
        lambda: (
            not (fleet.owned_by().get(victim, set()) - victim_pins) and None not in fleet.owned_by()
        ),
        TTL + 2 + 6,
        "the dead agent's unpinned nodes taken over",
    )
    taken_after = time.monotonic() - killed_at
    assert fleet.owned_by()[victim] == victim_pins  # pins still wait
    wait_for(lambda: victim not in fleet.owned_by(), REHOME_GRACE + TTL + 10, "pins re-homed")
    rehomed_after = time.monotonic() - killed_at
    assert rehomed_after >= REHOME_GRACE - 1  # not before the grace
    final = fleet.owners()
    for node in victim_pins:
        owner, epoch, inst = final[node]
        assert owner in survivors
        assert epoch > after[node][1]
        assert fleet.api.show_instance(inst)["host"] == owner
    assert set(instances) == {i for (_o, _e, i) in final.values() if i}
    print(f"takeover {taken_after:.1f}s, rehome {rehomed_after:.1f}s")


@pytest.mark.step_duration(1.5)
def test_sigstop_mid_deploy_past_ttl_acts_on_nothing_stale(fleet: Fleet) -> None:
    """Paused in the middle of a deployment until its nodes, pins included,
    were taken over: on SIGCONT it must not take one more step on them."""
    for name in ("agent-1", "agent-2", "agent-3"):
        fleet.agent(name)
    three = {"agent-1", "agent-2", "agent-3"}
    wait_for(lambda: _partitioned(fleet, three), 30, "3 agents partition the nodes")
    paused = fleet.procs["agent-2"]

    def agent2_deploying() -> bool:
        return any(a.agent == "agent-2" and a.action == "deploy_start" for a in fleet.actions())

    # The scheduler may place a batch on the other agents' nodes alone (seen
    # in CI): batches until agent-2 deploys one.
    for _batch in range(4):
        fleet.api.build_instances({"flavor": "small", "count": 3})
        with contextlib.suppress(AssertionError):
            wait_for(agent2_deploying, 15, "agent-2 deploying")
            break
    else:
        raise AssertionError("agent-2 deployed none of 4 batches of 3 builds")
    paused.signal(signal.SIGSTOP)
    lost = {n for n in fleet.owned_by().get("agent-2", set())}
    # Everything it had, the node being deployed included, is taken over.
    wait_for(
        lambda: "agent-2" not in fleet.owned_by(),
        TTL + REHOME_GRACE + 15,
        "agent-2's nodes (pins too) re-homed",
    )
    resumed_ns = time.time_ns()
    paused.signal(signal.SIGCONT)
    wait_for(lambda: _partitioned(fleet, three), 40, "agent-2 back in the partition")
    time.sleep(2 * 1.5)  # more than a deploy step: a stale step would have run
    stale = [
        a
        for a in fleet.actions()
        if a.agent == "agent-2"
        and a.node in lost
        and a.ns > resumed_ns
        and a.epoch < fleet.owners()[a.node][1]
    ]
    assert stale == []
    assert "abandoned" in paused.log()  # its deploy stopped at the next step
    assert "lost" in paused.log()


def test_graceful_restart_keeps_pins_and_drain_hands_over(fleet: Fleet) -> None:
    for name in ("agent-1", "agent-2"):
        fleet.agent(name)
    two = {"agent-1", "agent-2"}
    wait_for(lambda: _partitioned(fleet, two), 30, "2 agents partition the nodes")
    _build(fleet, 4)
    pins = {n: (o, e) for n, (o, e, i) in fleet.owners().items() if i is not None}
    agent1_pins = {n for n, (o, _e) in pins.items() if o == "agent-1"}
    assert fleet.procs["agent-1"].terminate() == 0
    # Restart within the grace: pins back, nothing else of the others moved.
    fleet.agent("agent-1")
    wait_for(lambda: _partitioned(fleet, two), 30, "agent-1 back")
    now = fleet.owners()
    assert {n for n, (o, _e, i) in now.items() if i and o == "agent-1"} == agent1_pins
    for node in agent1_pins:
        assert now[node][1] == pins[node][1]  # never moved: same epoch
    # Drain agent-2: everything, pins included, goes to agent-1.
    assert fleet.api.drain_agent("agent-2")["state"] == "draining"
    wait_for(lambda: "agent-2" not in fleet.owned_by(), 30, "agent-2 drained")
    assert set(fleet.owned_by()) == {"agent-1"}
    assert fleet.procs["agent-2"].proc.wait(30) == 0  # type: ignore[union-attr]
    # agent-1 knows it owns what it was handed: builds there succeed.
    before = fleet.owned_by()["agent-1"]
    for uuid in _build(fleet, 6):
        node = fleet.api.show_instance(uuid)["node_uuid"]
        assert node in before


def test_host_names_are_case_insensitive(fleet: Fleet) -> None:
    """``Agent-A`` is the DNS name ``agent-a``: one ring member, one owner, one RPC
    server, whatever case the operator or a client uses; a host that is no
    DNS name stops the agent at start with one line naming the option."""
    fleet.agent("Agent-A")
    fleet.agent("agent-b")
    two = {"agent-a", "agent-b"}
    owned = wait_for(lambda: _partitioned(fleet, two), 30, "agent-a and agent-b own the nodes")
    assert set(owned) == two
    assert {n["uuid"] for n in fleet.api.list_nodes(filters={"owner": "AGENT-A"})} == owned[
        "agent-a"
    ]
    built = _build(fleet, 4)  # routed to agent-a's RPC server by its lower-case name
    assert set(fleet.owned_by()) == two
    _power_verbs(fleet, built)

    bad = fleet.agent("Bad_Host!", wait=False)
    assert bad.proc is not None
    assert bad.proc.wait(30) != 0
    assert set(fleet.owned_by()) == two


def _power_verbs(fleet: Fleet, instances: list[str]) -> None:
    """Reboot, stop and start an instance and power a free node, each done by
    the node's owner at its epoch (the shared action log says by whom)."""
    api = fleet.api
    instance = instances[0]
    node = api.show_instance(instance)["node_uuid"]
    owner, epoch, _inst = fleet.owners()[node]

    def settled() -> dict[str, Any] | None:
        found: dict[str, Any] = api.show_instance(instance)
        return found if found["task_state"] is None else None

    for call, kwargs, task, vm_state, power in (
        (api.reboot_instance, {}, "rebooting", "active", "power on"),
        (api.reboot_instance, {"hard": True}, "rebooting_hard", "active", "power on"),
        (api.stop_instance, {}, "powering-off", "stopped", "power off"),
        (api.start_instance, {}, "powering-on", "active", "power on"),
        (api.rebuild_instance, {}, "rebuilding", "active", "power on"),
    ):
        assert call(instance, **kwargs)["task_state"] == task
        done = wait_for(settled, 30, f"{task} of {instance} done")
        assert (done["vm_state"], done["fault"]) == (vm_state, None)
        assert api.show_node(node)["power_state"] == power
        if vm_state == "stopped":
            with pytest.raises(InstanceStateConflict, match="in state stopped, cannot reboot"):
                api.reboot_instance(instance)
    logged = [(a.action, a.agent, a.epoch) for a in fleet.actions() if a.node == node]
    power = [(a, h, e) for a, h, e in logged if not a.startswith(("deploy", "rebuild"))]
    assert power[-4:] == [
        ("soft_reboot", owner, epoch),
        ("reboot", owner, epoch),
        ("soft_power_off", owner, epoch),
        ("power_on", owner, epoch),
    ]
    assert logged[-1] == ("rebuild_done", owner, epoch)
    # An operator's node power verb: a node hosting nothing, through its owner.
    free = next(n for n, (_o, _e, i) in fleet.owners().items() if i is None)
    api.set_node_power_state(free, "power on")
    wait_for(
        lambda: api.show_node(free)["power_state"] == "power on", 30, f"node {free} powered on"
    )
    assert [a.action for a in fleet.actions() if a.node == free][-1:] == ["power_on"]


def _claims(fleet: Fleet) -> dict[str, tuple[str | None, int]]:
    return {n: (o, e) for n, (o, e, _i) in fleet.owners().items()}


def _stopped_for_the_conductor(fleet: Fleet, host: str) -> bool:
    """Whether the conductor's view of the group no longer has ``host`` up."""
    return all(a["state"] != "up" for a in fleet.api.fleet_status()["agents"] if a["host"] == host)


def test_a_rolling_restart_moves_no_node(fleet: Fleet) -> None:
    """SIGTERM and start again, one agent after the other, builds going on:
    within restart_grace no node changes hands, not even for a moment (same
    owner, same epoch), and builds meanwhile land on the other agents."""
    hosts = ["agent-1", "agent-2", "agent-3"]
    for host in hosts:
        fleet.agent(host)
    wait_for(lambda: _partitioned(fleet, set(hosts)), 30, "3 agents partition the nodes")
    _build(fleet, 3)
    before = _claims(fleet)
    for host in hosts:
        away = {n for n, (o, _e) in before.items() if o == host}
        assert fleet.procs[host].terminate() == 0
        stop_log = fleet.procs[host].log().rsplit(f"Agent {host} stopping", 1)[-1]
        assert stop_log.count("its nodes stay its own") == 1
        assert "node actions suspended" not in stop_log  # a stop is no fault: INFO
        # The conductor schedules by its own view of the group, read every
        # watch interval: a build in the moment before it saw the agent go
        # waits for the agent's return (seen in CI).
        wait_for(lambda h=host: _stopped_for_the_conductor(fleet, h), 30, f"{host} seen gone")
        for uuid in _build(fleet, 2):  # while it is away: placed elsewhere, not waiting
            assert fleet.api.show_instance(uuid)["node_uuid"] not in away
        assert {n: c for n, c in _claims(fleet).items() if n in away} == {
            n: before[n] for n in away
        }
        fleet.agent(host)
    wait_for(lambda: _partitioned(fleet, set(hosts)), 30, "every agent back")
    assert _claims(fleet) == before


@pytest.mark.restart_grace(3.0)
def test_a_longer_absence_than_restart_grace_moves_nodes_as_before(fleet: Fleet) -> None:
    fleet.agent("agent-1")
    fleet.agent("agent-2")
    two = {"agent-1", "agent-2"}
    wait_for(lambda: _partitioned(fleet, two), 30, "2 agents partition the nodes")
    away = {n for n, (o, _e) in _claims(fleet).items() if o == "agent-1"}
    stopped = time.monotonic()  # the hold starts after SIGTERM, before the exit
    assert fleet.procs["agent-1"].terminate() == 0
    wait_for(lambda: fleet.owned_by().get("agent-2", set()) >= away, 30, "agent-2 takes over")
    assert time.monotonic() - stopped >= 3.0  # not before the hold ended
    assert set(fleet.owned_by()) == {"agent-2"}


def test_an_agent_whose_host_another_process_took_stops_serving_and_fails(
    fleet: Fleet,
) -> None:
    """Two agents configured with one host (issue 16): the newer one wins; the
    older stops consuming the host's RPC queue at once and exits non-zero,
    instead of answering half the calls to that host and looping on re-joins."""
    first = fleet.agent("agent-1")
    wait_for(lambda: _partitioned(fleet, {"agent-1"}), 30, "agent-1 owns the nodes")
    config = fleet.workdir / "agent-1-again.conf"
    log = fleet.workdir / "agent-1-again.log"
    config.write_text(f"[DEFAULT]\nhost = agent-1\nlog_file = {log}\n{fleet.common}")
    second = ServiceProcess("compute_agent.cmd.agent", "agent-1-again", config, log).start()
    fleet.procs["agent-1-again"] = second
    second.wait_serving()
    proc = first.proc
    assert proc is not None
    wait_for(lambda: proc.poll() is not None, 4 * TTL + 10, "the superseded agent exits")
    assert proc.returncode not in (0, None)
    assert "another process joined the group with this host" in first.log()
    assert second.running()
    # The survivor alone serves the host: builds routed to agent-1 complete.
    _build(fleet, 3)


def test_a_node_deleted_while_owned_is_forgotten_by_its_agent(fleet: Fleet) -> None:
    """The agent's next state report learns the node is gone (conductor API
    1.20): said once on each side, no stale-report WARNING."""
    # A node that does not change is sent only in full reports (600 s by default).
    agent = fleet.agent("agent-a", extra="[compute_agent]\nfull_report_interval = 2\n")
    wait_for(lambda: set(fleet.owned_by()) == {"agent-a"}, 30, "agent-a owns every node")
    node = sorted(fleet.owned_by()["agent-a"])[0]
    fleet.api.set_node_maintenance(node, True, "retired")
    fleet.api.delete_node(node)
    agent.wait_log(f"forgets 1 nodes deleted while it owned them: {node}", 30)
    conductor_log = fleet.procs["cond-1"].log()
    said = f"Agent agent-a reported 1 nodes deleted since it claimed them; it forgets them: {node}"
    assert conductor_log.count(said) == 1, conductor_log[-3000:]
    assert "nodes it does not own" not in conductor_log
    assert len(fleet.owned_by()["agent-a"]) == NODES - 1


def test_a_quiet_agent_learns_of_an_operators_change_from_the_conductors_hint(
    fleet: Fleet,
) -> None:
    """Nodes imported into a quiet fleet are claimed within seconds, though the
    agents would read their share's changes only every 10 minutes: the
    conductor said so (inventory_changed, compute API 1.6), one cast for the
    whole import."""
    quiet = "[compute_agent]\nreconcile_interval = 300\nquiet_reconcile_interval = 600\n"
    for name in ("agent-a", "agent-b"):
        fleet.agent(name, extra=quiet)
    wait_for(lambda: _partitioned(fleet, {"agent-a", "agent-b"}), 60, "the fleet is split")
    reply = fleet.api.import_nodes(
        [{"name": f"late-{i:03d}", "resource_class": "baremetal"} for i in range(20)]
    )
    late = set(reply["uuids"])
    # Without the hint the agents' next reads would come 300 s on.
    wait_for(
        lambda: late <= {n for n, (owner, _e, _i) in fleet.owners().items() if owner},
        120,
        "the imported nodes owned",
    )
    assert _partitioned(fleet, {"agent-a", "agent-b"})
