# SPDX-License-Identifier: Apache-2.0
"""A TCP proxy on 127.0.0.1 that a test can cut and heal: a real network partition.

Put between one process and one server (an agent and etcd, say), it forwards
bytes both ways until :meth:`TcpProxy.cut`, which closes every open
connection and refuses new ones (the listening socket is closed, so a
client sees "connection refused" at once, as with a host whose route is
gone and which answers with a reset).  :meth:`TcpProxy.heal` listens again
on the same port.  :meth:`TcpProxy.hang` is the other failure: a server
that stopped answering (SIGSTOP, a hung host).  Connections are accepted and
kept open, and nothing is forwarded either way until :meth:`TcpProxy.heal`.
"""

from __future__ import annotations

import contextlib
import socket
import threading

__all__ = ["TcpProxy"]

_CHUNK = 65536


class TcpProxy:
    """Forwards ``127.0.0.1:port`` to ``127.0.0.1:target_port``."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._flowing = threading.Event()
        self._flowing.set()
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port: int = probe.getsockname()[1]
        probe.close()
        self.heal()

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.port}"

    def heal(self) -> None:
        """Accept and forward connections (again)."""
        self._flowing.set()
        with self._lock:
            if self._listener is not None:
                return
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", self.port))
            listener.listen(64)
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        """Close every connection and refuse new ones until :meth:`heal`."""
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, set()
        if listener is not None:
            # shutdown() first: close() alone leaves the socket listening for
            # as long as a thread is blocked in accept() on it, and the next
            # client would be accepted, then reset, instead of refused.
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    close = cut

    def hang(self) -> None:
        """Keep every connection open and accept new ones, but forward nothing."""
        self._flowing.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # cut
            self._flowing.wait()  # hung: the client waits for a greeting
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    upstream.close()
                    return
                self._conns.update((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(_CHUNK):
                self._flowing.wait()  # hung: held, neither sent nor dropped
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()  # the other direction's recv then ends too
            with self._lock:
                self._conns.discard(src)
                self._conns.discard(dst)
