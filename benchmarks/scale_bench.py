# SPDX-License-Identifier: Apache-2.0
"""Scale benchmark (issue 13): 100k nodes, 10-50 agent processes, 1-2 conductors.

Run from the repository root, with the test servers::

    SERVERS=etcd,rabbit,postgres tools/with-test-servers.sh \\
        .venv/bin/python -m benchmarks.scale_bench --nodes 100000 --agents 10
    ... -m benchmarks.scale_bench --nodes 100000 --agents 10,30 --conductors 2 --json s.json
    ... -m benchmarks.scale_bench --nodes 20000 --agents 10,50 --agents-per-process 10

The fleet is the functional tests' (:class:`tests.functional.fleet_harness.Fleet`:
real processes on the PostgreSQL, RabbitMQ and etcd of
``tools/with-test-servers.sh``, ``membership_timeout`` 3 s, watch interval
0.2 s), with the agents' reconcile and report intervals at their defaults,
the simulated driver's deploy time 0 and DEBUG logging off.  The benchmark
creates a private database on that server and drops it afterwards.  For
each agent count it runs, in order:

``import``
    ``ringfleet node import`` of a CSV of ``--nodes`` rows (the console
    script as an operator runs it: up to 100,000 rows in one call, checked
    and written there), one conductor up, no agent yet.
``cold``
    The agents started together; the time from their start (and from the
    moment the last one serves) until every unpinned node is owned by its
    ring owner: :meth:`hashring.membership.MembershipView.ring` of the node's
    group over the live agents, read from etcd by a watcher in this process
    (as a conductor reads it), not merely "owned by someone".  Claims
    granted, refused and releases are counted from the conductors' log lines
    ``Agent X claimed A of B nodes (R refused ...)`` and ``Agent X released D nodes``.
``join``
    One more agent (always a process of its own); the time until the ring
    of M+1 agents is converged, the nodes that moved against the ideal
    N/(M+1), and the nodes that moved between two agents that were there
    before (should be 0).
``kill``
    kill -9 of that agent; the time until every node is owned by a live
    agent again (and until the ring is converged again).
``cold``, ``join`` and ``kill`` also count what the step cost, from its
start until the ring converged: the conductors' CPU seconds (user +
system, psutil), the bytes through RabbitMQ (``rabbitmqctl
list_connections recv_oct send_oct``, both directions, every connection;
one opened meanwhile, such as a new agent's, counts whole) and the RPC
calls the conductors served (their ``ringfleet_rpc_server_duration_seconds``
counts, scraped from their metrics endpoints); for ``join`` and ``kill``
next to the rate of the same fleet quiet just before (its heartbeats and
state reports go on meanwhile; a cold start has no fleet before it).  And
the node rows the agents read for their inventories (full and incremental
reads): each agent's ``ringfleet_agent_inventory_rows_total{host=...}``,
scraped from its own metrics endpoint at convergence -- for the cold start
the sum over the agents and the most one agent read, for a join the
joiner's and the growth of the others' (sum, most), for a kill the
growth of the survivors'.  Reads after the convergence are not counted:
an agent re-reads the rows changed by the claims at its next pass, which
may come after the ring converged (then the others' growth is 0).
``--agents-per-process K``
    The cold start's agents run K to a Python process
    (``benchmarks/multi_agent.py``: K
    :class:`compute_agent.service.AgentService` objects, each on its own
    ``cfg.ConfigOpts`` with its own host, RPC transport, etcd lease,
    metrics registry and metrics port, run in native threads of one
    interpreter; the process log is shared, each line names its host).  50
    or 100 agent processes on 2 cores each import the whole package and
    cost minutes of CPU before the first serves; K to a process measures
    the fleet rather than the interpreters' start.  Per-agent numbers stay
    apart: rows read come from each agent's own counter, and an agent's
    RSS share is its process's RSS / K (reported apart from the RSS of the
    agents in processes of their own, with the process's whole RSS).
    The joined agent, and a killed one, are always processes of their own
    (without ``join`` the kill's victim, the first agent, runs alone), so
    kill -9 is the real thing.  K = 1 (the default): one process per agent
    (``compute_agent.cmd.agent``), as before.
``builds``
    ``--builds`` instances requested in requests of ``--batch`` by 4 client
    threads, until the last is ACTIVE (:func:`benchmarks.e2e_bench.throughput`);
    with ``--conductors 2`` first with both, then with one (the other stopped).
``node list``
    ``ringfleet node list -f value -c UUID`` of the whole fleet (``--no-node-list``: skipped).
``--waves N``
    After the steps, N times: one more agent joins, ``--builds`` builds, kill
    -9 of that agent; the conductor's RSS after each wave (now, not the
    largest seen), and whether it keeps growing over the second half.
``resources``
    Conductor CPU seconds (user + system, whole run and the cold start) and
    the largest RSS seen of any conductor and any agent (from /proc, sampled
    while polling; with ``--agents-per-process K`` the agents of a K-agent
    process apart: their share, the process's RSS / K, and its RSS).

Goals (besides the times above: cold start <= 15 s, join <= TTL + 5 s,
kill -9 <= TTL + 2 s, agent RSS <= 150 MB, conductor <= 1 GB).  TTL is
``--ttl``: the functional tests' 3 s by default; production's 10 s
(docs/operations.rst) with ``--ttl 10 --watch-interval 1`` for agent counts
whose heartbeats two cores cannot keep within 1.5 s:

* rows read by all agents in a cold start <= 1.2 x the nodes;
* a join's broker bytes <= 2 x the joiner's share, where the share is
  N/(M+1) nodes x the *bytes per row read* of the same fleet's cold start:
  its broker bytes divided by the rows its agents read.  That counts the
  cold start's claims, state reports and heartbeats against the rows, so it
  is an upper bound of an inventory entry's own bytes (generous to the
  join), measured on the same broker and code rather than assumed;
* with two or more agent counts in one invocation, each larger count
  against the smallest (:mod:`benchmarks.scale_scaling`, which also prints
  them as one table with the ratios): the cold start's conductor CPU
  seconds and broker bytes, the conductor CPU per quiet minute
  (``--quiet``) and the conductor's RSS <= 1.3 x.

``--quiet SECONDS``
    After the cold start, once its aftermath is over (10 s, then until no
    state report came for two samples: each agent's first report carries
    every node it owns), the converged fleet left alone that long: the
    conductor CPU, broker bytes, rows read and RPC calls served (by
    method: calls and seconds served) per minute.

``--code DIR`` runs the conductors and agents from another checkout of the
project (same virtualenv), e.g. the commit before the claim-storm fix::

    git worktree add --detach /tmp/prefix 4733a63^
    ... -m benchmarks.scale_bench --steps import,cold --code /tmp/prefix

A benchmark reports, tests check: each goal prints PASS or MISS, and the
exit status is 0 either way.  See ``benchmarks/README.rst``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil
from sqlalchemy import select

from benchmarks import argtypes
from benchmarks.e2e_bench import FLAVOR, throughput
from benchmarks.report import Goals, format_goals, log_line, publish
from benchmarks.scale_scaling import format_scaling, scaling_goals
from conductor.db import migration
from conductor.db.engine import Database
from conductor.db.models import NodeModel
from hashring.membership import Membership, MembershipView
from tests.dbutil import fresh_database
from tests.functional.fleet_harness import TTL, Fleet
from tests.harness import ServiceProcess
from tests.harness.process import REPO, SERVING

__all__ = [
    "ConvergenceWatch",
    "Run",
    "converged",
    "count_claims",
    "format_report",
    "main",
    "make_fleet",
    "parse_args",
    "read_nodes",
    "ring_owners",
    "run",
    "steps",
]

STEPS = ("import", "cold", "join", "kill", "builds", "list")

CLAIMED = re.compile(r"Agent (\S+) claimed (\d+) of (\d+) nodes \((\d+) refused")
RELEASED = re.compile(r"Agent (\S+) released (\d+) nodes")

Log = Callable[[str], None]
#: node uuid -> (group, owner, pinned)
Nodes = dict[str, tuple[str, str | None, bool]]


# -- what converged means ---------------------------------------------------------------


def read_nodes(db: Database) -> Nodes:
    """Every node's group, owner and whether it is pinned (holds an instance)."""
    with db.transaction() as session:
        rows = session.execute(
            select(NodeModel.uuid, NodeModel.node_group, NodeModel.owner, NodeModel.instance_uuid)
        ).all()
    return {u: (g, o, i is not None) for u, g, o, i in rows}


def ring_owners(view: MembershipView, nodes: Nodes) -> dict[str, str]:
    """Each node's ring owner in ``view`` (the agents' own rule,
    :meth:`compute_agent.ownership.Ownership.desired`: one ring per node group)."""
    by_group: dict[str, list[str]] = {}
    for uuid, (group, _owner, _pinned) in nodes.items():
        by_group.setdefault(group, []).append(uuid)
    owners: dict[str, str] = {}
    for group, uuids in by_group.items():
        ring = view.ring(group)
        if len(ring):
            owners.update(zip(uuids, ring.assign(uuids), strict=True))
    return owners


def converged(view: MembershipView, nodes: Nodes, agents: set[str]) -> tuple[bool, int]:
    """Whether ``view`` holds exactly ``agents`` and every unpinned node is
    owned by its ring owner; and how many unpinned nodes are not (yet)."""
    if set(view.members) != agents:
        return False, -1
    owners = ring_owners(view, nodes)
    off = sum(
        1
        for uuid, (_group, owner, pinned) in nodes.items()
        if not pinned and owner != owners.get(uuid)
    )
    return off == 0, off


class ConvergenceWatch:
    """The live group as a conductor sees it: a passive member of the fleet's
    group (``join=False``), its latest view."""

    def __init__(self, etcd_url: str, group: str) -> None:
        self._lock = threading.Lock()
        self._view: MembershipView | None = None
        # Its TTL matters to nobody (it never joins): a long one keeps a
        # benchmark process busy reading 100k rows from flapping to SUSPENDED.
        self._membership = Membership(
            f"{etcd_url}?membership_timeout=60",
            "scale-bench-watch",
            group=group,
            on_change=self._changed,
            watch_interval=0.1,
            join=False,
        )

    def _changed(self, view: MembershipView) -> None:
        with self._lock:
            self._view = view

    def start(self) -> ConvergenceWatch:
        self._membership.start()
        return self

    def stop(self) -> None:
        self._membership.stop(leave=False)

    def view(self) -> MembershipView | None:
        with self._lock:
            return self._view

    def members(self) -> set[str]:
        view = self.view()
        return set(view.members) if view is not None else set()


def count_claims(text: str) -> dict[str, int]:
    """Claims granted and refused, claim calls, and releases in conductor log text."""
    counts = {"claim_calls": 0, "granted": 0, "refused": 0, "release_calls": 0, "released": 0}
    for match in CLAIMED.finditer(text):
        counts["claim_calls"] += 1
        counts["granted"] += int(match.group(2))
        counts["refused"] += int(match.group(4))
    for match in RELEASED.finditer(text):
        counts["release_calls"] += 1
        counts["released"] += int(match.group(2))
    return counts


#: ``<host> serving metrics on URL``: every service logs its metrics endpoint
#: (port 0: a free one), an agent of a group too, with its own host.
METRICS_AT = re.compile(r"(\S+) serving metrics on (http://127\.0\.0\.1:\d+/metrics)")
INVENTORY_ROWS = re.compile(r'^ringfleet_agent_inventory_rows_total\{host="([^"]+)"\} (\S+)$', re.M)


def metrics_urls(log: str) -> dict[str, str]:
    """Host -> metrics URL, from a process log (the last one logged per host)."""
    return {host: url for host, url in METRICS_AT.findall(log)}


def inventory_rows(text: str) -> dict[str, int]:
    """Host -> ``ringfleet_agent_inventory_rows_total`` in a Prometheus text page."""
    return {host: int(float(value)) for host, value in INVENTORY_ROWS.findall(text)}


RPC_SERVED = re.compile(
    r'^ringfleet_rpc_server_duration_seconds_(count|sum)\{[^}]*method="([^"]+)"[^}]*\} (\S+)$',
    re.M,
)


def rpc_served(text: str) -> dict[str, tuple[int, float]]:
    """Method -> (calls, seconds) served, summed over outcomes, from a
    conductor's metrics page (``ringfleet_rpc_server_duration_seconds``)."""
    served: dict[str, list[float]] = {}
    for kind, method, value in RPC_SERVED.findall(text):
        entry = served.setdefault(method, [0.0, 0.0])
        entry[0 if kind == "count" else 1] += float(value)
    return {method: (int(count), seconds) for method, (count, seconds) in served.items()}


def scrape(url: str) -> str:
    """A metrics page (the endpoints are the fleet's own, on 127.0.0.1)."""
    with urllib.request.urlopen(url, timeout=30) as answer:
        text: str = answer.read().decode()
    return text


def _since(now: Mapping[str, int], before: Mapping[str, int]) -> dict[str, int]:
    """Per host, the counter's growth since ``before`` (a new host: all of it)."""
    return {host: count - before.get(host, 0) for host, count in now.items()}


def _rows_read(rows: Mapping[str, int], hosts: Iterable[str]) -> dict[str, Any]:
    """Rows read by ``hosts`` (one that served no counter: 0): per host, sum, largest."""
    mine = {host: rows.get(host, 0) for host in sorted(hosts)}
    return {
        "rows_read": mine,
        "rows_read_total": sum(mine.values()),
        "rows_read_max": max(mine.values(), default=0),
    }


# -- processes -------------------------------------------------------------------------


class _CodeProcess(ServiceProcess):
    """A service process run from ``code`` (another checkout), if given."""

    def __init__(self, module: str, name: str, config: Path, log_file: Path, code: Path | None):
        super().__init__(module, name, config, log_file)
        self.code = code

    def start(self) -> ServiceProcess:
        if self.code is None:
            return super().start()
        env = {**os.environ, "PYTHONPATH": str(self.code)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", self.module, "--config-file", str(self.config)],
            cwd=self.code,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return self


def spawn(fleet: Fleet, module: str, name: str, code: Path | None) -> ServiceProcess:
    """:meth:`Fleet._spawn`, from ``code`` if given; not waited for."""
    config = fleet.workdir / f"{name}.conf"
    log_file = fleet.workdir / f"{name}.log"
    config.write_text(f"[DEFAULT]\nhost = {name}\nlog_file = {log_file}\n{fleet.common}")
    proc = _CodeProcess(module, name, config, log_file, code)
    proc.start()
    fleet.procs[name] = proc
    return proc


#: The launcher of several agents in one process, run by path (see its docstring).
MULTI_AGENT = Path(__file__).resolve().with_name("multi_agent.py")


class AgentGroup(_CodeProcess):
    """Several agents in one process (:mod:`benchmarks.multi_agent`): one log,
    each agent's lines named by its host."""

    def __init__(
        self, name: str, hosts: Sequence[str], config: Path, log_file: Path, code: Path | None
    ) -> None:
        super().__init__("compute_agent.multi_agent", name, config, log_file, code)
        self.hosts = list(hosts)

    def start(self) -> ServiceProcess:
        root = self.code or REPO
        argv = [sys.executable, str(MULTI_AGENT), "--config-file", str(self.config)]
        for host in self.hosts:
            argv += ["--host", host]
        with self.stderr_file.open("ab") as stderr:
            self.proc = subprocess.Popen(
                argv,
                cwd=root,
                env={**os.environ, "PYTHONPATH": str(root)},
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        return self

    def wait_serving(self, timeout: float = 60) -> None:
        """Until every agent of the group logged ``Agent <host> serving topic``."""
        for host in self.hosts:
            self.wait_log(f"Agent {host} {SERVING}", timeout)


def hosts_of(proc: ServiceProcess) -> list[str]:
    """The agents a process runs: a group's hosts, or the process's own name."""
    return list(proc.hosts) if isinstance(proc, AgentGroup) else [proc.name]


def spawn_agents(
    fleet: Fleet, names: Sequence[str], per_process: int, code: Path | None
) -> list[ServiceProcess]:
    """The agents ``names``, ``per_process`` to a process (1: each its own
    ``compute_agent.cmd.agent``, as before); not waited for."""
    if per_process <= 1:
        return [spawn(fleet, "compute_agent.cmd.agent", name, code) for name in names]
    procs: list[ServiceProcess] = []
    for start in range(0, len(names), per_process):
        hosts = names[start : start + per_process]
        if len(hosts) == 1:
            procs.append(spawn(fleet, "compute_agent.cmd.agent", hosts[0], code))
            continue
        name = f"{hosts[0]}..{hosts[-1]}"
        config = fleet.workdir / f"{name}.conf"
        log_file = fleet.workdir / f"{name}.log"
        # The [DEFAULT] host is each agent's own (set by the launcher); the
        # file's is only what oslo.config checks at parse time.
        config.write_text(f"[DEFAULT]\nhost = {hosts[0]}\nlog_file = {log_file}\n{fleet.common}")
        proc = AgentGroup(name, hosts, config, log_file, code)
        proc.start()
        fleet.procs[name] = proc
        procs.append(proc)
    return procs


class Sampler:
    """The RSS per role (largest now and largest seen) and each conductor's
    CPU time, from /proc (psutil).

    Agents are kept apart by how they run: ``agent`` is the largest
    process of one agent; for K agents in one process (:class:`AgentGroup`)
    ``agent_share`` is the largest such process's RSS / K and
    ``agent_group`` its RSS.
    """

    ROLES = ("conductor", "agent", "agent_share", "agent_group")

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.max_rss = dict.fromkeys(self.ROLES, 0)
        self.rss_now = dict.fromkeys(self.ROLES, 0)  # at the last sample
        self._cpu: dict[str, float] = {}  # conductor name -> CPU seconds last seen

    def sample(self) -> None:
        now = dict.fromkeys(self.ROLES, 0)
        for name, proc in list(self.fleet.procs.items()):
            if proc.proc is None or proc.proc.poll() is not None:
                continue
            conductor = proc.module.startswith("conductor")
            with contextlib.suppress(psutil.Error):
                process = psutil.Process(proc.proc.pid)
                rss = process.memory_info().rss
                if conductor:
                    now["conductor"] = max(now["conductor"], rss)
                    times = process.cpu_times()
                    self._cpu[name] = times.user + times.system
                elif isinstance(proc, AgentGroup):
                    now["agent_share"] = max(now["agent_share"], rss // len(proc.hosts))
                    now["agent_group"] = max(now["agent_group"], rss)
                else:
                    now["agent"] = max(now["agent"], rss)
        self.rss_now = now
        for role, rss in now.items():
            self.max_rss[role] = max(self.max_rss[role], rss)

    def conductor_rss_mb(self) -> float:
        """The largest RSS of a running conductor now (not the largest seen)."""
        self.sample()
        return self.rss_now["conductor"] / 2**20

    def conductor_cpu(self) -> float:
        """CPU seconds of every conductor so far (a stopped one: as last seen)."""
        self.sample()
        return sum(self._cpu.values())


#: (monotonic time, broker bytes per connection, conductor calls served)
Sample = tuple[float, dict[str, int] | None, int]


def _octets(start: Sample, end: Sample) -> int | None:
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

    def calls_served(self) -> int:
        """RPC calls the running conductors served, scraped from their metrics."""
        return sum(count for count, _s in self.served_by_method().values())

    def served_by_method(self) -> dict[str, tuple[int, float]]:
        """Method -> (calls, seconds) the running conductors served so far."""
        total: dict[str, tuple[int, float]] = {}
        for proc in self.conductors():
            found = METRICS_AT.search(proc.log())
            if found is None or not proc.running():
                continue
            for method, (count, seconds) in rpc_served(scrape(found.group(2))).items():
                calls, spent = total.get(method, (0, 0.0))
                total[method] = (calls + count, spent + seconds)
        return total

    def sample(self) -> Sample:
        return time.monotonic(), self.broker_bytes(), self.calls_served()

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
            if previous is not None and _close(previous, rate):
                return min(previous, rate, key=lambda r: (r[0] or 0.0, r[1]))
            previous, start = rate, end
        assert previous is not None
        return previous

    @staticmethod
    def rate(start: Sample, end: Sample) -> tuple[float | None, float]:
        elapsed = max(end[0] - start[0], 1e-6)
        octets = _octets(start, end)
        return None if octets is None else octets / elapsed, (end[2] - start[2]) / elapsed

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
        octets = _octets(start, end)
        return {
            "seconds": end[0] - start[0],
            "broker_mb": None if octets is None else octets / 1e6,
            "calls": end[2] - start[2],
            "quiet_broker_kb_s": None if quiet is None or quiet[0] is None else quiet[0] / 1e3,
            "quiet_calls_s": None if quiet is None else quiet[1],
        }


# -- the steps ---------------------------------------------------------------------------


class Run:
    """One agent count's fleet and its measurements."""

    def __init__(
        self, args: argparse.Namespace, fleet: Fleet, watch: ConvergenceWatch, log: Log
    ) -> None:
        self.args, self.fleet, self.watch, self.log = args, fleet, watch, log
        self.cold_started = time.monotonic()  # set again by cold()
        self.sampler = Sampler(fleet)
        self.traffic = Traffic(os.environ.get("RINGFLEET_TEST_RABBITMQCTL"), self.conductors)
        self.cli_conf = fleet.workdir / "cli.conf"
        self.cli_conf.write_text(f"[DEFAULT]\ntransport_url = {args.transport_url}\n")
        self._metrics_urls: dict[str, dict[str, str]] = {}  # process name -> host -> URL

    def conductors(self) -> list[ServiceProcess]:
        return [p for p in self.fleet.procs.values() if p.module.startswith("conductor")]

    def log_marks(self) -> dict[str, int]:
        """Where each conductor's log ends now (for :meth:`claims_since`)."""
        return {p.name: len(p.log()) for p in self.conductors()}

    def claims_since(self, marks: Mapping[str, int]) -> dict[str, int]:
        """Claims and releases the conductors logged since ``marks``."""
        return count_claims("".join(p.log()[marks.get(p.name, 0) :] for p in self.conductors()))

    def agent_procs(self) -> list[ServiceProcess]:
        """The running agent processes (one agent each, or a group)."""
        return [
            p
            for p in self.fleet.procs.values()
            if p.module.startswith("compute_agent") and p.running()
        ]

    def agents(self) -> set[str]:
        """The hosts of the running agents."""
        return {host for proc in self.agent_procs() for host in hosts_of(proc)}

    def rows_read(self) -> dict[str, int]:
        """Host -> node rows it read for its inventory so far
        (``ringfleet_agent_inventory_rows_total``, scraped from each running
        agent's own metrics endpoint: an agent of a group has its own)."""
        rows: dict[str, int] = {}
        for proc in self.agent_procs():
            urls = self._metrics_urls.get(proc.name)
            if urls is None:
                urls = metrics_urls(proc.log())
                if set(urls) >= set(hosts_of(proc)):  # complete: read the log once
                    self._metrics_urls[proc.name] = urls
            for url in dict.fromkeys(urls.values()):
                try:
                    rows.update(inventory_rows(scrape(url)))
                except OSError as exc:  # gone meanwhile: as if not running, but say so
                    self.log(f"  {proc.name}: metrics not read from {url}: {exc}")
        return rows

    def ringfleet(self, *argv: str, timeout: float = 600) -> tuple[float, str]:
        started = time.monotonic()
        done = subprocess.run(
            [
                str(Path(sys.executable).with_name("ringfleet")),
                "--config-file",
                str(self.cli_conf),
                *argv,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        elapsed = time.monotonic() - started
        if done.returncode != 0:
            raise RuntimeError(f"ringfleet {' '.join(argv)}: {done.stderr[-2000:]}")
        return elapsed, done.stdout

    def import_nodes(self) -> dict[str, Any]:
        path = self.fleet.workdir / "nodes.csv"
        with path.open("w", newline="") as out:
            writer = csv.writer(out)
            writer.writerow(["name", "resource_class"])
            for i in range(self.args.nodes):
                writer.writerow([f"scale-{i:06d}", "baremetal"])
        elapsed, _out = self.ringfleet("node", "import", str(path))
        self.sampler.sample()
        return {"nodes": self.args.nodes, "seconds": elapsed}

    def wait_converged(self, agents: set[str], started: float) -> dict[str, Any]:
        """Poll until the ring of ``agents`` is converged: seconds since
        ``started``, or ``None`` after ``--timeout`` (then how many unpinned
        nodes were still off their ring owner, and how many were unowned)."""
        deadline = started + self.args.timeout
        polls = 0
        off = unowned = -1
        nodes: Nodes = {}
        while not polls or time.monotonic() < deadline:  # at least once: the state at the end
            view = self.watch.view()
            nodes = read_nodes(self.fleet.db)
            polls += 1
            self.sampler.sample()
            if view is not None:
                done, off = converged(view, nodes, agents)
                if done:
                    seconds = time.monotonic() - started
                    return {"seconds": seconds, "polls": polls, "off": 0, "nodes": nodes}
            if time.monotonic() < deadline:
                time.sleep(0.25)
        unowned = sum(1 for _g, owner, _p in nodes.values() if owner is None)
        self.log(
            f"  not converged within {self.args.timeout:g} s: {off} nodes off their ring "
            f"owner, {unowned} unowned (view {sorted(self.watch.members())})"
        )
        return {"seconds": None, "polls": polls, "off": off, "unowned": unowned, "nodes": nodes}

    def cold(self, names: Sequence[str], alone: Sequence[str] = ()) -> dict[str, Any]:
        """The agents ``names`` started together (``--agents-per-process`` to
        a process, but each of ``alone`` in a process of its own) until the
        ring converged; its cost: conductor CPU, broker bytes, rows read."""
        marks = self.log_marks()
        cpu_before = self.sampler.conductor_cpu()
        start = self.traffic.sample()
        started = self.cold_started = time.monotonic()
        code = self.args.code
        grouped = [name for name in names if name not in alone]
        procs = [spawn(self.fleet, "compute_agent.cmd.agent", name, code) for name in alone]
        procs += spawn_agents(self.fleet, grouped, self.args.agents_per_process, code)
        for proc in procs:
            proc.wait_serving(120)
        serving = time.monotonic() - started
        done = self.wait_converged(set(names), started)
        cpu = self.sampler.conductor_cpu() - cpu_before
        rows = self.rows_read()
        traffic = self.traffic.cost(None, start, self.traffic.sample())
        claims = self.claims_since(marks)
        return {
            "agents": len(names),
            "processes": len(procs),
            "seconds": done["seconds"],
            "off": done["off"],
            "serving_s": serving,
            "conductor_cpu_s": cpu,
            "traffic": traffic,
            **_rows_read(rows, names),
            **claims,
        }

    def quiet(self, seconds: float) -> dict[str, Any]:
        """The converged fleet left alone: conductor CPU, broker bytes, rows
        read by the agents and RPC calls served by method, per minute, over
        ``seconds`` once the cold start's aftermath is over: 10 s (the
        passes that follow a convergence), at least ``report_interval`` + 5 s
        after the agents started, and until no state report came for two
        samples in a row (each agent's first report, a ``report_interval``
        after its start, carries every node it owns: a cost of the cold
        start, per node, not of a quiet minute)."""
        time.sleep(10)
        # The agents' first state reports come a report_interval after they
        # started (the default: this benchmark runs the agents with it).
        first_reports = self.cold_started + REPORT_INTERVAL + 5 - time.monotonic()
        time.sleep(max(first_reports, 0.0))
        self._wait_reports_done()
        cpu_before = self.sampler.conductor_cpu()
        rows_before = self.rows_read()
        served_before = self.traffic.served_by_method()
        start = self.traffic.sample()
        time.sleep(seconds)
        cpu = self.sampler.conductor_cpu() - cpu_before
        rows = _since(self.rows_read(), rows_before)
        end = self.traffic.sample()
        octets = _octets(start, end)
        per_min = 60 / seconds
        served = {
            method: (
                (count - served_before.get(method, (0, 0.0))[0]) * per_min,
                (spent - served_before.get(method, (0, 0.0))[1]) * per_min,
            )
            for method, (count, spent) in self.traffic.served_by_method().items()
        }
        return {
            "seconds": seconds,
            # Claims or releases meanwhile: the fleet was not quiet (an agent
            # missed its heartbeats on an overloaded machine and re-joined).
            "ownership_calls": round(
                sum(served.get(m, (0.0, 0.0))[0] for m in OWNERSHIP_CALLS) / per_min
            ),
            "conductor_cpu_s_per_min": cpu * per_min,
            "rows_read_per_min": sum(rows.values()) * per_min,
            "broker_mb_per_min": None if octets is None else octets / 1e6 * per_min,
            "calls_per_min": {m: c for m, (c, _s) in served.items() if c > 0},
            "call_seconds_per_min": {m: s for m, (c, s) in served.items() if c > 0},
        }

    def _wait_reports_done(self, step: float = 3.0, most: float = 90.0) -> None:
        """Until the conductors served no ``report_node_states`` over two
        ``step`` samples in a row (at most ``most`` seconds)."""
        deadline = time.monotonic() + most
        previous, still = None, 0
        while time.monotonic() < deadline and still < 2:
            count = self.traffic.served_by_method().get("report_node_states", (0, 0.0))[0]
            still = still + 1 if count == previous else 0
            previous = count
            time.sleep(step)

    def join(self, name: str) -> dict[str, Any]:
        before = read_nodes(self.fleet.db)
        stayed = self.agents()
        quiet = self.traffic.quiet_rate()
        marks = self.log_marks()
        rows_before = self.rows_read()
        cpu_before = self.sampler.conductor_cpu()
        start = self.traffic.sample()
        started = time.monotonic()
        # Always a process of its own: the kill -9 that follows is the real thing.
        proc = spawn(self.fleet, "compute_agent.cmd.agent", name, self.args.code)
        proc.wait_serving(120)
        done = self.wait_converged(stayed | {name}, started)
        cpu = self.sampler.conductor_cpu() - cpu_before
        rows = self.rows_read()
        traffic = self.traffic.cost(quiet, start, self.traffic.sample())
        after: Nodes = done["nodes"]
        moved = between = 0
        for uuid, (_g, owner, _p) in after.items():
            old = before.get(uuid, ("", None, False))[1]
            if old != owner:
                moved += 1
                if old in stayed and owner in stayed:
                    between += 1
        others = _rows_read(_since(rows, rows_before), stayed)
        return {
            "agents_before": len(stayed),
            "seconds": done["seconds"],
            "off": done["off"],
            "moved": moved,
            "ideal": len(after) / (len(stayed) + 1),
            "moved_between_stayed": between,
            "unowned_after": sum(1 for _g, o, _p in after.values() if o is None),
            "conductor_cpu_s": cpu,
            "traffic": traffic,
            "rows_read_joiner": rows.get(name, 0),
            "rows_read_others": others["rows_read_total"],
            "rows_read_others_max": others["rows_read_max"],
            **self.claims_since(marks),
        }

    def kill(self, name: str) -> dict[str, Any]:
        victim = self.fleet.procs.get(name)
        if victim is None:  # steps() keeps the victim in a process of its own
            raise RuntimeError(f"{name} shares its process with other agents: no kill -9 of it")
        survivors = self.agents() - {name}
        owned = sum(1 for _g, o, _p in read_nodes(self.fleet.db).values() if o == name)
        quiet = self.traffic.quiet_rate()
        rows_before = self.rows_read()
        cpu_before = self.sampler.conductor_cpu()
        start = self.traffic.sample()
        started = time.monotonic()
        victim.kill()
        unowned = sum(1 for _g, o, _p in read_nodes(self.fleet.db).values() if o is None)
        owned_s: float | None = None
        victim_s: float | None = None
        nodes: Nodes = {}
        while time.monotonic() - started < self.args.timeout:
            nodes = read_nodes(self.fleet.db)
            self.sampler.sample()
            now = time.monotonic() - started
            if victim_s is None and all(o != name for _g, o, _p in nodes.values()):
                victim_s = now
            if all(o in survivors for _g, o, _p in nodes.values()):
                owned_s = now
                break
            time.sleep(0.05)
        # If every node is not owned again: how many were left unowned.
        unowned_end = sum(1 for _g, o, _p in nodes.values() if o is None)
        ring_s = self.wait_converged(survivors, started)["seconds"]
        cpu = self.sampler.conductor_cpu() - cpu_before
        rows = _rows_read(_since(self.rows_read(), rows_before), survivors)
        traffic = self.traffic.cost(quiet, start, self.traffic.sample())
        return {
            "traffic": traffic,
            "conductor_cpu_s": cpu,
            "rows_read_survivors": rows["rows_read_total"],
            "rows_read_survivors_max": rows["rows_read_max"],
            "victim": name,
            "nodes_owned": owned,
            "unowned_before": unowned,
            "victim_s": victim_s,
            "owned_s": owned_s,
            "unowned_end": unowned_end,
            "ring_s": ring_s,
        }

    def builds(self) -> dict[str, Any]:
        with contextlib.suppress(Exception):  # exists from an earlier wave
            self.fleet.api.create_flavor({"name": FLAVOR, "resource_class": "baremetal"})
        rate = throughput(
            self.args.transport_url, self.fleet.db, self.args.builds, self.args.batch, 4
        )
        self.sampler.sample()
        rate["conductors"] = sum(1 for p in self.conductors() if p.running())
        return rate

    def wave(self, name: str) -> dict[str, Any]:
        """One agent joins, a wave of builds, kill -9 of that agent; then the
        conductors' RSS, to see whether repeated changes make it grow."""
        join = self.join(name)
        rate = self.builds()
        kill = self.kill(name)
        return {
            "join_s": join["seconds"],
            "builds_per_s": rate["builds_per_s"],
            "owned_s": kill["owned_s"],
            "conductor_rss_mb": self.sampler.conductor_rss_mb(),
        }

    def node_list(self) -> dict[str, Any]:
        elapsed, out = self.ringfleet("node", "list", "-f", "value", "-c", "UUID")
        self.sampler.sample()
        return {"seconds": elapsed, "rows": len(out.splitlines())}


#: The functional tests' agent intervals, and what the fleet runs with here
#: instead: the defaults, as an operator runs them.  (The tests' one-second
#: reconcile and two-second power report exist to make failures show fast
#: in a test of a few nodes; at 100k nodes they cost the agents, together,
#: about a quarter of a core more than the defaults.)
#: The RPC methods that change ownership: none of them in a quiet minute.
OWNERSHIP_CALLS = ("claim_nodes", "claim_share", "release_nodes", "transfer_nodes")

#: ``[compute_agent] report_interval``'s default, which the agents run with here.
REPORT_INTERVAL = 30.0

_TEST_INTERVALS = "reconcile_interval = 1\nreport_interval = 2\nquiet_reconcile_interval = 1\n"


def make_fleet(
    workdir: Path,
    db_url: str,
    transport_url: str,
    etcd_url: str,
    ttl: int = TTL,
    watch_interval: float = 0.2,
) -> Fleet:
    """The functional tests' fleet, deploy and clean time 0, DEBUG logging off
    (at 100k nodes DEBUG lines are most of the logging cost), the agents'
    reconcile and report intervals at their defaults, and the membership
    TTL and watch interval given."""
    fleet = Fleet(
        workdir,
        db_url=db_url,
        transport_url=transport_url,
        etcd_url=etcd_url,
        step_duration=0.0,
        backend_url=f"{etcd_url}?membership_timeout={ttl}",
        watch_interval=watch_interval,
    )
    assert _TEST_INTERVALS in fleet.common, "the functional fleet's intervals changed"
    fleet.common = (
        fleet.common.replace("debug = true", "debug = false")
        .replace("clean_duration = 0.05", "clean_duration = 0")
        .replace(_TEST_INTERVALS, "")
    ) + "[metrics]\nenabled = true\nlisten_address = 127.0.0.1\nport = 0\n"  # Traffic reads them
    return fleet


def run_one(args: argparse.Namespace, agents: int, log: Log) -> dict[str, Any]:
    """The steps for one agent count, on a fresh database and fleet."""
    with contextlib.ExitStack() as stack:
        workdir = Path(tempfile.mkdtemp(prefix=f"scale-bench-{agents}-"))
        db_url = stack.enter_context(fresh_database(args.db_url, prefix="rf_bench"))
        database = Database(db_url)
        migration.upgrade(database)
        database.dispose()
        fleet = make_fleet(
            workdir, db_url, args.transport_url, args.etcd_url, args.ttl, args.watch_interval
        )
        stack.callback(fleet.close)  # kill -9 of every process: nothing to wait for
        watch = ConvergenceWatch(args.etcd_url, fleet.group).start()
        stack.callback(watch.stop)
        bench = Run(args, fleet, watch, log)
        results: dict[str, Any] = {
            "agents": agents,
            "agents_per_process": args.agents_per_process,
            "workdir": str(workdir),
        }
        started = time.monotonic()
        try:
            steps(args, bench, agents, results)
        except BaseException:
            log(f"failed; the process logs are in {workdir}")
            raise
        results["conductor_cpu_s"] = bench.sampler.conductor_cpu()
        results["conductor_rss_mb"] = bench.sampler.max_rss["conductor"] / 2**20
        results["agent_rss_mb"] = bench.sampler.max_rss["agent"] / 2**20
        if args.agents_per_process > 1:
            results["agent_share_rss_mb"] = bench.sampler.max_rss["agent_share"] / 2**20
            results["agent_group_rss_mb"] = bench.sampler.max_rss["agent_group"] / 2**20
        results["wall_s"] = time.monotonic() - started
        results["load_end"] = os.getloadavg()[0]  # a shared machine: how busy it was
        return results


def steps(args: argparse.Namespace, bench: Run, agents: int, results: dict[str, Any]) -> None:
    """Start the conductors, then ``args.steps`` in order, into ``results``."""
    fleet, steps, log = bench.fleet, args.steps, bench.log
    names = [f"agent-{i:02d}" for i in range(agents)]
    conductors = [
        spawn(fleet, "conductor.cmd.conductor", f"cond-{i + 1}", args.code)
        for i in range(args.conductors)
    ]
    for proc in conductors:
        proc.wait_serving(120)
    if "import" in steps:
        log(f"[{agents} agents] ringfleet node import of {args.nodes} rows")
        results["import"] = bench.import_nodes()
        log(f"  {results['import']['seconds']:.1f} s")
    else:  # the nodes are needed all the same: by RPC, not measured
        for start in range(0, args.nodes, 1000):
            fleet.api.import_nodes(
                [
                    {"name": f"scale-{i:06d}", "resource_class": "baremetal"}
                    for i in range(start, min(args.nodes, start + 1000))
                ]
            )
    per_process = args.agents_per_process
    # kill -9 of one agent must not take others with it: without a join
    # (whose agent is killed then), the victim runs in a process of its own.
    alone = names[:1] if per_process > 1 and "kill" in steps and "join" not in steps else []
    log(
        f"[{agents} agents] cold start of {agents} agents"
        + (f", {per_process} to a process" if per_process > 1 else "")
    )
    cold = bench.cold(names, alone)
    if args.quiet:
        cold["quiet"] = bench.quiet(args.quiet)
        log(f"  quiet: conductor CPU {cold['quiet']['conductor_cpu_s_per_min']:.2f} s per minute")
    if "cold" in steps:
        results["cold"] = cold
        seconds = _cell(cold["seconds"], cold["off"])
        log(f"  {seconds}, {cold['granted']} granted, {cold['refused']} refused")
    if "join" in steps:
        log(f"[{agents} agents] one agent joins")
        results["join"] = bench.join("agent-joined")
        join = results["join"]
        log(f"  {_cell(join['seconds'], join['off'])}, moved {join['moved']}")
    if "kill" in steps:
        victim = "agent-joined" if "join" in steps else names[0]
        log(f"[{agents} agents] kill -9 of {victim}")
        results["kill"] = bench.kill(victim)
        log(f"  owned again after {_cell(results['kill']['owned_s'])}")
    if "builds" in steps:
        waves = []
        log(f"[{agents} agents] {args.builds} builds, {len(conductors)} conductor(s)")
        waves.append(bench.builds())
        log(f"  {waves[-1]['builds_per_s']:.0f}/s")
        if len(conductors) > 1:
            for proc in conductors[1:]:
                bench.sampler.sample()  # its CPU time until now
                proc.terminate(60)
            log(f"[{agents} agents] {args.builds} builds, 1 conductor")
            waves.append(bench.builds())
            log(f"  {waves[-1]['builds_per_s']:.0f}/s")
        results["builds"] = waves
    for wave in range(1, args.waves + 1):
        log(f"[{agents} agents] wave {wave} of {args.waves}: join, {args.builds} builds, kill -9")
        results.setdefault("waves", []).append(bench.wave(f"agent-wave-{wave}"))
        log(f"  conductor RSS {results['waves'][-1]['conductor_rss_mb']:.0f} MB")
    if "list" in steps:
        log(f"[{agents} agents] ringfleet node list")
        results["node_list"] = bench.node_list()
        log(f"  {results['node_list']['seconds']:.1f} s")


def run(args: argparse.Namespace, log: Log = lambda _line: None) -> dict[str, Any]:
    """Every agent count in turn; the JSON-ready report."""
    load_before = os.getloadavg()[0]
    commit = _commit(args.code)  # before the runs: not a commit made meanwhile
    runs = [run_one(args, agents, log) for agents in args.agents]
    report = {
        "config": {
            "nodes": args.nodes,
            "agents": list(args.agents),
            "agents_per_process": args.agents_per_process,
            "conductors": args.conductors,
            "steps": list(args.steps),
            "builds": args.builds,
            "batch": args.batch,
            "ttl_s": args.ttl,
            "watch_interval_s": args.watch_interval,
            "code": str(args.code) if args.code else None,
            "commit": commit,
        },
        "environment": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_before": load_before,
        },
        "runs": runs,
    }
    report["goals"] = _goals(runs, args.nodes, args.ttl)
    return report


def _commit(code: Path | None) -> str | None:
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=code or Path(__file__).resolve().parents[1],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    return None


# -- goals and report --------------------------------------------------------------------


def _le(seconds: float | None, limit: float) -> bool:
    return seconds is not None and seconds <= limit


def _secs(seconds: float | None, step: Mapping[str, Any]) -> str:
    """Seconds, or what was left when the wait ended."""
    if seconds is not None:
        return f"{seconds:.1f} s"
    if "off" in step:
        return f"not converged ({step['off']} nodes off their ring owner)"
    return "not within the wait"


def bytes_per_row(cold: Mapping[str, Any]) -> float | None:
    """Broker bytes of a cold start per node row the agents read in it
    (``None``: bytes unknown or nothing read): an inventory entry's cost on
    the bus, with the claims, state reports and heartbeats of the cold
    start counted in (an upper bound of the entry's own bytes)."""
    mb = cold.get("traffic", {}).get("broker_mb")
    rows = cold.get("rows_read_total") or 0
    return None if mb is None or rows <= 0 else mb * 1e6 / rows


def join_share_mb(res: Mapping[str, Any]) -> float | None:
    """The joiner's share on the bus: N/(M+1) nodes x :func:`bytes_per_row`
    of the same fleet's cold start, in MB (``None``: not measured)."""
    per_row = bytes_per_row(res.get("cold", {}))
    if per_row is None or "join" not in res:
        return None
    return float(res["join"]["ideal"]) * per_row / 1e6


def _ratio(value: float | None, base: float | None) -> float | None:
    return None if value is None or not base else value / base


def _ratio_goal(
    goals: Goals, name: str, target: float, value: float | None, base: float | None, unit: str
) -> None:
    """``value <= target x base``; SKIP if either is unknown."""
    ratio = _ratio(value, base)
    detail = (
        None
        if ratio is None or value is None or base is None
        else f"{ratio:.2f} x ({value:,.1f} {unit} / {base:,.1f} {unit})"
    )
    goals.add(name, f"<= {target:g} x", ratio, None if ratio is None else ratio <= target, detail)


def _goals(runs: Sequence[Mapping[str, Any]], nodes: int, ttl: int = TTL) -> list[dict[str, Any]]:
    goals = Goals()
    for res in runs:
        tag = f"[{res['agents']} agents]"
        if "import" in res:
            s = res["import"]["seconds"]
            goals.add(f"{tag} node import of {nodes:,}", "<= 10 s", s, s <= 10, f"{s:.1f} s")
        if "cold" in res:
            s = res["cold"]["seconds"]
            goals.add(
                f"{tag} cold start, ring converged", "<= 15 s", s, _le(s, 15), _secs(s, res["cold"])
            )
        if "cold" in res and "rows_read_total" in res["cold"]:
            rows = res["cold"]["rows_read_total"]
            goals.add(
                f"{tag} cold start, rows read by all agents",
                "<= 1.2 x nodes",
                rows / nodes,
                rows <= 1.2 * nodes,
                f"{rows / nodes:.2f} x ({rows:,} rows / {nodes:,} nodes)",
            )
        if "join" in res and "cold" in res:
            _ratio_goal(
                goals,
                f"{tag} join, broker bytes against the joiner's share",
                2,
                res["join"].get("traffic", {}).get("broker_mb"),
                join_share_mb(res),
                "MB",
            )
        if "join" in res:
            j = res["join"]
            s = j["seconds"]
            limit = ttl + 5
            goals.add(
                f"{tag} one agent joins, ring converged",
                f"<= TTL + 5 s = {limit:g} s",
                s,
                _le(s, limit),
                _secs(s, j),
            )
            goals.add(
                f"{tag} join: moves between agents that stayed",
                "0",
                j["moved_between_stayed"],
                j["moved_between_stayed"] == 0,
            )
        if "kill" in res:
            s = res["kill"]["owned_s"]
            limit = ttl + 2
            goals.add(
                f"{tag} kill -9, every node owned again",
                f"<= TTL + 2 s = {limit:g} s",
                s,
                _le(s, limit),
                _secs(s, {}),
            )
        for wave in res.get("builds", []):
            rate = wave["builds_per_s"]
            goals.add(
                f"{tag} builds/s, {wave['conductors']} conductor(s)",
                ">= 200/s",
                rate,
                rate >= 200,
                f"{rate:.0f}/s",
            )
        if "node_list" in res:
            s = res["node_list"]["seconds"]
            goals.add(f"{tag} node list", "<= 5 s", s, s <= 5, f"{s:.1f} s")
        rss = res["agent_rss_mb"]
        # 0: no agent ran in a process of its own (all in groups, no join).
        goals.add(
            f"{tag} agent RSS (max)", "<= 150 MB", rss, rss <= 150 if rss else None, f"{rss:.0f} MB"
        )
        if "agent_share_rss_mb" in res:
            rss, per_process = res["agent_share_rss_mb"], res["agents_per_process"]
            goals.add(
                f"{tag} agent RSS share, {per_process} to a process (max RSS / {per_process})",
                "<= 150 MB",
                rss,
                rss <= 150,
                f"{rss:.0f} MB",
            )
        rss = res["conductor_rss_mb"]
        goals.add(f"{tag} conductor RSS (max)", "<= 1024 MB", rss, rss <= 1024, f"{rss:.0f} MB")
        waves = [w["conductor_rss_mb"] for w in res.get("waves", [])]
        if len(waves) >= 3:
            # Bounded: the second half of the waves grows the conductor less
            # than 5 % of what it held after the first wave.
            growth = waves[-1] - waves[len(waves) // 2]
            goals.add(
                f"{tag} conductor RSS growth over waves {len(waves) // 2 + 1}-{len(waves)}",
                f"<= 5 % of {waves[0]:.0f} MB",
                growth,
                growth <= 0.05 * waves[0],
                f"{growth:+.0f} MB",
            )
    scaling_goals(goals, runs, nodes)
    return goals.items


def _cell(seconds: float | None, off: int | None = None) -> str:
    """Seconds for the table (without unit), or what the wait ended on."""
    if seconds is not None:
        return f"{seconds:.1f}"
    return "timeout" if off is None else f"timeout, {off:,} off"


def _close(one: tuple[float | None, float], other: tuple[float | None, float]) -> bool:
    """Whether two (bytes/s, calls/s) rates agree within 25 % (or 1 kB/s, 1 call/s)."""
    pairs = [(one[1], other[1], 1.0)]
    if one[0] is not None and other[0] is not None:
        pairs.append((one[0], other[0], 1000.0))
    return all(abs(a - b) <= max(0.25 * max(a, b), floor) for a, b, floor in pairs)


def _traffic_rows(step: Mapping[str, Any]) -> list[tuple[str, str]]:
    traffic = step.get("traffic")
    if traffic is None:
        return []
    mb = traffic["broker_mb"]
    quiet_kb = traffic["quiet_broker_kb_s"]
    rows = [
        (
            f"  message bus over those {traffic['seconds']:.1f} s: broker MB / conductor calls",
            f"{'n/a' if mb is None else f'{mb:.1f}'} / {traffic['calls']:,}",
        )
    ]
    if traffic["quiet_calls_s"] is not None:  # a cold start has no quiet fleet before it
        rows.append(
            (
                "  (the same fleet quiet, before: kB/s / calls/s)",
                f"{'n/a' if quiet_kb is None else f'{quiet_kb:.0f}'} / "
                f"{traffic['quiet_calls_s']:.1f}",
            )
        )
    return rows


def _rows_cell(total: int, most: int) -> str:
    return f"{total:,} / {most:,}"


def _mb(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _rows(res: Mapping[str, Any]) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    if "import" in res:
        rows.append(("node import (CLI, CSV) (s)", f"{res['import']['seconds']:.1f}"))
    if "cold" in res:
        c = res["cold"]
        rows += [
            ("cold start: ring converged, from start (s)", _cell(c["seconds"], c["off"])),
            ("  all agents serving after (s)", f"{c['serving_s']:.1f}"),
            ("  claims granted", f"{c['granted']:,}"),
            ("  claims refused", f"{c['refused']:,}"),
            ("  nodes released", f"{c['released']:,}"),
            ("  claim / release calls", f"{c['claim_calls']:,} / {c['release_calls']:,}"),
            ("  conductor CPU during it (s)", f"{c['conductor_cpu_s']:.1f}"),
            *_traffic_rows(c),
        ]
        if "quiet" in c:
            q = c["quiet"]
            rows += [
                ("quiet fleet: conductor CPU (s/min)", f"{q['conductor_cpu_s_per_min']:.2f}"),
                ("  inventory rows read (per minute)", f"{q['rows_read_per_min']:,.0f}"),
                ("  broker MB (per minute)", _mb(q.get("broker_mb_per_min"))),
            ]
            spent = q.get("call_seconds_per_min", {})
            for method, calls in sorted(
                q.get("calls_per_min", {}).items(), key=lambda item: -spent.get(item[0], 0.0)
            ):
                rows.append(
                    (
                        f"  {method}: calls / s served (per minute)",
                        f"{calls:,.0f} / {spent.get(method, 0.0):.2f}",
                    )
                )
        if "rows_read_total" in c:
            per_row = bytes_per_row(c)
            rows += [
                (
                    "  inventory rows read: all agents / most by one",
                    _rows_cell(c["rows_read_total"], c["rows_read_max"]),
                ),
                ("  broker bytes per row read", _mb(per_row, 0)),
            ]
    if "join" in res:
        j = res["join"]
        rows += [
            ("one agent joins: ring converged (s)", _cell(j["seconds"], j["off"])),
            ("  nodes moved / ideal N/(M+1)", f"{j['moved']:,} / {j['ideal']:,.0f}"),
            ("  moved between agents that stayed", str(j["moved_between_stayed"])),
            ("  unowned when the wait ended", f"{j.get('unowned_after', 0):,}"),
            ("  claims granted / refused", f"{j['granted']:,} / {j['refused']:,}"),
            ("  conductor CPU during it (s)", f"{j['conductor_cpu_s']:.1f}"),
            *_traffic_rows(j),
            ("  the joiner's share on the bus (MB)", _mb(join_share_mb(res))),
            ("  inventory rows read by the joiner", f"{j['rows_read_joiner']:,}"),
            (
                "  by the others: all / most by one",
                _rows_cell(j["rows_read_others"], j["rows_read_others_max"]),
            ),
        ]
    if "kill" in res:
        k = res["kill"]
        rows += [
            (f"kill -9 ({k['nodes_owned']:,} nodes): all owned again (s)", _cell(k["owned_s"])),
            ("  none left on the killed agent (s)", _cell(k.get("victim_s"))),
            ("  nodes unowned before the kill", f"{k.get('unowned_before', 0):,}"),
            ("  nodes unowned when that wait ended", f"{k.get('unowned_end', 0):,}"),
            ("  ring converged again (s)", _cell(k["ring_s"])),
            ("  conductor CPU during it (s)", f"{k['conductor_cpu_s']:.1f}"),
            *_traffic_rows(k),
            (
                "  inventory rows read by the survivors: all / most by one",
                _rows_cell(k["rows_read_survivors"], k["rows_read_survivors_max"]),
            ),
        ]
    for wave in res.get("builds", []):
        rows.append(
            (
                f"builds/s ({wave['builds']} in requests of {wave['batch']}, "
                f"{wave['conductors']} conductor(s))",
                f"{wave['builds_per_s']:.0f}",
            )
        )
    for number, wave in enumerate(res.get("waves", []), 1):
        rows.append(
            (
                f"wave {number}: join (s) / builds/s / kill -9 owned (s) / conductor RSS (MB)",
                f"{_cell(wave['join_s'])} / {wave['builds_per_s']:.0f} / "
                f"{_cell(wave['owned_s'])} / {wave['conductor_rss_mb']:.0f}",
            )
        )
    if "node_list" in res:
        n = res["node_list"]
        rows.append((f"ringfleet node list ({n['rows']:,} rows) (s)", f"{n['seconds']:.1f}"))
    rows += [
        ("conductor CPU, whole run (s)", f"{res['conductor_cpu_s']:.1f}"),
        ("conductor RSS, max (MB)", f"{res['conductor_rss_mb']:.0f}"),
        ("agent RSS, max (MB)", f"{res['agent_rss_mb']:.0f}"),
    ]
    if "agent_share_rss_mb" in res:
        per_process = res["agents_per_process"]
        rows += [
            (
                f"agent RSS share, {per_process} to a process, max (MB; RSS / {per_process})",
                f"{res['agent_share_rss_mb']:.0f}",
            ),
            (f"{per_process}-agent process RSS, max (MB)", f"{res['agent_group_rss_mb']:.0f}"),
        ]
    return rows


def format_report(report: Mapping[str, Any]) -> str:
    """The human-readable table of a :func:`run` report."""
    config, env = report["config"], report["environment"]
    lines = [
        f"scale benchmark: {config['nodes']:,} nodes, {config['conductors']} conductor(s), "
        f"agents {', '.join(str(a) for a in config['agents'])}"
        + (
            f" ({config['agents_per_process']} to a process)"
            if config.get("agents_per_process", 1) > 1
            else ""
        )
        + "; membership_timeout "
        f"{config['ttl_s']:g} s, watch interval {config.get('watch_interval_s', 0.2):g} s, "
        f"deploy time 0; code {config['commit']}"
        + (f" ({config['code']})" if config["code"] else "")
        + f"; Python {env['python']}, {env['cpus']} CPUs, load {env['load_before']:.1f} before",
    ]
    for res in report["runs"]:
        rows = _rows(res)
        width = max(len(label) for label, _v in rows) + 2
        load = res.get("load_end")
        lines += [
            "",
            f"{res['agents']} agents (wall {res['wall_s']:.0f} s"
            + ("" if load is None else f", load {load:.1f} at the end")
            + ")",
        ]
        lines += [f"  {label:<{width}}{value:>16}" for label, value in rows]
    lines += format_scaling(report["runs"], config["nodes"])
    lines += format_goals(report["goals"])
    return "\n".join(lines)


# -- command line ------------------------------------------------------------------------


def _agent_counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of numbers: {text!r}") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"agent counts must be >= 1: {text!r}")
    return counts


def _steps_list(text: str) -> list[str]:
    steps = [part.strip() for part in text.split(",") if part.strip()]
    unknown = sorted(set(steps) - set(STEPS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown steps {unknown}; known: {', '.join(STEPS)}")
    return steps


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command-line options (server URLs default to ``RINGFLEET_TEST_*``)."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.scale_bench",
        description=(
            "Import, cold start, join, kill -9, builds and node list of a large fleet "
            "(issue 13). Run it through tools/with-test-servers.sh."
        ),
    )
    env = os.environ.get
    parser.add_argument(
        "--nodes", type=argtypes.at_least(1), default=100_000, help="nodes (100000)"
    )
    parser.add_argument(
        "--agents",
        type=_agent_counts,
        default=[10],
        help="agent processes, or a comma-separated list of counts run one after another (10)",
    )
    parser.add_argument(
        "--agents-per-process",
        type=argtypes.at_least(1),
        default=1,
        metavar="K",
        help="run the cold start's agents K to a Python process, as threads "
        "(benchmarks/multi_agent.py); the joined agent, and the killed one, in their own (1)",
    )
    parser.add_argument("--conductors", type=int, choices=(1, 2), default=1, help="(1)")
    parser.add_argument(
        "--steps",
        type=_steps_list,
        default=list(STEPS),
        help=f"comma-separated subset of {','.join(STEPS)} (all)",
    )
    parser.add_argument("--no-node-list", action="store_true", help="skip the node list step")
    parser.add_argument("--builds", type=argtypes.at_least(1), default=1000, help="(1000)")
    parser.add_argument(
        "--waves",
        type=argtypes.at_least(0),
        default=0,
        help="after the steps, this many waves of: one agent joins, --builds builds, kill -9 "
        "of that agent; the conductor RSS after each (0)",
    )
    parser.add_argument("--batch", type=argtypes.at_least(1), default=25, help="(25)")
    parser.add_argument(
        "--quiet",
        type=argtypes.seconds(allow_zero=True),
        default=0.0,
        metavar="SECONDS",
        help="after the cold start, measure the converged fleet left alone this long: "
        "conductor CPU and rows read per minute (0: not measured)",
    )
    parser.add_argument(
        "--ttl",
        type=argtypes.at_least(1),
        default=TTL,
        help=f"the membership TTL, membership_timeout ({TTL}, the functional tests'; "
        "production's is 10)",
    )
    parser.add_argument(
        "--watch-interval",
        type=argtypes.seconds(allow_zero=False),
        default=0.2,
        help="seconds between two reads of the membership group (0.2; the default of "
        "the services is 1)",
    )
    parser.add_argument(
        "--timeout",
        type=argtypes.seconds(allow_zero=False),
        default=180.0,
        help="seconds each convergence is waited for; after it the step reports a timeout (180)",
    )
    parser.add_argument(
        "--code",
        type=Path,
        help="run the services from this checkout of the project (default: this one)",
    )
    parser.add_argument("--db-url", default=env("RINGFLEET_TEST_DB_URL"))
    parser.add_argument("--transport-url", default=env("RINGFLEET_TEST_TRANSPORT_URL"))
    parser.add_argument("--etcd-url", default=env("RINGFLEET_TEST_ETCD_URL"))
    parser.add_argument("--json", type=Path, help="also write the report as JSON to this file")
    args = parser.parse_args(argv)
    if args.no_node_list and "list" in args.steps:
        args.steps.remove("list")
    if args.code is not None:
        args.code = args.code.resolve()
    missing = [
        name
        for name, value in (
            ("--db-url", args.db_url),
            ("--transport-url", args.transport_url),
            ("--etcd-url", args.etcd_url),
        )
        if not value
    ]
    if missing:
        parser.error(
            f"{', '.join(missing)} not given and RINGFLEET_TEST_* unset: run it as "
            "SERVERS=etcd,rabbit,postgres tools/with-test-servers.sh "
            ".venv/bin/python -m benchmarks.scale_bench"
        )
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return publish("scale_bench", lambda: run(args, log=log_line), format_report, args.json)


if __name__ == "__main__":
    sys.exit(main())
