# SPDX-License-Identifier: Apache-2.0
"""The compute driver layer: interface, loading, the bare-metal simulator, its action log."""

from __future__ import annotations

import json
import logging
import multiprocessing
import pickle
import sqlite3
import sys
import textwrap
import threading
import time
import uuid as uuidlib
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest
from oslo_config import cfg
from oslo_messaging._drivers import common as rpc_common
from stevedore import _cache
from stevedore.driver import DriverManager
from stevedore.extension import Extension, ExtensionManager

from compute_agent.drivers import (
    DRIVER_NAMESPACE,
    ActionContext,
    BackendNode,
    ComputeDriver,
    PowerTarget,
    ProgressCallback,
    load_driver,
)
from compute_agent.drivers.simulated import DEPLOY_STEPS, SimulatedDriver, node_store
from compute_agent.drivers.simulated.action_log import MAX_LINE, ActionLog, check_fencing, read_log
from compute_agent.drivers.simulated.driver import FOLLOW_EVERY
from conductor.common import rpc
from conductor.common.conf import simulated_driver as simulated_conf
from conductor.common.exception import (
    ActionLogError,
    ConfigurationError,
    DriverError,
    InvalidInput,
    NodeNotBuildable,
    RingfleetError,
)
from conductor.common.objects import Node, PowerState, ProvisionState

HOST = "agent-1"
FAST = {"step_duration": 0, "clean_duration": 0, "power_duration": 0}


def make_conf(directory: Path, **values: object) -> cfg.ConfigOpts:
    # A config file, not set_override: oslo.config shares a module-level
    # OptGroup's overrides between ConfigOpts instances.
    path = directory / f"{uuidlib.uuid4()}.conf"
    lines = [f"{key} = {value}" for key, value in values.items()]
    path.write_text("[simulated_driver]\n" + "\n".join(lines) + "\n")
    conf = cfg.ConfigOpts()
    simulated_conf.OPTIONS.register(conf)
    conf(["--config-file", str(path)], project="ringfleet", default_config_files=[])
    return conf


def make_driver(directory: Path, host: str = HOST, **values: object) -> SimulatedDriver:
    return SimulatedDriver(make_conf(directory, **{**FAST, **values}), host)


def make_node(**fields: Any) -> Node:
    fields.setdefault("uuid", str(uuidlib.uuid4()))
    fields.setdefault("name", f"node-{fields['uuid'][:8]}")
    fields.setdefault("resource_class", "baremetal")
    return Node(**fields)


def ctx_for(
    node: Node, host: str = HOST, epoch: int = 1, instance: str | None = None
) -> ActionContext:
    return ActionContext(node.uuid, host, epoch, instance or str(uuidlib.uuid4()))


def no_progress(step: str) -> None:
    pass


# -- the interface --------------------------------------------------------------------------


def test_action_context_validates_and_derives_from_the_node() -> None:
    node = make_node(owner=HOST, owner_epoch=7, instance_uuid="inst-1")
    ctx = ActionContext.for_node(node, HOST)
    assert ctx == ActionContext(node.uuid, HOST, 7, "inst-1")
    assert ActionContext.for_node(node, HOST, "inst-2").instance_uuid == "inst-2"
    with pytest.raises(AttributeError):
        ctx.epoch = 8  # type: ignore[misc]
    for bad in ({"epoch": -1}, {"epoch": True}, {"epoch": "1"}, {"host": ""}, {"node_uuid": ""}):
        kwargs: dict[str, Any] = {"node_uuid": "n", "host": "h", "epoch": 1, **bad}
        with pytest.raises(ValueError, match=next(iter(bad))):
            ActionContext(**kwargs)


def test_the_interface_is_abstract(tmp_path: Path) -> None:
    class Incomplete(ComputeDriver):
        pass

    with pytest.raises(TypeError, match="abstract"):
        Incomplete(make_conf(tmp_path), HOST)  # type: ignore[abstract]


def test_a_context_for_another_node_or_agent_is_a_bug(tmp_path: Path) -> None:
    driver = make_driver(tmp_path)
    node, other = make_node(), make_node()
    with pytest.raises(ValueError, match="not " + node.uuid):
        driver.deploy(ctx_for(other), node, no_progress)
    with pytest.raises(ValueError, match="agent-2"):
        driver.set_power(ctx_for(node, host="agent-2"), node, "power on")
    assert driver.node_state(node.uuid) is None


def test_driver_error_rebuilds_from_kwargs_and_pickles() -> None:
    error = DriverError("node-1", "deploy", "disk on fire")
    assert str(error) == "deploy failed on node node-1: disk on fire"
    assert error.kwargs == {"node_uuid": "node-1", "action": "deploy", "reason": "disk on fire"}
    for copy in (DriverError(**error.kwargs), pickle.loads(pickle.dumps(error))):
        assert (copy.node_uuid, copy.action, copy.reason, str(copy)) == (
            "node-1",
            "deploy",
            "disk on fire",
            str(error),
        )
    log_error = pickle.loads(pickle.dumps(ActionLogError("/x.log", 3, "torn")))
    assert (log_error.path, log_error.line, str(log_error)) == ("/x.log", 3, "/x.log:3: torn")
    assert isinstance(log_error, ValueError)


@pytest.mark.parametrize(
    "error", [DriverError("node-1", "set_power", "BMC timeout"), ActionLogError("/l", 2, "torn")]
)
def test_driver_errors_travel_over_rpc_as_themselves(error: RingfleetError) -> None:
    try:
        raise error
    except RingfleetError:
        data = rpc_common.serialize_remote_exception(sys.exc_info())
    remote = rpc_common.deserialize_remote_exception(data, rpc.ALLOWED_EXMODS)
    assert isinstance(remote, type(error))
    assert remote.kwargs == error.kwargs
    assert str(remote).startswith(str(error))


# -- loading -----------------------------------------------------------------------------------


class FakeDriver(ComputeDriver):
    def deploy(
        self, ctx: ActionContext, node: Node, progress: ProgressCallback, spec: Any = None
    ) -> None:
        progress("done")

    def destroy(self, ctx: ActionContext, node: Node) -> None:
        pass

    def set_power(self, ctx: ActionContext, node: Node, target: PowerTarget) -> PowerState:
        return PowerState.ON

    def get_power_state(self, ctx: ActionContext, node: Node) -> PowerState:
        return PowerState.ON

    def inspect(self, ctx: ActionContext, node: Node) -> BackendNode:
        return BackendNode(ProvisionState.AVAILABLE, PowerState.ON, None)


class BrokenDriver(FakeDriver):
    def __init__(self, conf: cfg.ConfigOpts, host: str) -> None:
        raise RuntimeError("no BMC credentials")


class NotADriver:
    pass


def test_manager(name: str, plugin: object) -> DriverManager[Any]:
    entry_point = EntryPoint(name, f"tests:{name}", DRIVER_NAMESPACE)
    return DriverManager.make_test_instance(
        Extension(name, entry_point, plugin, None),  # type: ignore[arg-type]
        namespace=DRIVER_NAMESPACE,
    )


test_manager.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


def test_load_through_a_stevedore_test_manager(tmp_path: Path) -> None:
    conf = make_conf(tmp_path)
    driver = load_driver("fake", conf, HOST, manager=test_manager("fake", FakeDriver))
    assert isinstance(driver, FakeDriver)
    assert (driver.conf, driver.host) == (conf, HOST)


@pytest.mark.parametrize(
    ("name", "plugin", "message"),
    [
        ("other", FakeDriver, r"unknown driver 'other'.*known: fake\)"),
        ("fake", NotADriver, "not a subclass of compute_agent.drivers.base.ComputeDriver"),
        ("fake", FakeDriver(cfg.ConfigOpts(), HOST), "not a subclass"),
        ("fake", BrokenDriver, "fake failed to start: RuntimeError: no BMC credentials"),
    ],
)
def test_unusable_drivers_are_configuration_errors(
    tmp_path: Path, name: str, plugin: object, message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message) as caught:
        load_driver(name, make_conf(tmp_path), HOST, manager=test_manager("fake", plugin))
    assert (caught.value.group, caught.value.option) == ("compute_agent", "driver")


def test_a_driver_registered_twice_is_refused(tmp_path: Path) -> None:
    extensions = [
        Extension("fake", EntryPoint("fake", f"pkg{i}:Fake", DRIVER_NAMESPACE), FakeDriver, None)
        for i in (1, 2)
    ]
    manager = ExtensionManager.make_test_instance(extensions, namespace=DRIVER_NAMESPACE)
    with pytest.raises(ConfigurationError, match=r"more than once \(pkg1:Fake, pkg2:Fake\)"):
        load_driver("fake", make_conf(tmp_path), HOST, manager=manager)


def test_the_simulated_driver_loads_by_name(tmp_path: Path) -> None:
    # Through its entry point: the one place ringfleet's drivers are declared.
    driver = load_driver("simulated", make_conf(tmp_path), HOST)
    assert isinstance(driver, SimulatedDriver)
    assert driver.host == HOST
    driver.close()
    # So a manager without it does not know it.
    with pytest.raises(ConfigurationError, match=r"unknown driver 'simulated'.*known: fake\)"):
        load_driver("simulated", make_conf(tmp_path), HOST, manager=test_manager("fake", 1))


def test_the_drivers_own_configuration_error_is_passed_on(tmp_path: Path) -> None:
    conf = make_conf(tmp_path, step_durations="flashing firmware:1")
    with pytest.raises(ConfigurationError, match="unknown step 'flashing firmware'") as caught:
        load_driver("simulated", conf, HOST)
    assert (caught.value.group, caught.value.option) == ("simulated_driver", "step_durations")


PLUGIN_MODULE = "ringfleet_test_compute_drivers"


@pytest.fixture
def installed_drivers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A distribution on sys.path registering a working and a broken driver."""
    site = tmp_path / "site"
    site.mkdir()
    (site / f"{PLUGIN_MODULE}.py").write_text(
        textwrap.dedent(
            """
            from tests.unit.test_drivers import FakeDriver

            class RackDriver(FakeDriver):
                pass
            """
        )
    )
    dist = site / f"{PLUGIN_MODULE}-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PLUGIN_MODULE}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        f"[{DRIVER_NAMESPACE}]\n"
        f"rack = {PLUGIN_MODULE}:RackDriver\n"
        f"missing = {PLUGIN_MODULE}_missing:Nothing\n"
        f"simulated = {PLUGIN_MODULE}:RackDriver\n"
    )
    # Keep stevedore's entry-point cache out of the home directory.
    cache = _cache.Cache(cache_dir=str(tmp_path / "cache"))
    monkeypatch.setattr(_cache, "get_group_all", cache.get_group_all)
    monkeypatch.setattr(_cache, "get_group_named", cache.get_group_named)
    monkeypatch.setattr(ExtensionManager, "ENTRY_POINT_CACHE", {})  # per-process memo
    monkeypatch.syspath_prepend(str(site))
    yield site
    sys.modules.pop(PLUGIN_MODULE, None)


def test_drivers_load_through_installed_entry_points(
    installed_drivers: Path, tmp_path: Path
) -> None:
    driver = load_driver("rack", make_conf(tmp_path), HOST)
    assert type(driver).__module__ == PLUGIN_MODULE
    assert type(driver).__name__ == "RackDriver"
    with pytest.raises(ConfigurationError, match="cannot load driver missing") as caught:
        load_driver("missing", make_conf(tmp_path), HOST)
    assert "ModuleNotFoundError" in caught.value.reason
    # Two distributions registering one name: neither is picked.
    with pytest.raises(ConfigurationError, match="driver simulated is registered more than once"):
        load_driver("simulated", make_conf(tmp_path), HOST)
    # Every installed name is listed, none of them imported.
    with pytest.raises(
        ConfigurationError, match=r"unknown driver 'nothing'.*known: ironic, missing, rack, sim"
    ):
        load_driver("nothing", make_conf(tmp_path), HOST)


# -- the simulator: deploy -----------------------------------------------------------------------


def test_deploy_goes_through_every_step_in_order_and_takes_their_time(tmp_path: Path) -> None:
    driver = make_driver(tmp_path, step_duration=0.01, step_durations="deploying image:0.05")
    assert driver.step_durations == {
        "power on": 0.01,
        "deploying image": 0.05,
        "writing config drive": 0.01,
        "rebooting": 0.01,
    }
    node = make_node()
    ctx = ctx_for(node)
    seen: list[tuple[str, float, ProvisionState]] = []

    def progress(step: str) -> None:
        state = driver.node_state(node.uuid)
        assert state is not None
        seen.append((step, time.monotonic(), state.provision_state))

    start = time.monotonic()
    driver.deploy(ctx, node, progress)
    elapsed = time.monotonic() - start

    assert [step for step, _, _ in seen] == list(DEPLOY_STEPS)
    assert {state for _, _, state in seen} == {ProvisionState.DEPLOYING}
    assert elapsed >= driver.deploy_duration == pytest.approx(0.08)
    # the image step is the long one: the gap after it is at least its duration
    times = [t for _, t, _ in seen] + [start + elapsed]
    assert times[2] - times[1] >= 0.05
    state = driver.node_state(node.uuid)
    assert state is not None
    assert (state.provision_state, state.power_state, state.instance_uuid) == (
        ProvisionState.ACTIVE,
        PowerState.ON,
        ctx.instance_uuid,
    )
    assert driver.get_power_state(ctx, node) is PowerState.ON


def test_deploy_is_idempotent_for_the_same_instance_only(tmp_path: Path) -> None:
    log = tmp_path / "actions.log"
    driver = make_driver(tmp_path, action_log=log)
    node = make_node()
    ctx = ctx_for(node)
    driver.deploy(ctx, node, no_progress)
    lines = len(read_log(log))
    steps: list[str] = []
    driver.deploy(ctx, node, steps.append)
    assert steps == []
    assert len(read_log(log)) == lines
    with pytest.raises(DriverError, match=f"active with instance {ctx.instance_uuid}"):
        driver.deploy(ctx_for(node), node, no_progress)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"step_durations": "flashing:1"}, "unknown step 'flashing'"),
        ({"step_durations": "rebooting:slow"}, "rebooting: 'slow' is not a number"),
        ({"step_durations": "rebooting:-1"}, "is not a number of seconds between 0"),
        ({"step_durations": "rebooting:nan"}, "is not a number of seconds"),
    ],
)
def test_bad_step_durations_name_the_option(
    tmp_path: Path, values: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message) as caught:
        make_driver(tmp_path, step_durations=values["step_durations"])
    assert caught.value.option == "step_durations"


def test_out_of_range_options_are_refused_by_oslo_config(tmp_path: Path) -> None:
    conf = make_conf(tmp_path, failure_rate=1.5)
    with pytest.raises(ValueError, match="failure_rate"):
        SimulatedDriver(conf, HOST)


def test_failure_rate_zero_never_fails(tmp_path: Path) -> None:
    driver = make_driver(tmp_path, failure_rate=0)
    for _ in range(50):
        node = make_node()
        driver.deploy(ctx_for(node), node, no_progress)
        assert driver.node_state(node.uuid).provision_state is ProvisionState.ACTIVE  # type: ignore[union-attr]


def test_failure_rate_one_always_fails_and_says_where(tmp_path: Path) -> None:
    log = tmp_path / "actions.log"
    driver = make_driver(tmp_path, failure_rate=1, action_log=log)
    failed_at = set()
    for _ in range(30):
        node = make_node()
        ctx = ctx_for(node)
        planned = driver.planned_failure(node.uuid, ctx.instance_uuid)
        steps: list[str] = []
        with pytest.raises(DriverError) as caught:
            driver.deploy(ctx, node, steps.append)
        assert planned is not None
        assert (caught.value.node_uuid, caught.value.action) == (node.uuid, "deploy")
        assert caught.value.reason == f"simulated failure during {planned!r}"
        assert steps == list(DEPLOY_STEPS[: DEPLOY_STEPS.index(planned) + 1])
        state = driver.node_state(node.uuid)
        assert state is not None
        assert state.provision_state is ProvisionState.ERROR
        assert state.last_error == caught.value.reason
        last = read_log(log)[-1]
        assert (last.node, last.action, last.step, last.reason) == (
            node.uuid,
            "deploy_failed",
            planned,
            caught.value.reason,
        )
        failed_at.add(planned)
    assert len(failed_at) > 1  # not always the same step


def test_failures_are_deterministic_with_a_seed(tmp_path: Path) -> None:
    pairs = [(str(uuidlib.uuid4()), str(uuidlib.uuid4())) for _ in range(400)]
    a = make_driver(tmp_path, failure_rate=0.5, seed=42)
    b = make_driver(tmp_path, failure_rate=0.5, seed=42)
    c = make_driver(tmp_path, failure_rate=0.5, seed=43)
    plan_a = [a.planned_failure(n, i) for n, i in pairs]
    assert plan_a == [b.planned_failure(n, i) for n, i in pairs]
    assert plan_a != [c.planned_failure(n, i) for n, i in pairs]
    failing = sum(step is not None for step in plan_a)
    assert 140 < failing < 260  # ~ 0.5 of 400
    # and the deploy does what was planned
    node_uuid, instance = next((n, i) for (n, i), s in zip(pairs, plan_a, strict=True) if s)
    node = make_node(uuid=node_uuid)
    with pytest.raises(DriverError):
        a.deploy(ActionContext(node_uuid, HOST, 1, instance), node, no_progress)
    node_uuid, instance = next((n, i) for (n, i), s in zip(pairs, plan_a, strict=True) if not s)
    node = make_node(uuid=node_uuid)
    a.deploy(ActionContext(node_uuid, HOST, 1, instance), node, no_progress)


def planned_failures_in_child(conf_dir: str, pairs: list[tuple[str, str]]) -> list[str | None]:
    driver = make_driver(Path(conf_dir), failure_rate=0.5, seed=7)
    return [driver.planned_failure(n, i) for n, i in pairs]


def test_failures_are_the_same_in_another_process(tmp_path: Path) -> None:
    # Python's hash() of a str is salted per process; the plan must not be.
    pairs = [(str(uuidlib.uuid4()), str(uuidlib.uuid4())) for _ in range(100)]
    here = planned_failures_in_child(str(tmp_path), pairs)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=context) as pool:
        there = pool.submit(planned_failures_in_child, str(tmp_path), pairs).result(timeout=60)
    assert here == there


def test_an_exception_from_progress_aborts_the_deploy_unlogged(tmp_path: Path) -> None:
    log = tmp_path / "actions.log"
    driver = make_driver(tmp_path, action_log=log)
    node = make_node()

    class LostClaim(Exception):
        pass

    def progress(step: str) -> None:
        if step == "writing config drive":
            raise LostClaim("epoch 1 is stale")

    with pytest.raises(LostClaim):
        driver.deploy(ctx_for(node), node, progress)
    state = driver.node_state(node.uuid)
    assert state is not None
    assert state.provision_state is ProvisionState.ERROR
    assert state.last_error is not None
    assert "aborted before 'writing config drive'" in state.last_error
    actions = [(a.action, a.step) for a in read_log(log)]
    assert actions == [
        ("deploy_start", None),
        ("deploy_step", "power on"),
        ("deploy_step", "deploying image"),
    ]


def test_a_long_step_is_followed_and_can_be_stopped_midway(tmp_path: Path) -> None:
    """progress(step) again every FOLLOW_EVERY s of a long step, as the
    Ironic driver does: what it raises stops the deploy mid-step.  (The step
    is long, so that however late a loaded machine wakes the deploy up it is
    still in that step at its third call.)"""
    long_step = 60.0
    log = tmp_path / "actions.log"
    driver = make_driver(tmp_path, action_log=log, step_durations=f"deploying image:{long_step}")
    node = make_node()
    calls: list[str] = []

    class Cancelled(Exception):
        pass

    def progress(step: str) -> None:
        calls.append(step)
        if calls.count("deploying image") == 3:
            raise Cancelled("deleted")

    start = time.monotonic()
    with pytest.raises(Cancelled):
        driver.deploy(ctx_for(node), node, progress)
    assert 2 * FOLLOW_EVERY <= time.monotonic() - start < long_step
    assert calls == ["power on"] + ["deploying image"] * 3
    state = driver.node_state(node.uuid)
    assert state is not None and state.provision_state is ProvisionState.ERROR
    assert "aborted during 'deploying image'" in (state.last_error or "")
    assert [a.step for a in read_log(log) if a.action == "deploy_step"] == [
        "power on",
        "deploying image",
    ]


def test_deploys_on_stall_nodes_stall_at_the_stall_step(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The stall is the stall step's (at least stall_duration from it to the
    next step), and only on the stall nodes: the driver says which stall, as
    the time a whole deploy took (which a loaded machine stretches) cannot."""
    caplog.set_level(logging.INFO, logger="compute_agent.drivers.simulated")
    driver = make_driver(
        tmp_path, stall_nodes="stuck-1", stall_step="writing config drive", stall_duration=0.3
    )
    stuck, other = make_node(name="stuck-1"), make_node()

    def stalls(node: Node, by: SimulatedDriver = driver) -> list[str]:
        caplog.clear()
        at: dict[str, float] = {}

        def progress(step: str) -> None:
            at.setdefault(step, time.monotonic())

        by.deploy(ctx_for(node), node, progress)
        at["done"] = time.monotonic()
        said = [r.getMessage() for r in caplog.records if "stalls at" in r.getMessage()]
        if said:
            after = [*DEPLOY_STEPS, "done"][DEPLOY_STEPS.index(by.stall_step) + 1]
            assert at[after] - at[by.stall_step] >= by.stall_duration
        return said

    assert stalls(stuck) == [
        f"Node {stuck.uuid} stalls at 'writing config drive' for 0.3 s (stall_nodes)"
    ]
    assert stalls(other) == []
    # by uuid too (at the default step)
    by_uuid = make_driver(tmp_path, stall_nodes=other.uuid, stall_duration=0.3)
    assert stalls(make_node(uuid=other.uuid), by_uuid) == [
        f"Node {other.uuid} stalls at 'deploying image' for 0.3 s (stall_nodes)"
    ]


def test_a_busy_node_refuses_a_second_action(tmp_path: Path) -> None:
    driver = make_driver(tmp_path)
    node = make_node(power_state=PowerState.OFF)
    ctx = ctx_for(node)
    in_step = threading.Event()
    release = threading.Event()

    def progress(step: str) -> None:
        if step == "deploying image":
            in_step.set()
            assert release.wait(10)

    with ThreadPoolExecutor(1) as pool:
        deploying = pool.submit(driver.deploy, ctx, node, progress)
        assert in_step.wait(10)
        with pytest.raises(DriverError, match="busy: deploy in progress") as caught:
            driver.set_power(ctx, node, "power off")
        assert caught.value.action == "set_power"
        with pytest.raises(DriverError, match="busy"):
            driver.destroy(ctx, node)
        assert driver.get_power_state(ctx, node) is PowerState.ON  # reads are not actions
        release.set()
        deploying.result(timeout=10)
    assert driver.set_power(ctx, node, "power off") is PowerState.OFF


# -- the simulator: destroy and power ---------------------------------------------------------


def test_destroy_powers_off_and_cleans(tmp_path: Path) -> None:
    log = tmp_path / "actions.log"
    driver = make_driver(tmp_path, clean_duration=0.05, action_log=log)
    node = make_node()
    ctx = ctx_for(node, epoch=3)
    driver.deploy(ctx, node, no_progress)
    start = time.monotonic()
    driver.destroy(ctx, node)
    assert time.monotonic() - start >= 0.05
    state = driver.node_state(node.uuid)
    assert state is not None
    assert (state.power_state, state.provision_state, state.instance_uuid) == (
        PowerState.OFF,
        ProvisionState.AVAILABLE,
        None,
    )
    assert [a.action for a in read_log(log)][-2:] == ["destroy", "destroy_done"]
    driver.destroy(ctx, node)  # already clean: fine
    # after a failed deploy too
    failing = make_driver(tmp_path, failure_rate=1)
    with pytest.raises(DriverError):
        failing.deploy(ctx, node, no_progress)
    failing.destroy(ctx, node)
    assert failing.node_state(node.uuid).provision_state is ProvisionState.AVAILABLE  # type: ignore[union-attr]


def test_destroy_cleans_a_node_first_seen_active(tmp_path: Path) -> None:
    driver = make_driver(tmp_path)
    node = make_node(
        provision_state=ProvisionState.ACTIVE, power_state=PowerState.ON, instance_uuid="i-1"
    )
    ctx = ActionContext.for_node(node, HOST)
    assert driver.get_power_state(ctx, node) is PowerState.ON
    driver.destroy(ctx, node)
    assert driver.get_power_state(ctx, node) is PowerState.OFF


def test_power_transitions(tmp_path: Path) -> None:
    log = tmp_path / "actions.log"
    driver = make_driver(tmp_path, action_log=log, power_duration=0.01)
    node = make_node(power_state=None)  # unknown power state reads as off
    ctx = ctx_for(node)
    assert driver.get_power_state(ctx, node) is PowerState.OFF
    assert driver.set_power(ctx, node, "power on") is PowerState.ON
    assert driver.get_power_state(ctx, node) is PowerState.ON
    assert driver.set_power(ctx, node, "power on") is PowerState.ON  # already on: fine
    assert driver.set_power(ctx, node, "power off") is PowerState.OFF
    assert driver.set_power(ctx, node, "reboot") is PowerState.ON  # a reboot ends on
    assert driver.get_power_state(ctx, node) is PowerState.ON
    assert driver.set_power(ctx, node, "soft power off") is PowerState.OFF
    assert driver.set_power(ctx, node, "soft reboot") is PowerState.ON
    assert [a.action for a in read_log(log)] == [
        "power_on",
        "power_on",
        "power_off",
        "reboot",
        "soft_power_off",
        "soft_reboot",
    ]
    # every transition is logged with the host and epoch it was fenced by
    assert {(a.agent, a.epoch) for a in read_log(log)} == {(ctx.host, ctx.epoch)}
    # the first sight of a node takes its stored power state
    on = make_node(power_state=PowerState.ON)
    assert driver.get_power_state(ctx_for(on), on) is PowerState.ON


def test_rebuild_redeploys_the_instance_in_place(tmp_path: Path) -> None:
    log = tmp_path / "actions.log"
    driver = make_driver(tmp_path, action_log=log, **FAST)
    node = make_node()
    instance = str(uuidlib.uuid4())
    ctx = ctx_for(node, instance=instance)
    driver.deploy(ctx, node, lambda step: None)
    steps: list[str] = []
    driver.rebuild(ctx, node, steps.append)
    assert steps == list(DEPLOY_STEPS)
    state = driver.node_state(node.uuid)
    assert state is not None
    assert (state.provision_state, state.instance_uuid, state.power_state) == (
        ProvisionState.ACTIVE,
        instance,
        PowerState.ON,
    )
    assert [a.action for a in read_log(log)][-6:] == [
        "rebuild_start",
        *["deploy_step"] * len(DEPLOY_STEPS),
        "rebuild_done",
    ]
    # A node hosting another instance is refused, untouched.
    other = ctx_for(node, instance=str(uuidlib.uuid4()))
    with pytest.raises(NodeNotBuildable):
        driver.rebuild(other, node, steps.append)
    assert driver.node_state(node.uuid) == state


@pytest.mark.parametrize("target", ["power cycle", "", None, 1, PowerState.ON.name])
def test_an_unknown_power_target_is_refused_naming_the_field(tmp_path: Path, target: Any) -> None:
    driver = make_driver(tmp_path)
    node = make_node()
    with pytest.raises(InvalidInput) as caught:
        driver.set_power(ctx_for(node), node, target)
    assert caught.value.fields == ["target"]
    assert driver.node_state(node.uuid) is None


def test_a_power_state_enum_is_a_valid_target(tmp_path: Path) -> None:
    driver = make_driver(tmp_path)
    node = make_node()
    assert driver.set_power(ctx_for(node), node, PowerState.ON) is PowerState.ON  # type: ignore[arg-type]


@pytest.mark.parametrize("shared", [True, False], ids=["sqlite-store", "memory-store"])
def test_power_states_of_many_nodes_read_as_each_one_would(tmp_path: Path, shared: bool) -> None:
    store = {"node_store": tmp_path / "nodes.sqlite"} if shared else {}
    driver = make_driver(tmp_path, **store)
    nodes = [make_node() for _ in range(1203)]
    contexts = [ctx_for(n) for n in nodes]
    for node in nodes[:600]:  # seen (and stored) before; some of them powered on
        driver.get_power_state(ctx_for(node), node)
    for node in nodes[:600:7]:
        driver.set_power(ctx_for(node), node, "power on")
    statements: list[str] = []
    if shared:
        driver._store._conn.set_trace_callback(statements.append)  # type: ignore[attr-defined]

    states = driver.get_power_states(contexts)
    if shared:
        driver._store._conn.set_trace_callback(None)  # type: ignore[attr-defined]

    on = {n.uuid for n in nodes[:600:7]}
    assert states == {n.uuid: PowerState.ON if n.uuid in on else PowerState.OFF for n in nodes}
    # the nodes never seen before are stored, as get_power_state stores them
    assert all(driver.node_state(n.uuid) is not None for n in nodes[600:])
    if shared:
        # A statement per 500 nodes (and one insert for the unseen), not one per node.
        selects = [s for s in statements if s.startswith("SELECT")]
        assert len(selects) <= 2 * 3, len(selects)
    with pytest.raises(ValueError, match="agent-2"):
        driver.get_power_states([ctx_for(nodes[0], host="agent-2")])


def test_a_store_opened_while_another_process_sets_it_up_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Switching a new file to WAL can fail at once with "database is locked"
    (no busy wait) when agents start together: seen in 2 of 180 openings."""
    real_connect = sqlite3.connect
    refusals = [2]
    error = ["database is locked"]

    class Racing:
        def __init__(self, conn: sqlite3.Connection) -> None:
            self.conn = conn

        def execute(self, sql: str, *args: Any) -> Any:
            if "journal_mode" in sql and refusals[0]:
                refusals[0] -= 1
                raise sqlite3.OperationalError(error[0])
            return self.conn.execute(sql, *args)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.conn, name)

    monkeypatch.setattr(
        node_store.sqlite3, "connect", lambda *a, **k: Racing(real_connect(*a, **k))
    )
    store = node_store.SqliteNodeStore(tmp_path / "nodes.sqlite")
    assert refusals == [0]
    assert store.get("n") is None
    # Any other error is not retried.
    refusals[0], error[0] = 2, "disk I/O error"
    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        node_store.SqliteNodeStore(tmp_path / "other.sqlite")
    assert refusals == [1]


def test_the_default_many_power_states_leave_out_the_nodes_that_fail(tmp_path: Path) -> None:
    class PowerOnly(ComputeDriver):
        def get_power_state(self, ctx: ActionContext, node: Node) -> PowerState:
            if ctx.node_uuid == "broken":
                raise DriverError(node.uuid, "power", "BMC unreachable")
            return PowerState.ON

        deploy = destroy = set_power = inspect = None  # type: ignore[assignment]

    driver = PowerOnly(make_conf(tmp_path), HOST)
    contexts = [ActionContext(uuid, HOST, 1) for uuid in ("a", "broken", "b")]
    assert driver.get_power_states(contexts) == {"a": PowerState.ON, "b": PowerState.ON}


# -- the action log -------------------------------------------------------------------------------


def test_action_log_lines_are_written_and_parsed(tmp_path: Path) -> None:
    log = tmp_path / "actions.log"
    driver = make_driver(tmp_path, action_log=log)
    node = make_node()
    ctx = ctx_for(node, epoch=5)
    before = time.time_ns()
    driver.deploy(ctx, node, no_progress)
    driver.set_power(ctx, node, "reboot")
    driver.destroy(ActionContext(node.uuid, HOST, 5), node)
    after = time.time_ns()

    raw = log.read_bytes().splitlines()
    first = json.loads(raw[0])
    assert set(first) == {"node", "agent", "epoch", "action", "instance", "t", "ns", "pid"}
    assert first["t"] == pytest.approx(first["ns"] / 1e9)

    actions = read_log(log)
    assert [(a.action, a.step) for a in actions] == [
        ("deploy_start", None),
        *[("deploy_step", step) for step in DEPLOY_STEPS],
        ("deploy_done", None),
        ("reboot", None),
        ("destroy", None),
        ("destroy_done", None),
    ]
    assert {(a.node, a.agent, a.epoch) for a in actions} == {(node.uuid, HOST, 5)}
    assert {a.instance for a in actions[:-2]} == {ctx.instance_uuid}
    assert {a.instance for a in actions[-2:]} == {None}
    assert [a.line for a in actions] == list(range(1, len(actions) + 1))
    assert all(before <= a.ns <= after for a in actions)
    assert [a.ns for a in actions] == sorted(a.ns for a in actions)
    assert actions[0].when().endswith("Z")
    assert check_fencing(actions) == []


def test_no_log_without_a_path(tmp_path: Path) -> None:
    driver = make_driver(tmp_path)
    assert driver.action_log is None
    node = make_node()
    driver.deploy(ctx_for(node), node, no_progress)
    assert list(tmp_path.glob("*.log")) == []


def test_an_unwritable_log_fails_the_action(tmp_path: Path) -> None:
    driver = make_driver(tmp_path, action_log=tmp_path / "no-such-dir" / "actions.log")
    node = make_node()
    with pytest.raises(DriverError, match="cannot write the action log") as caught:
        driver.set_power(ctx_for(node), node, "power on")
    assert caught.value.action == "power_on"


def test_a_line_too_long_to_append_atomically_is_refused(tmp_path: Path) -> None:
    log = ActionLog(tmp_path / "actions.log")
    with pytest.raises(ValueError, match="could not be appended atomically"):
        log.append(node="n", agent="a", epoch=1, action="power_on", reason="x" * MAX_LINE)
    assert not (tmp_path / "actions.log").exists()


# Lines close to PIPE_BUF make interleaving of non-atomic writes likely.
BIG_REASON = 3500


def append_lines(path: str, agent: str, count: int) -> int:
    """Append *count* big lines, then run a few simulated deploys; return lines written."""
    log = ActionLog(path)
    for i in range(count):
        log.append(
            node=f"node-{i % 7}",
            agent=agent,
            epoch=i,
            action="power_on",
            reason=agent[-1] * (BIG_REASON - len(agent)),
        )
    conf_dir = Path(path).parent / f"conf-{agent}"
    conf_dir.mkdir(exist_ok=True)
    driver = make_driver(conf_dir, host=agent, action_log=path)
    for _ in range(5):
        node = make_node()
        driver.deploy(ctx_for(node, host=agent), node, no_progress)
    return count + 5 * (len(DEPLOY_STEPS) + 2)


def assert_whole_lines(path: Path, expected: int, agents: list[str]) -> None:
    data = path.read_bytes()
    assert data.endswith(b"\n")
    lines = data.splitlines()
    assert len(lines) == expected
    for line in lines:
        record = json.loads(line)  # a torn or interleaved line is not JSON
        assert record["agent"] in agents
        if "reason" in record:
            assert record["reason"] == record["agent"][-1] * (BIG_REASON - len(record["agent"]))
    actions = read_log(path)
    assert len(actions) == expected
    assert {a.agent for a in actions} == set(agents)


def test_concurrent_writers_in_threads_write_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "actions.log"
    agents = [f"agent-{i}" for i in range(8)]
    with ThreadPoolExecutor(len(agents)) as pool:
        written = list(pool.map(lambda agent: append_lines(str(path), agent, 200), agents))
    assert_whole_lines(path, sum(written), agents)


def test_concurrent_writers_in_processes_write_whole_lines(tmp_path: Path) -> None:
    path = tmp_path / "actions.log"
    agents = [f"agent-{i}" for i in range(4)]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(len(agents), mp_context=context) as pool:
        futures = [pool.submit(append_lines, str(path), agent, 500) for agent in agents]
        written = [future.result(timeout=120) for future in futures]
    assert_whole_lines(path, sum(written), agents)
    assert len({a.pid for a in read_log(path)}) == len(agents)
