# SPDX-License-Identifier: Apache-2.0
"""``ringfleet-status upgrade check``: each check's success, warning and failure.

The schema check runs on real SQLite files; the RPC check gets the
conductor's reply (or its refusal) from a stand-in; the deprecated-options
check reads real configuration files.  The command itself runs as a process,
as a deployment tool runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import oslo_messaging as messaging
import pytest
from oslo_config import cfg
from oslo_upgradecheck.upgradecheck import Code

from compute_agent.rpcapi import API_VERSION as COMPUTE_API
from conductor import upgrade_checks
from conductor.common import conf as common_conf
from conductor.common import rpc
from conductor.common.exception import ServiceUnavailable
from conductor.db import migration
from conductor.db.engine import Database
from conductor.rpcapi import API_VERSION as CONDUCTOR_API
from tests import config_file_cases
from tests.dbutil import upgraded_by_a_newer_ringfleet
from tests.harness.process import REPO


def _conf(tmp_path: Path, text: str = "") -> cfg.ConfigOpts:
    path = tmp_path / "ringfleet.conf"
    path.write_text(text)
    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    common_conf.register_opts(conf, common_conf.CONDUCTOR)
    conf(["--config-file", str(path)], project="ringfleet-test", default_config_files=[])
    return conf


def _checks(
    conf: cfg.ConfigOpts, reply: Callable[[], Mapping[str, Any]] | None = None
) -> upgrade_checks.UpgradeChecks:
    return upgrade_checks.UpgradeChecks(
        conf, versions=(lambda _conf: reply) if reply is not None else None
    )


# -- database schema ---------------------------------------------------------------


def test_schema_fails_on_an_empty_database_and_succeeds_once_upgraded(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ringfleet.db'}"
    checks = _checks(_conf(tmp_path, f"[database]\nconnection = {url}\n"))
    head = migration.head_version()
    behind = checks._check_schema()
    assert behind.code == Code.FAILURE
    assert behind.details == (
        f"schema at nothing, this release needs {head}: run ringfleet-dbsync upgrade"
    )
    db = Database(url)
    try:
        migration.upgrade(db)
    finally:
        db.dispose()
    current = checks._check_schema()
    assert (current.code, current.details) == (Code.SUCCESS, f"schema at {head}")


def test_schema_fails_naming_an_unset_or_unreachable_database(
    tmp_path: Path, closed_port: int
) -> None:
    unset = _checks(_conf(tmp_path))._check_schema()
    assert (unset.code, unset.details) == (Code.FAILURE, "[database] connection: must be set")
    url = f"postgresql+psycopg2://ringfleet:s3cret@127.0.0.1:{closed_port}/ringfleet"
    down = _checks(_conf(tmp_path, f"[database]\nconnection = {url}\n"))._check_schema()
    assert down.code == Code.FAILURE
    assert down.details is not None
    assert down.details.startswith(
        f"database postgresql+psycopg2://ringfleet:***@127.0.0.1:{closed_port}/ringfleet "
        "unreachable: "
    )
    assert "s3cret" not in down.details


def test_schema_fails_saying_a_newer_ringfleet_upgraded_the_database(tmp_path: Path) -> None:
    url = upgraded_by_a_newer_ringfleet(tmp_path / "ringfleet.db")
    checks = _checks(_conf(tmp_path, f"[database]\nconnection = {url}\n"))
    ahead = checks._check_schema()
    assert (ahead.code, ahead.details) == (
        Code.FAILURE,
        f"the database is at revision 9999, which this ringfleet ({migration.release()}, "
        f"newest revision {migration.head_version()}) does not know: the database was "
        "upgraded by a newer ringfleet; upgrade this host's ringfleet",
    )


# -- RPC version pins --------------------------------------------------------------


def _reply(**agents: str | None) -> Callable[[], Mapping[str, Any]]:
    return lambda: {
        "conductor": "cond-1",
        "conductor_api": CONDUCTOR_API,
        "agents": [
            *({"host": h, "state": "up", "rpc_api": v} for h, v in agents.items()),
            # A departed agent is no live service: never compared.
            {"host": "gone-1", "state": "gone", "rpc_api": None},
        ],
    }


def _pins(tmp_path: Path, compute: str | None = None, conductor: str | None = None) -> str:
    lines = ["[upgrade_levels]"]
    lines += [f"compute = {compute}"] if compute else []
    lines += [f"conductor = {conductor}"] if conductor else []
    return "\n".join(lines) + "\n"


def _refused(exc_type: str) -> Callable[[], Mapping[str, Any]]:
    def call() -> Mapping[str, Any]:
        raise messaging.RemoteError(exc_type, "Endpoint does not support RPC version 1.16")

    return call


def test_pins_succeed_when_every_live_service_runs_this_release(tmp_path: Path) -> None:
    result = _checks(_conf(tmp_path), _reply(a1=COMPUTE_API, a2=COMPUTE_API))._check_rpc_pins()
    assert result.code == Code.SUCCESS
    assert result.details == (
        f"conductor cond-1 serves {CONDUCTOR_API}; 2 agents serve {COMPUTE_API}"
    )
    nobody = _checks(_conf(tmp_path), _reply())._check_rpc_pins()
    assert nobody.code == Code.SUCCESS and "no live agent" in (nobody.details or "")


def test_pins_no_longer_needed_are_warnings(tmp_path: Path) -> None:
    conf = _conf(tmp_path, _pins(tmp_path, compute="1.0", conductor="1.3"))
    result = _checks(conf, _reply(a1=COMPUTE_API))._check_rpc_pins()
    assert result.code == Code.WARNING
    assert result.details is not None
    assert "remove [upgrade_levels] compute = 1.0 and restart the conductors" in result.details
    assert "[upgrade_levels] conductor = 1.3: remove it" in result.details


def test_agents_of_an_older_release_need_the_compute_pin(tmp_path: Path) -> None:
    # An agent of a release before 1.16 announces no version.
    unpinned = _checks(_conf(tmp_path), _reply(a1=COMPUTE_API, old1=None))._check_rpc_pins()
    assert unpinned.code == Code.FAILURE
    assert "agents old1 announce no API version" in (unpinned.details or "")
    assert "[upgrade_levels] compute is not set" in (unpinned.details or "")
    pinned = _checks(
        _conf(tmp_path, _pins(tmp_path, compute="1.0")), _reply(a1=COMPUTE_API, old1=None)
    )._check_rpc_pins()
    assert pinned.code == Code.SUCCESS
    assert "agents old1 of an older release, [upgrade_levels] compute = 1.0" in (
        pinned.details or ""
    )


def test_an_agent_announcing_an_older_api_needs_a_pin_at_most_its_version(
    tmp_path: Path,
) -> None:
    reply = _reply(a1=COMPUTE_API, a2="1.2")
    for pin in (None, "1.3"):
        conf = _conf(tmp_path, _pins(tmp_path, compute=pin))
        result = _checks(conf, reply)._check_rpc_pins()
        assert result.code == Code.FAILURE
        assert "agents a2 serve API 1.2: set [upgrade_levels] compute = 1.2" in (
            result.details or ""
        )
    ok = _checks(_conf(tmp_path, _pins(tmp_path, compute="1.2")), reply)._check_rpc_pins()
    assert ok.code == Code.SUCCESS


def test_a_conductor_of_an_older_release_needs_the_conductor_pin(tmp_path: Path) -> None:
    old = _refused("UnsupportedVersion")
    unpinned = _checks(_conf(tmp_path), old)._check_rpc_pins()
    assert unpinned.code == Code.FAILURE
    assert "a conductor older than API 1.16 answered" in (unpinned.details or "")
    too_new = _checks(_conf(tmp_path, _pins(tmp_path, conductor="1.16")), old)._check_rpc_pins()
    assert too_new.code == Code.FAILURE
    assert "[upgrade_levels] conductor = 1.16, but" in (too_new.details or "")
    pinned = _checks(_conf(tmp_path, _pins(tmp_path, conductor="1.15")), old)._check_rpc_pins()
    assert pinned.code == Code.SUCCESS


def test_a_conductor_pin_newer_than_the_conductor_fails(tmp_path: Path) -> None:
    conf = _conf(tmp_path, _pins(tmp_path, conductor="1.99"))
    result = _checks(conf, _reply(a1=COMPUTE_API))._check_rpc_pins()
    assert result.code == Code.FAILURE
    assert f"conductor = 1.99 is newer than conductor cond-1 serves ({CONDUCTOR_API})" in (
        result.details or ""
    )


@pytest.mark.parametrize(
    "failure",
    [
        ServiceUnavailable("cannot reach the broker at rabbit://u:***@h:5672/"),
        messaging.MessagingTimeout("Timed out waiting for a reply"),
    ],
)
def test_no_conductor_answering_fails_with_the_reason(tmp_path: Path, failure: Exception) -> None:
    def call() -> Mapping[str, Any]:
        raise failure

    result = _checks(_conf(tmp_path), call)._check_rpc_pins()
    assert result.code == Code.FAILURE
    assert (result.details or "").startswith("no conductor answered, pins not checked: ")
    assert str(failure).splitlines()[0] in (result.details or "")


# -- deprecated options ------------------------------------------------------------


def test_deprecated_options_in_use_are_warnings(tmp_path: Path) -> None:
    clean = _checks(_conf(tmp_path, "[DEFAULT]\nlog_dir = /var/log/ringfleet\n"))
    assert clean._check_deprecated_options().code == Code.SUCCESS
    old = _conf(
        tmp_path,
        "[DEFAULT]\nlogdir = /var/log/ringfleet\n"
        "[oslo_messaging_rabbit]\ndirect_mandatory_flag = true\n",
    )
    path = tmp_path / "ringfleet.conf"
    result = _checks(old)._check_deprecated_options()
    assert result.code == Code.WARNING
    assert result.details is not None
    assert f"[DEFAULT] logdir ({path}) is a deprecated name: use [DEFAULT] log_dir" in (
        result.details
    )
    assert f"[oslo_messaging_rabbit] direct_mandatory_flag ({path}) is deprecated for removal" in (
        result.details
    )


def test_deprecated_options_are_found_in_a_config_dir_too(tmp_path: Path) -> None:
    directory = tmp_path / "ringfleet.conf.d"
    directory.mkdir()
    (directory / "50-logging.conf").write_text("[DEFAULT]\nlogfile = /tmp/x.log\n")
    conf = cfg.ConfigOpts()
    conf(["--config-dir", str(directory)], project="ringfleet-test", default_config_files=[])
    found = upgrade_checks.deprecated_options_in_use(
        upgrade_checks._config_files(conf), ["oslo.log"]
    )
    assert found == [
        f"[DEFAULT] logfile ({directory / '50-logging.conf'}) is a deprecated name: "
        "use [DEFAULT] log_file"
    ]


# -- the command -------------------------------------------------------------------


def _status(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "conductor.cmd.status", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_command_prints_every_check_and_exits_with_the_worst(
    tmp_path: Path, closed_port: int
) -> None:
    config = tmp_path / "ringfleet.conf"
    config.write_text(
        f"[DEFAULT]\ntransport_url = rabbit://u:p@127.0.0.1:{closed_port}/\n"
        "rpc_response_timeout = 2\nlogdir = /var/log/ringfleet\n"
        f"[database]\nconnection = sqlite:///{tmp_path / 'ringfleet.db'}\n"
    )
    done = _status("--config-file", str(config), "upgrade", "check", "--json")
    assert done.returncode == Code.FAILURE, done.stderr
    report = json.loads(done.stdout)
    assert report["name"] == "ringfleet upgrade check"
    results = {c["check"]: c["result"] for c in report["checks"]}
    assert results == {
        "Database schema": Code.FAILURE,
        "RPC version pins": Code.FAILURE,
        "Deprecated options": Code.WARNING,
    }
    table = _status("--config-file", str(config), "upgrade", "check")
    assert table.returncode == Code.FAILURE
    assert "Check: Deprecated options" in table.stdout and "Result: Warning" in table.stdout


@pytest.mark.parametrize(("config_file", "said"), config_file_cases.CASES)
def test_a_configuration_file_that_cannot_be_read_is_one_line(
    tmp_path: Path, config_file: str, said: str
) -> None:
    path = tmp_path / config_file
    config_file_cases.make(path)
    done = _status("--config-file", str(path), "upgrade", "check")
    assert (done.returncode, done.stdout) == (255, ""), done  # "the check itself failed"
    [line] = done.stderr.splitlines()
    assert line.startswith(f"ringfleet-status: {said.format(path=path)}"), line


@pytest.mark.skipif(
    os.geteuid() == 0,
    reason="root reads a file of mode 000: the directory case above is the unreadable file",
)
def test_a_configuration_file_without_read_permission_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "ringfleet.conf"
    path.write_text("")
    path.chmod(0)
    done = _status("--config-file", str(path), "upgrade", "check")
    assert (done.returncode, done.stdout) == (255, "")
    assert done.stderr == f"ringfleet-status: Failed to open some config files: {path}\n"


def test_a_value_not_valid_is_one_line_and_the_database_only_in_the_details(
    tmp_path: Path, closed_port: int
) -> None:
    config = tmp_path / "ringfleet.conf"
    database = f"postgresql+psycopg2://u:pw@127.0.0.1:{closed_port}/ringfleet"
    config.write_text(
        f"[DEFAULT]\ntransport_url = rabbit://u:p@127.0.0.1:{closed_port}/\n"
        f"rpc_response_timeout = 2\n[database]\nconnection = {database}\n"
    )
    done = _status("--config-file", str(config), "upgrade", "check", "--json")
    assert done.returncode == Code.FAILURE
    assert done.stderr == ""  # not the database's WARNING, written for a service's log
    [schema] = [c for c in json.loads(done.stdout)["checks"] if c["check"] == "Database schema"]
    assert "unreachable" in schema["details"]
    # A value read by a check (the RPC timeout, by the pins check): one line, no traceback.
    config.write_text(
        config.read_text().replace("rpc_response_timeout = 2", "rpc_response_timeout = soon")
    )
    done = _status("--config-file", str(config), "upgrade", "check", "--json")
    assert (done.returncode, done.stdout) == (255, ""), done
    assert done.stderr == (
        f"ringfleet-status: {config}: rpc_response_timeout: not valid: "
        "invalid literal for int() with base 10: 'soon'\n"
    )


def test_the_help_is_a_manual_page(tmp_path: Path) -> None:
    done = _status("upgrade", "--help")
    assert done.returncode == 0
    assert "usage: ringfleet-status upgrade [-h] [--json] {check}" in done.stdout
    assert "[upgrade_levels]" in done.stdout and "exit status: 0" in done.stdout
    assert _status("upgrade", "chek").returncode == 2


def test_the_options_checked_are_those_of_the_sample_config() -> None:
    """Every namespace of ringfleet.conf.sample, and the API's Keystone middleware."""
    generator = REPO / "etc" / "ringfleet" / "ringfleet-config-generator.conf"
    sample = [
        line.split("=", 1)[1].strip()
        for line in generator.read_text().splitlines()
        if line.startswith("namespace")
    ]
    assert set(upgrade_checks.OPTION_NAMESPACES) == {*sample, "keystonemiddleware.auth_token"}
