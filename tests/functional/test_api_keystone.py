# SPDX-License-Identifier: Apache-2.0
"""ringfleet-api with ``auth_strategy = keystone`` against a real Keystone.

The Keystone of ``tools/with-test-servers.sh`` (keystone-manage bootstrap's
admin); this module makes its own project, a user with each of the
``reader``, ``member`` and ``admin`` roles on it, and a service user (role
``service``) for keystonemiddleware.  The API runs under gunicorn
(:class:`~tests.functional.api_harness.ApiServer`) in front of one real
conductor (etcd, RabbitMQ, PostgreSQL); tokens are real Keystone tokens,
checked by keystonemiddleware over HTTP.

``[keystone_authtoken] token_cache_time = -1``: keystonemiddleware asks
Keystone about every request, so a revoked token and an outage show on the
next request (with the default 300 s cache a revoked token keeps working
for up to five minutes, and known tokens through an outage).
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator

import pytest
import requests

from conductor.common.exception import DuplicateInstance
from tests.functional.api_harness import ApiServer
from tests.functional.fleet_harness import Fleet, running_fleet
from tests.functional.keystone_harness import ROLES, Identity, keystone_api, make_identity

TIMEOUT = 30


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
        tmp_path_factory.mktemp("api-ks-fleet"),
        database_url=database_url,
        db_prefix="rf_api_ks",
        transport_url=transport_url,
        etcd_url=etcd_url,
    ) as f:
        yield f


@pytest.fixture(scope="module")
def server(fleet: Fleet, transport_url: str, identity: Identity) -> Iterator[ApiServer]:
    # debug off: the log is what an operator sees.
    with keystone_api(fleet.workdir, transport_url, identity, "api-ks") as server:
        yield server


def _as(token: str | None) -> requests.Session:
    session = requests.Session()
    if token is not None:
        session.headers["X-Auth-Token"] = token
    return session


def _refused(response: requests.Response, status: int, code: str) -> None:
    assert response.status_code == status, (response.status_code, response.text[:2000])
    error = response.json()["errors"][0]
    assert error["code"] == code, error
    assert error["request_id"] == response.headers["x-openstack-request-id"]


def test_no_token_or_a_bogus_one_is_401_naming_keystone(
    server: ApiServer, identity: Identity
) -> None:
    for token in (None, "gAAAAAB-not-a-token", "x" * 40):
        response = _as(token).get(f"{server.url}/v1/nodes", timeout=TIMEOUT)
        _refused(response, 401, "ringfleet.unauthorized")
        # One challenge, keystonemiddleware's, naming the real Keystone.
        challenges = response.raw.headers.getlist("WWW-Authenticate")
        assert challenges == [f'Keystone uri="{identity.url}"'], challenges
    # Public documents need no token.
    assert _as(None).get(f"{server.url}/v1/openapi.json", timeout=TIMEOUT).status_code == 200


def test_keystone_roles_drive_the_policy(server: ApiServer, identity: Identity) -> None:
    url = server.url
    reader, member, admin = (_as(identity.tokens[role]) for role in ROLES)
    node = {"name": f"ks-{uuid.uuid4().hex[:8]}", "resource_class": "baremetal"}
    missing = f"{url}/v1/instances/{uuid.uuid4()}"
    flavor = {"name": "ks-small", "resource_class": "baremetal"}

    assert reader.get(f"{url}/v1/flavors", timeout=TIMEOUT).status_code == 200
    for denied in (
        reader.get(f"{url}/v1/nodes", timeout=TIMEOUT),  # the inventory is the operator's
        member.get(f"{url}/v1/nodes", timeout=TIMEOUT),
        reader.post(f"{url}/v1/nodes", json=node, timeout=TIMEOUT),
        reader.delete(missing, timeout=TIMEOUT),
        member.post(f"{url}/v1/nodes", json=node, timeout=TIMEOUT),
        member.post(f"{url}/v1/flavors", json=flavor, timeout=TIMEOUT),
    ):
        _refused(denied, 403, "ringfleet.forbidden")
    # A member may delete instances: the policy lets it through and the
    # conductor answers (there is no such instance).
    _refused(member.delete(missing, timeout=TIMEOUT), 404, "ringfleet.not_found")
    assert member.get(f"{url}/v1/fleet/status", timeout=TIMEOUT).status_code == 200

    created = admin.post(f"{url}/v1/nodes", json=node, timeout=TIMEOUT)
    assert created.status_code == 201, created.text[:2000]
    shown = admin.get(created.headers["Location"], timeout=TIMEOUT)
    assert shown.status_code == 200 and shown.json()["name"] == node["name"]
    _refused(reader.get(created.headers["Location"], timeout=TIMEOUT), 403, "ringfleet.forbidden")


def test_a_token_revoked_in_keystone_is_refused(server: ApiServer, identity: Identity) -> None:
    token = identity.tokens["reader"]
    assert _as(token).get(f"{server.url}/v1/flavors", timeout=TIMEOUT).status_code == 200
    identity.admin.delete(f"{identity.url}/auth/tokens", headers={"X-Subject-Token": token})
    response = _as(token).get(f"{server.url}/v1/nodes", timeout=TIMEOUT)
    _refused(response, 401, "ringfleet.unauthorized")


def _ctl(*args: str) -> str:
    return subprocess.run(
        [os.environ["RINGFLEET_TEST_CTL"], *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout.strip()


def test_a_keystone_outage_is_503_then_heals(server: ApiServer, identity: Identity) -> None:
    member = _as(identity.tokens["member"])
    assert member.get(f"{server.url}/v1/flavors", timeout=TIMEOUT).status_code == 200
    before = len(server.log())
    _ctl("kill-keystone")
    try:
        response = member.get(f"{server.url}/v1/flavors", timeout=TIMEOUT)
        _refused(response, 503, "ringfleet.keystone_unavailable")
        assert response.headers["Retry-After"] == "5"
        assert "WWW-Authenticate" not in response.headers
        # Still a 401 without a token: nothing to ask Keystone.
        _refused(_as(None).get(f"{server.url}/v1/nodes"), 401, "ringfleet.unauthorized")
        # One line about it (keystonemiddleware's CRITICAL), no traceback;
        # before it keystoneauth retried (http_request_max_retries, 3 by
        # default), a WARNING each.
        logged = server.log()[before:]
        assert "Traceback" not in logged, logged
        lines = logged.splitlines()
        critical = [line for line in lines if " CRITICAL " in line]
        assert len(critical) == 1 and "Unable to validate token" in critical[0], logged
        others = [
            line
            for line in lines
            if line not in critical
            and " INFO conductor.api.app " not in line
            and not (" WARNING keystoneauth.session " in line and "Retrying in" in line)
        ]
        assert others == [], logged
    finally:
        _ctl("start-keystone")
    assert member.get(f"{server.url}/v1/flavors", timeout=TIMEOUT).status_code == 200


def test_an_instance_belongs_to_the_tokens_project(server: ApiServer, identity: Identity) -> None:
    """Invariant 12 with Keystone tokens: the instance takes the token's
    project and user; a member of another project gets 404 for it."""
    url = server.url
    v12 = {"OpenStack-API-Version": "baremetal-fleet 1.2"}
    member, admin = _as(identity.tokens["member"]), _as(identity.tokens["admin"])
    flavor = {"name": f"ks-{uuid.uuid4().hex[:8]}", "resource_class": "baremetal"}
    assert admin.post(f"{url}/v1/flavors", json=flavor, timeout=TIMEOUT).status_code == 201
    built = member.post(
        f"{url}/v1/instances", json={"flavor": flavor["name"]}, headers=v12, timeout=TIMEOUT
    )
    assert built.status_code == 202, built.text[:2000]
    [instance] = built.json()["instances"]
    assert instance["project_id"] == identity.project_id
    assert instance["user_id"] and instance["user_id"] != "token-1"

    # A member of another project.
    _project, other_token = identity.other_project()
    stranger = _as(other_token)
    path = f"{url}/v1/instances/{instance['uuid']}"
    _refused(stranger.get(path, timeout=TIMEOUT), 404, "ringfleet.not_found")
    _refused(stranger.delete(path, timeout=TIMEOUT), 404, "ringfleet.not_found")
    # Its uuid in a build: refused as any unusable uuid, naming no project.
    reused = {"flavor": flavor["name"], "instance_uuids": [instance["uuid"]]}
    clash = stranger.post(f"{url}/v1/instances", json=reused, headers=v12, timeout=TIMEOUT)
    _refused(clash, 409, "ringfleet.conflict")
    [error] = clash.json()["errors"]
    assert (error["field"], error["reason"]) == ("instance_uuids", DuplicateInstance.UNUSABLE)
    assert identity.project_id not in clash.text
    listed = stranger.get(f"{url}/v1/instances", timeout=TIMEOUT).json()["instances"]
    assert instance["uuid"] not in {i["uuid"] for i in listed}
    assert member.delete(path, timeout=TIMEOUT).status_code == 202


def test_a_system_scoped_admin_runs_the_fleet_but_reaches_no_project(
    server: ApiServer, identity: Identity
) -> None:
    """Scope as Nova enforces it: a system-scoped admin token gets 403 on the
    project rules (instances, quotas) and passes the operator's (nodes)."""
    url = server.url
    v12 = {"OpenStack-API-Version": "baremetal-fleet 1.2"}
    system_admin = _as(identity.system_token("admin"))
    _refused(
        system_admin.get(f"{url}/v1/instances", headers=v12, timeout=TIMEOUT),
        403,
        "ringfleet.forbidden",
    )
    _refused(
        system_admin.get(f"{url}/v1/quotas", headers=v12, timeout=TIMEOUT),
        403,
        "ringfleet.forbidden",
    )
    listed = system_admin.get(f"{url}/v1/nodes", timeout=TIMEOUT)
    assert listed.status_code == 200, listed.text[:2000]
    node = {"name": f"ks-sys-{uuid.uuid4().hex[:8]}", "resource_class": "baremetal"}
    created = system_admin.post(f"{url}/v1/nodes", json=node, timeout=TIMEOUT)
    assert created.status_code == 201, created.text[:2000]
    assert system_admin.get(f"{url}/v1/fleet/check", timeout=TIMEOUT).status_code == 200
