# SPDX-License-Identifier: Apache-2.0
"""Nova's listing habits: status, addresses, list filters and sort order, and
the instance action history, on the conductor's endpoints over SQLite."""

from __future__ import annotations

import datetime
import itertools
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from conductor.common.exception import InstanceActionNotFound, InstanceNotFound, InvalidInput
from conductor.common.instance_states import Event
from conductor.common.list_filters import check_list_filters
from conductor.common.nova_status import STATUSES, addresses_of, status_of
from conductor.common.objects import TaskState, VmState
from conductor.db import instances
from conductor.db.engine import Database
from conductor.db.models import InstanceModel
from conductor.endpoints.instances import InstancesEndpoint
from conductor.endpoints.inventory import InventoryEndpoint
from conductor.fleet_view import FleetView
from tests.dbutil import migrated
from tests.endpoint_stubs import RecordingQueue


def member(project: str, request_id: str = "req-1") -> dict[str, Any]:
    return {
        "request_id": request_id,
        "project_id": project,
        "user_id": f"u-{project}",
        "roles": ["member", "reader"],
        "is_admin": False,
    }


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = migrated(f"sqlite:///{tmp_path / 'ringfleet.db'}")
    InventoryEndpoint(database, FleetView(database)).create_flavor(
        {"request_id": "req-op"}, flavor={"name": "small", "resource_class": "baremetal"}
    )
    yield database
    database.dispose()


@pytest.fixture
def endpoint(db: Database) -> InstancesEndpoint:
    return InstancesEndpoint(db, RecordingQueue())


def build(
    endpoint: InstancesEndpoint, ctxt: dict[str, Any], name: str, count: int = 1
) -> list[str]:
    request = {"flavor": "small", "count": count, "name": name}
    return [i["uuid"] for i in endpoint.build_instances(ctxt, request=request)]


def put(db: Database, uuid: str, **values: Any) -> None:
    with db.writing() as connection:
        connection.execute(update(InstanceModel).where(InstanceModel.uuid == uuid).values(values))


# -- status and addresses ---------------------------------------------------------


@pytest.mark.parametrize(
    ("vm_state", "task_state", "status"),
    [
        ("building", "scheduling", "BUILD"),
        ("building", "spawning", "BUILD"),
        ("active", None, "ACTIVE"),
        ("active", "rebooting", "REBOOT"),
        ("active", "rebooting_hard", "HARD_REBOOT"),
        ("active", "rebuilding", "REBUILD"),
        # Nova shows the vm_state's default for a power action in flight.
        ("active", "powering-off", "ACTIVE"),
        ("stopped", None, "SHUTOFF"),
        ("stopped", "powering-on", "SHUTOFF"),
        ("stopped", "rebuilding", "REBUILD"),
        ("error", None, "ERROR"),
        ("deleting", "deleting", "DELETED"),
        ("deleted", None, "DELETED"),
    ],
)
def test_status_is_novas(vm_state: str, task_state: str | None, status: str) -> None:
    assert status_of(vm_state, task_state) == status


def test_addresses_are_novas_from_the_network_data() -> None:
    network_data = {
        "links": [
            {"id": "eth0", "type": "phy", "ethernet_mac_address": "52:54:00:12:34:56"},
            {"id": "eth1", "type": "phy"},
        ],
        "networks": [
            {"id": "n0", "type": "ipv4", "link": "eth0", "ip_address": "10.0.0.5",
             "network_id": "public"},
            {"id": "n1", "type": "ipv6", "link": "eth0", "ip_address": "2001:db8::5",
             "network_id": "public"},
            {"id": "n2", "type": "ipv4_dhcp", "link": "eth1"},
            {"id": "n3", "type": "ipv4", "link": "eth1", "ip_address": "192.168.1.9"},
        ],
    }  # fmt: skip
    assert addresses_of(network_data) == {
        "public": [
            {"addr": "10.0.0.5", "version": 4, "OS-EXT-IPS:type": "fixed",
             "OS-EXT-IPS-MAC:mac_addr": "52:54:00:12:34:56"},
            {"addr": "2001:db8::5", "version": 6, "OS-EXT-IPS:type": "fixed",
             "OS-EXT-IPS-MAC:mac_addr": "52:54:00:12:34:56"},
        ],
        # Named by its id without a network_id; DHCP has no address yet.
        "n3": [
            {"addr": "192.168.1.9", "version": 4, "OS-EXT-IPS:type": "fixed",
             "OS-EXT-IPS-MAC:mac_addr": None},
        ],
    }  # fmt: skip
    assert addresses_of(None) == {} == addresses_of({"networks": "junk"})


# -- filters and sort order -------------------------------------------------------


@pytest.mark.parametrize(
    ("filters", "field"),
    [
        ({"sort_key": "flavor"}, "sort_key"),
        ({"sort_key": "display_name", "sort_dir": "up"}, "sort_dir"),
        ({"status": "RUNNING"}, "status"),
        ({"changes_since": "yesterday"}, "changes-since"),
        ({"name": ""}, "name"),
    ],
)
def test_a_bad_filter_is_named(filters: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        check_list_filters(**filters)
    assert [e.field for e in err.value.errors] == [field]


def test_changes_since_takes_a_zone_and_is_utc_without() -> None:
    order = check_list_filters(changes_since="2026-11-29T21:00:00+01:00")
    assert order.changes_since == datetime.datetime(2026, 11, 29, 20, 0)
    assert check_list_filters(changes_since="2026-11-29T20:00:00").changes_since == (
        datetime.datetime(2026, 11, 29, 20, 0)
    )
    # Nova's default direction once a key is given; the old order without.
    assert check_list_filters(sort_key="created_at").sort_dir == "desc"
    assert check_list_filters().column == "uuid" and not check_list_filters().descending


def test_the_status_filter_finds_exactly_the_instances_showing_it(
    db: Database, endpoint: InstancesEndpoint
) -> None:
    ctxt = member("p1")
    pairs = list(
        itertools.product(VmState, [None, *TaskState])
    )  # every pair, possible or not: the filter and the field must agree on all
    uuids = build(endpoint, ctxt, "s", count=len(pairs))
    shown: dict[str, str] = {}
    for uuid, (vm_state, task_state) in zip(uuids, pairs, strict=True):
        put(db, uuid, vm_state=vm_state.value, task_state=task_state and task_state.value)
        shown[uuid] = status_of(vm_state, task_state)
    for status in STATUSES:
        found = {i["uuid"] for i in endpoint.list_instances(ctxt, status=status.lower())}
        assert found == {u for u, s in shown.items() if s == status}, status


def test_name_regex_changes_since_and_sort(db: Database, endpoint: InstancesEndpoint) -> None:
    ctxt = member("p1")
    web = build(endpoint, ctxt, "web", count=3)
    [db_one] = build(endpoint, ctxt, "db")
    found = {i["uuid"] for i in endpoint.list_instances(ctxt, name="^web-[12]$")}
    assert found == set(web[:2])
    # A pattern the database refuses is named (SQLite's is Python's re).
    with pytest.raises(InvalidInput) as err:
        endpoint.list_instances(ctxt, name="web-(")
    assert err.value.errors[0].field == "name"
    # changes-since: what changed at or after the instant, deleted ones included.
    since = datetime.datetime(2030, 1, 1)
    put(db, web[0], updated_at=since, vm_state="deleted", task_state=None)
    put(db, db_one, updated_at=since + datetime.timedelta(seconds=1))
    changed = endpoint.list_instances(ctxt, changes_since="2030-01-01T00:00:00Z")
    assert {i["uuid"] for i in changed} == {web[0], db_one}
    assert web[0] not in {i["uuid"] for i in endpoint.list_instances(ctxt)}
    # Sorted by name, descending, a page of one at a time: every instance once.
    seen: list[str] = []
    marker = None
    while True:
        page = endpoint.list_instances(
            ctxt, limit=1, marker=marker, sort_key="display_name", sort_dir="desc"
        )
        if not page:
            break
        seen.append(page[0]["name"])
        marker = page[0]["uuid"]
    assert seen == ["web-3", "web-2", "db"]


def test_a_sort_marker_of_another_project_is_refused(
    db: Database, endpoint: InstancesEndpoint
) -> None:
    [theirs] = build(endpoint, member("p2"), "theirs")
    build(endpoint, member("p1"), "mine")
    with pytest.raises(InstanceNotFound) as err:
        endpoint.list_instances(member("p1"), marker=theirs, sort_key="created_at")
    assert err.value.ident == theirs


# -- action history ---------------------------------------------------------------


def test_every_action_is_recorded_from_its_request_to_its_end(
    db: Database, endpoint: InstancesEndpoint
) -> None:
    ctxt = member("p1", "req-create")
    [uuid] = build(endpoint, ctxt, "a")
    [create] = endpoint.list_instance_actions(ctxt, uuid)
    assert (create["action"], create["request_id"], create["finish_time"]) == (
        "create",
        "req-create",
        None,
    )
    assert (create["project_id"], create["user_id"]) == ("p1", "u-p1")
    assert create["start_time"].endswith("+00:00")
    # The deploy ends it (the agent's report applies DEPLOYED).
    assert instances.set_state(db, uuid, Event.DEPLOYED)
    put(db, uuid, node_uuid=str(uuidlib.uuid4()))
    endpoint.reboot_instance(member("p1", "req-reboot"), uuid)
    endpoint.reboot_instance(member("p1", "req-again"), uuid)  # routed anew: no new action
    assert instances.set_state(db, uuid, Event.POWERED_ON, task_state=TaskState.REBOOTING)
    endpoint.stop_instance(member("p1", "req-stop"), uuid)
    assert instances.set_state(db, uuid, Event.ACTION_FAILED, task_state=TaskState.POWERING_OFF)
    endpoint.delete_instance(member("p1", "req-delete"), uuid)
    actions = endpoint.list_instance_actions(ctxt, uuid)
    assert [(a["action"], a["request_id"], a["message"]) for a in actions] == [
        ("delete", "req-delete", None),
        ("stop", "req-stop", "Error"),
        ("reboot", "req-reboot", None),
        ("create", "req-create", None),
    ]
    assert actions[0]["finish_time"] is None and all(a["finish_time"] for a in actions[1:])
    shown = endpoint.show_instance_action(ctxt, uuid, "req-stop")
    assert [(e["event"], e["result"]) for e in shown["events"]] == [
        ("ringfleet_stop_instance", "Error")
    ]
    assert instances.set_state(db, uuid, Event.TORN_DOWN)
    done = endpoint.show_instance_action(ctxt, uuid, "req-delete")
    assert done["finish_time"] is not None and done["events"][0]["result"] == "Success"


def test_a_delete_during_a_build_ends_the_create_with_an_error(
    db: Database, endpoint: InstancesEndpoint
) -> None:
    ctxt = member("p1", "req-create")
    [uuid] = build(endpoint, ctxt, "a")
    endpoint.delete_instance(member("p1", "req-delete"), uuid)
    endpoint.delete_instance(member("p1", "req-delete-again"), uuid)  # a re-route
    actions = {a["request_id"]: a for a in endpoint.list_instance_actions(ctxt, uuid)}
    assert set(actions) == {"req-create", "req-delete"}
    assert actions["req-create"]["message"] == "Error"
    assert actions["req-delete"]["finish_time"] is None


def test_another_projects_actions_are_not_found(db: Database, endpoint: InstancesEndpoint) -> None:
    [uuid] = build(endpoint, member("p1"), "a")
    with pytest.raises(InstanceNotFound):
        endpoint.list_instance_actions(member("p2"), uuid)
    with pytest.raises(InstanceNotFound):
        endpoint.show_instance_action(member("p2"), uuid, "req-1")
    with pytest.raises(InstanceActionNotFound):
        endpoint.show_instance_action(member("p1"), uuid, "req-none")
