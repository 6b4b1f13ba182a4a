# SPDX-License-Identifier: Apache-2.0
"""Every option and argument of every ``ringfleet`` command has help, in plain text.

``--help`` prints the commands' docstrings and the options' help as they
are: reStructuredText markup (````literal````, ``:ref:`x```, directives)
would show raw, and so would notes meant for developers (which cliff base
class a command is).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

import pytest

from conductor.cli.app import RingfleetApp

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
