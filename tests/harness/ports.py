# SPDX-License-Identifier: Apache-2.0
"""Ports on 127.0.0.1 for tests: one nothing listens on, one that never answers."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

__all__ = ["free_port", "silent_port"]


def free_port() -> int:
    """A port nothing listens on (a connection to it is refused) until someone binds it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def silent_port() -> Iterator[int]:
    """A port that accepts TCP connections (the kernel's backlog) and never answers:
    a server that hangs."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield int(sock.getsockname()[1])
