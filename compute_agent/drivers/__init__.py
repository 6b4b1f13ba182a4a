# SPDX-License-Identifier: Apache-2.0
"""Compute drivers: how an agent acts on bare-metal nodes.

The agent talks to every back end through :class:`ComputeDriver`, loaded by
name from the ``ringfleet.compute.drivers`` entry points with
:func:`load_driver`; ``simulated`` (the simulator) is the default.
"""

from __future__ import annotations

from compute_agent.drivers.base import (
    DRIVER_NAMESPACE,
    POWER_TARGETS,
    ActionContext,
    BackendNode,
    ComputeDriver,
    PowerTarget,
    ProgressCallback,
    load_driver,
    validate_power_target,
)

__all__ = [
    "DRIVER_NAMESPACE",
    "POWER_TARGETS",
    "ActionContext",
    "BackendNode",
    "ComputeDriver",
    "PowerTarget",
    "ProgressCallback",
    "load_driver",
    "validate_power_target",
]
