# SPDX-License-Identifier: Apache-2.0
"""Microversion 1.13 as a tenant used to Nova meets it, over HTTP with real
Keystone tokens: the key_pairs quota under 50 concurrent creations, its
limits, Nova's tag filters, a rebuild with another key pair (and none) and
the action history a page at a time.

An admin gives the member's project a ``key_pairs`` limit of 5; the member
creates 50 key pairs at once (50 threads, each its own connection): 5 are
created, 45 refused with 403, and ``/v1/limits`` and the quota say 5 of 5.
The member builds two tagged instances on simulated nodes (one with a key
pair), lists them by Nova's tag filters, rebuilds one with another key
pair, then with none, and pages its actions.  A member of another project
sees none of it.  Real etcd, RabbitMQ, PostgreSQL and Keystone; the
conductor, an agent (simulated driver) and ringfleet-api (gunicorn,
keystonemiddleware) as processes.
"""

from __future__ import annotations

import datetime
import time
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests

from tests.functional.api_harness import ApiServer
from tests.functional.fleet_harness import Fleet, log_tails, running_fleet
from tests.functional.keystone_harness import (
    Identity,
    answered,
    keystone_api,
    make_identity,
    token_session,
)
from tests.harness import wait_for

TIMEOUT = 60
V113 = {"OpenStack-API-Version": "baremetal-fleet 1.13"}
V112 = {"OpenStack-API-Version": "baremetal-fleet 1.12"}
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGqBqsYBZz2C0tS0NWZHbHJ4kiAzz4AEp/7r4d1f9Eqm me@laptop"
LIMIT = 5
RACERS = 50


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
        tmp_path_factory.mktemp("nova-habits-113"),
        database_url=database_url,
        db_prefix="rf_nova_113",
        transport_url=transport_url,
        etcd_url=etcd_url,
        agents=("agent-1",),
    ) as f:
        yield f


@pytest.fixture(scope="module")
def api(fleet: Fleet, transport_url: str, identity: Identity) -> Iterator[ApiServer]:
    with keystone_api(fleet.workdir, transport_url, identity, "api-nova-113") as server:
        yield server


def _as(token: str, version: dict[str, str] = V113) -> requests.Session:
    return token_session(token, version)


def _settled(session: requests.Session, url: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def done() -> bool:
        seen.update(answered(session.get(url, timeout=TIMEOUT)))
        assert seen["vm_state"] != "error", seen.get("fault")
        return bool(seen["vm_state"] == "active" and seen["task_state"] is None)

    wait_for(done, 90, f"instance active (last seen {seen})", step=0.2)
    return seen


def _race_key_pairs(url: str, token: str) -> list[int]:
    """50 creations at once, each on its own connection: their statuses."""

    def create(index: int) -> int:
        with _as(token) as session:
            body = {"keypair": {"name": f"racer-{index:02d}", "public_key": KEY}}
            return session.post(f"{url}/v1/keypairs", json=body, timeout=TIMEOUT).status_code

    with ThreadPoolExecutor(RACERS) as pool:
        return list(pool.map(create, range(RACERS)))


def _key_pair_quota(url: str, identity: Identity) -> list[str]:
    """The race against the limit, and what the quota and limits say; the names created."""
    admin, tenant = _as(identity.tokens["admin"]), _as(identity.tokens["member"])
    quota_url = f"{url}/v1/quotas/{identity.project_id}"
    answered(admin.put(quota_url, json={"quotas": {"key_pairs": LIMIT}}, timeout=TIMEOUT))
    started = time.monotonic()
    statuses = _race_key_pairs(url, identity.tokens["member"])
    print(f"\n{RACERS} concurrent key pair creations: {time.monotonic() - started:.2f} s")
    assert sorted(statuses) == [201] * LIMIT + [403] * (RACERS - LIMIT), statuses
    names = [
        k["keypair"]["name"]
        for k in answered(tenant.get(f"{url}/v1/keypairs", timeout=TIMEOUT))["keypairs"]
    ]
    assert len(names) == LIMIT
    over = tenant.post(
        f"{url}/v1/keypairs", json={"keypair": {"name": "one-more"}}, timeout=TIMEOUT
    )
    assert over.status_code == 403 and over.json()["errors"][0]["code"] == (
        "ringfleet.quota_exceeded"
    )
    absolute = answered(tenant.get(f"{url}/v1/limits", timeout=TIMEOUT))["limits"]["absolute"]
    assert (absolute["maxTotalKeypairs"], absolute["totalKeyPairsUsed"]) == (LIMIT, LIMIT)
    shown = answered(tenant.get(quota_url, timeout=TIMEOUT))["quotas"]["key_pairs"]
    assert shown == {"limit": LIMIT, "in_use": LIMIT, "default": False}
    # Below 1.13 neither shows key pairs.
    old = answered(_as(identity.tokens["member"], V112).get(quota_url, timeout=TIMEOUT))
    assert "key_pairs" not in old["quotas"]
    return names


def _tagged(url: str, tenant: requests.Session, key: str) -> dict[str, str]:
    """Two tagged instances, active; their links by name."""
    links = {}
    for name, tags, key_name in (
        ("web-1", ["prod", "web"], key),
        ("web-2", ["prod", "canary"], None),
    ):
        body: dict[str, Any] = {"flavor": "habits-113", "name": name, "tags": tags}
        if key_name is not None:
            body["key_name"] = key_name
        [built] = answered(tenant.post(f"{url}/v1/instances", json=body, timeout=TIMEOUT), 202)[
            "instances"
        ]
        links[name] = f"{url}/v1/instances/{built['uuid']}"
    for link in links.values():
        _settled(tenant, link)

    def listed(query: str) -> list[str]:
        body = answered(tenant.get(f"{url}/v1/instances?{query}", timeout=TIMEOUT))
        return sorted(i["name"] for i in body["instances"])

    assert listed("tags=prod,web") == ["web-1"]
    assert listed("tags=prod") == ["web-1", "web-2"]
    assert listed("tags-any=web,canary") == ["web-1", "web-2"]
    assert listed("not-tags=prod,web") == ["web-2"]
    assert listed("not-tags-any=canary") == ["web-1"]
    assert listed("tags=prod&not-tags-any=canary&sort_key=display_name") == ["web-1"]
    bad = tenant.get(f"{url}/v1/instances?tags-any=a/b", timeout=TIMEOUT)
    assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "tags-any"
    return links


def _rebuilt_with_keys(tenant: requests.Session, link: str, old: str, new: str) -> list[str]:
    """Rebuild with another key pair, then with none; the requests' ids."""
    before = answered(tenant.get(link, timeout=TIMEOUT))
    assert before["key_name"] == old
    assert before["config_drive"]["meta_data"]["public_keys"] == {old: KEY}
    ids = []
    for key_name in (new, None):
        reply = tenant.post(
            f"{link}/action", json={"rebuild": {"key_name": key_name}}, timeout=TIMEOUT
        )
        answered(reply, 202)
        ids.append(reply.headers["x-openstack-request-id"])
        after = _settled(tenant, link)
        assert after["key_name"] == key_name
        keys = after["config_drive"]["meta_data"].get("public_keys")
        assert keys == ({new: KEY} if key_name else None), after["config_drive"]
    unknown = tenant.post(f"{link}/action", json={"rebuild": {"key_name": "nope"}}, timeout=TIMEOUT)
    assert unknown.status_code == 400 and unknown.json()["errors"][0]["field"] == "key_name"
    return ids


def _paged_actions(tenant: requests.Session, link: str, expected: list[str]) -> None:
    """The history a page of one at a time: every action once, newest first."""
    seen: list[str] = []
    next_url: str | None = f"{link}/actions?limit=1"
    while next_url:
        body = answered(tenant.get(next_url, timeout=TIMEOUT))
        seen += [a["request_id"] for a in body["instanceActions"]]
        next_url = body.get("next")
    assert seen == expected
    whole = answered(tenant.get(f"{link}/actions", timeout=TIMEOUT))["instanceActions"]
    created = datetime.datetime.fromisoformat(whole[-1]["updated_at"])
    before = urllib.parse.quote(created.isoformat())
    old = answered(tenant.get(f"{link}/actions?changes-before={before}", timeout=TIMEOUT))
    assert [a["action"] for a in old["instanceActions"]] == ["create"]
    newer = answered(tenant.get(f"{link}/actions?changes-since={before}&limit=10", timeout=TIMEOUT))
    assert [a["action"] for a in newer["instanceActions"]] == ["rebuild", "rebuild", "create"]
    missing = tenant.get(f"{link}/actions?marker=req-none", timeout=TIMEOUT)
    assert missing.status_code == 404


def test_key_pair_quota_tag_filters_rebuild_keys_and_action_pages(
    fleet: Fleet, api: ApiServer, identity: Identity
) -> None:
    url = api.url
    admin, tenant = _as(identity.tokens["admin"]), _as(identity.tokens["member"])
    _stranger_project, stranger_token = identity.other_project()
    stranger = _as(stranger_token)
    try:
        for index in range(2):
            node = {"name": f"habit113-{index}", "resource_class": "baremetal"}
            answered(admin.post(f"{url}/v1/nodes", json=node, timeout=TIMEOUT), 201)
        flavor = {"name": "habits-113", "resource_class": "baremetal"}
        answered(admin.post(f"{url}/v1/flavors", json=flavor, timeout=TIMEOUT), 201)
        wait_for(lambda: None not in fleet.owned_by(), 60, "every node owned")

        first, second, *_ = _key_pair_quota(url, identity)
        links = _tagged(url, tenant, first)
        build_request = answered(tenant.get(f"{links['web-1']}/actions", timeout=TIMEOUT))[
            "instanceActions"
        ][-1]["request_id"]
        rebuilds = _rebuilt_with_keys(tenant, links["web-1"], first, second)
        _paged_actions(tenant, links["web-1"], [*reversed(rebuilds), build_request])

        # Another project: no instance by any tag, no actions, its own key pair quota.
        assert answered(stranger.get(f"{url}/v1/instances?tags=prod", timeout=TIMEOUT)) == {
            "instances": []
        }
        assert stranger.get(f"{links['web-1']}/actions?limit=1", timeout=TIMEOUT).status_code == 404
        theirs = answered(stranger.get(f"{url}/v1/limits", timeout=TIMEOUT))["limits"]["absolute"]
        assert (theirs["maxTotalKeypairs"], theirs["totalKeyPairsUsed"]) == (100, 0)
    except BaseException:
        print(log_tails(fleet))
        print(api.log()[-3000:])
        raise
