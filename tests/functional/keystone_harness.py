# SPDX-License-Identifier: Apache-2.0
"""Projects, users and tokens in the test Keystone (ringfleet-api, ``auth_strategy = keystone``).

The Keystone of ``tools/with-test-servers.sh`` (keystone-manage bootstrap's
admin).  :func:`make_identity` makes a project of its own, a user with each
of the ``reader``, ``member`` and ``admin`` roles on it, and a service user
(role ``service``) for keystonemiddleware; :meth:`Identity.other_project`
makes another project with a member, for tenancy checks.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from keystoneauth1 import session as ks_session
from keystoneauth1.identity import v3

from tests.functional.api_harness import ApiServer

__all__ = ["ROLES", "Identity", "answered", "make_identity", "token_session"]

ROLES = ("reader", "member", "admin")


@dataclass
class Identity:
    """What was made in Keystone: a project, a token per role, the service user."""

    url: str
    admin: ks_session.Session
    project_id: str
    tokens: dict[str, str]
    service_user: str
    service_password: str
    service_project: str

    def token(self, user: str, password: str, project_id: str) -> str:
        auth = v3.Password(
            auth_url=self.url,
            username=user,
            password=password,
            user_domain_id="default",
            project_id=project_id,
        )
        return str(auth.get_token(ks_session.Session()))

    def create(self, kind: str, body: dict[str, Any]) -> str:
        """POST /v3/<kind>s as the admin; the new object's id."""
        reply = self.admin.post(f"{self.url}/{kind}s", json={kind: body})
        return str(reply.json()[kind]["id"])

    def grant(self, project: str, user: str, role: str) -> None:
        role_id = self.admin.get(f"{self.url}/roles", params={"name": role}).json()["roles"][0][
            "id"
        ]
        self.admin.put(f"{self.url}/projects/{project}/users/{user}/roles/{role_id}")

    def system_token(self, role: str = "admin") -> str:
        """A system-scoped token (``system: all``) of a new user with ``role``
        on the system, as Keystone's system administrator persona."""
        role_id = self.admin.get(f"{self.url}/roles", params={"name": role}).json()["roles"][0][
            "id"
        ]
        name, password = f"rf-system-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
        user = self.create("user", {"name": name, "password": password, "domain_id": "default"})
        self.admin.put(f"{self.url}/system/users/{user}/roles/{role_id}")
        auth = v3.Password(
            auth_url=self.url,
            username=name,
            password=password,
            user_domain_id="default",
            system_scope="all",
        )
        return str(auth.get_token(ks_session.Session()))

    def other_project(self, role: str = "member") -> tuple[str, str]:
        """A new project and a token of a user with ``role`` on it."""
        suffix = uuid.uuid4().hex[:8]
        project = self.create("project", {"name": f"rf-other-{suffix}"})
        password = uuid.uuid4().hex
        body = {"name": f"rf-other-{suffix}", "password": password, "domain_id": "default"}
        user = self.create("user", body)
        self.grant(project, user, role)
        return project, self.token(body["name"], password, project)

    def authtoken_config(self) -> str:
        """ringfleet-api's ``[keystone_authtoken]`` for this Keystone.

        ``token_cache_time = -1``: keystonemiddleware asks Keystone about
        every request, so a revoked token and an outage show on the next
        request.
        """
        return (
            "[keystone_authtoken]\n"
            f"www_authenticate_uri = {self.url}\n"
            f"auth_url = {self.url}\n"
            "auth_type = password\n"
            f"username = {self.service_user}\n"
            f"password = {self.service_password}\n"
            "user_domain_id = default\n"
            f"project_id = {self.service_project}\n"
            # bootstrap made public and internal endpoints; be explicit.
            "interface = public\n"
            "token_cache_time = -1\n"
        )


def make_identity(keystone_url: str) -> Identity:
    admin = ks_session.Session(
        auth=v3.Password(
            auth_url=keystone_url,
            username="admin",
            password=os.environ["RINGFLEET_TEST_KEYSTONE_ADMIN_PASSWORD"],
            user_domain_id="default",
            project_name="admin",
            project_domain_id="default",
        )
    )
    suffix = uuid.uuid4().hex[:8]
    found = Identity(keystone_url, admin, "", {}, f"rf-api-{suffix}", uuid.uuid4().hex, "")
    found.project_id = found.create("project", {"name": f"rf-{suffix}"})
    found.service_project = found.create("project", {"name": f"rf-service-{suffix}"})
    service_user = found.create(
        "user",
        {"name": found.service_user, "password": found.service_password, "domain_id": "default"},
    )
    # Keystone lets a user with the service role validate others' tokens.
    found.grant(found.service_project, service_user, "service")
    for role in ROLES:
        password = uuid.uuid4().hex
        name = f"rf-{role}-{suffix}"
        user = found.create("user", {"name": name, "password": password, "domain_id": "default"})
        found.grant(found.project_id, user, role)
        found.tokens[role] = found.token(name, password, found.project_id)
    return found


@contextlib.contextmanager
def keystone_api(
    workdir: Path, transport_url: str, identity: Identity, name: str
) -> Iterator[ApiServer]:
    """ringfleet-api behind Keystone's ``auth_token`` for ``identity`` (its
    own process, as deployed), stopped when the block ends."""
    server = ApiServer(
        workdir,
        transport_url,
        name=name,
        auth="keystone",
        debug=False,
        extra=identity.authtoken_config(),
    )
    try:
        yield server.start()
    finally:
        server.stop()


def token_session(token: str, headers: dict[str, str]) -> requests.Session:
    """A session that sends ``token`` and ``headers`` (a microversion) with every request."""
    session = requests.Session()
    session.headers.update({"X-Auth-Token": token, **headers})
    return session


def answered(response: requests.Response, status: int = 200) -> Any:
    """The JSON of a response of ``status`` (``None`` without a body); fails
    the test with the request and the body otherwise."""
    assert response.status_code == status, (
        f"{response.request.method} {response.url}: {response.status_code} {response.text[:2000]}"
    )
    return response.json() if response.content else None
