# SPDX-License-Identifier: Apache-2.0
"""Conductors are peers: one that dies or stops strands nothing, and no verb is done twice.

Two conductors, three agents, real etcd, RabbitMQ and PostgreSQL, the
simulated driver with slow power actions and deploys (so that verbs are in
flight at the fault).  ``build_timeout`` and ``stuck_after`` stay at their
defaults (30 and 10 minutes): no sweeper can hide a stall.  The requests go
through the test's RPC client, which RabbitMQ hands to either conductor.

- ``conductor-kill9-with-actions``: builds, deletes, reboots, stops, starts,
  rebuilds and node power requests in flight (16 nodes: 10 instances, 2 new
  builds, 2 free nodes powered), part of them carried by the
  conductor that is killed; every one ends within TTL + 10 s of the kill,
  and the simulated driver's action log shows each verb once.
- ``conductor-sigterm-under-load``: a stream of requests while one conductor
  stops: no client error, every request ends, each verb done once.
"""

from __future__ import annotations

import functools
import threading
import time
import uuid as uuidlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from conductor.db import carriage
from tests.dbutil import migrated
from tests.functional.fleet_harness import (
    TTL,
    Fleet,
    ironic_fleet,
    log_tails,
    shared_nodes,
    start_processes,
)
from tests.harness import wait_for
from tests.harness.http_proxy import Http503Proxy
from tests.harness.ironic import IronicHarness

pytestmark = pytest.mark.timeout(300)

AGENTS = ("agent-1", "agent-2", "agent-3")
CONDUCTORS = ("cond-1", "cond-2")
NODES = 16
#: Slow enough that verbs are in flight when the conductor goes.
POWER_DURATION = 4.0
STEP_DURATION = 0.4
#: Every piece of work ends this soon after a conductor's kill (issue goal).
KILL_BOUND = TTL + 10.0
#: The power verbs as the simulated driver logs them.
POWER_ACTIONS = frozenset({"power_on", "power_off", "reboot", "soft_power_off", "soft_reboot"})


@pytest.fixture
def fleet(tmp_path: Path, pg_url: str, transport_url: str, etcd_url: str) -> Iterator[Fleet]:
    migrated(pg_url).dispose()
    f = Fleet(
        tmp_path,
        db_url=pg_url,
        transport_url=transport_url,
        etcd_url=etcd_url,
        step_duration=STEP_DURATION,
    )
    # build_timeout and stuck_after at their defaults: nothing here waits for them.
    f.common += f"[simulated_driver]\npower_duration = {POWER_DURATION}\n"
    try:
        start_processes(f, CONDUCTORS, AGENTS)
        names = [f"node-{i:03d}" for i in range(NODES)]
        f.api.import_nodes(shared_nodes(AGENTS, names, resource_class="baremetal"))
        f.api.create_flavor({"name": "small", "resource_class": "baremetal"})
        wait_for(lambda: set(f.owned_by()) == set(AGENTS), 30, "the agents partition the nodes")
        yield f
    except BaseException:
        print(log_tails(f))
        raise
    finally:
        f.close()


@dataclass
class Requests:
    """What the test asked for, and what each request should end as."""

    #: instance -> the vm_state it ends in (``deleted``: gone)
    instances: dict[str, str] = field(default_factory=dict)
    #: node -> the power state an operator's request leaves it in
    node_power: dict[str, str] = field(default_factory=dict)
    #: node -> how many power verbs were asked of it (instance actions and node requests)
    power_verbs: Counter[str] = field(default_factory=Counter)
    #: instance -> how many rebuilds were asked
    rebuilds: Counter[str] = field(default_factory=Counter)
    #: client calls that raised (the call and the error)
    errors: list[str] = field(default_factory=list)
    since_ns: int = field(default_factory=time.time_ns)

    def call(self, what: str, request: Callable[[], Any]) -> bool:
        try:
            request()
        except Exception as exc:  # any client error is a failure of the test
            self.errors.append(f"{what}: {type(exc).__name__}: {exc}")
            return False
        return True


def _build(fleet: Fleet, count: int) -> list[str]:
    built = [i["uuid"] for i in fleet.api.build_instances({"flavor": "small", "count": count})]
    wait_for(
        lambda: all(fleet.api.show_instance(u)["vm_state"] == "active" for u in built),
        90,
        f"{count} instances ACTIVE",
    )
    return built


def _stopped(fleet: Fleet, instances: list[str]) -> list[str]:
    """Stop *instances* and wait until they are ``stopped`` (to be started later)."""
    for instance in instances:
        fleet.api.stop_instance(instance)
    wait_for(
        lambda: all(fleet.api.show_instance(u)["vm_state"] == "stopped" for u in instances),
        30,
        f"{len(instances)} instances stopped",
    )
    return instances


def _node_of(fleet: Fleet, instance: str) -> str:
    node = fleet.api.show_instance(instance)["node_uuid"]
    assert node is not None
    return str(node)


def _issue(fleet: Fleet, requests: Requests, active: list[str], index: int) -> None:
    """One verb on ``active[index]`` (reboot, stop, rebuild or delete, in turn)."""
    instance = active[index]
    nodes: list[str] = []
    if not requests.call("show", lambda: nodes.append(_node_of(fleet, instance))):
        return
    [node] = nodes
    kind = index % 4
    if kind == 0:
        if requests.call("reboot", lambda: fleet.api.reboot_instance(instance)):
            requests.instances[instance] = "active"
            requests.power_verbs[node] += 1
    elif kind == 1:
        if requests.call("stop", lambda: fleet.api.stop_instance(instance)):
            requests.instances[instance] = "stopped"
            requests.power_verbs[node] += 1
    elif kind == 2:
        if requests.call("rebuild", lambda: fleet.api.rebuild_instance(instance)):
            requests.instances[instance] = "active"
            requests.rebuilds[instance] += 1
    elif requests.call("delete", lambda: fleet.api.delete_instance(instance)):
        requests.instances[instance] = "deleted"


def _free_nodes(fleet: Fleet) -> list[str]:
    return sorted(node for node, (_o, _e, instance) in fleet.owners().items() if instance is None)


def _power_free_nodes(fleet: Fleet, requests: Requests, nodes: list[str]) -> None:
    for node in nodes:
        if requests.call("node power", functools.partial(_power_off, fleet, node)):
            requests.node_power[node] = "power off"
            requests.power_verbs[node] += 1


def _power_off(fleet: Fleet, node: str) -> None:
    fleet.api.set_node_power_state(node, "power off")


def _ended(fleet: Fleet, requests: Requests) -> list[str]:
    """What has not ended yet (empty: everything did)."""
    left = []
    for instance, end in requests.instances.items():
        try:
            found = fleet.api.show_instance(instance)
        except Exception:  # gone: deleted
            if end != "deleted":
                left.append(f"{instance}: gone, expected {end}")
            continue
        if found["vm_state"] == end == "deleted":
            continue
        if found["vm_state"] != end or found["task_state"] is not None:
            left.append(f"{instance}: {found['vm_state']}/{found['task_state']}, expected {end}")
    left += [f"node {n}: power request in flight" for n in _power_requests_left(fleet, requests)]
    return left


def _power_requests_left(fleet: Fleet, requests: Requests) -> list[str]:
    return [r.node_uuid for r in carriage.power_requests_of(fleet.db, list(requests.node_power))]


def _assert_each_verb_once(fleet: Fleet, requests: Requests) -> None:
    """The driver's action log: each power verb and rebuild asked was done once, not twice."""
    actions = [a for a in fleet.actions() if a.ns >= requests.since_ns]
    power = Counter(a.node for a in actions if a.action in POWER_ACTIONS)
    rebuilds = Counter(a.instance for a in actions if a.action == "rebuild_start")
    assert dict(power) == dict(requests.power_verbs), "power verbs done (node -> times)"
    assert dict(rebuilds) == dict(requests.rebuilds), "rebuilds done (instance -> times)"
    assert fleet.fencing_violations() == []


def _carried(fleet: Fleet) -> Counter[str | None]:
    return carriage.carriers(fleet.db)


def test_conductor_kill9_with_actions(fleet: Fleet) -> None:
    """Kill -9 of one of two conductors while builds, deletes, actions and
    node power requests are in flight: all end within TTL + 10 s, once each."""
    active = _build(fleet, 10)
    stopped = _stopped(fleet, active[8:])
    active = active[:8]
    requests = Requests()
    for index in range(len(active)):
        _issue(fleet, requests, active, index)
    for instance in stopped:
        node = _node_of(fleet, instance)
        if requests.call("start", functools.partial(fleet.api.start_instance, instance)):
            requests.instances[instance] = "active"
            requests.power_verbs[node] += 1
    new = [str(uuidlib.uuid4()) for _ in range(2)]
    if requests.call(
        "build",
        lambda: fleet.api.build_instances(
            {"flavor": "small", "count": len(new), "instance_uuids": new}
        ),
    ):
        requests.instances.update(dict.fromkeys(new, "active"))
    # Nodes no build takes: the new ones placed first.
    wait_for(lambda: all(fleet.api.show_instance(u)["node_uuid"] for u in new), 20, "placed")
    _power_free_nodes(fleet, requests, _free_nodes(fleet)[:2])
    assert requests.errors == []
    # The victim carries part of the work, and the agents are doing it.
    carried = _carried(fleet)
    assert carried["cond-2"] > 0, f"cond-2 carries nothing to strand: {carried}"
    wait_for(
        lambda: any(a.action in POWER_ACTIONS for a in fleet.actions() if a.ns > requests.since_ns),
        20,
        "power verbs in flight",
    )
    fleet.procs["cond-2"].kill()
    killed = time.monotonic()
    try:
        wait_for(lambda: not _ended(fleet, requests), KILL_BOUND + 60, "every request ended")
    except BaseException:
        print("\n".join(_ended(fleet, requests)))
        print(log_tails(fleet))
        raise
    took = time.monotonic() - killed
    _assert_each_verb_once(fleet, requests)
    assert _carried(fleet)["cond-2"] == 0
    survivor = fleet.procs["cond-1"].log()
    assert "carrying on" in survivor and "cond-2" in survivor
    print(
        f"\nconductor-kill9-with-actions: {carried['cond-2']} of {sum(carried.values())} records "
        f"carried by the killed conductor; all {len(requests.instances)} instances and "
        f"{len(requests.node_power)} node power requests ended {took:.1f} s after the kill "
        f"(bound TTL + 10 = {KILL_BOUND:.0f} s); each verb done once"
    )
    assert took <= KILL_BOUND, f"the last request ended {took:.1f} s after the kill"


def test_conductor_sigterm_under_load(fleet: Fleet) -> None:
    """SIGTERM of one of two conductors under a stream of requests: no
    client error, every request ends, each verb done once."""
    active = _build(fleet, 8)
    requests = Requests()
    stop = threading.Event()

    def stream() -> None:
        index = 0
        while not stop.is_set() and index < len(active):
            _issue(fleet, requests, active, index)
            index += 1
            time.sleep(0.5)

    reads = Counter[str]()

    def read() -> None:
        # Calls that change nothing, as fast as they are answered: any lost
        # at the stop is a client error.
        while not stop.is_set():
            if requests.call("show", functools.partial(fleet.api.show_instance, active[0])):
                reads["answered"] += 1

    sender = threading.Thread(target=stream, name="request-stream", daemon=True)
    reader = threading.Thread(target=read, name="read-stream", daemon=True)
    sender.start()
    reader.start()
    time.sleep(1.5)  # a few requests in flight on both conductors
    carried = _carried(fleet)
    stopping = time.monotonic()
    code = fleet.procs["cond-2"].terminate(timeout=60)
    stopped_in = time.monotonic() - stopping
    sender.join(30)
    time.sleep(1.0)  # reads answered by the survivor alone
    stop.set()
    reader.join(30)
    _power_free_nodes(fleet, requests, _free_nodes(fleet)[:3])
    try:
        assert requests.errors == []
        wait_for(lambda: not _ended(fleet, requests), 60, "every request ended")
    except BaseException:
        print("\n".join(requests.errors + _ended(fleet, requests)))
        print(log_tails(fleet))
        raise
    _assert_each_verb_once(fleet, requests)
    assert code == 0
    print(
        f"\nconductor-sigterm-under-load: cond-2 stopped in {stopped_in:.1f} s carrying "
        f"{carried['cond-2']} records; {len(requests.instances)} instance requests and "
        f"{len(requests.node_power)} node power requests and {reads['answered']} reads, "
        "0 client errors, each verb once"
    )


def test_conductor_kill9_on_ironic_does_each_verb_once(
    tmp_path: Path,
    pg_url: str,
    transport_url: str,
    etcd_url: str,
    ironic_url: str,
    ironic: IronicHarness,
    shard: str,
) -> None:
    """The kill -9 on a real Ironic: reboots and stops routed through both
    conductors, one killed at once; every action ends, and Ironic is asked
    each power change once (what it was asked, counted at a proxy)."""
    with (
        Http503Proxy(ironic_url) as proxy,
        ironic_fleet(
            tmp_path,
            db_url=pg_url,
            transport_url=transport_url,
            etcd_url=etcd_url,
            ironic_url=proxy.url,
            shards=[shard],
        ) as fleet,
    ):
        ironic.enroll(4, shard=shard)
        start_processes(fleet, CONDUCTORS, AGENTS[:2])
        fleet.api.sync_ironic_nodes()
        fleet.api.create_flavor({"name": "bm", "resource_class": "baremetal"})
        wait_for(lambda: all(o for o, _e, _i in fleet.owners().values()), 30, "nodes owned")
        built = [i["uuid"] for i in fleet.api.build_instances({"flavor": "bm", "count": 4})]
        wait_for(
            lambda: all(fleet.api.show_instance(u)["vm_state"] == "active" for u in built),
            120,
            "4 instances ACTIVE in Ironic",
        )
        asked = len(proxy.forwarded)
        expected = {}
        for index, instance in enumerate(built):
            if index % 2:
                fleet.api.stop_instance(instance)
                expected[instance] = "stopped"
            else:
                fleet.api.reboot_instance(instance)
                expected[instance] = "active"
        carried = _carried(fleet)
        fleet.procs["cond-2"].kill()
        killed = time.monotonic()

        def ended() -> bool:
            shown = [fleet.api.show_instance(u) for u in expected]
            return all(
                (s["vm_state"], s["task_state"]) == (expected[s["uuid"]], None) for s in shown
            )

        try:
            wait_for(ended, KILL_BOUND + 60, "every action ended")
        except BaseException:
            print(log_tails(fleet))
            raise
        took = time.monotonic() - killed
        nodes = {_node_of(fleet, u) for u in expected}
        power = Counter(
            path.split("/")[3]
            for method, path, status in proxy.forwarded[asked:]
            if method == "PUT" and path.endswith("/states/power") and status == 202
        )
        print(
            f"\nconductor-kill9 on Ironic: {carried['cond-2']} of {sum(carried.values())} "
            f"actions carried by the killed conductor; all ended {took:.1f} s after the kill; "
            f"Ironic asked {dict(power)}"
        )
        assert power == dict.fromkeys(nodes, 1)
        assert took <= KILL_BOUND
