# SPDX-License-Identifier: Apache-2.0
"""``ringfleet`` login options: ``--os-cloud``/``clouds.yaml``, ``--os-*``, ``OS_*``.

Resolution only (no Keystone here: ``tests/functional/test_cli_login.py``
logs in to a real one): which options reach keystoneauth, in which order of
precedence, with which auth type, and the errors of bad ones.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest
import yaml
from keystoneauth1 import token_endpoint

from conductor.cli import login
from conductor.cli.app import RingfleetApp

AUTH_URL = "https://keystone.example.com/v3"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No OS_* variable of the machine's, and clouds.yaml in a temp dir."""
    for name in list(os.environ):
        if name.startswith("OS_"):
            monkeypatch.delenv(name)
    clouds = tmp_path / "clouds.yaml"
    clouds.write_text(
        yaml.safe_dump(
            {
                "clouds": {
                    "fleet": {
                        "auth": {
                            "auth_url": AUTH_URL,
                            "username": "alice",
                            "password": "pw-from-yaml",
                            "project_name": "ops",
                            "user_domain_name": "Default",
                            "project_domain_name": "Default",
                        },
                        "region_name": "RegionTwo",
                    },
                    "fleet-appcred": {
                        "auth_type": "v3applicationcredential",
                        "auth": {
                            "auth_url": AUTH_URL,
                            "application_credential_id": "ac-1",
                            "application_credential_secret": "s3cret",
                        },
                        "baremetal_fleet_endpoint_override": "https://fleet.example.com:6486",
                    },
                }
            }
        )
    )
    monkeypatch.setenv("OS_CLIENT_CONFIG_FILE", str(clouds))
    # No user-wide or system-wide clouds.yaml either.
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    return clouds


def options(*argv: str) -> argparse.Namespace:
    """The app's global options as parsed (after the environment is set)."""
    parsed, _rest = RingfleetApp().parser.parse_known_args(list(argv))
    return parsed


def test_no_login_option_means_rpc() -> None:
    assert not login.wants_http(options())
    assert not login.wants_http(options("--os-token", "t"))  # a token alone: RPC
    assert login.wants_http(options("--os-endpoint", "http://api:6486"))
    assert login.wants_http(options("--os-cloud", "fleet"))
    assert login.wants_http(options("--os-auth-url", AUTH_URL))


def test_the_environment_asks_for_the_api_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OS_CLOUD", "fleet")
    assert login.wants_http(options())


def test_a_cloud_of_clouds_yaml_gives_the_password_login() -> None:
    region = login.cloud_config(options("--os-cloud", "fleet"))
    assert region.config["auth_type"] == "password"
    assert region.config["auth"] == {
        "auth_url": AUTH_URL,
        "username": "alice",
        "password": "pw-from-yaml",
        "project_name": "ops",
        "user_domain_name": "Default",
        "project_domain_name": "Default",
    }
    assert region.get_region_name(login.SERVICE_TYPE) == "RegionTwo"


def test_an_option_beats_its_variable_which_beats_clouds_yaml(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OS_PROJECT_NAME", "from-env")
    monkeypatch.setenv("OS_INTERFACE", "internal")
    by_env = login.cloud_config(options("--os-cloud", "fleet"))
    assert by_env.config["auth"]["project_name"] == "from-env"
    assert by_env.get_interface(login.SERVICE_TYPE) == "internal"
    by_option = login.cloud_config(
        options("--os-cloud", "fleet", "--os-project-name", "from-option")
    )
    assert by_option.config["auth"]["project_name"] == "from-option"
    # What neither sets comes from clouds.yaml.
    assert by_option.config["auth"]["password"] == "pw-from-yaml"


@pytest.mark.parametrize(
    ("option", "variable", "key"),
    [
        ("--os-password", "OS_PASSWORD", "password"),
        ("--os-username", "OS_USERNAME", "username"),
        ("--os-auth-url", "OS_AUTH_URL", "auth_url"),
        ("--os-project-name", "OS_PROJECT_NAME", "project_name"),
        ("--os-user-domain-name", "OS_USER_DOMAIN_NAME", "user_domain_name"),
    ],
)
def test_each_login_field_overrides_the_cloud_alone(
    monkeypatch: pytest.MonkeyPatch, option: str, variable: str, key: str
) -> None:
    """An option, or its variable, replaces that one field of the cloud's
    auth section; the others stay the cloud's (the password of
    ``--os-password wrong`` is the one sent to Keystone)."""
    from_yaml = login.cloud_config(options("--os-cloud", "fleet")).config["auth"]
    value = "https://other.example.com/v3" if key == "auth_url" else f"{key}-given"
    by_option = login.cloud_config(options("--os-cloud", "fleet", option, value))
    assert by_option.config["auth"] == {**from_yaml, key: value}
    assert by_option.get_auth().auth_url == by_option.config["auth"]["auth_url"]
    monkeypatch.setenv(variable, value)
    by_variable = login.cloud_config(options("--os-cloud", "fleet"))
    assert by_variable.config["auth"] == {**from_yaml, key: value}
    # The option still beats its variable.
    other = "https://third.example.com/v3" if key == "auth_url" else f"{key}-option"
    both = login.cloud_config(options("--os-cloud", "fleet", option, other))
    assert both.config["auth"][key] == other


@pytest.mark.parametrize(
    ("cloud_auth", "argv", "sent"),
    [
        # The cloud names the project by id, the option by name: the name wins.
        ({"project_id": "p-yaml"}, ("--os-project-name", "p-given"), (None, "p-given", None)),
        ({"project_name": "ops"}, ("--os-project-id", "p-given"), ("p-given", None, None)),
        # A system scope replaces the cloud's project, and a project the cloud's system scope.
        ({"project_id": "p-yaml"}, ("--os-system-scope", "all"), (None, None, "all")),
        ({"system_scope": "all"}, ("--os-project-id", "p-given"), ("p-given", None, None)),
    ],
)
def test_an_option_replaces_the_clouds_other_spelling_of_its_scope(
    clean_environment: Path,
    cloud_auth: dict[str, str],
    argv: tuple[str, ...],
    sent: tuple[str | None, str | None, str | None],
) -> None:
    """A project (or system scope) given replaces the cloud's, however the
    cloud spells it: keystoneauth prefers a project id to a name, and refuses
    two scopes, so a cloud's id kept beside the option's name would win."""
    _cloud(clean_environment, "by-id", cloud_auth)
    region = login.cloud_config(options("--os-cloud", "by-id", *argv))
    v3 = region.get_auth().create_plugin(None, (3, 0), AUTH_URL)  # type: ignore[attr-defined]
    assert (v3.project_id, v3.project_name, v3.system_scope) == sent


def test_an_option_replaces_the_clouds_other_spelling_of_the_user(
    clean_environment: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _cloud(clean_environment, "by-id", {"user_id": "u-yaml", "user_domain_id": "d-yaml"})
    monkeypatch.setenv("OS_USERNAME", "bob")
    by_variable = login.cloud_config(
        options("--os-cloud", "by-id", "--os-user-domain-name", "Default")
    )
    v3 = by_variable.get_auth().create_plugin(None, (3, 0), AUTH_URL)  # type: ignore[attr-defined]
    sent = v3.auth_methods[0]
    assert (sent.user_id, sent.username) == (None, "bob")
    assert (sent.user_domain_id, sent.user_domain_name) == (None, "Default")
    # What the options do not name stays the cloud's.
    assert (sent.password, v3.project_id) == ("pw-from-yaml", "p-yaml")


def test_names_without_a_domain_are_in_the_default_domain(
    clean_environment: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the openstack client's ``--os-default-domain``: Keystone refuses a
    project or user name without its domain."""
    _cloud(clean_environment, "no-domains", {"username": "bob", "project_name": "ops"})

    def domains(*argv: str) -> tuple[object, ...]:
        region = login.cloud_config(options("--os-cloud", "no-domains", *argv))
        auth = region.config["auth"]
        keys = ("project_domain_id", "project_domain_name", "user_domain_id", "user_domain_name")
        return tuple(auth.get(key) for key in keys)

    assert domains() == ("default", None, "default", None)
    assert domains("--os-default-domain", "d2") == ("d2", None, "d2", None)
    monkeypatch.setenv("OS_DEFAULT_DOMAIN", "d3")
    assert domains() == ("d3", None, "d3", None)
    # A domain given is kept, and names the other way it is not added.
    assert domains("--os-project-domain-name", "Ops") == (None, "Ops", "d3", None)
    # The cloud's user by id needs no domain.
    _cloud(clean_environment, "by-id", {"user_id": "u-1"})
    assert (
        login.cloud_config(options("--os-cloud", "by-id")).config["auth"].get("user_domain_id")
        is None
    )
    # Not the default domain's business: an application credential.
    appcred = login.cloud_config(options("--os-cloud", "fleet-appcred")).config["auth"]
    assert "project_domain_id" not in appcred and "user_domain_id" not in appcred


def test_the_default_domain_alone_asks_for_no_login(monkeypatch: pytest.MonkeyPatch) -> None:
    """OS_DEFAULT_DOMAIN is in many openrc files: alone it is no login."""
    monkeypatch.setenv("OS_DEFAULT_DOMAIN", "default")
    assert not login.wants_http(options("node", "list"))


def _cloud(clouds: Path, name: str, auth: dict[str, str]) -> None:
    """Add cloud *name* to clouds.yaml: a password login with *auth*'s keys."""
    content = yaml.safe_load(clouds.read_text())
    base = {"auth_url": AUTH_URL, "password": "pw-from-yaml", "project_id": "p-yaml"}
    if "system_scope" in auth or "project_name" in auth:
        del base["project_id"]
    if "user_id" not in auth and "username" not in auth:
        base |= {"username": "alice", "user_domain_id": "default"}
    content["clouds"][name] = {"auth": base | auth}
    clouds.write_text(yaml.safe_dump(content))


def test_the_password_sent_is_the_option_not_the_clouds() -> None:
    """What keystoneauth's plugin will send, not only the merged dict."""
    region = login.cloud_config(options("--os-cloud", "fleet", "--os-password", "wrong"))
    generic = region.get_auth()
    # The Identity v3 plugin keystoneauth builds once it found the version.
    v3 = generic.create_plugin(None, (3, 0), AUTH_URL)  # type: ignore[attr-defined]
    sent = v3.auth_methods[0]
    assert (sent.username, sent.password, v3.project_name) == ("alice", "wrong", "ops")
    appcred = login.cloud_config(
        options("--os-cloud", "fleet-appcred", "--os-application-credential-secret", "other")
    )
    assert appcred.config["auth"]["application_credential_secret"] == "other"
    assert appcred.config["auth"]["application_credential_id"] == "ac-1"


def test_password_login_from_options_alone() -> None:
    region = login.cloud_config(
        options(
            "--os-auth-url",
            AUTH_URL,
            "--os-username",
            "bob",
            "--os-password",
            "pw",
            "--os-project-id",
            "p-1",
            "--os-user-domain-id",
            "default",
            "--os-interface",
            "internal",
        )
    )
    assert region.config["auth_type"] == "password"
    assert region.config["auth"]["username"] == "bob"
    assert region.config["auth"]["project_id"] == "p-1"
    assert region.get_interface(login.SERVICE_TYPE) == "internal"


def test_a_system_scoped_login() -> None:
    region = login.cloud_config(
        options(
            "--os-auth-url",
            AUTH_URL,
            "--os-username",
            "ops",
            "--os-password",
            "pw",
            "--os-user-domain-id",
            "default",
            "--os-system-scope",
            "all",
        )
    )
    assert region.config["auth"]["system_scope"] == "all"
    v3 = region.get_auth().create_plugin(None, (3, 0), AUTH_URL)  # type: ignore[attr-defined]
    assert (v3.system_scope, v3.project_id, v3.project_name) == ("all", None, None)


def test_an_application_credential_selects_its_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OS_AUTH_URL", AUTH_URL)
    monkeypatch.setenv("OS_APPLICATION_CREDENTIAL_ID", "ac-9")
    monkeypatch.setenv("OS_APPLICATION_CREDENTIAL_SECRET", "sec")
    region = login.cloud_config(options())
    assert region.config["auth_type"] == "v3applicationcredential"
    assert region.config["auth"]["application_credential_id"] == "ac-9"
    assert region.config["auth"]["application_credential_secret"] == "sec"
    # From clouds.yaml, with the API's address there too: no catalog lookup.
    cloud = login.log_in(options("--os-cloud", "fleet-appcred"), timeout=5)
    assert cloud.endpoint == "https://fleet.example.com:6486"


def test_an_endpoint_option_overrides_the_catalog() -> None:
    found = login.log_in(
        options("--os-cloud", "fleet", "--os-endpoint", "http://10.0.0.5:6486"), timeout=5
    )
    assert found.endpoint == "http://10.0.0.5:6486"
    assert found.session.auth is not None  # Keystone still logs in, lazily


def test_a_raw_token_with_an_endpoint_is_sent_as_it_is() -> None:
    found = login.log_in(
        options("--os-endpoint", "http://api:6486", "--os-token", "tok-1"), timeout=5
    )
    assert isinstance(found.session.auth, token_endpoint.Token)
    assert found.session.get_auth_headers() == {"X-Auth-Token": "tok-1"}
    anonymous = login.log_in(options("--os-endpoint", "http://api:6486"), timeout=5)
    assert anonymous.session.auth is None


def test_a_token_with_keystone_options_logs_in_with_it() -> None:
    region = login.cloud_config(
        options("--os-auth-url", AUTH_URL, "--os-token", "tok-2", "--os-project-id", "p-1")
    )
    assert region.config["auth_type"] == "token"
    assert region.config["auth"]["token"] == "tok-2"


def test_bad_login_options_are_one_line_errors() -> None:
    with pytest.raises(login.LoginError, match="no-such-cloud"):
        login.cloud_config(options("--os-cloud", "no-such-cloud"))
    # A region the cloud does not list.
    with pytest.raises(login.LoginError, match="RegionNine"):
        login.cloud_config(options("--os-cloud", "fleet", "--os-region-name", "RegionNine"))
    with pytest.raises(login.LoginError, match=r"auth.url|auth_url"):
        login.cloud_config(options("--os-username", "bob", "--os-password", "pw"))


def test_login_options_have_their_variables_in_the_help() -> None:
    parser = RingfleetApp().parser
    helps = {a.option_strings[0]: a.help or "" for a in parser._actions if a.option_strings}
    for option, variable, *_ in login._AUTH_OPTIONS:
        assert f"(env {variable})" in helps[option]
