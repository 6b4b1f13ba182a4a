# SPDX-License-Identifier: Apache-2.0
"""What the message bus carries during a step of the scale benchmark: bytes
through the broker (``rabbitmqctl list_connections``, per connection) and
the RPC calls the conductors served (their metrics endpoints), with the
rate of the same fleet quiet before a change to compare with.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import Any

from benchmarks.scale.observe import METRICS_AT, node_index_cpu, rpc_served, rpc_served_cpu, scrape
from tests.harness import ServiceProcess

__all__ = ["Sample", "Traffic", "close_rates", "octets"]

#: (monotonic time, broker bytes per connection, conductor calls served,
#: calls by method, their CPU seconds by method, the node indexes' CPU seconds)
Sample = tuple[float, dict[str, int] | None, int, dict[str, int], dict[str, float], float]


def octets(start: Sample, end: Sample) -> int | None:
    """Broker bytes between two samples: per connection still open at ``end``
    (one opened meanwhile counts whole; one closed meanwhile is lost)."""
    if start[1] is None or end[1] is None:
        return None
    before = start[1]
    return sum(count - before.get(name, 0) for name, count in end[1].items())


class Traffic:
    """What the message bus carries: bytes through the broker and RPC calls
    served by the conductors, both counted since they started."""

    #: Seconds of a quiet moment measured before a change, for the baseline.
    QUIET = 3.0

    def __init__(self, rabbitmqctl: str | None, conductors: Callable[[], list[ServiceProcess]]):
        self.rabbitmqctl = rabbitmqctl
        self.conductors = conductors

    def broker_bytes(self) -> dict[str, int] | None:
        """Bytes received and sent by the broker, per connection (None: unknown).

        Per connection, because a connection that closes (a killed agent's)
        drops out of the list with its counts: a plain sum would go down.
        """
        if not self.rabbitmqctl:
            return None
        done = subprocess.run(
            [self.rabbitmqctl, "-q", "list_connections", "name", "recv_oct", "send_oct"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if done.returncode != 0:
            return None
        counts: dict[str, int] = {}
        for line in done.stdout.splitlines():
            name, _tab, rest = line.rpartition("\t")  # name TAB recv TAB send
            name, _tab, received = name.rpartition("\t")
            if received.isdigit() and rest.isdigit():
                counts[name] = int(received) + int(rest)
        return counts

    def served_by_method(self) -> tuple[dict[str, tuple[int, float]], dict[str, float]]:
        """Method -> (calls, seconds) the running conductors served so far,
        and method -> the CPU seconds those calls took."""
        total, cpu, _index = self._conductor_counters()
        return total, cpu

    def _conductor_counters(
        self,
    ) -> tuple[dict[str, tuple[int, float]], dict[str, float], float]:
        """:meth:`served_by_method`, and the CPU seconds the conductors' node
        indexes took so far."""
        total: dict[str, tuple[int, float]] = {}
        cpu: dict[str, float] = {}
        index = 0.0
        for proc in self.conductors():
            found = METRICS_AT.search(proc.log())
            if found is None or not proc.running():
                continue
            page = scrape(found.group(2))
            for method, (count, seconds) in rpc_served(page).items():
                calls, spent = total.get(method, (0, 0.0))
                total[method] = (calls + count, spent + seconds)
            for method, seconds in rpc_served_cpu(page).items():
                cpu[method] = cpu.get(method, 0.0) + seconds
            index += node_index_cpu(page)
        return total, cpu, index

    def sample(self) -> Sample:
        served, cpu, index = self._conductor_counters()
        by_method = {method: count for method, (count, _s) in served.items()}
        return time.monotonic(), self.broker_bytes(), sum(by_method.values()), by_method, cpu, index

    def quiet_rate(self, windows: int = 12) -> tuple[float | None, float]:
        """Bytes/s and calls/s of the fleet once quiet: windows of
        :attr:`QUIET` seconds until two in a row agree within 25 % (after a
        cold start or a join, the agents' first state reports of the nodes
        they just claimed go on for a while), at most ``windows``."""
        previous: tuple[float | None, float] | None = None
        start = self.sample()
        for _ in range(windows):
            time.sleep(self.QUIET)
            end = self.sample()
            rate = self.rate(start, end)
            if previous is not None and close_rates(previous, rate):
                return min(previous, rate, key=lambda r: (r[0] or 0.0, r[1]))
            previous, start = rate, end
        assert previous is not None
        return previous

    @staticmethod
    def rate(start: Sample, end: Sample) -> tuple[float | None, float]:
        elapsed = max(end[0] - start[0], 1e-6)
        moved = octets(start, end)
        return None if moved is None else moved / elapsed, (end[2] - start[2]) / elapsed

    def cost(
        self,
        quiet: tuple[float | None, float] | None,
        start: Sample,
        end: Sample,
    ) -> dict[str, Any]:
        """What went through between ``start`` and ``end`` (all of it), and
        the quiet rate measured before, to compare it with (``None``: not
        measured, as for a cold start: there was no fleet to be quiet).

        Not the difference: the traffic a change causes goes on after the
        ring has converged (each newly held node's first state report, the
        agents' inventory re-reads of the changed rows), so the moment after
        a change is not quiet, and a difference would mislead either way.
        """
        moved = octets(start, end)
        return {
            "seconds": end[0] - start[0],
            "broker_mb": None if moved is None else moved / 1e6,
            "calls": end[2] - start[2],
            "calls_by_method": {
                method: count - start[3].get(method, 0)
                for method, count in sorted(end[3].items())
                if count > start[3].get(method, 0)
            },
            "cpu_s_by_method": {
                method: round(seconds - start[4].get(method, 0.0), 3)
                for method, seconds in sorted(end[4].items())
                if seconds > start[4].get(method, 0.0)
            },
            "node_index_cpu_s": end[5] - start[5],
            "quiet_broker_kb_s": None if quiet is None or quiet[0] is None else quiet[0] / 1e3,
            "quiet_calls_s": None if quiet is None else quiet[1],
        }


def close_rates(one: tuple[float | None, float], other: tuple[float | None, float]) -> bool:
    """Whether two (bytes/s, calls/s) rates agree within 25 % (or 1 kB/s, 1 call/s)."""
    pairs = [(one[1], other[1], 1.0)]
    if one[0] is not None and other[0] is not None:
        pairs.append((one[0], other[0], 1000.0))
    return all(abs(a - b) <= max(0.25 * max(a, b), floor) for a, b, floor in pairs)
