# SPDX-License-Identifier: Apache-2.0
"""Token scope: the policy's ``scope_types``, enforced.

A system-scoped token (Keystone's ``OpenStack-System-Scope: all``, as
keystonemiddleware sets it) passes the operator's rules (nodes, flavors,
the fleet, agents) with the roles they ask for and gets 403 on every
instance and quota rule, as Nova's project-scoped rules answer it; a
domain-scoped token passes none.  The application behind
:class:`conductor.api.auth.Authenticate` under ``auth_strategy =
keystone``, the requests carrying what keystonemiddleware would set.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from oslo_context import context as request_context

from conductor.api import policy
from tests.unit.test_api import FakeConductors, _behind_keystone_auth, call

CONFIRMED = {"X_Identity_Status": "Confirmed", "X_User_Id": "u-1"}
ADMIN_ROLES = "admin,member,reader"
SYSTEM_ADMIN = {**CONFIRMED, "X_Roles": ADMIN_ROLES, "OpenStack_System_Scope": "all"}
SYSTEM_READER = {**CONFIRMED, "X_Roles": "reader", "OpenStack_System_Scope": "all"}
PROJECT_ADMIN = {**CONFIRMED, "X_Roles": ADMIN_ROLES, "X_Project_Id": "p1"}
DOMAIN_ADMIN = {**CONFIRMED, "X_Roles": ADMIN_ROLES, "X_Domain_Id": "default"}
INSTANCE = "5f0c7e39-5d11-4d3c-9c43-b3e6d7d1b0a2"
V12 = {"OpenStack_API_Version": "baremetal-fleet 1.2"}

#: (method, path, body) of project rules: instances and quotas.
PROJECT_CALLS = [
    ("GET", "/v1/instances", None),
    ("GET", f"/v1/instances/{INSTANCE}", None),
    ("GET", "/v1/instances?all_projects=1", None),
    ("POST", "/v1/instances", {"flavor": "f"}),
    ("DELETE", f"/v1/instances/{INSTANCE}", None),
    ("GET", "/v1/quotas", None),
    ("GET", "/v1/quotas/p1", None),
    ("PUT", "/v1/quotas/p1", {"quotas": {"instances": 1}}),
]
#: (method, path, body, status) of the system admin's calls.
SYSTEM_CALLS = [
    ("GET", "/v1/nodes", None, 200),
    ("GET", "/v1/nodes/n1", None, 200),
    ("POST", "/v1/nodes", {"name": "n1", "resource_class": "x"}, 201),
    ("POST", "/v1/nodes/sync", None, 200),
    ("GET", "/v1/flavors", None, 200),
    ("POST", "/v1/flavors", {"name": "f", "resource_class": "x"}, 201),
    ("GET", "/v1/fleet/status", None, 200),
    ("GET", "/v1/fleet/check", None, 200),
    ("POST", "/v1/agents/a/drain", None, 202),
]


class ContextRecorder(FakeConductors):
    """Also records each call's ``is_admin`` (what the conductors are told)."""

    def __init__(self) -> None:
        super().__init__()
        self.is_admin: list[bool] = []

    def __getattr__(self, name: str) -> Any:
        inner = super().__getattr__(name)

        def recorded(*args: Any, **kwargs: Any) -> Any:
            current = request_context.get_current()
            self.is_admin.append(bool(current and current.is_admin))
            return inner(*args, **kwargs)

        return recorded


@pytest.fixture
def keystone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ContextRecorder]:
    monkeypatch.setattr("tests.unit.test_api.FakeConductors", ContextRecorder)
    application, fake = _behind_keystone_auth(tmp_path)
    assert isinstance(fake, ContextRecorder)
    return application, fake


@pytest.mark.parametrize(("method", "path", "body"), PROJECT_CALLS)
def test_a_system_scoped_admin_gets_403_on_every_project_rule(
    keystone: tuple[Any, ContextRecorder], method: str, path: str, body: Any
) -> None:
    application, fake = keystone
    refused = call(application, method, path, body, **SYSTEM_ADMIN, **V12)
    assert refused.status_code == 403, refused.text
    [error] = refused.json["errors"]
    assert error["code"] == "ringfleet.forbidden"
    assert error["detail"].startswith("policy does not allow ringfleet:")
    assert fake.calls == []
    # The same roles on a project pass the policy (the fake knows no instance).
    allowed = call(application, method, path, body, **PROJECT_ADMIN, **V12)
    assert allowed.status_code in (200, 202, 404), allowed.text
    assert fake.calls


@pytest.mark.parametrize(("method", "path", "body", "status"), SYSTEM_CALLS)
def test_the_system_admin_runs_the_fleet(
    keystone: tuple[Any, ContextRecorder], method: str, path: str, body: Any, status: int
) -> None:
    application, fake = keystone
    answered = call(application, method, path, body, **SYSTEM_ADMIN)
    assert answered.status_code == status, answered.text
    # An admin to the conductors: node inventory with instance uuids, the check.
    assert fake.is_admin == [True]


def test_a_system_reader_reads_but_changes_nothing(keystone: tuple[Any, ContextRecorder]) -> None:
    application, fake = keystone
    assert call(application, "GET", "/v1/fleet/status", **SYSTEM_READER).status_code == 200
    assert fake.is_admin == [False]
    body = {"name": "n1", "resource_class": "x"}
    assert call(application, "POST", "/v1/nodes", body, **SYSTEM_READER).status_code == 403
    assert call(application, "GET", "/v1/instances", **SYSTEM_READER).status_code == 403


def test_a_domain_scoped_token_passes_no_rule(keystone: tuple[Any, ContextRecorder]) -> None:
    application, fake = keystone
    for method, path, body, _status in SYSTEM_CALLS:
        assert call(application, method, path, body, **DOMAIN_ADMIN).status_code == 403, path
    for method, path, body in PROJECT_CALLS:
        assert call(application, method, path, body, **DOMAIN_ADMIN, **V12).status_code == 403
    assert fake.calls == []


def test_the_enforcer_caches_per_scope(tmp_path: Path) -> None:
    """The same roles, project and user decide differently by scope: a
    cached project-scoped decision must not answer a system-scoped token."""
    from oslo_config import cfg  # noqa: PLC0415 -- this test only

    conf = cfg.ConfigOpts()
    conf([], project="ringfleet-test", default_config_files=[])
    enforcer = policy.Enforcer(conf)
    creds: dict[str, Any] = {"roles": ["admin"], "project_id": None, "user_id": "u"}
    assert enforcer.allowed("ringfleet:instance:list", creds)
    assert not enforcer.allowed("ringfleet:instance:list", {**creds, "system_scope": "all"})
    assert enforcer.allowed("ringfleet:node:update", {**creds, "system_scope": "all"})
    assert not enforcer.allowed("ringfleet:node:update", {**creds, "domain_id": "default"})
    assert enforcer.allowed(policy.CONTEXT_IS_ADMIN, {**creds, "system_scope": "all"})
