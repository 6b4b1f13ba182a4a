# SPDX-License-Identifier: Apache-2.0
"""``[simulated_driver] failing_nodes``: a node whose back end refuses actions.

Deploys on such a node succeed (an instance can be placed there); its power
actions, rebuilds and teardowns fail with :class:`DriverError`, all of them
or only the one named (``NODE:ACTION``), and nothing on the node changes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conductor.common.exception import DriverError
from conductor.common.objects import PowerState, ProvisionState
from tests.unit.test_drivers import ctx_for, make_driver, make_node, no_progress


def test_every_action_but_a_deploy_fails_on_a_failing_node(tmp_path: Path) -> None:
    driver = make_driver(tmp_path, failing_nodes="bad-1")
    node = make_node(name="bad-1", power_state=PowerState.OFF)
    ctx = ctx_for(node, instance="inst-1")
    driver.deploy(ctx, node, no_progress)
    for action, call in (
        ("set_power", lambda: driver.set_power(ctx, node, "power off")),
        ("rebuild", lambda: driver.rebuild(ctx, node, no_progress)),
        ("destroy", lambda: driver.destroy(ctx, node)),
    ):
        with pytest.raises(DriverError, match="failing_nodes") as raised:
            call()
        assert (raised.value.node_uuid, raised.value.action) == (node.uuid, action)
    state = driver.node_state(node.uuid)
    assert state is not None
    assert (state.provision_state, state.power_state) == (ProvisionState.ACTIVE, PowerState.ON)


def test_one_action_fails_when_named_and_other_nodes_never(tmp_path: Path) -> None:
    node, other = make_node(power_state=PowerState.OFF), make_node(power_state=PowerState.OFF)
    driver = make_driver(tmp_path, failing_nodes=f"{node.uuid}:power_on")
    ctx = ctx_for(node, instance="inst-1")
    driver.deploy(ctx, node, no_progress)
    assert driver.set_power(ctx, node, "power off") is PowerState.OFF
    with pytest.raises(DriverError, match="failing_nodes"):
        driver.set_power(ctx, node, "power on")
    other_ctx = ctx_for(other)
    assert driver.set_power(other_ctx, other, "power on") is PowerState.ON
