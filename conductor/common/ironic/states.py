# SPDX-License-Identifier: Apache-2.0
"""Ironic's provision states, declared once: what they mean to ringfleet.

Three readings of the same state names, for the two services:

* what a state *is* to ringfleet (:func:`provision_state_of`,
  :func:`power_state_of`): what the conductors' inventory sync stores and
  the driver reports, so the scheduler never needs Ironic's names; and which
  states ``fleet check`` compares instances against (:data:`ACTIVE`,
  :data:`FAILED`);
* whether Ironic is still moving a node on by itself.  Ironic's own state
  machine (``ironic/common/states.py``) splits its states into *stable*
  ones, which change only when asked, and *unstable* ones, which Ironic's
  conductor moves on by itself.  The driver decides whether a transition is
  over from that split alone (:func:`in_transition`), never from
  ``target_provision_state``: Ironic keeps ``target_provision_state =
  active`` on a ``deploy failed`` node (after a callback timeout, and after
  its own restart interrupted the deploy), so "has a target" does not mean
  "still moving";
* what the ``ironic`` driver does next in each state, per action
  (:func:`deploy_step`, :func:`teardown_step`).  A state this table does
  not know (a newer Ironic) is at rest and not deployable: the deploy fails
  with Ironic's state named, a teardown asks Ironic to undeploy it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

from conductor.common.objects import PowerState, ProvisionState

__all__ = [
    "ACTIVE",
    "FAILED",
    "HOLDING",
    "MOVING",
    "NEVER_DEPLOYABLE",
    "UNDEPLOYABLE",
    "DeployStep",
    "TeardownStep",
    "deploy_step",
    "in_transition",
    "power_state_of",
    "provision_state_of",
    "teardown_step",
]

#: Ironic's provision state of a node deployed with an instance.
ACTIVE: Final = "active"
#: Ironic's provision states of a node out of service until someone fixes it.
FAILED: Final = frozenset({"clean failed", "deploy failed", "error"})

_PS = ProvisionState
#: Ironic's provision states, as ringfleet sees them.  A node hosting an
#: instance (rescue, servicing) is active to ringfleet; one Ironic is still
#: preparing (enroll, verifying) or an operator manages (inspection,
#: adoption) is not schedulable; failures are errors.
_PROVISION_STATES: Final[Mapping[str, ProvisionState]] = {
    "enroll": _PS.ENROLL,
    "verifying": _PS.ENROLL,
    "manageable": _PS.MANAGEABLE,
    "inspecting": _PS.MANAGEABLE,
    "inspect wait": _PS.MANAGEABLE,
    "inspect failed": _PS.MANAGEABLE,
    "adopting": _PS.MANAGEABLE,
    "adopt failed": _PS.MANAGEABLE,
    "available": _PS.AVAILABLE,
    "deploying": _PS.DEPLOYING,
    "wait call-back": _PS.DEPLOYING,
    "deploy hold": _PS.DEPLOYING,
    "active": _PS.ACTIVE,
    "rescuing": _PS.ACTIVE,
    "rescue wait": _PS.ACTIVE,
    "rescue": _PS.ACTIVE,
    "rescue failed": _PS.ACTIVE,
    "unrescuing": _PS.ACTIVE,
    "unrescue failed": _PS.ACTIVE,
    "servicing": _PS.ACTIVE,
    "service wait": _PS.ACTIVE,
    "service hold": _PS.ACTIVE,
    "service failed": _PS.ACTIVE,
    "deleting": _PS.DELETING,
    "cleaning": _PS.CLEANING,
    "clean wait": _PS.CLEANING,
    "clean hold": _PS.CLEANING,
    "deploy failed": _PS.ERROR,
    "clean failed": _PS.ERROR,
    "error": _PS.ERROR,
}

_POWER_STATES: Final[Mapping[str, PowerState]] = {
    "power on": PowerState.ON,
    "power off": PowerState.OFF,
}


def provision_state_of(ironic_state: str | None) -> ProvisionState:
    """Ringfleet's provision state for Ironic's *ironic_state*.

    A state this release does not know (a newer Ironic) is an error: the
    node is then never scheduled until someone looks, instead of guessed at.
    """
    if ironic_state is None:  # Ironic before 1.2 called enroll "None"
        return ProvisionState.AVAILABLE
    return _PROVISION_STATES.get(ironic_state, ProvisionState.ERROR)


def power_state_of(ironic_power: str | None) -> PowerState | None:
    """Ringfleet's power state for Ironic's; ``None`` when unknown (fake nodes never powered)."""
    if ironic_power is None:
        return None
    return _POWER_STATES.get(ironic_power)


#: Ironic moves a node out of these by itself (its UNSTABLE_STATES, with
#: the servicing states of newer releases): follow them.
MOVING: Final = frozenset(
    {
        "deploying",
        "wait call-back",
        "deleting",
        "cleaning",
        "clean wait",
        "verifying",
        "inspecting",
        "inspect wait",
        "adopting",
        "rescuing",
        "rescue wait",
        "unrescuing",
        "servicing",
        "service wait",
    }
)
#: A step paused the transition until it (or an operator) lets it go on:
#: still under way, so followed like :data:`MOVING`.
HOLDING: Final = frozenset({"deploy hold", "clean hold", "service hold"})
#: States Ironic accepts the ``deleted`` verb in (it tears the instance down).
UNDEPLOYABLE: Final = frozenset(
    {
        "active",
        "wait call-back",
        "deploy hold",
        "deploy failed",
        "error",
        "rescue",
        "rescue wait",
        "rescue failed",
        "unrescue failed",
    }
)
#: States no deploy may start from and waiting will not change.
NEVER_DEPLOYABLE: Final = frozenset(
    {
        "enroll",
        "verifying",
        "manageable",
        "inspecting",
        "inspect wait",
        "inspect failed",
        "adopting",
        "adopt failed",
        "clean failed",
    }
)
#: Where a teardown ends: nothing deployed any more.
_TORN_DOWN: Final = frozenset(
    {"available", "manageable", "enroll", "inspect failed", "adopt failed"}
)


def in_transition(state: str | None) -> bool:
    """Ironic is moving the node on by itself (or a step holds it): wait."""
    return state in MOVING or state in HOLDING


class DeployStep(enum.Enum):
    """What a deploy does next, given the node's state in Ironic."""

    #: the instance is deployed
    DONE = "done"
    #: a transition runs (ours, or one the previous owner started): follow it
    FOLLOW = "follow"
    #: ask Ironic to deploy (``active``)
    START = "start"
    #: the deploy failed in Ironic (``deploy failed``, or ``error``): tear
    #: down and reschedule, with Ironic's ``last_error``
    FAILED = "failed"
    #: nothing was deployed and this node cannot deploy: give the claim back
    #: and refuse the node (the build is rescheduled elsewhere)
    REFUSE = "refuse"


class TeardownStep(enum.Enum):
    """What a teardown does next, given the node's state in Ironic."""

    #: nothing is deployed any more
    DONE = "done"
    #: torn down, but cleaning failed: done, the node stays out of service
    CLEAN_FAILED = "clean failed"
    #: a transition runs that Ironic cannot interrupt: follow it first
    FOLLOW = "follow"
    #: ask Ironic to undeploy (``deleted``)
    UNDEPLOY = "undeploy"


def deploy_step(state: str | None, *, maintenance: bool) -> DeployStep:
    """The deploy's next step for a node claimed by its instance, in *state*."""
    if state == "active":
        return DeployStep.DONE
    if in_transition(state):
        return DeployStep.FOLLOW
    if state in ("deploy failed", "error"):
        # Deploying it again would hide the fault from the user: the node is
        # torn down and the build rescheduled.
        return DeployStep.FAILED
    if state == "available" and not maintenance:
        return DeployStep.START
    if maintenance or state in NEVER_DEPLOYABLE:
        return DeployStep.REFUSE
    return DeployStep.FAILED  # rescue, service failed, a newer state: not ours to fix


def teardown_step(state: str | None) -> TeardownStep:
    """The teardown's next step for a node in *state*."""
    if state in _TORN_DOWN or state is None:
        return TeardownStep.DONE
    if state == "clean failed":
        return TeardownStep.CLEAN_FAILED
    if state in UNDEPLOYABLE:
        # wait call-back and deploy hold are deletable: Ironic aborts the
        # deploy, so a delete never waits for a deploy that hangs.
        return TeardownStep.UNDEPLOY
    if in_transition(state):
        return TeardownStep.FOLLOW
    return TeardownStep.UNDEPLOY  # a state this release does not know: ask
