# SPDX-License-Identifier: Apache-2.0
"""keystoneauth's options in a group of ours, for each OpenStack service ringfleet calls.

``[ironic]`` and ``[placement]`` configure their service as every OpenStack
project does: keystoneauth's session (TLS, timeout), adapter (endpoint,
interface, region) and auth plugin options, registered once here.
"""

from __future__ import annotations

import copy

from keystoneauth1 import exceptions as ks_exceptions
from keystoneauth1 import loading as ks_loading
from keystoneauth1 import session as ks_session
from oslo_config import cfg

from conductor.common.exception import ConfigurationError

__all__ = ["list_opts", "load_session", "register_opts"]


def list_opts(request_timeout: float | None = None) -> list[cfg.Opt]:
    """keystoneauth's session, adapter and auth options (password plugin shown),
    ``timeout`` defaulting to *request_timeout*."""
    listed = (
        ks_loading.get_session_conf_options()
        + ks_loading.get_adapter_conf_options(include_deprecated=False)
        + ks_loading.get_auth_common_conf_options()
        + ks_loading.get_auth_plugin_conf_options("password")
    )
    unique: dict[str, cfg.Opt] = {}
    for opt in listed:
        if opt.dest == "timeout" and request_timeout is not None:
            # A copy: keystoneauth's option objects are shared by every group.
            timeout = copy.deepcopy(opt)
            timeout.default = request_timeout
            unique.setdefault(opt.dest, timeout)
        unique.setdefault(opt.dest, opt)
    return list(unique.values())


def register_opts(
    conf: cfg.ConfigOpts, group: str, service_type: str, request_timeout: float | None = None
) -> None:
    """Register keystoneauth's options in ``group`` (idempotent); the adapter
    finds ``service_type`` in the catalog, internal endpoint first.

    *request_timeout* becomes the session's ``timeout`` default: keystoneauth
    has none, and a request to a hung (SIGSTOPped, half-dead) service then
    blocks for as long as the service hangs -- no outage is said, no
    deadline of the caller can fire, and a stop waits for it.
    """
    ks_loading.register_session_conf_options(conf, group)
    ks_loading.register_auth_conf_options(conf, group)
    ks_loading.register_adapter_conf_options(conf, group, include_deprecated=False)
    conf.set_default("service_type", service_type, group)
    conf.set_default("valid_interfaces", ["internal", "public"], group)
    if request_timeout is not None:
        conf.set_default("timeout", request_timeout, group)


def load_session(conf: cfg.ConfigOpts, group: str, service: str) -> ks_session.Session:
    """A keystoneauth session configured by ``group``'s options.

    :raises ConfigurationError: ``auth_type`` is unset, unknown, or its
        plugin misses options (each named)
    """
    try:
        auth = ks_loading.load_auth_from_conf_options(conf, group)
    except ks_exceptions.MissingRequiredOptions as exc:
        names = ", ".join(opt.dest for opt in exc.options)
        raise ConfigurationError(group, "auth_type", f"missing options: {names}") from exc
    except ks_exceptions.NoMatchingPlugin as exc:
        raise ConfigurationError(group, "auth_type", str(exc)) from exc
    if auth is None:
        raise ConfigurationError(
            group,
            "auth_type",
            f"not set: use 'none' with endpoint_override for a standalone {service}, "
            "or a Keystone plugin such as 'password'",
        )
    return ks_loading.load_session_from_conf_options(conf, group, auth=auth)
