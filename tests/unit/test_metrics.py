# SPDX-License-Identifier: Apache-2.0
"""Prometheus metrics scraped over HTTP from running services, and JSON logging.

A conductor and a compute agent run in this process as they run in the
embedded mode (SQLite, ``kombu+memory:////``, tooz ``file://``), each with
its metrics endpoint on 127.0.0.1 and a port picked by the system; the
tests scrape the text exposition and check that values move with what the
services did.  JSON logging runs in a child process: oslo.log's setup
replaces the root logger's handlers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import oslo_messaging as messaging
import pytest
from oslo_config import cfg
from oslo_context import context as request_context
from prometheus_client import CollectorRegistry

from compute_agent.metrics import AgentMetrics
from compute_agent.service import AgentService
from conductor.common import conf as common_conf
from conductor.common import rpc
from conductor.common.exception import ConfigurationError, DatabaseUnavailable, InvalidInput
from conductor.common.metrics import ALL_GROUPS, MetricsServer
from conductor.metrics import ConductorMetrics
from conductor.rpcapi import ConductorAPI
from conductor.service import ConductorService
from hashring.membership import Member, MembershipView
from tests.dbutil import migrated
from tests.metricsutil import value

REPO = Path(__file__).resolve().parents[2]
OWNED = "ringfleet_agent_nodes_owned"
PINNED = "ringfleet_agent_nodes_pinned"


def wait_for(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not in time: {what}")
        time.sleep(0.05)


def make_conf(tmp: Path, host: str, metrics: bool = True) -> cfg.ConfigOpts:
    """A service's options, from a file of its own.

    (Not ``set_override``: oslo.config keeps overrides on the option group,
    which the module-level ``OptGroup`` objects share between every
    ``ConfigOpts`` of the process.)
    """
    path = tmp / f"{host}.conf"
    path.write_text(
        "[DEFAULT]\n"
        f"host = {host}\n"
        "transport_url = kombu+memory:////\n"
        "[database]\n"
        f"connection = sqlite:///{tmp / 'ringfleet.db'}\n"
        "[coordination]\n"
        f"backend_url = file://{tmp / 'group'}?timeout=3\n"
        "watch_interval = 0.1\n"
        "[compute_agent]\n"
        "reconcile_interval = 0.5\n"
        "report_interval = 30\n"
        "conductor_timeout = 10\n"
        "[simulated_driver]\n"
        "step_duration = 0.01\n"
        "[metrics]\n"
        f"enabled = {metrics}\n"
        "listen_address = 127.0.0.1\n"
        "port = 0\n"
    )
    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    common_conf.register_opts(conf, common_conf.CONDUCTOR, common_conf.COMPUTE_AGENT)
    conf(["--config-file", str(path)], project="ringfleet", default_config_files=[])
    return conf


def start(service: ConductorService | AgentService) -> threading.Thread:
    thread = threading.Thread(target=service.run, daemon=True)
    thread.start()
    assert service.wait_started(60), "service did not start"
    return thread


@dataclass
class Fleet:
    conductor: ConductorService
    agent: AgentService
    api: ConductorAPI
    transport: Any

    @property
    def conductor_port(self) -> int:
        assert self.conductor.metrics_server.port is not None
        return self.conductor.metrics_server.port

    @property
    def agent_port(self) -> int:
        assert self.agent.metrics_server.port is not None
        return self.agent.metrics_server.port


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tmp = tmp_path_factory.mktemp("metrics")
    migrated(f"sqlite:///{tmp / 'ringfleet.db'}").dispose()
    conductor = ConductorService(make_conf(tmp, "cond-m"))
    agent = AgentService(make_conf(tmp, "agent-m"))
    threads = [start(conductor)]
    client_conf = make_conf(tmp, "client", metrics=False)
    transport = rpc.get_transport(client_conf)
    api = ConductorAPI(transport, timeout=10)
    api.import_nodes(
        [{"name": f"m-{i}", "resource_class": "baremetal", "group": "rack-m"} for i in range(6)]
    )
    threads.append(start(agent))
    try:
        yield Fleet(conductor, agent, api, transport)
    finally:
        agent.terminate()
        conductor.terminate()
        for thread in threads:
            thread.join(30)
        transport.cleanup()


def test_agent_owns_its_nodes_and_says_so(fleet: Fleet) -> None:
    port, host = fleet.agent_port, "agent-m"
    # The only agent: every node is its share, claimed on its first passes.
    wait_for(
        lambda: value(port, "ringfleet_agent_nodes_owned", host=host, group="rack-m") == 6,
        "owned gauge at 6",
    )
    assert value(port, "ringfleet_agent_claims_total", host=host, outcome="granted") == 6
    assert value(port, "ringfleet_agent_nodes_pinned", host=host, group="rack-m") == 0
    assert value(port, "ringfleet_membership_state", host=host, state="connected") == 1
    assert value(port, "ringfleet_membership_state", host=host, state="lost") == 0
    assert value(port, "ringfleet_ring_members", host=host, group=ALL_GROUPS) == 1
    # Converged on its first view: one observation.
    wait_for(
        lambda: value(port, "ringfleet_agent_convergence_seconds_count", host=host) == 1,
        "convergence observed",
    )
    # Its calls to the conductor were timed, and so were the conductor's.
    made = value(
        port,
        "ringfleet_rpc_client_duration_seconds_count",
        host=host,
        method="claim_share",
        outcome="ok",
    )
    assert made is not None and made >= 1
    served = value(
        fleet.conductor_port,
        "ringfleet_rpc_server_duration_seconds_count",
        host="cond-m",
        method="claim_share",
        outcome="ok",
    )
    assert served is not None and served >= made
    # The conductor counts the fleet's problems when scraped: none here.
    port = fleet.conductor_port
    assert value(port, "ringfleet_conductor_database_up", host="cond-m") == 1
    assert value(port, "ringfleet_fleet_problems", host="cond-m", kind="orphaned") == 0
    assert value(port, "ringfleet_fleet_problems", host="cond-m", kind="stuck-build") == 0


def test_a_build_counts_as_active(fleet: Fleet) -> None:
    port = fleet.conductor_port
    wait_for(
        lambda: value(fleet.agent_port, OWNED, host="agent-m", group="rack-m") == 6,
        "agent owns the nodes",
    )
    before = value(port, "ringfleet_conductor_builds_total", host="cond-m", outcome="active")
    assert before == 0  # every outcome is exported from the start
    fleet.api.create_flavor({"name": "m-small", "resource_class": "baremetal"})
    [instance] = fleet.api.build_instances({"flavor": "m-small", "group": "rack-m"})
    wait_for(
        lambda: fleet.api.show_instance(instance["uuid"])["vm_state"] == "active",
        "instance active",
    )
    assert value(port, "ringfleet_conductor_builds_total", host="cond-m", outcome="active") == 1
    assert value(port, "ringfleet_conductor_builds_total", host="cond-m", outcome="error") == 0
    # The conductor's call to the agent, and the agent serving it.
    assert (
        value(
            port,
            "ringfleet_rpc_client_duration_seconds_count",
            host="cond-m",
            method="build_instance",
            outcome="ok",
        )
        == 1
    )
    assert (
        value(
            fleet.agent_port,
            "ringfleet_rpc_server_duration_seconds_count",
            host="agent-m",
            method="build_instance",
            outcome="ok",
        )
        == 1
    )
    assert value(port, "ringfleet_ring_members", host="cond-m", group=ALL_GROUPS) == 1
    # Pinned after the next reconcile.
    wait_for(
        lambda: value(fleet.agent_port, PINNED, host="agent-m", group="rack-m") == 1,
        "pinned gauge at 1",
    )


def test_refused_calls_are_counted_as_refused(fleet: Fleet) -> None:
    with pytest.raises(Exception, match="no-such-node"):
        fleet.api.show_node("no-such-node")
    assert (
        value(
            fleet.conductor_port,
            "ringfleet_rpc_server_duration_seconds_count",
            host="cond-m",
            method="show_node",
            outcome="refused",
        )
        == 1
    )


def test_port_in_use_is_a_configuration_error(tmp_path: Path) -> None:
    taken = MetricsServer(CollectorRegistry())
    conf = make_conf(tmp_path, "x")
    assert taken.start(conf, 0, "x")
    try:
        (tmp_path / "x.conf").write_text(
            f"[metrics]\nenabled = true\nlisten_address = 127.0.0.1\nport = {taken.port}\n"
        )
        conf.reload_config_files()
        with pytest.raises(ConfigurationError) as err:
            MetricsServer(CollectorRegistry()).start(conf, 0, "x")
        assert (err.value.group, err.value.option) == ("metrics", "port")
    finally:
        taken.stop()
    assert taken.port is None


def test_disabled_serves_nothing(tmp_path: Path) -> None:
    server = MetricsServer(CollectorRegistry())
    assert not server.start(make_conf(tmp_path, "x", metrics=False), 0, "x")
    assert server.port is None


def _view(*hosts: str) -> MembershipView:
    return MembershipView(
        members={h: Member(h, 1, 1.0) for h in hosts}, excluded={}, ring_version=1
    )


def test_convergence_counts_only_a_pass_on_the_latest_view() -> None:
    metrics = AgentMetrics("a1")
    first, second = _view("a1"), _view("a1", "a2")
    metrics.view_changed(first)
    metrics.view_changed(second)
    metrics.reconciled(first, converged=True)  # an older view: still pending
    metrics.reconciled(second, converged=False)
    assert (
        metrics.registry.get_sample_value(
            "ringfleet_agent_convergence_seconds_count", {"host": "a1"}
        )
        == 0
    )
    metrics.reconciled(second, converged=True)
    metrics.reconciled(second, converged=True)  # nothing pending any more
    assert (
        metrics.registry.get_sample_value(
            "ringfleet_agent_convergence_seconds_count", {"host": "a1"}
        )
        == 1
    )


def test_ring_members_drops_groups_that_went_away() -> None:
    metrics = AgentMetrics("a1")
    rack1 = MembershipView(
        members={
            "a1": Member("a1", 1, 1.0, {"groups": ["r1"]}),
            "a2": Member("a2", 1, 1.0, {"groups": ["r1", "r2"]}),
        },
        excluded={},
        ring_version=1,
    )
    metrics.ring_members(rack1)
    sample = metrics.registry.get_sample_value
    assert sample("ringfleet_ring_members", {"host": "a1", "group": "r1"}) == 2
    assert sample("ringfleet_ring_members", {"host": "a1", "group": "r2"}) == 1
    metrics.ring_members(_view("a1"))
    assert sample("ringfleet_ring_members", {"host": "a1", "group": "r2"}) is None
    assert sample("ringfleet_ring_members", {"host": "a1", "group": ALL_GROUPS}) == 1


_JSON_LOGGING = """
import sys
from oslo_config import cfg
from oslo_context import context as request_context
from conductor.common import rpc
from conductor.db.engine import Database
from conductor.endpoints.inventory import InventoryEndpoint
from conductor.fleet_view import FleetView
from conductor.common.prepare import prepare_service

conf = cfg.ConfigOpts()
rpc.register_opts(conf)
prepare_service(["test", "--config-file", sys.argv[1]], conf)
db = Database(sys.argv[2])
endpoint = rpc._ExpectedErrors(InventoryEndpoint(db, FleetView(db)))
endpoint.create_node({"request_id": "req-json-test"}, node={
    "name": "json-1", "resource_class": "baremetal"})
"""


def test_json_logging_carries_the_request_id_and_the_node(tmp_path: Path) -> None:
    log = tmp_path / "ringfleet.log"
    config = tmp_path / "ringfleet.conf"
    config.write_text(f"[DEFAULT]\nuse_json = true\nlog_file = {log}\n")
    db_url = f"sqlite:///{tmp_path / 'ringfleet.db'}"
    migrated(db_url).dispose()
    subprocess.run(
        [sys.executable, "-c", _JSON_LOGGING, str(config), db_url],
        cwd=REPO,
        check=True,
        timeout=60,
        capture_output=True,
    )
    records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    [created] = [r for r in records if "created" in r["message"] and "json-1" in r["message"]]
    assert created["name"] == "conductor.endpoints.inventory"
    assert created["context"]["request_id"] == "req-json-test"
    node_uuid = created["args"][0]
    assert node_uuid in created["message"]


def test_fleet_problems_and_database_up_at_scrape_time() -> None:
    metrics = ConductorMetrics("cond-x")
    reachable = [True]
    answers: list[dict[str, int] | Exception] = [
        {"orphaned": 4, "stuck-build": 0},
        DatabaseUnavailable(),  # down
        DatabaseUnavailable("every pooled database connection is busy"),  # busy, not down
    ]

    def counts() -> dict[str, int]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    metrics.watch_fleet(counts, lambda: reachable[0])
    assert len(answers) == 3  # registering queries nothing

    def scrape() -> dict[tuple[str, str | None], float]:
        """One scrape: (name, kind label) -> value, for host cond-x."""
        return {
            (s.name, s.labels.get("kind")): s.value
            for family in metrics.registry.collect()
            for s in family.samples
            if s.name.startswith(("ringfleet_fleet", "ringfleet_conductor_database"))
            and s.labels["host"] == "cond-x"
        }

    assert scrape() == {
        ("ringfleet_fleet_problems", "orphaned"): 4,
        ("ringfleet_fleet_problems", "stuck-build"): 0,
        ("ringfleet_conductor_database_up", None): 1,
    }
    reachable[0] = False
    assert scrape() == {("ringfleet_conductor_database_up", None): 0}
    # A busy pool fails the counts too, but the database is up.
    reachable[0] = True
    assert scrape() == {("ringfleet_conductor_database_up", None): 1}


def test_every_metric_is_documented() -> None:
    text = (REPO / "docs" / "metrics.rst").read_text()
    conductor = ConductorMetrics("c")
    conductor.watch_fleet(lambda: {"orphaned": 0}, lambda: True)
    names = {
        family.name + ("_total" if family.type == "counter" else "")
        for metrics in (AgentMetrics("a"), conductor)
        for family in metrics.registry.collect()
    }
    assert {"ringfleet_fleet_problems", "ringfleet_conductor_database_up"} <= names
    assert names and {n for n in names if f"``{n}``" not in text} == set()


def test_served_calls_run_under_the_callers_request_id() -> None:
    seen: list[str | None] = []

    class Endpoint:
        def ping(self, ctxt: dict[str, Any]) -> str:
            current = request_context.get_current()
            seen.append(current.request_id if current else None)
            return "pong"

    served = rpc._ExpectedErrors(Endpoint())
    assert served.ping({"request_id": "req-1"}) == "pong"
    served.ping({})  # no id from the caller: a fresh one
    assert seen[0] == "req-1"
    assert seen[1] is not None and seen[1].startswith("req-") and seen[1] != "req-1"
    assert request_context.get_current() is None  # nothing left on the thread


def test_served_calls_report_the_cpu_time_their_thread_spent() -> None:
    """What a call costs the process, not how long it waited (a sleep, the
    database): one observation per call, refused ones too."""
    spent: list[tuple[str, float]] = []

    class Endpoint:
        def spin(self, ctxt: dict[str, Any]) -> None:
            started = time.thread_time()
            while time.thread_time() - started < 0.05:
                pass

        def nap(self, ctxt: dict[str, Any]) -> None:
            time.sleep(0.2)

        def refuse(self, ctxt: dict[str, Any]) -> None:
            raise InvalidInput([])

    served = rpc._ExpectedErrors(Endpoint(), observe_cpu=lambda m, s: spent.append((m, s)))
    served.spin({})
    served.nap({})
    with pytest.raises(messaging.ExpectedException):  # InvalidInput, as RPC re-raises it
        served.refuse({})
    assert [method for method, _ in spent] == ["spin", "nap", "refuse"]
    assert spent[0][1] >= 0.05
    assert spent[1][1] < 0.05  # asleep: no CPU
    metrics = ConductorMetrics("c")
    metrics.node_index_read("refresh", 10, 0.25)
    metrics.node_index_read("refresh", 5, 0.5)
    metrics.node_index_read("rebuild", 100, 1.0)
    sample = metrics.registry.get_sample_value
    assert (
        sample("ringfleet_conductor_node_index_rows_total", {"host": "c", "read": "refresh"}) == 15
    )
    assert (
        sample("ringfleet_conductor_node_index_cpu_seconds_total", {"host": "c", "read": "refresh"})
        == 0.75
    )
    assert (
        sample("ringfleet_conductor_node_index_cpu_seconds_total", {"host": "c", "read": "rebuild"})
        == 1.0
    )
    metrics.rpc_served_cpu("spin", 0.25)
    metrics.rpc_served_cpu("spin", 0.5)
    assert (
        metrics.registry.get_sample_value(
            "ringfleet_rpc_server_cpu_seconds_total", {"host": "c", "method": "spin"}
        )
        == 0.75
    )
