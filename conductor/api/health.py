# SPDX-License-Identifier: Apache-2.0
"""The conductors' RPC path as a backend of oslo.middleware's health check.

An API host is useless without a conductor answering its RPC calls, but
every API host depends on the same conductors: a load balancer gains
nothing from taking them all out of rotation together, and would poll the
conductors with every probe.  So the public ``/healthcheck`` does not make
this check; the detailed one for admins (``/healthcheck/detailed``,
``etc/ringfleet/api-paste.ini``) does, with one ``fleet_status`` call: the
API's RPC transport, RabbitMQ, a conductor, its database and its
membership view, the path every API call takes.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import oslo_messaging as messaging
from oslo_config import cfg
from oslo_middleware.healthcheck import pluginbase

from conductor.common import exception

__all__ = ["BACKEND", "ConductorRpc"]

LOG = logging.getLogger(__name__)

#: Its name in the ``oslo.middleware.healthcheck`` entry point namespace.
BACKEND = "ringfleet_conductor"


class ConductorRpc(pluginbase.HealthcheckBaseExtension):
    """Healthy when a conductor answers ``fleet_status`` within ``[api] rpc_timeout``."""

    def __init__(self, oslo_conf: cfg.ConfigOpts, conf: dict[str, Any]) -> None:
        super().__init__(oslo_conf, conf)
        # Built while the pipeline loads: the application's own client.
        from conductor.api import pipeline  # noqa: PLC0415 -- the pipeline imports this module

        self.api = pipeline.current().api
        self.timeout = float(oslo_conf.api.rpc_timeout)

    def healthcheck(self, server_port: int) -> pluginbase.HealthcheckResult:
        started = time.monotonic()
        try:
            status = self.api.fleet_status()
        except messaging.MessagingTimeout:
            return pluginbase.HealthcheckResult(
                False,
                "no conductor answered over RPC",
                details=f"fleet_status: no reply within {self.timeout:g} s ([api] rpc_timeout)",
            )
        except exception.ServiceUnavailable as exc:
            return pluginbase.HealthcheckResult(
                False,
                "a conductor answered but cannot serve",
                details=exception.first_line(exc)[:500],
            )
        except Exception as exc:  # any other failure of the path is the answer, not a crash
            LOG.warning("Health check: fleet_status failed: %s", exception.first_line(exc))
            return pluginbase.HealthcheckResult(
                False,
                "the conductors' RPC call failed",
                details=f"{type(exc).__name__}: {exception.first_line(exc)[:500]}",
            )
        seconds = time.monotonic() - started
        agents = [a for a in status.get("agents", []) if a.get("state") == "up"]
        return pluginbase.HealthcheckResult(
            True,
            "conductors answer over RPC",
            details=f"fleet_status answered in {seconds * 1000:.0f} ms; {len(agents)} live agents",
        )
