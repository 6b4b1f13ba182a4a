# SPDX-License-Identifier: Apache-2.0
"""Running a service from a console script: signals, reload, ordered stop on time.

Signal handlers only set flags: stopping oslo.messaging inside a handler can
hang, so the stop runs on its own thread while the service runs in another.
The stop has a deadline, the service's :meth:`Service.stop_timeout`: a step
that cannot finish in time (a broker or database that does not answer) is
abandoned with one WARNING naming it, and the process exits anyway.  The
interpreter's own exit, which follows, has a deadline too (:data:`EXIT_S`):
it joins the threads libraries leave behind (futurist's exit handler joins
every worker of its pools, without a timeout), and one still inside a call
to a dependency would hold the process for as long as that call takes; past
the deadline the process exits without it, with one WARNING naming the
thread and where it waits.  systemd's ``TimeoutStopSec`` is set above both
deadlines, so its SIGKILL is never the normal end of a stop.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from types import FrameType
from typing import Final, Protocol

from conductor.common import gc_pace, malloc_arenas
from conductor.common.exception import ConfigurationError, RingfleetError

__all__ = ["EXIT_S", "Service", "run_service", "tune_process"]

LOG = logging.getLogger(__name__)

#: Seconds run() gets to return once the stop is done.
_RUN_RETURNS_S = 2.0

#: Seconds from the end of the stop to the end of the process (run()
#: returning, then the interpreter's exit) before it exits without them.
EXIT_S: Final = 5.0

_THREADING: Final = vars(threading)


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
    tune_process()  # before the service makes its threads
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
        code = _failed(prog, failure[0])
        _exit_within(prog, EXIT_S, code)
        return code
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
    _exit_within(prog, EXIT_S, 0)
    # run() returns as soon as the stop is done, unless it is still starting
    # (waiting for a dependency): a daemon thread, left behind.
    runner.join(_RUN_RETURNS_S)
    return 0


def tune_process() -> None:
    """A long-running service's process settings: glibc's malloc arenas
    capped, Python's garbage collector paced (each module says why)."""
    malloc_arenas.cap()
    gc_pace.set_pace()


def _failed(prog: str, failure: BaseException) -> int:
    """The exit code of a service whose run() failed; raised if unforeseen."""
    if isinstance(failure, ConfigurationError):
        print(f"{prog}: {failure}", file=sys.stderr)
        return 2
    if isinstance(failure, RingfleetError):
        # The service stopped itself for a reason it logged (another
        # process took its identity): one line, a failed unit.
        print(f"{prog}: {failure}", file=sys.stderr)
        return 1
    raise failure


def _abandon(prog: str, deadline: float, step: str) -> None:
    """Exit now: what the stop still waits for may never answer."""
    LOG.warning(
        "%s: stop not finished after %.0f s, still %s: exiting without it", prog, deadline, step
    )
    # Not sys.exit: the interpreter would wait for the library threads that
    # are stuck on the dependency (oslo.messaging's connection retries).
    _exit_now()


def _exit_within(prog: str, seconds: float, code: int) -> None:
    """Exit after ``seconds`` if the process has not exited by then: a
    thread the stop did not know of (a library's, inside a call) would
    hold the interpreter's exit."""
    main = threading.main_thread()

    def guard() -> None:
        time.sleep(seconds)
        LOG.warning(
            "%s: exit not finished %.0f s after the service stopped, still waiting for %s: "
            "exiting without it",
            prog,
            seconds,
            _exit_waits_for(main),
        )
        _exit_now(code)

    # A daemon thread: it runs on while the main thread joins the others.
    threading.Thread(target=guard, name=f"{prog}-exit", daemon=True).start()


def _exit_waits_for(main: threading.Thread) -> str:
    """The thread the main thread's exit waits for, and where that thread is."""
    frames = sys._current_frames()
    frame: FrameType | None = frames.get(main.ident or 0)
    while frame is not None:  # an exit handler joining a thread (futurist's)
        joined = frame.f_locals.get("self")
        if frame.f_code.co_name == "join" and isinstance(joined, threading.Thread):
            return _thread_at(joined, frames)
        frame = frame.f_back
    others = [
        thread
        for thread in threading.enumerate()
        if not thread.daemon and thread is not main and thread.is_alive()
    ]
    if others:  # the interpreter joins every thread not a daemon
        return ", ".join(_thread_at(thread, frames) for thread in others)
    return "the interpreter's exit handlers"


def _thread_at(thread: threading.Thread, frames: dict[int, FrameType]) -> str:
    """``thread NAME (in FUNCTION, FILE:LINE)``: where, out of the threading
    module's waits, the thread is."""
    frame = frames.get(thread.ident or 0)
    while frame is not None and frame.f_back is not None and frame.f_globals is _THREADING:
        frame = frame.f_back
    if frame is None:
        return f"thread {thread.name}"
    code = frame.f_code
    where = f"{os.path.basename(code.co_filename)}:{frame.f_lineno}"
    return f"thread {thread.name} (in {code.co_name}, {where})"


def _exit_now(code: int = 0) -> None:
    """Exit at once, the logs and standard streams flushed first."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
