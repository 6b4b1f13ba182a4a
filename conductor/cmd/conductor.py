"""``ringfleet-conductor``: run one conductor (systemd ``Type=notify``).

SIGTERM/SIGINT stop it gracefully, SIGHUP reloads the mutable options.  The
signal handlers only set flags: the shutdown itself runs on the main thread
(stopping oslo.messaging inside a handler can hang).
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Sequence

from oslo_config import cfg

from conductor import rpc
from conductor.exception import ConfigurationError
from conductor.prepare import prepare_service
from conductor.service import ConductorService


def main(argv: Sequence[str] | None = None) -> int:
    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    prepare_service(list(argv) if argv is not None else sys.argv, conf)
    service = ConductorService(conf)
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
            stop.set()

    runner = threading.Thread(target=serve, name="conductor", daemon=True)
    runner.start()
    while not stop.wait(0.5):
        if reload.is_set():
            reload.clear()
            service.reload()
    if failure:
        if isinstance(failure[0], ConfigurationError):
            print(f"ringfleet-conductor: {failure[0]}", file=sys.stderr)
            return 2
        raise failure[0]
    service.terminate()
    runner.join(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
