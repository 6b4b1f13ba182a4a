# SPDX-License-Identifier: Apache-2.0
"""A stop's steps, each within its own deadline (:mod:`conductor.common.stop_steps`)."""

from __future__ import annotations

import logging
import threading

import pytest

from conductor.common.stop_steps import StopSteps
from conductor.service import ConductorService


def test_a_step_that_hangs_is_cut_short_and_the_next_steps_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    frozen = threading.Event()  # a broker that never answers
    ran: list[str] = []
    steps = StopSteps("Conductor c1", budget=60.0)
    with caplog.at_level(logging.WARNING, logger="conductor.common.stop_steps"):
        assert steps.run("stopping the RPC server", frozen.wait, 0.2) is False
        assert steps.run("leaving the group", lambda: ran.append("left"), 5.0) is True
    assert ran == ["left"] and not frozen.is_set()
    assert steps.cut == ["stopping the RPC server"]
    [said] = caplog.records
    assert "Conductor c1" in said.getMessage() and "stopping the RPC server" in said.getMessage()
    frozen.set()


def test_a_failing_step_is_said_and_the_stop_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> None:
        raise OSError("connection reset")

    steps = StopSteps("Agent a1", budget=60.0)
    with caplog.at_level(logging.WARNING, logger="conductor.common.stop_steps"):
        assert steps.run("closing the connection to the broker", broken, 5.0) is False
    assert steps.cut == []  # it ended, badly
    assert "connection reset" in caplog.records[0].getMessage()


def test_the_reserve_is_kept_for_the_steps_that_must_always_run() -> None:
    steps = StopSteps("Agent a1", budget=10.0, reserve=4.0)
    assert steps.left() <= 6.0 < steps.left(reserved=True) <= 10.0
    hang = threading.Event()
    spent = StopSteps("Agent a1", budget=0.3, reserve=0.3)
    # No time left but the reserve: an ordinary step gets none, a reserved one gets it.
    assert spent.run("waiting for the restart hold", hang.wait, 30.0) is False
    assert spent.run("leaving the group", lambda: None, 30.0, reserved=True) is True
    assert spent.current == "leaving the group"
    hang.set()


def test_a_conductor_whose_stop_cut_a_step_short_leaves_its_thread_to_the_exit() -> None:
    """The runner exits without joining what a cut step left running (the
    interpreter would wait for it: an RPC call that does not end)."""
    service = ConductorService.__new__(ConductorService)
    service._stop_steps = None
    assert service.threads_left() == 0
    release = threading.Event()
    steps = StopSteps("Conductor c", 5.0)
    steps.run("a step that hangs", lambda: release.wait(10), 0.1)
    steps.run("a step that ends", lambda: None, 1.0)
    service._stop_steps = steps
    try:
        assert service.threads_left() == 1
    finally:
        release.set()
