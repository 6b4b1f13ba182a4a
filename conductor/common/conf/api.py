# SPDX-License-Identifier: Apache-2.0
"""Options of the ``[api]`` group, read by ``ringfleet-api`` only."""

from __future__ import annotations

from oslo_config import cfg
from oslo_middleware import cors, sizelimit

from conductor.common.conf.groups import GroupOptions

__all__ = [
    "AUTH_STRATEGIES",
    "DEFAULT_PASTE_CONFIG",
    "MAX_REQUEST_BODY_SIZE",
    "OPTIONS",
    "group",
    "opts",
    "set_defaults",
]

#: ringfleet's default of ``[oslo_middleware] max_request_body_size`` (the
#: sizelimit filter of the pipeline): an import of about 50,000 small
#: nodes, where oslo.middleware's own default (112 KiB) holds about 350.
MAX_REQUEST_BODY_SIZE = 16 * 1024 * 1024
#: ``[api] api_paste_config``'s default.
DEFAULT_PASTE_CONFIG = "api-paste.ini"

#: ``[api] auth_strategy`` values.
AUTH_STRATEGIES = ("keystone", "token", "noauth")

group = cfg.OptGroup("api", title="HTTP API options (ringfleet-api)")

opts = [
    cfg.HostAddressOpt(
        "host_ip",
        default="127.0.0.1",
        help=(
            "Address the development server (the ringfleet-api command) "
            "listens on. In production the WSGI server (gunicorn, uwsgi) "
            "binds instead and this option is not read."
        ),
    ),
    cfg.PortOpt(
        "port",
        default=6486,
        help="Port of the development server (ringfleet-api).",
    ),
    cfg.StrOpt(
        "auth_strategy",
        default="keystone",
        choices=[
            (
                "keystone",
                "Keystone tokens, checked by keystonemiddleware "
                "([keystone_authtoken]; needs the ringfleet[keystone] extra).",
            ),
            ("token", "Static tokens from [api] token_file: standalone use."),
            (
                "noauth",
                "No authentication: every request is an admin. "
                "Only for tests and a private development host.",
            ),
        ],
        help="How requests are authenticated.",
    ),
    cfg.StrOpt(
        "token_file",
        help=(
            "With auth_strategy = token: a file of 'TOKEN ROLES [PROJECT]' "
            "lines (ROLES comma-separated, e.g. 'admin,member,reader'; '#' "
            "starts a comment). A request's X-Auth-Token must be one of the "
            "tokens. Read once at start."
        ),
    ),
    cfg.IntOpt(
        "max_limit",
        default=1000,
        min=1,
        max=10000,
        help="Largest page a list call returns (its limit parameter is capped to it).",
    ),
    cfg.FloatOpt(
        "rpc_timeout",
        default=30.0,
        min=1.0,
        help=(
            "Seconds to wait for a conductor's reply before answering 503. "
            "Imports of many nodes need longer; drain_agent waits for the "
            "conductor's own rpc_response_timeout."
        ),
    ),
    cfg.StrOpt(
        "api_paste_config",
        default=DEFAULT_PASTE_CONFIG,
        help=(
            "The WSGI pipeline of the API (paste.deploy): a path, or a file "
            "name looked for in the directories of the config files (e.g. "
            "/etc/ringfleet/api-paste.ini). Without such a file, "
            "api-paste.ini is the copy installed with ringfleet "
            "(etc/ringfleet/api-paste.ini)."
        ),
    ),
    cfg.StrOpt(
        "public_endpoint",
        help=(
            "Base URL clients reach the API at (e.g. "
            "'https://fleet.example.com/'), used in links and Location "
            "headers. Default: the request's own host URL (set it behind a "
            "TLS-terminating load balancer)."
        ),
    ),
]


def set_defaults() -> None:
    """ringfleet's defaults of the oslo.middleware options its pipeline uses.

    Set whenever ``[api]`` is registered, and the ``oslo.config.opts.defaults``
    hook of the ``ringfleet.api`` namespace, so that the sample config shows them.
    """
    cfg.set_defaults(sizelimit.OPTS, max_request_body_size=MAX_REQUEST_BODY_SIZE)
    cors.set_defaults(
        allow_headers=["X-Auth-Token", "OpenStack-API-Version", "X-OpenStack-Request-ID"],
        expose_headers=["OpenStack-API-Version", "X-OpenStack-Request-ID", "Location"],
        allow_methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"],
    )


def _register_middleware_opts(conf: cfg.ConfigOpts) -> None:
    """oslo.middleware's options, with ringfleet's defaults.

    The sizelimit filter registers its own too, when the pipeline loads;
    here so that they are known (and may be overridden) before.
    """
    set_defaults()
    conf.register_opts(sizelimit.OPTS, group="oslo_middleware")


OPTIONS = GroupOptions(group, opts, prepare=_register_middleware_opts)
