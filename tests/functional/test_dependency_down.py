# SPDX-License-Identifier: Apache-2.0
"""Dependencies down when services start or stop: any start order works, stops are on time.

Real PostgreSQL, etcd and RabbitMQ.  First the broker's URL names a port
nothing listens on (down for the whole test): a conductor and an agent start,
keep trying the broker, and get a SIGTERM.  Then a running fleet loses its
broker (a cut TCP proxy) and every service gets a SIGTERM.  Each exits
within its stop deadline (``graceful_timeout``; the agent's plus
``STOP_MARGIN``) with status 0, says the outage once, and an agent that
could not serve RPC never joined the ring.

Start order does not matter (issue 25): a conductor and an agent start with
etcd, the broker and the database all behind cut TCP proxies (connection
refused), which are then healed one by one, 2 s apart, in three rotations
that put each dependency once first and once last.  Each process says once,
at WARNING, which dependency it waits for (its URL without the password),
the agent joins the group only once it serves RPC, systemd (a notify socket
of the test's) sees READY only once a process can serve, the agent owns the
nodes and a build is ACTIVE within ``RECOVERY_SETTLE`` (TTL + grace + 10 s)
of the last heal, and a SIGTERM stops both within their deadlines (the
agent first, as systemd does).  Measured: every node owned 1.4 to 5.7 s
after the last heal (the broker last is slowest: its reconnection backoff),
the build ACTIVE 0.4 to 0.7 s later; the agent stopped in 2 to 3 s, the
conductor in 5.5 to 6.5 s; 22 to 25 s per rotation (before
``conductor.common.prompt_stop``: both stops are now about 1 to 2 s).
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from compute_agent.service import STOP_MARGIN
from conductor.db.flavors import create_flavor
from conductor.validation.flavor import FlavorSpec
from tests.dbutil import add_nodes, migrated
from tests.functional.fleet_harness import RECOVERY_SETTLE, Fleet, log_tails, start_processes
from tests.functional.tcp_proxy import TcpProxy
from tests.harness import wait_for
from tests.harness.ports import free_port
from tests.harness.process import ServiceProcess

CONDUCTOR_GRACE = 10.0
AGENT_GRACE = 5.0
EXTRA = {
    "cond-1": f"[conductor]\ngraceful_timeout = {CONDUCTOR_GRACE}\n",
    "agent-1": f"[compute_agent]\ngraceful_timeout = {AGENT_GRACE}\n",
    "agent-2": f"[compute_agent]\ngraceful_timeout = {AGENT_GRACE}\n",
}


def test_started_without_a_broker_they_join_nothing_and_stop_on_time(
    tmp_path: Path, pg_url: str, etcd_url: str
) -> None:
    migrated(pg_url).dispose()
    broker = f"rabbit://guest:guest@127.0.0.1:{free_port()}/"
    fleet = Fleet(tmp_path, db_url=pg_url, transport_url=broker, etcd_url=etcd_url)
    try:
        conductor = fleet._spawn("conductor.cmd.conductor", "cond-1", EXTRA["cond-1"])
        agent = fleet._spawn("compute_agent.cmd.agent", "agent-1", EXTRA["agent-1"])
        for proc in (conductor, agent):
            wait_for(
                lambda p=proc: "unreachable" in p.log(), 60, f"{proc.name} waits for the broker"
            )
        # The conductor watches the group (its own membership is up) ...
        wait_for(lambda: "Member conductor.cond-1 connected" in conductor.log(), 30, "conductor")
        # ... but the agent, which cannot serve RPC, has not joined it.
        assert "Member agent-1 connected" not in agent.log()
        _stop_on_time([conductor, agent])
    finally:
        fleet.close()


def _stop_on_time(procs: list[ServiceProcess]) -> None:
    """SIGTERM each; each exits 0 within its deadline and said the outage once."""
    for proc in procs:
        proc.signal(signal.SIGTERM)
    for proc in procs:
        deadline = CONDUCTOR_GRACE if proc.name.startswith("cond") else AGENT_GRACE + STOP_MARGIN
        # Generous bound: the deadline plus a loaded machine's slack; before, never.
        # (Waited for, not signalled again: one SIGTERM, as systemd sends.)
        assert proc.wait(timeout=deadline + 30) == 0, proc.name
        log = proc.log()
        assert "Possible hang" not in log
        # The outage said once, naming the broker, not an ERROR per retry.
        said = [line for line in log.splitlines() if " WARNING " in line or " ERROR " in line]
        assert [line for line in said if "Broker rabbit://guest:***@127.0.0.1:" in line], said
        assert not [line for line in said if "Connection failed" in line], said


def test_a_fleet_that_loses_its_broker_stops_on_time(
    tmp_path: Path, pg_url: str, transport_url: str, etcd_url: str
) -> None:
    migrated(pg_url).dispose()
    port = int(transport_url.rsplit(":", 1)[1].strip("/"))
    proxy = TcpProxy(port)
    fleet = Fleet(
        tmp_path,
        db_url=pg_url,
        transport_url=f"rabbit://guest:guest@{proxy.url}/",
        etcd_url=etcd_url,
    )
    try:
        start_processes(fleet, ["cond-1"], ["agent-1", "agent-2"], extra=EXTRA)
        fleet.api.import_nodes([{"name": f"n{i}", "resource_class": "baremetal"} for i in range(6)])
        fleet.api.create_flavor({"name": "bm", "resource_class": "baremetal"})
        wait_for(lambda: None not in fleet.owned_by(), 30, "every node owned")
        built = fleet.api.build_instances({"flavor": "bm", "count": 2})
        wait_for(
            lambda: all(fleet.api.show_instance(i["uuid"])["vm_state"] == "active" for i in built),
            60,
            "2 builds active",
        )
        proxy.cut()  # RabbitMQ gone for every service
        _stop_on_time(list(fleet.procs.values()))
        assert fleet.fencing_violations() == []
    finally:
        proxy.heal()  # for this test's own client to close its connections
        fleet.close()
        proxy.close()


#: Heal order of the dependencies: each is once first and once last.
ROTATIONS = [("etcd", "db", "broker"), ("broker", "etcd", "db"), ("db", "broker", "etcd")]
#: Seconds between two heals.
HEAL_GAP = 2.0
#: What each process needs, in the order it reaches for it.
NEEDS: dict[str, tuple[str, ...]] = {
    "cond-1": ("db", "etcd", "broker"),
    "agent-1": ("broker", "etcd"),
}
#: What an agent says once when it joined before a conductor serves (one
#: waiting for its database, say): it claims as soon as one does.
NO_CONDUCTOR = "reconcile failed: no server consumes topic ringfleet-conductor"
#: What each process must reach before it says READY (a conductor serves
#: without the group after waiting a TTL for it: its claims wait instead).
READY_AFTER: dict[str, tuple[str, ...]] = {
    "cond-1": ("db", "broker"),
    "agent-1": ("broker", "etcd"),
}


class _NotifySocket:
    """A systemd notify socket (abstract namespace): the messages, with when they came."""

    def __init__(self) -> None:
        self.address = f"@ringfleet-test-{uuid.uuid4().hex}"
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind("\0" + self.address[1:])
        self._sock.settimeout(0.2)
        self.received: list[tuple[float, str]] = []  # (monotonic, message)
        self._closed = threading.Event()
        threading.Thread(target=self._receive, daemon=True).start()

    def _receive(self) -> None:
        while not self._closed.is_set():
            try:
                data = self._sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            self.received.append((time.monotonic(), data.decode()))

    def first(self, field: str) -> float | None:
        """When ``field`` (e.g. ``READY=1``) first came, or None."""
        return next((at for at, text in self.received if field in text.splitlines()), None)

    def close(self) -> None:
        self._closed.set()
        self._sock.close()


@contextlib.contextmanager
def _cut_proxies(pg_url: str, transport_url: str, etcd_url: str) -> Iterator[dict[str, TcpProxy]]:
    """A cut TCP proxy in front of each real server (which keeps running)."""
    ports = {
        "db": make_url(pg_url).port,
        "broker": urllib.parse.urlsplit(transport_url).port,
        "etcd": urllib.parse.urlsplit(etcd_url).port,
    }
    proxies = {name: TcpProxy(int(port or 0)) for name, port in ports.items()}
    try:
        for proxy in proxies.values():
            proxy.cut()
        yield proxies
    finally:
        for proxy in proxies.values():
            proxy.close()


def _via(url: str, proxy: TcpProxy) -> str:
    """``url`` with its port replaced by the proxy's (password kept)."""
    if url.startswith("postgresql"):
        return make_url(url).set(port=proxy.port).render_as_string(hide_password=False)
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc.rsplit(":", 1)[0] + f":{proxy.port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _named(url: str) -> str:
    """``url`` as the services name it in their log lines: without the password."""
    if url.startswith("postgresql"):
        return make_url(url).render_as_string(hide_password=True)
    parts = urllib.parse.urlsplit(url)
    if parts.password is not None:
        netloc = f"{parts.username}:***@{parts.hostname}:{parts.port}"
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    return url


@pytest.mark.parametrize("order", ROTATIONS, ids="-then-".join)
def test_started_before_its_dependencies_in_any_order_the_fleet_works(
    tmp_path: Path,
    pg_url: str,
    transport_url: str,
    etcd_url: str,
    monkeypatch: pytest.MonkeyPatch,
    order: tuple[str, str, str],
) -> None:
    db = migrated(pg_url)
    nodes = set(add_nodes(db, 4))
    create_flavor(db, FlavorSpec(name="bm", resource_class="baremetal"))
    db.dispose()
    passwords = {make_url(pg_url).password, urllib.parse.urlsplit(transport_url).password}
    notify = {name: _NotifySocket() for name in NEEDS}
    with _cut_proxies(pg_url, transport_url, etcd_url) as proxies:
        urls = {
            "db": _via(pg_url, proxies["db"]),
            "broker": _via(transport_url, proxies["broker"]),
            "etcd": _via(etcd_url, proxies["etcd"]),
        }
        named = {dep: _named(url) for dep, url in urls.items()}
        fleet = Fleet(
            tmp_path,
            db_url=urls["db"],
            transport_url=urls["broker"],
            etcd_url=urls["etcd"],
            client_transport_url=transport_url,
            client_db_url=pg_url,
        )
        try:
            started = time.monotonic()
            for name, module in (
                ("cond-1", "conductor.cmd.conductor"),
                ("agent-1", "compute_agent.cmd.agent"),
            ):
                monkeypatch.setenv("NOTIFY_SOCKET", notify[name].address)
                fleet._spawn(module, name, EXTRA[name])
            monkeypatch.delenv("NOTIFY_SOCKET")
            conductor, agent = fleet.procs["cond-1"], fleet.procs["agent-1"]
            # Each waits for what it needs first: the conductor its database,
            # the agent its broker (it serves RPC before anything else).
            conductor.wait_log(f"Database {named['db']} unreachable", 60)
            agent.wait_log(f"Broker {named['broker']} unreachable", 60)
            healed: dict[str, float] = {}
            for dep in order:
                if healed:
                    time.sleep(HEAL_GAP)
                _nothing_before_serving(fleet, notify, healed)
                proxies[dep].heal()
                healed[dep] = time.monotonic()
            last = healed[order[-1]]
            print(
                f"\n{'-'.join(order)}: processes up and waiting after "
                f"{healed[order[0]] - started:.1f} s"
            )

            def every_node_owned() -> bool:
                return fleet.owned_by() == {"agent-1": nodes}

            wait_for(every_node_owned, RECOVERY_SETTLE, "agent-1 owns every node")
            owned = time.monotonic() - last
            built = fleet.api.build_instances({"flavor": "bm", "count": 1})
            wait_for(
                lambda: fleet.api.show_instance(built[0]["uuid"])["vm_state"] == "active",
                RECOVERY_SETTLE,
                "the build ACTIVE",
            )
            active = time.monotonic() - last
            print(
                f"{'-'.join(order)}: after the last heal, every node owned in {owned:.1f} s, "
                f"a build ACTIVE in {active:.1f} s (bound {RECOVERY_SETTLE:.0f} s)"
            )
            assert active <= RECOVERY_SETTLE, log_tails(fleet)

            # systemd saw READY only once each process could serve.
            for name, needs in READY_AFTER.items():
                ready = notify[name].first("READY=1")
                assert ready is not None, f"{name} never sent READY=1"
                assert all(ready > healed[dep] for dep in needs), (name, ready, healed)
            # The agent joined the group only once it served RPC: after the
            # broker answered it (the only use it makes of the broker before).
            lines = agent.log().splitlines()
            back = next(
                i
                for i, line in enumerate(lines)
                if "Broker " in line and " reachable again" in line
            )
            joined = next(
                i for i, line in enumerate(lines) if "Member agent-1 joined group" in line
            )
            assert back < joined, "\n".join(lines[min(back, joined) : max(back, joined) + 1])

            # Waited for, surely: what each reaches for first; and etcd by
            # the conductor when etcd comes after its database (it reaches
            # for etcd within its 2 s database poll).  When the agent reaches
            # for etcd depends on the broker's reconnection backoff (1, 3,
            # 5 s...), when the conductor reaches for the broker on that poll
            # and its wait for etcd: either may or may not wait.
            must = {
                "cond-1": {"db"} | ({"etcd"} if order.index("etcd") > order.index("db") else set()),
                "agent-1": {"broker"},
            }
            for name, needs in NEEDS.items():
                _said_once(
                    fleet.procs[name].log(),
                    {dep: named[dep] for dep in needs},
                    must[name],
                    passwords,
                )

            # The agent first, as systemd stops them (its units are ordered
            # after the conductor's): it asks a conductor for its restart hold.
            _stop_in_time([agent, conductor])
            assert fleet.fencing_violations() == []
        finally:
            fleet.close()
            for sock in notify.values():
                sock.close()


def _nothing_before_serving(
    fleet: Fleet, notify: dict[str, _NotifySocket], healed: dict[str, float]
) -> None:
    """Before the last heal: no process READY without its dependencies, the
    agent in no group before the broker, no node claimed, no action."""
    for name, needs in READY_AFTER.items():
        if not all(dep in healed for dep in needs):
            assert notify[name].first("READY=1") is None, f"{name} READY without {needs}"
    if "broker" not in healed:
        assert "Member agent-1 joined" not in fleet.procs["agent-1"].log()
    assert set(fleet.owned_by()) == {None}, fleet.owned_by()
    assert fleet.actions() == []


def _said_once(log: str, named: dict[str, str], must: set[str], passwords: set[str | None]) -> None:
    """One WARNING naming each dependency the process waited for (those of
    ``must`` at least), none for the others, no other WARNING; no password,
    no ERROR."""
    said = [line for line in log.splitlines() if " WARNING " in line or " ERROR " in line]
    print("\n".join(["WARNING and ERROR lines:", *said]))
    for dep, url in named.items():
        warned = [line for line in said if url in line]
        waited = any(
            url in line and ("reachable again" in line or "answers again" in line)
            for line in log.splitlines()
        )
        assert len(warned) == int(waited or dep in must), (dep, warned)
    # A WARNING about a dependency names it: none without a name (a
    # second line for the same wait, "not reachable yet", say).  An agent
    # in the group before any conductor serves says that once.
    unnamed = [line for line in said if not any(url in line for url in named.values())]
    assert [line for line in unnamed if NO_CONDUCTOR not in line] == [], said
    assert len(unnamed) <= 1, said
    for password in passwords - {None}:
        assert not [line for line in said if f":{password}@" in line], said
    assert not [line for line in said if " ERROR " in line], said


def _stop_in_time(procs: list[ServiceProcess]) -> None:
    """One SIGTERM each (as systemd sends), one after the other: each exits 0
    within its deadline."""
    for proc in procs:
        sent = time.monotonic()
        proc.signal(signal.SIGTERM)
        deadline = CONDUCTOR_GRACE if proc.name.startswith("cond") else AGENT_GRACE + STOP_MARGIN
        assert proc.wait(timeout=deadline + 30) == 0, proc.name
        took = time.monotonic() - sent
        print(f"{proc.name} stopped {took:.1f} s after SIGTERM (deadline {deadline:.0f} s)")
        assert took <= deadline, proc.name
