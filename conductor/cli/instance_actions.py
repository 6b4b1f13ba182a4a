# SPDX-License-Identifier: Apache-2.0
"""``ringfleet instance action list|show``: an instance's action history
(Nova's ``openstack server event list|show``)."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

from cliff.lister import Lister
from cliff.show import ShowOne

from conductor.cli.command import ConductorCommand

__all__ = ["InstanceActionList", "InstanceActionShow"]

_COLUMNS = (
    ("Request ID", "request_id"),
    ("Action", "action"),
    ("Start Time", "start_time"),
    ("Finish Time", "finish_time"),
    ("Message", "message"),
    ("User ID", "user_id"),
)
_FIELDS = (
    "request_id",
    "action",
    "instance_uuid",
    "project_id",
    "user_id",
    "start_time",
    "finish_time",
    "updated_at",
    "message",
    "events",
)


class InstanceActionList(ConductorCommand, Lister):
    """List an instance's actions, the newest first: each create, delete,
    reboot, stop, start and rebuild, with its request id."""

    examples = (
        ("an instance's actions", "5f0c7e39-5d11-4d3c-9c43-b3e6d7d1b0a1"),
        (
            "the 10 newest updated since a moment",
            "--limit 10 --changes-since 2026-11-29T20:00:00Z 5f0c7e39-5d11-4d3c-9c43-b3e6d7d1b0a1",
        ),
    )

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        parser.add_argument("instance", metavar="UUID", help="instance uuid")
        parser.add_argument("--limit", type=int, metavar="N", help="at most N actions")
        parser.add_argument(
            "--marker", metavar="REQUEST_ID", help="the actions after this one (a request id)"
        )
        parser.add_argument(
            "--changes-since", metavar="TIME", help="only actions updated since (ISO 8601)"
        )
        parser.add_argument(
            "--changes-before", metavar="TIME", help="only actions updated before (ISO 8601)"
        )
        return parser

    def take_action(
        self, parsed_args: argparse.Namespace
    ) -> tuple[tuple[str, ...], Iterable[tuple[Any, ...]]]:
        paged = {
            key: getattr(parsed_args, key)
            for key in ("limit", "marker", "changes_since", "changes_before")
            if getattr(parsed_args, key) is not None
        }
        actions = self.client.list_instance_actions(parsed_args.instance, **paged)
        titles = tuple(title for title, _ in _COLUMNS)
        return titles, [tuple(a.get(key) for _, key in _COLUMNS) for a in actions]


class InstanceActionShow(ConductorCommand, ShowOne):
    """Show one action of an instance, by its request id, with its events."""

    examples = (
        (
            "one action, by its request id",
            "5f0c7e39-5d11-4d3c-9c43-b3e6d7d1b0a1 req-0b7c2a4e-8d1f-4b6a-9e3c-2f5d7a9c1e0b",
        ),
    )

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = super().get_parser(prog_name)
        parser.add_argument("instance", metavar="UUID", help="instance uuid")
        parser.add_argument("request_id", metavar="REQUEST_ID", help="the action's request id")
        return parser

    def take_action(
        self, parsed_args: argparse.Namespace
    ) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        action = self.client.show_instance_action(parsed_args.instance, parsed_args.request_id)
        return _FIELDS, tuple(action.get(f) for f in _FIELDS)
