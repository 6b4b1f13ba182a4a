# SPDX-License-Identifier: Apache-2.0
"""A real 3-member etcd cluster on 127.0.0.1, and an ``etcd gateway`` in front of it.

The members run the etcd of the test servers (the binary named in
``$RINGFLEET_TEST_ETCD_CMD``) with their data under the private servers dir
(``$RINGFLEET_TEST_SERVERS_DIR``, so that anything left over is stopped by
``tools/with-test-servers.sh``); :meth:`EtcdCluster.stop` stops them by PID.
The services talk to the gateway only, as docs/operations.rst advises: it
forwards each connection to a live member, so losing any one member is a
reconnect, not an outage.

Which member is the leader comes from etcd's own maintenance status (the
JSON gateway, ``POST /v3/maintenance/status``: no etcdctl needed); which
members the gateway forwards to, from its established TCP connections
(``/proc``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

__all__ = ["EtcdCluster"]

#: members of the cluster
SIZE = 3


def _free_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 now (all held at once, so they are distinct)."""
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


def _etcd_binary() -> str:
    cmd_file = os.environ.get("RINGFLEET_TEST_ETCD_CMD")
    if not cmd_file:
        pytest.skip("RINGFLEET_TEST_ETCD_CMD is unset (run through tools/with-test-servers.sh)")
    return shlex.split(Path(cmd_file).read_text())[0]


class EtcdCluster:
    """Three etcd members and one gateway, each a child process of the test."""

    def __init__(self) -> None:
        servers_dir = os.environ.get("RINGFLEET_TEST_SERVERS_DIR")
        if not servers_dir:
            pytest.skip(
                "RINGFLEET_TEST_SERVERS_DIR is unset (run through tools/with-test-servers.sh)"
            )
        self.etcd = _etcd_binary()
        self.dir = Path(servers_dir) / f"etcd-cluster-{uuid.uuid4().hex[:8]}"
        self.dir.mkdir()
        ports = _free_ports(2 * SIZE + 1)
        self.client_ports = ports[:SIZE]
        self.peer_ports = ports[SIZE : 2 * SIZE]
        self.gateway_port = ports[-1]
        self.names = [f"m{i}" for i in range(SIZE)]
        self.members: list[subprocess.Popen[bytes] | None] = [None] * SIZE
        self.gateway: subprocess.Popen[bytes] | None = None

    # -- processes -------------------------------------------------------------------

    def _member_cmd(self, i: int) -> list[str]:
        client = f"http://127.0.0.1:{self.client_ports[i]}"
        peer = f"http://127.0.0.1:{self.peer_ports[i]}"
        cluster = ",".join(
            f"{name}=http://127.0.0.1:{port}"
            for name, port in zip(self.names, self.peer_ports, strict=True)
        )
        # etcd's default heartbeat and election timeouts (100 ms, 1 s): the
        # numbers of docs/dependency-facts.rst ("An etcd cluster and the gateway") were
        # measured with them.
        return [
            self.etcd,
            "--name",
            self.names[i],
            "--data-dir",
            str(self.dir / self.names[i]),
            "--logger=zap",
            "--log-level=warn",
            "--listen-client-urls",
            client,
            "--advertise-client-urls",
            client,
            "--listen-peer-urls",
            peer,
            "--initial-advertise-peer-urls",
            peer,
            "--initial-cluster",
            cluster,
            "--initial-cluster-state",
            "new",
            "--initial-cluster-token",
            self.dir.name,
        ]

    def _spawn(self, cmd: list[str], log: str) -> subprocess.Popen[bytes]:
        with open(self.dir / log, "ab") as out:
            return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=out)

    def start_member(self, i: int) -> None:
        """Start (or restart, on its existing data) member ``i``."""
        assert self.members[i] is None or self.members[i].poll() is not None  # type: ignore[union-attr]
        self.members[i] = self._spawn(self._member_cmd(i), f"{self.names[i]}.log")

    def start(self, timeout: float = 30.0) -> None:
        """Start every member (together: a new cluster needs a quorum) and the gateway."""
        for i in range(SIZE):
            self.start_member(i)
        for i in range(SIZE):
            self.wait_healthy(i, timeout)
        endpoints = ",".join(f"127.0.0.1:{port}" for port in self.client_ports)
        self.gateway = self._spawn(
            [
                self.etcd,
                "gateway",
                "start",
                f"--endpoints={endpoints}",
                f"--listen-addr=127.0.0.1:{self.gateway_port}",
            ],
            "gateway.log",
        )
        deadline = time.monotonic() + timeout
        while not self._healthy(self.gateway_port):
            if self.gateway.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"etcd gateway did not start:\n{self.log_tail('gateway')}")
            time.sleep(0.1)

    def kill(self, i: int) -> None:
        """kill -9 of member ``i``."""
        proc = self.members[i]
        assert proc is not None
        proc.kill()
        proc.wait(10)

    def stop(self) -> None:
        """Stop everything this cluster started, by PID."""
        for proc in [self.gateway, *self.members]:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)

    # -- reading ---------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The tooz URL of the gateway (without options)."""
        return f"etcd3+http://127.0.0.1:{self.gateway_port}"

    def member_url(self, i: int) -> str:
        """The tooz URL of member ``i`` itself (what the gateway replaces)."""
        return f"etcd3+http://127.0.0.1:{self.client_ports[i]}"

    def _healthy(self, port: int) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as reply:
                return bool(json.load(reply).get("health") == "true")
        except (OSError, ValueError):
            return False

    def wait_healthy(self, i: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not self._healthy(self.client_ports[i]):
            proc = self.members[i]
            if proc is None or proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"etcd member {self.names[i]} not healthy:\n{self.log_tail(self.names[i])}"
                )
            time.sleep(0.1)

    def _status(self, i: int) -> dict[str, object] | None:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.client_ports[i]}/v3/maintenance/status",
            data=b"{}",
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=2) as reply:
                status: dict[str, object] = json.load(reply)
                return status
        except (OSError, ValueError):
            return None

    def leader(self) -> int:
        """Index of the member that is the leader now (asked of the members)."""
        ids: dict[str, int] = {}
        leader = None
        for i in range(SIZE):
            status = self._status(i)
            if status is None:
                continue
            header = status.get("header")
            if isinstance(header, dict):
                ids[str(header.get("member_id"))] = i
            leader = str(status.get("leader")) if status.get("leader") else leader
        if leader is None or leader not in ids:
            raise AssertionError(f"no leader known: ids {ids}, leader {leader}")
        return ids[leader]

    def gateway_connections(self) -> list[int]:
        """Established connections of the gateway to each member, by member index."""
        assert self.gateway is not None
        inodes = set()
        fd_dir = Path(f"/proc/{self.gateway.pid}/fd")
        for fd in fd_dir.iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:[") : -1])
        counts = [0] * SIZE
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with contextlib.suppress(OSError), open(table) as lines:
                next(lines)  # the header
                for line in lines:
                    fields = line.split()
                    remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                    established = fields[3] == "01"
                    if established and fields[9] in inodes and remote_port in self.client_ports:
                        counts[self.client_ports.index(remote_port)] += 1
        return counts

    def log_tail(self, name: str, lines: int = 20) -> str:
        try:
            return "\n".join((self.dir / f"{name}.log").read_text().splitlines()[-lines:])
        except OSError:
            return "(no log)"
