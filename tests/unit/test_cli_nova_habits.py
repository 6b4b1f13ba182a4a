# SPDX-License-Identifier: Apache-2.0
"""``ringfleet instance list`` with Nova's filters and status, ``instance
action list|show`` and ``limits show``, against an embedded conductor."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from cliff.commandmanager import CommandManager
from sqlalchemy import update

from conductor.cli.instance_actions import InstanceActionList, InstanceActionShow
from conductor.cli.limits import LimitsShow
from conductor.db.models import InstanceModel
from tests.embedded_fleet import Embedded, embedded_fleet
from tests.harness import wait_for

#: The commands this change adds, registered here too: the entry points of
#: an installed older copy of the package do not name them yet.
_NEW = {
    "instance action list": InstanceActionList,
    "instance action show": InstanceActionShow,
    "limits show": LimitsShow,
}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Embedded]:
    original = CommandManager.load_commands

    def load_commands(self: CommandManager, namespace: str) -> None:
        original(self, namespace)
        for name, command in _NEW.items():
            if name not in dict(self):
                self.add_command(name, command)  # type: ignore[arg-type]

    patch = pytest.MonkeyPatch()
    patch.setattr(CommandManager, "load_commands", load_commands)
    try:
        with embedded_fleet(tmp_path_factory.mktemp("cli-nova"), "cli-nova") as embedded:
            yield embedded
    finally:
        patch.undo()


def _json(fleet: Embedded, *argv: str) -> Any:
    result = fleet.run(*argv, "-f", "json")
    assert result.code == 0, result.err
    return result.json()


def test_list_filters_status_and_the_action_history(fleet: Embedded) -> None:
    fleet.api.create_flavor({"name": "nh", "resource_class": "baremetal"})
    built = _json(fleet, "instance", "create", "--flavor", "nh", "--count", "3", "--name", "nh")
    uuids = [row["UUID"] for row in built]
    assert {row["Status"] for row in built} == {"BUILD"}
    # No node to build on: each fails (ERROR); then two are made active.
    wait_for(
        lambda: {fleet.api.show_instance(u)["vm_state"] for u in uuids} == {"error"},
        30,
        "the builds failed",
    )
    db = fleet.service.db
    assert db is not None
    with db.writing() as connection:
        connection.execute(
            update(InstanceModel)
            .where(InstanceModel.uuid.in_(uuids[:2]))
            .values(vm_state="active", task_state=None)
        )
    listed = _json(
        fleet,
        "instance",
        "list",
        "--name",
        "^nh-",
        "--status",
        "active",
        "--sort-key",
        "display_name",
        "--sort-dir",
        "desc",
    )
    assert [row["Name"] for row in listed] == ["nh-2", "nh-1"]
    bad = fleet.run("instance", "list", "--sort-key", "flavor")
    assert bad.code == 2  # argparse names the option and its choices
    shown = _json(fleet, "instance", "show", uuids[2])
    assert shown["status"] == "ERROR"

    # The create action, ended by the failed build (Nova's message "Error").
    [create] = _json(fleet, "instance", "action", "list", uuids[2])
    assert create["Action"] == "create" and create["Message"] == "Error"
    assert create["Finish Time"] is not None
    request_id = create["Request ID"]
    action = _json(fleet, "instance", "action", "show", uuids[2], request_id)
    assert action["action"] == "create"
    assert [(e["event"], e["result"]) for e in action["events"]] == [
        ("ringfleet_create_instance", "Error")
    ]
    missing = fleet.run("instance", "action", "show", uuids[2], "req-none")
    assert missing.code == 1 and "req-none" in missing.err


def test_limits_show_names_novas_limits(fleet: Embedded) -> None:
    assert fleet.run("quota", "set", "nh-project", "--instances", "4").code == 0
    rows = {
        row["Name"]: row["Value"]
        for row in _json(fleet, "limits", "show", "--project", "nh-project")
    }
    assert rows["maxTotalInstances"] == 4 and rows["totalInstancesUsed"] == 0
    assert rows["maxTotalCores"] == -1 and rows["totalRAMUsed"] == 0
    # Over RPC the operator has no project of its own: it names one.
    unnamed = fleet.run("limits", "show")
    assert unnamed.code == 1 and "project_id" in unnamed.err


@pytest.mark.parametrize("command", [*sorted(_NEW), "instance list"])
def test_the_help_ends_with_an_example(fleet: Embedded, command: str) -> None:
    result = fleet.run(*command.split(), "--help")
    assert result.code == 0
    # As typed under the program that runs it (here pytest's argv[0]).
    _usage, _, examples = result.out.partition("Examples:")
    assert f" {command} " in examples, result.out
