# SPDX-License-Identifier: Apache-2.0
"""The API's WSGI pipeline, as paste.deploy loads it from ``api-paste.ini``.

Like Nova's, Ironic's and Placement's, the API is a pipeline of
middlewares an operator can rearrange or extend (audit, rate limiting)
without touching code: ``etc/ringfleet/api-paste.ini`` (``[api]
api_paste_config``) names the elements, and the factories here build the
ones that need ringfleet's parsed configuration or its conductors' client.

oslo.middleware reads its options from a ``ConfigOpts`` (``[cors]``,
``[oslo_middleware]``, ``[healthcheck]``): the factories give it
ringfleet's (it would read oslo.config's global ``CONF`` otherwise, which
ringfleet never parses), so those options are set in ``ringfleet.conf``.
paste.deploy passes factories strings only, so what they need is held by
:func:`load` while it runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from oslo_config import cfg
from oslo_middleware import cors, http_proxy_to_wsgi, sizelimit
from oslo_middleware import healthcheck as oslo_healthcheck
from paste import deploy

from conductor.api import app as api_app
from conductor.api import auth, health, microversion, openapi, v1
from conductor.api.errors import WsgiApp
from conductor.rpcapi import ConductorAPI

__all__ = [
    "DetailedHealthcheck",
    "app_factory",
    "auth_factory",
    "cors_factory",
    "current",
    "detailed_healthcheck_factory",
    "healthcheck_factory",
    "http_proxy_to_wsgi_factory",
    "load",
    "loading",
    "sizelimit_factory",
]

Filter = Callable[[WsgiApp], WsgiApp]


@dataclass(frozen=True)
class Parts:
    """What the factories of one :func:`load` build from."""

    conf: cfg.ConfigOpts
    api: ConductorAPI


_lock = threading.Lock()
_current: Parts | None = None


@contextmanager
def loading(parts: Parts) -> Iterator[None]:
    """Lets the factories build from ``parts`` meanwhile (one load at a time)."""
    global _current  # noqa: PLW0603 -- paste.deploy gives factories strings only
    with _lock:
        _current = parts
        try:
            yield
        finally:
            _current = None


def current() -> Parts:
    """The configuration and client of the pipeline being loaded.

    :raises RuntimeError: outside :func:`load` (a factory used by another loader)
    """
    if _current is None:
        raise RuntimeError(
            "ringfleet's paste factories build only inside conductor.api.pipeline.load()"
        )
    return _current


def load(conf: cfg.ConfigOpts, api: ConductorAPI, path: str, name: str = "main") -> WsgiApp:
    """The WSGI application ``name`` of the paste file ``path``."""
    with loading(Parts(conf, api)):
        loaded: WsgiApp = deploy.loadapp(f"config:{path}", name=name)
    return loaded


# -- the application -----------------------------------------------------------


def _versions(base_url: str) -> dict[str, Any]:
    return {"versions": [_version(base_url)], "default_version": _version(base_url)}


def _version(base_url: str) -> dict[str, Any]:
    return {
        "id": "v1",
        "status": "CURRENT",
        "min_version": str(microversion.MIN_VERSION),
        "version": str(microversion.MAX_VERSION),
        "service_type": microversion.SERVICE_TYPE,
        "links": [
            {"rel": "self", "href": f"{base_url}/v1/"},
            {
                "rel": "describedby",
                "type": "application/vnd.oai.openapi+json;version=3.1",
                "href": f"{base_url}/v1/openapi.json",
            },
        ],
    }


def app_factory(global_conf: Mapping[str, Any], **local_conf: Any) -> api_app.Application:
    """``[app:ringfleet]``: the API itself (the end of the pipeline)."""
    parts = current()
    spec = openapi.document(v1.ROUTES)
    return api_app.Application(
        parts.conf,
        parts.api,
        v1.ROUTES,
        public={
            "": _versions,
            "/v1": lambda base: {"version": _version(base)},
            "/v1/openapi.json": lambda base: spec,
        },
    )


# -- filters -------------------------------------------------------------------


def auth_factory(global_conf: Mapping[str, Any], **local_conf: Any) -> Filter:
    """``[filter:authtoken]``: ``[api] auth_strategy``'s authentication
    (:func:`conductor.api.auth.authenticated`); ``admin_only = true`` also
    requires the policy's ``context_is_admin``."""
    conf = current().conf
    admin_only = str(local_conf.get("admin_only", "false")).lower() == "true"
    return lambda application: auth.authenticated(application, conf, admin_only=admin_only)


def _configured(middleware: Callable[[WsgiApp, cfg.ConfigOpts], WsgiApp]) -> Callable[..., Filter]:
    """The paste filter factory of an oslo.middleware class, reading ringfleet's options."""

    def factory(global_conf: Mapping[str, Any], **local_conf: Any) -> Filter:
        if local_conf:
            # oslo.middleware would write them into the shared ConfigOpts
            # (set_override): say where they belong instead.
            raise ValueError(
                f"{sorted(local_conf)}: set oslo.middleware's options in ringfleet.conf, "
                "not in api-paste.ini"
            )
        conf = current().conf
        return lambda application: middleware(application, conf)

    return factory


#: ``[cors]`` of ringfleet.conf.
cors_factory = _configured(cors.CORS)
#: ``[oslo_middleware] enable_proxy_headers_parsing``.
http_proxy_to_wsgi_factory = _configured(http_proxy_to_wsgi.HTTPProxyToWSGI)
#: ``[oslo_middleware] max_request_body_size``.
sizelimit_factory = _configured(sizelimit.RequestBodySizeLimiter)


# -- health checks -------------------------------------------------------------


def healthcheck_factory(
    global_conf: Mapping[str, Any], **local_conf: Any
) -> oslo_healthcheck.Healthcheck:
    """``[app:healthcheck]``: oslo.middleware's, for load balancers, with
    ``[healthcheck]``'s options (``backends = disable_by_file`` takes an API
    host out of rotation while a file exists)."""
    return oslo_healthcheck.Healthcheck(None, current().conf)


class DetailedHealthcheck(oslo_healthcheck.Healthcheck):
    """oslo.middleware's health check in detailed mode, with the conductors'
    RPC path (:class:`conductor.api.health.ConductorRpc`) among its
    backends, besides ``[healthcheck] backends``."""

    def _conf_get(self, key: str, group: str = "healthcheck") -> Any:
        if group == "healthcheck" and key == "detailed":
            return True
        value = super()._conf_get(key, group)
        if group == "healthcheck" and key == "backends":
            return [*(b for b in value if b != health.BACKEND), health.BACKEND]
        return value


def detailed_healthcheck_factory(
    global_conf: Mapping[str, Any], **local_conf: Any
) -> DetailedHealthcheck:
    """``[app:healthcheck_detailed]``: behind ``authtoken`` with ``admin_only``."""
    return DetailedHealthcheck(None, current().conf)
