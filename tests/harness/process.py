# SPDX-License-Identifier: Apache-2.0
"""A ringfleet service (conductor or agent) as a real child process.

Real processes, so that kill -9, SIGSTOP and SIGTERM are the real thing.
Each process has its own config file and log file; tests read the log to
know when it serves and what it did.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.harness.wait import wait_for

__all__ = ["REPO", "ServiceProcess"]

#: The checkout the processes run from.
REPO = Path(__file__).resolve().parents[2]

#: What a service logs once it serves its RPC topic.
SERVING = "serving topic"


class ServiceProcess:
    """``python -m <module> --config-file <config>``, logging to ``log_file``.

    :param module: ``conductor.cmd.conductor`` or ``compute_agent.cmd.agent``
    :param name: for messages (usually its host)
    """

    def __init__(self, module: str, name: str, config: Path, log_file: Path) -> None:
        self.module, self.name, self.config, self.log_file = module, name, config, log_file
        self.proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def configured(cls, module: str, name: str, workdir: Path, config: str) -> ServiceProcess:
        """One whose config file (in ``workdir``) sets host ``name``, its log, then ``config``."""
        log_file = workdir / f"{name}.log"
        path = workdir / f"{name}.conf"
        path.write_text(f"[DEFAULT]\nhost = {name}\nlog_file = {log_file}\n{config}")
        return cls(module, name, path, log_file)

    @property
    def stderr_file(self) -> Path:
        """Where the process's stderr goes: what it says when it cannot start
        (a configuration error is printed there, before any log file)."""
        return self.log_file.with_suffix(".stderr")

    def start(self) -> ServiceProcess:
        with self.stderr_file.open("ab") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", self.module, "--config-file", str(self.config)],
                cwd=REPO,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        return self

    def log(self) -> str:
        try:
            return self.log_file.read_text()
        except OSError:
            return ""

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_log(self, text: str, timeout: float = 60) -> None:
        """Until ``text`` is in the log; an AssertionError with the log if it exited first."""
        wait_for(
            lambda: text in self.log() or not self.running(),
            timeout,
            f"{self.name}: {text!r}",
            step=0.1,
        )
        if text not in self.log():
            code = self.proc.returncode if self.proc is not None else None
            raise AssertionError(f"{self.name} exited ({code}):\n{self.said()}")

    def said(self) -> str:
        """The ends of its log and of its stderr, for a failure's message."""
        try:
            stderr = self.stderr_file.read_text(errors="replace")[-3000:]
        except OSError:
            stderr = ""
        return f"{self.log()[-3000:]}\n-- stderr --\n{stderr}"

    def wait_serving(self, timeout: float = 60) -> None:
        self.wait_log(SERVING, timeout)

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    def pause(self) -> None:
        """SIGSTOP: alive but silent (a long GC, a hung host)."""
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def wait(self, timeout: float = 60) -> int:
        """Its exit status, once it exited by itself (within ``timeout``)."""
        assert self.proc is not None
        return self.proc.wait(timeout)

    def terminate(self, timeout: float = 60) -> int:
        """SIGTERM (a graceful stop) if still running; its exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} still running {timeout:.0f} s after SIGTERM:\n{self.said()}"
            ) from None

    def kill(self) -> None:
        """kill -9 (resumed first if paused, so that it dies at once)."""
        if self.running():
            assert self.proc is not None
            self.signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)
