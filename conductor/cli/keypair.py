# SPDX-License-Identifier: Apache-2.0
"""``ringfleet keypair create|list|show|delete``: the caller's key pairs (Nova's os-keypairs).

A key pair is its user's: ``instance create --key-name NAME`` puts its
public key into the instance's config drive.  ``--user`` reaches another
user's (admins), ``keypair list --limit --marker`` a page of them.  See ``docs/http-api.rst``,
"Key pairs".
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from typing import Any

from cliff.command import Command
from cliff.lister import Lister
from cliff.show import ShowOne

from conductor.cli.command import ConductorCommand
from conductor.common.exception import FieldError, InvalidInput

__all__ = ["KeypairCreate", "KeypairDelete", "KeypairList", "KeypairShow"]

_FIELDS = ("name", "type", "fingerprint", "user_id", "created_at", "public_key")


def _named(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("name", metavar="NAME", help="the key pair's name")
    return _user(parser)


def _user(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument(
        "--user",
        metavar="USER_ID",
        help="another user's key pairs, by Keystone user id (admins; as openstack keypair --user)",
    )
    return parser


def _owner(parsed_args: argparse.Namespace) -> dict[str, Any]:
    """The client call's ``user_id`` keyword: only when ``--user`` is given
    (a call without it reaches an older conductor or API too)."""
    return {} if parsed_args.user is None else {"user_id": parsed_args.user}


class KeypairCreate(ConductorCommand, ShowOne):
    """Import a public key as a key pair, or have one generated."""

    examples = (
        ("import your public key as mykey", "--public-key ~/.ssh/id_ed25519.pub mykey"),
        (
            "have one generated, its private half written to a file (else printed once)",
            "--private-key mykey.pem mykey",
        ),
    )

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = _named(super().get_parser(prog_name))
        parser.add_argument(
            "--public-key", metavar="FILE", help="an OpenSSH public key file to import"
        )
        parser.add_argument(
            "--private-key",
            metavar="FILE",
            help="where to write the generated key's private half (mode 0600)",
        )
        return parser

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[tuple[str, ...], Any]:
        public_key = None
        if parsed_args.public_key is not None:
            if parsed_args.private_key is not None:
                raise InvalidInput(
                    [FieldError("--private-key", "only for a generated key (no --public-key)")]
                )
            try:
                with open(os.path.expanduser(parsed_args.public_key), encoding="utf-8") as f:
                    public_key = f.read().strip()
            except OSError as exc:
                reason = f"cannot be read: {exc.strerror}"
                raise InvalidInput([FieldError("--public-key", reason)]) from None
        created = self.client.create_keypair(parsed_args.name, public_key, **_owner(parsed_args))
        private = created.pop("private_key", None)
        fields: tuple[str, ...] = _FIELDS
        if private is not None and parsed_args.private_key is not None:
            path = os.path.expanduser(parsed_args.private_key)
            # Created 0600 from the start: never readable by others, even briefly.
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w", encoding="utf-8") as f:
                f.write(private)
        elif private is not None:
            created["private_key"] = private
            fields = (*_FIELDS, "private_key")
        return fields, tuple(created.get(f) for f in fields)


class KeypairList(ConductorCommand, Lister):
    """List your key pairs, by name."""

    examples = (
        ("your key pairs", ""),
        ("the first 10 after mykey", "--limit 10 --marker mykey"),
        ("another user's (admins)", "--user 9a1f2c0b5e2d4c3f8a7b6c5d4e3f2a1b"),
    )

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        parser = _user(super().get_parser(prog_name))
        parser.add_argument(
            "--limit", metavar="N", type=int, help="at most N key pairs (default: every one)"
        )
        parser.add_argument(
            "--marker", metavar="NAME", help="start after this key pair (a previous page's last)"
        )
        return parser

    def take_action(
        self, parsed_args: argparse.Namespace
    ) -> tuple[tuple[str, ...], Iterable[tuple[Any, ...]]]:
        if parsed_args.limit is not None and parsed_args.limit < 1:
            raise InvalidInput(
                [FieldError.about("--limit", "must be 1 or more", parsed_args.limit)]
            )
        paged = {
            key: value
            for key, value in (("limit", parsed_args.limit), ("marker", parsed_args.marker))
            if value is not None
        }
        listed = self.client.list_keypairs(**_owner(parsed_args), **paged)
        return ("Name", "Type", "Fingerprint"), [
            (k["name"], k["type"], k["fingerprint"]) for k in listed
        ]


class KeypairShow(ConductorCommand, ShowOne):
    """Show one of your key pairs."""

    examples = (("one key pair", "mykey"),)

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        return _named(super().get_parser(prog_name))

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[tuple[str, ...], Any]:
        found = self.client.show_keypair(parsed_args.name, **_owner(parsed_args))
        return _FIELDS, tuple(found.get(f) for f in _FIELDS)


class KeypairDelete(ConductorCommand, Command):
    """Delete one of your key pairs (instances built with it keep the key)."""

    examples = (("delete a key pair", "mykey"),)

    def get_parser(self, prog_name: str) -> argparse.ArgumentParser:
        return _named(super().get_parser(prog_name))

    def take_action(self, parsed_args: argparse.Namespace) -> None:
        self.client.delete_keypair(parsed_args.name, **_owner(parsed_args))
