# SPDX-License-Identifier: Apache-2.0
"""A tenant's machine, through the HTTP API only, on a real Ironic, with Keystone tokens.

What a tenant of a cloud does with a bare-metal server, end to end: with a
Keystone project token and nothing but HTTP, build an instance with an
image, an SSH key and user data; reboot it, stop and start it, rebuild it
with another image; delete it.  Each step is checked in Ironic's own
records (the image and checksum it was given, that it received a config
drive, its power state, the node back to ``available``), and a member of a
second project sees none of it (404 for show, actions and delete; absent
from its list; its build reusing the uuid refused without naming whose it
is), nor does a system-scoped admin (403).  At each step the instance is
seen as a Nova client sees it: ``status`` and ``addresses``, found by
Nova's list filters (name, status, changes-since, tags), counted by
``/v1/limits``; the rebuild also gives it a key pair (Nova's 2.54); at the
end its action history holds every step under the request id the API
answered, whole and a page at a time.  Real etcd, RabbitMQ, PostgreSQL,
Keystone and Ironic; the conductor, an agent and ringfleet-api (gunicorn,
keystonemiddleware) as processes.
"""

from __future__ import annotations

import base64
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any
from uuid import uuid4

import pytest
import requests

from conductor.common.exception import DuplicateInstance
from tests.functional.api_harness import ApiServer
from tests.functional.fleet_harness import Fleet, log_tails, start_processes
from tests.functional.keystone_harness import Identity, keystone_api, make_identity
from tests.harness import wait_for
from tests.harness.ironic import IronicHarness

TIMEOUT = 30
#: ask for the newest microversion: images (1.1), verbs (1.3), rebuild with an image
LATEST = {"OpenStack-API-Version": "baremetal-fleet latest"}
FIRST_IMAGE = {
    "source": "http://images.test/ubuntu-24.04.qcow2",
    "os_hash_algo": "sha256",
    "os_hash_value": "a1" * 32,
    "disk_format": "qcow2",
}
SECOND_IMAGE = {
    "source": "http://images.test/debian-13.raw",
    "os_hash_algo": "sha512",
    "os_hash_value": "b2" * 64,
    "disk_format": "raw",
}
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJourneyKeyOnly tenant@laptop"
#: A key pair's public key (it must parse).
PAIR_KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGqBqsYBZz2C0tS0NWZHbHJ4kiAzz4AEp/7r4d1f9Eqm me@laptop"
)
USER_DATA = "#cloud-config\npackages: [nginx]\n"
MAC = "52:54:00:12:34:56"
NETWORK_DATA: dict[str, Any] = {
    "links": [{"id": "eth0", "type": "phy", "ethernet_mac_address": MAC}],
    "networks": [
        {
            "id": "net0",
            "type": "ipv4",
            "link": "eth0",
            "ip_address": "10.0.0.5",
            "netmask": "255.255.255.0",
            "network_id": "public",
        }
    ],
}


@pytest.fixture
def identity(keystone_url: str) -> Identity:
    return make_identity(keystone_url)


@pytest.fixture
def api(fleet_on_ironic: Fleet, transport_url: str, identity: Identity) -> Iterator[ApiServer]:
    with keystone_api(fleet_on_ironic.workdir, transport_url, identity, "api-tenant") as server:
        yield server


def _as(token: str) -> requests.Session:
    session = requests.Session()
    session.headers.update({"X-Auth-Token": token, **LATEST})
    return session


def _ok(response: requests.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, (
        f"{response.request.method} {response.url}: {response.status_code} {response.text[:2000]}"
    )
    return response.json() if response.content else {}


def _settled(
    tenant: requests.Session, url: str, vm_state: str, timeout: float = 90
) -> dict[str, Any]:
    """The instance once its action (or build) is over in ``vm_state``."""
    seen: dict[str, Any] = {}

    def done() -> bool:
        seen.update(_ok(tenant.get(url, timeout=TIMEOUT), 200))
        assert seen["vm_state"] != "error", seen.get("fault")
        return bool(seen["vm_state"] == vm_state and seen["task_state"] is None)

    wait_for(done, timeout, f"instance {vm_state} (last seen {seen})", step=0.2)
    return seen


#: The steps' names in the action history (Nova's), by the request's key.
_ACTIONS = {"reboot": "reboot", "os-stop": "stop", "os-start": "start"}


def _as_nova_shows_it(
    tenant: requests.Session, base: str, instance: dict[str, Any], status: str
) -> None:
    """Nova's status and addresses, its filters finding the instance by them,
    and its limits counting it (while not deleted)."""
    assert instance["status"] == status, instance
    assert instance["addresses"] == {
        "public": [
            {
                "addr": "10.0.0.5",
                "version": 4,
                "OS-EXT-IPS:type": "fixed",
                "OS-EXT-IPS-MAC:mac_addr": MAC,
            }
        ]
    }

    def listed(query: str) -> list[str]:
        reply = _ok(tenant.get(f"{base}/v1/instances?{query}", timeout=TIMEOUT), 200)
        return [i["uuid"] for i in reply["instances"]]

    assert listed(f"name=^web$&status={status}") == [instance["uuid"]]
    other = "SHUTOFF" if status != "SHUTOFF" else "ACTIVE"
    assert listed(f"status={other}") == []
    since = urllib.parse.quote(instance["updated_at"])
    assert listed(f"changes-since={since}&sort_key=updated_at") == [instance["uuid"]]
    absolute = _ok(tenant.get(f"{base}/v1/limits", timeout=TIMEOUT), 200)["limits"]["absolute"]
    assert absolute["totalInstancesUsed"] == (0 if status == "DELETED" else 1)


def _history_as_nova_shows_it(
    tenant: requests.Session, url: str, requests_made: list[tuple[str, str]]
) -> None:
    """Every step in the action history, newest first, under the request id
    the API answered it with, finished and successful."""
    actions = _ok(tenant.get(f"{url}/actions", timeout=TIMEOUT), 200)["instanceActions"]
    expected = [(_ACTIONS.get(action, action), rid) for action, rid in reversed(requests_made)]
    assert [(a["action"], a["request_id"]) for a in actions] == expected
    assert all(a["finish_time"] and a["message"] is None for a in actions), actions
    # A page of two at a time along the next links: every action once.
    paged: list[str] = []
    next_url: str | None = f"{url}/actions?limit=2"
    while next_url:
        page = _ok(tenant.get(next_url, timeout=TIMEOUT), 200)
        paged += [a["request_id"] for a in page["instanceActions"]]
        next_url = page.get("next")
    assert paged == [rid for _action, rid in expected]
    _verb, rebuild_id = requests_made[-2]
    shown = _ok(tenant.get(f"{url}/actions/{rebuild_id}", timeout=TIMEOUT), 200)
    assert [e["result"] for e in shown["instanceAction"]["events"]] == ["Success"]


def _found_by_tags(tenant: requests.Session, base: str, uuid: str) -> None:
    """Nova's tag filters (every one, any, not every one, none of them)."""
    for query, found in (
        ("tags=web,prod", [uuid]),
        ("tags=web,db", []),
        ("tags-any=db,web", [uuid]),
        ("not-tags=prod,db", [uuid]),
        ("not-tags-any=prod", []),
    ):
        reply = _ok(tenant.get(f"{base}/v1/instances?{query}", timeout=TIMEOUT), 200)
        assert [i["uuid"] for i in reply["instances"]] == found, query


def _no_existence_signal(
    base: str, stranger: requests.Session, identity: Identity, uuid: str, flavor: str
) -> None:
    """Another project's build reusing the uuid is refused as any unusable
    uuid, naming no project; a system-scoped admin reaches no instance."""
    reused = {"flavor": flavor, "instance_uuids": [uuid]}
    clash = stranger.post(f"{base}/v1/instances", json=reused, timeout=TIMEOUT)
    assert clash.status_code == 409, clash.text[:500]
    [error] = clash.json()["errors"]
    assert (error["field"], error["reason"]) == ("instance_uuids", DuplicateInstance.UNUSABLE)
    assert identity.project_id not in clash.text
    system = _as(identity.system_token("admin"))
    for path in ("/v1/instances", f"/v1/instances/{uuid}"):
        assert system.get(f"{base}{path}", timeout=TIMEOUT).status_code == 403, path


def _key_pairs_and_markers(
    base: str, tenant: requests.Session, admin: requests.Session, user: str
) -> None:
    """Microversion 1.14: key pairs a page at a time, another user's for an
    admin, a marker not in its list 400, Nova's maxServerMeta."""
    pair = {"keypair": {"name": "spare-key", "public_key": PAIR_KEY}}
    _ok(tenant.post(f"{base}/v1/keypairs", json=pair, timeout=TIMEOUT), 201)
    page = _ok(tenant.get(f"{base}/v1/keypairs?limit=1", timeout=TIMEOUT), 200)
    assert [k["keypair"]["name"] for k in page["keypairs"]] == ["rebuild-key"]
    rest = _ok(tenant.get(page["next"], timeout=TIMEOUT), 200)
    assert [k["keypair"]["name"] for k in rest["keypairs"]] == ["spare-key"]
    theirs = _ok(admin.get(f"{base}/v1/keypairs?user_id={user}", timeout=TIMEOUT), 200)
    assert [k["keypair"]["name"] for k in theirs["keypairs"]] == ["rebuild-key", "spare-key"]
    for path in (
        "/v1/keypairs?marker=nokey",
        f"/v1/instances?sort_key=created_at&marker={uuid4()}",
    ):
        missing = tenant.get(f"{base}{path}", timeout=TIMEOUT)
        assert missing.status_code == 400, missing.text[:500]
        assert missing.json()["errors"][0]["field"] == "marker"
    limits = _ok(tenant.get(f"{base}/v1/limits", timeout=TIMEOUT), 200)["limits"]
    assert limits["absolute"]["maxServerMeta"] == 128


def test_a_tenant_builds_powers_rebuilds_and_deletes_over_http_and_another_sees_none(
    fleet_on_ironic: Fleet,
    ironic: IronicHarness,
    shard: str,
    api: ApiServer,
    identity: Identity,
) -> None:
    fleet = fleet_on_ironic
    [node] = ironic.enroll(1, shard=shard)
    start_processes(fleet, agents=("agent-1",))
    assert fleet.api.sync_ironic_nodes()["created"] == 1
    wait_for(lambda: fleet.api.show_node(node)["owner"] == "agent-1", 30, "the node owned")
    admin, tenant = _as(identity.tokens["admin"]), _as(identity.tokens["member"])
    _project, other_token = identity.other_project()
    stranger = _as(other_token)
    started = time.monotonic()
    try:
        flavor = {"name": f"journey-{shard}", "resource_class": "baremetal"}
        _ok(admin.post(f"{api.url}/v1/flavors", json=flavor, timeout=TIMEOUT), 201)

        # Build: an image, an SSH key and user data.
        body: dict[str, Any] = {
            "flavor": flavor["name"],
            "name": "web",
            "image": FIRST_IMAGE,
            # base64-encoded, as Nova's API takes it (microversion 1.7 and later)
            "user_data": base64.b64encode(USER_DATA.encode()).decode(),
            "meta_data": {"public_keys": {"laptop": KEY}},
            "network_data": NETWORK_DATA,
            "tags": ["web", "prod"],
        }
        answer = tenant.post(f"{api.url}/v1/instances", json=body, timeout=TIMEOUT)
        [built] = _ok(answer, 202)["instances"]
        requests_made = [("create", answer.headers["x-openstack-request-id"])]
        url = f"{api.url}/v1/instances/{built['uuid']}"
        assert built["project_id"] == identity.project_id
        active = _settled(tenant, url, "active")
        # Where it runs is for admins only (Nova's extended server attributes).
        assert "node_uuid" not in active and "host" not in active
        assert _ok(admin.get(url, timeout=TIMEOUT), 200)["node_uuid"] == node
        assert active["image"]["source"] == FIRST_IMAGE["source"]
        assert active["config_drive"]["user_data"] == USER_DATA
        assert active["config_drive"]["meta_data"]["public_keys"] == {"laptop": KEY}
        seen = ironic.node(node)
        assert seen["instance_uuid"] == built["uuid"]
        assert seen["provision_state"] == "active"
        info = seen["instance_info"]
        assert info["image_source"] == FIRST_IMAGE["source"]
        assert (info["image_os_hash_algo"], info["image_os_hash_value"]) == ("sha256", "a1" * 32)
        assert info["configdrive"] == "******"  # Ironic received it (and hides it)
        _as_nova_shows_it(tenant, api.url, active, "ACTIVE")
        _found_by_tags(tenant, api.url, built["uuid"])

        # A second project sees none of it and can act on none of it.
        other = f"{api.url}/v1/instances/{built['uuid']}"
        assert stranger.get(other, timeout=TIMEOUT).status_code == 404
        listed = _ok(stranger.get(f"{api.url}/v1/instances", timeout=TIMEOUT), 200)["instances"]
        assert built["uuid"] not in {i["uuid"] for i in listed}
        refusals: list[dict[str, Any]] = [
            {"reboot": {"type": "HARD"}},
            {"os-stop": None},
            {"rebuild": {}},
        ]
        for action in refusals:
            refused = stranger.post(f"{other}/action", json=action, timeout=TIMEOUT)
            assert refused.status_code == 404, refused.text[:500]
        assert stranger.delete(other, timeout=TIMEOUT).status_code == 404
        _no_existence_signal(api.url, stranger, identity, built["uuid"], flavor["name"])
        assert tenant.get(url, timeout=TIMEOUT).json()["task_state"] is None

        # Reboot, stop, start: Ironic's power state follows, and Nova's status.
        for action, vm_state, power, status in (
            ({"reboot": {"type": "HARD"}}, "active", "power on", "ACTIVE"),
            ({"os-stop": None}, "stopped", "power off", "SHUTOFF"),
            ({"os-start": None}, "active", "power on", "ACTIVE"),
        ):
            answer = tenant.post(f"{url}/action", json=action, timeout=TIMEOUT)
            _ok(answer, 202)
            requests_made.append((next(iter(action)), answer.headers["x-openstack-request-id"]))
            _as_nova_shows_it(tenant, api.url, _settled(tenant, url, vm_state), status)
            assert ironic.node(node)["power_state"] == power, action

        # Rebuild with another image and a key pair (Nova's 2.54), on the same node.
        pair = {"keypair": {"name": "rebuild-key", "public_key": PAIR_KEY}}
        _ok(tenant.post(f"{api.url}/v1/keypairs", json=pair, timeout=TIMEOUT), 201)
        rebuild: dict[str, Any] = {"rebuild": {"image": SECOND_IMAGE, "key_name": "rebuild-key"}}
        answer = tenant.post(f"{url}/action", json=rebuild, timeout=TIMEOUT)
        _ok(answer, 202)
        requests_made.append(("rebuild", answer.headers["x-openstack-request-id"]))
        rebuilt = _settled(tenant, url, "active")
        assert _ok(admin.get(url, timeout=TIMEOUT), 200)["node_uuid"] == node
        assert rebuilt["image"]["source"] == SECOND_IMAGE["source"]
        assert rebuilt["key_name"] == "rebuild-key"
        assert rebuilt["config_drive"]["meta_data"]["public_keys"]["rebuild-key"] == PAIR_KEY
        _key_pairs_and_markers(api.url, tenant, admin, rebuilt["user_id"])
        info = ironic.node(node)["instance_info"]
        assert info["image_source"] == SECOND_IMAGE["source"]
        assert info["image_os_hash_value"] == "b2" * 64

        # Delete: the node goes back to available in Ironic.
        answer = tenant.delete(url, timeout=TIMEOUT)
        _ok(answer, 202)
        requests_made.append(("delete", answer.headers["x-openstack-request-id"]))
        _as_nova_shows_it(tenant, api.url, _settled(tenant, url, "deleted"), "DELETED")
        ironic.wait_for(
            node,
            lambda n: n["provision_state"] == "available" and n["instance_uuid"] is None,
            60,
            what="available again",
        )
        _history_as_nova_shows_it(tenant, url, requests_made)
        print(f"\ntenant journey on Ironic: {time.monotonic() - started:.1f} s")
    except BaseException:
        print(log_tails(fleet))
        print(api.log()[-3000:])
        raise
