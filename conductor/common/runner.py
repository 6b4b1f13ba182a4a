"""Running a service from a console script: signals, reload, ordered stop.

Signal handlers only set flags: stopping oslo.messaging inside a handler can
hang, so the stop runs on the main thread while the service runs in its own.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Protocol

from conductor.common.exception import ConfigurationError, RingfleetError

__all__ = ["Service", "run_service"]


class Service(Protocol):
    def run(self) -> None: ...

    def terminate(self) -> None: ...

    def reload(self) -> None: ...


def run_service(service: Service, prog: str) -> int:
    """Run until SIGTERM/SIGINT (graceful stop); SIGHUP reloads.  An exit code."""
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
    service.terminate()
    runner.join(10)
    return 0
