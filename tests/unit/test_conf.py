# SPDX-License-Identifier: Apache-2.0
"""Tests of the option groups, the sample config and the membership factory."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from keystoneauth1 import loading as ks_loading
from oslo_config import cfg
from oslo_middleware import opts as middleware_opts

from compute_agent.cmd import agent as agent_cmd
from conductor.cmd import conductor as conductor_cmd
from conductor.common import conf as common_conf
from conductor.common import rpc
from conductor.common.conf import default
from conductor.common.conf import ironic as ironic_conf
from conductor.common.conf import placement as placement_conf
from conductor.common.conf.groups import ListedOpts
from conductor.common.conf.opts import Namespace
from conductor.common.coordination import membership_from_conf
from conductor.common.exception import ConfigurationError, RingfleetError
from conductor.common.prepare import prepare_service

REPO = Path(__file__).resolve().parents[2]


def make_conf(tmp_path: Path, text: str) -> cfg.ConfigOpts:
    path = tmp_path / "ringfleet.conf"
    path.write_text(text)
    conf = cfg.ConfigOpts()
    common_conf.register_opts(conf, common_conf.CONDUCTOR)
    conf(["--config-file", str(path)], project="ringfleet", default_config_files=[])
    return conf


#: Each kind of process: its namespace (what it registers beside the shared
#: groups), and what it also registers of a library's options, listed by that
#: library's own namespace.
ROLES: dict[str, tuple[Namespace, ListedOpts]] = {
    "conductor": (common_conf.CONDUCTOR, []),
    "compute_agent": (common_conf.COMPUTE_AGENT, []),
    "api": (common_conf.API, middleware_opts.list_opts_sizelimit()),
}


def registering(namespace: Namespace) -> Callable[[cfg.ConfigOpts], None]:
    """What a process of ``namespace`` does to register its options."""
    return lambda conf: common_conf.register_opts(conf, namespace)


def registered_options(register: Callable[[cfg.ConfigOpts], None]) -> set[tuple[str, str]]:
    """(group, option) of every option ``register`` puts on a fresh ConfigOpts."""
    conf = cfg.ConfigOpts()
    before = set(conf)
    register(conf)
    groups = {name for name in conf if isinstance(conf[name], cfg.ConfigOpts.GroupAttr)}
    registered = {("DEFAULT", name) for name in set(conf) - before - groups}
    for group in groups:
        registered |= {(group, name) for name in conf[group]}
    return registered


@pytest.mark.parametrize("role", sorted(ROLES))
def test_every_registered_option_is_listed(role: str) -> None:
    """A role registers the shared options and its own: exactly what the config
    generator lists for it (namespaces ringfleet.common and ringfleet.<role>)."""
    namespace, library = ROLES[role]
    assert namespace.name == f"ringfleet.{role}"
    listing = common_conf.COMMON.list_opts() + namespace.list_opts() + library
    listed = {
        (getattr(group, "name", group), opt.dest)
        for group, group_opts in listing
        for opt in group_opts
    }
    # keystoneauth registers an auth plugin's own options only when it loads
    # the plugin named by [ironic] auth_type; the sample lists the password
    # plugin's, the one most deployments use.
    plugin = {
        (group, opt.dest)
        for group in ("ironic", "placement")
        for opt in ks_loading.get_auth_plugin_conf_options("password")
    }
    registered = registered_options(registering(namespace))
    assert listed - (plugin - registered) == registered
    for group, group_opts in common_conf.COMMON.list_opts() + namespace.list_opts():
        for opt in group_opts:
            ours = {"ironic": ironic_conf.opts, "placement": placement_conf.opts}
            name = getattr(group, "name", group)
            if name in ours and opt not in ours[name]:
                continue  # keystoneauth's own options, with keystoneauth's help
            assert opt.help and len(opt.help) > 20, opt.dest


CONDUCTOR_GROUPS = {"conductor", "database", "scheduler"}


def test_an_agent_registers_no_conductor_option_group(tmp_path: Path) -> None:
    """An agent carries only what it reads: the shared groups and its own, never
    the conductor's [conductor], [database] and [scheduler]."""
    empty = tmp_path / "ringfleet.conf"
    empty.write_text("")
    conf = agent_cmd.configure(["ringfleet-compute-agent", "--config-file", str(empty)])
    assert not CONDUCTOR_GROUPS & set(conf)
    assert {"compute_agent", "simulated_driver", "coordination", "ring", "metrics"} <= set(conf)
    registered = registered_options(registering(common_conf.COMPUTE_AGENT))
    assert {group for group, _ in registered}.isdisjoint(CONDUCTOR_GROUPS)


def test_a_conductor_registers_its_option_groups(tmp_path: Path) -> None:
    empty = tmp_path / "ringfleet.conf"
    empty.write_text("")
    conf = conductor_cmd.configure(["ringfleet-conductor", "--config-file", str(empty)])
    assert CONDUCTOR_GROUPS | {"coordination", "ring", "metrics"} <= set(conf)
    assert not {"compute_agent", "simulated_driver"} & set(conf)


def test_defaults(tmp_path: Path) -> None:
    conf = make_conf(tmp_path, "")
    assert conf.coordination.backend_url is None
    assert conf.coordination.group == "ringfleet-compute"
    assert conf.coordination.watch_interval == 1.0
    assert conf.ring.version == 1
    assert conf.ring.weight == 1.0
    assert conf.host


@pytest.mark.parametrize(
    ("text", "option"),
    [
        ("[ring]\nversion = 0\n", "version"),
        ("[ring]\nweight = 0\n", "weight"),
        ("[coordination]\nwatch_interval = 5\n", "watch_interval"),
    ],
)
def test_out_of_range_values_name_the_option(tmp_path: Path, text: str, option: str) -> None:
    conf = make_conf(tmp_path, text)
    with pytest.raises(cfg.ConfigFileValueError, match=option):
        getattr(conf, "ring" if "ring" in text else "coordination")[option]


@pytest.mark.parametrize("bad", ["latest", "1", "1.x", "v1.1", "0.9"])
def test_an_upgrade_level_is_a_version(tmp_path: Path, bad: str) -> None:
    conf = make_conf(tmp_path, f"[upgrade_levels]\ncompute = {bad}\n")
    with pytest.raises(cfg.ConfigFileValueError, match="compute"):
        conf.upgrade_levels.compute  # noqa: B018 (the read is the check)


def test_upgrade_levels_pin_nothing_by_default(tmp_path: Path) -> None:
    conf = make_conf(tmp_path, "[upgrade_levels]\nconductor = 1.3\n")
    assert (conf.upgrade_levels.compute, conf.upgrade_levels.conductor) == (None, "1.3")


def test_membership_needs_a_backend_url(tmp_path: Path) -> None:
    conf = make_conf(tmp_path, "")
    with pytest.raises(ConfigurationError) as err:
        membership_from_conf(conf)
    assert (err.value.group, err.value.option) == ("coordination", "backend_url")
    assert isinstance(err.value, RingfleetError)


@pytest.mark.parametrize(
    ("text", "group", "option"),
    [
        ("[coordination]\nbackend_url = memcached://x\n", "coordination", "backend_url"),
        (
            "[coordination]\nbackend_url = etcd3+http://127.0.0.1:2379,127.0.0.1:22379\n",
            "coordination",
            "backend_url",
        ),
        # An empty [DEFAULT] host no longer gets this far: its type refuses it.
    ],
)
def test_membership_errors_name_the_option(
    tmp_path: Path, text: str, group: str, option: str
) -> None:
    conf = make_conf(tmp_path, text)
    with pytest.raises(ConfigurationError) as err:
        membership_from_conf(conf)
    assert (err.value.group, err.value.option) == (group, option)
    assert f"[{group}] {option}" in str(err.value)


def test_membership_from_conf_uses_the_options(tmp_path: Path) -> None:
    conf = make_conf(
        tmp_path,
        "[DEFAULT]\nhost = agent-7\n"
        "[coordination]\nbackend_url = file:///tmp/x?timeout=4\ngroup = g1\n"
        "watch_interval = 0.5\n[ring]\nversion = 3\nweight = 2.5\n",
    )
    membership = membership_from_conf(conf, capabilities={"groups": ["rack1"]})
    assert membership.member_id == "agent-7"
    assert membership.ttl == 4.0
    assert membership._capabilities["ring_version"] == 3
    assert membership._capabilities["weight"] == 2.5
    assert membership._capabilities["groups"] == ["rack1"]


def test_sample_config_is_up_to_date(tmp_path: Path) -> None:
    """etc/ringfleet/ringfleet.conf.sample is what oslo-config-generator makes."""
    generated = tmp_path / "sample.conf"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "oslo_config.generator",
            "--config-file",
            str(REPO / "etc/ringfleet/ringfleet-config-generator.conf"),
            "--output-file",
            str(generated),
        ],
        cwd=REPO,
        check=True,
    )
    committed = (REPO / "etc/ringfleet/ringfleet.conf.sample").read_text()
    assert generated.read_text() == committed, (
        "the sample config is out of date: run oslo-config-generator "
        "--config-file etc/ringfleet/ringfleet-config-generator.conf"
    )


def test_overrides_stay_with_their_own_conf() -> None:
    """Several services in one process (the embedded demo) each have a ConfigOpts:
    an override on one must not show through another (oslo.config shares a
    registered OptGroup's option table between every ConfigOpts it is given to)."""
    first, second = cfg.ConfigOpts(), cfg.ConfigOpts()
    for conf in (first, second):
        common_conf.register_opts(conf, common_conf.CONDUCTOR, common_conf.COMPUTE_AGENT)
    first.set_override("backend_url", "file:///tmp/first?timeout=2", group="coordination")
    first.set_override("rehome_grace", 1.0, group="conductor")
    first.set_override("step_duration", 0.0, group="simulated_driver")
    assert second.coordination.backend_url is None
    assert second.conductor.rehome_grace == 120.0
    assert second.simulated_driver.step_duration == 0.2
    assert first.coordination.backend_url == "file:///tmp/first?timeout=2"
    # Registering again (the simulated driver does) keeps the override.
    common_conf.register_opts(first, common_conf.COMPUTE_AGENT)
    assert first.simulated_driver.step_duration == 0.0


@pytest.mark.parametrize(
    ("given", "host"),
    [
        ("Agent-1", "agent-1"),
        ("AGENT-1.Example.ORG", "agent-1.example.org"),
        ("10.0.0.7", "10.0.0.7"),
    ],
)
def test_host_is_a_dns_name_in_lower_case(tmp_path: Path, given: str, host: str) -> None:
    assert make_conf(tmp_path, f"[DEFAULT]\nhost = {given}\n").host == host


@pytest.mark.parametrize("bad", ["agent 1", "", "agent-1!"])
def test_a_host_that_is_no_dns_name_stops_the_service_at_start(
    tmp_path: Path, bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ringfleet.conf"
    path.write_text(f"[DEFAULT]\nhost = {bad}\n")
    with pytest.raises(SystemExit) as stopped:
        prepare_service(["ringfleet-compute-agent", "--config-file", str(path)], cfg.ConfigOpts())
    assert stopped.value.code == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("ringfleet-compute-agent: [DEFAULT] host: ")
    assert "is not a valid host address" in line


def test_my_ip_is_the_configured_address_else_novas_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert default.my_ip(make_conf(tmp_path, "[DEFAULT]\nmy_ip = 192.0.2.7\n")) == "192.0.2.7"
    monkeypatch.setattr(default.netutils, "get_my_ipv4", lambda: "198.51.100.3")
    assert default.my_ip(make_conf(tmp_path, "")) == "198.51.100.3"


def test_a_my_ip_that_is_no_address_stops_the_service_at_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ringfleet.conf"
    path.write_text("[DEFAULT]\nmy_ip = agent-1\n")
    with pytest.raises(SystemExit) as stopped:
        prepare_service(["ringfleet-compute-agent", "--config-file", str(path)], cfg.ConfigOpts())
    assert stopped.value.code == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("ringfleet-compute-agent: [DEFAULT] my_ip: ")


@pytest.mark.parametrize(
    ("service", "prog"),
    [
        ("conductor.cmd.conductor", "ringfleet-conductor"),
        ("compute_agent.cmd.agent", "ringfleet-compute-agent"),
    ],
)
@pytest.mark.parametrize(
    ("problem", "said"),
    [
        ("missing", "Failed to find some config files: {path}"),
        ("a directory", "cannot read configuration file {path}: Is a directory"),
        ("malformed", "Failed to parse {path}: "),
    ],
)
def test_a_configuration_file_it_cannot_use_stops_a_service_in_one_line(
    tmp_path: Path, service: str, prog: str, problem: str, said: str
) -> None:
    path = tmp_path / "ringfleet.conf"
    if problem == "a directory":
        path.mkdir()
    elif problem == "malformed":
        path.write_text("[DEFAULT\nhost = a\n")
    done = subprocess.run(
        [sys.executable, "-m", service, "--config-file", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (done.returncode, done.stdout) == (1, ""), done
    [line] = done.stderr.splitlines()
    assert line.startswith(f"{prog}: {said.format(path=path)}")


@pytest.mark.parametrize(
    ("text", "pool"),
    [
        ("", 64 + 10),  # oslo.messaging's 64 executor threads, and the process's own
        ("[DEFAULT]\nexecutor_thread_pool_size = 100\n", 110),
        (
            "[DEFAULT]\nexecutor_thread_pool_size = 100\n"
            "[oslo_messaging_rabbit]\nrpc_conn_pool_size = 7\n",
            7,
        ),
    ],
    ids=["defaults", "more-executor-threads", "set-by-the-operator"],
)
def test_the_send_pool_holds_every_thread_that_sends(tmp_path: Path, text: str, pool: int) -> None:
    """Every RPC executor thread sends its reply through the pool: its
    default follows ``executor_thread_pool_size``; a value the operator set
    stays."""
    conf = make_conf(tmp_path, text)
    rpc.register_opts(conf)
    conf.reload_config_files()
    rpc.size_send_pool(conf)
    assert conf.oslo_messaging_rabbit.rpc_conn_pool_size == pool


def test_the_sample_shows_the_send_pool_a_service_gets(tmp_path: Path) -> None:
    """The sample config's ``rpc_conn_pool_size`` is the one a service with the
    default ``executor_thread_pool_size`` runs with, not oslo.messaging's 30."""
    conf = make_conf(tmp_path, "")
    rpc.register_opts(conf)
    conf.reload_config_files()
    rpc.size_send_pool(conf)
    sample = (REPO / "etc/ringfleet/ringfleet.conf.sample").read_text()
    section = sample.split("[oslo_messaging_rabbit]", 1)[1].split("\n[", 1)[0]
    assert f"#rpc_conn_pool_size = {conf.oslo_messaging_rabbit.rpc_conn_pool_size}\n" in section
