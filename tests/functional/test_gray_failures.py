# SPDX-License-Identifier: Apache-2.0
"""Gray failures: a dependency half there is said at once, and an agent that
cannot serve gives up its share.

Real PostgreSQL, etcd and RabbitMQ; a conductor and three agents as separate
processes, each reaching the broker through a TCP proxy; the test cuts the
proxy of the agent hosting most instances (its etcd lease stays alive, as on
a host whose firewall drops the broker's port). While it is cut, builds and
deletes go on: every one ends within ``RECOVERY_SETTLE`` (TTL +
``rehome_grace`` + 10 s) of its request, with ``build_timeout`` at its
default (30 min: no sweeper can mask a stall). The cut agent steps aside
from the ring (its peers take its nodes, fenced), and takes its share back
once the proxy heals. No process logs an ERROR or a traceback; the conductor
says the agent's outage once.

etcd frozen (SIGSTOP) longer than the TTL: every service says so once, at
WARNING, within the TTL, and the builds requested meanwhile end once it
answers again.  RabbitMQ frozen: an agent and a conductor stopped meanwhile
exit within 30 s, the agent having left the group, and no service logs an
ERROR or a traceback once the broker answers again.

A quiet agent (its next pass minutes away) cut from the broker until its
fanout queue is gone misses the conductor's hint of imported nodes: it reads
its share of them at once when its connection comes back.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from conductor.common.rpc import COMPUTE_TOPIC
from tests.dbutil import migrated
from tests.functional.fleet_harness import (
    RECOVERY_SETTLE,
    TTL,
    Fleet,
    log_tails,
    shared_nodes,
    start_processes,
)
from tests.functional.tcp_proxy import TcpProxy
from tests.harness import wait_for
from tests.harness.servers import server_ctl

AGENTS = ("agent-1", "agent-2", "agent-3")
NODES = 24
#: How long etcd or the broker stays frozen: longer than the TTL.
FREEZE_S = 20.0
#: How long the cut agent stays cut from the broker.
CUT_S = 120.0
#: The most a stop may take with the broker frozen, at default settings.
STOP_BOUND = 30.0
#: The quiet agents' membership TTL: longer than their cut from the broker.
QUIET_TTL = 15
#: The most a quiet agent may take to read after its broker connection is
#: back: its next pass would come reconcile_interval (300 s) on.
RECONNECT_BOUND = 60.0


def _state(fleet: Fleet, uuid: str) -> str | None:
    return fleet.api.show_instance(uuid)["vm_state"]


def _all_active(fleet: Fleet, uuids: list[str]) -> bool:
    return all(_state(fleet, u) == "active" for u in uuids)


def _deleted(fleet: Fleet, uuid: str) -> bool:
    try:
        return _state(fleet, uuid) == "deleted"
    except Exception:  # gone from the API: deleted
        return True


def test_an_agent_cut_from_the_broker_gives_up_its_share_and_takes_it_back(
    tmp_path: Path, pg_url: str, transport_url: str, etcd_url: str
) -> None:
    migrated(pg_url).dispose()
    port = int(transport_url.rsplit(":", 1)[1].strip("/"))
    # Each agent reaches the broker through a proxy of its own (a later
    # value of an option overrides an earlier one); the test cuts the one
    # of the agent that hosts most instances (the scheduler may pack them).
    proxies = {agent: TcpProxy(port) for agent in AGENTS}
    fleet = Fleet(tmp_path, db_url=pg_url, transport_url=transport_url, etcd_url=etcd_url)
    extra = {
        agent: f"[DEFAULT]\ntransport_url = rabbit://guest:guest@{proxy.url}/\n"
        for agent, proxy in proxies.items()
    }
    try:
        start_processes(fleet, ["cond-1"], AGENTS, extra=extra)
        names = [f"n{i:02d}" for i in range(NODES)]
        fleet.api.import_nodes(shared_nodes(AGENTS, names, resource_class="baremetal"))
        fleet.api.create_flavor({"name": "bm", "resource_class": "baremetal"})
        wait_for(lambda: set(fleet.owned_by()) == set(AGENTS), 30, "the agents share the nodes")
        before = [i["uuid"] for i in fleet.api.build_instances({"flavor": "bm", "count": 9})]
        wait_for(lambda: _all_active(fleet, before), 60, "9 builds active")
        hosts = {u: fleet.api.show_instance(u)["host"] for u in before}
        cut = max(AGENTS, key=lambda agent: list(hosts.values()).count(agent))
        on_cut = [u for u, host in hosts.items() if host == cut]
        proxy = proxies[cut]

        proxy.cut()
        cut_at = time.monotonic()
        # Work that meets the cut: deletes of its instances, new builds.
        requested: dict[str, float] = {}
        for uuid in on_cut:
            fleet.api.delete_instance(uuid)
            requested[uuid] = time.monotonic()
        after = [i["uuid"] for i in fleet.api.build_instances({"flavor": "bm", "count": 4})]
        for uuid in after:
            requested[uuid] = time.monotonic()

        def done(uuid: str) -> bool:
            return _deleted(fleet, uuid) if uuid in on_cut else _state(fleet, uuid) == "active"

        waited: dict[str, float] = {}
        deadline = time.monotonic() + RECOVERY_SETTLE + 30  # reported, then asserted below
        while len(waited) < len(requested) and time.monotonic() < deadline:
            for uuid in set(requested) - set(waited):
                if done(uuid):
                    waited[uuid] = time.monotonic() - requested[uuid]
            time.sleep(0.2)
        longest = max(waited.values(), default=0.0)
        print(
            f"\n{cut} cut: {len(on_cut)} deletes and {len(after)} builds, each done within "
            f"{longest:.1f} s of its request (bound {RECOVERY_SETTLE:.0f} s); "
            f"{len(requested) - len(waited)} not done"
        )
        assert set(waited) == set(requested), log_tails(fleet)
        assert longest <= RECOVERY_SETTLE, log_tails(fleet)
        # It left the ring: none of its nodes is its own any more.
        wait_for(lambda: cut not in fleet.owned_by(), RECOVERY_SETTLE, f"{cut} owns nothing")
        aside = time.monotonic() - cut_at
        assert "leaves the ring" in fleet.procs[cut].log(), log_tails(fleet)
        # The cut lasts CUT_S: a long one must say no more than a short one.
        time.sleep(max(0.0, CUT_S - (time.monotonic() - cut_at)))

        proxy.heal()
        healed = time.monotonic()
        wait_for(lambda: cut in fleet.owned_by(), RECOVERY_SETTLE, f"{cut} takes its share back")
        print(
            f"{cut} owned nothing {aside:.1f} s after the cut; took its share back "
            f"{time.monotonic() - healed:.1f} s after the heal"
        )
        built = [i["uuid"] for i in fleet.api.build_instances({"flavor": "bm", "count": 3})]
        wait_for(lambda: _all_active(fleet, built), RECOVERY_SETTLE, "builds after the heal")
        assert fleet.fencing_violations() == []
        for name, proc in fleet.procs.items():
            lines = proc.log().splitlines()
            errors = [line for line in lines if " ERROR " in line or "Traceback" in line]
            assert errors == [], (name, errors[:5])
        outage = [
            line
            for line in fleet.procs["cond-1"].log().splitlines()
            if " WARNING " in line and f"Agent {cut} fails" in line
        ]
        assert len(outage) <= 1, outage
        # The cut agent: its broker outage, said once (its stepping aside and
        # back are INFO after it), whatever the cut's length.
        said = [line for line in fleet.procs[cut].log().splitlines() if " WARNING " in line]
        assert len(said) <= 1, said
    finally:
        _close(fleet, proxies)


def _close(fleet: Fleet, proxies: dict[str, TcpProxy]) -> None:
    """The fleet stopped (through healed proxies: a stop must not wait for a
    cut broker), then the proxies closed."""
    for proxy in proxies.values():
        proxy.heal()
    fleet.close()
    for proxy in proxies.values():
        proxy.close()


def _said_since(proc_log: str, offset: int) -> tuple[list[str], list[str]]:
    """The WARNING lines and the ERROR/traceback lines of a log after *offset*."""
    lines = proc_log[offset:].splitlines()
    warnings = [line for line in lines if " WARNING " in line]
    errors = [line for line in lines if " ERROR " in line or "Traceback" in line]
    return warnings, errors


def test_a_hung_etcd_is_said_once_per_service_within_the_ttl(
    tmp_path: Path, pg_url: str, transport_url: str, etcd_url: str
) -> None:
    """etcd frozen (SIGSTOP) 20 s, longer than the TTL, under builds: each
    service says it once, at WARNING, within the TTL (its requests to etcd
    time out after TTL/2), then nothing more than INFO; the builds requested
    meanwhile wait and are ACTIVE within RECOVERY_SETTLE of the thaw."""
    # The current pid: an earlier test may have restarted the server.
    etcd_pid = int(server_ctl("pid etcd").strip())
    migrated(pg_url).dispose()
    fleet = Fleet(tmp_path, db_url=pg_url, transport_url=transport_url, etcd_url=etcd_url)
    try:
        start_processes(fleet, ["cond-1"], ["agent-1", "agent-2"])
        fleet.api.import_nodes(
            [{"name": f"n{i:02d}", "resource_class": "baremetal"} for i in range(8)]
        )
        fleet.api.create_flavor({"name": "bm", "resource_class": "baremetal"})
        wait_for(lambda: None not in fleet.owned_by(), 30, "every node owned")
        offsets = {name: len(proc.log()) for name, proc in fleet.procs.items()}
        os.kill(etcd_pid, signal.SIGSTOP)
        frozen = time.monotonic()
        built: list[str] = []
        try:
            said_in: dict[str, float] = {}
            while time.monotonic() - frozen < FREEZE_S:
                for name, proc in fleet.procs.items():
                    if name not in said_in and _said_since(proc.log(), offsets[name])[0]:
                        said_in[name] = time.monotonic() - frozen
                if not built and len(said_in) == len(fleet.procs):
                    # Requested while no service can tell who is alive: they wait.
                    built = [
                        i["uuid"] for i in fleet.api.build_instances({"flavor": "bm", "count": 2})
                    ]
                time.sleep(0.2)
            assert built, f"not every service said the outage: {said_in}"
            assert not any(_state(fleet, uuid) == "active" for uuid in built)
        finally:
            os.kill(etcd_pid, signal.SIGCONT)
        thawed = time.monotonic()
        wait_for(lambda: _all_active(fleet, built), RECOVERY_SETTLE, "builds after the thaw")
        print(
            f"\netcd frozen {FREEZE_S:.0f} s: said by "
            + ", ".join(f"{n} in {s:.1f} s" for n, s in sorted(said_in.items()))
            + f"; builds ACTIVE {time.monotonic() - thawed:.1f} s after the thaw"
        )
        time.sleep(TTL)  # what the thaw makes them say, said
        for name, proc in fleet.procs.items():
            warnings, errors = _said_since(proc.log(), offsets[name])
            assert errors == [], (name, errors[:5])
            # The outage, naming etcd; a SUSPENDED reached while the beat
            # still waits for its timeout (2 s at TTL 3, past TTL/2) is INFO.
            assert len(warnings) == 1, (name, warnings)
            assert "etcd3+http://" in warnings[0], (name, warnings)
            assert said_in[name] <= TTL + 1.0, (name, said_in[name])
        assert fleet.fencing_violations() == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(etcd_pid, signal.SIGCONT)
        fleet.close()


def test_a_frozen_broker_stops_services_on_time_and_leaves_no_traceback(
    tmp_path: Path, pg_url: str, transport_url: str, etcd_url: str
) -> None:
    """RabbitMQ frozen (SIGSTOP) 20 s; an agent and a conductor get a SIGTERM
    meanwhile, at their default stop settings: each exits within
    :data:`STOP_BOUND` s, the agent having left the group.  After the thaw
    the services left serve on: a build is ACTIVE, and none of them logs an
    ERROR or a traceback (the messages the broker redelivers are dropped in
    one INFO line each)."""
    rabbit_pid = int(server_ctl("pid rabbit").strip())
    migrated(pg_url).dispose()
    fleet = Fleet(tmp_path, db_url=pg_url, transport_url=transport_url, etcd_url=etcd_url)
    # The harness shortens the agents' graceful_timeout: back to the default.
    defaults = {"agent-2": "[compute_agent]\ngraceful_timeout = 60\n"}
    try:
        start_processes(fleet, ["cond-1", "cond-2"], ["agent-1", "agent-2"], extra=defaults)
        fleet.api.import_nodes(
            [{"name": f"n{i:02d}", "resource_class": "baremetal"} for i in range(8)]
        )
        fleet.api.create_flavor({"name": "bm", "resource_class": "baremetal"})
        wait_for(lambda: None not in fleet.owned_by(), 30, "every node owned")
        before = [i["uuid"] for i in fleet.api.build_instances({"flavor": "bm", "count": 4})]
        wait_for(lambda: _all_active(fleet, before), 60, "4 builds active")
        offsets = {name: len(proc.log()) for name, proc in fleet.procs.items()}
        stopping = [fleet.procs["agent-2"], fleet.procs["cond-2"]]
        os.kill(rabbit_pid, signal.SIGSTOP)
        frozen = time.monotonic()
        took: dict[str, float] = {}
        try:
            time.sleep(2.0)  # the services are in their calls when the broker froze
            for proc in stopping:
                proc.signal(signal.SIGTERM)
            sent = time.monotonic()
            for proc in stopping:
                assert proc.wait(timeout=STOP_BOUND + 30) == 0, proc.name
                took[proc.name] = time.monotonic() - sent
            time.sleep(max(0.0, FREEZE_S - (time.monotonic() - frozen)))
        finally:
            os.kill(rabbit_pid, signal.SIGCONT)
        print(
            f"\nbroker frozen {FREEZE_S:.0f} s: "
            + ", ".join(f"{name} stopped in {s:.1f} s" for name, s in sorted(took.items()))
        )
        for name, seconds in took.items():
            assert seconds <= STOP_BOUND, (name, seconds, log_tails(fleet))
        assert "left group" in fleet.procs["agent-2"].log(), log_tails(fleet)
        # The broker was down for every agent: agent-1 kept its share (it does
        # not step aside counting on a peer that stops).
        assert "leaves the ring" not in fleet.procs["agent-1"].log(), log_tails(fleet)
        after = [i["uuid"] for i in fleet.api.build_instances({"flavor": "bm", "count": 1})]
        wait_for(lambda: _all_active(fleet, after), RECOVERY_SETTLE + 20, "a build after the thaw")
        time.sleep(TTL)
        for name, proc in fleet.procs.items():
            errors = _said_since(proc.log(), offsets[name])[1]
            assert errors == [], (name, errors[:5])
        assert fleet.fencing_violations() == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(rabbit_pid, signal.SIGCONT)
        fleet.close()


def _late_owners(fleet: Fleet, late: set[str]) -> dict[str, str | None]:
    return {n: owner for n, (owner, _e, _i) in fleet.owners().items() if n in late}


def _fanout_queues(topic: str) -> set[str]:
    """The broker's fanout queues of RPC *topic*: one per process serving it."""
    listed = server_ctl("rabbitmqctl list_queues --quiet --no-table-headers name")
    return {name for name in listed.split() if name.startswith(f"{topic}_fanout_")}


def _quiet_config(proxy: TcpProxy, etcd_url: str) -> str:
    """A quiet agent's config, reaching the broker through *proxy*.

    After a pass that claimed, its next is reconcile_interval (300 s) away.
    Its TTL is longer than the harness's: an agent stops serving after a TTL
    (5 s at least) without an answer through the broker, and saying so
    changes its membership view.
    """
    return (
        f"[DEFAULT]\ntransport_url = rabbit://guest:guest@{proxy.url}/\n"
        "[compute_agent]\nreconcile_interval = 300\nquiet_reconcile_interval = 600\n"
        f"[coordination]\nbackend_url = {etcd_url}?membership_timeout={QUIET_TTL}\n"
    )


def test_a_quiet_agent_reads_at_once_when_its_broker_connection_comes_back(
    tmp_path: Path, pg_url: str, transport_url: str, etcd_url: str
) -> None:
    """Two quiet agents (their next pass 300 s away); one is cut from the
    broker until its fanout queue is gone, and an operator imports nodes
    meanwhile: the conductor's hint (a fanout cast) is lost for it.  Its
    connection back, it reads its share of the new nodes at once: owned
    within :data:`RECONNECT_BOUND` s of the heal.  The cut is too short to
    move anything: the agent never stops serving nor steps aside, and its
    membership view does not change (which would make it read anyway)."""
    migrated(pg_url).dispose()
    port = int(transport_url.rsplit(":", 1)[1].strip("/"))
    agents = ("agent-a", "agent-b")
    cut, peer = agents
    proxies = {agent: TcpProxy(port) for agent in agents}
    fleet = Fleet(tmp_path, db_url=pg_url, transport_url=transport_url, etcd_url=etcd_url)
    extra = {agent: _quiet_config(proxy, etcd_url) for agent, proxy in proxies.items()}
    # A fanout queue outlives its consumer's connection by
    # rabbit_transient_queues_ttl (30 min by default), keeping what is cast
    # to it meanwhile: a cut shorter than that loses no cast.  A longer one
    # does, as does a broker restart (the queue is transient); 1 s stands
    # for that here.
    extra[cut] += "[oslo_messaging_rabbit]\nrabbit_transient_queues_ttl = 1\n"
    try:
        start_processes(fleet, ["cond-1"], agents, extra=extra)
        fleet.api.import_nodes(
            [{"name": f"n{i:02d}", "resource_class": "baremetal"} for i in range(NODES)]
        )
        wait_for(lambda: set(fleet.owned_by()) == set(agents), 60, "the agents share the nodes")
        time.sleep(2.0)  # their passes on the split done: both quiet now
        # (An earlier test's agents may have left theirs, for 30 min.)
        queues = _fanout_queues(COMPUTE_TOPIC)
        assert len(queues) >= 2, queues
        offset = len(fleet.procs[cut].log())

        proxies[cut].cut()
        cut_at = time.monotonic()
        wait_for(lambda: queues - _fanout_queues(COMPUTE_TOPIC), 30, f"{cut}'s fanout queue gone")
        late = set(
            fleet.api.import_nodes(
                [{"name": f"late-{i:02d}", "resource_class": "baremetal"} for i in range(20)]
            )["uuids"]
        )
        # The hint was cast: the peer, which got it, claims its share.
        wait_for(lambda: peer in _late_owners(fleet, late).values(), 30, f"{peer} claims")
        proxies[cut].heal()
        healed = time.monotonic()
        wait_for(
            lambda: None not in _late_owners(fleet, late).values(),
            RECONNECT_BOUND,
            f"{cut} claims its share of the new nodes",
        )
        took = time.monotonic() - healed
        owners = list(_late_owners(fleet, late).values())
        print(
            f"\n{cut} cut {healed - cut_at:.1f} s; owned its {owners.count(cut)} of "
            f"{len(late)} new nodes {took:.1f} s after the heal (bound {RECONNECT_BOUND:.0f} s)"
        )
        assert set(owners) == set(agents)
        said = fleet.procs[cut].log()[offset:]
        assert "reachable again" in said, said[-3000:]
        # Nothing but the reconnection made it read: its view never changed,
        # and no pass of its own met the cut (it would have retried soon).
        for moved in ("cannot serve", "leaves the ring", " seen by ", "Membership of "):
            assert moved not in said, (moved, log_tails(fleet))
        assert "reconcile failed" not in said, log_tails(fleet)
        assert fleet.fencing_violations() == []
    finally:
        _close(fleet, proxies)
