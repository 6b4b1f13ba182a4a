# SPDX-License-Identifier: Apache-2.0
"""What a tenant used to Nova finds, over HTTP with real Keystone tokens:
status and addresses, list filters and sorting, /v1/limits and the action
history (microversions 1.10 to 1.12).

A project's member builds three instances on simulated nodes, stops one,
hard-reboots another and deletes the third; each step is then seen as a
Nova client sees it: ``status`` (ACTIVE, SHUTOFF, DELETED), the ``name``,
``status`` and ``changes-since`` filters, ``sort_key`` pages, the limits
of its quota, and each instance's actions with the request ids the API
answered.  A member of another project sees none of it.  Real etcd,
RabbitMQ, PostgreSQL and Keystone; the conductor, an agent (simulated
driver) and ringfleet-api (gunicorn, keystonemiddleware) as processes.
"""

from __future__ import annotations

import datetime
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.functional.api_harness import ApiServer
from tests.functional.fleet_harness import Fleet, log_tails, running_fleet
from tests.functional.keystone_harness import Identity, keystone_api, make_identity
from tests.harness import wait_for

TIMEOUT = 30
LATEST = {"OpenStack-API-Version": "baremetal-fleet latest"}
NETWORK_DATA = {
    "links": [{"id": "eth0", "type": "phy", "ethernet_mac_address": "52:54:00:aa:bb:01"}],
    "networks": [
        {
            "id": "network0",
            "type": "ipv4",
            "link": "eth0",
            "ip_address": "10.20.0.11",
            "netmask": "255.255.255.0",
            "network_id": "tenant-net",
        }
    ],
}


@pytest.fixture(scope="module")
def identity(keystone_url: str) -> Identity:
    return make_identity(keystone_url)


@pytest.fixture(scope="module")
def fleet(
    tmp_path_factory: pytest.TempPathFactory,
    database_url: str,
    transport_url: str,
    etcd_url: str,
) -> Iterator[Fleet]:
    with running_fleet(
        tmp_path_factory.mktemp("nova-habits"),
        database_url=database_url,
        db_prefix="rf_nova_habits",
        transport_url=transport_url,
        etcd_url=etcd_url,
        agents=("agent-1",),
    ) as f:
        yield f


@pytest.fixture(scope="module")
def api(fleet: Fleet, transport_url: str, identity: Identity) -> Iterator[ApiServer]:
    with keystone_api(fleet.workdir, transport_url, identity, "api-nova-habits") as server:
        yield server


def _as(token: str) -> requests.Session:
    session = requests.Session()
    session.headers.update({"X-Auth-Token": token, **LATEST})
    return session


def _ok(response: requests.Response, status: int = 200) -> Any:
    assert response.status_code == status, (
        f"{response.request.method} {response.url}: {response.status_code} {response.text[:2000]}"
    )
    return response.json() if response.content else None


def _names(session: requests.Session, url: str) -> list[str]:
    """The names of a list, every page followed."""
    names: list[str] = []
    next_url: str | None = url
    while next_url:
        body = _ok(session.get(next_url, timeout=TIMEOUT))
        names.extend(i["name"] for i in body["instances"])
        next_url = body.get("next")
    return names


def _settled(session: requests.Session, url: str, vm_state: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def done() -> bool:
        seen.update(_ok(session.get(url, timeout=TIMEOUT)))
        assert seen["vm_state"] != "error", seen.get("fault")
        return bool(seen["vm_state"] == vm_state and seen["task_state"] is None)

    wait_for(done, 90, f"instance {vm_state} (last seen {seen})", step=0.2)
    return seen


def test_a_tenant_sees_status_filters_sort_limits_and_actions_as_in_nova(
    fleet: Fleet, api: ApiServer, identity: Identity
) -> None:
    url = api.url
    admin, tenant = _as(identity.tokens["admin"]), _as(identity.tokens["member"])
    stranger_project, stranger_token = identity.other_project()
    stranger = _as(stranger_token)
    started = time.monotonic()
    try:
        for index in range(3):
            node = {"name": f"habit-{index}", "resource_class": "baremetal"}
            _ok(admin.post(f"{url}/v1/nodes", json=node, timeout=TIMEOUT), 201)
        flavor = {"name": "habits", "resource_class": "baremetal"}
        _ok(admin.post(f"{url}/v1/flavors", json=flavor, timeout=TIMEOUT), 201)
        quota = {"quotas": {"instances": 5}}
        _ok(admin.put(f"{url}/v1/quotas/{identity.project_id}", json=quota, timeout=TIMEOUT))
        wait_for(lambda: None not in fleet.owned_by(), 60, "every node owned")

        # Three instances, one with network data; the build's request id.
        body: dict[str, Any] = {
            "flavor": "habits",
            "count": 3,
            "name": "web",
            "network_data": NETWORK_DATA,
        }
        built_reply = tenant.post(f"{url}/v1/instances", json=body, timeout=TIMEOUT)
        built = {i["name"]: i for i in _ok(built_reply, 202)["instances"]}
        build_request = built_reply.headers["x-openstack-request-id"]
        assert {i["status"] for i in built.values()} == {"BUILD"}
        links = {name: f"{url}/v1/instances/{i['uuid']}" for name, i in built.items()}
        for link in links.values():
            _settled(tenant, link, "active")
        web1 = _ok(tenant.get(links["web-1"], timeout=TIMEOUT))
        assert web1["status"] == "ACTIVE"
        assert web1["addresses"] == {
            "tenant-net": [
                {
                    "addr": "10.20.0.11",
                    "version": 4,
                    "OS-EXT-IPS:type": "fixed",
                    "OS-EXT-IPS-MAC:mac_addr": "52:54:00:aa:bb:01",
                }
            ]
        }

        # Stop web-1, hard-reboot web-2, delete web-3: each request's id kept.
        stop = tenant.post(f"{links['web-1']}/action", json={"os-stop": None}, timeout=TIMEOUT)
        _ok(stop, 202)
        reboot = tenant.post(
            f"{links['web-2']}/action", json={"reboot": {"type": "HARD"}}, timeout=TIMEOUT
        )
        assert _ok(reboot, 202)["status"] == "HARD_REBOOT"
        assert _settled(tenant, links["web-1"], "stopped")["status"] == "SHUTOFF"
        _settled(tenant, links["web-2"], "active")
        before_delete = datetime.datetime.now(datetime.UTC).isoformat()
        delete = tenant.delete(links["web-3"], timeout=TIMEOUT)
        assert _ok(delete, 202)["status"] == "DELETED"
        assert _settled(tenant, links["web-3"], "deleted")["status"] == "DELETED"

        # Filters: status, name, changes-since (deleted included), as Nova's.
        assert _names(tenant, f"{url}/v1/instances?status=SHUTOFF") == ["web-1"]
        assert _names(tenant, f"{url}/v1/instances?status=active") == ["web-2"]
        assert sorted(_names(tenant, f"{url}/v1/instances?name=%5Eweb-%5B13%5D%24")) == ["web-1"]
        assert sorted(_names(tenant, f"{url}/v1/instances")) == ["web-1", "web-2"]
        since = urllib.parse.quote(before_delete)
        changed = _ok(tenant.get(f"{url}/v1/instances?changes-since={since}", timeout=TIMEOUT))
        assert {(i["name"], i["status"]) for i in changed["instances"]} == {("web-3", "DELETED")}
        # Sorted by name, descending, pages of one: every instance once, in order.
        pages = (
            f"{url}/v1/instances?sort_key=display_name&limit=1&changes-since=2000-01-01T00:00:00Z"
        )
        assert _names(tenant, pages) == ["web-3", "web-2", "web-1"]
        bad = tenant.get(f"{url}/v1/instances?sort_key=host", timeout=TIMEOUT)
        assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "sort_key"

        # Limits: the quota, in Nova's shape; usage without the deleted one.
        limits = _ok(tenant.get(f"{url}/v1/limits", timeout=TIMEOUT))["limits"]
        assert limits["absolute"]["maxTotalInstances"] == 5
        assert limits["absolute"]["totalInstancesUsed"] == 2
        assert limits["absolute"]["maxTotalCores"] == -1
        assert limits["resource_classes"]["baremetal"]["in_use"] == 2
        other = stranger.get(f"{url}/v1/limits?tenant_id={identity.project_id}", timeout=TIMEOUT)
        assert other.status_code == 403
        own = _ok(stranger.get(f"{url}/v1/limits", timeout=TIMEOUT))["limits"]
        assert own["absolute"]["totalInstancesUsed"] == 0

        # Action history: each action with the request id the API answered.
        expected = {
            "web-1": [("stop", stop.headers["x-openstack-request-id"]), ("create", build_request)],
            "web-2": [
                ("reboot", reboot.headers["x-openstack-request-id"]),
                ("create", build_request),
            ],
            "web-3": [
                ("delete", delete.headers["x-openstack-request-id"]),
                ("create", build_request),
            ],
        }
        for name, actions in expected.items():
            listed = _ok(tenant.get(f"{links[name]}/actions", timeout=TIMEOUT))["instanceActions"]
            assert [(a["action"], a["request_id"]) for a in listed] == actions, name
            assert all(a["finish_time"] and a["message"] is None for a in listed), listed
            assert {a["user_id"] for a in listed} == {built[name]["user_id"]}
            assert {a["project_id"] for a in listed} == {identity.project_id}
        shown = _ok(
            tenant.get(
                f"{links['web-1']}/actions/{stop.headers['x-openstack-request-id']}",
                timeout=TIMEOUT,
            )
        )["instanceAction"]
        assert [(e["event"], e["result"]) for e in shown["events"]] == [
            ("ringfleet_stop_instance", "Success")
        ]
        missing = tenant.get(f"{links['web-1']}/actions/req-none", timeout=TIMEOUT)
        assert missing.status_code == 404
        # Another project: the instance, its actions and their existence unknown.
        assert stranger.get(f"{links['web-1']}/actions", timeout=TIMEOUT).status_code == 404
        assert _names(stranger, f"{url}/v1/instances?status=ACTIVE") == []
        assert stranger_project != identity.project_id
        print(f"\nNova habits journey: {time.monotonic() - started:.1f} s")
    except BaseException:
        print(log_tails(fleet))
        print(api.log()[-3000:])
        raise
