# SPDX-License-Identifier: Apache-2.0
"""The verb table (:mod:`conductor.common.verbs`) against everything that spells a verb.

Each test takes one reader of the table (the state table, the conductor's
RPC clients and endpoint, the compute API client, the HTTP routes and their
dispatch, the policy defaults, the OpenAPI document generated and checked
in, the CLI, the notifications, fleet check's hints) and fails when it
disagrees with the table: a verb without a route, a rule the table does
not name, an enum that leaves a state out.
"""

from __future__ import annotations

import argparse
import inspect
import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from compute_agent import rpcapi as compute_rpcapi
from conductor.api import openapi, policy, v1
from conductor.api.v1_instance_labels import LABEL_ROUTES
from conductor.cli import instance as instance_cli
from conductor.cli.http_client import HttpConductorAPI
from conductor.common import instance_states, verbs
from conductor.common.instance_states import TRANSITIONS, Event
from conductor.common.objects import TaskState, VmState
from conductor.common.verbs import VERBS, Verb
from conductor.endpoints import fleet as fleet_endpoint
from conductor.endpoints.instances import InstancesEndpoint
from conductor.notifications import Priority, instance_event_type
from conductor.rpcapi import ConductorAPI
from tests.unit.test_api import call, make_app

REPO = Path(__file__).resolve().parents[2]
INSTANCE = "5f0c7e39-5d11-4d3c-9c43-b3e6d7d1b0a2"
#: The newest microversion: every verb is there.
LATEST = {"OpenStack_API_Version": "baremetal-fleet 1.5"}


def _id(verb: Verb) -> str:
    return verb.name.replace(" ", "-")


# -- the state table -------------------------------------------------------------------


@pytest.mark.parametrize("verb", VERBS, ids=_id)
def test_a_verb_starts_an_action_of_the_state_table_that_its_answer_ends(verb: Verb) -> None:
    assert verb.sources, verb  # it acts on an existing instance
    task = TRANSITIONS[verb.event].target.task_state
    assert task is verb.task_state is not None
    done = TRANSITIONS[verb.done]
    assert done.tasks is None or verb.task_state in done.tasks
    assert done.sources & (verb.sources | {TRANSITIONS[verb.event].target.vm_state})


def test_every_action_of_the_state_table_is_a_verb() -> None:
    assert {verb.task_state for verb in verbs.ACTIONS} == instance_states.ACTION_TASKS
    assert {task: verb.event for task, verb in verbs.BY_TASK.items()} == {
        **instance_states.VERBS,
        TaskState.DELETING: Event.DELETE,
    }
    assert len(verbs.BY_EVENT) == len(verbs.BY_TASK) == len(VERBS)


# -- the RPC clients and the conductor's endpoint ---------------------------------------


@pytest.mark.parametrize("verb", VERBS, ids=_id)
@pytest.mark.parametrize("client", [ConductorAPI, HttpConductorAPI, InstancesEndpoint])
def test_the_conductor_method_takes_the_instance_and_the_arguments(
    verb: Verb, client: type[Any]
) -> None:
    method = getattr(client, verb.conductor_method)
    signature = inspect.signature(method)
    if client is InstancesEndpoint:
        signature.bind(None, {}, INSTANCE, **verb.conductor_arguments)  # self, ctxt
    else:
        signature.bind(None, INSTANCE, **verb.conductor_arguments)


class _RecordingClient:
    """oslo.messaging's client as ComputeAPI uses it: records the versions prepared."""

    timeout = None

    def __init__(self) -> None:
        self.versions: list[str] = []

    def prepare(self, *, server: str, version: str, timeout: Any) -> _RecordingClient:
        self.versions.append(version)
        return self


@pytest.mark.parametrize("verb", VERBS, ids=_id)
def test_the_agent_call_is_sent_at_the_tables_version(
    verb: Verb, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compute_rpcapi.rpc, "call", lambda *a, **k: "done")
    compute = compute_rpcapi.ComputeAPI.__new__(compute_rpcapi.ComputeAPI)
    recording = _RecordingClient()
    compute.client = recording  # type: ignore[assignment]
    compute._observe = None
    arguments: dict[str, Any] = {"node": {"uuid": "n1"}, "epoch": 1}
    if verb.agent.target is not None:
        arguments["target"] = verb.agent.target
    else:
        arguments["instance_uuid"] = INSTANCE
    getattr(compute, verb.agent.method)("agent-1", **arguments)
    assert recording.versions == [verb.agent.version]
    assert (verb.agent.method == "set_power_state") == (verb.agent.target is not None)


# -- the HTTP API ----------------------------------------------------------------------


@pytest.mark.parametrize("verb", VERBS, ids=_id)
def test_every_verb_has_its_route_with_its_rule(verb: Verb) -> None:
    [route] = [r for r in v1.ROUTES if (r.method, r.path) == (verb.http.method, verb.http.path)]
    assert route.rule == verb.policy_rule


def _request_body(verb: Verb) -> Any:
    if verb.http.action is None:
        return None
    value = None if verb.http.action_type is None else {"type": verb.http.action_type}
    if verb.http.action == "rebuild":
        value = {}
    return {verb.http.action: value}


@pytest.mark.parametrize("verb", VERBS, ids=_id)
def test_the_verbs_http_call_calls_its_conductor_method(verb: Verb, tmp_path: Path) -> None:
    application, fake = make_app(tmp_path)
    path = verb.http.path.replace("{instance}", INSTANCE)
    response = call(application, verb.http.method, path, _request_body(verb), **LATEST)
    assert response.status_code == 202, response.body
    assert fake.calls == [(verb.conductor_method, (INSTANCE,), dict(verb.conductor_arguments))]


def test_the_action_body_takes_the_tables_actions_and_types() -> None:
    properties = v1.INSTANCE_ACTION.properties
    assert set(properties) == {verb.http.action for verb in verbs.ACTIONS}
    for key, schema in properties.items():
        types = [v.http.action_type for v in verbs.ACTIONS if v.http.action == key]
        if any(types):
            assert schema["properties"]["type"]["enum"] == types
    # Only the routes of the table's verbs change an instance (its metadata
    # and tags are labels, not its state: v1_instance_labels).
    labels = {(r.method, r.path) for r in LABEL_ROUTES}
    changes = {
        (r.method, r.path)
        for r in v1.ROUTES
        if r.path.startswith(verbs.INSTANCE_PATH) and r.method != "GET"
    } - labels
    assert changes == {(verb.http.method, verb.http.path) for verb in VERBS}


# -- the policy defaults ---------------------------------------------------------------


def test_the_policy_rules_of_the_verbs_cover_their_operations() -> None:
    operations: dict[str, set[tuple[str, str]]] = {}
    for rule in policy.list_rules():
        for operation in getattr(rule, "operations", []):
            operations.setdefault(rule.name, set()).add((operation["method"], operation["path"]))
    by_operation = {op: name for name, ops in operations.items() for op in ops}
    for verb in VERBS:
        assert by_operation[(verb.http.method, verb.http.path)] == verb.policy_rule, verb.name
    assert {verb.policy_rule for verb in VERBS} <= policy.RULE_NAMES


# -- the OpenAPI document --------------------------------------------------------------


def enum_problems(document: dict[str, Any]) -> list[str]:
    """Where *document*'s instance enums disagree with the state and verb tables."""
    problems: list[str] = []
    instance = document["components"]["schemas"]["Instance"]["properties"]
    if set(instance["vm_state"]["enum"]) != {state.value for state in VmState}:
        problems.append(f"Instance.vm_state: {instance['vm_state']['enum']}")
    tasks = {task.value for task in TaskState} | {None}
    if set(instance["task_state"].get("enum", ())) != tasks:
        problems.append(f"Instance.task_state: {instance['task_state'].get('enum')}")
    action = document["components"]["schemas"]["InstanceAction"]["properties"]
    if set(action) != {verb.http.action for verb in verbs.ACTIONS}:
        problems.append(f"InstanceAction: {sorted(action)}")
    types = {verb.http.action_type for verb in verbs.ACTIONS if verb.http.action_type}
    listed = {
        kind
        for value in action.values()
        for kind in value.get("properties", {}).get("type", {}).get("enum", ())
    }
    if listed != types:
        problems.append(f"InstanceAction types: {sorted(listed)}")
    [vm_filter] = [
        p
        for p in document["paths"]["/v1/instances"]["get"]["parameters"]
        if p.get("name") == "vm_state"
    ]
    problems += [
        f"the vm_state filter leaves {s.value} out"
        for s in VmState
        if s.value not in vm_filter["description"]
    ]
    return problems


def test_the_generated_and_checked_in_openapi_enums_are_the_tables() -> None:
    assert enum_problems(openapi.document(v1.ROUTES)) == []
    assert enum_problems(json.loads((REPO / "docs/openapi.json").read_text())) == []


def test_an_enum_that_leaves_a_state_out_is_found() -> None:
    document = openapi.document(v1.ROUTES)
    vm_state = document["components"]["schemas"]["Instance"]["properties"]["vm_state"]
    vm_state["enum"] = [s for s in vm_state["enum"] if s != VmState.STOPPED.value]
    assert enum_problems(document) == [f"Instance.vm_state: {vm_state['enum']}"]


# -- the CLI ---------------------------------------------------------------------------


def _entry_points(group: str) -> dict[str, str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return dict(project["entry-points"][group])


class _FakeClient:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        def conductor_method(*args: Any, **kwargs: Any) -> dict[str, Any]:
            self.calls.append((name, args, kwargs))
            return {"uuid": args[0]}

        return conductor_method


class _FakeApp:
    def __init__(self) -> None:
        self.client = _FakeClient()

    def conductor_client(self) -> _FakeClient:
        return self.client


@pytest.mark.parametrize("verb", VERBS, ids=_id)
def test_every_verb_has_its_cli_command(verb: Verb) -> None:
    commands = _entry_points("ringfleet.cli")
    plugin = _entry_points("openstack.ringfleet.v1")
    target = commands[verb.cli_command]
    assert plugin["ringfleet_" + verb.cli_command.replace(" ", "_")] == target
    module, _, name = target.partition(":")
    assert module == instance_cli.__name__
    command_class = getattr(instance_cli, name)
    if issubclass(command_class, instance_cli._InstanceVerb):
        assert command_class.command == verb.cli_command


@pytest.mark.parametrize("verb", [v for v in VERBS if v.cli_command != "instance delete"], ids=_id)
def test_the_cli_command_calls_the_verbs_conductor_method(verb: Verb) -> None:
    name = _entry_points("ringfleet.cli")[verb.cli_command].partition(":")[2]
    app = _FakeApp()
    command = getattr(instance_cli, name)(app, argparse.Namespace())
    parser = command.get_parser("ringfleet " + verb.cli_command)
    command.take_action(parser.parse_args([*verb.cli_options, INSTANCE]))
    assert app.client.calls == [
        (verb.conductor_method, (INSTANCE,), dict(verb.conductor_arguments))
    ]


def test_fleet_checks_hint_is_the_verbs_cli_command() -> None:
    assert {
        verb.task_state.value: f"ringfleet {verb.cli}" for verb in verbs.ACTIONS
    } == fleet_endpoint._VERB_HINTS


# -- the notifications -----------------------------------------------------------------


@pytest.mark.parametrize("verb", VERBS, ids=_id)
def test_a_verb_is_notified_by_its_name(verb: Verb) -> None:
    assert instance_event_type(verb.event) == (
        f"instance.{verb.notification}.start",
        Priority.INFO,
    )
    assert instance_event_type(verb.done, verb.task_state) == (
        f"instance.{verb.notification}.end",
        Priority.INFO,
    )
    failed = Event.ACTION_FAILED if verb in verbs.ACTIONS else Event.TEARDOWN_FAILED
    assert instance_event_type(failed, verb.task_state) == (
        f"instance.{verb.notification}.error",
        Priority.ERROR,
    )


# -- the architecture document ---------------------------------------------------------


@pytest.mark.parametrize("verb", VERBS, ids=_id)
def test_the_architecture_documents_table_shows_the_verb(verb: Verb) -> None:
    text = (REPO / "docs/architecture.rst").read_text().split("\nInstance verbs\n", 1)[1]
    [row] = [line for line in text.splitlines() if line.startswith(f"{verb.name}  ")]
    agent = verb.agent.method
    if verb.agent.target is not None:
        agent += f" ``{verb.agent.target}``"
    for shown in (verb.event.value, verb.cli, f"{agent}, {verb.agent.version}"):
        assert shown in row, (shown, row)
    assert row.endswith(f"  {verb.notification}"), row


def _lists(text: str, start: str) -> list[str]:
    """The text from each place *start* begins a list in *text*."""
    return [text[i : i + 300] for i in range(len(text)) if text.startswith(start, i)]


def test_the_rpc_reference_lists_every_state_and_action() -> None:
    text = (REPO / "docs/rpc-api.rst").read_text()
    vm_states = _lists(text, "``building``, ``active``")
    assert len(vm_states) == 2
    for listed in vm_states:
        assert all(f"``{state.value}``" in listed for state in VmState), listed
    [tasks] = _lists(text, "``scheduling``, ``spawning``")
    assert all(f"``{verb.task_state.value}``" in tasks for verb in VERBS), tasks


@pytest.mark.parametrize("verb", VERBS, ids=_id)
def test_the_cli_http_client_sends_the_verbs_http_call(verb: Verb) -> None:
    sent: list[tuple[str, str, Any]] = []

    def request(answer: Any, method: str, path: str, body: Any = None) -> dict[str, Any]:
        sent.append((method, path, body))
        return {}

    client = HttpConductorAPI.__new__(HttpConductorAPI)
    client._request = request  # type: ignore[method-assign,assignment]
    getattr(client, verb.conductor_method)(INSTANCE, **verb.conductor_arguments)
    path = verb.http.path.replace("{instance}", INSTANCE)
    assert sent == [(verb.http.method, path, _request_body(verb))]
