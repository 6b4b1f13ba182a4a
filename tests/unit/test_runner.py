# SPDX-License-Identifier: Apache-2.0
"""A service's stop has a deadline: past it the process exits, naming what it waited for.

The service runs as its own process under :func:`run_service`, as from its
console script, and gets a real SIGTERM.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

from conductor.common.runner import EXIT_S
from tests.harness.process import REPO

_SERVICE = textwrap.dedent(
    """
    import atexit, logging, sys, threading, time
    from conductor.common.runner import run_service

    logging.basicConfig(level=logging.INFO, stream=sys.stderr)

    def a_call_that_never_returns():
        threading.Event().wait()

    def stray(daemon):  # a library's thread the service does not know of
        thread = threading.Thread(
            target=a_call_that_never_returns, name="library-worker", daemon=daemon
        )
        thread.start()
        return thread

    class Service:
        stop_step = "not stopping"

        def __init__(self):
            self.stopped = threading.Event()

        def run(self):
            if {left}:  # a thread stuck on a hung dependency, as a library makes it
                threading.Thread(target=threading.Event().wait, daemon=False).start()
            if {stray} == "thread":  # the interpreter's exit joins it
                stray(daemon=False)
            if {stray} == "exit-handler":  # joined at exit, as futurist's workers
                atexit.register(stray(daemon=True).join)
            print("serving", flush=True)
            self.stopped.wait()

        def threads_left(self):
            return int({left})

        def stop_timeout(self):
            return 2.0

        def terminate(self):
            self.stop_step = "waiting for a broker that never answers"
            if {hang}:
                threading.Event().wait()  # a dependency that never answers
            self.stopped.set()
            logging.getLogger("svc").info("svc stopped")

        def reload(self):
            pass

    sys.exit(run_service(Service(), "svc"))
    """
)


def _stop(hang: bool, left: bool = False, stray: str = "") -> tuple[int, str]:
    with subprocess.Popen(
        [sys.executable, "-c", _SERVICE.format(hang=hang, left=left, stray=repr(stray))],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None and proc.stdout.readline() == "serving\n"
        proc.send_signal(signal.SIGTERM)
        try:
            _out, stderr = proc.communicate(timeout=60)  # without the deadline: never
        finally:
            proc.kill()
        return proc.returncode, stderr


def test_a_stop_that_hangs_is_abandoned_at_its_deadline_with_one_warning() -> None:
    code, stderr = _stop(hang=True)
    assert code == 0
    [warning] = [line for line in stderr.splitlines() if "WARNING" in line]
    assert "svc: stop not finished after 2 s, still waiting for a broker that never answers" in (
        warning
    )


def test_a_stop_that_finishes_says_nothing() -> None:
    code, stderr = _stop(hang=False)
    assert code == 0
    assert "WARNING" not in stderr


def test_a_stop_that_left_a_thread_waiting_for_a_dependency_exits_without_it() -> None:
    """The interpreter's exit would join the thread: never, here."""
    code, stderr = _stop(hang=False, left=True)
    assert code == 0
    assert "svc stopped" in stderr  # the logs flushed before the exit
    assert "WARNING" not in stderr


@pytest.mark.parametrize("stray", ["thread", "exit-handler"])
def test_an_exit_held_by_a_thread_the_stop_did_not_know_of_ends_naming_it(stray: str) -> None:
    """The interpreter's exit would wait for the thread forever: it gets
    EXIT_S, then the process exits, saying which thread and where it waits."""
    code, stderr = _stop(hang=False, stray=stray)
    assert code == 0
    assert "svc stopped" in stderr
    [warning] = [line for line in stderr.splitlines() if "WARNING" in line]
    assert (
        f"svc: exit not finished {EXIT_S:.0f} s after the service stopped, still waiting for "
        "thread library-worker (in a_call_that_never_returns, <string>:"
    ) in warning
    assert warning.endswith("): exiting without it")
