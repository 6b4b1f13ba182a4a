"""systemd ``Type=notify`` support: READY, RELOADING, STOPPING and STATUS messages.

A few lines of the sd_notify protocol (a datagram on ``$NOTIFY_SOCKET``)
rather than a dependency.  Without the variable (not under systemd) every
call is a no-op.
"""

from __future__ import annotations

import logging
import os
import socket

__all__ = ["notify"]

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
