# SPDX-License-Identifier: Apache-2.0
"""The CLI and an unreachable broker: one line within --rpc-timeout, naming where it looked.

The CLI runs as its own process, as an operator runs it.  Without the check
it printed oslo.messaging's "Connection failed ... retrying" for ever.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.process import REPO


def ringfleet(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "conductor.cmd.cli", "--rpc-timeout", "3", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,  # before: never returned
    )


def _config(tmp_path: Path, port: int) -> Path:
    path = tmp_path / "ringfleet.conf"
    path.write_text(f"[DEFAULT]\ntransport_url = rabbit://admin:s3cret@127.0.0.1:{port}/\n")
    return path


def test_a_refused_broker_is_one_line_naming_the_config_and_the_url(
    tmp_path: Path, closed_port: int
) -> None:
    config = _config(tmp_path, closed_port)
    done = ringfleet("--config-file", str(config), "fleet", "status")
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.startswith("ringfleet fleet status: error: ")
    assert f"cannot reach the broker at rabbit://admin:***@127.0.0.1:{closed_port}/" in line
    assert f"config {config}" in line and "Connection refused" in line
    assert "s3cret" not in done.stderr and done.stdout == ""


def test_a_broker_that_never_answers_is_given_up_at_the_timeout(
    tmp_path: Path, silent_server: int
) -> None:
    done = ringfleet("--config-file", str(_config(tmp_path, silent_server)), "node", "list")
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert f"cannot reach the broker at rabbit://admin:***@127.0.0.1:{silent_server}/" in line


def test_without_a_config_file_it_says_so(tmp_path: Path) -> None:
    # From a directory without one, and none given: oslo.messaging's default
    # broker (localhost) is tried, and the line says that no file was read.
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 5672)) == 0:
            pytest.skip("a broker listens on localhost:5672: nothing to refuse")
    done = ringfleet("fleet", "status", cwd=tmp_path)
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert "no config file (none given, /etc/ringfleet/ringfleet.conf does not exist)" in line
    assert "rabbit://guest:***@localhost:5672/" in line


def test_a_transport_url_that_is_no_url_names_the_option(tmp_path: Path) -> None:
    config = tmp_path / "ringfleet.conf"
    config.write_text("[DEFAULT]\ntransport_url = broker.example.com\n")
    done = ringfleet("--config-file", str(config), "fleet", "status")
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.startswith("ringfleet fleet status: error: [DEFAULT] transport_url: ")
    assert f"config {config}" in line
