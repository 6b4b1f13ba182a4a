# SPDX-License-Identifier: Apache-2.0
"""The chaos suite's membership faults with the fleet on Redis instead of etcd.

Two conductors and three agents (processes) on real RabbitMQ and
PostgreSQL, membership on a real redis-server, under the suite's load
(:mod:`tests.functional.test_chaos`: its load, its faults' checks and
deadlines).  ``build_timeout`` is out of reach, so nothing is finished by
the sweeper: once the load stopped, everything settles within ``TTL +
rehome_grace + 10 s`` (:data:`~tests.functional.fleet_harness.RECOVERY_SETTLE`),
no instance is lost or left half-built, no node has two owners and the
simulated driver's action log shows no action by an agent that was no
longer certainly a member (no fencing violation).

* ``test_redis_restart_kill_and_partition``: one fleet takes, in turn, a
  Redis restart (its data kept: it snapshots on the way out), a kill -9 of
  Redis for longer than the TTL and its return (on the snapshot: every
  lease and entry written since is gone, the members find themselves
  missing and re-join), and a partition of one agent from Redis (through a
  TCP proxy: its peers re-home its pinned nodes, then it comes back);
* ``test_sentinel_failover``: the fleet reaches Redis through a Sentinel;
  kill -9 of the primary, the Sentinel promotes the replica.  What the
  members went through is printed (suspended or lost, re-joins): the
  numbers of docs/operations.rst.

One fleet for the three faults of the first test: each costs a fleet
start (~10 s) otherwise, and the guarantees are checked after all of them.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.functional.fleet_harness import RECOVERY_SETTLE, REHOME_GRACE, TTL, Fleet, log_tails
from tests.functional.redis_sentinel import RedisSentinel
from tests.functional.tcp_proxy import TcpProxy
from tests.functional.test_chaos import (
    AFTER_FAULT_DEADLINE,
    MAX_BUILD_REQUESTS,
    RECOVERY_BUILD_TIMEOUT,
    RECOVERY_CONFIG,
    WARMUP,
    Fault,
    Load,
    _fault_under_load,
    _start_fleet,
    summary,
)
from tests.harness import server_ctl, wait_for

#: agent-1 reaches Redis through a proxy the partition cuts
PARTITIONED = "agent-1"
#: long enough for the survivors to re-home the partitioned agent's pins
PARTITION = TTL + REHOME_GRACE + 4.0
#: Redis killed for longer than the TTL: every lease has expired when it returns
REDIS_DOWN = TTL + 1.0


def _url(base: str) -> str:
    return f"{base}?membership_timeout={TTL}"


def _transitions(fleet: Fleet) -> dict[str, list[str]]:
    """Each process's membership state changes and re-joins, from its log."""
    seen: dict[str, list[str]] = {}
    for name, proc in fleet.procs.items():
        events = []
        for line in proc.log().splitlines():
            if m := re.search(r"Membership of \S+ in group \S+: (\w+) -> (\w+)", line):
                events.append(m.group(2))
            elif m := re.search(r"went ([\d.]+) s without a heartbeat", line):
                events.append(f"gap {m.group(1)} s")
            elif "is missing from group" in line or "is gone from" in line:
                events.append("missing")
        seen[name] = events
    return seen


def _run(fleet: Fleet, transport_url: str, name: str, inject: object, seconds: float) -> None:
    load = Load(
        fleet,
        transport_url,
        seed=sum(map(ord, name)),
        max_builds=2 * MAX_BUILD_REQUESTS,
        max_seconds=WARMUP + seconds + AFTER_FAULT_DEADLINE,
    )
    concerned: list[str] = []
    try:
        fault, took, settled_in = _fault_under_load(
            fleet,
            load,
            inject,  # type: ignore[arg-type]
            RECOVERY_SETTLE,
            f" with build_timeout {RECOVERY_BUILD_TIMEOUT:.0f} s",
            concerned,
        )
        print(
            f"\n{name}: {fault.note} in {took:.1f} s; settled {settled_in:.1f} s after the load "
            f"stopped (deadline {RECOVERY_SETTLE:.0f} s); {summary(load)}\n"
            f"membership: {_transitions(fleet)}"
        )
    except BaseException:
        print(f"\n{name}: {summary(load)}")
        print("client call errors (last 10):\n  " + "\n  ".join(load.rpc_errors[-10:]))
        print(log_tails(fleet, mentioning=concerned[:5]))
        raise
    finally:
        load.close()


@pytest.fixture
def proxy(redis_url: str) -> Iterator[TcpProxy]:
    proxy = TcpProxy(int(redis_url.rsplit(":", 1)[1]))
    yield proxy
    proxy.close()


@pytest.mark.timeout(240)
def test_redis_restart_kill_and_partition(
    tmp_path: Path, pg_url: str, transport_url: str, redis_url: str, proxy: TcpProxy
) -> None:
    via_proxy = f"[coordination]\nbackend_url = {_url(f'redis://127.0.0.1:{proxy.port}')}\n"
    fleet = _start_fleet(
        tmp_path,
        pg_url,
        transport_url,
        "",
        RECOVERY_CONFIG,
        {PARTITIONED: via_proxy},
        backend_url=_url(redis_url),
    )

    def inject() -> Fault:
        server_ctl("restart-redis")
        time.sleep(TTL)
        server_ctl("kill-redis")
        time.sleep(REDIS_DOWN)
        server_ctl("start-redis")
        time.sleep(TTL)
        pinned = [
            node
            for node, (owner, _e, instance) in fleet.owners().items()
            if owner == PARTITIONED and instance is not None
        ]
        proxy.cut()
        wait_for(
            lambda: all(fleet.owners()[n][0] != PARTITIONED for n in pinned),
            PARTITION + 10,
            f"{PARTITIONED}'s pinned nodes re-homed",
        )
        time.sleep(max(0.0, PARTITION - (TTL + REHOME_GRACE)))
        proxy.heal()
        return Fault(
            note=f"Redis restarted, killed -9 for {REDIS_DOWN:.0f} s and back, "
            f"{PARTITIONED} cut from Redis ({len(pinned)} pinned nodes re-homed)"
        )

    try:
        _run(fleet, transport_url, "redis-faults", inject, 3 * TTL + REDIS_DOWN + PARTITION + 10)
        # The partitioned agent is back in the ring and owns nodes again.
        wait_for(lambda: PARTITIONED in fleet.owned_by(), RECOVERY_SETTLE, "agent-1 owns nodes")
    finally:
        fleet.close()


@pytest.fixture
def sentinel() -> Iterator[RedisSentinel]:
    setup = RedisSentinel()
    try:
        setup.start()
        yield setup
    finally:
        setup.stop()


@pytest.mark.timeout(240)
def test_sentinel_failover(
    tmp_path: Path, pg_url: str, transport_url: str, sentinel: RedisSentinel
) -> None:
    fleet = _start_fleet(
        tmp_path,
        pg_url,
        transport_url,
        "",
        RECOVERY_CONFIG,
        backend_url=f"{sentinel.url}&membership_timeout={TTL}",
    )
    promoted: list[float] = []

    def inject() -> Fault:
        killed = sentinel.kill_primary()
        started = time.monotonic()
        wait_for(lambda: sentinel.primary_port() != killed, 30, "the replica promoted")
        promoted.append(time.monotonic() - started)
        time.sleep(TTL)
        return Fault(note=f"primary killed -9, replica promoted in {promoted[0]:.1f} s")

    try:
        _run(fleet, transport_url, "sentinel-failover", inject, 30 + TTL)
    finally:
        fleet.close()
