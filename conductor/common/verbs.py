# SPDX-License-Identifier: Apache-2.0
"""The instance verbs: one row per verb, every place that spells a verb reads it.

A *verb* is what a user asks of an existing instance: reboot, hard reboot,
stop, start, rebuild and delete.  Its row says, beside the state machine
(:mod:`conductor.common.instance_states`, whose :class:`Event` it names):

* the states it starts from and the task state it sets (read from the
  state table: the row names the event, never repeats its transition),
  and the owner's answer that ends it;
* the conductor's RPC method the API and the CLI call (and its arguments);
* the compute API call the conductor makes on the node's owner
  (``compute_agent/rpcapi.py``): method, power target and version;
* the policy rule, the HTTP call (for an action: the key of Nova's
  ``POST /v1/instances/{instance}/action`` body and reboot's ``type``),
  the CLI command line and the notification's action name
  (``instance.<name>.start|end|error``).

The API's routes and dispatch, its policy defaults, the OpenAPI document,
the CLI and the notifications read this table; ``tests/unit/test_verbs.py``
fails when any of them disagrees with it.  Adding a verb is one row here
(and its event in the state table) plus the owner's driver call.  A build
is not a verb: it makes instances rather than acting on one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

from conductor.common.instance_states import TRANSITIONS, Event
from conductor.common.objects import TaskState, VmState

__all__ = [
    "ACTIONS",
    "ACTION_PATH",
    "ACTION_RULE",
    "BY_EVENT",
    "BY_TASK",
    "DELETE_RULE",
    "INSTANCE_PATH",
    "VERBS",
    "AgentCall",
    "HttpCall",
    "Verb",
    "action_names",
]

#: The policy rule of the instance actions (one route, so one rule).
ACTION_RULE: Final = "ringfleet:instance:action"
#: The policy rule of an instance's delete (the action rule defaults to it).
DELETE_RULE: Final = "ringfleet:instance:delete"
#: An instance's path in the HTTP API.
INSTANCE_PATH: Final = "/v1/instances/{instance}"
#: The path of the instance actions (Nova's ``POST /servers/{id}/action``).
ACTION_PATH: Final = INSTANCE_PATH + "/action"


@dataclasses.dataclass(frozen=True)
class AgentCall:
    """The compute API call (``compute_agent/rpcapi.py``) the conductor makes
    on the node's owner: ``method`` at ``version`` (the lowest that has it),
    with the power ``target`` for ``set_power_state``."""

    method: str
    version: str
    target: str | None = None


@dataclasses.dataclass(frozen=True)
class HttpCall:
    """How the HTTP API takes a verb: ``method`` on ``path``; an instance
    action names its ``action`` (the body's one key) and, for reboot, the
    ``action_type`` (``{"reboot": {"type": "HARD"}}``)."""

    method: str
    path: str
    action: str | None = None
    action_type: str | None = None


@dataclasses.dataclass(frozen=True)
class Verb:
    """One verb: what it is called, what it does to the state, who says so where."""

    #: Its name in messages ("cannot stop", "hard reboot requested").
    name: str
    #: The state machine event that starts it.
    event: Event
    #: The owner's answer that ends it (a failure is ``ACTION_FAILED`` or its own).
    done: Event
    #: What the owner's back end does, in a few words (CLI help, docs).
    summary: str
    #: The conductor's RPC method (``conductor/rpcapi.py``), called with the
    #: instance and ``conductor_arguments``.
    conductor_method: str
    agent: AgentCall
    policy_rule: str
    http: HttpCall
    #: The CLI command line, ``ringfleet`` left out: its command and options.
    cli: str
    #: The action in the notifications' event types (Nova's: ``power_off``).
    notification: str
    conductor_arguments: Mapping[str, Any] = dataclasses.field(
        default_factory=dict, hash=False, compare=False
    )

    @property
    def sources(self) -> frozenset[VmState]:
        """The ``vm_state`` values it may start from (the state table's)."""
        return TRANSITIONS[self.event].sources

    @property
    def task_state(self) -> TaskState:
        """The task state it sets while it is in flight (the state table's)."""
        task = TRANSITIONS[self.event].target.task_state
        if task is None:  # every verb's event sets one (tests/unit/test_verbs.py)
            raise ValueError(f"{self.event.value} sets no task state")
        return task

    @property
    def cli_command(self) -> str:
        """The CLI command (``instance reboot``), without its options."""
        return " ".join(word for word in self.cli.split() if not word.startswith("-"))

    @property
    def cli_options(self) -> tuple[str, ...]:
        """The CLI options that pick this verb of its command (``--hard``)."""
        return tuple(word for word in self.cli.split() if word.startswith("-"))


def _action(action: str, action_type: str | None = None) -> HttpCall:
    return HttpCall("POST", ACTION_PATH, action, action_type)


# The compute API's versions (compute_agent/rpcapi.py): 1.0 has the hard
# power targets and destroy_instance, 1.3 the soft targets and rebuild.
_V1_0 = "1.0"
_SOFT_POWER = "1.3"

#: The table: every instance verb.
VERBS: tuple[Verb, ...] = (
    Verb(
        name="reboot",
        event=Event.REBOOT,
        done=Event.POWERED_ON,
        summary="the OS restarts (a power cycle where the hardware cannot)",
        conductor_method="reboot_instance",
        conductor_arguments={"hard": False},
        agent=AgentCall("set_power_state", _SOFT_POWER, "soft reboot"),
        policy_rule=ACTION_RULE,
        http=_action("reboot", "SOFT"),
        cli="instance reboot",
        notification="reboot",
    ),
    Verb(
        name="hard reboot",
        event=Event.REBOOT_HARD,
        done=Event.POWERED_ON,
        summary="power-cycle the node",
        conductor_method="reboot_instance",
        conductor_arguments={"hard": True},
        agent=AgentCall("set_power_state", _V1_0, "reboot"),
        policy_rule=ACTION_RULE,
        http=_action("reboot", "HARD"),
        cli="instance reboot --hard",
        notification="reboot",
    ),
    Verb(
        name="stop",
        event=Event.STOP,
        done=Event.POWERED_OFF,
        summary="power off, a clean shutdown first",
        conductor_method="stop_instance",
        agent=AgentCall("set_power_state", _SOFT_POWER, "soft power off"),
        policy_rule=ACTION_RULE,
        http=_action("os-stop"),
        cli="instance stop",
        notification="power_off",
    ),
    Verb(
        name="start",
        event=Event.START,
        done=Event.POWERED_ON,
        summary="power on",
        conductor_method="start_instance",
        agent=AgentCall("set_power_state", _V1_0, "power on"),
        policy_rule=ACTION_RULE,
        http=_action("os-start"),
        cli="instance start",
        notification="power_on",
    ),
    Verb(
        name="rebuild",
        event=Event.REBUILD,
        done=Event.REBUILT,
        summary="re-image the node in place",
        conductor_method="rebuild_instance",
        # 1.4 (REBUILD_SPEC_VERSION) when it carries the image and config drive.
        agent=AgentCall("rebuild_instance", _SOFT_POWER),
        policy_rule=ACTION_RULE,
        http=_action("rebuild"),
        cli="instance rebuild",
        notification="rebuild",
    ),
    Verb(
        name="delete",
        event=Event.DELETE,
        done=Event.TORN_DOWN,
        summary="tear the node down and free it",
        conductor_method="delete_instance",
        agent=AgentCall("destroy_instance", _V1_0),
        policy_rule=DELETE_RULE,
        http=HttpCall("DELETE", INSTANCE_PATH),
        cli="instance delete",
        notification="delete",
    ),
)

#: Each verb by the event that starts it.
BY_EVENT: Mapping[Event, Verb] = {verb.event: verb for verb in VERBS}
#: Each verb by the task state it sets.
BY_TASK: Mapping[TaskState, Verb] = {verb.task_state: verb for verb in VERBS}
#: The verbs the HTTP API takes as instance actions (``POST .../action``).
ACTIONS: tuple[Verb, ...] = tuple(verb for verb in VERBS if verb.http.action is not None)


def action_names() -> str:
    """The instance actions in words, as a sentence starts: "Reboot, stop, start or rebuild"."""
    names = list(dict.fromkeys(verb.cli_command.split()[-1] for verb in ACTIONS))
    words = ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]
    return words[:1].upper() + words[1:]
