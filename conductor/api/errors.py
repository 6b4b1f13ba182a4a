# SPDX-License-Identifier: Apache-2.0
"""The API's errors: :class:`ApiError` and the JSON body every error has.

One format (the OpenStack API-WG's, ``docs/http-api.rst``, "Errors") for
whatever answers the error: a handler, the authentication filter
(:mod:`conductor.api.auth`), or a middleware of the pipeline whose own
error page :class:`JsonErrors` rewrites.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import webob
import webob.exc
from oslo_context import context as request_context
from oslo_middleware import request_id as oslo_request_id

from conductor.common import exception

__all__ = ["ApiError", "JsonErrors", "error_response", "request_id_of"]

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
WsgiApp = Callable[[Environ, StartResponse], Iterable[bytes]]

#: ``code`` of an error answered by a middleware rather than by ringfleet.
_MIDDLEWARE_CODES = {413: "ringfleet.too_large", 429: "ringfleet.rate_limited"}
#: ``detail`` of those, where the middleware's own text says less.
_MIDDLEWARE_DETAILS = {413: "the body is larger than [oslo_middleware] max_request_body_size"}


class ApiError(Exception):
    """An error answered as JSON: ``status`` and one entry per problem."""

    def __init__(
        self,
        status: int,
        code: str,
        detail: str,
        *,
        fields: Iterable[Mapping[str, Any]] = (),
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.fields = [dict(f) for f in fields]
        self.headers = dict(headers or {})

    @classmethod
    def invalid(cls, field_name: str, reason: str, value: object = None) -> ApiError:
        """400 naming one field, as the conductor's ``InvalidInput`` does."""
        shown = None if value is None else exception.render_value(value)
        item = {"field": field_name, "reason": reason, "value": shown}
        return cls(400, "ringfleet.invalid_input", f"{field_name}: {reason}", fields=[item])

    def body(self, request_id: str) -> dict[str, Any]:
        """The JSON body: ``{"errors": [...]}``, one entry per field at fault."""
        title = webob.exc.status_map[self.status].title
        base = {
            "status": self.status,
            "code": self.code,
            "title": title,
            "detail": self.detail,
            "request_id": request_id,
        }
        return {"errors": [{**base, **f} for f in self.fields] or [base]}


def request_id_of(environ: Environ) -> str:
    """The request's id: oslo.middleware's ``request_id`` filter sets it
    (and answers it in ``x-openstack-request-id``)."""
    found = environ.get(oslo_request_id.ENV_REQUEST_ID)
    if isinstance(found, str):
        return found
    # Outside the pipeline (never in ringfleet-api): an id all the same.
    made: str = request_context.generate_request_id()
    environ[oslo_request_id.ENV_REQUEST_ID] = made
    return made


def error_response(exc: ApiError, environ: Environ) -> webob.Response:
    """``exc`` as a response, its headers included."""
    response = webob.Response(status=exc.status, charset="UTF-8")
    response.content_type = "application/json"
    response.body = json.dumps(exc.body(request_id_of(environ)), separators=(",", ":")).encode()
    response.headers.update(exc.headers)
    return response


#: The most of a refused body read and dropped (see :func:`_drain`).
MAX_DRAIN = 64 * 1024 * 1024


def _drain(environ: Environ) -> None:
    """Read and drop the body of a request refused as too large, up to
    :data:`MAX_DRAIN` bytes.

    ``sizelimit`` refuses on the ``Content-Length`` alone, the body unread;
    gunicorn then drains at most 64 KiB and closes the connection, which
    the client, still sending, sees as a reset instead of the 413.
    """
    stream = environ.get("wsgi.input")
    try:
        left = min(int(environ.get("CONTENT_LENGTH") or 0), MAX_DRAIN)
    except ValueError:
        return
    while stream is not None and left > 0:
        try:
            chunk = stream.read(min(left, 1 << 16))
        except Exception:  # a client gone or a broken encoding: nothing more to drain
            return
        if not chunk:
            return
        left -= len(chunk)


class JsonErrors:
    """Middleware: an error answered by a middleware after it in the pipeline,
    in its own format (webob's HTML or text page: ``sizelimit``'s 413, a
    rate limiter's 429), becomes the API's JSON error, its headers kept.

    ringfleet's own errors are JSON already and pass as they are; so do
    successes, and anything answered to ``HEAD``.
    """

    def __init__(self, application: WsgiApp) -> None:
        self.application = application

    @classmethod
    def factory(cls, global_conf: Mapping[str, Any], **local_conf: Any) -> Callable[..., Any]:
        """paste.deploy's filter factory (``etc/ringfleet/api-paste.ini``)."""
        return cls

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        request = webob.Request(environ)
        response = request.get_response(self.application)
        if response.status_code == 413:
            _drain(environ)
        media = (response.content_type or "").lower()
        if response.status_code < 400 or media == "application/json" or request.method == "HEAD":
            return response(environ, start_response)  # type: ignore[no-any-return]
        detail = webob.exc.status_map.get(response.status_code, webob.exc.HTTPError).title
        if media == "text/plain":
            text = " ".join(response.body.decode("utf-8", "replace").split())[:500]
            detail = text or detail
        status = response.status_code if response.status_code in webob.exc.status_map else 500
        code = _MIDDLEWARE_CODES.get(status, f"ringfleet.http_{status}")
        detail = _MIDDLEWARE_DETAILS.get(status, detail)
        kept = {
            k: v
            for k, v in response.headers.items()
            if k.lower() not in ("content-type", "content-length")
        }
        answer = error_response(ApiError(status, code, detail, headers=kept), environ)
        return answer(environ, start_response)  # type: ignore[no-any-return]
