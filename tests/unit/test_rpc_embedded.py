# SPDX-License-Identifier: Apache-2.0
"""A real oslo.messaging round trip, in-process, over ``kombu+memory:////``.

The conductor's endpoints are served as conductor/service.py serves them
(real build workers and scheduler; the membership is a stub whose state the
fleet view reads), and called through the reference client
:class:`conductor.rpcapi.ConductorAPI`.  Our exceptions must arrive as
themselves, with their attributes, never as an opaque ``RemoteError``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import oslo_messaging as messaging
import pytest
from oslo_config import cfg
from oslo_context import context as request_context

from compute_agent.rpcapi import ComputeAPI
from conductor.common import deep_messages, rpc
from conductor.common.exception import (
    Conflict,
    DuplicateNode,
    FlavorNotFound,
    InvalidInput,
    NodeNotFound,
    NotUpgraded,
    ServiceUnavailable,
)
from conductor.db.engine import Database
from conductor.endpoints.agents import AgentsEndpoint
from conductor.endpoints.fleet import FleetEndpoint
from conductor.endpoints.instances import InstancesEndpoint
from conductor.endpoints.inventory import InventoryEndpoint
from conductor.fleet_view import FleetView
from conductor.lifecycle import BuildLifecycle
from conductor.rpcapi import API_VERSION, ConductorAPI
from conductor.scheduler.scheduler import Scheduler
from hashring.membership import Member, MembershipView, State
from hashring.ring import Ring
from tests.dbutil import migrated


class StubMembership:
    def __init__(self) -> None:
        self.state = State.CONNECTED
        self.backend_failing = False


def _view(*hosts: str) -> MembershipView:
    return MembershipView(
        members={h: Member(member_id=h, ring_version=1, weight=1.0) for h in hosts},
        excluded={},
        ring_version=1,
    )


@dataclass
class Served:
    api: ConductorAPI
    db: Database
    fleet: FleetView
    membership: StubMembership


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    path: Path = tmp_path_factory.mktemp("rpc") / "ringfleet.db"
    db = migrated(f"sqlite:///{path}")
    fleet = FleetView(db)
    membership = StubMembership()
    fleet.attach(membership)  # type: ignore[arg-type]
    fleet.on_change(_view("agent-1", "agent-2"))
    builds = BuildLifecycle(db, Scheduler(db), fleet, workers=2)
    endpoints = [
        InventoryEndpoint(db, fleet),
        InstancesEndpoint(db, builds),
        FleetEndpoint(db, fleet, "cond-1"),
        AgentsEndpoint(db, fleet, lambda: 3600.0, builds=builds),
    ]
    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    conf.set_override("transport_url", "kombu+memory:////")
    transport = rpc.get_transport(conf)
    server = rpc.get_server(transport, rpc.CONDUCTOR_TOPIC, "cond-1", endpoints)
    builds.start()
    server.start()
    try:
        yield Served(ConductorAPI(transport, timeout=10), db, fleet, membership)
    finally:
        server.stop()
        server.wait()
        builds.stop()
        transport.cleanup()
        db.dispose()


def _wait_for(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


def _spec(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "resource_class": "baremetal", **extra}


def test_import_list_and_show_nodes(served: Served) -> None:
    api = served.api
    out = api.import_nodes([_spec(f"imp-{i}", group="rpc") for i in range(5)])
    assert out["created"] == 5
    listed = api.list_nodes(filters={"group": "rpc"})
    assert sorted(n["uuid"] for n in listed) == sorted(out["uuids"])
    shown = api.show_node("imp-3")
    assert shown["name"] == "imp-3" and shown["uuid"] in out["uuids"]
    assert api.show_node(shown["uuid"]) == shown


class _ContextRecorder(logging.Handler):
    """Records the request ids current in the thread that logs each record,
    for records of other threads than the caller's (the server's)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.caller = threading.get_ident()
        self.seen: list[tuple[str | None, str | None]] = []

    def emit(self, record: logging.LogRecord) -> None:
        current = request_context.get_current()
        if current is not None and record.thread != self.caller:
            self.seen.append((current.request_id, current.global_request_id))


def test_the_callers_request_ids_are_the_servers_logging_context(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    recorder = _ContextRecorder()
    logging.getLogger().addHandler(recorder)
    local, origin = f"req-{uuidlib.uuid4()}", f"req-{uuidlib.uuid4()}"
    request_context.RequestContext(request_id=local, global_request_id=origin, overwrite=True)
    try:
        served.api.import_nodes([_spec("global-id-0")])
    finally:
        vars(request_context._request_store).pop("context", None)
        logging.getLogger().removeHandler(recorder)
    # The server logged the import under both ids of the caller.
    assert (local, origin) in recorder.seen


def test_invalid_input_arrives_as_itself_with_its_fields(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    api = served.api
    before = api.list_nodes()
    with pytest.raises(InvalidInput) as err:
        api.import_nodes([_spec("bad-0"), {"name": "bad-1", "resource_class": ""}, _spec("bad-0")])
    assert not isinstance(err.value, messaging.RemoteError)
    assert err.value.fields == ["nodes[1].resource_class", "nodes[2].name"]
    assert err.value.errors[0].reason.startswith("must match")
    assert "nodes[1].resource_class" in str(err.value)
    assert api.list_nodes() == before  # nothing imported

    with pytest.raises(InvalidInput) as err:
        api.list_nodes(filters={"colour": "red", "maintenance": "yes"})
    assert err.value.fields == ["filters.colour", "filters.maintenance"]
    # Refused input is the caller's business: no ERROR with a traceback on the server.
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_control_characters_are_refused_in_every_string_of_every_call(served: Served) -> None:
    """One rule, at the RPC boundary (issue 16): NUL reached PostgreSQL (a
    server error) or was stored in properties and extra specs."""
    api = served.api
    nodes_before, flavors_before = api.list_nodes(), api.list_flavors()
    [node] = nodes_before[:1] or [api.create_node(_spec("ctl-0"))]
    nodes_before = api.list_nodes()
    refused = [
        (lambda: api.set_node_maintenance(node["uuid"], True, "disk\x00dead"), ["reason"]),
        (lambda: api.set_node_maintenance("no-such\x00node", True, "x"), ["node"]),
        (lambda: api.list_nodes(filters={"owner": "a\x00"}), ["filters.owner"]),
        (
            lambda: api.create_node(
                _spec("ctl-1", properties={"ra\x00ck": "1", "pdu": "a\x1b[2J"})
            ),
            ["node.properties", "node.properties.pdu"],
        ),
        (
            lambda: api.create_flavor(
                {"name": "ctl", "resource_class": "baremetal", "extra_specs": {"k": "\x7f"}}
            ),
            ["flavor.extra_specs.k"],
        ),
        (
            lambda: api.import_nodes([_spec("ctl-2", maintenance_reason="\x00")]),
            ["nodes[0].maintenance_reason"],
        ),
    ]
    for call, fields in refused:
        with pytest.raises(InvalidInput) as err:
            call()
        assert err.value.fields == fields
        assert all("control characters" in e.reason for e in err.value.errors)
    assert api.list_nodes() == nodes_before and api.list_flavors() == flavors_before
    # Tab, line feed and carriage return are text.
    api.set_node_maintenance(node["uuid"], True, "line one\n\tline two\r\n")
    assert api.show_node(node["uuid"])["maintenance_reason"].startswith("line one\n")
    api.set_node_maintenance(node["uuid"], False, None)


def test_lone_surrogates_are_refused_in_every_string_of_every_call(served: Served) -> None:
    """The same rule (issue 28): JSON's "\\ud800" decodes to a lone surrogate,
    no Unicode text.  In a maintenance reason or an instance name PostgreSQL
    refused it (a server error); in properties, extra specs and hints it was
    stored and handed back as invalid Unicode."""
    api = served.api
    nodes_before, flavors_before = api.list_nodes(), api.list_flavors()
    [node] = nodes_before[:1] or [api.create_node(_spec("sur-0"))]
    nodes_before = api.list_nodes()
    refused = [
        (lambda: api.set_node_maintenance(node["uuid"], True, "disk \ud800"), ["reason"]),
        (
            lambda: api.create_node(_spec("sur-1", maintenance_reason="\udfff")),
            ["node.maintenance_reason"],
        ),
        (
            lambda: api.create_node(
                _spec("sur-2", properties={"rack\udc80": "1", "pdu": "\ud800"})
            ),
            ["node.properties", "node.properties.pdu"],
        ),
        (
            lambda: api.create_flavor(
                {"name": "sur", "resource_class": "baremetal", "extra_specs": {"k": "\ud83d"}}
            ),
            ["flavor.extra_specs.k"],
        ),
        (
            lambda: api.build_instances(
                {"flavor": "sur", "name": "vm-\ud800", "scheduler_hints": {"h": "\udfff"}}
            ),
            ["request.name", "request.scheduler_hints.h"],
        ),
    ]
    for call, fields in refused:
        with pytest.raises(InvalidInput) as err:
            call()
        assert err.value.fields == fields
        assert all("lone surrogates" in e.reason for e in err.value.errors)
    assert api.list_nodes() == nodes_before and api.list_flavors() == flavors_before
    # A character outside the BMP, as its JSON surrogate pair, is text.
    api.set_node_maintenance(node["uuid"], True, json.loads('"disk \\ud83d\\udca5"'))
    assert api.show_node(node["uuid"])["maintenance_reason"] == "disk \U0001f4a5"
    api.set_node_maintenance(node["uuid"], False, None)


def test_client_mistakes_are_refused_with_one_info_line_not_an_error(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    """Bad keyword arguments, an unknown method, a version the server does not
    serve: the caller gets the error, the server logs no ERROR (issue 16)."""
    client = served.api.client
    caplog.set_level(logging.DEBUG)
    with pytest.raises(InvalidInput) as err:
        client.prepare(version="1.0").call({}, "show_node", node="x", colour="red")
    assert err.value.fields == ["colour"]
    with pytest.raises(InvalidInput) as err:
        client.prepare(version="1.0").call({}, "show_node")
    assert err.value.fields == ["node"]
    with pytest.raises(messaging.RemoteError) as remote:
        client.prepare(version="1.0").call({}, "no_such_method")
    assert remote.value.exc_type == "NoSuchMethod"
    with pytest.raises(messaging.RemoteError) as remote:
        client.prepare(version="9.0").call({}, "show_node", node="x")
    assert remote.value.exc_type == "UnsupportedVersion"
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
        # kombu's in-memory transport has no host: a connection the pool adds
        # (now and then, as calls overlap) warns so.  Not the server's.
        r.getMessage()
        for r in caplog.records
        if r.name == "kombu.connection" and r.getMessage().startswith("No hostname was supplied")
    ]
    refused = [r for r in caplog.records if "RPC call refused" in r.getMessage()]
    assert [r.levelno for r in refused] == [logging.INFO, logging.INFO]


def test_arguments_nested_too_deep_are_refused(served: Served) -> None:
    deep: Any = "x"
    for _ in range(40):
        deep = [deep]
    with pytest.raises(InvalidInput) as err:
        served.api.list_nodes(filters={"group": deep})
    assert err.value.errors[0].reason.startswith("is nested deeper than")


def test_not_found_and_conflicts_arrive_as_themselves(served: Served) -> None:
    api = served.api
    with pytest.raises(NodeNotFound) as missing:
        api.show_node("no-such-node")
    assert missing.value.ident == "no-such-node"
    assert not isinstance(missing.value, messaging.RemoteError)

    api.create_node(_spec("dup-1"))
    with pytest.raises(DuplicateNode) as dup:
        api.create_node(_spec("dup-1"))
    assert (dup.value.field, dup.value.value) == ("name", "dup-1")

    with pytest.raises(FlavorNotFound):
        api.build_instances({"flavor": "no-such-flavor"})

    # move_node never robs a live owner.
    uuid = api.create_node(_spec("owned-1"))["uuid"]
    api.claim_nodes("agent-1", [uuid])
    with pytest.raises(Conflict) as conflict:
        api.move_node("owned-1", "agent-2")
    assert conflict.value.field == "owner" and conflict.value.value == "agent-1"


def test_service_unavailable_arrives_as_itself(served: Served) -> None:
    uuid = served.api.create_node(_spec("claim-me"))["uuid"]
    served.membership.state = State.SUSPENDED
    try:
        with pytest.raises(ServiceUnavailable) as err:
            served.api.claim_nodes("agent-1", [uuid])
        assert "suspended" in err.value.reason
    finally:
        served.membership.state = State.CONNECTED
    granted = served.api.claim_nodes("agent-1", [uuid]).granted
    assert [(g.node_uuid, g.epoch) for g in granted] == [(uuid, 1)]  # typed, not a dict


def test_fleet_status(served: Served) -> None:
    status = served.api.fleet_status()
    assert status["conductor"] == "cond-1"
    assert status["membership"] == "connected"
    assert status["ring_version"] == 1
    assert [a["host"] for a in status["agents"]][:2] == ["agent-1", "agent-2"]
    total = len(served.api.list_nodes())
    assert status["nodes"] == total
    owned = sum(a["owned"] for a in status["agents"])
    assert owned + status["unowned"] == total


def test_the_reference_clients_work_on_a_private_config_object(served: Served) -> None:
    # A transport built by oslo.messaging itself (not rpc.get_transport) on a
    # private ConfigOpts: the first call used to fail with
    # NoSuchOptError('oslo_messaging_tracing').
    conf = cfg.ConfigOpts()
    transport = messaging.get_rpc_transport(conf, url="kombu+memory:////")
    try:
        assert ConductorAPI(transport, timeout=10).fleet_status()["conductor"] == "cond-1"
        with pytest.raises(messaging.MessagingTimeout):
            # No agent serves this host: the call is sent, and times out.
            ComputeAPI(transport, timeout=0.5).ping("no-such-agent")
    finally:
        transport.cleanup()


def test_a_build_over_rpc_gets_a_node(served: Served) -> None:
    api = served.api
    uuids = api.import_nodes([_spec(f"build-{i}", group="builds") for i in range(2)])["uuids"]
    api.claim_nodes("agent-2", uuids)
    api.create_flavor({"name": "rpc-small", "resource_class": "baremetal"})
    ids = [str(uuidlib.uuid4())]
    request = {"flavor": "rpc-small", "group": "builds", "instance_uuids": ids}
    [built] = api.build_instances(request)
    # An idempotent retry: the same instance (as it is now), not a second one.
    assert [i["uuid"] for i in api.build_instances(request)] == [built["uuid"]] == ids

    def placed() -> bool:
        return bool(api.show_instance(ids[0])["task_state"] == "spawning")

    _wait_for(placed)
    shown = api.show_instance(ids[0])
    assert shown["node_uuid"] in uuids and shown["host"] == "agent-2"
    assert api.node_owner(shown["node_uuid"])["pinned"] is True


@pytest.mark.parametrize("pinned", ["1.0", "1.1", "1.2", "1.3", ConductorAPI.RPC_API_VERSION])
def test_a_client_pinned_at_any_version_reaches_every_method_of_that_version(
    served: Served, pinned: str
) -> None:
    """One version per API: every endpoint serves the newest, so a client pinned
    at the documented current version (or any earlier one) reaches the 1.0
    methods of every endpoint, not ``NoSuchMethod``."""
    client = served.api.client.prepare(version=pinned)
    assert isinstance(client.call({}, "list_flavors"), list)  # inventory
    assert isinstance(client.call({}, "list_instances"), list)  # instances
    assert "agents" in client.call({}, "fleet_status")  # fleet
    assert isinstance(client.call({}, "owned_nodes", host="agent-1"), list)  # agents


def test_a_client_capped_by_upgrade_levels_sends_nothing_newer(served: Served) -> None:
    """``[upgrade_levels] conductor = 1.1``: a 1.2 call is not sent at all (it
    would reach an older conductor as NoSuchMethod), 1.1 and older are."""
    transport = served.api.client.transport
    capped = ConductorAPI(transport, timeout=10, version_cap="1.1")
    assert capped.can_send_version("1.1") and not capped.can_send_version("1.2")
    assert served.api.can_send_version(API_VERSION)  # unpinned: the newest
    assert "agents" in capped.fleet_status()  # a 1.1 method still works
    with pytest.raises(NotUpgraded):
        capped.report_build_results("agent-1", [])
    compute = ComputeAPI(transport, version_cap="1.0")
    assert not compute.can_send_version("1.1")


def test_scheduler_hints_are_sent_at_1_6_and_refused_by_a_cap_below(served: Served) -> None:
    """A build with hints needs 1.6: a client capped lower does not send it (an
    older conductor would refuse the field); without hints 1.0 is enough."""
    api = served.api
    api.create_flavor({"name": "rpc-hinted", "resource_class": "baremetal"})
    request = {"flavor": "rpc-hinted", "scheduler_hints": {"rack": "r1", "n": 2}}
    [built] = api.build_instances(request)
    assert built["scheduler_hints"] == {"rack": "r1", "n": 2}
    capped = ConductorAPI(api.client.transport, timeout=10, version_cap="1.5")
    with pytest.raises(NotUpgraded):
        capped.build_instances(request)
    [plain] = capped.build_instances({"flavor": "rpc-hinted"})
    assert plain["scheduler_hints"] == {}
    # A bad hint is InvalidInput naming it.
    with pytest.raises(InvalidInput) as err:
        api.build_instances({"flavor": "rpc-hinted", "scheduler_hints": {"q": [1, 2]}})
    assert err.value.fields == ["scheduler_hints.q"]


@pytest.mark.parametrize("name", ["target", "_db", "__init__", "_fleet"])
def test_only_api_methods_are_reachable(served: Served, name: str) -> None:
    """An endpoint attribute (``target``) or a private name is no method: NoSuchMethod,
    the same answer as for a name that does not exist (it once answered TypeError)."""
    with pytest.raises(messaging.RemoteError) as err:
        served.api.client.prepare(version="1.0").call({}, name)
    assert err.value.exc_type == "NoSuchMethod"


def _envelope(body: str) -> bytes:
    return json.dumps({"oslo.version": "2.0", "oslo.message": body}).encode()


def test_a_body_too_deep_to_decode_keeps_its_routing_and_names_the_fields() -> None:
    deep = "[" * 1000 + '"x"' + "]" * 1000
    body = (
        '{"method": "list_nodes", "args": {"filters": ' + deep + ', "limit": 5}, '
        '"version": "1.0", "_msg_id": "m1", "_reply_q": "reply_1", "_unique_id": "u1", '
        '"_context_request_id": "req-1", "_context_extra": ' + deep + "}"
    )
    with pytest.raises(RecursionError):
        json.loads(body)  # as oslo.messaging decodes it
    envelope = deep_messages._loads(_envelope(body))
    assert json.loads(envelope["oslo.message"]) == {
        "method": "list_nodes",
        "args": {},
        "version": "1.0",
        "_msg_id": "m1",
        "_reply_q": "reply_1",
        "_unique_id": "u1",
        "_context_request_id": "req-1",
        "_context_ringfleet_too_deep": ["context", "filters"],
    }
    # Anything decodable, however many brackets it has, is left alone.
    wide = json.dumps({"method": "x", "args": {"a": [[[1, "]]{"]]] * 2000}})
    assert deep_messages._loads(_envelope(wide))["oslo.message"] == wide
    # Only calls are checked (nobody waits for a cast; a reply, such as a
    # 5,000-node inventory page, is not decoded twice).
    cast = body.replace('"_reply_q": "reply_1", ', "")
    assert deep_messages._loads(_envelope(cast))["oslo.message"] == cast


def test_inventory_pages_travel_as_columns_and_read_as_objects(served: Served) -> None:
    api = served.api
    api.import_nodes([_spec(f"col-{i}", group="columns") for i in range(7)])
    objects = api.client.prepare(version="1.0").call({}, "list_node_uuids", groups=["columns"])
    assert len(objects["nodes"]) == 7 and "uuids" not in objects
    raw = api.client.prepare(version="1.8").call(
        {}, "list_node_uuids", groups=["columns"], columns=True
    )
    assert raw["uuids"] == [n["uuid"] for n in objects["nodes"]]
    assert raw["pinned"] == [False] * 7 and "nodes" not in raw
    versions: list[str] = []
    call = api._call

    def spy(answer: type[Any], method: str, version: str = "1.0", **kwargs: Any) -> Any:
        versions.append(version)
        return call(answer, method, version, **kwargs)

    api._call = spy  # type: ignore[method-assign]
    try:
        # The reference client asks for columns and returns what a 1.0 call returns.
        assert api.list_node_uuids(groups=["columns"])["nodes"] == objects["nodes"]
        # Pinned below 1.8 (a rolling upgrade): objects, as before.
        capped = ConductorAPI(api.client.transport, timeout=10, version_cap="1.7")
        assert capped.list_node_uuids(groups=["columns"])["nodes"] == objects["nodes"]
    finally:
        del api._call
    assert versions == ["1.8"]
    with pytest.raises(InvalidInput) as err:
        api.client.prepare(version="1.8").call({}, "list_node_uuids", columns="yes")
    assert err.value.fields == ["columns"]


def test_inventory_by_share_reads_what_the_ring_gives_a_member(served: Served) -> None:
    api = served.api
    api.import_nodes([_spec(f"share-{i}", group="share") for i in range(40)])
    uuids = [n["uuid"] for n in api.list_node_uuids(groups=["share"])["nodes"]]
    ring = {"version": 1, "members": {"agent-1": 1.0, "agent-2": 2.0}}
    owners = Ring(ring["members"], version=1).assign(uuids)
    for member in ("agent-1", "agent-2"):
        read: list[str] = []
        marker = None
        while True:
            page = api.list_node_share(member, ring=ring, groups=["share"], marker=marker, limit=7)
            assert page is not None
            read += [n["uuid"] for n in page["nodes"]]
            marker = page["next"]
            if marker is None:
                break
        assert sorted(read) == sorted(u for u, o in zip(uuids, owners, strict=True) if o == member)
    # What a member gained when the ring changed, and what it owns.
    alone = {"version": 1, "members": {"agent-1": 1.0}}
    gained = api.list_node_share("agent-1", ring=alone, previous_ring=ring, groups=["share"])
    assert gained is not None
    assert {n["uuid"] for n in gained["nodes"]} == {
        u for u, o in zip(uuids, owners, strict=True) if o == "agent-2"
    }
    owned = api.list_node_share("agent-1")
    assert owned is not None and owned["next"] is None
    assert {n["uuid"] for n in owned["nodes"]} == {o.node_uuid for o in api.owned_nodes("agent-1")}
    # Bad arguments name their fields; nothing is read.
    call = api.client.prepare(version="1.15").call
    with pytest.raises(InvalidInput) as err:
        call({}, "list_node_uuids", ring={"version": 0, "members": {"a": 1}}, member="a")
    assert err.value.fields == ["ring"]
    with pytest.raises(InvalidInput) as err:
        call({}, "list_node_uuids", ring=ring, member=" a", marker="12/not-a-uuid")
    assert sorted(err.value.fields) == ["marker", "member"]
    with pytest.raises(InvalidInput) as err:
        call({}, "list_node_uuids", ring={"members": {"a": -1.0}, "version": 1}, member="a")
    assert err.value.fields == ["ring"]
    with pytest.raises(InvalidInput) as err:
        call({}, "list_node_uuids", owner="agent-1", not_claimed_at=["yesterday"])
    assert err.value.fields == ["not_claimed_at"]
    # Pinned below 1.15 (a rolling upgrade): the agent reads the whole fleet.
    capped = ConductorAPI(api.client.transport, timeout=10, version_cap="1.14")
    assert capped.list_node_share("agent-1", ring=ring) is None


def test_a_claim_of_a_share_brings_its_first_page_unless_pinned_below_it(
    served: Served,
) -> None:
    """``claim_share`` with ``read`` (1.26): the share's first page after the
    claim, in objects as ``list_node_share`` gives them; a client pinned
    below 1.26 sends the claim alone."""
    api = served.api
    api.import_nodes([_spec(f"claimread-{i}", group="claimread") for i in range(12)])
    uuids = [n["uuid"] for n in api.list_node_uuids(groups=["claimread"])["nodes"]]
    ring = {"version": 1, "members": {"agent-1": 1.0}}
    out = api.claim_share("agent-1", ring, groups=["claimread"], read=5)
    assert out is not None and sorted(out["uuids"]) == sorted(uuids)
    first = out["share"]
    assert len(first["nodes"]) == 5 and first["next"] is not None
    assert {(n["owner"], n["epoch"]) for n in first["nodes"]} == {("agent-1", 1)}
    rest = api.list_node_share("agent-1", ring=ring, groups=["claimread"], marker=first["next"])
    assert rest is not None and rest["next"] is None
    assert sorted(n["uuid"] for n in first["nodes"] + rest["nodes"]) == sorted(uuids)
    capped = ConductorAPI(api.client.transport, timeout=10, version_cap="1.25")
    alone = {"version": 1, "members": {"agent-2": 1.0}}
    again = capped.claim_share("agent-2", alone, groups=["claimread"], read=5)
    assert again is not None and again["uuids"] == [] and "share" not in again


def test_a_call_newer_than_the_upgrade_pin_is_refused_naming_the_call_and_the_pin(
    served: Served,
) -> None:
    """``[upgrade_levels] conductor`` below what a call needs (a rolling
    upgrade): the client refuses it before sending, saying which call needs
    which version and what to do, not oslo.messaging's bare version numbers."""
    instance = str(uuidlib.uuid4())
    pinned = ConductorAPI(served.api.client.transport, timeout=10, version_cap="1.12")
    with pytest.raises(NotUpgraded) as refused:
        pinned.reboot_instance(instance)
    message = str(refused.value)
    assert "reboot_instance" in message and "1.13" in message, message
    assert "[upgrade_levels]" in message and "1.12" in message, message
    # Calls the pin allows still go through.
    assert pinned.list_flavors() == served.api.list_flavors()
