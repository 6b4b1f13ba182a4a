# SPDX-License-Identifier: Apache-2.0
"""Authentication, the filter before the application (``etc/ringfleet/api-paste.ini``).

Every request but the public documents (``/``, ``/v1``,
``/v1/openapi.json``) must be authenticated before anything else looks at
it: a request without a valid token is a 401 whatever its path, method or
body (no 404, 405 or 400 telling a stranger what exists).  The caller's
:class:`Credentials` are left in the WSGI environ (:data:`CREDENTIALS`) for
the application's policy checks.

``[api] auth_strategy``: ``keystone`` (keystonemiddleware's ``auth_token``
in front, :mod:`conductor.api.auth_token`), ``token`` (the static tokens of
``[api] token_file``) or ``noauth`` (everyone an admin).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oslo_config import cfg

from conductor.api import policy
from conductor.api.errors import ApiError, Environ, StartResponse, WsgiApp, error_response
from conductor.common import exception
from conductor.common.extras import MissingExtra, install_hint

__all__ = [
    "CREDENTIALS",
    "KEYSTONE_UNAVAILABLE",
    "NOAUTH",
    "PUBLIC_PATHS",
    "Authenticate",
    "Credentials",
    "authenticated",
    "load_tokens",
]

#: WSGI environ key of the caller's :class:`Credentials`, once authenticated.
CREDENTIALS = "ringfleet.credentials"
#: WSGI environ key set by :class:`conductor.api.auth_token.AuthToken` when
#: Keystone could not be reached to check the request's token.
KEYSTONE_UNAVAILABLE = "ringfleet.keystone_unavailable"
#: The paths anyone may read (one trailing slash ignored): version discovery
#: and the OpenAPI document.
PUBLIC_PATHS = frozenset({"", "/v1", "/v1/openapi.json"})


@dataclass(frozen=True)
class Credentials:
    """Who calls, and the scope of their token.

    :ivar system_scope: ``"all"`` for a system-scoped Keystone token, else
        ``None``; the policy's ``scope_types`` refuse such a token every
        project rule (:mod:`conductor.api.policy`).
    :ivar domain_id: the domain of a domain-scoped token (refused every rule).
    """

    user_id: str | None
    project_id: str | None
    roles: tuple[str, ...]
    system_scope: str | None = None
    domain_id: str | None = None

    def for_policy(self) -> dict[str, Any]:
        values: dict[str, Any] = {
            "roles": list(self.roles),
            "project_id": self.project_id,
            "user_id": self.user_id,
        }
        # oslo.policy tells a token's scope by these keys' presence.
        if self.system_scope:
            values["system_scope"] = self.system_scope
        if self.domain_id:
            values["domain_id"] = self.domain_id
        return values


NOAUTH = Credentials(user_id="noauth", project_id=None, roles=("admin", "member", "reader"))


def load_tokens(path: str) -> dict[str, Credentials]:
    """Parse a token file (``[api] token_file``): ``TOKEN ROLES [PROJECT]`` lines.

    The project is the caller's, as a Keystone token's: what it builds
    belongs to that project, and it sees that project's instances only.  A
    token without one builds instances that only admins see.
    """
    tokens: dict[str, Credentials] = {}
    for number, raw in enumerate(Path(path).read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) not in (2, 3):
            raise ValueError(f"{path}:{number}: expected 'TOKEN ROLES [PROJECT]'")
        roles = tuple(r for r in parts[1].split(",") if r)
        project = parts[2] if len(parts) == 3 else None
        tokens[parts[0]] = Credentials(user_id=f"token-{number}", project_id=project, roles=roles)
    return tokens


def _keystone_credentials(environ: Environ) -> Credentials | None:
    """What keystonemiddleware (auth_token) found, from the headers it sets."""
    if environ.get("HTTP_X_IDENTITY_STATUS") != "Confirmed":
        return None
    roles = tuple(r.strip() for r in environ.get("HTTP_X_ROLES", "").split(",") if r.strip())
    # keystonemiddleware strips these headers from the client's request and
    # sets them from the token alone: OpenStack-System-Scope for a
    # system-scoped token, X-Domain-Id for a domain-scoped one.
    return Credentials(
        user_id=environ.get("HTTP_X_USER_ID"),
        project_id=environ.get("HTTP_X_PROJECT_ID"),
        roles=roles,
        system_scope=environ.get("HTTP_OPENSTACK_SYSTEM_SCOPE") or None,
        domain_id=environ.get("HTTP_X_DOMAIN_ID") or None,
    )


def is_public(environ: Environ) -> bool:
    """Whether the request is for one of :data:`PUBLIC_PATHS`."""
    path = environ.get("PATH_INFO") or "/"
    return path.rstrip("/") in PUBLIC_PATHS


class Authenticate:
    """Answers 401 (or 503, Keystone unreachable) to a request without valid
    credentials, before anything else; otherwise leaves them in the environ.

    :param admin_only: also refuse (403) a caller whom the policy's
        ``context_is_admin`` rule does not pass (the detailed health check).
    """

    def __init__(self, application: WsgiApp, conf: cfg.ConfigOpts, admin_only: bool = False):
        self.application = application
        self.strategy: str = conf.api.auth_strategy
        self.tokens: dict[str, Credentials] = {}
        if self.strategy == "token":
            if not conf.api.token_file:
                raise exception.ConfigurationError(
                    "api", "token_file", "required with auth_strategy = token"
                )
            self.tokens = load_tokens(conf.api.token_file)
        self.enforcer = policy.Enforcer(conf) if admin_only else None

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        try:
            credentials = self._credentials(environ)
            if self.enforcer is not None and not self.enforcer.allowed(
                policy.CONTEXT_IS_ADMIN, credentials.for_policy()
            ):
                raise ApiError(
                    403, "ringfleet.forbidden", f"policy does not allow {policy.CONTEXT_IS_ADMIN}"
                )
        except ApiError as exc:
            return error_response(exc, environ)(environ, start_response)  # type: ignore[no-any-return]
        environ[CREDENTIALS] = credentials
        return self.application(environ, start_response)

    def _credentials(self, environ: Environ) -> Credentials:
        if self.strategy == "noauth":
            return NOAUTH
        if self.strategy == "token":
            token = environ.get("HTTP_X_AUTH_TOKEN")
            found = self.tokens.get(token) if token else None
        else:
            found = _keystone_credentials(environ)
        if found is not None:
            return found
        if environ.get(KEYSTONE_UNAVAILABLE):
            raise ApiError(
                503,
                "ringfleet.keystone_unavailable",
                "Keystone could not be reached to check the token; retry",
                headers={"Retry-After": "5"},
            )
        # Under keystone, keystonemiddleware adds WWW-Authenticate: Keystone
        # uri="..." (its www_authenticate_uri) to every 401 itself.
        headers = {"WWW-Authenticate": "X-Auth-Token"} if self.strategy == "token" else None
        raise ApiError(
            401, "ringfleet.unauthorized", "authentication required (X-Auth-Token)", headers=headers
        )


class _PublicBypass:
    """The public documents straight to the application; the rest through ``guarded``."""

    def __init__(self, application: WsgiApp, guarded: WsgiApp) -> None:
        self.application = application
        self.guarded = guarded

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        if is_public(environ):
            return self.application(environ, start_response)
        return self.guarded(environ, start_response)


def authenticated(
    application: WsgiApp, conf: cfg.ConfigOpts, *, admin_only: bool = False
) -> Callable[[Environ, StartResponse], Iterable[bytes]]:
    """``application`` behind the configured authentication.

    Under ``keystone`` keystonemiddleware runs with ``delay_auth_decision``:
    it only marks a request's token valid or not and :class:`Authenticate`
    answers the 401 in the API's format.  The public documents skip both
    (unless ``admin_only``): they need no token, and a token sent with them
    costs no Keystone call.
    """
    guarded: WsgiApp = Authenticate(application, conf, admin_only=admin_only)
    if conf.api.auth_strategy == "keystone":
        try:
            from conductor.api import auth_token  # noqa: PLC0415 -- optional extra
        except MissingExtra as exc:
            raise exception.ConfigurationError(
                "api",
                "auth_strategy",
                f"keystone needs keystonemiddleware: {install_hint(exc.extra)}",
            ) from None
        guarded = auth_token.AuthToken(
            guarded, {"oslo_config_config": conf, "delay_auth_decision": True}
        )
    return guarded if admin_only else _PublicBypass(application, guarded)
