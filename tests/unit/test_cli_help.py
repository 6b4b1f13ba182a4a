# SPDX-License-Identifier: Apache-2.0
"""Every option and argument of every ``ringfleet`` command has help, in plain text,
and every command's help ends with examples that parse.

``--help`` prints the commands' docstrings and the options' help as they
are: reStructuredText markup (````literal````, ``:ref:`x```, directives)
would show raw, and so would notes meant for developers (which cliff base
class a command is).
"""

from __future__ import annotations

import argparse
import io
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cliff.app import App
from cliff.command import Command
from cliff.commandmanager import CommandManager

from conductor.cli.app import RingfleetApp
from conductor.cli.command import ConductorCommand
from conductor.cli.node import NodeList
from conductor.common.exception import NodeNotFound

# ``literal``, :role:`target`, `link`_, .. directive::, a literal block's "::".
_RST = re.compile(r"``|:[a-z-]+:`|`_|(^|\n)\s*\.\. [a-z-]+::|::\s*($|\n)")
# Developer notes: cliff's class names.
_INTERNAL = re.compile(r"\b(ShowOne|Lister|StreamingLister|take_action)\b")


def _parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    app = RingfleetApp()
    yield "ringfleet", app.build_option_parser(app.parser.description, "0")
    for name, entry_point in sorted(app.command_manager):
        command = entry_point.load()(app, None, cmd_name=name)
        yield name, command.get_parser(f"ringfleet {name}")


def _problems(name: str, parser: argparse.ArgumentParser) -> Iterator[str]:
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        label = "/".join(action.option_strings) or action.dest
        text = action.help
        if text == argparse.SUPPRESS:
            continue  # hidden on purpose (cliff's shell formatter, test hooks)
        if not text or not text.strip():
            yield f"{name}: {label}: no help"
        elif _RST.search(text) or _INTERNAL.search(text):
            yield f"{name}: {label}: markup or an internal note in {text!r}"
    for part in (parser.description or "", parser.epilog or ""):
        for found in (_RST.search(part), _INTERNAL.search(part)):
            if found:
                yield f"{name}: description: {found.group(0)!r} in {part!r}"


def test_every_option_has_plain_help() -> None:
    parsers = list(_parsers())
    # Every command of the entry points is walked (30 and the app's options).
    assert len(parsers) > 30
    problems = [p for name, parser in parsers for p in _problems(name, parser)]
    assert problems == []


@pytest.mark.parametrize(
    ("help_text", "bad"),
    [
        ("see ``fleet status``", True),
        ("see :doc:`operations`", True),
        ("(not a ShowOne)", True),
        ("example::\n\n  x", True),
        (None, True),
        ("raw, qcow2, iso... (Glance's names)", False),
        ("repeatable; 'capabilities=k1:v1' sets them", False),
    ],
)
def test_the_walk_finds_missing_help_and_markup(help_text: str | None, bad: bool) -> None:
    parser = argparse.ArgumentParser(description="Plain.")
    parser.add_argument("--opt", help=help_text)
    assert bool(list(_problems("x", parser))) is bad


# -- an example in every command's --help ----------------------------------------------


def _commands(app: Any) -> Iterator[tuple[str, Any]]:
    for name, entry_point in sorted(app.command_manager):
        yield name, entry_point.load()(app, None, cmd_name=name)


def test_every_command_has_examples_that_parse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The files the examples name exist (options read them as they parse).
    monkeypatch.chdir(tmp_path)
    for name in ("cloud-init.yaml", "nodes.yaml", "nodes.csv"):
        (tmp_path / name).write_text("")
    app = RingfleetApp()
    commands = list(_commands(app))
    assert len(commands) > 30  # every command of the entry points
    missing, broken = [], []
    for name, command in commands:
        examples = getattr(command, "examples", ())
        parser = command.get_parser(f"ringfleet {name}")
        help_text = parser.format_help()
        if not examples or "Examples:" not in help_text:
            missing.append(name)
            continue
        for _what, arguments in examples:
            # The example as its user types it, one line in the help.
            assert f"ringfleet {name} {arguments}".rstrip() in _joined(help_text), (name, arguments)
            try:
                parser.parse_args(shlex.split(arguments))
            except SystemExit:
                broken.append(f"{name} {arguments}")
    assert missing == []
    assert broken == []


def _joined(help_text: str) -> str:
    """The help with its backslash-continued example lines joined."""
    return re.sub(r" \\\n\s+", " ", help_text)


def test_examples_under_the_openstack_cli_name_it() -> None:
    """Under ``openstack``, command names start with ``ringfleet``: the
    examples read ``openstack ringfleet ...``, the program named once."""
    command = NodeList(_other_app(), None, cmd_name="ringfleet node list")
    help_text = command.get_parser("openstack ringfleet node list").format_help()
    assert "  openstack ringfleet node list --maintenance\n" in help_text
    assert "ringfleet ringfleet" not in help_text


def _other_app() -> App:
    """A cliff application that is not ``ringfleet`` (the openstack CLI, to a command)."""
    return App("another CLI", "1", CommandManager("openstack.ringfleet.v1"), stderr=io.StringIO())


class _Missing(ConductorCommand, Command):
    """Show what is not there."""

    def take_action(self, parsed_args: argparse.Namespace) -> int:
        raise NodeNotFound("node-9")


@pytest.mark.parametrize(
    ("program", "cmd_name", "line"),
    [
        ("ringfleet", "node show", "ringfleet node show: error: "),
        ("openstack", "ringfleet node show", "openstack ringfleet node show: error: "),
    ],
)
def test_errors_name_the_program_once(program: str, cmd_name: str, line: str) -> None:
    app = RingfleetApp() if program == "ringfleet" else _other_app()
    app.stderr = io.StringIO()
    status = _Missing(app, None, cmd_name=cmd_name).run(argparse.Namespace())
    assert status == 1
    assert app.stderr.getvalue().startswith(line)
    assert app.stderr.getvalue().count("ringfleet") == 1
