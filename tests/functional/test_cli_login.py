# SPDX-License-Identifier: Apache-2.0
"""``ringfleet --os-cloud``: the CLI logs in to a real Keystone and finds the API in its catalog.

The Keystone of ``tools/with-test-servers.sh``; this module registers the
API (service type ``baremetal-fleet``) in its catalog, in a region of its
own, makes a user with the ``admin`` role on a project and an application
credential of that user, and writes a ``clouds.yaml`` with both.  The API
runs under gunicorn with ``auth_strategy = keystone`` in front of a real
conductor (etcd, RabbitMQ, PostgreSQL).  The CLI runs as an operator runs
it: its own process, ``OS_CLIENT_CONFIG_FILE`` naming the clouds.yaml, no
``--os-endpoint``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from keystoneauth1 import session as ks_session
from keystoneauth1.identity import v3

from tests.functional.api_harness import ApiServer
from tests.functional.fleet_harness import Fleet, running_fleet
from tests.functional.keystone_harness import Identity, make_identity

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def identity(keystone_url: str) -> Identity:
    return make_identity(keystone_url)


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory,
    database_url: str,
    transport_url: str,
    etcd_url: str,
    identity: Identity,
) -> Iterator[ApiServer]:
    with running_fleet(
        tmp_path_factory.mktemp("login-fleet"),
        database_url=database_url,
        db_prefix="rf_login",
        transport_url=transport_url,
        etcd_url=etcd_url,
    ) as fleet:
        api = _api(fleet, transport_url, identity)
        try:
            yield api
        finally:
            api.stop()


def _api(fleet: Fleet, transport_url: str, identity: Identity) -> ApiServer:
    return ApiServer(
        fleet.workdir,
        transport_url,
        name="api-login",
        auth="keystone",
        debug=False,
        extra=identity.authtoken_config(),
    ).start()


@pytest.fixture(scope="module")
def clouds(tmp_path_factory: pytest.TempPathFactory, identity: Identity, server: ApiServer) -> Path:
    """clouds.yaml: ``rf-password``, ``rf-appcred``, ``rf-elsewhere`` (a
    region without the API), ``rf-wrong`` (a wrong password) and
    ``rf-nowhere`` (an auth URL nothing answers at)."""
    suffix = uuid.uuid4().hex[:8]
    region = identity.create("region", {"id": f"rf-login-{suffix}"})
    empty_region = identity.create("region", {"id": f"rf-empty-{suffix}"})
    service = identity.create(
        "service", {"type": "baremetal-fleet", "name": f"ringfleet-{suffix}", "enabled": True}
    )
    identity.create(
        "endpoint",
        {"service_id": service, "interface": "public", "region_id": region, "url": server.url},
    )
    name, password = f"rf-operator-{suffix}", uuid.uuid4().hex
    user = identity.create("user", {"name": name, "password": password, "domain_id": "default"})
    identity.grant(identity.project_id, user, "admin")
    # An application credential is made by its user, with the user's token.
    own = ks_session.Session(
        auth=v3.Password(
            auth_url=identity.url,
            username=name,
            password=password,
            user_domain_id="default",
            project_id=identity.project_id,
        )
    )
    credential = own.post(
        f"{identity.url}/users/{user}/application_credentials",
        json={"application_credential": {"name": f"rf-cli-{suffix}"}},
    ).json()["application_credential"]
    password_auth = {
        "auth_url": identity.url,
        "username": name,
        "password": password,
        "user_domain_id": "default",
        "project_id": identity.project_id,
    }
    path = tmp_path_factory.mktemp("login") / "clouds.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "clouds": {
                    "rf-password": {"auth": password_auth, "region_name": region},
                    "rf-appcred": {
                        "auth_type": "v3applicationcredential",
                        "auth": {
                            "auth_url": identity.url,
                            "application_credential_id": credential["id"],
                            "application_credential_secret": credential["secret"],
                        },
                        "region_name": region,
                    },
                    "rf-elsewhere": {"auth": password_auth, "region_name": empty_region},
                    "rf-wrong": {"auth": {**password_auth, "password": "wrong-pw-7f3"}},
                    "rf-nowhere": {
                        "auth": {**password_auth, "auth_url": "http://127.0.0.1:9/v3"},
                        "region_name": region,
                    },
                }
            }
        )
    )
    return path


def ringfleet(
    clouds: Path, *argv: str, script: str = "ringfleet", **env: str
) -> subprocess.CompletedProcess[str]:
    # The script by this interpreter: a copied virtualenv's shebangs may point elsewhere.
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    return subprocess.run(
        [sys.executable, str(BIN / script), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**clean, "OS_CLIENT_CONFIG_FILE": str(clouds), **env},
    )


def test_a_password_login_from_clouds_yaml_runs_commands_through_the_catalog(
    clouds: Path,
) -> None:
    node = f"login-{uuid.uuid4().hex[:8]}"
    made = ringfleet(
        clouds, "--os-cloud", "rf-password", "node", "create", node, "--resource-class", "bm"
    )
    assert made.returncode == 0, made.stderr
    shown = ringfleet(clouds, "--os-cloud", "rf-password", "node", "show", node, "-f", "json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["resource_class"] == "bm"
    # OS_CLOUD instead of the option.
    listed = ringfleet(clouds, "node", "list", "-f", "json", OS_CLOUD="rf-password")
    assert listed.returncode == 0, listed.stderr
    assert node in {row["Name"] for row in json.loads(listed.stdout)}


def test_an_application_credential_logs_in_too(clouds: Path) -> None:
    listed = ringfleet(clouds, "--os-cloud", "rf-appcred", "flavor", "list", "-f", "json")
    assert listed.returncode == 0, listed.stderr
    assert isinstance(json.loads(listed.stdout), list)
    flavor = f"login-{uuid.uuid4().hex[:8]}"
    made = ringfleet(
        clouds, "--os-cloud", "rf-appcred", "flavor", "create", flavor, "--resource-class", "bm"
    )
    assert made.returncode == 0, made.stderr


def test_the_openstack_cli_plugin_runs_the_same_commands(clouds: Path) -> None:
    node = f"osc-{uuid.uuid4().hex[:8]}"
    made = ringfleet(
        clouds,
        "--os-cloud",
        "rf-appcred",
        "ringfleet",
        "node",
        "create",
        node,
        "--resource-class",
        "bm",
        script="openstack",
    )
    assert made.returncode == 0, made.stderr
    shown = ringfleet(
        clouds,
        "--os-cloud",
        "rf-password",
        "ringfleet",
        "node",
        "show",
        node,
        "-f",
        "json",
        script="openstack",
    )
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["name"] == node
    # Errors are the same one line per problem as ringfleet's.
    missing = ringfleet(
        clouds, "--os-cloud", "rf-password", "ringfleet", "node", "show", "nope", script="openstack"
    )
    assert missing.returncode == 1
    # Named once, as typed (not "openstack ringfleet ringfleet ...").
    assert missing.stderr.splitlines() == [
        "openstack ringfleet node show: error: node 'nope' not found"
    ], missing.stderr


def test_login_failures_are_one_line(clouds: Path) -> None:
    wrong = ringfleet(clouds, "--os-cloud", "rf-wrong", "node", "list")
    assert wrong.returncode == 1
    [line] = wrong.stderr.splitlines()
    assert line.startswith("ringfleet node list: error: Keystone at ")
    assert line.endswith("refused the credentials"), line
    assert "wrong-pw-7f3" not in wrong.stderr
    elsewhere = ringfleet(clouds, "--os-cloud", "rf-elsewhere", "node", "list")
    assert elsewhere.returncode == 1
    [line] = elsewhere.stderr.splitlines()
    assert "no baremetal-fleet endpoint in the service catalog" in line
    unknown = ringfleet(clouds, "--os-cloud", "rf-none", "node", "list")
    assert unknown.returncode == 1 and "rf-none" in unknown.stderr


@pytest.fixture(scope="module")
def others(clouds: Path, identity: Identity) -> dict[str, str]:
    """Who and where else the operator of ``rf-password`` may log in: a
    reader with the same password in the same project, and a project of its
    own where the operator is a reader (the node list is then 403)."""
    auth = yaml.safe_load(clouds.read_text())["clouds"]["rf-password"]["auth"]
    suffix = uuid.uuid4().hex[:8]
    reader = f"rf-reader-{suffix}"
    user = identity.create(
        "user", {"name": reader, "password": auth["password"], "domain_id": "default"}
    )
    identity.grant(identity.project_id, user, "reader")
    project_name = f"rf-login-read-{suffix}"
    project = identity.create("project", {"name": project_name, "domain_id": "default"})
    [operator] = identity.admin.get(
        f"{identity.url}/users", params={"name": auth["username"]}
    ).json()["users"]
    identity.grant(project, operator["id"], "reader")
    return {"reader": reader, "project_id": project, "project_name": project_name}


@pytest.mark.parametrize(
    ("option", "variable", "value"),
    [
        ("--os-username", "OS_USERNAME", "reader"),
        ("--os-project-id", "OS_PROJECT_ID", "project_id"),
        # The cloud names its project by id: a name given still wins.
        ("--os-project-name", "OS_PROJECT_NAME", "project_name"),
    ],
)
def test_an_option_or_variable_beats_the_clouds_user_and_project(
    clouds: Path, others: dict[str, str], option: str, variable: str, value: str
) -> None:
    """The operator's cloud (admin) with one field changed, by option or
    variable: a reader's login, the cloud's other fields kept (its password,
    its project or user), so the node list is refused by the policy."""
    # A project named without its domain is in the default domain, as with openstack.
    for given in (
        ringfleet(clouds, "--os-cloud", "rf-password", option, others[value], "node", "list"),
        ringfleet(clouds, "--os-cloud", "rf-password", "node", "list", **{variable: others[value]}),
    ):
        assert given.returncode == 1, given.stdout
        assert "policy does not allow ringfleet:node:list" in given.stderr, given.stderr
    assert ringfleet(clouds, "--os-cloud", "rf-password", "node", "list").returncode == 0


@pytest.fixture(scope="module")
def system_admin(
    tmp_path_factory: pytest.TempPathFactory, identity: Identity, clouds: Path
) -> Path:
    """clouds.yaml with ``rf-sysadmin``: a user with ``admin`` on the system
    and ``reader`` on the project, the cloud naming the project (by id)."""
    name, password = f"rf-sysadmin-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    user = identity.create("user", {"name": name, "password": password, "domain_id": "default"})
    identity.grant(identity.project_id, user, "reader")
    [admin_role] = identity.admin.get(f"{identity.url}/roles", params={"name": "admin"}).json()[
        "roles"
    ]
    identity.admin.put(f"{identity.url}/system/users/{user}/roles/{admin_role['id']}")
    auth = {
        "auth_url": identity.url,
        "username": name,
        "password": password,
        "user_domain_id": "default",
        "project_id": identity.project_id,
    }
    path = tmp_path_factory.mktemp("sysadmin") / "clouds.yaml"
    # The API's region (the catalog may hold other tests' endpoints elsewhere).
    region = yaml.safe_load(clouds.read_text())["clouds"]["rf-password"]["region_name"]
    cloud = {"auth": auth, "region_name": region}
    path.write_text(yaml.safe_dump({"clouds": {"rf-sysadmin": cloud}}))
    return path


def test_a_system_scope_given_replaces_the_clouds_project(clouds: Path, system_admin: Path) -> None:
    """The system administrator's login over a cloud that names a project:
    the node inventory is theirs, the project's instances are not (the
    instance rules are project-scoped)."""
    as_reader = ringfleet(system_admin, "--os-cloud", "rf-sysadmin", "node", "list")
    assert "policy does not allow ringfleet:node:list" in as_reader.stderr, as_reader.stderr
    for scoped in (
        ringfleet(
            system_admin, "--os-cloud", "rf-sysadmin", "--os-system-scope", "all", "node", "list"
        ),
        ringfleet(system_admin, "--os-cloud", "rf-sysadmin", "node", "list", OS_SYSTEM_SCOPE="all"),
    ):
        assert scoped.returncode == 0, scoped.stderr
    instances = ringfleet(
        system_admin, "--os-cloud", "rf-sysadmin", "--os-system-scope", "all", "instance", "list"
    )
    assert instances.returncode == 1
    assert "policy does not allow ringfleet:instance:list" in instances.stderr, instances.stderr


def test_an_option_or_variable_beats_the_clouds_auth_url(clouds: Path) -> None:
    right = yaml.safe_load(clouds.read_text())["clouds"]["rf-password"]["auth"]["auth_url"]
    nowhere = "http://127.0.0.1:9/v3"
    worse = ringfleet(clouds, "--os-cloud", "rf-password", "--os-auth-url", nowhere, "node", "list")
    assert worse.returncode == 1
    assert f"cannot log in to Keystone at {nowhere}" in worse.stderr, worse.stderr
    by_variable = ringfleet(
        clouds, "--os-cloud", "rf-password", "node", "list", OS_AUTH_URL=nowhere
    )
    assert f"cannot log in to Keystone at {nowhere}" in by_variable.stderr, by_variable.stderr
    better = ringfleet(clouds, "--os-cloud", "rf-nowhere", "--os-auth-url", right, "node", "list")
    assert better.returncode == 0, better.stderr


def test_an_option_or_variable_beats_the_clouds_password(clouds: Path) -> None:
    """Field by field: ``--os-password`` (or ``OS_PASSWORD``) replaces only
    the cloud's password, for better (rf-wrong) or worse (rf-password)."""
    right = yaml.safe_load(clouds.read_text())["clouds"]["rf-password"]["auth"]["password"]
    worse = ringfleet(
        clouds, "--os-cloud", "rf-password", "--os-password", "wrong-pw-7f3", "node", "list"
    )
    assert worse.returncode == 1
    assert worse.stderr.rstrip().endswith("refused the credentials"), worse.stderr
    better = ringfleet(clouds, "--os-cloud", "rf-wrong", "--os-password", right, "node", "list")
    assert better.returncode == 0, better.stderr
    by_variable = ringfleet(clouds, "--os-cloud", "rf-wrong", "node", "list", OS_PASSWORD=right)
    assert by_variable.returncode == 0, by_variable.stderr
