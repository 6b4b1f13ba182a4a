# SPDX-License-Identifier: Apache-2.0
"""A tenant used to Nova, with the ``ringfleet`` CLI only, logged in to Keystone, on a real Ironic.

What ``openstack keypair create``, ``server create --key-name --user-data
--property --tag``, ``server list --status --name --tags``, ``server
stop``, ``server set --property``, ``server event list`` and ``limits show
--absolute`` do for a Nova user, ringfleet's CLI does here: the member of a
Keystone project logs in with a password (``OS_*`` variables, as an openrc
file sets them; the project by name, its domain the default one), imports
a key pair, builds an instance on an Ironic node with it, base64 user data
(the CLI encodes the file), network data, metadata and a tag, finds it by
Nova's status, name and tag filters, stops it (Ironic powers the node
off: SHUTOFF), changes its metadata, reads its action history and the
project's limits, and deletes it (the node available again).  Real etcd,
RabbitMQ, PostgreSQL, Keystone and Ironic; the conductor, an agent and
ringfleet-api (gunicorn, keystonemiddleware) as processes; each CLI call
its own process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.functional.api_harness import ApiServer
from tests.functional.fleet_harness import Fleet, log_tails, start_processes
from tests.functional.keystone_harness import Identity, keystone_api, make_identity
from tests.harness import wait_for
from tests.harness.ironic import IronicHarness

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGqBqsYBZz2C0tS0NWZHbHJ4kiAzz4AEp/7r4d1f9Eqm me@laptop"
USER_DATA = "#cloud-config\npackages: [nginx]\n"
NETWORK_DATA = {
    "links": [{"id": "eth0", "type": "phy", "ethernet_mac_address": "52:54:00:ab:cd:ef"}],
    "networks": [
        {
            "id": "net0",
            "type": "ipv4",
            "link": "eth0",
            "ip_address": "10.1.0.9",
            "network_id": "lan",
        }
    ],
}


@pytest.fixture
def identity(keystone_url: str) -> Identity:
    return make_identity(keystone_url)


@pytest.fixture
def api(fleet_on_ironic: Fleet, transport_url: str, identity: Identity) -> Iterator[ApiServer]:
    with keystone_api(fleet_on_ironic.workdir, transport_url, identity, "api-tenant-cli") as server:
        yield server


@pytest.fixture
def login(identity: Identity, api: ApiServer) -> dict[str, str]:
    """An openrc's variables for a member of the project (by name, no domain given)."""
    name, password = f"rf-cli-member-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    user = identity.create("user", {"name": name, "password": password, "domain_id": "default"})
    identity.grant(identity.project_id, user, "member")
    project = identity.admin.get(f"{identity.url}/projects/{identity.project_id}").json()
    return {
        "OS_AUTH_URL": identity.url,
        "OS_USERNAME": name,
        "OS_PASSWORD": password,
        "OS_PROJECT_NAME": project["project"]["name"],
        # No catalog entry for this test's API: its address, as --os-endpoint.
        "OS_ENDPOINT": api.url,
    }


class Cli:
    """``ringfleet`` as the tenant runs it: the login in the environment."""

    def __init__(self, login: dict[str, str], workdir: Path) -> None:
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")} | login
        self.workdir = workdir

    def __call__(self, *argv: str, json_out: bool = True) -> Any:
        command = [sys.executable, str(Path(sys.executable).parent / "ringfleet"), *argv]
        done = subprocess.run(
            [*command, *(("-f", "json") if json_out else ())],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
            env=self.env,
            cwd=self.workdir,
        )
        assert done.returncode == 0, (argv, done.stderr)
        return json.loads(done.stdout) if json_out else done.stdout

    def settled(self, instance: str, vm_state: str) -> dict[str, Any]:
        seen: dict[str, Any] = {}

        def done() -> bool:
            seen.update(self("instance", "show", instance))
            assert seen["vm_state"] != "error", seen.get("fault")
            return bool(seen["vm_state"] == vm_state and seen["task_state"] is None)

        wait_for(done, 120, f"instance {vm_state} (last seen {seen})", step=0.5)
        return seen


def _built(cli: Cli, flavor: str) -> dict[str, Any]:
    """``keypair create`` and ``instance create`` with Nova's options; the instance, active."""
    (cli.workdir / "id.pub").write_text(KEY + "\n")
    (cli.workdir / "user-data").write_text(USER_DATA)
    (cli.workdir / "network.json").write_text(json.dumps(NETWORK_DATA))
    made = cli("keypair", "create", "--public-key", "id.pub", "laptop")
    assert made["name"] == "laptop" and made["public_key"] == KEY
    [built] = cli(
        "instance",
        "create",
        "--flavor",
        flavor,
        "--name",
        "web",
        "--key-name",
        "laptop",
        "--user-data",
        "user-data",
        "--network-data",
        "network.json",
        "--property",
        "role=frontend",
        "--tag",
        "prod",
        "--wait",
        "--wait-timeout",
        "120",
    )
    assert built["Status"] == "ACTIVE", built
    shown: dict[str, Any] = cli("instance", "show", built["UUID"])
    assert (shown["status"], shown["key_name"], shown["tags"]) == ("ACTIVE", "laptop", ["prod"])
    assert shown["metadata"] == {"role": "frontend"}
    assert shown["config_drive"]["user_data"] == USER_DATA
    assert shown["config_drive"]["meta_data"]["public_keys"] == {"laptop": KEY}
    assert shown["addresses"]["lan"][0]["addr"] == "10.1.0.9"
    return shown


def _found_and_stopped(cli: Cli, ironic: IronicHarness, node: str, instance: str) -> None:
    """Nova's list filters find it; a stop powers the Ironic node off: SHUTOFF."""
    listed = cli(
        "instance",
        "list",
        "--status",
        "ACTIVE",
        "--name",
        "^web$",
        "--tags",
        "prod",
        "--sort-key",
        "created_at",
    )
    assert [row["UUID"] for row in listed] == [instance]
    cli("instance", "stop", instance)
    assert cli.settled(instance, "stopped")["status"] == "SHUTOFF"
    assert ironic.node(node)["power_state"] == "power off"
    assert [row["UUID"] for row in cli("instance", "list", "--status", "SHUTOFF")] == [instance]
    assert cli("instance", "list", "--status", "ACTIVE") == []
    cli("instance", "set", instance, "--property", "team=web", json_out=False)
    assert cli("instance", "show", instance)["metadata"] == {"role": "frontend", "team": "web"}


def test_a_tenant_does_with_the_cli_what_a_nova_user_does(
    fleet_on_ironic: Fleet,
    ironic: IronicHarness,
    shard: str,
    api: ApiServer,
    identity: Identity,
    login: dict[str, str],
    tmp_path: Path,
) -> None:
    fleet = fleet_on_ironic
    [node] = ironic.enroll(1, shard=shard)
    start_processes(fleet, agents=("agent-1",))
    assert fleet.api.sync_ironic_nodes()["created"] == 1
    wait_for(lambda: fleet.api.show_node(node)["owner"] == "agent-1", 30, "the node owned")
    admin = requests.Session()
    admin.headers["X-Auth-Token"] = identity.tokens["admin"]
    flavor = f"cli-{shard}"
    made = admin.post(f"{api.url}/v1/flavors", json={"name": flavor, "resource_class": "baremetal"})
    assert made.status_code == 201, made.text
    cli = Cli(login, tmp_path)
    try:
        instance = _built(cli, flavor)["uuid"]
        assert ironic.node(node)["instance_uuid"] == instance
        _found_and_stopped(cli, ironic, node, instance)
        actions = cli("instance", "action", "list", instance)
        assert [row["Action"] for row in actions] == ["stop", "create"]
        assert all(row["Finish Time"] and row["Message"] is None for row in actions), actions
        limits = {row["Name"]: row["Value"] for row in cli("limits", "show")}
        assert (limits["totalInstancesUsed"], limits["maxServerMeta"]) == (1, 128)
        cli("instance", "delete", instance, json_out=False)
        cli.settled(instance, "deleted")
        ironic.wait_for(
            node,
            lambda n: n["provision_state"] == "available" and n["instance_uuid"] is None,
            60,
            what="available again",
        )
    except BaseException:
        print(log_tails(fleet))
        print(api.log()[-3000:])
        raise
