# SPDX-License-Identifier: Apache-2.0
"""``ringfleet`` starts without the services' heavy libraries (issue 36, point 4).

``ringfleet --help`` loads every command class of the ``ringfleet.cli``
entry points; a command module that imported oslo.messaging, SQLAlchemy,
openstacksdk or the demo's whole fleet at module level made every
``--help`` (and every command up to its first call) cost seconds of CPU.
The commands import those where they use them.  What is imported is
checked here, in a fresh interpreter, rather than the time taken (the
machine is shared: ``benchmarks/cli_start_bench.py`` measures the time).
So is the other saving, every command's epilog without cliff's search of
every installed distribution: the same text as cliff's.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cliff.app import App
from cliff.command import Command
from cliff.commandmanager import CommandManager

from conductor.cli.app import COMMAND_NAMESPACE, RingfleetApp
from conductor.cli.command import own_epilog

REPO = Path(__file__).resolve().parents[2]

#: What neither the help nor a command up to its first HTTP call may import.
HEAVY = (
    "oslo_messaging",
    "kombu",
    "sqlalchemy",
    "alembic",
    "openstack",
    "tooz",
    "conductor.service",
    "conductor.db",
    "fleet_demo.scenario",
    "fleet_demo.fleet",
)

#: Runs in a fresh interpreter; prints, per case, which of HEAVY were imported
#: by then (the cases run one after the other: what one imported stays).
_SCRIPT = textwrap.dedent(
    """
    import contextlib, io, json, socket, sys
    from importlib import metadata

    HEAVY = {heavy!r}

    def heavy():
        return [h for h in HEAVY if any(m == h or m.startswith(h + ".") for m in sys.modules)]

    from conductor.cmd import cli

    found = {{}}
    statuses = {{}}

    def run(case, argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                statuses[case] = cli.main(argv)
            except SystemExit as exc:  # cliff's own --help exits
                statuses[case] = exc.code or 0
        found[case] = heavy()
        return out.getvalue(), err.getvalue()

    found["import"] = heavy()
    help_text, _ = run("--help", ["--help"])
    for entry_point in metadata.entry_points(group="ringfleet.cli"):
        entry_point.load()
    found["entry points"] = heavy()
    for entry_point in metadata.entry_points(group="ringfleet.cli"):
        run(entry_point.name + " --help", [*entry_point.name.split(), "--help"])
    # A port bound but not listening: the first call is refused at once.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        endpoint = "http://127.0.0.1:%d" % sock.getsockname()[1]
        _, error = run("node list", ["--os-endpoint", endpoint, "node", "list"])
    print(json.dumps({{"found": found, "statuses": statuses, "help": help_text,
                       "error": error}}))
    """
).format(heavy=HEAVY)


def _run() -> dict[str, dict[str, object]]:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, dict[str, object]] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_help_and_commands_import_no_heavy_library() -> None:
    result = _run()
    statuses, found = result["statuses"], result["found"]
    # The runs did what they should: help for every command, one refused call.
    commands = {name.removesuffix(" --help") for name in statuses if name.endswith(" --help")}
    assert len(commands) > 30
    assert "node list" in commands and "demo" in commands
    assert all(statuses[f"{c} --help"] == 0 for c in commands), statuses
    assert "node list" in str(result["help"]) and "demo" in str(result["help"])
    assert statuses["node list"] == 1
    assert str(result["error"]).startswith("ringfleet node list: error: no answer from")
    assert {case: modules for case, modules in found.items() if modules} == {}


def test_the_benchmark_measures_every_command(tmp_path: Path) -> None:
    """``benchmarks/cli_start_bench.py`` runs (one round, no prior art) and
    reports every command; the numbers themselves are not checked."""
    if not (Path(sys.executable).parent / "ringfleet").exists():
        pytest.skip("no ringfleet console script next to this Python")
    report = tmp_path / "cli.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.cli_start_bench",
            "--runs",
            "1",
            "--openstack",
            "",
            "--json",
            str(report),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(report.read_text(encoding="utf-8"))
    assert found["commands"] == [
        "ringfleet --help",
        "ringfleet node list --help",
        "ringfleet demo --help",
        "ringfleet --os-endpoint URL node list",
        "python -c pass (the floor)",
    ]
    for name in found["commands"]:
        (cpu,) = found["results"][name]["this tree"]["cpu_s"]
        assert cpu > 0
    assert [goal["status"] in ("PASS", "MISS") for goal in found["goals"]] == [True] * 4
    assert "ringfleet --help" in done.stdout and "goals" in done.stdout


def test_the_epilogs_are_cliffs_without_its_search_of_the_distributions() -> None:
    """Every command's epilog under ``ringfleet`` is what cliff's would be
    (:func:`conductor.cli.command.own_epilog` only skips cliff's search of every
    installed distribution, for a line it would not print); under another
    application cliff's own is used; the command's examples come first."""
    app = RingfleetApp()
    other = App("another application", "1", CommandManager(COMMAND_NAMESPACE))
    names = sorted(app.command_manager)
    assert len(names) > 30
    for name, entry_point in names:
        if name == "help":
            continue
        command = entry_point.load()(app, None, cmd_name=name)
        parts = (command.examples_text(), Command.get_epilog(command))
        assert command.get_epilog() == "\n\n".join(p for p in parts if p), name
        assert own_epilog(entry_point.load()(other, None, cmd_name=name)) is None


#: What a command in RPC mode does not need: the HTTP client's and a Keystone login's.
HTTP_ONLY = ("keystoneauth1", "openstack", "requests")

_RPC_SCRIPT = textwrap.dedent(
    """
    import contextlib, io, json, socket, sys

    from conductor.cmd import cli

    with socket.socket() as sock:  # bound, not listening: the broker refuses
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        with open(sys.argv[1], "w") as conf:
            conf.write("[DEFAULT]\\ntransport_url = rabbit://g:g@127.0.0.1:%d/\\n" % port)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            status = cli.main(["--config-file", sys.argv[1], "--rpc-timeout", "1",
                               "node", "import", sys.argv[2]])
    found = sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[3:]))
    print(json.dumps({"status": status, "error": err.getvalue(), "found": found}))
    """
)


def test_a_command_in_rpc_mode_imports_no_http_or_keystone_library(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("name,resource_class\nn1,baremetal\n")
    done = subprocess.run(
        [sys.executable, "-c", _RPC_SCRIPT, str(tmp_path / "cli.conf"), str(nodes), *HTTP_ONLY],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["status"] == 1
    assert "cannot reach the broker" in result["error"], result["error"]
    assert result["found"] == []
