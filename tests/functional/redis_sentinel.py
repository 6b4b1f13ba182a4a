# SPDX-License-Identifier: Apache-2.0
"""A Redis primary, one replica and one Sentinel on 127.0.0.1, for a real failover.

The servers are the test servers' own executables
(``$RINGFLEET_TEST_REDIS_SERVER``, ``$RINGFLEET_TEST_REDIS_SENTINEL``), their
files under the private servers dir; :meth:`RedisSentinel.stop` stops them
by PID.  One sentinel with a quorum of one: it decides alone, which is all a
test of what the members see during a failover needs (a production setup
runs three, docs/operations.rst).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import redis

__all__ = ["MASTER", "RedisSentinel"]

#: the primary's name in Sentinel (``sentinel=`` in the tooz URL)
MASTER = "ringfleet"
#: a primary that answered no PING for this long is down (Sentinel's default: 30 s)
DOWN_AFTER_MS = 1000


def _free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _executable(variable: str) -> str:
    path = os.environ.get(variable)
    if not path:
        pytest.skip(f"{variable} is unset (run through tools/with-test-servers.sh)")
    return path


class RedisSentinel:
    """Two redis-servers (primary, replica) and a sentinel, children of the test."""

    def __init__(self) -> None:
        servers_dir = os.environ.get("RINGFLEET_TEST_SERVERS_DIR")
        if not servers_dir:
            pytest.skip("RINGFLEET_TEST_SERVERS_DIR is unset (run through with-test-servers.sh)")
        self.server = _executable("RINGFLEET_TEST_REDIS_SERVER")
        self.sentinel = _executable("RINGFLEET_TEST_REDIS_SENTINEL")
        self.dir = Path(servers_dir) / f"redis-sentinel-{uuid.uuid4().hex[:8]}"
        self.dir.mkdir()
        self.ports = _free_ports(2)
        self.sentinel_port = _free_ports(1)[0]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def _spawn(self, name: str, cmd: list[str]) -> None:
        with open(self.dir / f"{name}.log", "ab") as out:
            self.procs[name] = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out
            )

    def _redis(self, i: int) -> None:
        cmd = [
            self.server,
            "--bind", "127.0.0.1",
            "--port", str(self.ports[i]),
            "--dir", str(self.dir),
            "--dbfilename", f"dump-{i}.rdb",
            "--save", "",
            "--appendonly", "no",
        ]  # fmt: skip
        if i == 1:
            cmd += ["--replicaof", "127.0.0.1", str(self.ports[0])]
        self._spawn(f"redis-{i}", cmd)

    def start(self, timeout: float = 30.0) -> None:
        self._redis(0)
        self._redis(1)
        config = self.dir / "sentinel.conf"
        config.write_text(
            f"bind 127.0.0.1\nport {self.sentinel_port}\ndir {self.dir}\n"
            f"sentinel monitor {MASTER} 127.0.0.1 {self.ports[0]} 1\n"
            f"sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {MASTER} 10000\n"
            f"sentinel parallel-syncs {MASTER} 1\n"
        )
        self._spawn("sentinel", [self.sentinel, str(config)])
        deadline = time.monotonic() + timeout
        while True:
            try:
                replicas = self.client(self.sentinel_port).sentinel_slaves(MASTER)
                if replicas and all("s_down" not in r["flags"] for r in replicas):
                    break
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"Sentinel saw no replica within {timeout} s")
            time.sleep(0.1)

    @staticmethod
    def client(port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)

    @property
    def url(self) -> str:
        """The tooz URL through the sentinel (without the TTL)."""
        return f"redis://127.0.0.1:{self.sentinel_port}?sentinel={MASTER}"

    def primary_port(self) -> int:
        _host, port = self.client(self.sentinel_port).sentinel_get_master_addr_by_name(MASTER)
        return int(port)

    def kill_primary(self) -> int:
        """kill -9 of the current primary; its port."""
        port = self.primary_port()
        proc = self.procs[f"redis-{self.ports.index(port)}"]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        return port

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
