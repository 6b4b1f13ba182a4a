# SPDX-License-Identifier: Apache-2.0
"""``ringfleet-api`` under gunicorn, as a real child process on 127.0.0.1.

Started with ``python -m gunicorn 'conductor.api.wsgi:init_application()'``
(the production entry point), its config from ``RINGFLEET_API_CONFIG``;
stopped by its PID.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import requests

from tests.harness import REPO, wait_for
from tests.harness.ports import free_port

#: Static tokens of the API's token file: token -> roles and project.  What
#: a token builds belongs to its project, and it sees that project's only.
TOKENS = {
    "admin-token": "admin,member,reader demo",
    "member-token": "member,reader demo",
    "reader-token": "reader demo",
    "other-member-token": "member,reader other",
}


class ApiServer:
    """gunicorn serving the API: ``url``, ``session(token)``, ``stop()``."""

    def __init__(
        self,
        workdir: Path,
        transport_url: str,
        *,
        name: str = "api",
        workers: int = 1,
        threads: int = 8,
        auth: str = "token",
        debug: bool = True,
        extra: str = "",
    ) -> None:
        self.workdir = workdir
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_file = workdir / f"{name}.log"
        tokens = workdir / f"{name}-tokens"
        tokens.write_text("".join(f"{t} {r}\n" for t, r in TOKENS.items()))
        self.config = workdir / f"{name}.conf"
        self.config.write_text(
            f"[DEFAULT]\nhost = {name}\nlog_file = {self.log_file}\n"
            f"debug = {'true' if debug else 'false'}\n"
            f"transport_url = {transport_url}\n"
            f"[api]\nauth_strategy = {auth}\ntoken_file = {tokens}\n"
            "rpc_timeout = 20\n[oslo_middleware]\nmax_request_body_size = 1048576\n"
            f"{extra}"
        )
        self.workers, self.threads = workers, threads
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60) -> ApiServer:
        env = {**os.environ, "RINGFLEET_API_CONFIG": str(self.config)}
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "--bind",
                f"127.0.0.1:{self.port}",
                "--workers",
                str(self.workers),
                "--threads",
                str(self.threads),
                "--worker-class",
                "gthread",
                "--error-logfile",
                str(self.workdir / f"{self.name}-gunicorn.log"),
                "conductor.api.wsgi:init_application()",
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for(self._up, timeout, f"{self.name} answering at {self.url}", step=0.2)
        return self

    def _up(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            gunicorn_log = (self.workdir / f"{self.name}-gunicorn.log").read_text()[-3000:]
            raise AssertionError(f"{self.name} exited ({self.proc.returncode}):\n{gunicorn_log}")
        try:
            return requests.get(self.url + "/", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def session(self, token: str | None = "admin-token") -> requests.Session:
        session = requests.Session()
        if token is not None:
            session.headers["X-Auth-Token"] = token
        return session

    def log(self) -> str:
        try:
            return self.log_file.read_text()
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM to the gunicorn master by PID (it stops its workers), then SIGKILL."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
