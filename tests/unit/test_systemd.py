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


def _received(sock: socket.socket, seconds: float) -> list[str]:
    messages: list[str] = []
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        try:
            messages.append(sock.recv(4096).decode())
        except TimeoutError:
            continue
    return messages


def test_a_start_waiting_for_a_dependency_extends_the_start_timeout_until_done(
    notify_socket: socket.socket,
) -> None:
    waiting = systemd.StartupWait(period=0.1)
    waiting.start()
    during = _received(notify_socket, 0.55)
    # Each asks for three periods: systemd never runs out between two of them.
    assert len(during) >= 3, during
    assert set(during) == {"EXTEND_TIMEOUT_USEC=300000"}, during
    waiting.done()
    time.sleep(0.15)  # one message may have been on its way
    _received(notify_socket, 0.05)
    assert _received(notify_socket, 0.35) == []


def test_outside_systemd_nothing_is_started(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    waiting = systemd.StartupWait(period=0.01)
    waiting.start()
    assert waiting._thread is None
    waiting.done()
