# SPDX-License-Identifier: Apache-2.0
"""The application factory: what a WSGI server loads.

Production (see ``docs/http-api.rst``)::

    RINGFLEET_API_CONFIG=/etc/ringfleet/ringfleet.conf \\
        gunicorn --workers 2 --threads 8 --bind 0.0.0.0:6486 \\
        'conductor.api.wsgi:init_application()'

or uwsgi with ``--module 'conductor.api.wsgi:application'`` (the module
attribute is built on first access, in each worker).  Each worker process
builds its own RPC transport when it loads the application, after the fork.

The application is the pipeline of ``api-paste.ini`` (``[api]
api_paste_config``; :mod:`conductor.api.pipeline`): the health checks,
oslo.middleware's filters, authentication, then the API.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from oslo_config import cfg

from conductor.api import pipeline
from conductor.api.errors import WsgiApp
from conductor.common import conf as common_conf
from conductor.common import rpc
from conductor.common.conf import api as api_conf
from conductor.common.exception import ConfigurationError
from conductor.common.prepare import prepare_service
from conductor.rpcapi import ConductorAPI

__all__ = [
    "CONFIG_ENV",
    "PACKAGED_PASTE_FILE",
    "build_application",
    "configure",
    "init_application",
    "paste_file",
]

#: Environment variable naming the config file(s) of a WSGI worker (comma-separated).
CONFIG_ENV = "RINGFLEET_API_CONFIG"
DEFAULT_CONFIG = "/etc/ringfleet/ringfleet.conf"
#: The pipeline installed with ringfleet (a copy of etc/ringfleet/api-paste.ini).
PACKAGED_PASTE_FILE = Path(__file__).with_name("api-paste.ini")


def configure(argv: Sequence[str]) -> cfg.ConfigOpts:
    """The API's configuration: its options, oslo.messaging's, oslo.policy's, parsed."""
    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    common_conf.register_opts(conf, common_conf.API)
    prepare_service(argv, conf, prog="ringfleet-api")
    return conf


def paste_file(conf: cfg.ConfigOpts) -> str:
    """The pipeline's paste file: ``[api] api_paste_config`` as a path, or
    found beside the config files, or (the default name) the installed copy.

    :raises ConfigurationError: when it names no file
    """
    name = conf.api.api_paste_config
    if os.path.isabs(name) and os.path.exists(name):
        return str(name)
    found = conf.find_file(name)
    if found:
        return str(found)
    if name == api_conf.DEFAULT_PASTE_CONFIG:
        return str(PACKAGED_PASTE_FILE)
    raise ConfigurationError("api", "api_paste_config", f"{name}: no such file")


def build_application(conf: cfg.ConfigOpts, api: ConductorAPI | None = None) -> WsgiApp:
    """The API's pipeline (``api-paste.ini``) for a parsed ``conf``; ``api``
    defaults to a client of ``[DEFAULT] transport_url`` with ``[api] rpc_timeout``."""
    if api is None:
        api = ConductorAPI(rpc.get_transport(conf), timeout=conf.api.rpc_timeout)
    return pipeline.load(conf, api, paste_file(conf))


def init_application(argv: Sequence[str] | None = None) -> WsgiApp:
    """For a WSGI server: config files from ``$RINGFLEET_API_CONFIG`` (or
    ``/etc/ringfleet/ringfleet.conf``), no command line."""
    if argv is None:
        files = os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG
        argv = ["ringfleet-api"]
        for path in files.split(","):
            argv += ["--config-file", path.strip()]
    return build_application(configure(argv))


_application: WsgiApp | None = None


def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """A module-level WSGI callable for uwsgi (built on first request, per worker)."""
    global _application  # noqa: PLW0603 -- one application per worker process
    if _application is None:
        _application = init_application()
    return _application(environ, start_response)
