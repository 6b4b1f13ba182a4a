# SPDX-License-Identifier: Apache-2.0
"""The CLI of microversion 1.13: ``quota set --key-pairs``, ``instance list``'s
tag filters, ``instance rebuild --key-name/--no-key-name``, ``instance
action list``'s pages; and what the HTTP client sends for them."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from conductor.cli import http_client
from conductor.cli.instance import InstanceList, InstanceRebuild
from conductor.cli.instance_actions import InstanceActionList
from conductor.cli.quota import QuotaSet

UUID = "0b6a1c3e-5f2d-4c8b-9a7e-2d4f6b8c0e1a"
QUOTA = {"project_id": "p1", "quotas": {"key_pairs": {"limit": 5, "in_use": 1, "default": False}}}


class _Client:
    """Records each call with its keyword arguments; answers as a conductor would."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args, kwargs))
            if name == "set_quota":
                return QUOTA
            if name in ("list_instances", "list_instance_actions"):
                return []
            return {"uuid": UUID, "vm_state": "active", "task_state": "rebuilding"}

        return call


class _App:
    def __init__(self) -> None:
        self.client = _Client()

    def conductor_client(self) -> _Client:
        return self.client


def _run(command_class: Any, *argv: str) -> tuple[_Client, Any]:
    app = _App()
    command = command_class(app, argparse.Namespace())
    parser = command.get_parser("ringfleet x")
    answer = command.take_action(parser.parse_args(list(argv)))
    return app.client, answer


def test_quota_set_takes_key_pairs() -> None:
    client, (_titles, rows) = _run(QuotaSet, "--key-pairs", "5", "p1")
    assert client.calls == [("set_quota", ("p1", {"key_pairs": 5}), {})]
    assert rows == [("key_pairs", 5, 1, False)]


def test_instance_list_takes_novas_tag_filters() -> None:
    client, _answer = _run(
        InstanceList, "--tags", "a,b", "--tags-any", "c", "--not-tags", "d", "--not-tags-any", "e"
    )
    [(name, _args, kwargs)] = client.calls
    assert name == "list_instances"
    assert (kwargs["tags"], kwargs["tags_any"], kwargs["not_tags"], kwargs["not_tags_any"]) == (
        "a,b",
        "c",
        "d",
        "e",
    )


@pytest.mark.parametrize(
    ("argv", "key_name"), [(("--key-name", "laptop"), "laptop"), (("--no-key-name",), "")]
)
def test_instance_rebuild_takes_a_key_pair_or_none(argv: tuple[str, ...], key_name: str) -> None:
    client, _answer = _run(InstanceRebuild, *argv, UUID)
    [(name, args, kwargs)] = client.calls
    assert (name, args, kwargs) == ("rebuild_instance", (UUID,), {"key_name": key_name})
    with pytest.raises(SystemExit):  # one or the other
        _run(InstanceRebuild, "--key-name", "k", "--no-key-name", UUID)


def test_instance_action_list_takes_a_page() -> None:
    client, _answer = _run(
        InstanceActionList, "--limit", "2", "--marker", "req-1", "--changes-since", "2026", UUID
    )
    assert client.calls == [
        (
            "list_instance_actions",
            (UUID,),
            {"limit": 2, "marker": "req-1", "changes_since": "2026"},
        )
    ]


def test_the_http_client_sends_novas_names_and_null_for_no_key() -> None:
    sent: list[tuple[Any, ...]] = []
    client = http_client.HttpConductorAPI.__new__(http_client.HttpConductorAPI)

    def request(answer: Any, method: str, path: str, body: Any = None, **query: Any) -> Any:
        sent.append((method, path, body, query))
        return {"instanceActions": [], "instances": []}

    client._request = request  # type: ignore[method-assign]
    client.list_instance_actions(UUID, limit=2, changes_before="2026", marker=None)
    assert sent[-1][3] == {"limit": "2", "changes-before": "2026"}
    client.rebuild_instance(UUID, key_name="")
    assert sent[-1][2] == {"rebuild": {"key_name": None}}
    client.rebuild_instance(UUID, key_name="laptop")
    assert sent[-1][2] == {"rebuild": {"key_name": "laptop"}}
    assert http_client._PARAMETERS["not_tags_any"] == "not-tags-any"
