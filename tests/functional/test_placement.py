# SPDX-License-Identifier: Apache-2.0
"""Nodes as Placement resource providers, on a real openstack-placement.

The contract cases the unit tests' fake keeps (``tests/placement_contract.py``)
run here on the real server; then a fleet (one conductor, two agents as
processes, real etcd, RabbitMQ and PostgreSQL) reports to it: providers
appear for enrolled nodes, inventory follows maintenance, allocations
follow builds and deletes, a deleted node's provider goes, a ``kill -9``
takeover leaves Placement consistent, and junk from Placement (an HTML page
where JSON was due) and a ``kill -9`` of Placement are survived with one
WARNING per outage.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from oslo_config import cfg

from conductor.common.conf import placement as placement_conf
from conductor.common.placement import provider
from conductor.common.placement.client import PlacementClient
from conductor.rpcapi import ConductorAPI, pages
from tests import placement_contract
from tests.dbutil import migrated
from tests.functional.fleet_harness import Fleet, start_processes
from tests.functional.tcp_proxy import TcpProxy
from tests.harness import wait_for
from tests.harness.servers import server_ctl

AGGREGATE = placement_conf.DEFAULT_AGGREGATE
NODES = 40


#: ``[placement] timeout`` of the fleet's processes (seconds): the default.
REQUEST_TIMEOUT = placement_conf.REQUEST_TIMEOUT


def _placement_options(url: str) -> str:
    """``[placement]`` for the test Placement (noauth2 takes the token ``admin``)."""
    return (
        "[placement]\n"
        "auth_type = admin_token\n"
        "token = admin\n"
        f"endpoint = {url}\n"
        f"endpoint_override = {url}\n"
        "resync_interval = 0\n"
    )


def _client(url: str, workdir: Path) -> PlacementClient:
    config = workdir / "placement-client.conf"
    config.write_text(_placement_options(url))
    conf = cfg.ConfigOpts()
    placement_conf.OPTIONS.register(conf)
    conf(["--config-file", str(config)])
    return PlacementClient.from_conf(conf)


@pytest.mark.parametrize("case", placement_contract.CASES, ids=lambda c: c.__name__)
def test_the_real_placement_keeps_the_contract(
    case: placement_contract.Case, placement_url: str, tmp_path: Path
) -> None:
    case(_client(placement_url, tmp_path))


# -- a fleet reporting -------------------------------------------------------------------


def _drift(api: ConductorAPI, client: PlacementClient) -> list[str]:
    """Every difference between ringfleet's records and Placement, in words."""
    problems = []
    for node in pages(lambda n, m: api.list_nodes(limit=n, marker=m)):
        instance = api.show_instance(node["instance_uuid"]) if node["instance_uuid"] else None
        want = provider.wanted(node, instance, "ringfleet")
        for difference in provider.differences(
            want, provider.read(client, node["uuid"]), AGGREGATE
        ):
            problems.append(f"{node['name']}: {difference}")
    return problems


def _agrees(api: ConductorAPI, client: PlacementClient, what: str, timeout: float = 60) -> None:
    last: list[str] = []

    def check() -> bool:
        last[:] = _drift(api, client)
        return not last

    try:
        wait_for(check, timeout, f"Placement agrees with ringfleet ({what})", step=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; still: {last[:5]}") from None


class JunkServer:
    """Answers every HTTP request on ``port`` with 200 and an HTML page."""

    def __init__(self, port: int) -> None:
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", port))
        self._listener.listen(16)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        body = b"<html><body>502 from a proxy, in a 200</body></html>"
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with conn, contextlib.suppress(OSError):
                conn.recv(65536)
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n"
                    b"Content-Length: " + str(len(body)).encode() + b"\r\n"
                    b"Connection: close\r\n\r\n" + body
                )

    def close(self) -> None:
        self._listener.close()
        self._thread.join(5)


@pytest.fixture
def fleet(
    tmp_path: Path, pg_url: str, transport_url: str, etcd_url: str, placement_url: str
) -> Iterator[tuple[Fleet, TcpProxy]]:
    migrated(pg_url).dispose()
    port = int(placement_url.rsplit(":", 1)[1])
    proxy = TcpProxy(port)  # the agents' way to Placement, which the test breaks
    f = Fleet(
        tmp_path,
        db_url=pg_url,
        transport_url=transport_url,
        etcd_url=etcd_url,
        common_extra=_placement_options(f"http://127.0.0.1:{proxy.port}"),
    )
    try:
        start_processes(f, ["cond-1"], ["agent-1", "agent-2"])
        yield f, proxy
    finally:
        f.close()
        proxy.cut()


def test_placement_shows_every_node_and_instance_through_changes_and_a_takeover(
    fleet: tuple[Fleet, TcpProxy], placement_url: str, transport_url: str, tmp_path: Path
) -> None:
    f, proxy = fleet
    client = _client(placement_url, tmp_path)
    f.api.import_nodes(
        [
            {
                "name": f"pl-node-{i:03d}",
                "resource_class": "baremetal-gold",
                "traits": ["CUSTOM_RAID"],
            }
            for i in range(NODES)
        ]
    )
    f.api.create_flavor({"name": "gold", "resource_class": "baremetal-gold"})
    _agrees(f.api, client, "enrolled")
    members = {p["uuid"] for p in client.list_providers(member_of=AGGREGATE)}
    assert len(members) >= NODES

    f.api.set_node_maintenance("pl-node-000", True, "disk")
    _agrees(f.api, client, "a node in maintenance")
    node = f.api.show_node("pl-node-000")
    assert client.get_inventories(node["uuid"])[1]["CUSTOM_BAREMETAL_GOLD"]["reserved"] == 1

    built = [i["uuid"] for i in f.api.build_instances({"flavor": "gold", "count": 6})]
    wait_for(
        lambda: all(f.api.show_instance(u)["vm_state"] == "active" for u in built),
        60,
        "6 instances active",
    )
    _agrees(f.api, client, "6 instances built")
    for uuid in built:
        _, allocations, rest = client.get_consumer(uuid)
        assert list(allocations.values()) == [{"CUSTOM_BAREMETAL_GOLD": 1}]
        assert rest["consumer_type"] == "INSTANCE"

    for uuid in built[:2]:
        f.api.delete_instance(uuid)
    wait_for(
        lambda: all(f.api.show_instance(u)["vm_state"] == "deleted" for u in built[:2]),
        60,
        "2 instances deleted",
    )
    _agrees(f.api, client, "2 instances deleted")
    assert all(client.get_consumer(u)[1] == {} for u in built[:2])

    # kill -9 one agent: its nodes, pinned ones too, move to the other,
    # which reads their providers back; a change made meanwhile shows.
    f.procs["agent-2"].kill()
    f.api.set_node_maintenance("pl-node-000", False)
    wait_for(lambda: set(f.owned_by()) == {"agent-1"}, 60, "agent-1 owns every node")
    _agrees(f.api, client, "after agent-2's kill -9")

    # The outages below are seen by writes of maintenance to nodes hosting
    # nothing: a node hosting an instance keeps reserved = 0 in maintenance,
    # so its maintenance writes nothing to Placement.
    hosting = {f.api.show_instance(u)["node_uuid"] for u in built[2:]}
    junk_node, down_node = [
        name
        for name in (f"pl-node-{i:03d}" for i in range(1, NODES))
        if f.api.show_node(name)["uuid"] not in hosting
    ][:2]

    # Junk where JSON was due: the pass ends, one WARNING, and once
    # Placement answers again the change made meanwhile is written.
    proxy.cut()
    junk = JunkServer(proxy.port)
    try:
        f.api.set_node_maintenance(junk_node, True, "junk")
        f.procs["agent-1"].wait_log("Placement unavailable", 30)
    finally:
        junk.close()
    proxy.heal()
    _agrees(f.api, client, "after junk")
    log = f.procs["agent-1"].log()
    assert log.count("Placement unavailable") == 1, log[-3000:]
    assert "Placement at" in log and "answers again" in log
    assert f.fencing_violations() == []

    # Placement itself killed (-9) and started again: the change made while
    # it was down is written once it is back.
    server_ctl("kill-placement")
    try:
        f.api.set_node_maintenance(down_node, True, "placement down")
        f.procs["agent-1"].wait_log("answers again", 30)  # the junk outage ended
        try:
            wait_for(
                lambda: f.procs["agent-1"].log().count("Placement unavailable") == 2,
                30 + REQUEST_TIMEOUT,
                "agent-1 sees Placement down",
            )
        except AssertionError as exc:
            # Seen once in a loaded run: say what the agent did meanwhile.
            tail = f.procs["agent-1"].log()[-4000:]
            raise AssertionError(f"{exc}; agent-1's log ends:\n{tail}") from None
    finally:
        server_ctl("start-placement")
    _agrees(f.api, client, "after Placement's kill -9 and start")

    # A node deleted (in maintenance, hosting nothing): its provider goes.
    gone = f.api.show_node(junk_node)["uuid"]
    f.api.delete_node(junk_node)
    wait_for(lambda: client.get_provider(gone) is None, 30, "the deleted node's provider gone")
    _agrees(f.api, client, "a node deleted")

    log = f.procs["agent-1"].log()
    assert log.count("Placement unavailable") == 2, log[-3000:]  # one per outage
    assert "Traceback" not in log

    # The operator's check, as a process: OK now; a provider changed by
    # hand is reported, and the exit status says so.
    config = tmp_path / "cli.conf"
    config.write_text(
        f"[DEFAULT]\ntransport_url = {transport_url}\n" + _placement_options(placement_url)
    )
    healthy = _ringfleet(config, "placement", "check")
    assert (healthy.returncode, healthy.stdout.split(":")[0]) == (0, "OK"), healthy
    # Any node still enrolled (the junk one was deleted above).
    drifting = next(f"pl-node-{i:03d}" for i in range(1, NODES) if f"pl-node-{i:03d}" != junk_node)
    node = f.api.show_node(drifting)
    generation, _ = client.get_traits(node["uuid"])
    client.set_traits(node["uuid"], generation, [])
    drifted = _ringfleet(config, "placement", "check")
    assert drifted.returncode == 1, drifted
    assert drifted.stdout.splitlines() == [
        line for line in drifted.stdout.splitlines() if line.startswith("DRIFT: ")
    ]
    assert f"node {node['uuid']} ({drifting}" in drifted.stdout


def _ringfleet(config: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(Path(sys.executable).with_name("ringfleet")), "--config-file", str(config), *argv],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
