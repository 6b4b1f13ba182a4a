# SPDX-License-Identifier: Apache-2.0
"""The ``openstack`` CLI plugin: ``openstack ringfleet ...`` has ringfleet's commands.

(``tests/functional/test_cli_login.py`` runs one through a real Keystone.)
"""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from keystoneauth1.session import Session

from conductor.cli import osc_plugin
from conductor.cli.app import COMMAND_NAMESPACE
from conductor.cli.http_client import HttpConductorAPI
from conductor.cli.login import SERVICE_TYPE, LoginError

BIN = Path(sys.executable).parent


def _group(name: str) -> dict[str, str]:
    return {ep.name: ep.value for ep in metadata.entry_points(group=name)}


def test_the_openstack_cli_has_every_api_command_of_ringfleet() -> None:
    ringfleet = _group(COMMAND_NAMESPACE)
    del ringfleet["demo"]  # runs a whole fleet in-process: no API command
    # Reads Placement with [placement]'s credentials from the config file: RPC mode only.
    del ringfleet["placement check"]
    expected = {f"ringfleet_{name.replace(' ', '_')}": target for name, target in ringfleet.items()}
    assert _group("openstack.ringfleet.v1") == expected
    assert _group("openstack.cli.extension")["ringfleet"] == "conductor.cli.osc_plugin"


def _manager(endpoint: str | None) -> Any:
    calls: list[tuple[str, str | None, str]] = []

    def get_endpoint_for_service_type(
        service_type: str, region_name: str | None = None, interface: str = "public"
    ) -> str | None:
        calls.append((service_type, region_name, interface))
        return endpoint

    return SimpleNamespace(
        get_endpoint_for_service_type=get_endpoint_for_service_type,
        region_name="RegionTwo",
        interface="internal",
        session=Session(),
        calls=calls,
    )


def test_the_client_is_the_api_client_on_the_openstack_clis_session() -> None:
    manager = _manager("https://fleet.example.com:6486/")
    client = osc_plugin.make_client(manager)
    assert isinstance(client, HttpConductorAPI)
    assert client.endpoint == "https://fleet.example.com:6486"
    assert client.session is manager.session
    assert manager.calls == [(SERVICE_TYPE, "RegionTwo", "internal")]
    with pytest.raises(LoginError, match="no baremetal-fleet endpoint"):
        osc_plugin.make_client(_manager(None))


def test_openstack_help_shows_a_ringfleet_command() -> None:
    done = subprocess.run(
        [sys.executable, str(BIN / "openstack"), "help", "ringfleet", "node", "create"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
    )
    assert done.returncode == 0, done.stderr
    assert "usage: openstack ringfleet node create" in done.stdout
    assert "--resource-class CLASS" in done.stdout
