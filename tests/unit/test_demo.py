"""The embedded demo: a fleet in one process on the file backend, no servers."""

from __future__ import annotations

import argparse
import io
import subprocess
import sys

import pytest

from conductor.cmd import cli
from conductor.demo import add_arguments, run_demo


def test_demo_checks_hold_and_numbers_add_up() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--agents", "3", "--nodes", "600", "--ttl", "2", "--seed", "4"])
    out = io.StringIO()
    result = run_demo(args, out)
    assert result.violations == []
    # The crashed agent had about a third of the nodes; the newcomer gets
    # about a third back. Zero would mean nothing was taken over.
    assert 100 < result.moved_on_crash < 300
    assert 100 < result.moved_on_join < 300
    assert result.takeover_seconds is not None
    text = out.getvalue()
    assert "All invariants held." in text
    assert "all to agent-4" in text


def test_cli_demo_exit_codes() -> None:
    ok = subprocess.run(
        [
            sys.executable,
            "-m",
            "conductor.cmd.cli",
            "demo",
            "--nodes",
            "60",
            "--ttl",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert "All invariants held." in ok.stdout
    assert "Eventlet" not in ok.stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["demo", "--agents", "1"], "--agents"),
        (["demo", "--nodes", "0"], "--nodes"),
        (["demo", "--ttl", "0"], "--ttl"),
    ],
)
def test_cli_demo_refuses_bad_sizes(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err
