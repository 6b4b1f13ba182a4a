# SPDX-License-Identifier: Apache-2.0
"""systemd notify messages: a service waiting for a dependency keeps its start alive."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator

import pytest

from conductor.common import systemd


@pytest.fixture
def notify_socket(monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """A notify socket in the abstract namespace, as systemd hands one over."""
    name = f"ringfleet-test-{uuid.uuid4().hex}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(0.05)
    monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
    try:
        yield sock
    finally:
        sock.close()


def _next(sock: socket.socket, within: float) -> str | None:
    """The next message, or None if none came within *within* seconds."""
    ends = time.monotonic() + within
    while time.monotonic() < ends:
        try:
            return sock.recv(4096).decode()
        except TimeoutError:
            continue
    return None


def test_a_start_waiting_for_a_dependency_extends_the_start_timeout_until_done(
    notify_socket: socket.socket,
) -> None:
    waiting = systemd.StartupWait(period=0.1)
    waiting.start()
    # It keeps asking (a generous bound: a loaded machine may be slow), and
    # each time for three periods, so systemd never runs out between two.
    during = [_next(notify_socket, 10) for _ in range(3)]
    assert during == ["EXTEND_TIMEOUT_USEC=300000"] * 3, during
    waiting.done()
    waiting._thread.join(10)  # type: ignore[union-attr]
    assert not waiting._thread.is_alive()  # type: ignore[union-attr]
    while _next(notify_socket, 0.01) is not None:  # any sent before done()
        pass
    assert _next(notify_socket, 0.3) is None  # three periods: nothing more


def test_outside_systemd_nothing_is_started(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    waiting = systemd.StartupWait(period=0.01)
    waiting.start()
    assert waiting._thread is None
    waiting.done()
