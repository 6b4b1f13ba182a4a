# SPDX-License-Identifier: Apache-2.0
"""The WSGI application: routing, policy, microversions, JSON bodies, the
text rule on everything a request carries, and the mapping of conductor
errors to HTTP.

It is the last element of the pipeline of ``etc/ringfleet/api-paste.ini``
(:mod:`conductor.api.pipeline`): the request id, the body size limit and
authentication are the middlewares' before it (:mod:`conductor.api.auth`
leaves the caller's credentials in the environ).

Built on WebOb and Routes (the building blocks of Nova's and Placement's
APIs, already required by oslo.middleware and keystonemiddleware): a
request costs about 16 us of framework time, against about 1 ms for the
RPC call it makes (``docs/http-api.rst``, "Why WebOb and Routes").

The routes themselves, and their handlers, are in the ``conductor.api.v1_*``
modules, one per resource; one table (:data:`conductor.api.v1.ROUTES`, made
of theirs) drives the dispatch, the policy checks and the OpenAPI document.
"""

from __future__ import annotations

import json
import logging
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import oslo_messaging as messaging
import routes
import webob
import webob.exc
from oslo_config import cfg
from oslo_context import context as request_context
from oslo_middleware import request_id as oslo_request_id

from conductor.api import auth, microversion, policy
from conductor.api.errors import ApiError, request_id_of
from conductor.common import checks, exception, tenancy
from conductor.common.schemas import Resource
from conductor.rpcapi import ConductorAPI

__all__ = [
    "E400",
    "E404",
    "E409",
    "E503",
    "REQUEST_ID_HEADER",
    "ApiError",
    "Application",
    "Call",
    "Param",
    "Reply",
    "Route",
]

LOG = logging.getLogger(__name__)

#: Answered by oslo.middleware's ``request_id`` filter on every response.
REQUEST_ID_HEADER = oslo_request_id.HTTP_RESP_HEADER_REQUEST_ID

Json = Any
Environ = dict[str, Any]
StartResponse = Callable[..., Any]


@dataclass(frozen=True)
class Param:
    """A query parameter: ``kind`` is ``string``, ``boolean`` or ``integer``."""

    name: str
    kind: str
    description: str
    minimum: int | None = None
    #: The largest integer taken (larger ones are 400).
    maximum: int | None = None
    #: The first microversion that takes it (an unknown parameter before).
    min_version: microversion.Version = microversion.MIN_VERSION
    #: The values a string takes (in the OpenAPI document; the handler or
    #: the conductor checks them, naming the parameter).
    enum: tuple[str, ...] = ()
    #: The OpenAPI format of a string (``date-time``, ``regex``).
    format: str | None = None
    #: A pattern of the values documented (those matching it are taken).
    pattern: str | None = None


@dataclass
class Call:
    """What a handler gets: the parsed request."""

    api: ConductorAPI
    request: webob.Request
    path: dict[str, str]
    query: dict[str, Any]
    body: Json
    version: microversion.Version
    base_url: str
    max_limit: int
    #: Whether the caller passes a policy rule (a handler's own checks).
    allowed: Callable[[str], bool] = lambda rule: False


@dataclass
class Reply:
    status: int = 200
    body: Json = None
    headers: dict[str, str] = field(default_factory=dict)


#: The error statuses routes list (:attr:`Route.errors`), by name.
E400, E404, E409, E503 = 400, 404, 409, 503


@dataclass(frozen=True)
class Route:
    """One operation of the API.

    ``body``/``response`` name schemas of :mod:`conductor.api.openapi`.
    ``envelope``, when set, is the API's own body around the conductor's
    payloads (whose fields the RPC call takes as separate arguments): its
    keys, required keys and scalar types are checked here, before any call;
    other bodies are the conductor's payloads, validated there field by field.
    """

    method: str
    path: str
    handler: Callable[[Call], Reply]
    rule: str | None
    operation_id: str
    summary: str
    status: int = 200
    query: tuple[Param, ...] = ()
    body: str | None = None
    response: str | None = None
    envelope: Resource | None = None
    errors: tuple[int, ...] = ()
    min_version: microversion.Version = microversion.MIN_VERSION
    tag: str = ""
    description: str = ""
    #: body fields added after the route: field -> the microversion that has it
    fields_since: Mapping[str, microversion.Version] = field(default_factory=dict)
    #: other success statuses (Nova's tag PUT: 201 if new, 204 if there)
    other_statuses: tuple[int, ...] = ()

    @property
    def body_keys(self) -> frozenset[str] | None:
        """The only top-level keys the body may have, when it is an envelope."""
        return None if self.envelope is None else self.envelope.fields


# -- the application ------------------------------------------------------------


class Application:
    """The ``ringfleet-api`` WSGI application, the end of the pipeline.

    :param conf: parsed, with the ``[api]`` options registered.
    :param api: the conductors' client (shared by every request thread).
    :param route_table: :data:`conductor.api.v1.ROUTES`.
    :param public: handlers of :data:`conductor.api.auth.PUBLIC_PATHS`
        (version discovery, the OpenAPI document).
    """

    def __init__(
        self,
        conf: cfg.ConfigOpts,
        api: ConductorAPI,
        route_table: Iterable[Route],
        public: Mapping[str, Callable[[str], Json]],
    ) -> None:
        if set(public) != auth.PUBLIC_PATHS:
            raise ValueError(
                f"public handlers {sorted(public)} are not {sorted(auth.PUBLIC_PATHS)}"
            )
        self.api = api
        self.routes = list(route_table)
        self.public = dict(public)
        self.max_limit = conf.api.max_limit
        self.public_endpoint = (conf.api.public_endpoint or "").rstrip("/") or None
        self.enforcer = policy.Enforcer(conf)
        self.mapper = routes.Mapper()
        self.paths = routes.Mapper()
        self.allowed: dict[str, list[str]] = {}
        for index, route in enumerate(self.routes):
            self.mapper.connect(
                route.path, conditions={"method": [route.method]}, route_index=index
            )
            if route.path not in self.allowed:
                self.paths.connect(route.path, template=route.path)
            self.allowed.setdefault(route.path, []).append(route.method)

    def base_url(self, request: webob.Request) -> str:
        return self.public_endpoint or request.host_url + request.script_name

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        """One request, the conductor calls made under its request id."""
        request = webob.Request(environ)
        request_id = request_id_of(environ)
        version = microversion.MIN_VERSION
        previous = request_context.get_current()
        # A caller's context: the conductor calls made under it carry the
        # caller's identity once authenticated (nobody's until then).
        tenancy.CallerContext(
            request_id=request_id,
            global_request_id=environ.get(oslo_request_id.GLOBAL_REQ_ID),
            overwrite=True,
        )
        try:
            try:
                raw = self._read(request)
                _check_decodable(request)
                version = microversion.requested(request.headers.get(microversion.HEADER))
                reply = self._dispatch(request, version, raw)
            except microversion.BadVersion as exc:
                raise ApiError(400, "ringfleet.bad_version", str(exc)) from None
            except microversion.UnsupportedVersion as exc:
                raise ApiError(406, "ringfleet.unsupported_version", str(exc)) from None
        except ApiError as exc:
            reply = Reply(exc.status, exc.body(request_id), exc.headers)
        except Exception:
            LOG.exception("Unexpected error serving %s %s", request.method, _shown_path(environ))
            error = ApiError(500, "ringfleet.internal_error", "unexpected error; see the API's log")
            reply = Reply(500, error.body(request_id))
        finally:
            if previous is not None:
                previous.update_store()
            else:
                vars(request_context._request_store).pop("context", None)
        response = webob.Response(status=reply.status, charset="UTF-8")
        if reply.body is not None:
            response.content_type = "application/json"
            response.body = json.dumps(reply.body, separators=(",", ":")).encode()
        else:
            response.content_type = None
        response.headers.update(reply.headers)
        response.headers[microversion.HEADER] = f"{microversion.SERVICE_TYPE} {version}"
        response.headers["Vary"] = microversion.HEADER
        if request.method != "HEAD" or reply.status >= 400:
            LOG.info(
                "%s %s -> %d (%s)", request.method, _shown_path(environ), reply.status, request_id
            )
        return response(environ, start_response)  # type: ignore[no-any-return]

    def _dispatch(self, request: webob.Request, version: microversion.Version, raw: bytes) -> Reply:
        path = request.path_info or "/"
        public = self.public.get(path.rstrip("/"))
        if public is not None:
            if request.method not in ("GET", "HEAD"):
                raise ApiError(
                    405,
                    "ringfleet.method_not_allowed",
                    "only GET here",
                    headers={"Allow": "GET, HEAD"},
                )
            return Reply(200, public(self.base_url(request)))
        credentials = request.environ.get(auth.CREDENTIALS)
        if not isinstance(credentials, auth.Credentials):
            # The pipeline authenticates every other path first
            # (conductor.api.auth): an application served without it is
            # misconfigured, and refuses rather than serve anyone.
            raise ApiError(401, "ringfleet.unauthorized", "authentication required (X-Auth-Token)")
        route, match = self._match(request, path)
        if version < route.min_version:
            raise ApiError(
                404,
                "ringfleet.not_found",
                f"{route.method} {route.path} needs microversion {route.min_version}",
            )
        policy_values = credentials.for_policy()
        path_values = {k: v for k, v in match.items() if k not in ("action", "controller")}
        # The path's project is the target: a rule may compare it with the
        # caller's (project_id:%(project_id)s for a quota).  Nothing else: a
        # target per instance uuid would defeat the enforcer's cache.
        target = {"project_id": path_values["project_id"]} if "project_id" in path_values else {}
        if route.rule is not None and not self.enforcer.allowed(route.rule, policy_values, target):
            raise ApiError(403, "ringfleet.forbidden", f"policy does not allow {route.rule}")
        context = request_context.get_current()
        if context is not None:
            context.user_id = credentials.user_id
            context.project_id = credentials.project_id
            context.roles = list(credentials.roles)
            context.is_admin = self.enforcer.allowed(policy.CONTEXT_IS_ADMIN, policy_values)
        _check_text(path_values)
        query = self._query(request, route, version)
        body = self._body(request, route, raw)
        self._check_fields_since(route, body, version)
        call = Call(
            api=self.api,
            request=request,
            path=path_values,
            query=query,
            body=body,
            version=version,
            base_url=self.base_url(request),
            max_limit=self.max_limit,
            allowed=lambda rule: self.enforcer.allowed(rule, policy_values, target),
        )
        try:
            return route.handler(call)
        except Exception as exc:
            mapped = _as_api_error(exc)
            if mapped is exc:
                raise
            raise mapped from None

    def _match(self, request: webob.Request, path: str) -> tuple[Route, dict[str, str]]:
        """The route of a request and its path variables; 404 or 405 if none.

        ``HEAD`` is a ``GET`` whose body is not sent (webob drops it, keeping
        the headers), and one trailing slash is ignored, as HTTP clients and
        proxies expect.
        """
        path = path.rstrip("/") if path != "/" else path
        method = "GET" if request.method == "HEAD" else request.method
        match = self.mapper.match(
            environ={**request.environ, "PATH_INFO": path, "REQUEST_METHOD": method}
        )
        if match is None:
            template = self.paths.match(path)
            if template is None:
                raise ApiError(404, "ringfleet.not_found", f"no resource at {path[:200]}")
            allowed = self.allowed[template["template"]]
            if "GET" in allowed:
                allowed = [*allowed, "HEAD"]
            raise ApiError(
                405,
                "ringfleet.method_not_allowed",
                f"{request.method[:10]} is not allowed here; use {', '.join(allowed)}",
                headers={"Allow": ", ".join(allowed)},
            )
        route = self.routes[int(match.pop("route_index"))]
        return route, match

    def _query(
        self, request: webob.Request, route: Route, version: microversion.Version
    ) -> dict[str, Any]:
        known = {p.name: p for p in route.query if p.min_version <= version}
        values: dict[str, Any] = {}
        for name in request.GET:
            if name not in known:
                raise ApiError.invalid(
                    name[:100],
                    "unknown query parameter; use " + ", ".join(sorted(known))
                    if known
                    else "this call takes no query parameters",
                )
        for name, param in known.items():
            given = request.GET.getall(name)
            if not given:
                continue
            if len(given) > 1:
                raise ApiError.invalid(name, "given more than once")
            _check_text({name: given[0]})
            values[name] = _convert(param, given[0])
        return values

    @staticmethod
    def _read(request: webob.Request) -> bytes:
        """The whole body, read before anything else.

        Read even when the request is refused: a body left unread would make
        the server drain it (or close the connection) after the answer.  Its
        size is limited before it gets here (oslo.middleware's ``sizelimit``,
        ``[oslo_middleware] max_request_body_size``): a body that only
        proves too large while read (chunked) is a 413 here.  A body that
        cannot be read (a malformed chunked encoding, a client gone) is the
        client's: 400 naming the body.
        """
        length = request.content_length
        chunked = "chunked" in request.headers.get("Transfer-Encoding", "").lower()
        if not length and not chunked:
            return b""
        stream = request.body_file_raw
        try:
            if length:
                data: bytes = stream.read(length)
            else:
                # In pieces: the size limit's reader checks after each read.
                data = b"".join(iter(lambda: stream.read(1 << 16), b""))
        except webob.exc.HTTPRequestEntityTooLarge:
            raise ApiError(
                413, "ringfleet.too_large", "the body is larger than max_request_body_size"
            ) from None
        except Exception as exc:  # the server's own errors: any failure of the client's bytes
            reason = f"could not be read: {exception.first_line(exc)[:200] or type(exc).__name__}"
            raise ApiError.invalid("body", reason) from None
        return data

    def _body(self, request: webob.Request, route: Route, raw: bytes) -> Json:
        if route.body is None:
            if raw:
                raise ApiError.invalid("body", "this call takes no body")
            return None
        media = (request.content_type or "").lower()
        if media and media != "application/json":
            raise ApiError(
                415, "ringfleet.unsupported_media_type", "the body must be application/json"
            )
        if not raw.strip():
            raise ApiError.invalid("body", "a JSON object is required")
        try:
            body = json.loads(raw, parse_constant=_no_constant)
        except (ValueError, RecursionError) as exc:
            raise ApiError.invalid("body", f"not JSON: {str(exc)[:200]}") from None
        if not isinstance(body, dict):
            raise ApiError.invalid("body", "must be a JSON object", body)
        # The conductors apply the same rule; refused here, the caller's
        # fields are named as it sent them, and no conductor is called.
        _check_text(body)
        if route.envelope is not None:
            _check_envelope(body, route.envelope)
        return body

    @staticmethod
    def _check_fields_since(route: Route, body: Json, version: microversion.Version) -> None:
        """Refuse a body field the requested microversion does not have (named,
        never ignored: a build silently without its image would be worse)."""
        if not isinstance(body, dict):
            return
        for key, since in sorted(route.fields_since.items()):
            if key in body and version < since:
                raise ApiError.invalid(
                    key,
                    f"needs microversion {since} ({microversion.HEADER}: "
                    f"{microversion.SERVICE_TYPE} {since})",
                )


#: The conductors' answers and their HTTP errors: status, code, Retry-After.
_ANSWERS: tuple[tuple[type[Exception], int, str, str | None], ...] = (
    (exception.InvalidInput, 400, "ringfleet.invalid_input", None),
    (exception.NotFound, 404, "ringfleet.not_found", None),
    (exception.Conflict, 409, "ringfleet.conflict", None),
    # Nova's answer to a quota exceeded: 403, its message naming the quota.
    (exception.QuotaExceeded, 403, "ringfleet.quota_exceeded", None),
    (exception.Forbidden, 403, "ringfleet.forbidden", None),
    # The conductors cannot do this as they are configured: retrying cannot help.
    (exception.ConfigurationError, 409, "ringfleet.not_configured", None),
    (exception.ServiceUnavailable, 503, "ringfleet.service_unavailable", "2"),
)


#: A well-formed agent name that is no live agent now (a drain's, a move's):
#: the fleet's state, not the request's fault, so 409 as any other clash.
_NOT_LIVE_AGENT = [("host", "is not a live agent")]


def _as_api_error(exc: Exception) -> Exception:
    """The HTTP error a conductor call's exception is answered with, or the
    exception itself when it is none of the conductors' answers (a 500)."""
    if (
        isinstance(exc, exception.InvalidInput)
        and [(e.field, e.reason) for e in exc.errors] == _NOT_LIVE_AGENT
    ):
        detail = exception.first_line(exc)[:1000]
        return ApiError(409, "ringfleet.conflict", detail, fields=_fields(exc))
    if isinstance(exc, messaging.MessagingTimeout):
        detail = "no conductor answered in time; retry"
        return ApiError(503, "ringfleet.conductor_timeout", detail, headers={"Retry-After": "5"})
    if isinstance(exc, messaging.RemoteError) and exc.exc_type in (
        "UnsupportedVersion",
        "NoSuchMethod",
    ):
        detail = "the conductor that answered does not serve this call yet"
        return ApiError(503, "ringfleet.conductor_too_old", detail)
    for kind, status, code, retry_after in _ANSWERS:
        if isinstance(exc, kind):
            headers = {"Retry-After": retry_after} if retry_after else None
            detail = exception.first_line(exc)[:1000]
            return ApiError(status, code, detail, fields=_fields(exc), headers=headers)
    return exc


def _fields(exc: Exception) -> list[dict[str, Any]]:
    """The ``errors`` entries of a conductor's answer: one per field at fault."""
    if isinstance(exc, exception.InvalidInput):
        return [e.to_dict() for e in exc.errors[:100]]
    if isinstance(exc, exception.NotFound):
        return [{"field": None, "reason": "not found", "value": str(exc.ident)[:200]}]
    if isinstance(exc, exception.Conflict):
        return [{"field": exc.field, "reason": exc.reason, "value": exc.value, "index": exc.index}]
    if isinstance(exc, exception.ConfigurationError):
        return [{"field": f"[{exc.group}] {exc.option}", "reason": exc.reason, "value": None}]
    if isinstance(exc, exception.QuotaExceeded):
        reason = f"requested {exc.requested}, already used {exc.used} of {exc.limit}"
        return [{"field": exc.resource, "reason": reason, "value": str(exc.requested)}]
    return []


#: The scalar JSON types an envelope's fields are checked for, and the reason
#: a wrong value is refused with.
_SCALARS: dict[str, tuple[type, str]] = {
    "boolean": (bool, "must be true or false"),
    "string": (str, "must be a string"),
}


def _check_envelope(body: dict[str, Any], envelope: Resource) -> None:
    """No other key than the envelope's, the required ones there, the scalar
    ones of their type (lists and objects inside are the conductor's to check).

    :raises ApiError: naming the first bad field
    """
    for key in body:
        if key not in envelope.fields:
            raise ApiError.invalid(
                key[:100], "unknown field; use " + ", ".join(sorted(envelope.fields))
            )
    for key in sorted(envelope.required):
        if key not in body:
            raise ApiError.invalid(key, "required")
    for key, schema in envelope.properties.items():
        kind = schema.get("type")
        kinds = kind if isinstance(kind, list) else [kind]
        scalar = next((_SCALARS[k] for k in kinds if k in _SCALARS), None)
        if key not in body or scalar is None:
            continue
        value = body[key]
        if value is None and "null" in kinds:
            continue
        if not isinstance(value, scalar[0]):
            reason = scalar[1] + (" or null" if "null" in kinds else "")
            raise ApiError.invalid(key, reason, value)


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _convert(param: Param, text: str) -> Any:
    if param.kind == "boolean":
        lowered = text.lower()
        if lowered in ("true", "1", "yes"):
            return True
        if lowered in ("false", "0", "no"):
            return False
        raise ApiError.invalid(param.name, "must be true or false", text)
    if param.kind == "integer":
        if not text.isascii() or not text.isdigit() or len(text) > 9:
            raise ApiError.invalid(param.name, "must be a whole number", text)
        number = int(text)
        if param.minimum is not None and number < param.minimum:
            raise ApiError.invalid(param.name, f"must be at least {param.minimum}", text)
        return number
    if len(text) > 255:
        raise ApiError.invalid(param.name, "at most 255 characters", text)
    return text


def _check_decodable(request: webob.Request) -> None:
    """A path or query that is not UTF-8 once percent-decoded is the
    client's mistake (400 naming it), never a failure of webob's decoding.

    :raises ApiError: naming ``path`` or ``query``
    """
    try:
        request.path_info  # noqa: B018 -- decoded on access
    except UnicodeDecodeError:
        raise ApiError.invalid("path", "is not UTF-8 once percent-decoded") from None
    try:
        request.GET  # noqa: B018 -- decoded on access
    except UnicodeDecodeError:
        raise ApiError.invalid("query", "is not UTF-8 once percent-decoded") from None


def _check_text(values: dict[str, Any]) -> None:
    """The one text rule (:func:`conductor.common.checks.text_problem`) on
    what a request carries: no control character, no lone surrogate.

    :raises ApiError: 400 naming every offending field
    """
    try:
        checks.check_text_everywhere(values)
    except exception.InvalidInput as exc:
        raise ApiError(
            400, "ringfleet.invalid_input", exception.first_line(exc)[:1000], fields=_fields(exc)
        ) from None


def _shown_path(environ: Environ) -> str:
    """The request's path and query for a log line: as sent, percent-encoded
    (undecodable bytes and control characters cannot reach the log)."""
    raw = environ.get("PATH_INFO", "").encode("latin-1", "replace")
    shown = urllib.parse.quote(raw[:300], safe="/:@!$&'()*+,;=-._~")
    query = environ.get("QUERY_STRING", "")
    if query:
        shown += "?" + urllib.parse.quote(query.encode("latin-1", "replace")[:300], safe="=&%+")
    return shown
