"""Conductor processes for functional tests, and an RPC client to drive them."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from oslo_config import cfg

from conductor.common import rpc
from conductor.rpcapi import ConductorAPI
from tests.functional.harness import REPO


def write_config(
    path: Path,
    *,
    host: str,
    db_url: str,
    transport_url: str,
    backend_url: str,
    group: str,
    log_file: Path,
    extra: str = "",
) -> Path:
    path.write_text(
        "[DEFAULT]\n"
        f"host = {host}\n"
        f"transport_url = {transport_url}\n"
        f"log_file = {log_file}\n"
        "debug = true\n"
        "[database]\n"
        f"connection = {db_url}\n"
        "[coordination]\n"
        f"backend_url = {backend_url}\n"
        f"group = {group}\n"
        "watch_interval = 0.2\n"
        "[scheduler]\n"
        "index_refresh_interval = 0.2\n"
        f"{extra}"
    )
    return path


class ConductorProcess:
    def __init__(self, config: Path, log_file: Path) -> None:
        self.config = config
        self.log_file = log_file
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ConductorProcess:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "conductor.cmd.conductor", "--config-file", str(self.config)],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return self

    def log(self) -> str:
        try:
            return self.log_file.read_text()
        except OSError:
            return ""

    def wait_serving(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if "serving topic" in self.log():
                return
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"conductor exited {self.proc.returncode}:\n{self.log()[-3000:]}"
                )
            time.sleep(0.1)
        raise AssertionError(f"conductor not serving after {timeout}s:\n{self.log()[-3000:]}")

    def stop(self, timeout: float = 30) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.terminate()
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def client(transport_url: str, timeout: float = 30) -> tuple[ConductorAPI, Any]:
    """A ConductorAPI over its own transport (clean it up with .cleanup())."""
    conf = cfg.ConfigOpts()
    rpc.register_opts(conf)
    conf([], project="ringfleet-test", default_config_files=[])
    conf.set_override("transport_url", transport_url)
    transport = rpc.get_transport(conf)
    return ConductorAPI(transport, timeout=timeout), transport
