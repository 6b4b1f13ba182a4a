# SPDX-License-Identifier: Apache-2.0
"""systemd ``Type=notify`` support: READY, RELOADING, STOPPING and STATUS messages.

A few lines of the sd_notify protocol (a datagram on ``$NOTIFY_SOCKET``)
rather than a dependency.  Without the variable (not under systemd) every
call is a no-op.  :class:`StartupWait` keeps systemd's start timeout from
killing a service that waits for a dependency before READY.
"""

from __future__ import annotations

import logging
import os
import socket
import threading

__all__ = ["StartupWait", "notify"]

LOG = logging.getLogger(__name__)


def notify(*fields: str) -> bool:
    """Send ``fields`` (e.g. ``"READY=1"``, ``"STATUS=..."``); False if not under systemd."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]  # abstract namespace
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall("\n".join(fields).encode())
    except OSError as exc:
        LOG.warning("Could not notify systemd (%s): %s", ", ".join(fields), exc)
        return False
    return True


class StartupWait:
    """Tells systemd, while a service waits for a dependency, that it is still starting.

    A service started before its broker, database or etcd says so once and
    keeps trying; it sends READY=1 only once it can serve.  Under
    ``Type=notify`` systemd kills a service without READY after
    ``TimeoutStartSec`` (120 s in the shipped units) and ``Restart=`` starts
    it again: a dependency down for longer would cost a restart, and its
    WARNING again, every two minutes.  Until :meth:`done`, this asks every
    ``period`` seconds for ``EXTEND_TIMEOUT_USEC`` of three periods, so that
    systemd waits as long as the service does (``systemctl start`` returns
    when it is READY or has failed; a SIGTERM stops the wait at once).
    """

    def __init__(self, period: float = 20.0) -> None:
        self.period = period
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start asking (not under systemd: nothing to do)."""
        if not os.environ.get("NOTIFY_SOCKET") or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._extend, name="startup-wait", daemon=True)
        self._thread.start()

    def done(self) -> None:
        """READY was sent, or the service stops: stop asking."""
        self._done.set()

    def _extend(self) -> None:
        extension = f"EXTEND_TIMEOUT_USEC={int(self.period * 3 * 1_000_000)}"
        while not self._done.wait(self.period):
            notify(extension)
