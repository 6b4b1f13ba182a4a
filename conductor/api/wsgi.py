"""The application factory: what a WSGI server loads.

Production (see ``docs/http-api.rst``)::

    RINGFLEET_API_CONFIG=/etc/ringfleet/ringfleet.conf \\
        gunicorn --workers 2 --threads 8 --bind 0.0.0.0:6486 \\
        'conductor.api.wsgi:init_application()'

or uwsgi with ``--module 'conductor.api.wsgi:application'`` (the module
attribute is built on first access, in each worker).  Each worker process
builds its own RPC transport when it loads the application, after the fork.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from oslo_config import cfg

from conductor.api import app as api_app
from conductor.api import conf as api_conf
from conductor.api import microversion, openapi, v1
from conductor.common import rpc
from conductor.common.exception import ConfigurationError
from conductor.common.prepare import prepare_service
from conductor.rpcapi import ConductorAPI

__all__ = ["CONFIG_ENV", "build_application", "configure", "init_application"]

#: Environment variable naming the config file(s) of a WSGI worker (comma-separated).
CONFIG_ENV = "RINGFLEET_API_CONFIG"
DEFAULT_CONFIG = "/etc/ringfleet/ringfleet.conf"


def configure(argv: Sequence[str]) -> cfg.ConfigOpts:
    """The API's configuration: its options, oslo.messaging's, oslo.policy's, parsed."""
    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    api_conf.register_opts(conf)
    prepare_service(argv, conf)
    return conf


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


def build_application(conf: cfg.ConfigOpts, api: ConductorAPI | None = None) -> api_app.Application:
    """The application for a parsed ``conf``; ``api`` defaults to a client
    of ``[DEFAULT] transport_url`` with ``[api] rpc_timeout``."""
    if api is None:
        api = ConductorAPI(rpc.get_transport(conf), timeout=conf.api.rpc_timeout)
    spec = openapi.document(v1.ROUTES)
    application = api_app.Application(
        conf,
        api,
        v1.ROUTES,
        public={
            "": _versions,
            "/v1": lambda base: {"version": _version(base)},
            "/v1/openapi.json": lambda base: spec,
        },
    )
    if conf.api.auth_strategy == "keystone":
        try:
            from conductor.api import auth_token  # noqa: PLC0415 -- optional extra
        except ImportError:
            raise ConfigurationError(
                "api",
                "auth_strategy",
                "keystone needs keystonemiddleware: pip install 'ringfleet[keystone]'",
            ) from None
        application.authenticated = auth_token.AuthToken(
            application.serve, {"oslo_config_config": conf, "delay_auth_decision": True}
        )
    return application


def init_application(argv: Sequence[str] | None = None) -> api_app.Application:
    """For a WSGI server: config files from ``$RINGFLEET_API_CONFIG`` (or
    ``/etc/ringfleet/ringfleet.conf``), no command line."""
    if argv is None:
        files = os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG
        argv = ["ringfleet-api"]
        for path in files.split(","):
            argv += ["--config-file", path.strip()]
    return build_application(configure(argv))


_application: api_app.Application | None = None


def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """A module-level WSGI callable for uwsgi (built on first request, per worker)."""
    global _application  # noqa: PLW0603 -- one application per worker process
    if _application is None:
        _application = init_application()
    return _application(environ, start_response)
