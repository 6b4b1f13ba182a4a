# SPDX-License-Identifier: Apache-2.0
"""Running a service from a console script: signals, reload, ordered stop on time.

Signal handlers only set flags: stopping oslo.messaging inside a handler can
hang, so the stop runs on its own thread while the service runs in another.
The stop has a deadline, the service's :meth:`Service.stop_timeout`: a step
that cannot finish in time (a broker or database that does not answer) is
abandoned with one WARNING naming it, and the process exits anyway.
systemd's ``TimeoutStopSec`` is set above that deadline, so its SIGKILL is
never the normal end of a stop.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from typing import Protocol

from conductor.common import malloc_arenas
from conductor.common.exception import ConfigurationError, RingfleetError

__all__ = ["Service", "run_service"]

LOG = logging.getLogger(__name__)

#: Seconds run() gets to return once the stop is done.
_RUN_RETURNS_S = 2.0


class Service(Protocol):
    def run(self) -> None: ...

    def terminate(self) -> None: ...

    def reload(self) -> None: ...

    def stop_timeout(self) -> float:
        """Seconds a graceful stop may take before the process exits anyway."""
        ...

    @property
    def stop_step(self) -> str:
        """What the stop is doing now (named if the deadline passes)."""
        ...

    def threads_left(self) -> int:
        """Threads a finished stop left waiting for a hung dependency."""
        ...


def run_service(service: Service, prog: str) -> int:
    """Run until SIGTERM/SIGINT (graceful stop); SIGHUP reloads.  An exit code."""
    malloc_arenas.cap()  # before the service makes its threads
    stop, reload = threading.Event(), threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGHUP, lambda *_: reload.set())
    failure: list[BaseException] = []

    def serve() -> None:
        try:
            service.run()
        except BaseException as exc:  # reported by the main thread
            failure.append(exc)
        finally:
            stop.set()  # run() also returns by itself (a drained agent)

    runner = threading.Thread(target=serve, name=prog, daemon=True)
    runner.start()
    while not stop.wait(0.5):
        if reload.is_set():
            reload.clear()
            service.reload()
    if failure:
        if isinstance(failure[0], ConfigurationError):
            print(f"{prog}: {failure[0]}", file=sys.stderr)
            return 2
        if isinstance(failure[0], RingfleetError):
            # The service stopped itself for a reason it logged (another
            # process took its identity): one line, a failed unit.
            print(f"{prog}: {failure[0]}", file=sys.stderr)
            return 1
        raise failure[0]
    deadline = service.stop_timeout()
    stopper = threading.Thread(target=service.terminate, name=f"{prog}-stop", daemon=True)
    stopper.start()
    stopper.join(deadline)
    if stopper.is_alive():
        _abandon(prog, deadline, service.stop_step)
    if service.threads_left():
        # The interpreter's exit would join them (futurist joins its RPC
        # workers): as long as the dependency takes to answer.
        _exit_now()
    # run() returns as soon as the stop is done, unless it is still starting
    # (waiting for a dependency): a daemon thread, left behind.
    runner.join(_RUN_RETURNS_S)
    return 0


def _abandon(prog: str, deadline: float, step: str) -> None:
    """Exit now: what the stop still waits for may never answer."""
    LOG.warning(
        "%s: stop not finished after %.0f s, still %s: exiting without it", prog, deadline, step
    )
    # Not sys.exit: the interpreter would wait for the library threads that
    # are stuck on the dependency (oslo.messaging's connection retries).
    _exit_now()


def _exit_now() -> None:
    """Exit at once, the logs and standard streams flushed first."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
