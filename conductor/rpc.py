"""RPC plumbing shared by the conductor, the agents and the CLI.

One place builds transports, clients and servers so that every process
agrees on the exchange, the serializer, the access policy and which of our
exceptions are re-raised as themselves on the caller's side (instead of an
opaque ``RemoteError``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import oslo_messaging as messaging
from oslo_config import cfg
from oslo_messaging import opts as messaging_opts
from oslo_messaging._metrics import client as metrics_client
from oslo_messaging._tracing import client as tracing_client
from oslo_messaging.rpc import dispatcher

from conductor.exception import RingfleetError

__all__ = [
    "COMPUTE_TOPIC",
    "CONDUCTOR_TOPIC",
    "get_client",
    "get_server",
    "get_transport",
    "register_opts",
]

LOG = logging.getLogger(__name__)

CONDUCTOR_TOPIC = "ringfleet-conductor"
COMPUTE_TOPIC = "ringfleet-compute"

#: Modules whose exceptions travel over RPC as themselves.
ALLOWED_EXMODS = ["conductor.exception", "compute_agent.exception"]


def register_opts(conf: cfg.ConfigOpts) -> None:
    """Register oslo.messaging's options (transport_url & co) on ``conf``.

    oslo.messaging registers most of them lazily, but a private ConfigOpts
    also needs the tracing and metrics groups before the first call.
    """
    for group, opts in messaging_opts.list_opts():
        conf.register_opts(opts, group=group)
    # Registered by oslo.messaging on the global CONF only, at import time.
    conf.register_opts(tracing_client.oslo_messaging_tracing, group="oslo_messaging_tracing")
    conf.register_opts(metrics_client.oslo_messaging_metrics, group="oslo_messaging_metrics")


def get_transport(conf: cfg.ConfigOpts) -> messaging.Transport:
    """The RPC transport of ``[DEFAULT] transport_url``."""
    register_opts(conf)
    return messaging.get_rpc_transport(conf, allowed_remote_exmods=ALLOWED_EXMODS)


def get_client(
    transport: messaging.Transport,
    topic: str,
    *,
    version: str,
    server: str | None = None,
    timeout: float | None = None,
) -> messaging.RPCClient:
    target = messaging.Target(topic=topic, version=version, server=server)
    return messaging.get_rpc_client(transport, target, timeout=timeout)


class _ExpectedErrors:
    """Serves an endpoint with our exceptions marked as expected outcomes.

    A refused payload or a missing node is the caller's business: the server
    logs it at debug level instead of an ERROR with a traceback, and the
    caller still receives the exception itself.  The endpoint objects stay
    plain (their methods raise our exceptions when called directly).
    """

    def __init__(self, endpoint: Any) -> None:
        self._endpoint = endpoint
        self.target = getattr(endpoint, "target", None)

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._endpoint, name)
        if name.startswith("_") or not callable(attribute):
            return attribute
        return messaging.expected_exceptions(RingfleetError)(attribute)


def get_server(
    transport: messaging.Transport,
    topic: str,
    server: str,
    endpoints: Sequence[Any],
) -> messaging.RPCServer:
    """An RPC server (threading executor) for ``endpoints``.

    Only methods of the endpoints are callable; names starting with ``_``
    never are (the default access policy).
    """
    target = messaging.Target(topic=topic, server=server)
    return messaging.get_rpc_server(
        transport,
        target,
        [_ExpectedErrors(endpoint) for endpoint in endpoints],
        serializer=messaging.NoOpSerializer(),
        access_policy=dispatcher.DefaultRPCAccessPolicy,
    )
