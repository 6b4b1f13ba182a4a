# SPDX-License-Identifier: Apache-2.0
"""Nova's habits for a tenant, over HTTP with Keystone tokens, on a real Ironic:
key pairs, ``key_name``, base64 user data, instance metadata and tags.

A member of a Keystone project creates a key pair (imported) and has one
generated (its private key answered once), builds an instance with
``key_name``, base64-encoded ``user_data`` (microversion 1.7), ``metadata``
and ``tags``; the instance, once active in Ironic, carries the key in its
config drive's ``meta_data`` ``public_keys`` (Nova's meta_data.json) and the
metadata as ``meta``; the member changes its metadata and tags with Nova's
calls.  Another user of the same project does not see the key pairs (they
are per user, as Nova's); a member of another project sees neither the
instance's metadata nor its tags and can change none (404).  Real etcd,
RabbitMQ, PostgreSQL, Keystone and Ironic; the conductor, an agent and
ringfleet-api (gunicorn, keystonemiddleware) as processes.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.functional.api_harness import ApiServer
from tests.functional.fleet_harness import Fleet, log_tails, start_processes
from tests.functional.keystone_harness import Identity, keystone_api, make_identity
from tests.harness import wait_for
from tests.harness.ironic import IronicHarness

TIMEOUT = 30
V19 = {"OpenStack-API-Version": "baremetal-fleet 1.9"}
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGqBqsYBZz2C0tS0NWZHbHJ4kiAzz4AEp/7r4d1f9Eqm me@laptop"
USER_DATA = "#cloud-config\npackages: [nginx]\n"


@pytest.fixture
def identity(keystone_url: str) -> Identity:
    return make_identity(keystone_url)


@pytest.fixture
def api(fleet_on_ironic: Fleet, transport_url: str, identity: Identity) -> Iterator[ApiServer]:
    with keystone_api(fleet_on_ironic.workdir, transport_url, identity, "api-keypairs") as server:
        yield server


def _as(token: str) -> requests.Session:
    session = requests.Session()
    session.headers.update({"X-Auth-Token": token, **V19})
    return session


def _ok(response: requests.Response, status: int) -> Any:
    assert response.status_code == status, (
        f"{response.request.method} {response.url}: {response.status_code} {response.text[:2000]}"
    )
    return response.json() if response.content else {}


def _active(tenant: requests.Session, url: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def done() -> bool:
        seen.update(_ok(tenant.get(url, timeout=TIMEOUT), 200))
        assert seen["vm_state"] != "error", seen.get("fault")
        return bool(seen["vm_state"] == "active" and seen["task_state"] is None)

    wait_for(done, 90, f"instance active (last seen {seen})", step=0.2)
    return seen


def _key_pairs(
    keys: str, tenant: requests.Session, colleague: requests.Session, stranger: requests.Session
) -> str:
    """One key pair imported, one generated; per user, as Nova's.  Returns the imported's name."""
    name = f"laptop-{uuid.uuid4().hex[:6]}"
    body = {"keypair": {"name": name, "public_key": KEY}}
    imported = _ok(tenant.post(keys, json=body, timeout=TIMEOUT), 201)["keypair"]
    assert imported["public_key"] == KEY and len(imported["fingerprint"]) == 47
    generated = _ok(tenant.post(keys, json={"keypair": {"name": "gen"}}, timeout=TIMEOUT), 201)[
        "keypair"
    ]
    # The private key is answered once, and kept nowhere.
    assert generated["private_key"].startswith("-----BEGIN RSA PRIVATE KEY-----")
    shown = _ok(tenant.get(f"{keys}/gen", timeout=TIMEOUT), 200)["keypair"]
    assert "private_key" not in shown and shown["public_key"] == generated["public_key"]
    listed = _ok(tenant.get(keys, timeout=TIMEOUT), 200)["keypairs"]
    assert sorted(k["keypair"]["name"] for k in listed) == sorted(["gen", name])
    assert _ok(tenant.post(keys, json=body, timeout=TIMEOUT), 409)
    # A colleague of the same project sees none of them; another project neither.
    assert _ok(colleague.get(keys, timeout=TIMEOUT), 200)["keypairs"] == []
    assert colleague.get(f"{keys}/{name}", timeout=TIMEOUT).status_code == 404
    assert stranger.delete(f"{keys}/{name}", timeout=TIMEOUT).status_code == 404
    return name


def _labels(url: str, tenant: requests.Session, colleague: requests.Session) -> None:
    """Metadata and tags changed with Nova's calls; the project's reader sees them."""
    metadata, tags = f"{url}/metadata", f"{url}/tags"
    changed = _ok(tenant.post(metadata, json={"metadata": {"tier": "1"}}, timeout=TIMEOUT), 200)
    assert changed["metadata"] == {"owner": "team-a", "role": "web", "tier": "1"}
    item = {"meta": {"role": "db"}}
    assert _ok(tenant.put(f"{metadata}/role", json=item, timeout=TIMEOUT), 200) == item
    _ok(tenant.delete(f"{metadata}/owner", timeout=TIMEOUT), 204)
    assert _ok(tenant.get(f"{metadata}/role", timeout=TIMEOUT), 200) == item
    _ok(tenant.put(f"{tags}/blue", timeout=TIMEOUT), 201)
    _ok(tenant.put(f"{tags}/blue", timeout=TIMEOUT), 204)
    _ok(tenant.delete(f"{tags}/web", timeout=TIMEOUT), 204)
    assert _ok(tenant.get(tags, timeout=TIMEOUT), 200) == {"tags": ["blue", "prod"]}
    shown = _ok(tenant.get(url, timeout=TIMEOUT), 200)
    assert shown["metadata"] == {"role": "db", "tier": "1"}
    assert shown["tags"] == ["blue", "prod"]
    assert _ok(colleague.get(tags, timeout=TIMEOUT), 200) == {"tags": ["blue", "prod"]}
    assert colleague.put(f"{tags}/red", timeout=TIMEOUT).status_code == 403  # a reader


def _unseen(url: str, stranger: requests.Session) -> None:
    """Another project gets 404 for every label call, as for the instance."""
    metadata, tags = f"{url}/metadata", f"{url}/tags"
    for method, path, payload in (
        ("GET", metadata, None),
        ("GET", f"{metadata}/role", None),
        ("POST", metadata, {"metadata": {"x": "1"}}),
        ("PUT", f"{metadata}/role", {"meta": {"role": "x"}}),
        ("DELETE", f"{metadata}/role", None),
        ("GET", tags, None),
        ("GET", f"{tags}/prod", None),
        ("PUT", f"{tags}/evil", None),
        ("PUT", tags, {"tags": []}),
        ("DELETE", f"{tags}/prod", None),
    ):
        answer = stranger.request(method, path, json=payload, timeout=TIMEOUT)
        assert answer.status_code == 404, (method, path, answer.text[:300])


def test_a_tenant_builds_with_a_key_pair_metadata_and_tags_and_others_see_none(
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
    colleague = _as(identity.tokens["reader"])  # another user of the same project
    _project, other_token = identity.other_project()
    stranger = _as(other_token)
    keys = f"{api.url}/v1/keypairs"
    try:
        flavor = {"name": f"keys-{shard}", "resource_class": "baremetal"}
        _ok(admin.post(f"{api.url}/v1/flavors", json=flavor, timeout=TIMEOUT), 201)
        name = _key_pairs(keys, tenant, colleague, stranger)

        # Build with key_name, base64 user data, metadata and tags.
        build = {
            "flavor": flavor["name"],
            "name": "web",
            "key_name": name,
            "user_data": base64.b64encode(USER_DATA.encode()).decode(),
            "metadata": {"role": "web", "owner": "team-a"},
            "tags": ["prod", "web"],
        }
        [built] = _ok(tenant.post(f"{api.url}/v1/instances", json=build, timeout=TIMEOUT), 202)[
            "instances"
        ]
        assert built["key_name"] == name and built["tags"] == ["prod", "web"]
        url = f"{api.url}/v1/instances/{built['uuid']}"
        active = _active(tenant, url)
        assert active["config_drive"]["user_data"] == USER_DATA  # decoded by the server
        meta_data = active["config_drive"]["meta_data"]
        assert meta_data["public_keys"] == {name: KEY}  # Nova's meta_data.json
        assert meta_data["meta"] == {"role": "web", "owner": "team-a"}
        assert active["metadata"] == {"owner": "team-a", "role": "web"}
        assert ironic.node(node)["instance_info"]["configdrive"] == "******"  # Ironic has it

        _labels(url, tenant, colleague)
        _unseen(url, stranger)
        assert _ok(tenant.get(url, timeout=TIMEOUT), 200)["tags"] == ["blue", "prod"]
        listed = _ok(stranger.get(f"{api.url}/v1/instances", timeout=TIMEOUT), 200)["instances"]
        assert built["uuid"] not in {i["uuid"] for i in listed}

        # A key pair deleted: the instance keeps its key.
        _ok(tenant.delete(f"{keys}/{name}", timeout=TIMEOUT), 204)
        assert tenant.get(f"{keys}/{name}", timeout=TIMEOUT).status_code == 404
        kept = _ok(tenant.get(url, timeout=TIMEOUT), 200)
        assert kept["config_drive"]["meta_data"]["public_keys"] == {name: KEY}
        assert kept["key_name"] == name
        _ok(tenant.delete(url, timeout=TIMEOUT), 202)
    except BaseException:
        print(log_tails(fleet))
        print(api.log()[-3000:])
        raise
