# SPDX-License-Identifier: Apache-2.0
"""Compute API 1.5: a power verb or a rebuild is done at most once per request id.

The agent is test_agent_actions' (the real simulated driver, whose action
log says what the back end was asked to do, and a real ownership); its
endpoint takes the calls as the RPC server hands them over.  The record's
bounds are checked on :class:`RequestLog` itself, with a clock of the test's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from oslo_config import cfg

from compute_agent.drivers import ActionContext
from compute_agent.endpoints import ComputeEndpoint
from compute_agent.request_log import MAX_REQUEST_ID, Request, RequestLog, kept
from compute_agent.rpcapi import API_VERSION, REQUEST_ID_VERSION, ComputeAPI
from conductor.common import rpc
from conductor.common.exception import (
    ActionAbandoned,
    Conflict,
    DriverError,
    InvalidInput,
    NodeNotBuildable,
    NotOwner,
)
from conductor.common.objects import Node, PowerState
from hashring.membership import State
from tests.unit.test_agent_actions import LONG, Agent, instance_id, make_agent, wait_for

HOST = "agent-1"


@pytest.fixture
def agent(tmp_path: Any) -> Iterator[Agent]:
    made = make_agent(tmp_path)
    yield made
    made.actions.stop_accepting()
    assert made.actions.wait_idle(LONG)


def endpoint_of(agent: Agent) -> ComputeEndpoint:
    return ComputeEndpoint(HOST, agent.actions, status=dict, drain=lambda: None)


def power_log(agent: Agent, node: Node) -> list[str]:
    """The power actions the driver did on *node*, in order."""
    return [a for a, _ in agent.log_of(node) if a in {"power_on", "power_off", "reboot"}]


def rebuilt(agent: Agent, node: Node) -> int:
    return sum(1 for a, _ in agent.log_of(node) if a == "rebuild_done")


def deployed(agent: Agent, node: Node) -> str:
    """An instance deployed on *node* (ready to be rebuilt)."""
    instance = instance_id()
    assert agent.actions.build(instance, node, agent.epoch(node)) == "accepted"
    assert agent.actions.wait_idle(LONG)
    return instance


class Gate:
    """Holds the driver's ``set_power`` until the test opens it; counts its calls."""

    def __init__(self, agent: Agent, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reached = threading.Event()
        self.open = threading.Event()
        self.calls = 0
        original = agent.driver.set_power

        def held(ctx: ActionContext, node: Node, target: Any) -> PowerState:
            self.calls += 1
            self.reached.set()
            assert self.open.wait(LONG)
            return original(ctx, node, target)

        monkeypatch.setattr(agent.driver, "set_power", held)


def in_thread(call: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    """Run *call* in a thread; its answer (or exception) lands in the list."""
    out: list[object] = []

    def run() -> None:
        try:
            out.append(call())
        except Exception as exc:
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


# -- the verbs, through the endpoint ---------------------------------------------------


def test_two_concurrent_calls_with_one_request_id_reboot_once_and_both_get_the_answer(
    agent: Agent, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="compute_agent.request_log")
    node = agent.nodes[0]
    endpoint, gate = endpoint_of(agent), Gate(agent, monkeypatch)
    call = {"node": node.to_dict(), "epoch": agent.epoch(node), "target": "reboot"}

    first, first_out = in_thread(lambda: endpoint.set_power_state({}, **call, request_id="r-1"))
    assert gate.reached.wait(LONG)
    # The peer conductor's repeat while the first still runs: it waits.
    second, second_out = in_thread(lambda: endpoint.set_power_state({}, **call, request_id="r-1"))
    wait_for(lambda: "repeated while it runs: waiting" in caplog.text)
    assert second_out == []
    gate.open.set()
    first.join(LONG)
    second.join(LONG)
    assert first_out == second_out == ["power on"]
    assert gate.calls == 1 and power_log(agent, node) == ["reboot"]


def test_a_repeat_after_the_verb_is_answered_without_acting(agent: Agent) -> None:
    node, other = agent.nodes[0], agent.nodes[1]
    endpoint = endpoint_of(agent)
    power = {"node": node.to_dict(), "epoch": agent.epoch(node), "target": "power off"}
    assert endpoint.set_power_state({}, **power, request_id="p-1") == "power off"
    assert endpoint.set_power_state({}, **power, request_id="p-1") == "power off"
    assert power_log(agent, node) == ["power_off"]

    instance = deployed(agent, other)
    rebuild = {"instance_uuid": instance, "node": other.to_dict(), "epoch": agent.epoch(other)}
    assert endpoint.rebuild_instance({}, **rebuild, request_id="b-1") == "active"
    assert endpoint.rebuild_instance({}, **rebuild, request_id="b-1") == "active"
    assert rebuilt(agent, other) == 1
    # Another request id is another action: done again.
    assert endpoint.rebuild_instance({}, **rebuild, request_id="b-2") == "active"
    assert rebuilt(agent, other) == 2


def test_a_refusal_is_repeated_as_a_refusal_without_asking_the_driver_again(
    agent: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = agent.nodes[0]
    calls: list[str] = []

    def failing(ctx: ActionContext, node: Node, target: Any) -> PowerState:
        calls.append(target)
        raise DriverError(node.uuid, "set_power", "BMC unreachable")

    monkeypatch.setattr(agent.driver, "set_power", failing)
    epoch = agent.epoch(node)
    for _ in range(2):
        with pytest.raises(DriverError, match="BMC unreachable"):
            agent.actions.set_power(node, epoch, "reboot", request_id="f-1")
    assert calls == ["reboot"]

    # A rebuild the back end refuses (the node hosts no such instance): kept too.
    rebuilds: list[str] = []
    original = agent.driver.rebuild

    def counted(ctx: ActionContext, *args: Any) -> None:
        rebuilds.append(ctx.node_uuid)
        original(ctx, *args)

    monkeypatch.setattr(agent.driver, "rebuild", counted)
    other = agent.nodes[1]
    stranger = instance_id()
    for _ in range(2):
        with pytest.raises(NodeNotBuildable):
            agent.actions.rebuild(stranger, other, agent.epoch(other), request_id="f-2")
    assert rebuilds == [other.uuid]


def test_a_refusal_that_asks_for_a_retry_is_not_kept(agent: Agent) -> None:
    """The node busy (Conflict): nothing was done, so the retry with the same id runs."""
    node = agent.nodes[0]
    epoch = agent.epoch(node)
    with agent.actions._lock:
        agent.actions._in_flight[node.uuid] = ("deploy", instance_id())
    with pytest.raises(Conflict, match="busy"):
        agent.actions.set_power(node, epoch, "power on", request_id="c-1")
    agent.actions._finish(node.uuid)
    assert agent.actions.set_power(node, epoch, "power on", request_id="c-1") is PowerState.ON
    assert power_log(agent, node) == ["power_on"]


def test_the_fence_comes_before_the_stored_answer(agent: Agent) -> None:
    """A repeat the agent may no longer act for is NotOwner, not the old answer:
    the conductor re-reads the owner."""
    node = agent.nodes[0]
    epoch = agent.epoch(node)
    assert agent.actions.set_power(node, epoch, "reboot", request_id="e-1") is PowerState.ON
    with pytest.raises(NotOwner):  # an epoch this agent does not hold
        agent.actions.set_power(node, epoch + 1, "reboot", request_id="e-1")
    agent.membership.state = State.SUSPENDED  # nor may it act at all now
    with pytest.raises(NotOwner):
        agent.actions.set_power(node, epoch, "reboot", request_id="e-1")
    agent.membership.state = State.CONNECTED
    assert agent.actions.set_power(node, epoch, "reboot", request_id="e-1") is PowerState.ON
    assert power_log(agent, node) == ["reboot"]


def test_a_request_id_sent_for_another_request_is_refused_naming_it(agent: Agent) -> None:
    node, other = agent.nodes[0], agent.nodes[1]
    endpoint = endpoint_of(agent)
    power = {"node": node.to_dict(), "epoch": agent.epoch(node), "target": "power on"}
    endpoint.set_power_state({}, **power, request_id="m-1")
    mismatches: list[Callable[[], object]] = [
        lambda: endpoint.set_power_state({}, **{**power, "target": "reboot"}, request_id="m-1"),
        lambda: endpoint.set_power_state(
            {}, node=other.to_dict(), epoch=agent.epoch(other), target="power on", request_id="m-1"
        ),
        lambda: endpoint.rebuild_instance(
            {},
            instance_uuid=instance_id(),
            node=node.to_dict(),
            epoch=agent.epoch(node),
            request_id="m-1",
        ),
    ]
    for mismatch in mismatches:
        with pytest.raises(InvalidInput) as refused:
            mismatch()
        assert refused.value.fields == ["request_id"]
        assert f"power 'power on' on node {node.uuid}" in str(refused.value)
    assert power_log(agent, node) == ["power_on"] and power_log(agent, other) == []
    assert rebuilt(agent, node) == 0


@pytest.mark.parametrize("bad", ["", "x" * (MAX_REQUEST_ID + 1), 7, ["r-1"]])
def test_a_malformed_request_id_is_refused_naming_it(agent: Agent, bad: object) -> None:
    node = agent.nodes[0]
    endpoint = endpoint_of(agent)
    with pytest.raises(InvalidInput) as refused:
        endpoint.set_power_state(
            {}, node=node.to_dict(), epoch=agent.epoch(node), target="reboot", request_id=bad
        )
    assert refused.value.fields == ["request_id"]
    with pytest.raises(InvalidInput) as again:
        endpoint.rebuild_instance(
            {},
            instance_uuid=instance_id(),
            node=node.to_dict(),
            epoch=agent.epoch(node),
            request_id=bad,
        )
    assert again.value.fields == ["request_id"]
    assert agent.log() == []


def test_without_a_request_id_every_call_acts(agent: Agent) -> None:
    node = agent.nodes[0]
    endpoint = endpoint_of(agent)
    for _ in range(2):
        endpoint.set_power_state({}, node=node.to_dict(), epoch=agent.epoch(node), target="reboot")
    assert power_log(agent, node) == ["reboot", "reboot"]
    assert len(agent.actions._requests) == 0


# -- the record ------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_record_drops_the_oldest_past_its_capacity() -> None:
    log = RequestLog(capacity=2, clock=Clock())
    done: list[str] = []
    for name in ("a", "b", "c"):
        log.run(name, Request("power", "n", "reboot"), lambda n=name: done.append(n))
    assert "a" not in log and "b" in log and "c" in log
    log.run("a", Request("power", "n", "reboot"), lambda: done.append("a again"))
    assert done == ["a", "b", "c", "a again"]
    assert "b" not in log and len(log) == 2


def test_the_record_forgets_a_request_after_keep_for() -> None:
    clock = Clock()
    log = RequestLog(keep_for=3600.0, clock=clock)
    done: list[int] = []
    request = Request("rebuild", "n", "i")
    log.run("r", request, lambda: done.append(1))
    clock.now += 3599.0
    log.run("r", request, lambda: done.append(2))
    assert done == [1] and "r" in log
    clock.now += 1.0
    assert "r" not in log
    log.run("r", request, lambda: done.append(3))
    assert done == [1, 3]


def test_a_repeat_waiting_past_wait_for_is_told_to_retry() -> None:
    log = RequestLog(wait_for=0.01)
    request = Request("power", "n", "reboot")
    started, release = threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        assert release.wait(LONG)
        return "power on"

    first, out = in_thread(lambda: log.run("r", request, slow))
    assert started.wait(LONG)
    with pytest.raises(Conflict) as refused:
        log.run("r", request, lambda: "never")
    assert refused.value.field == "request_id" and "retry" in refused.value.reason
    release.set()
    first.join(LONG)
    assert out == ["power on"]
    assert log.run("r", request, lambda: "never") == "power on"


def test_repeats_waiting_on_a_refusal_not_kept_get_it_and_a_later_call_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="compute_agent.request_log")
    log = RequestLog()
    request = Request("power", "n", "reboot")
    started, release = threading.Event(), threading.Event()

    def lost() -> str:
        started.set()
        assert release.wait(LONG)
        raise NotOwner("n", None, -1)

    first, first_out = in_thread(lambda: log.run("r", request, lost))
    assert started.wait(LONG)
    second, second_out = in_thread(lambda: log.run("r", request, lambda: "never"))
    wait_for(lambda: "repeated while it runs: waiting" in caplog.text)
    release.set()
    first.join(LONG)
    second.join(LONG)
    assert all(isinstance(out, NotOwner) for out in (*first_out, *second_out))
    assert "r" not in log
    assert log.run("r", request, lambda: "power on") == "power on"


def test_a_repeat_raises_a_copy_of_the_error() -> None:
    log = RequestLog()
    request = Request("power", "n", "reboot")
    failure = DriverError("n", "set_power", "BMC unreachable")

    def fail() -> str:
        raise failure

    with pytest.raises(DriverError):
        log.run("r", request, fail)
    with pytest.raises(DriverError) as again:
        log.run("r", request, fail)
    assert again.value is not failure and again.value.kwargs == failure.kwargs


@pytest.mark.parametrize(
    ("error", "is_kept"),
    [
        (DriverError("n", "rebuild", "x"), True),
        (NodeNotBuildable(field="node_uuid", value="n", reason="x"), True),
        (RuntimeError("driver bug"), True),
        (NotOwner("n", None, -1), False),
        (Conflict(field="node_uuid", value="n", reason="busy"), False),
        (ActionAbandoned("n", "rebuild"), False),
        (KeyboardInterrupt(), False),
    ],
)
def test_which_outcomes_a_repeat_gets(error: BaseException, is_kept: bool) -> None:
    assert kept(error) is is_kept


# -- the client ------------------------------------------------------------------------


class Recorder:
    """oslo.messaging's client, capped at *cap*: each call's version and arguments."""

    def __init__(self, cap: str) -> None:
        self.cap = cap
        self.timeout = 1.0
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def can_send_version(self, version: str) -> bool:
        return tuple(map(int, version.split("."))) <= tuple(map(int, self.cap.split(".")))

    def prepare(self, *, server: str, version: str, timeout: float | None) -> Any:
        recorder = self

        class Prepared:
            def call(self, ctxt: dict[str, Any], method: str, **kwargs: Any) -> str:
                recorder.sent.append((version, kwargs))
                return "done"

        return Prepared()


def client(cap: str, monkeypatch: pytest.MonkeyPatch) -> tuple[ComputeAPI, Recorder]:
    api = ComputeAPI.__new__(ComputeAPI)
    recorder = Recorder(cap)
    api.client = recorder
    api._observe = None
    monkeypatch.setattr(
        "conductor.common.rpc.call",
        lambda client, method, observe, **kw: client.call({}, method, **kw),
    )
    return api, recorder


def sends(api: ComputeAPI, request_id: str | None) -> None:
    node = {"uuid": "n"}
    api.set_power_state("a1", node=node, epoch=1, target="reboot", request_id=request_id)
    api.set_power_state("a1", node=node, epoch=1, target="soft reboot", request_id=request_id)
    api.rebuild_instance("a1", instance_uuid="i", node=node, epoch=1, request_id=request_id)
    api.rebuild_instance(
        "a1", instance_uuid="i", node=node, epoch=1, image={"id": "x"}, request_id=request_id
    )


def test_the_client_sends_a_request_id_at_1_5(monkeypatch: pytest.MonkeyPatch) -> None:
    assert REQUEST_ID_VERSION == "1.5"
    api, recorder = client(API_VERSION, monkeypatch)
    sends(api, "req-1")
    assert [v for v, _ in recorder.sent] == ["1.5"] * 4
    assert all(kw["request_id"] == "req-1" for _, kw in recorder.sent)
    recorder.sent.clear()
    sends(api, None)  # none given: as before 1.5
    assert [v for v, _ in recorder.sent] == ["1.0", "1.3", "1.3", "1.4"]
    assert all("request_id" not in kw for _, kw in recorder.sent)


def test_a_client_capped_below_1_5_sends_without_the_request_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api, recorder = client("1.4", monkeypatch)
    sends(api, "req-1")
    assert [v for v, _ in recorder.sent] == ["1.0", "1.3", "1.3", "1.4"]
    assert all("request_id" not in kw for _, kw in recorder.sent)
    assert recorder.sent[3][1]["image"] == {"id": "x"}


def test_a_repeat_over_the_broker_acts_once_and_a_capped_client_acts_again(agent: Agent) -> None:
    """A real oslo.messaging round trip (``kombu+memory``): the agent's server
    takes ``request_id`` at 1.5, and its refusal comes back as itself."""
    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    conf.set_override("transport_url", "kombu+memory:////")
    transport = rpc.get_transport(conf)
    server = rpc.get_server(transport, rpc.COMPUTE_TOPIC, HOST, [endpoint_of(agent)])
    server.start()
    try:
        node = agent.nodes[0]
        call = {"node": node.to_dict(), "epoch": agent.epoch(node)}
        api = ComputeAPI(transport, timeout=LONG)
        for _ in range(2):
            assert (
                api.set_power_state(HOST, **call, target="reboot", request_id="w-1") == "power on"
            )
        assert power_log(agent, node) == ["reboot"]
        with pytest.raises(InvalidInput) as refused:
            api.set_power_state(HOST, **call, target="power off", request_id="w-1")
        assert refused.value.fields == ["request_id"]
        capped = ComputeAPI(transport, timeout=LONG, version_cap="1.4")
        for _ in range(2):
            capped.set_power_state(HOST, **call, target="reboot", request_id="w-2")
        assert power_log(agent, node) == ["reboot", "reboot", "reboot"]
        assert "w-2" not in agent.actions._requests
    finally:
        server.stop()
        server.wait()
        transport.cleanup()
