# SPDX-License-Identifier: Apache-2.0
"""``ringfleet keypair ...``, ``instance set|unset``, ``instance create --key-name``,
and the HTTP client's base64 user data and microversion."""

from __future__ import annotations

import argparse
import base64
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from conductor.cli import http_client
from conductor.cli.instance import InstanceCreate
from conductor.cli.instance_labels import InstanceSet, InstanceUnset
from conductor.cli.keypair import KeypairCreate, KeypairDelete, KeypairList
from conductor.common.exception import InvalidInput

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGqBqsYBZz2C0tS0NWZHbHJ4kiAzz4AEp/7r4d1f9Eqm me"


class _Client:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any) -> Any:
            self.calls.append((name, args))
            if name == "create_keypair":
                made = {"name": args[0], "type": "ssh", "fingerprint": "aa", "user_id": "u"}
                return {**made, "public_key": args[1] or "gen"} | (
                    {} if args[1] else {"private_key": "-----BEGIN RSA PRIVATE KEY-----\n"}
                )
            if name == "build_instances":
                return [{"uuid": "i1", "vm_state": "building"}]
            if name == "list_keypairs":
                return [{"name": "k", "type": "ssh", "fingerprint": "aa"}]
            return None

        return call


class _App:
    def __init__(self) -> None:
        self.client = _Client()

    def conductor_client(self) -> _Client:
        return self.client


def _run(command_class: Any, *argv: str) -> tuple[_App, Any]:
    app = _App()
    command = command_class(app, argparse.Namespace())
    parser = command.get_parser("ringfleet x")
    return app, command.take_action(parser.parse_args(list(argv)))


def test_keypair_create_imports_a_public_key_file(tmp_path: Path) -> None:
    public = tmp_path / "id.pub"
    public.write_text(KEY + "\n")
    app, (fields, _values) = _run(KeypairCreate, "--public-key", str(public), "mykey")
    assert app.client.calls == [("create_keypair", ("mykey", KEY))]
    assert "private_key" not in fields


def test_a_generated_private_key_is_written_0600_or_shown_once(tmp_path: Path) -> None:
    target = tmp_path / "mykey.pem"
    _app, (fields, _values) = _run(KeypairCreate, "--private-key", str(target), "mykey")
    assert target.read_text().startswith("-----BEGIN RSA PRIVATE KEY-----")
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600
    assert "private_key" not in fields
    _app, (fields, values) = _run(KeypairCreate, "other")
    assert dict(zip(fields, values, strict=True))["private_key"].startswith("-----BEGIN")
    with pytest.raises(InvalidInput):
        _run(KeypairCreate, "--public-key", str(tmp_path / "missing.pub"), "k")


def test_keypair_list_and_delete() -> None:
    _app, (titles, rows) = _run(KeypairList)
    assert titles == ("Name", "Type", "Fingerprint") and rows == [("k", "ssh", "aa")]
    app, _ = _run(KeypairDelete, "k")
    assert app.client.calls == [("delete_keypair", ("k",))]


def test_instance_create_takes_a_key_name_properties_and_tags() -> None:
    app, _ = _run(
        InstanceCreate,
        "--flavor",
        "small",
        "--key-name",
        "mykey",
        "--property",
        "role=db",
        "--tag",
        "a",
        "--tag",
        "b",
    )
    [(name, (request,))] = app.client.calls
    assert name == "build_instances"
    assert (request["key_name"], request["metadata"], request["tags"]) == (
        "mykey",
        {"role": "db"},
        ["a", "b"],
    )


def test_instance_set_and_unset_change_metadata_and_tags() -> None:
    app, _ = _run(InstanceSet, "i1", "--property", "a=1", "--tag", "t")
    assert app.client.calls == [
        ("set_instance_metadata", ("i1", {"a": "1"}, False)),
        ("add_instance_tag", ("i1", "t")),
    ]
    app, _ = _run(InstanceUnset, "i1", "--property", "a", "--tag", "t")
    assert app.client.calls == [
        ("delete_instance_metadata", ("i1", "a")),
        ("delete_instance_tag", ("i1", "t")),
    ]
    with pytest.raises(InvalidInput):
        _run(InstanceSet, "i1")


def test_the_http_client_sends_user_data_base64_from_1_7() -> None:
    assert http_client.API_VERSION_HEADER == {"OpenStack-API-Version": "baremetal-fleet 1.14"}
    text = "#cloud-config\n\u00e9t\u00e9\n"
    sent = http_client._encoded({"flavor": "f", "user_data": text})
    assert base64.b64decode(sent["user_data"]).decode() == text
    assert http_client._encoded({"flavor": "f"}) == {"flavor": "f"}
