# SPDX-License-Identifier: Apache-2.0
"""No ringfleet process imports eventlet, nor prints its deprecation warning.

Each entry point is imported in a fresh interpreter, as its console script
does, with every warning shown: eventlet must not be loaded (oslo.service
on its threading backend, the libraries' optional imports refused) and
nothing about it printed.  Then one RPC server and client round trip runs
on the threading backend, so the choice is known to work, not only to load.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.harness.process import REPO

ENTRY_POINTS = (
    "conductor.cmd.conductor",
    "conductor.cmd.api",
    "conductor.cmd.cli",
    "conductor.cmd.dbsync",
    "compute_agent.cmd.agent",
    "fleet_demo.command",
)

_PROBE = """
import sys
import {module}
import oslo_messaging
from oslo_service import backend
print(repr(sys.modules.get("eventlet")), backend.get_backend().__class__.__module__)
"""


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_an_entry_point_loads_no_eventlet(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-W", "always", "-c", _PROBE.format(module=module)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.split() == ["None", "oslo_service.backend._threading"]
    assert "eventlet" not in done.stderr.lower().replace("eventletutils", "")


_ROUND_TRIP = """
from conductor.common import rpc  # first, as in every entry point
import oslo_messaging as messaging
from oslo_config import cfg
from oslo_service import backend

class Echo:
    target = messaging.Target(version="1.0")
    def echo(self, ctxt, value):
        return value

conf = cfg.ConfigOpts()
rpc.register_opts(conf)
conf.set_override("transport_url", "kombu+memory:////")
transport = rpc.get_transport(conf)
server = rpc.get_server(transport, "t", "s", [Echo()])
server.start()
client = messaging.get_rpc_client(transport, messaging.Target(topic="t"), timeout=10)
print(client.call({}, "echo", value="echoed"), backend.get_backend_type().value)
server.stop()
server.wait()
transport.cleanup()
"""


def test_rpc_runs_on_the_threading_backend() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _ROUND_TRIP],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.split() == ["echoed", "threading"]
