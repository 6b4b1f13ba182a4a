# SPDX-License-Identifier: Apache-2.0
"""The ``simulated`` compute driver: a bare-metal simulator (:class:`SimulatedDriver`).

Everything of the simulator is here: the driver (:mod:`.driver`), where the
simulated nodes live (:mod:`.node_store`), the log of every action with its
fencing epoch that the tests and the demo check (:mod:`.action_log`), and its
``[simulated_driver]`` options (:mod:`.conf`).
"""

from __future__ import annotations

from compute_agent.drivers.simulated.driver import (
    CLEAN_STEP,
    DEPLOY_STEPS,
    SimulatedDriver,
    SimulatedNode,
)

__all__ = ["CLEAN_STEP", "DEPLOY_STEPS", "SimulatedDriver", "SimulatedNode"]
