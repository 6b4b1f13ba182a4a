# SPDX-License-Identifier: Apache-2.0
"""Process harness for functional tests: start members, read events, inject faults.

Each member is a separate OS process (``tests.functional.member_proc``), so
kill -9 and SIGSTOP are real.  Events arrive on stdout as JSON lines and are
collected by a reader thread; tests wait for conditions with deadlines that
come from the protocol (TTL + slack), never for fixed sleeps.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.harness import REPO


class MemberProcess:
    """One member process with its own config file and log file."""

    def __init__(
        self,
        workdir: Path,
        host: str,
        backend_url: str,
        *,
        group: str,
        ring_version: int = 1,
        watch_interval: float = 0.2,
    ) -> None:
        self.host = host
        self.workdir = workdir
        self.config = workdir / f"{host}.conf"
        self.log = workdir / f"{host}.log"
        self.config.write_text(
            "[DEFAULT]\n"
            f"host = {host}\n"
            f"log_file = {self.log}\n"
            "debug = true\n"
            "[coordination]\n"
            f"backend_url = {backend_url}\n"
            f"group = {group}\n"
            f"watch_interval = {watch_interval}\n"
            "[ring]\n"
            f"version = {ring_version}\n"
        )
        self.events: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> MemberProcess:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.functional.member_proc",
                "--config-file",
                str(self.config),
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                event = {"event": "output", "line": line.rstrip()}
            with self._cond:
                self.events.append(event)
                self._cond.notify_all()

    # -- waiting ---------------------------------------------------------

    def wait_for(
        self,
        predicate: Callable[[dict[str, Any]], bool],
        timeout: float,
        start: int = 0,
    ) -> dict[str, Any]:
        """The first event at or after index ``start`` matching ``predicate``."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for event in self.events[start:]:
                    if predicate(event):
                        return event
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"{self.host}: no matching event within {timeout:.1f} s; "
                        f"events: {self.events[-15:]}\nlog tail:\n{self.log_tail()}"
                    )
                self._cond.wait(min(left, 0.2))

    def wait_members(self, members: set[str], timeout: float, start: int = 0) -> float:
        """Wait until a view shows exactly ``members``; the event's time."""
        event = self.wait_for(
            lambda e: e["event"] == "view" and set(e["members"]) == members,
            timeout,
            start,
        )
        return float(event["t"])

    def last_view(self) -> dict[str, Any]:
        with self._cond:
            return next(e for e in reversed(self.events) if e["event"] == "view")

    def states(self, start: int = 0) -> list[str]:
        with self._cond:
            return [e["state"] for e in self.events[start:] if e["event"] == "state"]

    def mark(self) -> int:
        """Index of the next event, to wait only for what happens from now."""
        with self._cond:
            return len(self.events)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text().splitlines()[-lines:])
        except OSError:
            return "(no log)"

    # -- faults ------------------------------------------------------------

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def signal(self, sig: int) -> None:
        os.kill(self.pid, sig)

    def terminate(self, timeout: float = 15) -> int:
        """SIGTERM and wait: the graceful stop that leaves the group."""
        assert self.proc is not None
        self.signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """kill -9: no goodbye, the lease must expire."""
        assert self.proc is not None
        self.signal(signal.SIGKILL)
        self.proc.wait(10)

    def cleanup(self) -> None:
        """Kill the process if it still runs, and release its pipe."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(10)
        self._reader.join(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def unique_group(prefix: str) -> str:
    """A fresh group per test, so tests never see each other's members."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
