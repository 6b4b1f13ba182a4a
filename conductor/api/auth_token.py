# SPDX-License-Identifier: Apache-2.0
"""keystonemiddleware's ``auth_token`` in front of the API (``[api]
auth_strategy = keystone``), telling an unreachable Keystone from a bad token.

The middleware runs with ``delay_auth_decision``: it only marks a request's
token valid or not (``X-Identity-Status``), and
:class:`conductor.api.auth.Authenticate`, after it, answers 401 in the API's
own error format, before any routing.  In that mode keystonemiddleware reports a Keystone it
could not reach as an *invalid token* (it logs ``Unable to validate token``
at CRITICAL and defers), so every client would get a 401 and be told to get
a new token during a Keystone outage.  :class:`AuthToken` marks those
requests instead (:data:`conductor.api.auth.KEYSTONE_UNAVAILABLE` in the WSGI
environ); ``Authenticate`` answers them 503 with ``Retry-After``.

A 401 gets its ``WWW-Authenticate: Keystone uri="..."`` header from the
middleware (``[keystone_authtoken] www_authenticate_uri``).

Imported only with ``auth_strategy = keystone``: keystonemiddleware is the
optional ``ringfleet[keystone]`` extra.
"""

from __future__ import annotations

from typing import Any

from keystoneauth1 import exceptions as ksa_exceptions

from conductor.api import auth
from conductor.common.extras import MissingExtra

try:
    from keystonemiddleware import auth_token
except ImportError as exc:
    raise MissingExtra("keystone", "[api] auth_strategy = keystone", exc.name or "") from None

__all__ = ["AuthToken"]

#: What keystonemiddleware turns into an invalid token when it could not ask
#: Keystone at all (the list of its ``AuthProtocol.fetch_token``).
_OUTAGE = (
    ksa_exceptions.ConnectFailure,
    ksa_exceptions.DiscoveryFailure,
    ksa_exceptions.RequestTimeout,
    auth_token.ServiceError,
)


class _KeystoneUnavailable(Exception):
    """Raised through keystonemiddleware's request processing, caught at its top."""


class AuthToken(auth_token.AuthProtocol):  # type: ignore[misc]  # keystonemiddleware is untyped
    """``auth_token.AuthProtocol`` that marks requests Keystone could not check."""

    def fetch_token(self, token: str, **kwargs: Any) -> Any:
        try:
            return super().fetch_token(token, **kwargs)
        except auth_token.InvalidToken as exc:
            # keystonemiddleware raises InvalidToken inside its handler of the
            # connection error, so that error is the implicit context.
            if isinstance(exc.__context__, _OUTAGE):
                raise _KeystoneUnavailable from exc
            raise

    def process_request(self, request: Any) -> Any:
        try:
            return super().process_request(request)
        except _KeystoneUnavailable:
            # The token's identity headers were already removed (the first
            # thing process_request does) and none were set: the request
            # goes on unauthenticated, marked.
            request.environ[auth.KEYSTONE_UNAVAILABLE] = True
            return None
