"""Compute drivers: how an agent acts on bare-metal nodes.

The agent talks to every back end through :class:`ComputeDriver`, loaded by
name from the ``ringfleet.compute.drivers`` entry points with
:func:`load_driver`; ``simulated`` is the built-in default.
"""

from __future__ import annotations

from compute_agent.drivers.base import (
    BUILTIN_DRIVERS,
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
    "BUILTIN_DRIVERS",
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
