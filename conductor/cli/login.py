# SPDX-License-Identifier: Apache-2.0
"""How the CLI logs in to the HTTP API: Keystone through keystoneauth sessions.

The options are the OpenStack client's (``--os-cloud`` and ``clouds.yaml``,
``--os-auth-url``, ``--os-username``..., application credentials), each
defaulting to its ``OS_*`` environment variable; openstacksdk's config
loader (:mod:`openstack.config`) merges them over the named cloud of
``clouds.yaml``, as ``openstack`` does: a command-line option wins over its
environment variable, which wins over ``clouds.yaml`` (field by field: a
name given replaces the cloud's id of the same thing, :data:`_SAME_FIELD`).
The API's address is
``--os-endpoint`` when given, else the cloud's
``baremetal_fleet_endpoint_override``, else the service catalog's entry of
type ``baremetal-fleet`` (interface and region from the options or the
cloud).

Without any of them the CLI talks RPC (``--config-file``); with only
``--os-endpoint`` (and perhaps a raw ``--os-token``) it sends that token,
as before Keystone login existed.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from conductor.common.exception import RingfleetError

if TYPE_CHECKING:
    from keystoneauth1 import session as ks_session
    from openstack.config import cloud_region, loader

# keystoneauth and openstacksdk are imported by the functions that log in:
# the options are added to every command's parser, and a command that never
# logs in (--help, RPC mode, the demo) starts without them (issue 36).

__all__ = ["SERVICE_TYPE", "Login", "LoginError", "add_arguments", "log_in", "wants_http"]

#: The API's service type in the Keystone catalog (and its microversion header).
SERVICE_TYPE = "baremetal-fleet"

#: (option, environment variable, metavar, help) of the Keystone options, in
#: the order --help lists them.
_AUTH_OPTIONS = (
    ("--os-cloud", "OS_CLOUD", "NAME", "the cloud of clouds.yaml to log in to"),
    (
        "--os-auth-type",
        "OS_AUTH_TYPE",
        "TYPE",
        "keystoneauth plugin: password, v3applicationcredential, token... (default: "
        "password, or v3applicationcredential with an application credential)",
    ),
    ("--os-auth-url", "OS_AUTH_URL", "URL", "Keystone's identity endpoint"),
    ("--os-username", "OS_USERNAME", "NAME", "user name (password login)"),
    ("--os-user-id", "OS_USER_ID", "ID", "user id (instead of --os-username)"),
    ("--os-password", "OS_PASSWORD", "PASSWORD", "the user's password"),
    ("--os-user-domain-name", "OS_USER_DOMAIN_NAME", "NAME", "the user's domain"),
    ("--os-user-domain-id", "OS_USER_DOMAIN_ID", "ID", "the user's domain, by id"),
    ("--os-project-name", "OS_PROJECT_NAME", "NAME", "the project to scope the login to"),
    ("--os-project-id", "OS_PROJECT_ID", "ID", "the project, by id"),
    ("--os-project-domain-name", "OS_PROJECT_DOMAIN_NAME", "NAME", "the project's domain"),
    ("--os-project-domain-id", "OS_PROJECT_DOMAIN_ID", "ID", "the project's domain, by id"),
    (
        "--os-system-scope",
        "OS_SYSTEM_SCOPE",
        "all",
        "scope the login to the system instead of a project (the system admin's "
        "node and fleet calls)",
    ),
    (
        "--os-application-credential-id",
        "OS_APPLICATION_CREDENTIAL_ID",
        "ID",
        "application credential id (instead of a password)",
    ),
    (
        "--os-application-credential-name",
        "OS_APPLICATION_CREDENTIAL_NAME",
        "NAME",
        "application credential name (with the user)",
    ),
    (
        "--os-application-credential-secret",
        "OS_APPLICATION_CREDENTIAL_SECRET",
        "SECRET",
        "the application credential's secret",
    ),
    ("--os-region-name", "OS_REGION_NAME", "REGION", "the catalog region of the API"),
    (
        "--os-interface",
        "OS_INTERFACE",
        "INTERFACE",
        "the catalog interface of the API: public, internal or admin (default: public)",
    ),
    ("--os-cacert", "OS_CACERT", "FILE", "CA bundle to verify TLS certificates with"),
)

#: The domain of a user or project named without one (``--os-default-domain``).
DEFAULT_DOMAIN = "default"
#: The auth types that take a user and project by name, and their domains.
_PASSWORD_TYPES = (None, "password", "v3password", "v3totp")

#: The options whose presence means "log in to Keystone" (any besides the
#: endpoint, the token and the TLS bundle).
_KEYSTONE_DESTS = tuple(
    option[2:].replace("-", "_")
    for option, *_ in _AUTH_OPTIONS
    if option not in ("--os-region-name", "--os-interface", "--os-cacert")
)


#: Keys of a cloud's ``auth`` section that say one thing (who, which scope)
#: in several ways.  An option (or variable) giving one of a group replaces
#: the cloud's others: ``--os-project-name`` over a cloud's ``project_id``
#: scopes to the project named (keystoneauth would prefer the cloud's id),
#: ``--os-system-scope all`` over a cloud's project scopes to the system
#: (keystoneauth would refuse two scopes).
_SAME_FIELD = (
    frozenset({"username", "user_id"}),
    frozenset({"user_domain_name", "user_domain_id"}),
    frozenset({"project_name", "project_id", "system_scope"}),
    frozenset({"project_domain_name", "project_domain_id"}),
    frozenset({"application_credential_id", "application_credential_name"}),
)


class LoginError(RingfleetError):
    """The CLI could not log in, or not find the API: one line saying why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason, reason=reason)


@dataclass(frozen=True)
class Login:
    """Where the API is and the session that calls it (it adds the token)."""

    endpoint: str
    session: ks_session.Session


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The Keystone options, after ``--os-endpoint`` and ``--os-token``."""
    for option, variable, metavar, text in _AUTH_OPTIONS:
        parser.add_argument(
            option,
            default=os.environ.get(variable),
            metavar=metavar,
            help=f"{text} (env {variable})",
        )
    parser.add_argument(
        "--os-default-domain",
        default=os.environ.get("OS_DEFAULT_DOMAIN", DEFAULT_DOMAIN),
        metavar="DOMAIN",
        help="the domain (id) of a user or project given by name without one, as the "
        "openstack client's (env OS_DEFAULT_DOMAIN; default: default)",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        default=None,
        help="do not verify the API's and Keystone's TLS certificates",
    )


def wants_http(options: argparse.Namespace) -> bool:
    """Whether the options ask for the HTTP API (else the CLI talks RPC)."""
    return bool(options.os_endpoint) or any(getattr(options, d) for d in _KEYSTONE_DESTS)


def _auth_type(options: argparse.Namespace) -> str | None:
    if options.os_auth_type:
        return str(options.os_auth_type)
    if options.os_application_credential_id or options.os_application_credential_secret:
        return "v3applicationcredential"
    if options.os_token:
        return "token"
    return None


def cloud_config(options: argparse.Namespace) -> cloud_region.CloudRegion:
    """The cloud of ``--os-cloud`` (or none) with the options merged over it.

    :raises LoginError: an unknown cloud, a broken clouds.yaml, a missing
        required option of the auth type
    """
    from keystoneauth1 import exceptions as ks_exceptions  # noqa: PLC0415 -- on login only
    from openstack import exceptions as sdk_exceptions  # noqa: PLC0415 -- heavy: on login only

    # The credentials go in "auth": get_one merges that dict over the cloud's
    # key by key, while a plain keyword of the same name loses to the cloud's
    # auth section (only the project and domain keys are moved over it).
    auth: dict[str, Any] = {
        dest[3:]: getattr(options, dest)
        for dest in _KEYSTONE_DESTS
        if dest not in ("os_cloud", "os_auth_type") and getattr(options, dest)
    }
    args: dict[str, Any] = {
        dest[3:]: getattr(options, dest)
        for dest in ("os_region_name", "os_interface", "os_cacert")
        if getattr(options, dest)
    }
    auth_type = _auth_type(options)
    if auth_type:
        args["auth_type"] = auth_type
    if options.os_token and auth_type == "token":
        auth["token"] = options.os_token
    if auth:
        args["auth"] = auth
    if options.insecure:
        args["verify"] = False
    if options.os_endpoint:
        args[f"{SERVICE_TYPE.replace('-', '_')}_endpoint_override"] = options.os_endpoint
    try:
        # The loader reads OS_CLIENT_CONFIG_FILE and OS_CLOUD itself too.
        config = _options_win(frozenset(auth), options.os_default_domain or DEFAULT_DOMAIN)
        return config.get_one(cloud=options.os_cloud or None, validate=True, **args)
    except sdk_exceptions.ConfigException as exc:
        raise LoginError(f"configuration: {exc}") from None
    except ks_exceptions.ClientException as exc:  # e.g. MissingRequiredOptions
        raise LoginError(f"login options: {exc}") from None


def _replaced(given: frozenset[str]) -> frozenset[str]:
    """The cloud's auth keys that options giving *given* replace."""
    return frozenset().union(*(group - given for group in _SAME_FIELD if group & given))


def _options_win(given: frozenset[str], default_domain: str) -> loader.OpenStackConfig:
    """openstacksdk's config loader, whose merged ``auth`` keeps none of the
    cloud's keys that the options' *given* keys replace (:data:`_SAME_FIELD`),
    and names *default_domain* for a user or project named without a domain."""
    from openstack.config import loader  # noqa: PLC0415 -- heavy: on login only

    dropped = _replaced(given)

    class OptionsWin(loader.OpenStackConfig):
        def auth_config_hook(self, config: dict[str, Any]) -> dict[str, Any]:
            config = super().auth_config_hook(config)
            auth = {k: v for k, v in (config.get("auth") or {}).items() if k not in dropped}
            if config.get("auth_type") in _PASSWORD_TYPES:
                auth = _in_default_domain(auth, default_domain)
            config["auth"] = auth
            return config

    return OptionsWin()


def _in_default_domain(auth: dict[str, Any], domain: str) -> dict[str, Any]:
    """*auth* with *domain* for its project and user named without a domain,
    as the openstack client fills them in (its ``--os-default-domain``):
    Keystone refuses a name without its domain."""
    filled = dict(auth)
    for name, domain_keys in (
        ("project_name", ("project_domain_id", "project_domain_name")),
        ("username", ("user_domain_id", "user_domain_name")),
    ):
        if name in auth and not any(auth.get(key) for key in domain_keys):
            filled[domain_keys[0]] = domain
    return filled


def log_in(options: argparse.Namespace, timeout: float) -> Login:
    """The API's endpoint and a session for it, from the options.

    Only ``--os-endpoint`` (perhaps ``--os-token``): that endpoint, and the
    raw token sent as it is.  Otherwise keystoneauth logs in (lazily, on the
    first request or the catalog lookup).

    :raises LoginError: bad options, Keystone refusing, no catalog entry
    """
    from keystoneauth1 import exceptions as ks_exceptions  # noqa: PLC0415 -- on login only
    from keystoneauth1 import session as ks_session  # noqa: PLC0415 -- on login only
    from keystoneauth1 import token_endpoint  # noqa: PLC0415 -- on login only

    keystone = any(getattr(options, d) for d in _KEYSTONE_DESTS)
    if not keystone:
        endpoint = str(options.os_endpoint)
        auth = token_endpoint.Token(endpoint, options.os_token) if options.os_token else None
        verify: bool | str = not options.insecure
        if options.os_cacert and verify:
            verify = str(options.os_cacert)
        return Login(endpoint, ks_session.Session(auth=auth, verify=verify, timeout=timeout))
    region = cloud_config(options)
    session = region.get_session()
    session.timeout = timeout
    try:
        found = region.get_session_endpoint(SERVICE_TYPE)
    except ks_exceptions.Unauthorized:
        raise LoginError(f"Keystone at {_auth_url(region)} refused the credentials") from None
    except ks_exceptions.ClientException as exc:
        raise LoginError(f"cannot log in to Keystone at {_auth_url(region)}: {exc}") from None
    if not found:
        raise LoginError(
            f"no {SERVICE_TYPE} endpoint in the service catalog (interface "
            f"{region.get_interface(SERVICE_TYPE) or 'public'}, region "
            f"{region.get_region_name(SERVICE_TYPE) or 'any'}); give --os-endpoint"
        )
    return Login(found, session)


def _auth_url(region: cloud_region.CloudRegion) -> str:
    return str(region.config.get("auth", {}).get("auth_url") or "(no auth_url)")
