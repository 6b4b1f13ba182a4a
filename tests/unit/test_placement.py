# SPDX-License-Identifier: Apache-2.0
"""The Placement client, a node as a provider, and the agent's reporter, on the in-memory fake."""

from __future__ import annotations

import datetime
import functools
import logging
import uuid as uuid_lib
from typing import Any

import oslo_messaging as messaging
import pytest
from keystoneauth1 import exceptions as ks_exceptions
from oslo_config import cfg

from compute_agent.metrics import AgentMetrics
from compute_agent.placement_report import PlacementReporter
from conductor.common.conf import placement as placement_conf
from conductor.common.exception import (
    ConfigurationError,
    InstanceNotFound,
    NodeNotFound,
    ServiceUnavailable,
)
from conductor.common.placement import provider
from conductor.common.placement.client import PlacementClient
from tests import placement_contract
from tests.fake_placement import FakePlacement
from tests.harness import wait_for

AGG = placement_conf.DEFAULT_AGGREGATE


@pytest.fixture
def fake() -> FakePlacement:
    return FakePlacement()


@pytest.fixture
def client(fake: FakePlacement) -> PlacementClient:
    return PlacementClient(fake, "http://placement.test")


@pytest.mark.parametrize("case", placement_contract.CASES, ids=lambda c: c.__name__)
def test_the_fake_keeps_the_contract(
    case: placement_contract.Case, client: PlacementClient
) -> None:
    case(client)


# -- configuration ------------------------------------------------------------------


def test_the_reporter_is_off_unless_auth_type_is_set() -> None:
    conf = cfg.ConfigOpts()
    conf([])
    assert placement_conf.enabled(conf) is False
    with pytest.raises(ConfigurationError) as missing:
        PlacementClient.from_conf(conf)
    assert "[placement] auth_type" in str(missing.value)
    conf.set_override("auth_type", "none", "placement")
    conf.set_override("endpoint_override", "http://127.0.0.1:1", "placement")
    assert placement_conf.enabled(conf) is True
    assert PlacementClient.from_conf(conf).endpoint == "http://127.0.0.1:1"


# -- a node as a provider ----------------------------------------------------------------


def _node(**fields: Any) -> dict[str, Any]:
    node = {
        "uuid": str(uuid_lib.uuid4()),
        "name": "n-1",
        "resource_class": "baremetal-gold",
        "traits": ["CUSTOM_RAID", "HW_CPU_X86_AVX2"],
        "maintenance": False,
        "provision_state": "available",
        "instance_uuid": None,
        "owner": "agent-1",
    }
    node.update(fields)
    return node


def test_resource_class_names_are_nova_s() -> None:
    assert provider.resource_class_name("baremetal-gold") == "CUSTOM_BAREMETAL_GOLD"
    assert provider.resource_class_name("gpu.large v2") == "CUSTOM_GPU_LARGE_V2"
    assert provider.resource_class_name("CUSTOM_X") == "CUSTOM_CUSTOM_X"  # as Nova does


@pytest.mark.parametrize(
    ("fields", "reserved"),
    [
        ({}, 0),
        ({"maintenance": True}, 1),
        ({"provision_state": "cleaning"}, 1),
        ({"provision_state": "enroll"}, 1),
        ({"provision_state": "error"}, 1),
        # In use: the unit stays given to the instance, even in maintenance.
        ({"provision_state": "active", "instance_uuid": "i-1"}, 0),
        ({"provision_state": "active", "instance_uuid": "i-1", "maintenance": True}, 0),
    ],
)
def test_no_capacity_while_the_node_cannot_take_a_build(
    fields: dict[str, Any], reserved: int
) -> None:
    assert provider.wanted(_node(**fields), None, "ringfleet").reserved == reserved


def test_an_instance_without_a_project_is_the_default_project_s() -> None:
    node = _node(instance_uuid="i-1", provision_state="active")
    mine = provider.wanted(node, {"project_id": "p", "user_id": "u"}, "ringfleet")
    assert (mine.consumer, mine.project_id, mine.user_id) == ("i-1", "p", "u")
    operator = provider.wanted(node, {"project_id": None}, "ringfleet")
    assert (operator.project_id, operator.user_id) == ("ringfleet", "ringfleet")


def test_mend_builds_the_provider_from_nothing(
    client: PlacementClient, fake: FakePlacement
) -> None:
    want = provider.wanted(_node(), None, "ringfleet")
    assert provider.mend(client, want, None, AGG) is None
    shown = provider.read(client, want.uuid)
    assert provider.differences(want, shown, AGG) == []
    assert shown is not None and shown.inventories["CUSTOM_BAREMETAL_GOLD"]["total"] == 1


def test_mend_rereads_a_generation_a_concurrent_writer_moved(
    client: PlacementClient, fake: FakePlacement
) -> None:
    want = provider.wanted(_node(), None, "ringfleet")
    provider.mend(client, want, None, AGG)
    shown = provider.read(client, want.uuid)
    assert shown is not None
    fake.providers[want.uuid].generation += 1  # someone wrote meanwhile
    traits_puts = fake.count("PUT", f"/resource_providers/{want.uuid}/traits")
    changed = provider.wanted(_node(uuid=want.uuid, traits=["CUSTOM_NEW"]), None, "ringfleet")
    provider.mend(client, changed, shown, AGG)
    assert fake.providers[want.uuid].traits == {"CUSTOM_NEW"}
    assert fake.count("PUT", f"/resource_providers/{want.uuid}/traits") == traits_puts + 2


def test_a_provider_created_meanwhile_is_read_and_mended_not_overwritten(
    client: PlacementClient, fake: FakePlacement
) -> None:
    want = provider.wanted(_node(), None, "ringfleet")
    created = client.create_provider(want.uuid, "by-hand")  # between our read and create
    operators = str(uuid_lib.uuid4())
    client.set_aggregates(want.uuid, int(created["generation"]), [operators])
    assert provider.mend(client, want, None, AGG) is None
    assert fake.providers[want.uuid].aggregates == {operators, AGG}
    assert provider.differences(want, provider.read(client, want.uuid), AGG) == []


def test_a_name_another_provider_has_falls_back_to_the_uuid(
    client: PlacementClient, fake: FakePlacement, caplog: pytest.LogCaptureFixture
) -> None:
    client.create_provider(str(uuid_lib.uuid4()), "n-1")  # e.g. Nova's
    want = provider.wanted(_node(), None, "ringfleet")
    with caplog.at_level(logging.WARNING):
        provider.mend(client, want, None, AGG)
    assert fake.providers[want.uuid].name == want.uuid
    assert "another provider named 'n-1'" in caplog.text


# -- the agent's reporter -----------------------------------------------------------------


class Conductor:
    """The conductor calls the reporter makes, over in-memory records.

    Its change feed (``list_node_share`` by owner) finds the records a test
    changed by comparing each with what it was at the previous call, on a
    clock that moves 10 s per call (more than the reporter's overlap).
    """

    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, Any]] = {}
        self.instances: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []
        self.shown: list[str] = []  # the nodes asked for by uuid
        self.feed = True  # False: a conductor older than 1.15, without the feed
        self.by_uuid = True  # False: older than 1.17, no list_nodes by uuids
        self._clock = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
        self._seen: dict[str, tuple[str, datetime.datetime]] = {}

    def delete(self, uuid: str) -> None:
        del self.nodes[uuid]

    def list_nodes(
        self, filters: dict[str, Any] | None = None, limit: int = 1000, marker: str | None = None
    ) -> list[dict[str, Any]]:
        filters = dict(filters or {})
        uuids = filters.pop("uuids", None)
        if uuids is not None:
            self.calls.append("list_nodes by uuid")
            if not self.by_uuid:
                raise messaging.RemoteError("UnsupportedVersion", "1.17", "")
            self.shown.extend(uuids)
        else:
            self.calls.append("list_nodes")
        found = sorted(
            (
                n
                for n in self.nodes.values()
                if all(
                    n["owner"] == v
                    if k == "owner"
                    else (n["instance_uuid"] is not None) == v
                    if k == "pinned"
                    else n[k] == v
                    for k, v in filters.items()
                )
                and (uuids is None or n["uuid"] in uuids)
            ),
            key=lambda n: n["uuid"],
        )
        if marker is not None:
            found = [n for n in found if n["uuid"] > marker]
        return [dict(n) for n in found[:limit]]

    def list_node_share(
        self,
        member: str,
        *,
        since: str | None = None,
        marker: str | None = None,
        limit: int = 5000,
    ) -> dict[str, Any] | None:
        self.calls.append("list_node_share")
        if not self.feed:
            return None
        # A change the test made since the previous call is stamped 1 s
        # after that call; this call answers 10 s after it.
        changed_at = self._clock + datetime.timedelta(seconds=1)
        self._clock += datetime.timedelta(seconds=10)
        for uuid, node in self.nodes.items():
            snapshot = repr(sorted(node.items()))
            if self._seen.get(uuid, ("", None))[0] != snapshot:
                self._seen[uuid] = (snapshot, changed_at)
        after = None if since is None else datetime.datetime.fromisoformat(since)
        changed = [
            {"uuid": uuid}
            for uuid, node in sorted(self.nodes.items())
            if node["owner"] == member and (after is None or self._seen[uuid][1] > after)
        ]
        return {"nodes": changed[:limit], "as_of": self._clock.isoformat(), "next": None}

    def can_send_version(self, version: str) -> bool:
        return True

    def show_instance(self, instance: str) -> dict[str, Any]:
        self.calls.append("show_instance")
        if instance not in self.instances:
            raise InstanceNotFound(instance)
        return dict(self.instances[instance])

    def show_node(self, node: str) -> dict[str, Any]:
        self.calls.append("show_node")
        self.shown.append(node)
        if node not in self.nodes:
            raise NodeNotFound(node)
        return dict(self.nodes[node])


def _conf() -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    placement_conf.OPTIONS.register(conf)
    conf([])
    return conf


class Agent:
    def __init__(self, host: str, client: PlacementClient, conductor: Conductor) -> None:
        self.acting = True
        self.metrics = AgentMetrics(host)
        #: What the agent's ownership holds: what it claimed, and keeps
        #: holding after the node is deleted (nothing tells it).
        self.held: set[str] = set()

        def held() -> set[str]:
            self.held |= {u for u, n in conductor.nodes.items() if n["owner"] == host}
            self.held -= {u for u, n in conductor.nodes.items() if n["owner"] != host}
            return set(self.held)

        self.reporter = PlacementReporter(
            host,
            _conf(),
            client,
            conductor,  # type: ignore[arg-type]
            interval=lambda: 60.0,
            can_act=lambda: self.acting,
            held=held,
            holds=lambda node: node in held(),
            metrics=self.metrics,
        )


@pytest.fixture
def conductor() -> Conductor:
    return Conductor()


def _enroll(conductor: Conductor, n: int, owner: str = "agent-1") -> list[str]:
    uuids = []
    for i in range(n):
        node = _node(name=f"node-{owner}-{i}", owner=owner)
        conductor.nodes[node["uuid"]] = node
        uuids.append(node["uuid"])
    return uuids


def _agree(client: PlacementClient, conductor: Conductor, uuids: list[str]) -> None:
    """Placement shows each node as its record says."""
    for uuid in uuids:
        node = conductor.nodes[uuid]
        instance = conductor.instances.get(node["instance_uuid"] or "")
        want = provider.wanted(node, instance, "ringfleet")
        assert provider.differences(want, provider.read(client, uuid), AGG) == [], uuid


def test_a_pass_reports_every_owned_node_and_then_only_changes(
    client: PlacementClient, fake: FakePlacement, conductor: Conductor
) -> None:
    mine = _enroll(conductor, 12)
    theirs = _enroll(conductor, 3, owner="agent-2")
    agent = Agent("agent-1", client, conductor)
    first = agent.reporter.run_pass()
    assert (first.owned, first.mended) == (12, 12)
    _agree(client, conductor, mine)
    assert not set(theirs) & set(fake.providers)
    before = len(fake.requests)
    second = agent.reporter.run_pass()
    assert (second.checked, second.mended) == (0, 0)
    assert len(fake.requests) == before  # nothing changed: Placement not called

    conductor.nodes[mine[0]]["maintenance"] = True
    third = agent.reporter.run_pass()
    assert (third.checked, third.mended) == (1, 1)
    assert fake.providers[mine[0]].inventories["CUSTOM_BAREMETAL_GOLD"]["reserved"] == 1
    _agree(client, conductor, mine)


def test_builds_of_a_pass_are_allocated_in_one_request_and_deletes_give_the_unit_back(
    client: PlacementClient, fake: FakePlacement, conductor: Conductor
) -> None:
    mine = _enroll(conductor, 5)
    agent = Agent("agent-1", client, conductor)
    agent.reporter.run_pass()
    for i, uuid in enumerate(mine[:3]):
        instance = str(uuid_lib.uuid4())
        conductor.instances[instance] = {"uuid": instance, "project_id": f"p{i}", "user_id": "u"}
        conductor.nodes[uuid].update(instance_uuid=instance, provision_state="active")
    posts = fake.count("POST", "/allocations")
    assert agent.reporter.run_pass().allocations == 3
    assert fake.count("POST", "/allocations") == posts + 1
    assert fake.count("GET", "/allocations/") == 0  # new consumers: nothing to read
    _agree(client, conductor, mine)
    assert {c.project_id for c in fake.consumers.values()} == {"p0", "p1", "p2"}

    gone = conductor.nodes[mine[0]]["instance_uuid"]
    conductor.nodes[mine[0]].update(instance_uuid=None, provision_state="cleaning")
    agent.reporter.run_pass()
    assert gone not in fake.consumers
    assert fake.providers[mine[0]].inventories["CUSTOM_BAREMETAL_GOLD"]["reserved"] == 1
    conductor.nodes[mine[0]]["provision_state"] = "available"
    agent.reporter.run_pass()
    _agree(client, conductor, mine)


def test_a_takeover_reads_the_providers_back_and_mends_them(
    client: PlacementClient, fake: FakePlacement, conductor: Conductor
) -> None:
    nodes = _enroll(conductor, 6)
    first = Agent("agent-1", client, conductor)
    first.reporter.run_pass()
    # agent-1 dies; while nobody owned them, two records changed, and
    # someone wrote a provider by hand.
    conductor.nodes[nodes[0]]["maintenance"] = True
    instance = str(uuid_lib.uuid4())
    conductor.instances[instance] = {"uuid": instance, "project_id": "p", "user_id": "u"}
    conductor.nodes[nodes[1]].update(instance_uuid=instance, provision_state="active")
    fake.providers[nodes[2]].traits.clear()
    for node in conductor.nodes.values():
        node["owner"] = "agent-2"
    second = Agent("agent-2", client, conductor)
    result = second.reporter.run_pass()
    # All six read back; the three that differed written.
    assert (result.checked, result.mended, result.allocations) == (6, 3, 1)
    _agree(client, conductor, nodes)


def test_a_node_released_is_forgotten_and_a_deleted_one_loses_its_provider(
    client: PlacementClient, fake: FakePlacement, conductor: Conductor
) -> None:
    kept, released, deleted = _enroll(conductor, 3)
    conductor.nodes[deleted]["maintenance"] = True
    agent = Agent("agent-1", client, conductor)
    agent.reporter.run_pass()
    conductor.nodes[released]["owner"] = "agent-2"
    conductor.delete(deleted)
    conductor.shown.clear()
    result = agent.reporter.run_pass()
    assert result.deleted == 1
    assert deleted not in fake.providers
    assert released in fake.providers and kept in fake.providers
    # Only the node that could have been deleted was looked up: not the
    # released one, nor the unchanged one.
    assert conductor.shown == [deleted]


def test_nothing_is_written_while_the_agent_may_not_act(
    client: PlacementClient, fake: FakePlacement, conductor: Conductor
) -> None:
    _enroll(conductor, 2)
    agent = Agent("agent-1", client, conductor)
    agent.acting = False
    agent.reporter.start()
    try:
        agent.reporter.wake()
        agent.reporter.wake()
    finally:
        agent.reporter.stop()
    assert fake.requests == []


def test_placement_down_or_answering_junk_ends_the_pass_with_one_warning(
    client: PlacementClient,
    fake: FakePlacement,
    conductor: Conductor,
    caplog: pytest.LogCaptureFixture,
) -> None:
    mine = _enroll(conductor, 3)
    agent = Agent("agent-1", client, conductor)
    caplog.set_level(logging.INFO)
    fake.fail_next = [ks_exceptions.ConnectFailure("refused")] * 3
    with pytest.raises(ServiceUnavailable):
        agent.reporter.run_pass()
    fake.fail_next = [(200, "<html>proxy error</html>")] * 3
    with pytest.raises(ServiceUnavailable, match="not JSON"):
        agent.reporter.run_pass()
    fake.fail_next = [(502, "<html>bad gateway</html>")]
    with pytest.raises(ServiceUnavailable):
        agent.reporter.run_pass()
    agent.reporter.run_pass()
    _agree(client, conductor, mine)
    outage = [r for r in caplog.records if r.name == "conductor.common.service_outage"]
    assert [r.levelno for r in outage] == [logging.WARNING, logging.INFO]


def test_a_refusal_is_said_once_and_not_retried_until_the_record_changes(
    client: PlacementClient,
    fake: FakePlacement,
    conductor: Conductor,
    caplog: pytest.LogCaptureFixture,
) -> None:
    (uuid,) = _enroll(conductor, 1)
    agent = Agent("agent-1", client, conductor)
    fake.fail_next = [(400, {"errors": [{"status": 400, "detail": "bad name"}]})]
    with caplog.at_level(logging.WARNING):
        assert agent.reporter.run_pass().refused == 1
        before = len(fake.requests)
        assert agent.reporter.run_pass().checked == 0
    assert len(fake.requests) == before
    assert caplog.text.count("bad name") == 1
    conductor.nodes[uuid]["name"] = "renamed"
    agent.reporter.run_pass()
    _agree(client, conductor, [uuid])


def test_passes_after_the_first_read_only_the_changed_nodes(
    client: PlacementClient, fake: FakePlacement, conductor: Conductor
) -> None:
    mine = _enroll(conductor, 30)
    agent = Agent("agent-1", client, conductor)
    agent.reporter.run_pass()
    agent.reporter.run_pass()  # the first read's own window, re-read once
    conductor.calls.clear()
    conductor.shown.clear()
    conductor.nodes[mine[7]]["maintenance"] = True
    assert agent.reporter.run_pass().mended == 1
    assert "list_nodes" not in conductor.calls  # no listing of the 30
    assert conductor.shown == [mine[7]]
    _agree(client, conductor, mine)

    conductor.by_uuid = False  # a 1.15 conductor: a feed, no reads by uuid
    conductor.calls.clear()
    conductor.nodes[mine[8]]["maintenance"] = True
    agent.reporter.run_pass()
    assert "list_nodes" in conductor.calls  # the agent's nodes listed
    _agree(client, conductor, mine)

    conductor.feed = False  # older still: every pass lists them all
    conductor.calls.clear()
    conductor.nodes[mine[9]]["maintenance"] = True
    agent.reporter.run_pass()
    assert "list_nodes" in conductor.calls
    _agree(client, conductor, mine)


def test_a_node_deleted_while_still_held_loses_its_provider(
    client: PlacementClient, fake: FakePlacement, conductor: Conductor
) -> None:
    kept, deleted = _enroll(conductor, 2)
    conductor.nodes[deleted]["maintenance"] = True
    agent = Agent("agent-1", client, conductor)
    agent.reporter.run_pass()
    agent.held = {kept, deleted}  # the ownership does not know of deletes
    conductor.delete(deleted)
    conductor.shown.clear()
    assert agent.reporter.run_pass().deleted == 1
    assert deleted not in fake.providers and kept in fake.providers
    assert deleted in conductor.shown
    conductor.shown.clear()
    agent.reporter.run_pass()
    assert conductor.shown == []  # still held, known gone: not asked for again


def test_changes_seen_by_a_pass_placement_failed_are_written_by_the_next(
    client: PlacementClient, fake: FakePlacement, conductor: Conductor
) -> None:
    mine = _enroll(conductor, 4)
    agent = Agent("agent-1", client, conductor)
    agent.reporter.run_pass()
    agent.reporter.run_pass()
    conductor.nodes[mine[2]]["maintenance"] = True
    fake.fail_next = [ks_exceptions.ConnectFailure("refused")]
    with pytest.raises(ServiceUnavailable):
        agent.reporter.run_pass()
    agent.reporter.run_pass()  # the feed has moved on: the change must not be lost
    _agree(client, conductor, mine)


def test_drift_is_mended_by_the_resync_not_by_ordinary_passes(
    client: PlacementClient, fake: FakePlacement, conductor: Conductor
) -> None:
    mine = _enroll(conductor, 3)
    agent = Agent("agent-1", client, conductor)
    agent.reporter.run_pass()
    fake.providers[mine[1]].traits.clear()  # changed by hand
    agent.reporter.run_pass()
    assert fake.providers[mine[1]].traits == set()  # memory says it is right
    agent.reporter.start()
    try:
        agent.reporter.resync_soon()  # what a SIGHUP asks for
        wait_for(lambda: fake.providers[mine[1]].traits, 10, "the traits written back")
    finally:
        agent.reporter.stop()
    _agree(client, conductor, mine)


def test_the_passes_are_counted_and_a_failing_one_shows(
    client: PlacementClient, fake: FakePlacement, conductor: Conductor
) -> None:
    _enroll(conductor, 3)
    agent = Agent("agent-1", client, conductor)

    def sample(name: str, **labels: str) -> float | None:
        return agent.metrics.registry.get_sample_value(name, {"host": "agent-1", **labels})

    fake.fail_next = [ks_exceptions.ConnectFailure("refused")]
    agent.reporter.start()
    try:
        agent.reporter.wake()
        wait_for(lambda: sample("ringfleet_agent_placement_up") == 0, 10, "up 0")
        agent.reporter.wake()
        wait_for(lambda: sample("ringfleet_agent_placement_up") == 1, 10, "up 1")
    finally:
        agent.reporter.stop()
    assert sample("ringfleet_agent_placement_writes_total", kind="providers") == 3
    assert sample("ringfleet_agent_placement_writes_total", kind="refused") == 0


def _allocated_elsewhere(
    client: PlacementClient, provider_uuid: str, name: str, resource_class: str, amount: int
) -> str:
    """A provider written by someone else (a Nova), with ``amount`` of its
    ``resource_class`` allocated to a new consumer; that consumer."""
    created = client.create_provider(provider_uuid, name)
    inventory = {resource_class: {"total": max(amount, 1), "reserved": 0}}
    client.set_inventories(provider_uuid, int(created["generation"]), inventory)
    consumer = str(uuid_lib.uuid4())
    entry = {
        "allocations": {provider_uuid: {"resources": {resource_class: amount}}},
        "project_id": "p",
        "user_id": "u",
        "consumer_generation": None,
        "consumer_type": "INSTANCE",
    }
    client.put_allocations({consumer: entry})
    return consumer


def test_an_allocation_of_no_ringfleet_instance_is_left_to_its_owner(
    client: PlacementClient,
    fake: FakePlacement,
    conductor: Conductor,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A node imported from Nova's ironic driver hosts a Nova instance:
    ringfleet has no instance for it, and must not free Nova's allocation."""
    (uuid,) = _enroll(conductor, 1)
    conductor.nodes[uuid].update(provision_state="error")
    nova = _allocated_elsewhere(client, uuid, uuid, "CUSTOM_BAREMETAL_GOLD", 1)
    agent = Agent("agent-1", client, conductor)
    with caplog.at_level(logging.WARNING):
        agent.reporter.run_pass()
    assert nova in fake.consumers
    assert fake.providers[uuid].name == "node-agent-1-0"
    assert fake.providers[uuid].inventories["CUSTOM_BAREMETAL_GOLD"]["reserved"] == 1
    assert f"allocation of {nova}, which is no ringfleet instance" in caplog.text


def test_a_conductor_outage_is_one_warning_and_one_info(
    client: PlacementClient,
    fake: FakePlacement,
    conductor: Conductor,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _enroll(conductor, 2)
    agent = Agent("agent-1", client, conductor)
    calls = {"n": 0}
    real = conductor.list_node_share

    def down(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] <= 4:
            raise messaging.MessagingTimeout("no reply on topic ringfleet-conductor")
        return real(*args, **kwargs)

    def asked(times: int) -> bool:
        return calls["n"] >= times

    monkeypatch.setattr(conductor, "list_node_share", down)
    caplog.set_level(logging.DEBUG, logger="compute_agent.placement_report")
    agent.reporter.start()
    try:
        # A pass per wake: woken again only once the pass before has asked
        # (wakes that come faster are one pass, however many).
        for n in range(1, 6):
            agent.reporter.wake()
            wait_for(functools.partial(asked, n), 30, f"pass {n}")
        wait_for(lambda: agent.reporter.last and agent.reporter.last.complete, 30, "a pass")
    finally:
        agent.reporter.stop()
    levels = [
        (r.levelno, r.getMessage().split(":")[1].strip())
        for r in caplog.records
        if r.levelno >= logging.INFO
        and r.name == "compute_agent.placement_report"
        and "providers written" not in r.getMessage()
    ]
    assert levels == [
        (logging.WARNING, "Placement pass failed"),
        (logging.INFO, "Placement passes complete again"),
    ], levels


def test_a_new_instance_that_has_allocations_elsewhere_keeps_them(
    client: PlacementClient, fake: FakePlacement, conductor: Conductor
) -> None:
    """A build's allocation is written optimistically (no read of the
    consumer first); a consumer Placement knows already is refused as stale,
    then read and written with what it has elsewhere."""
    (uuid,) = _enroll(conductor, 1)
    agent = Agent("agent-1", client, conductor)
    agent.reporter.run_pass()
    other = str(uuid_lib.uuid4())
    instance = _allocated_elsewhere(client, other, "a-disk-array", "DISK_GB", 10)
    conductor.instances[instance] = {"uuid": instance, "project_id": "p", "user_id": "u"}
    conductor.nodes[uuid].update(instance_uuid=instance, provision_state="active")
    gets = fake.count("GET", f"/allocations/{instance}")
    assert agent.reporter.run_pass().allocations == 1
    assert fake.consumers[instance].allocations == {
        other: {"DISK_GB": 10},
        uuid: {"CUSTOM_BAREMETAL_GOLD": 1},
    }
    assert fake.count("GET", f"/allocations/{instance}") == gets + 1  # after the refusal only


def test_a_node_released_while_a_pass_runs_is_not_written(
    client: PlacementClient, fake: FakePlacement, conductor: Conductor
) -> None:
    kept, released = _enroll(conductor, 2)
    agent = Agent("agent-1", client, conductor)
    # The pass read both as ours; the ownership released one since.
    agent.reporter._holds = lambda node: node != released
    agent.reporter.run_pass()
    assert kept in fake.providers and released not in fake.providers
    # Held after all (a claim recorded late): the next pass writes it.
    agent.reporter._holds = lambda node: True
    agent.reporter.run_pass()
    assert released in fake.providers


def test_the_changed_nodes_of_a_pass_are_read_in_one_call(
    client: PlacementClient, fake: FakePlacement, conductor: Conductor
) -> None:
    mine = _enroll(conductor, 160)
    agent = Agent("agent-1", client, conductor)
    agent.reporter.run_pass()
    for uuid in mine[:150]:
        conductor.nodes[uuid]["maintenance"] = True
    conductor.calls.clear()
    assert agent.reporter.run_pass().mended == 150
    assert conductor.calls.count("list_nodes by uuid") == 1
    assert "show_node" not in conductor.calls and "list_nodes" not in conductor.calls
    _agree(client, conductor, mine)


def test_a_node_deleted_and_imported_again_is_reported_again(
    client: PlacementClient, fake: FakePlacement, conductor: Conductor
) -> None:
    kept, again = _enroll(conductor, 2)
    conductor.nodes[again]["maintenance"] = True
    agent = Agent("agent-1", client, conductor)
    agent.reporter.run_pass()
    agent.held = {kept, again}  # the ownership does not know of deletes
    record = conductor.nodes[again]
    conductor.delete(again)
    assert agent.reporter.run_pass().deleted == 1
    conductor.nodes[again] = {**record, "maintenance": False}  # the same uuid, imported again
    agent.reporter.run_pass()
    agent.reporter.run_pass()  # and a pass in which it did not change
    _agree(client, conductor, [kept, again])
    # Still ours to follow: a second delete takes its provider too.
    conductor.nodes[again]["maintenance"] = True
    agent.reporter.run_pass()
    conductor.delete(again)
    assert agent.reporter.run_pass().deleted == 1
    assert again not in fake.providers
