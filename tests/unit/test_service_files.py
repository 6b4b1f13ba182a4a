# SPDX-License-Identifier: Apache-2.0
"""The systemd units in etc/systemd and the devstack plugin in devstack/.

The units are checked against the code they run: stop timeouts against the
graceful stops (read from the option defaults and signatures, not copied),
ExecStart against pyproject's console scripts and their command lines, exit
status 2 against the runner.  The devstack plugin is syntax-checked, run
through shellcheck, and run for real against stubs of devstack's functions.
"""

from __future__ import annotations

import configparser
import inspect
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from oslo_config import cfg
from oslo_log import log as oslo_log
from oslo_messaging import opts as messaging_opts

from compute_agent.service import STOP_MARGIN
from conductor.api import wsgi
from conductor.cmd import dbsync
from conductor.common import conf as common_conf
from conductor.common import rpc
from conductor.common.conf import compute_agent as agent_opts
from conductor.common.conf import conductor as conductor_opts
from conductor.common.conf import database as database_opts
from conductor.common.runner import EXIT_S
from conductor.lifecycle import BuildLifecycle
from hashring.backend_url import ttl_from_url

REPO = Path(__file__).resolve().parents[2]
UNITS = REPO / "etc" / "systemd"
DEVSTACK = REPO / "devstack"
SHARED_CONF = "/etc/ringfleet/ringfleet.conf"

CONDUCTOR = "ringfleet-conductor.service"
AGENT = "ringfleet-compute-agent.service"
AGENT_TEMPLATE = "ringfleet-compute-agent@.service"
DBSYNC = "ringfleet-dbsync.service"
DAEMONS = (CONDUCTOR, AGENT, AGENT_TEMPLATE)
AGENT_UNITS = (AGENT, AGENT_TEMPLATE)
#: unit -> the console script its ExecStart runs
SCRIPT_OF = {
    CONDUCTOR: "ringfleet-conductor",
    AGENT: "ringfleet-compute-agent",
    AGENT_TEMPLATE: "ringfleet-compute-agent",
    DBSYNC: "ringfleet-dbsync",
}


# -- a small systemd unit parser -------------------------------------------------

Unit = dict[str, dict[str, list[str]]]


def parse_unit(path: Path) -> Unit:
    """Sections -> keys -> every value in order (keys such as After= repeat).

    systemd syntax: '#' and ';' start comment lines, a trailing backslash
    continues a line, an empty value is kept (it resets a list setting).
    """
    sections: Unit = {}
    current: dict[str, list[str]] | None = None
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line[0] in "#;"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"{path.name}: {line!r} before any section"
        key, sep, setting = line.partition("=")
        assert sep, f"{path.name}: not an assignment: {line!r}"
        current.setdefault(key.strip(), []).append(setting.strip())
    return sections


def value(unit: Unit, section: str, key: str) -> str:
    """The effective value of a single-valued setting (the last one wins)."""
    values = unit.get(section, {}).get(key)
    assert values, f"[{section}] {key}= is not set"
    return values[-1]


def words(unit: Unit, section: str, key: str) -> list[str]:
    """Every word of a list setting such as After= or Wants=."""
    return [w for v in unit.get(section, {}).get(key, []) for w in v.split()]


_SPAN_UNITS = {
    "us": 1e-6, "usec": 1e-6, "ms": 1e-3, "msec": 1e-3,
    "s": 1.0, "sec": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hr": 3600.0, "hour": 3600.0, "hours": 3600.0,
}  # fmt: skip


def seconds(span: str) -> float:
    """A systemd time span ('90', '90s', '1min 30s', 'infinity') in seconds."""
    if span == "infinity":
        return float("inf")
    if re.fullmatch(r"\d+(\.\d+)?", span):
        return float(span)
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]+)", span)
    assert parts and "".join(f"{n}{u}" for n, u in parts) == span.replace(" ", ""), span
    return sum(float(n) * _SPAN_UNITS[u] for n, u in parts)


@pytest.fixture(scope="module")
def units() -> dict[str, Unit]:
    return {name: parse_unit(UNITS / name) for name in (*DAEMONS, DBSYNC)}


@pytest.fixture(scope="module")
def console_scripts() -> dict[str, str]:
    with (REPO / "pyproject.toml").open("rb") as f:
        return dict(tomllib.load(f)["project"]["scripts"])


def test_parser_handles_continuations_comments_and_repeats(tmp_path: Path) -> None:
    path = tmp_path / "x.service"
    path.write_text(
        "# c\n[Unit]\nAfter=a\n; c\nAfter=b \\\n  c\n[Service]\nCapabilityBoundingSet=\n"
    )
    unit = parse_unit(path)
    assert words(unit, "Unit", "After") == ["a", "b", "c"]
    assert value(unit, "Service", "CapabilityBoundingSet") == ""
    assert seconds("1min 30s") == 90.0
    assert seconds("90") == 90.0
    assert seconds("30min") == 1800.0


# -- what the daemons' units must say ------------------------------------------------


@pytest.mark.parametrize("name", DAEMONS)
def test_daemons_notify_systemd_and_reload_on_hup(units: dict[str, Unit], name: str) -> None:
    unit = units[name]
    # conductor/common/systemd.py sends READY/STOPPING/RELOADING from the main process.
    assert value(unit, "Service", "Type") == "notify"
    assert value(unit, "Service", "NotifyAccess") == "main"
    # conductor/common/runner.py reloads on SIGHUP.
    reload = value(unit, "Service", "ExecReload")
    assert re.fullmatch(r"(/usr)?/bin/kill -(HUP|SIGHUP|s HUP) \$MAINPID", reload), reload
    # SIGTERM to the main process for the ordered stop, SIGKILL to all at the end.
    assert value(unit, "Service", "KillMode") == "mixed"
    assert value(unit, "Install", "WantedBy") == "multi-user.target"


@pytest.mark.parametrize("name", AGENT_UNITS)
def test_agent_stop_timeout_is_above_its_stop_deadline(units: dict[str, Unit], name: str) -> None:
    # The agent's stop waits up to graceful_timeout for deployments, then
    # leaves; past graceful_timeout + STOP_MARGIN it exits whatever is left,
    # and the interpreter's exit gets EXIT_S more (conductor/common/runner.py):
    # systemd's SIGKILL must come later.
    graceful = next(o.default for o in agent_opts.opts if o.name == "graceful_timeout")
    stop = seconds(value(units[name], "Service", "TimeoutStopSec"))
    assert stop > graceful + STOP_MARGIN + EXIT_S, (stop, graceful)


def test_conductor_stop_timeout_is_above_its_stop_deadline(units: dict[str, Unit]) -> None:
    # The conductor's ordered stop waits for the RPC requests in flight (an
    # `agent drain` call runs up to rpc_response_timeout), then for its build
    # workers (BuildLifecycle.stop's timeout); past graceful_timeout it exits
    # whatever is left, and its exit gets EXIT_S more.
    rpc_timeout = next(
        o.default
        for _group, group_opts in messaging_opts.list_opts()
        for o in group_opts
        if o.name == "rpc_response_timeout"
    )
    workers = inspect.signature(BuildLifecycle.stop).parameters["timeout"].default
    graceful = next(o.default for o in conductor_opts.opts if o.name == "graceful_timeout")
    stop = seconds(value(units[CONDUCTOR], "Service", "TimeoutStopSec"))
    assert stop > graceful + EXIT_S, (stop, graceful)
    assert graceful > rpc_timeout + workers, (graceful, rpc_timeout, workers)


def test_start_timeouts_cover_the_wait_for_the_group(units: dict[str, Unit]) -> None:
    ttl = ttl_from_url("etcd3+http://localhost:2379")  # etcd's default lease
    # The agent reports READY after up to max(30, 2 x ttl) (AgentService.run),
    # the conductor after up to ttl (ConductorService.run).
    for name in AGENT_UNITS:
        assert seconds(value(units[name], "Service", "TimeoutStartSec")) > max(30.0, 2 * ttl)
    assert seconds(value(units[CONDUCTOR], "Service", "TimeoutStartSec")) > ttl


@pytest.mark.parametrize("name", DAEMONS)
def test_daemons_restart_on_failure_only(units: dict[str, Unit], name: str) -> None:
    unit = units[name]
    # Never `always`: a drained agent exits 0 and must stay stopped.
    assert value(unit, "Service", "Restart") == "on-failure"
    assert 1 <= seconds(value(unit, "Service", "RestartSec")) <= 30
    assert "2" in words(unit, "Service", "RestartPreventExitStatus")


def test_exit_status_2_means_configuration_error() -> None:
    """What RestartPreventExitStatus=2 relies on (conductor/common/runner.py)."""
    code = textwrap.dedent(
        """
        import sys
        from conductor.common.runner import run_service
        from conductor.common.exception import ConfigurationError

        class Broken:
            def run(self):
                raise ConfigurationError("database", "connection", "must be set")
            def terminate(self):
                pass
            def reload(self):
                pass

        sys.exit(run_service(Broken(), "broken"))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2, done.stderr
    assert "[database] connection" in done.stderr


@pytest.mark.parametrize("name", (*DAEMONS, DBSYNC))
def test_units_run_as_ringfleet_with_hardening(units: dict[str, Unit], name: str) -> None:
    service = units[name]["Service"]
    assert service["User"][-1] == "ringfleet"
    assert service["NoNewPrivileges"][-1] == "yes"
    assert service["ProtectSystem"][-1] in {"full", "strict"}
    assert service["PrivateTmp"][-1] == "yes"
    # SQLite's documented place and the drivers' state: /var/lib/ringfleet.
    assert service["StateDirectory"][-1] == "ringfleet"
    connection_help = database_opts.opts[0].help
    assert connection_help and "/var/lib/ringfleet" in connection_help


@pytest.mark.parametrize("name", (*DAEMONS, DBSYNC))
def test_exec_start_runs_this_projects_console_script(
    units: dict[str, Unit], console_scripts: dict[str, str], name: str
) -> None:
    argv = shlex.split(value(units[name], "Service", "ExecStart"))
    assert argv[0] == f"/usr/bin/{SCRIPT_OF[name]}"
    assert SCRIPT_OF[name] in console_scripts
    assert argv[1:3] == ["--config-file", SHARED_CONF]


def test_template_adds_its_own_config_file_after_the_shared_one(units: dict[str, Unit]) -> None:
    unit = units[AGENT_TEMPLATE]
    argv = shlex.split(value(unit, "Service", "ExecStart"))
    # The later file wins: the instance's host overrides the shared defaults.
    own = "/etc/ringfleet/agent-%i.conf"
    assert argv[1:] == ["--config-file", SHARED_CONF, "--config-file", own]
    assert value(unit, "Unit", "AssertPathExists") == own


def test_conductor_runs_dbsync_first_without_requiring_it(units: dict[str, Unit]) -> None:
    conductor, sync = units[CONDUCTOR], units[DBSYNC]
    assert DBSYNC in words(conductor, "Unit", "Wants")
    assert DBSYNC in words(conductor, "Unit", "After")
    assert DBSYNC not in words(conductor, "Unit", "Requires")
    assert value(sync, "Service", "Type") == "oneshot"
    assert shlex.split(value(sync, "Service", "ExecStart"))[-1] == "upgrade"
    assert "Install" not in sync  # only pulled in by the conductor


def _cli_conf(script: str) -> cfg.ConfigOpts:
    """The ConfigOpts a console script builds before parsing (no logging setup)."""
    conf = cfg.ConfigOpts()
    if script != "ringfleet-dbsync":
        rpc.register_opts(conf)
    if script == "ringfleet-compute-agent":
        common_conf.register_opts(conf, common_conf.COMPUTE_AGENT)
    else:
        common_conf.register_opts(conf, common_conf.CONDUCTOR)
    if script == "ringfleet-dbsync":
        conf.register_cli_opt(
            cfg.SubCommandOpt("command", handler=dbsync._add_commands, dest="command")
        )
    # What prepare_service adds.
    oslo_log.register_options(conf)
    common_conf.register_opts(conf)
    return conf


@pytest.mark.parametrize("name", (*DAEMONS, DBSYNC))
def test_exec_start_arguments_are_accepted(
    units: dict[str, Unit], tmp_path: Path, name: str
) -> None:
    """The command line parses as the console script parses it."""
    argv = shlex.split(value(units[name], "Service", "ExecStart").replace("%i", "rack1"))
    args = []
    for arg in argv[1:]:
        if arg.startswith("/etc/ringfleet/"):
            local = tmp_path / Path(arg).name
            local.write_text("[DEFAULT]\nhost = h1\n" if "agent-" in arg else "")
            arg = str(local)
        args.append(arg)
    conf = _cli_conf(SCRIPT_OF[name])
    conf(args, project="ringfleet", default_config_files=[], default_config_dirs=[])
    if name == DBSYNC:
        assert conf.command.name == "upgrade"
    if name == AGENT_TEMPLATE:
        assert conf.host == "h1"


def test_systemd_analyze_verify(tmp_path: Path) -> None:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed")
    # verify insists that ExecStart's binary exists: point it at one that does.
    for unit in UNITS.glob("*.service"):
        text = re.sub(r"/usr/bin/(ringfleet-[a-z-]+|gunicorn)", "/bin/true", unit.read_text())
        (tmp_path / unit.name).write_text(text)
    done = subprocess.run(
        [tool, "verify", "--man=no", *sorted(str(p) for p in tmp_path.glob("*.service"))],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # Unknown settings and bad values are only warnings ("ignoring"): none allowed.
    ours = [line for line in done.stderr.splitlines() if "ringfleet" in line]
    assert done.returncode == 0 and not ours, done.stderr


# -- devstack --------------------------------------------------------------------------

DEVSTACK_SCRIPTS = (DEVSTACK / "plugin.sh", DEVSTACK / "settings")


@pytest.mark.parametrize("script", DEVSTACK_SCRIPTS, ids=lambda p: p.name)
def test_devstack_scripts_parse(script: Path) -> None:
    # One file per `bash -n`: further arguments would be the script's arguments.
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_devstack_scripts_pass_shellcheck() -> None:
    tool = shutil.which("shellcheck")
    if tool is None:
        if os.environ.get("CI") == "true":
            pytest.fail("shellcheck is missing in CI (tools/run-tests.sh installs it)")
        pytest.skip("shellcheck is not installed")
    # No global excludes: the one exception (SC2034 in settings, whose variables
    # plugin.sh uses) is a directive in the file, with its reason.
    done = subprocess.run(
        [tool, "-s", "bash", *map(str, DEVSTACK_SCRIPTS)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


#: Stand-ins for the devstack functions the plugin calls; each call that
#: matters is recorded, one tab-separated line per call, in $RECORD.
STUBS = r"""
set -o errexit
record() { local IFS=$'\t'; echo "$*" >> "$RECORD"; }
# As devstack's: a service disabled in local.conf stays disabled.
enable_service() {
    local s
    for s in "$@"; do
        [[ ",$DISABLED_SERVICES," == *",$s,"* ]] && continue
        [[ ",$ENABLED_SERVICES," == *",$s,"* ]] || ENABLED_SERVICES+=",$s"
    done
}
is_service_enabled() {
    local s
    for s in "$@"; do
        [[ ",$ENABLED_SERVICES," == *",$s,"* ]] && return 0
    done
    return 1
}
die() { echo "die: $*" >&2; exit 1; }
echo_summary() { :; }
sudo() { "$@"; }
get_python_exec_prefix() { echo "$FAKE_BIN"; }
setup_develop() { record setup_develop "$@"; }
get_transport_url() { echo "rabbit://stackrabbit:secret@10.0.0.5:5672/"; }
database_connection_url() { echo "mysql+pymysql://root:secret@10.0.0.5/$1?charset=utf8"; }
recreate_database() { record recreate_database "$@"; }
run_process() { if is_service_enabled "$1"; then record run_process "$1" "$2"; fi; }
stop_process() { if is_service_enabled "$1"; then record stop_process "$1"; fi; }
iniset() { "$PYTHON" "$INISET" "$@"; }
"""

INISET = """
import configparser, sys
path, section, option, val = sys.argv[1:5]
parser = configparser.ConfigParser(interpolation=None)
parser.optionxform = str
parser.read(path)
if section != "DEFAULT" and not parser.has_section(section):
    parser.add_section(section)
parser.set(section, option, val)
with open(path, "w") as f:
    parser.write(f)
"""


class Devstack:
    """Runs devstack/settings and devstack/plugin.sh phases against the stubs."""

    def __init__(self, tmp_path: Path) -> None:
        self.root = tmp_path
        self.record = tmp_path / "record"
        self.conf_dir = tmp_path / "etc" / "ringfleet"
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        dbsync_script = self.bin / "ringfleet-dbsync"
        dbsync_script.write_text('#!/bin/bash\nprintf "dbsync\\t%s\\n" "$*" >> "$RECORD"\n')
        dbsync_script.chmod(0o755)
        (tmp_path / "stubs.sh").write_text(STUBS)
        (tmp_path / "iniset.py").write_text(INISET)

    def run(self, *phases: str, check: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
        lines = [f'source "{self.root}/stubs.sh"', f'source "{DEVSTACK}/settings"']
        lines += [f'source "{DEVSTACK}/plugin.sh" {phase}' for phase in phases]
        full_env = {
            "PATH": os.environ["PATH"],
            "PYTHON": sys.executable,
            "INISET": str(self.root / "iniset.py"),
            "RECORD": str(self.record),
            "FAKE_BIN": str(self.bin),
            "DEST": str(self.root / "dest"),
            "DATA_DIR": str(self.root / "data"),
            "STACK_USER": subprocess.run(
                ["id", "-un"], capture_output=True, text=True, check=True
            ).stdout.strip(),
            "SERVICE_HOST": "10.0.0.5",
            "HOST_IP": "10.0.0.5",
            "ENABLE_DEBUG_LOG_LEVEL": "True",
            "ENABLED_SERVICES": "mysql,rabbit,etcd3",
            "DISABLED_SERVICES": "",
            "RINGFLEET_CONF_DIR": str(self.conf_dir),
            **env,
        }
        done = subprocess.run(
            ["bash", "-c", "\n".join(lines)],
            env=full_env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if check:
            assert done.returncode == 0, done.stdout + done.stderr
        return done

    def calls(self) -> list[list[str]]:
        if not self.record.exists():
            return []
        return [line.split("\t") for line in self.record.read_text().splitlines()]

    def ini(self, name: str) -> configparser.ConfigParser:
        # [DEFAULT] as a section like the others: no inheritance into the rest.
        parser = configparser.ConfigParser(interpolation=None, default_section="(none)")
        parser.optionxform = str  # type: ignore[assignment,method-assign]
        assert parser.read(self.conf_dir / name), name
        return parser


STACK = ("stack install", "stack post-config", "stack extra")


def _hostname() -> str:
    return subprocess.run(["hostname"], capture_output=True, text=True, check=True).stdout.strip()


def test_devstack_stack_configures_and_starts_the_fleet(tmp_path: Path) -> None:
    devstack = Devstack(tmp_path)
    devstack.run(*STACK)
    calls = devstack.calls()
    assert calls[0] == ["setup_develop", str(tmp_path / "dest" / "ringfleet")]

    conf = devstack.ini("ringfleet.conf")
    assert conf["DEFAULT"]["transport_url"] == "rabbit://stackrabbit:secret@10.0.0.5:5672/"
    assert conf["database"]["connection"].startswith("mysql+pymysql://")
    assert conf["database"]["connection"].split("?")[0].endswith("/ringfleet")
    url = conf["coordination"]["backend_url"]
    assert url == "etcd3+http://10.0.0.5:2379?membership_timeout=10"
    assert ttl_from_url(url) == 10.0

    # The database is created, then the schema, before anything starts.
    conf_path = str(devstack.conf_dir / "ringfleet.conf")
    rest = [c for c in calls if c[0] in {"recreate_database", "dbsync", "run_process"}]
    assert rest[0] == ["recreate_database", "ringfleet"]
    assert rest[1] == ["dbsync", f"--config-file {conf_path} upgrade"]

    started = [c[1:] for c in rest[2:]]
    assert [name for name, _cmd in started] == [
        "ringfleet-conductor",
        "ringfleet-agent-1",
        "ringfleet-agent-2",
        "ringfleet-agent-3",
    ]
    assert shlex.split(started[0][1]) == [
        str(devstack.bin / "ringfleet-conductor"),
        "--config-file",
        conf_path,
    ]
    hosts = []
    for i, (_name, cmd) in enumerate(started[1:], start=1):
        agent_file = str(devstack.conf_dir / f"agent-{i}.conf")
        assert shlex.split(cmd) == [
            str(devstack.bin / "ringfleet-compute-agent"),
            "--config-file",
            conf_path,
            "--config-file",
            agent_file,
        ]
        hosts.append(devstack.ini(f"agent-{i}.conf")["DEFAULT"]["host"])
    assert hosts == [f"{_hostname()}-agent-{i}" for i in (1, 2, 3)]


def _registered(conf: cfg.ConfigOpts, section: str, option: str) -> bool:
    if section == "DEFAULT":
        return option in conf and not isinstance(conf[option], cfg.ConfigOpts.GroupAttr)
    return section in conf and option in conf[section]


def test_devstack_config_uses_only_registered_options(tmp_path: Path) -> None:
    """Every option the plugin writes exists: a typo would be silently ignored."""
    devstack = Devstack(tmp_path)
    devstack.run("stack post-config")
    conductor, agent = _cli_conf("ringfleet-conductor"), _cli_conf("ringfleet-compute-agent")
    for name in ("ringfleet.conf", "agent-1.conf"):
        ini = devstack.ini(name)
        for section in ini.sections():
            for option in ini[section]:
                known = [_registered(c, section, option) for c in (conductor, agent)]
                assert any(known), f"{name}: [{section}] {option} is not a ringfleet option"


def test_devstack_subnode_runs_agents_only(tmp_path: Path) -> None:
    devstack = Devstack(tmp_path)
    # A subnode: etcd3 and the conductor run on the controller (SERVICE_HOST).
    # local.conf there: `disable_service ringfleet-conductor` (and no etcd3).
    devstack.run(
        *STACK,
        ENABLED_SERVICES="ringfleet-agent",
        DISABLED_SERVICES="ringfleet-conductor",
        HOST_IP="10.0.0.6",
        RINGFLEET_AGENTS="2",
    )
    names = [c[1] for c in devstack.calls() if c[0] == "run_process"]
    assert names == ["ringfleet-agent-1", "ringfleet-agent-2"]
    assert not [c for c in devstack.calls() if c[0] in {"dbsync", "recreate_database"}]
    conf = devstack.ini("ringfleet.conf")
    assert not conf.has_section("database")
    assert conf["coordination"]["backend_url"].startswith("etcd3+http://10.0.0.5:2379")


def test_devstack_one_agent_can_be_disabled(tmp_path: Path) -> None:
    devstack = Devstack(tmp_path)
    devstack.run(*STACK, DISABLED_SERVICES="ringfleet-agent-2")
    names = [c[1] for c in devstack.calls() if c[0] == "run_process"]
    assert names == ["ringfleet-conductor", "ringfleet-agent-1", "ringfleet-agent-3"]


def test_devstack_needs_etcd_or_a_coordination_url(tmp_path: Path) -> None:
    devstack = Devstack(tmp_path)
    done = devstack.run("stack post-config", check=False, ENABLED_SERVICES="mysql,rabbit")
    assert done.returncode != 0
    assert "etcd3" in done.stderr
    devstack.run(
        "stack post-config",
        ENABLED_SERVICES="mysql,rabbit",
        RINGFLEET_COORDINATION_URL="etcd3+http://[fd00::5]:2379",
    )
    url = devstack.ini("ringfleet.conf")["coordination"]["backend_url"]
    assert url == "etcd3+http://[fd00::5]:2379"


def test_devstack_ipv6_service_host_is_bracketed(tmp_path: Path) -> None:
    devstack = Devstack(tmp_path)
    devstack.run("stack post-config", SERVICE_HOST="fd00::5", HOST_IP="fd00::5")
    url = devstack.ini("ringfleet.conf")["coordination"]["backend_url"]
    assert url.startswith("etcd3+http://[fd00::5]:2379?")


def test_devstack_rejects_a_bad_agent_count(tmp_path: Path) -> None:
    done = Devstack(tmp_path).run("stack install", check=False, RINGFLEET_AGENTS="three")
    assert done.returncode != 0
    assert "RINGFLEET_AGENTS" in done.stderr


def test_devstack_unstack_stops_every_configured_agent_then_clean(tmp_path: Path) -> None:
    devstack = Devstack(tmp_path)
    devstack.run(*STACK)
    devstack.record.unlink()
    # RINGFLEET_AGENTS lowered between stack.sh and unstack.sh: agent 3 still runs.
    devstack.run("unstack", RINGFLEET_AGENTS="2")
    assert devstack.calls() == [
        ["stop_process", "ringfleet-agent-1"],
        ["stop_process", "ringfleet-agent-2"],
        ["stop_process", "ringfleet-agent-3"],
        ["stop_process", "ringfleet-conductor"],
    ]
    devstack.run("clean")
    assert not devstack.conf_dir.exists()
    assert not (tmp_path / "data" / "ringfleet").exists()


CLUSTER = "10.0.0.5:2379,10.0.0.6:2379,10.0.0.7:2379"


def test_devstack_etcd_gateway_fronts_an_etcd_cluster(tmp_path: Path) -> None:
    """tooz talks to one etcd endpoint: a local gateway makes it any live member."""
    devstack = Devstack(tmp_path)
    etcd = tmp_path / "etcd"
    etcd.write_text("#!/bin/sh\n")
    etcd.chmod(0o755)
    gateway = {
        "RINGFLEET_ETCD_GATEWAY": "True",
        "RINGFLEET_ETCD_ENDPOINTS": CLUSTER,
        "RINGFLEET_ETCD_BIN": str(etcd),
    }
    devstack.run(*STACK, **gateway)
    url = devstack.ini("ringfleet.conf")["coordination"]["backend_url"]
    assert url == "etcd3+http://127.0.0.1:23790?membership_timeout=10"
    assert ttl_from_url(url) == 10.0  # and it passes the start-up check
    started = [c[1:] for c in devstack.calls() if c[0] == "run_process"]
    assert [name for name, _cmd in started] == [
        "ringfleet-etcd-gateway",  # before anything uses it
        "ringfleet-conductor",
        "ringfleet-agent-1",
        "ringfleet-agent-2",
        "ringfleet-agent-3",
    ]
    assert shlex.split(started[0][1]) == [
        str(etcd),
        "gateway",
        "start",
        f"--endpoints={CLUSTER}",
        "--listen-addr=127.0.0.1:23790",
    ]
    devstack.record.unlink()
    devstack.run("unstack", **gateway)
    assert devstack.calls()[-2:] == [
        ["stop_process", "ringfleet-conductor"],
        ["stop_process", "ringfleet-etcd-gateway"],  # after whatever leaves through it
    ]


def test_devstack_etcd_gateway_defaults_and_refusals(tmp_path: Path) -> None:
    devstack = Devstack(tmp_path)
    etcd = tmp_path / "etcd"
    etcd.write_text("#!/bin/sh\n")
    etcd.chmod(0o755)
    devstack.run(
        *STACK,
        RINGFLEET_ETCD_GATEWAY="yes",
        RINGFLEET_ETCD_GATEWAY_PORT="2399",
        RINGFLEET_ETCD_BIN=str(etcd),
    )
    [gateway] = [c[2] for c in devstack.calls() if c[1:2] == ["ringfleet-etcd-gateway"]]
    assert "--endpoints=10.0.0.5:2379" in shlex.split(gateway)  # devstack's etcd3
    url = devstack.ini("ringfleet.conf")["coordination"]["backend_url"]
    assert url.startswith("etcd3+http://127.0.0.1:2399?")
    for env, says in (
        ({"RINGFLEET_ETCD_GATEWAY": "maybe"}, "RINGFLEET_ETCD_GATEWAY must be True or False"),
        (
            {"RINGFLEET_ETCD_GATEWAY": "True", "RINGFLEET_COORDINATION_URL": "etcd3+http://h"},
            "not both",
        ),
        (
            {"RINGFLEET_ETCD_GATEWAY": "True", "RINGFLEET_ETCD_GATEWAY_PORT": "x"},
            "RINGFLEET_ETCD_GATEWAY_PORT",
        ),
    ):
        root = tmp_path / f"refused-{len(list(tmp_path.glob('refused-*')))}"
        root.mkdir()
        done = Devstack(root).run("stack post-config", check=False, **env)
        assert done.returncode != 0, env
        assert says in done.stderr


API = "ringfleet-api.service"


def test_api_unit_runs_the_application_factory_under_gunicorn() -> None:
    unit = parse_unit(UNITS / API)
    argv = shlex.split(value(unit, "Service", "ExecStart"))
    assert argv[0] == "/usr/bin/gunicorn"
    assert argv[-1] == "conductor.api.wsgi:init_application()"
    assert "--preload" not in argv  # each worker opens its own RPC transport
    assert value(unit, "Service", "Environment") == f"RINGFLEET_API_CONFIG={SHARED_CONF}"
    assert value(unit, "Service", "User") == "ringfleet"
    assert value(unit, "Service", "NoNewPrivileges") == "yes"
    # The factory the unit names exists and reads that variable.
    assert wsgi.CONFIG_ENV == "RINGFLEET_API_CONFIG" and callable(wsgi.init_application)


def test_devstack_runs_the_api_when_enabled(tmp_path: Path) -> None:
    devstack = Devstack(tmp_path)
    devstack.run(*STACK, ENABLED_SERVICES="mysql,rabbit,etcd3,ringfleet-api")
    calls = devstack.calls()
    assert calls[0] == [
        "setup_develop",
        str(tmp_path / "dest" / "ringfleet"),
        "api-server,keystone",
    ]
    conf = devstack.ini("ringfleet.conf")
    assert conf["api"]["auth_strategy"] == "noauth"  # no keystone here
    started = {c[1]: c[2] for c in calls if c[0] == "run_process"}
    argv = shlex.split(started["ringfleet-api"])
    conf_path = str(devstack.conf_dir / "ringfleet.conf")
    assert argv[:2] == ["env", f"RINGFLEET_API_CONFIG={conf_path}"]
    assert argv[2] == str(devstack.bin / "gunicorn")
    assert argv[argv.index("--bind") + 1] == "127.0.0.1:6486"
    assert argv[-1] == "conductor.api.wsgi:init_application()"
    # Every option written is one the API registers.
    api_conf = cfg.ConfigOpts()
    rpc.register_opts(api_conf)
    common_conf.register_opts(api_conf, common_conf.API)
    oslo_log.register_options(api_conf)
    for section in conf.sections():
        for option in conf[section]:
            if section in ("api", "DEFAULT"):
                assert _registered(api_conf, section, option), (section, option)
    devstack.run("unstack", ENABLED_SERVICES="mysql,rabbit,etcd3,ringfleet-api")
    assert ["stop_process", "ringfleet-api"] in devstack.calls()
