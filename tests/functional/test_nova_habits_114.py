# SPDX-License-Identifier: Apache-2.0
"""Microversion 1.14 as a tenant and an admin used to Nova meet it, over
HTTP with real Keystone tokens: key pairs a page at a time (Nova's 2.35),
another user's key pairs for an admin (Nova's 2.10), and a list's marker
that is not in the list answered 400 naming it, as Nova answers.

A member creates five key pairs and pages them two at a time along the
``next`` links, through the API and through the CLI; an admin of the
project lists, creates, shows and deletes the member's key pairs by
``user_id``, and the member naming the admin is refused.  An instance list
sorted by ``sort_key`` and an action history given a marker of nothing
answer 400 (404 at 1.13), and ``/v1/limits`` shows Nova's
``maxServerMeta``.  Real etcd, RabbitMQ, PostgreSQL and Keystone; a
conductor and ringfleet-api (gunicorn, keystonemiddleware) as processes,
no agent (the instance's build fails: its history is what is paged).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
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

TIMEOUT = 60
V114 = {"OpenStack-API-Version": "baremetal-fleet 1.14"}
V113 = {"OpenStack-API-Version": "baremetal-fleet 1.13"}
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGqBqsYBZz2C0tS0NWZHbHJ4kiAzz4AEp/7r4d1f9Eqm me@laptop"
NAMES = ("k-c", "k-a", "k-e", "k-b", "k-d")


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
        tmp_path_factory.mktemp("nova-habits-114"),
        database_url=database_url,
        db_prefix="rf_nova_114",
        transport_url=transport_url,
        etcd_url=etcd_url,
    ) as f:
        yield f


@pytest.fixture(scope="module")
def api(fleet: Fleet, transport_url: str, identity: Identity) -> Iterator[ApiServer]:
    with keystone_api(fleet.workdir, transport_url, identity, "api-nova-114") as server:
        yield server


def _as(token: str, version: dict[str, str] = V114) -> requests.Session:
    return token_session(token, version)


def _refused(response: requests.Response, status: int, field: str) -> None:
    assert response.status_code == status, (response.status_code, response.text[:2000])
    assert [e["field"] for e in response.json()["errors"]] == [field], response.text


def _pages(session: requests.Session, url: str) -> list[list[str]]:
    """The key pairs' names, page by page along the ``next`` links."""
    pages: list[list[str]] = []
    next_url: str | None = url
    while next_url:
        body = answered(session.get(next_url, timeout=TIMEOUT))
        pages.append([k["keypair"]["name"] for k in body["keypairs"]])
        next_url = body.get("next")
    return pages


def _cli(api: ApiServer, token: str, *argv: str) -> Any:
    """``ringfleet`` over HTTP with the token as it is; its JSON output."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    done = subprocess.run(
        [sys.executable, str(Path(sys.executable).parent / "ringfleet"), *argv, "-f", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**clean, "OS_ENDPOINT": api.url, "OS_TOKEN": token},
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _key_pair_pages(api: ApiServer, identity: Identity) -> str:
    """The member's five key pairs, two a page, by the API and the CLI; the member's user id."""
    url, tenant = api.url, _as(identity.tokens["member"])
    made = [
        answered(
            tenant.post(
                f"{url}/v1/keypairs", json={"keypair": {"name": n, "public_key": KEY}}, timeout=60
            ),
            201,
        )["keypair"]
        for n in NAMES
    ]
    assert _pages(tenant, f"{url}/v1/keypairs?limit=2") == [["k-a", "k-b"], ["k-c", "k-d"], ["k-e"]]
    assert _pages(tenant, f"{url}/v1/keypairs?limit=2&marker=k-d") == [["k-e"]]
    _refused(tenant.get(f"{url}/v1/keypairs?marker=k-z", timeout=TIMEOUT), 400, "marker")
    old = _as(identity.tokens["member"], V113).get(f"{url}/v1/keypairs?limit=2", timeout=TIMEOUT)
    _refused(old, 400, "limit")
    token = identity.tokens["member"]
    page = _cli(api, token, "keypair", "list", "--limit", "2", "--marker", "k-b")
    assert [row["Name"] for row in page] == ["k-c", "k-d"]
    assert [row["Name"] for row in _cli(api, token, "keypair", "list")] == sorted(NAMES)
    return str(made[0]["user_id"])


def _another_users_key_pairs(api: ApiServer, identity: Identity, member: str) -> None:
    """An admin of the project reaches the member's key pairs by user id; the
    member does not reach the admin's, nor does a system-scoped admin any."""
    url, tenant, admin = api.url, _as(identity.tokens["member"]), _as(identity.tokens["admin"])
    own = {"keypair": {"name": "admins-own", "public_key": KEY}}
    created = answered(admin.post(f"{url}/v1/keypairs", json=own, timeout=TIMEOUT), 201)
    admin_user = created["keypair"]["user_id"]
    theirs = answered(admin.get(f"{url}/v1/keypairs?user_id={member}", timeout=TIMEOUT))["keypairs"]
    assert [k["keypair"]["name"] for k in theirs] == sorted(NAMES)
    given = {"keypair": {"name": "from-admin", "public_key": KEY, "user_id": member}}
    created = admin.post(f"{url}/v1/keypairs", json=given, timeout=TIMEOUT)
    assert answered(created, 201)["keypair"]["user_id"] == member
    assert created.headers["Location"].endswith(f"/v1/keypairs/from-admin?user_id={member}")
    assert answered(tenant.get(f"{url}/v1/keypairs/from-admin", timeout=TIMEOUT))["keypair"]
    assert answered(admin.get(created.headers["Location"], timeout=TIMEOUT))["keypair"]["name"] == (
        "from-admin"
    )
    answered(admin.delete(created.headers["Location"], timeout=TIMEOUT), 204)
    assert tenant.get(f"{url}/v1/keypairs/from-admin", timeout=TIMEOUT).status_code == 404
    # The member naming the admin: 403 naming the field; naming itself is itself.
    _refused(tenant.get(f"{url}/v1/keypairs?user_id={admin_user}", timeout=TIMEOUT), 403, "user_id")
    sneaky = {"keypair": {"name": "planted", "public_key": KEY, "user_id": admin_user}}
    _refused(
        tenant.post(f"{url}/v1/keypairs", json=sneaky, timeout=TIMEOUT), 403, "keypair.user_id"
    )
    mine = answered(tenant.get(f"{url}/v1/keypairs?user_id={member}", timeout=TIMEOUT))["keypairs"]
    assert len(mine) == len(NAMES)
    # The key pair rules are project-scoped: a system administrator reaches none.
    system = _as(identity.system_token("admin"))
    assert system.get(f"{url}/v1/keypairs?user_id={member}", timeout=TIMEOUT).status_code == 403


def _markers_not_in_the_list(api: ApiServer, identity: Identity) -> None:
    """400 naming marker, as Nova's (404 at 1.13)."""
    url, tenant, admin = api.url, _as(identity.tokens["member"]), _as(identity.tokens["admin"])
    flavor = {"name": "habits-114", "resource_class": "baremetal"}
    answered(admin.post(f"{url}/v1/flavors", json=flavor, timeout=TIMEOUT), 201)
    # No node: the build fails, and its history has its create.
    [built] = answered(
        tenant.post(f"{url}/v1/instances", json={"flavor": "habits-114"}, timeout=TIMEOUT), 202
    )["instances"]
    nowhere = uuid.uuid4()
    for path in (
        f"/v1/instances?sort_key=created_at&marker={nowhere}",
        f"/v1/instances/{built['uuid']}/actions?marker=req-{nowhere}",
    ):
        _refused(tenant.get(f"{url}{path}", timeout=TIMEOUT), 400, "marker")
        old = _as(identity.tokens["member"], V113).get(f"{url}{path}", timeout=TIMEOUT)
        assert old.status_code == 404, old.text
    # The limits show Nova's maxServerMeta; 1.13 does not.
    absolute = answered(tenant.get(f"{url}/v1/limits", timeout=TIMEOUT))["limits"]["absolute"]
    assert absolute["maxServerMeta"] == 128
    older = _as(identity.tokens["member"], V113).get(f"{url}/v1/limits", timeout=TIMEOUT)
    assert "maxServerMeta" not in answered(older)["limits"]["absolute"]
    # A marker in the list pages on.
    first = answered(tenant.get(f"{url}/v1/instances?sort_key=created_at&limit=1", timeout=TIMEOUT))
    after = f"{url}/v1/instances?sort_key=created_at&marker={first['instances'][0]['uuid']}"
    assert answered(tenant.get(after, timeout=TIMEOUT))["instances"] == []


def test_key_pair_pages_another_users_key_pairs_and_markers_as_in_nova(
    fleet: Fleet, api: ApiServer, identity: Identity
) -> None:
    try:
        member = _key_pair_pages(api, identity)
        _another_users_key_pairs(api, identity, member)
        _markers_not_in_the_list(api, identity)
    except BaseException:
        print(log_tails(fleet))
        print(api.log()[-3000:])
        raise
