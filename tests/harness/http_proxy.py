# SPDX-License-Identifier: Apache-2.0
"""An HTTP proxy on 127.0.0.1 that a test can make answer 503: a back end's API in trouble.

Put between the processes under test and one HTTP server (the test Ironic),
it forwards every request until :meth:`Http503Proxy.fail`; from then on it
answers each one with ``503 Service Unavailable`` and an OpenStack-style
error body, as a load balancer with no healthy back end (or an API whose
conductors are all down) does, until :meth:`Http503Proxy.heal`.  Unlike a
cut TCP connection, the client gets an answer: the HTTP error path is the
one exercised.  It also records what it forwarded (:attr:`Http503Proxy.forwarded`):
what the back end was asked to do, counted by the test.
"""

from __future__ import annotations

import http.server
import json
import threading

import requests

__all__ = ["Http503Proxy"]

#: Headers not passed on (hop by hop, or recomputed here).
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-encoding", "content-length"}
)


class Http503Proxy:
    """Forwards ``http://127.0.0.1:<port>`` to *target* (``http://host:port``)."""

    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        self.failing = threading.Event()
        self.lock = threading.Lock()
        self.answered_503 = 0
        #: (method, path, status) of every request forwarded, in order
        self.forwarded: list[tuple[str, str, int]] = []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass  # the test's output is not the place

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                # One request at a time: every answer forwarded before fail()
                # is sent before the first 503, and every 503 before heal()
                # returns (clients see one outage, not a flapping API).
                with proxy.lock:
                    self._answer(body)

            def _answer(self, body: bytes | None) -> None:
                if proxy.failing.is_set():
                    proxy.answered_503 += 1
                    fault = {"faultstring": "No conductor service is available", "debuginfo": None}
                    self._reply(503, {}, json.dumps({"error_message": json.dumps(fault)}).encode())
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                answer = requests.request(
                    self.command,
                    proxy.target + self.path,
                    headers=headers,
                    data=body,
                    timeout=30,
                    allow_redirects=False,
                )
                proxy.forwarded.append((self.command, self.path, answer.status_code))
                passed = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP_BY_HOP}
                self._reply(answer.status_code, passed, answer.content)

            def _reply(self, status: int, headers: dict[str, str], body: bytes) -> None:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                if "content-type" not in {k.lower() for k in headers}:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="http-503-proxy", daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def fail(self) -> None:
        """Answer 503 to every request from now on (once the one being forwarded is answered)."""
        with self.lock:
            self.failing.set()

    def heal(self) -> None:
        """Forward again."""
        with self.lock:
            self.failing.clear()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self) -> Http503Proxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
