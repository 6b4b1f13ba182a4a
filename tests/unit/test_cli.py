# SPDX-License-Identifier: Apache-2.0
"""The ``ringfleet`` CLI against an embedded conductor, in-process, no servers.

The conductor, its agents' memberships and the way commands are run are
:mod:`tests.embedded_fleet`'s: every command is driven through
``RingfleetApp().run([...])`` with ``--config-file``, as an operator would
type it.
"""

from __future__ import annotations

import csv
import datetime
import io
import json
import threading
import time
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import oslo_messaging as messaging
import pytest
import yaml

from conductor.cli import fleet as fleet_cli
from conductor.cli import node_files
from conductor.cli.app import RingfleetApp
from conductor.cli.command import describe_error
from conductor.cli.fleet import _status_row
from conductor.cli.ring import bar
from conductor.common.exception import InvalidInput
from conductor.db import nodes as node_db
from conductor.db.engine import Database
from conductor.db.models import InstanceModel, NodeModel, utcnow
from conductor.rpcapi import ConductorAPI, pages
from conductor.validation import node as node_validation
from tests.embedded_fleet import Embedded, embedded_fleet, without_fleet_lines

GROUP = "cli-test"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Embedded]:
    with embedded_fleet(tmp_path_factory.mktemp("cli"), GROUP) as embedded:
        yield embedded


def _nodes(fleet: Embedded, names: list[str], group: str = "") -> list[str]:
    out = fleet.api.import_nodes(
        [{"name": n, "resource_class": "baremetal", "group": group} for n in names]
    )
    return list(out["uuids"])


# -- app-level behaviour ------------------------------------------------------------


def test_usage_error_exits_2(fleet: Embedded, capsys: pytest.CaptureFixture[str]) -> None:
    result = fleet.run("node", "show")  # NODE missing
    assert result.code == 2
    # argparse writes usage errors to the process's stderr.
    assert "the following arguments are required: NODE" in capsys.readouterr().err


def test_bad_key_value_is_a_usage_error(
    fleet: Embedded, capsys: pytest.CaptureFixture[str]
) -> None:
    result = fleet.run("node", "create", "n", "--resource-class", "x", "--property", "novalue")
    assert result.code == 2
    assert "expected KEY=VALUE, got 'novalue'" in capsys.readouterr().err


# -- nodes --------------------------------------------------------------------------


def test_node_create_show_and_json(fleet: Embedded) -> None:
    result = fleet.run(
        "node",
        "create",
        "cli-node-1",
        "--resource-class",
        "baremetal",
        "--trait",
        "CUSTOM_GPU",
        "--property",
        "capabilities=boot_mode:uefi",
        "--group",
        "rack-a",
        "-f",
        "json",
    )
    assert result.code == 0, result.err
    created = result.json()
    assert created["name"] == "cli-node-1" and created["traits"] == ["CUSTOM_GPU"]
    assert created["properties"] == {"capabilities": "boot_mode:uefi"}

    shown = fleet.run("node", "show", "cli-node-1")  # table render
    assert shown.code == 0
    assert "| name " in shown.out and "cli-node-1" in shown.out and "+--" in shown.out

    value = fleet.run("node", "show", "cli-node-1", "-f", "value", "-c", "group")
    assert value.out.strip() == "rack-a"


def test_node_create_bad_input_names_the_field(fleet: Embedded) -> None:
    result = fleet.run("node", "create", "cli-bad", "--resource-class", "bad class!")
    assert result.code == 1
    lines = result.err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("ringfleet node create: error: node.resource_class: must match")
    assert "Traceback" not in result.err
    assert fleet.run("node", "show", "cli-bad").code == 1  # nothing created


def test_node_not_found_is_one_line(fleet: Embedded) -> None:
    result = fleet.run("node", "show", "no-such-node")
    assert result.code == 1
    assert result.err == "ringfleet node show: error: node 'no-such-node' not found\n"


def test_node_list_filters_and_paging(fleet: Embedded) -> None:
    uuids = _nodes(fleet, [f"list-{i}" for i in range(5)], group="listing")
    listed = fleet.run("node", "list", "--group", "listing", "-f", "json")
    assert listed.code == 0
    assert sorted(row["UUID"] for row in listed.json()) == sorted(uuids)
    limited = fleet.run("node", "list", "--group", "listing", "--limit", "2", "-f", "json")
    assert [r["UUID"] for r in limited.json()] == sorted(uuids)[:2]
    long = fleet.run("node", "list", "--group", "listing", "--long", "-f", "json")
    assert "Traits" in long.json()[0]
    assert fleet.run("node", "list", "--limit", "0").code == 1


def test_node_list_in_small_pages_prints_what_one_page_does(fleet: Embedded) -> None:
    uuids = sorted(_nodes(fleet, [f"paged-{i}" for i in range(7)], group="paged"))
    whole = fleet.run("node", "list", "--group", "paged", "-f", "json")
    for fmt in ("json", "value", "csv", "yaml", "table"):
        one = fleet.run("node", "list", "--group", "paged", "-f", fmt)
        paged = fleet.run("node", "list", "--group", "paged", "-f", fmt, "--page-size", "2")
        assert paged.code == 0 and paged.out == one.out, fmt
    # The JSON written item by item is the text cliff's formatter writes.
    assert whole.out == json.dumps(whole.json(), indent=2) + "\n"
    assert [row["UUID"] for row in whole.json()] == uuids
    flat = fleet.run("node", "list", "--group", "paged", "-f", "json", "--noindent", "-c", "UUID")
    assert flat.out == json.dumps([{"UUID": u} for u in uuids]) + "\n"
    empty = fleet.run("node", "list", "--group", "no-such-group", "-f", "json")
    assert empty.out == "[]\n"
    limited = fleet.run(
        "node", "list", "--group", "paged", "--page-size", "2", "--limit", "5", "-f", "value"
    )
    assert [line.split()[0] for line in limited.out.splitlines()] == uuids[:5]
    # A table needs every row first: with more than one page it says so.
    table = fleet.run("node", "list", "--group", "paged", "--page-size", "2")
    assert "the output starts when every page has arrived" in table.err
    assert fleet.run("node", "list", "--page-size", "0").code == 1


def test_node_set_properties_traits_and_maintenance(fleet: Embedded) -> None:
    _nodes(fleet, ["set-1"])
    result = fleet.run(
        "node",
        "set",
        "set-1",
        "--property",
        "rack=r1",
        "--property",
        "capabilities=boot_mode:bios",
        "--add-trait",
        "CUSTOM_A",
        "--resource-class",
        "gold",
        "--maintenance",
        "--reason",
        "disk swap",
    )
    assert result.code == 0, result.err
    node = fleet.run("node", "show", "set-1", "-f", "json").json()
    assert node["properties"] == {"rack": "r1", "capabilities": "boot_mode:bios"}
    assert node["traits"] == ["CUSTOM_A"] and node["resource_class"] == "gold"
    assert node["maintenance"] is True and node["maintenance_reason"] == "disk swap"

    result = fleet.run(
        "node",
        "set",
        "set-1",
        "--unset-property",
        "rack",
        "--remove-trait",
        "CUSTOM_A",
        "--no-maintenance",
    )
    assert result.code == 0, result.err
    node = fleet.run("node", "show", "set-1", "-f", "json").json()
    assert node["properties"] == {"capabilities": "boot_mode:bios"}
    assert node["traits"] == [] and node["maintenance"] is False


def test_node_set_refuses_bad_changes_whole(fleet: Embedded) -> None:
    _nodes(fleet, ["set-2"])
    before = fleet.run("node", "show", "set-2", "-f", "json").json()
    result = fleet.run("node", "set", "set-2", "--property", "rack=r2", "--add-trait", "lowercase")
    assert result.code == 1
    assert "changes.add_traits[0]: must match" in result.err
    assert fleet.run("node", "show", "set-2", "-f", "json").json() == before
    nothing = fleet.run("node", "set", "set-2")
    assert nothing.code == 1 and "nothing to change" in nothing.err


def test_node_owner_and_move(fleet: Embedded) -> None:
    [uuid] = _nodes(fleet, ["own-1"])
    owner = fleet.run("node", "owner", "own-1", "-f", "json").json()
    assert owner["node_uuid"] == uuid and owner["owner"] is None
    assert owner["ring_owner"] in {"agent-1", "agent-2"}

    moved = fleet.run("node", "move", "own-1", "agent-1", "-f", "json")
    assert moved.code == 0, moved.err
    assert moved.json()["owner"] == "agent-1"
    refused = fleet.run("node", "move", "own-1", "agent-2")
    assert refused.code == 1
    assert "the owner is alive" in refused.err
    not_live = fleet.run("node", "move", "own-1", "agent-9")
    assert not_live.code == 1 and "host: is not a live agent" in not_live.err


def test_instance_verbs_show_the_action_and_refusals_name_the_state(fleet: Embedded) -> None:
    """Stored at once (the embedded fleet has no agent process to carry them out)."""
    db = fleet.service.db
    assert db is not None
    [node] = _nodes(fleet, ["verb-1"])
    instance = _instance_on(db, node, "active", None, "active", 0)
    stopped = fleet.run("instance", "stop", instance, "-f", "json")
    assert stopped.code == 0, stopped.err
    assert [(i["State"], i["Task"]) for i in stopped.json()] == [("active", "powering-off")]
    refused = fleet.run("instance", "start", instance)
    assert refused.code == 1
    assert "instance is in state active (powering-off), cannot start" in refused.err
    again = fleet.run("instance", "reboot", "--hard", instance, "-f", "json")
    assert again.code == 1 and "cannot reboot" in again.err  # a stop is in flight
    with db.transaction() as session:  # leave the module's fleet as it was
        session.query(InstanceModel).filter(InstanceModel.uuid == instance).delete()
        session.query(NodeModel).filter(NodeModel.uuid == node).delete()


def test_instance_rebuild_sends_a_new_image_and_config_drive_parts(
    fleet: Embedded, tmp_path: Path
) -> None:
    """The options of ``instance create``; what is not given is kept."""
    db = fleet.service.db
    assert db is not None
    [node] = _nodes(fleet, ["rebuild-1"])
    instance = _instance_on(db, node, "active", None, "active", 0)
    with db.transaction() as session:
        session.query(InstanceModel).filter(InstanceModel.uuid == instance).update(
            {"config_drive": {"network_data": {"links": []}, "user_data": "old"}}
        )
    (tmp_path / "id.pub").write_text("ssh-ed25519 AAAAC3Nza ops@test\n")
    (tmp_path / "user-data").write_text("#cloud-config\n")
    bad = fleet.run(
        "instance", "rebuild", instance, "--image", "http://i.test/x", "--image-checksum", "md5:zz"
    )
    assert bad.code == 1 and "image.checksum" in bad.err
    assert fleet.api.show_instance(instance)["task_state"] is None  # nothing changed
    result = fleet.run(
        "instance",
        "rebuild",
        instance,
        "--image",
        "http://images.test/new.raw",
        "--image-checksum",
        "sha256:" + "c" * 64,
        "--image-disk-format",
        "raw",
        "--image-property",
        "hw_architecture=x86_64",
        "--image-property",
        "os_distro=debian",
        "--user-data",
        str(tmp_path / "user-data"),
        "--public-key",
        f"ops={tmp_path / 'id.pub'}",
        "--meta",
        "role=db",
        "-f",
        "json",
    )
    assert result.code == 0, result.err
    assert [(i["State"], i["Task"]) for i in result.json()] == [("active", "rebuilding")]
    shown = fleet.api.show_instance(instance)
    assert shown["image"] == {
        "source": "http://images.test/new.raw",
        "os_hash_algo": "sha256",
        "os_hash_value": "c" * 64,
        "disk_format": "raw",
        "properties": {"hw_architecture": "x86_64", "os_distro": "debian"},
    }
    assert shown["config_drive"] == {
        "user_data": "#cloud-config\n",
        "meta_data": {
            "public_keys": {"ops": "ssh-ed25519 AAAAC3Nza ops@test"},
            "meta": {"role": "db"},
            "uuid": instance,
            "name": f"vm-{instance[:8]}",
        },
        "network_data": {"links": []},
    }
    with db.transaction() as session:  # leave the module's fleet as it was
        session.query(InstanceModel).filter(InstanceModel.uuid == instance).delete()
        session.query(NodeModel).filter(NodeModel.uuid == node).delete()


def test_node_power_and_delete(fleet: Embedded) -> None:
    [node] = _nodes(fleet, ["forget-1"])
    bad = fleet.run("node", "power", "on", "--soft", "forget-1")
    assert bad.code == 1 and "--soft" in bad.err
    refused = fleet.run("node", "delete", "forget-1")
    assert refused.code == 1 and "not in maintenance" in refused.err
    assert fleet.run("node", "set", "--maintenance", "forget-1").code == 0
    deleted = fleet.run("node", "delete", "forget-1")
    assert deleted.code == 0, deleted.err
    gone = fleet.run("node", "show", node)
    assert gone.code == 1


# -- import -------------------------------------------------------------------------


def test_import_reports_every_bad_row_with_its_line_and_imports_nothing(
    fleet: Embedded, tmp_path: Path
) -> None:
    path = tmp_path / "nodes.csv"
    path.write_text(
        "name,resource_class,traits,maintenance,properties.rack\n"  # line 1
        "imp-ok-1,baremetal,CUSTOM_A;CUSTOM_B,false,r1\n"  # 2
        "imp-bad-2,,,,r1\n"  # 3: no resource class
        "imp-ok-3,baremetal,,,\n"  # 4
        '"imp-bad\n-4",baremetal,,,\n'  # 5-6: bad name over two lines
        "imp-ok-1,baremetal,,,\n"  # 7: duplicate of line 2
        "imp-bad-8,baremetal,lower,maybe,\n"  # 8: bad trait, bad maintenance
        "only,two\n"  # 9: wrong number of cells
    )
    before = fleet.api.list_nodes(limit=10000)
    result = fleet.run("node", "import", str(path))
    assert result.code == 1
    lines = result.err.splitlines()
    assert f"{path}: line 3: resource_class: is required" in lines
    assert any(line.startswith(f"{path}: line 5: name: must match") for line in lines)
    assert any(line.startswith(f"{path}: line 7: name: duplicate of line 2 name") for line in lines)
    assert any(line.startswith(f"{path}: line 8: traits[0]: must match") for line in lines)
    assert any(line.startswith(f"{path}: line 8: maintenance:") for line in lines)
    assert f"{path}: line 9: has 2 cells, the header has 5" in lines
    assert lines[-1] == (
        f"ringfleet node import: error: {path}: 5 of 7 rows are bad; nothing imported"
    )
    assert fleet.api.list_nodes(limit=10000) == before


def test_import_yaml_and_json_report_the_item_line(fleet: Embedded, tmp_path: Path) -> None:
    yaml_file = tmp_path / "nodes.yaml"
    yaml_file.write_text(
        "nodes:\n"
        "  - name: y-1\n"  # line 2
        "    resource_class: baremetal\n"
        "  - name: y-2\n"  # line 4
        "    resource_class: baremetal\n"
        "    power_state: sideways\n"
    )
    result = fleet.run("node", "import", str(yaml_file))
    assert result.code == 1
    assert f"{yaml_file}: line 4: power_state: must be one of" in result.err

    json_file = tmp_path / "nodes.txt"
    json_file.write_text(
        '[\n  {"name": "j-1", "resource_class": "baremetal"},\n'
        '  {"name": "j-2", "resource_class": "baremetal", "colour": "red"}\n]\n'
    )
    result = fleet.run("node", "import", "--input-format", "json", str(json_file))
    assert result.code == 1
    assert f"{json_file}: line 3: colour: unknown field" in result.err
    assert "deprecated" not in result.err

    json_file.write_text('[{"name": "j-1", "resource_class": "baremetal"},\n  {"name": ]')
    result = fleet.run("node", "import", "--input-format", "json", str(json_file))
    assert result.code == 1 and f"error: {json_file}: line 2: bad JSON" in result.err
    assert fleet.run("node", "show", "j-1").code == 1

    unknown = fleet.run("node", "import", str(tmp_path / "nodes.xml"))
    assert unknown.code == 1
    assert f"error: {tmp_path / 'nodes.xml'}: unknown extension" in unknown.err
    missing = fleet.run("node", "import", str(tmp_path / "none.csv"))
    assert missing.code == 1
    assert f"error: {tmp_path / 'none.csv'}: cannot read: " in missing.err


def test_import_format_is_the_deprecated_spelling_of_input_format(
    fleet: Embedded, tmp_path: Path
) -> None:
    """``-f/--format`` is the output format everywhere else; ``node import``
    reads its old ``--format`` (the file's) with a warning."""
    json_file = tmp_path / "nodes.txt"
    json_file.write_text('[{"name": "dep-1", "resource_class": "baremetal"}]\n')
    clash = fleet.run(
        "node", "import", "--format", "yaml", "--input-format", "json", str(json_file)
    )
    assert clash.code == 1
    assert "--format: contradicts --input-format json (got 'yaml')" in clash.err
    assert fleet.run("node", "show", "dep-1").code == 1

    result = fleet.run("node", "import", "--format", "json", str(json_file))
    assert result.code == 0, result.err
    assert result.err == (
        "ringfleet node import: warning: --format is deprecated, use --input-format\n"
    )
    assert result.out == f"Imported 1 nodes from {json_file} (json) in 1 batches\n"
    assert fleet.run("node", "show", "dep-1").code == 0


def test_import_yaml_and_json_succeed(fleet: Embedded, tmp_path: Path) -> None:
    yaml_file = tmp_path / "good.yml"
    yaml_file.write_text(
        yaml.safe_dump(
            [{"name": f"gy-{i}", "resource_class": "baremetal", "group": "gy"} for i in range(3)]
        )
    )
    result = fleet.run("node", "import", str(yaml_file))
    assert result.code == 0, result.err
    assert result.out == f"Imported 3 nodes from {yaml_file} (yaml) in 1 batches\n"
    json_file = tmp_path / "good.json"
    json_file.write_text(
        json.dumps({"nodes": [{"name": "gj-1", "resource_class": "baremetal"}], "x": 1})
    )
    result = fleet.run("node", "import", str(json_file))
    assert result.code == 0, result.err
    assert fleet.run("node", "show", "gj-1").code == 0


def test_import_10k_csv_rows_in_batches_with_progress(fleet: Embedded, tmp_path: Path) -> None:
    path = tmp_path / "big.csv"
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["name", "uuid", "resource_class", "group", "traits", "capabilities"])
    wanted = {}
    for i in range(10_000):
        uuid = str(uuidlib.UUID(int=i + 1))
        wanted[uuid] = f"big-{i:05d}"
        writer.writerow([f"big-{i:05d}", uuid, "baremetal", "big", "CUSTOM_X", "boot_mode:uefi"])
    path.write_text(buffer.getvalue())

    result = fleet.run("node", "import", str(path), "--batch-size", "2500", "--progress")
    assert result.code == 0, result.err
    assert result.out == f"Imported 10000 nodes from {path} (csv) in 4 batches\n"
    progress = result.err.splitlines()
    assert progress[0].startswith("read 10000 rows")
    assert progress[1:] == [f"checked {n}/10000 nodes" for n in (2500, 5000, 7500, 10000)] + [
        f"imported {n}/10000 nodes" for n in (2500, 5000, 7500, 10000)
    ]
    db = fleet.service.db
    assert db is not None
    stored = {n.uuid: n.name for n in node_db.iter_nodes(db, group="big")}
    assert stored == wanted

    # Again: every row now clashes with a stored node (name and uuid): the
    # first 20 problems with their lines, then how many more, before
    # anything is written.
    again = fleet.run("node", "import", str(path))
    assert again.code == 1
    lines = again.err.splitlines()
    assert lines[0] == f"{path}: line 2: name: exists already (got 'big-00000')"
    assert len(lines) == 22
    assert lines[20] == (
        f"{path}: ... and 19,980 more problems (--max-problems 0 prints every one)"
    )
    assert lines[21].endswith("10000 of 10000 rows are bad; nothing imported")
    every = fleet.run("node", "import", str(path), "--max-problems", "0")
    last_uuid = uuidlib.UUID(int=10000)
    assert f"{path}: line 10001: uuid: exists already (got '{last_uuid}')" in every.err
    assert len(every.err.splitlines()) == 20_001
    assert fleet.run("node", "import", str(path), "--max-problems", "-1").code == 1


def test_import_refuses_the_whole_file_when_some_rows_are_stored_already(
    fleet: Embedded, tmp_path: Path
) -> None:
    fleet.run("node", "create", "--resource-class", "baremetal", "stored-1")
    fleet.run("node", "create", "--resource-class", "baremetal", "stored-2")
    path = tmp_path / "mixed.csv"
    path.write_text(
        "name,resource_class\n"
        "fresh-1,baremetal\n"
        "stored-1,baremetal\n"  # line 3
        "fresh-2,baremetal\n"
        "stored-2,baremetal\n"  # line 5
    )
    # Batches of one: the clashes are in other calls than the fresh rows.
    result = fleet.run("node", "import", str(path), "--batch-size", "1")
    assert result.code == 1
    assert f"{path}: line 3: name: exists already (got 'stored-1')" in result.err
    assert f"{path}: line 5: name: exists already (got 'stored-2')" in result.err
    assert "2 of 4 rows are bad; nothing imported" in result.err
    listed = fleet.run("node", "list", "-f", "json").json()
    assert not {"fresh-1", "fresh-2"} & {n["Name"] for n in listed}


def test_import_sends_the_file_once_and_validates_each_row_once(
    fleet: Embedded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file that fits one call: one import_nodes call (no dry run first),
    and the conductor's row check run once per row (the CLI and the conductor
    share this process: a check anywhere counts)."""
    calls: list[dict[str, Any]] = []
    checked: list[str] = []
    send = ConductorAPI.import_nodes
    check = node_validation._check_node

    def spy_send(api: ConductorAPI, nodes: list[dict[str, Any]], **kwargs: Any) -> Any:
        calls.append({"rows": len(nodes), **kwargs})
        return send(api, nodes, **kwargs)

    def spy_check(spec: object, path: str, errors: Any) -> Any:
        checked.append(path)
        return check(spec, path, errors)

    monkeypatch.setattr(ConductorAPI, "import_nodes", spy_send)
    monkeypatch.setattr(node_validation, "_check_node", spy_check)
    path = tmp_path / "once.csv"
    path.write_text("name,resource_class\n" + "".join(f"once-{i},baremetal\n" for i in range(300)))
    result = fleet.run("node", "import", str(path), "--progress")
    assert result.code == 0, result.err
    assert result.out == f"Imported 300 nodes from {path} (csv) in 1 batches\n"
    assert result.err.splitlines() == [
        f"read 300 rows from {path}",
        "importing 300 nodes",
        "imported 300/300 nodes",
    ]
    assert calls == [{"rows": 300, "every_clash": True}]
    assert len(checked) == 300 and len(set(checked)) == 300

    # Again: one call still, every row stored already named with its line.
    calls.clear()
    again = fleet.run("node", "import", str(path), "--max-problems", "0")
    assert again.code == 1
    lines = again.err.splitlines()
    assert lines[0] == f"{path}: line 2: name: exists already (got 'once-0')"
    assert len(lines) == 301
    assert lines[-1].endswith(f"{path}: 300 of 300 rows are bad; nothing imported")
    assert calls == [{"rows": 300, "every_clash": True}]

    # A bad row among new ones: named with its line and field, nothing written.
    calls.clear()
    path.write_text("name,resource_class\nonce-new,baremetal\nonce-bad,\n")
    bad = fleet.run("node", "import", str(path))
    assert bad.code == 1
    assert bad.err.splitlines() == [
        f"{path}: line 3: resource_class: is required",
        f"ringfleet node import: error: {path}: 1 of 2 rows are bad; nothing imported",
    ]
    assert calls == [{"rows": 2, "every_clash": True}]
    assert fleet.run("node", "show", "once-new").code == 1


def test_import_from_a_conductor_before_every_clash_names_the_first_clash(
    fleet: Embedded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pinned below API 1.18 the import is sent without every_clash: the
    conductor's DuplicateNode names one row, and nothing is written."""
    fleet.run("node", "create", "--resource-class", "baremetal", "pinned-1")
    monkeypatch.setattr(ConductorAPI, "can_send_version", lambda _api, v: v != "1.18")
    path = tmp_path / "pinned.csv"
    path.write_text("name,resource_class\npinned-0,baremetal\npinned-1,baremetal\n")
    result = fleet.run("node", "import", str(path))
    assert result.code == 1
    assert f"{path}: line 3: " in result.err and "pinned-1" in result.err
    assert result.err.splitlines()[-1].endswith("1 of 2 rows are bad; nothing imported")
    assert fleet.run("node", "show", "pinned-0").code == 1


def test_no_progress_without_a_terminal(fleet: Embedded, tmp_path: Path) -> None:
    path = tmp_path / "quiet.csv"
    path.write_text("name,resource_class\nquiet-1,baremetal\n")
    result = fleet.run("node", "import", str(path))
    assert result.code == 0 and result.err == ""


# -- flavors and instances ----------------------------------------------------------


def test_flavor_commands(fleet: Embedded) -> None:
    created = fleet.run(
        "flavor",
        "create",
        "cli-flavor",
        "--resource-class",
        "baremetal",
        "--required-trait",
        "CUSTOM_X",
        "--extra-spec",
        "capabilities:boot_mode=s== uefi",
        "-f",
        "json",
    )
    assert created.code == 0, created.err
    assert created.json()["extra_specs"] == {"capabilities:boot_mode": "s== uefi"}
    listed = fleet.run("flavor", "list", "-f", "json").json()
    assert "cli-flavor" in [f["Name"] for f in listed]
    table = fleet.run("flavor", "list")
    assert "| Name" in table.out and "cli-flavor" in table.out
    shown = fleet.run("flavor", "show", "cli-flavor", "-f", "value", "-c", "resource_class")
    assert shown.out.strip() == "baremetal"
    bad = fleet.run(
        "flavor",
        "create",
        "bad-flavor",
        "--resource-class",
        "x",
        "--extra-spec",
        "capabilities:boot_mode=s==uefi",
    )
    assert bad.code == 1 and "extra_specs.capabilities:boot_mode" in bad.err
    dup = fleet.run("flavor", "create", "cli-flavor", "--resource-class", "baremetal")
    assert dup.code == 1 and "exists already" in dup.err
    assert fleet.run("flavor", "delete", "cli-flavor").code == 0
    gone = fleet.run("flavor", "show", "cli-flavor")
    assert gone.code == 1 and "flavor 'cli-flavor' not found" in gone.err


def test_quota_commands(fleet: Embedded) -> None:
    """The operator (RPC) sets, shows, lists and drops a project's quota."""
    argv = ("quota", "set", "cli-project", "--instances", "5")
    set_ = fleet.run(*argv, "--resource-class", "baremetal=2", "-f", "json")
    assert set_.code == 0, set_.err
    rows = {r["Resource"]: r for r in set_.json()}
    assert rows["instances"] == {"Resource": "instances", "Limit": 5, "In use": 0, "Default": False}
    assert rows["resource_class:baremetal"]["Limit"] == 2
    shown = fleet.run("quota", "show", "cli-project", "-f", "json").json()
    assert {r["Resource"]: r["Limit"] for r in shown}["instances"] == 5
    listed = fleet.run("quota", "list", "-f", "json").json()
    assert {"Project": "cli-project", "Resource": "instances", "Limit": 5} in listed
    bad = fleet.run("quota", "set", "cli-project", "--resource-class", "baremetal=many")
    assert bad.code == 1 and "--resource-class baremetal" in bad.err, bad.err
    nothing = fleet.run("quota", "set", "cli-project")
    assert nothing.code == 1 and "--instances" in nothing.err
    assert fleet.run("quota", "delete", "cli-project").code == 0
    assert fleet.run("quota", "list", "-f", "json").json() == []


def test_instance_create_wait_error_exits_1(fleet: Embedded) -> None:
    # No node of this class exists: the build ends in ERROR (no valid node).
    assert (
        fleet.run("flavor", "create", "nothing-fits", "--resource-class", "unobtainium").code == 0
    )
    result = fleet.run(
        "instance",
        "create",
        "--flavor",
        "nothing-fits",
        "--count",
        "2",
        "--wait",
        "--poll-interval",
        "0.05",
        "-f",
        "json",
    )
    assert result.code == 1
    rows = result.json()
    assert len(rows) == 2 and {r["State"] for r in rows} == {"error"}
    assert "0 active, 2 error, 0 building, of 2" in result.err

    uuid = rows[0]["UUID"]
    shown = fleet.run("instance", "show", uuid, "-f", "json").json()
    assert shown["vm_state"] == "error" and shown["fault"]
    listed = fleet.run("instance", "list", "--state", "error", "-f", "json").json()
    assert uuid in [r["UUID"] for r in listed]
    assert fleet.run("instance", "delete", uuid).code == 0
    assert fleet.run("instance", "show", uuid, "-f", "json").json()["vm_state"] in {
        "deleting",
        "deleted",
    }


def test_instance_create_wait_active(fleet: Embedded) -> None:
    """A build that an agent completes: ACTIVE, exit 0."""
    db = fleet.service.db
    assert db is not None
    [node] = _nodes(fleet, ["inst-node"], group="builds")
    assert fleet.api.claim_nodes("agent-1", [node]).granted
    assert fleet.run("flavor", "create", "builds", "--resource-class", "baremetal").code == 0

    # No agent process serves the build: play the agent's part, reporting
    # success for whatever lands on our node.
    stop = threading.Event()

    def agent() -> None:
        while not stop.is_set():
            with db.reading() as session:
                row = session.get(NodeModel, db_id(node))
                instance = row.instance_uuid if row else None
                epoch = row.owner_epoch if row else 0
            if instance:
                fleet.api.report_build_result(
                    "agent-1", instance_uuid=instance, node_uuid=node, epoch=epoch, success=True
                )
                return
            time.sleep(0.05)

    def db_id(uuid: str) -> int:
        with db.reading() as session:
            return int(session.query(NodeModel.id).filter(NodeModel.uuid == uuid).scalar())

    thread = threading.Thread(target=agent, daemon=True)
    thread.start()
    try:
        result = fleet.run(
            "instance",
            "create",
            "--flavor",
            "builds",
            "--group",
            "builds",
            "--wait",
            "--poll-interval",
            "0.05",
            "--wait-timeout",
            "60",
            "-f",
            "json",
        )
    finally:
        stop.set()
        thread.join(10)
    assert result.code == 0, result.err
    [row] = result.json()
    assert row["State"] == "active" and row["Node"] == node and row["Host"] == "agent-1"
    with db.reading() as session:
        assert session.query(InstanceModel).filter(InstanceModel.uuid == row["UUID"]).count() == 1


def test_instance_bad_input(fleet: Embedded, capsys: pytest.CaptureFixture[str]) -> None:
    missing = fleet.run("instance", "create", "--flavor", "no-such-flavor")
    assert missing.code == 1 and "flavor 'no-such-flavor' not found" in missing.err
    count = fleet.run("instance", "create", "--flavor", "builds", "--count", "0")
    assert count.code == 1 and "count:" in count.err
    bad_uuid = fleet.run("instance", "show", "not-a-uuid")
    assert bad_uuid.code == 1 and "instance: must be a UUID" in bad_uuid.err
    capsys.readouterr()
    bad_hint = fleet.run("instance", "create", "--flavor", "builds", "--hint", "rack")
    # argparse's usage error, printed to the process's stderr
    assert bad_hint.code == 2 and "expected NAME=VALUE, got 'rack'" in capsys.readouterr().err


def test_instance_create_sends_scheduler_hints(fleet: Embedded) -> None:
    fleet.api.create_flavor({"name": "hinted", "resource_class": "baremetal"})
    result = fleet.run(
        "instance",
        "create",
        "--flavor",
        "hinted",
        "--hint",
        "rack=r1",
        "--hint",
        'query=["=", "$host", "a=b"]',
        "-f",
        "json",
    )
    assert result.code == 0, result.err
    [row] = result.json()
    shown = fleet.api.show_instance(row["UUID"])
    assert shown["scheduler_hints"] == {"rack": "r1", "query": '["=", "$host", "a=b"]'}


# -- fleet, ring, agents ------------------------------------------------------------


def test_fleet_status_ring_show_and_check(fleet: Embedded) -> None:
    uuids = _nodes(fleet, [f"ring-{i}" for i in range(6)], group="rack-b")
    assert fleet.api.claim_nodes("agent-1", uuids[:4]).granted
    assert fleet.api.claim_nodes("agent-2", uuids[4:]).granted

    status = fleet.run("fleet", "status", "-f", "json")
    assert status.code == 0, status.err
    rows = {row["Host"]: row for row in status.json()}
    assert rows["agent-1"]["State"] == "up" and rows["agent-1"]["Groups"] == "(all)"
    assert rows["agent-2"]["Groups"] == "rack-b" and rows["agent-2"]["Ring version"] == 1
    assert rows["agent-1"]["Owned"] >= 4 and rows["agent-2"]["Owned"] >= 2
    assert rows["agent-old"]["State"].startswith("excluded: ring version 2")
    table = fleet.run("fleet", "status")
    assert "| Host" in table.out and "In-flight" in table.out

    ring = fleet.run("ring", "show", "--group", "rack-b", "-f", "json")
    assert ring.code == 0, ring.err
    by_host = {r["Host"]: r for r in ring.json()}
    assert by_host["agent-1"]["Nodes"] == 4 and by_host["agent-2"]["Nodes"] == 2
    assert by_host["agent-1"]["Expected"] == 3.0 and by_host["agent-1"]["Deviation"] == "+33%"
    assert "Nodes bar" not in ring.json()[0]
    drawn = fleet.run("ring", "show", "--group", "rack-b")
    assert "#" * 40 in drawn.out and "#" * 20 + " " in drawn.out

    _nodes(fleet, ["ring-free"], group="rack-b")  # an unowned schedulable node
    check = fleet.run("fleet", "check")
    assert check.code == 1
    assert "EXCLUDED: agent agent-old is excluded from the ring: ring version 2" in check.out
    # Every unowned schedulable node is an orphan.
    assert "ORPHANED:" in check.out and "schedulable nodes have no owner" in check.out


def _healthy(fleet: Embedded, monkeypatch: pytest.MonkeyPatch) -> Database:
    """Give every node an owner, and hide the excluded peer: a healthy fleet."""
    db = fleet.service.db
    fleet_view = fleet.service.fleet
    assert db is not None and fleet_view is not None
    unowned = [n.uuid for n in node_db.iter_nodes(db) if n.owner is None]
    for start in range(0, len(unowned), 5000):
        fleet.api.claim_nodes("agent-1", unowned[start : start + 5000])
    view = fleet_view.view()
    assert view is not None
    healthy = type(view)(members=view.members, excluded={}, ring_version=view.ring_version)
    monkeypatch.setattr(fleet_view, "view", lambda: healthy)
    return db


def test_fleet_check_ok_and_orphans(fleet: Embedded, monkeypatch: pytest.MonkeyPatch) -> None:
    db = _healthy(fleet, monkeypatch)
    result = fleet.run("fleet", "check")
    assert result.code == 0, result.out
    assert result.out.startswith("OK")
    assert "no build or delete unchanged for over 600 s" in result.out
    ok = fleet.run("fleet", "check", "-f", "json")
    assert ok.code == 0 and ok.json()["ok"] is True and ok.json()["problems"] == []

    # A node whose owner is not a live agent, and a broken allocation.
    [orphan] = _nodes(fleet, ["orphan-1"])
    [broken] = _nodes(fleet, ["broken-1"])
    with db.transaction() as session:
        session.query(NodeModel).filter(NodeModel.uuid == orphan).update(
            {"owner": "agent-dead", "owner_epoch": 3}
        )
        session.query(NodeModel).filter(NodeModel.uuid == broken).update(
            {"owner": "agent-1", "owner_epoch": 1, "instance_uuid": str(uuidlib.uuid4())}
        )
    result = fleet.run("fleet", "check")
    assert result.code == 1
    assert (
        "ORPHANED: 1 nodes (0 pinned) owned by agent-dead, which is not a live agent" in result.out
    )
    assert f"DOUBLE-CLAIMED: node {broken}" in result.out and "does not exist" in result.out
    as_json = fleet.run("fleet", "check", "-f", "json")
    assert as_json.code == 1
    report = as_json.json()
    assert report["ok"] is False
    assert {p["kind"] for p in report["problems"]} == {"orphaned", "double-claimed"}
    as_yaml = fleet.run("fleet", "check", "-f", "yaml")
    assert as_yaml.code == 1 and yaml.safe_load(as_yaml.out) == report
    with db.transaction() as session:
        session.query(NodeModel).filter(NodeModel.uuid.in_([orphan, broken])).delete()


def _instance_on(
    db: Database, node: str, vm_state: str, task_state: str | None, provision: str, age: float
) -> str:
    """An instance of ``agent-1`` on ``node``, its record unchanged for ``age`` s
    (carried by the embedded conductor, as a record it stored)."""
    instance = str(uuidlib.uuid4())
    with db.transaction() as session:
        session.add(
            InstanceModel(
                uuid=instance,
                name=f"vm-{instance[:8]}",
                flavor="f",
                vm_state=vm_state,
                task_state=task_state,
                node_uuid=node,
                host="agent-1",
                conductor="cond-1",
                updated_at=utcnow() - datetime.timedelta(seconds=age),
            )
        )
        session.query(NodeModel).filter(NodeModel.uuid == node).update(
            {"instance_uuid": instance, "provision_state": provision}
        )
    return instance


def test_fleet_check_reports_stuck_work_and_node_state_mismatches(
    fleet: Embedded, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Unchanged past [conductor] stuck_after (600 s) but not build_timeout
    # (1800 s): the sweeper leaves them be while the check looks.
    db = _healthy(fleet, monkeypatch)
    nodes = _nodes(fleet, ["stuck-b", "stuck-d", "fresh-b", "in-error"])
    fleet.api.claim_nodes("agent-1", nodes)
    build = _instance_on(db, nodes[0], "building", "spawning", "deploying", age=900)
    delete = _instance_on(db, nodes[1], "deleting", "deleting", "active", age=650)
    _instance_on(db, nodes[2], "building", "spawning", "deploying", age=30)
    active = _instance_on(db, nodes[3], "active", None, "error", age=5)
    try:
        result = fleet.run("fleet", "check")
        assert result.code == 1, result.out
        lines = result.out.splitlines()
        assert len(lines) == 3, result.out
        assert lines[0].startswith(
            f"STUCK-BUILD: instance {build} building/spawning on node {nodes[0]} "
            "(owner agent-1): unchanged for 90"
        )
        assert lines[1].startswith(
            f"STUCK-DELETE: instance {delete} deleting/deleting on node {nodes[1]} "
            "(owner agent-1): unchanged for 65"
        )
        assert lines[2] == (
            f"STATE-MISMATCH: node {nodes[3]} (owner agent-1): "
            f"instance {active} is active, its node is error"
        )
        as_json = fleet.run("fleet", "check", "-f", "json")
        assert as_json.code == 1 and as_json.json()["stuck_after"] == 600.0
    finally:
        with db.transaction() as session:
            session.query(InstanceModel).filter(InstanceModel.node_uuid.in_(nodes)).delete()
            session.query(NodeModel).filter(NodeModel.uuid.in_(nodes)).delete()


def test_fleet_check_ok_line_names_what_an_older_conductor_does_not_check() -> None:
    report = {"conductor": "cond-1", "ring_version": 1, "ok": True, "problems": []}
    assert fleet_cli._ok_line(report) == (
        "OK: no problems seen by conductor cond-1 (ring version 1; "
        "stuck builds and deletes not checked by this conductor's version)\n"
    )


def test_agent_drain_of_unknown_agent(fleet: Embedded) -> None:
    result = fleet.run("agent", "drain", "agent-9")
    assert result.code == 1
    assert result.err == "ringfleet agent drain: error: host: is not a live agent (got 'agent-9')\n"


def test_conductor_unreachable_is_one_line(tmp_path: Path) -> None:
    config = tmp_path / "other.conf"
    # Same in-memory broker, another exchange: nobody consumes the topic.
    config.write_text("[DEFAULT]\ntransport_url = kombu+memory:////\ncontrol_exchange = nobody\n")
    app = RingfleetApp()
    app.stdout, app.stderr = io.StringIO(), io.StringIO()
    code = app.run(["--config-file", str(config), "--rpc-timeout", "0.5", "fleet", "status"])
    assert code == 1
    assert without_fleet_lines(app.stderr.getvalue()).startswith(
        "ringfleet fleet status: error: no conductor answered"
    )


# -- pure helpers -------------------------------------------------------------------


def test_bar_is_proportional_and_visible() -> None:
    assert bar(0, 10) == "" and bar(5, 0) == ""
    assert bar(10, 10, width=20) == "#" * 20
    assert bar(5, 10, width=20) == "#" * 10
    assert bar(1, 1000, width=20) == "#"


def test_csv_reader_maps_columns() -> None:
    text = "name,traits,maintenance,properties.cpus,capabilities\nn1,A B;C,yes,8,k:v\n"
    rows, errors = node_files.read_nodes(text, "csv")
    assert errors == []
    assert rows == [
        (
            2,
            {
                "name": "n1",
                "traits": ["A", "B", "C"],
                "maintenance": True,
                "properties": {"cpus": "8", "capabilities": "k:v"},
            },
        )
    ]
    with pytest.raises(InvalidInput) as err:
        node_files.read_nodes("name,colour\nx,red\n", "csv")
    assert err.value.fields == ["line 1"]


def test_pages_follows_markers_and_stops_at_the_limit() -> None:
    items = [{"uuid": f"u{i:02d}"} for i in range(25)]
    calls: list[tuple[int, str | None]] = []

    def fetch(limit: int, marker: str | None) -> list[dict[str, Any]]:
        calls.append((limit, marker))
        start = 0 if marker is None else int(marker[1:]) + 1
        return items[start : start + limit]

    assert list(pages(fetch, page_size=10)) == items
    assert calls == [(10, None), (10, "u09"), (10, "u19")]
    calls.clear()
    assert list(pages(fetch, limit=12, page_size=10)) == items[:12]
    assert calls == [(10, None), (2, "u09")]


def test_a_timeout_says_how_long_it_waited_and_for_which_topic() -> None:
    assert describe_error(messaging.MessagingTimeout("Timed out waiting for a reply"), 45.0) == [
        "no conductor answered within 45 s on topic ringfleet-conductor: is a "
        "ringfleet-conductor running and connected to the same [DEFAULT] transport_url?"
    ]


def test_instance_create_sends_the_image_and_config_drive(
    fleet: Embedded, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet.api.create_flavor({"name": "imaging", "resource_class": "baremetal"})
    (tmp_path / "id.pub").write_text("ssh-ed25519 AAAAC3Nza ops@test\n")
    (tmp_path / "user-data").write_text("#cloud-config\npassword: hunter2\n")
    (tmp_path / "network.json").write_text('{"links": [{"id": "eth0"}]}')
    image = "http://images.test/u.qcow2"
    result = fleet.run(
        "instance",
        "create",
        "--flavor",
        "imaging",
        "--name",
        "web",
        "--image",
        image,
        "--image-checksum",
        "SHA256:" + "A" * 64,
        "--image-disk-format",
        "qcow2",
        "--key",
        f"ops={tmp_path / 'id.pub'}",
        "--user-data",
        str(tmp_path / "user-data"),
        "--network-data",
        str(tmp_path / "network.json"),
        "--meta",
        "role=web",
        "-f",
        "json",
    )
    assert result.code == 0, result.err
    [row] = result.json()
    shown = fleet.api.show_instance(row["UUID"])
    assert shown["image"] == {
        "source": image,
        "os_hash_algo": "sha256",
        "os_hash_value": "a" * 64,
        "disk_format": "qcow2",
    }
    assert shown["config_drive"] == {
        "user_data": "#cloud-config\npassword: hunter2\n",
        "meta_data": {
            "public_keys": {"ops": "ssh-ed25519 AAAAC3Nza ops@test"},
            "meta": {"role": "web"},
            "uuid": row["UUID"],
            "name": "web",
        },
        "network_data": {"links": [{"id": "eth0"}]},
    }
    # A bad checksum is the conductor's refusal, naming the field.
    bad = fleet.run(
        "instance", "create", "--flavor", "imaging", "--image", image, "--image-checksum", "md5:xyz"
    )
    assert bad.code == 1 and "image.checksum" in bad.err
    capsys.readouterr()
    missing = fleet.run("instance", "create", "--flavor", "imaging", "--user-data", "/no/such")
    assert missing.code == 2 and "cannot read /no/such" in capsys.readouterr().err


def test_flavor_create_with_a_default_image(fleet: Embedded) -> None:
    result = fleet.run(
        "flavor",
        "create",
        "imaged",
        "--resource-class",
        "baremetal",
        "--default-image",
        "https://images.test/d.raw",
        "--default-image-checksum",
        "b" * 32,
        "-f",
        "json",
    )
    assert result.code == 0, result.err
    assert result.json()["default_image"] == {
        "source": "https://images.test/d.raw",
        "checksum": "b" * 32,
    }


def test_fleet_status_says_why_an_agent_up_does_not_serve() -> None:
    row = {"host": "a3", "state": "up", "owned": 4, "pinned": 1, "groups": []}
    assert _status_row(row)[1] == "up"
    assert _status_row({**row, "serving": True})[1] == "up"
    assert _status_row({**row, "serving": False})[1] == (
        "up, not serving: no call reaches it through the broker"
    )
    assert _status_row({**row, "backend_problem": None})[1] == "up"
    assert _status_row({**row, "backend_problem": "Ironic answered 503: no conductor"})[1] == (
        "up, back end unreachable: Ironic answered 503: no conductor"
    )
