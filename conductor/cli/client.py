# SPDX-License-Identifier: Apache-2.0
"""Building the CLI's conductor client from the operator's configuration.

Before the first call the broker is tried once, within ``--rpc-timeout``:
oslo.messaging retries an unreachable broker for ever, so a CLI that just
called would hang.  Every failure here is one line naming the configuration
it came from (the files read, or that none was found) and the broker's URL
without its password.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from oslo_config import cfg

from conductor.common.exception import ConfigurationError, ServiceUnavailable, first_line

if TYPE_CHECKING:
    import oslo_messaging as messaging

    from conductor.rpcapi import ConductorAPI

# oslo.messaging, kombu and the option groups (the hash ring's) are imported
# where they are used: a command that never calls the conductor over RPC
# (--help, the HTTP API, the demo) starts without them (issue 36).

__all__ = ["DEFAULT_CONFIG_FILE", "client_from_conf", "load_config"]

DEFAULT_CONFIG_FILE = "/etc/ringfleet/ringfleet.conf"

#: The drivers whose broker is tried before the first call (AMQP over kombu).
_AMQP_DRIVERS = ("rabbit",)


def load_config(config_files: Sequence[str]) -> tuple[cfg.ConfigOpts, str]:
    """The CLI's configuration parsed from ``config_files`` (or the default
    file when none is given and it exists), with the RPC options registered;
    and where it came from, in words, for the errors."""
    from conductor.common import conf as common_conf  # noqa: PLC0415 -- the ring's options: RPC only
    from conductor.common import rpc  # noqa: PLC0415 -- oslo.messaging: RPC only

    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    # The shared groups only: the conductor's own ([ironic] among them, whose
    # keystoneauth options would load keystoneauth) are none of the CLI's.
    common_conf.register_opts(conf)
    files = list(config_files)
    if not files and os.path.exists(DEFAULT_CONFIG_FILE):
        files = [DEFAULT_CONFIG_FILE]
    source = (
        f"config {', '.join(files)}"
        if files
        else f"no config file (none given, {DEFAULT_CONFIG_FILE} does not exist)"
    )
    # No argv: the CLI's own parser already consumed the command line.
    conf([], project="ringfleet", default_config_files=files)
    return conf, source


def client_from_conf(
    conf: cfg.ConfigOpts, timeout: float, source: str
) -> tuple[messaging.Transport, ConductorAPI]:
    """(transport, client) for a parsed ``conf`` (with the RPC options
    registered); ``source`` names where its configuration came from, for
    the errors.

    :raises ConfigurationError: no ``[DEFAULT] transport_url``
    :raises ServiceUnavailable: the broker did not answer within *timeout*
    """
    import oslo_messaging as messaging  # noqa: PLC0415 -- heavy: RPC only

    from conductor.common import rpc  # noqa: PLC0415 -- oslo.messaging: RPC only
    from conductor.rpcapi import ConductorAPI  # noqa: PLC0415 -- oslo.messaging: RPC only

    if not conf.transport_url:
        raise ConfigurationError(
            "DEFAULT", "transport_url", f"not set ({source}); or use --os-endpoint"
        )
    try:
        url = messaging.TransportURL.parse(conf, conf.transport_url)
    except messaging.InvalidTransportURL as exc:
        raise ConfigurationError(
            "DEFAULT", "transport_url", f"{first_line(exc)} ({source})"
        ) from None
    if url.transport in _AMQP_DRIVERS:
        _try_broker(url, timeout, source)
    transport = rpc.get_transport(conf)
    return transport, ConductorAPI(transport, timeout=timeout)


def _try_broker(url: messaging.TransportURL, timeout: float, source: str) -> None:
    """Connect to one of the URL's brokers within *timeout*, or say why not."""
    import kombu.connection  # noqa: PLC0415 -- heavy: RPC only
    import oslo_messaging as messaging  # noqa: PLC0415 -- heavy: RPC only

    from conductor.common import broker_outage  # noqa: PLC0415 -- oslo.messaging: RPC only

    # kombu has no type hints.
    connection_class: Any = kombu.connection.Connection
    failures: list[str] = []
    reached = threading.Event()

    def attempt() -> None:
        for host in url.hosts or [messaging.TransportHost()]:
            connection = connection_class(
                hostname=host.hostname or "localhost",
                port=host.port or 5672,
                userid=host.username or "guest",
                password=host.password or "guest",
                virtual_host=url.virtual_host or "/",
                transport="pyamqp",
                connect_timeout=timeout,
            )
            try:
                connection.connect()
            except Exception as exc:  # the next host, or the report below
                failures.append(first_line(exc))
                continue
            finally:
                connection.release()
            reached.set()
            return

    # A thread, so that the deadline holds whatever the connection does.
    trying = threading.Thread(target=attempt, name="broker-check", daemon=True)
    trying.start()
    trying.join(timeout)
    if reached.is_set():
        return
    why = failures[-1] if failures else f"no answer within {timeout:g} s"
    broker = broker_outage.redacted(url)
    raise ServiceUnavailable(
        f"cannot reach the broker at {broker} ([DEFAULT] transport_url, {source}): {why}"
    )
