# SPDX-License-Identifier: Apache-2.0
"""The steps of the scale benchmark on one fleet (:class:`Run`): import,
cold start, the quiet fleet, join, kill -9, builds, waves and node list,
each with what it cost (see :mod:`benchmarks.scale`).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.e2e_bench import FLAVOR, throughput
from benchmarks.scale.etcd import EtcdRequests, requests_between
from benchmarks.scale.observe import (
    ConvergenceWatch,
    Log,
    Nodes,
    converged,
    count_claims,
    inventory_rows,
    metrics_urls,
    read_nodes,
    rows_summary,
    scrape,
    since,
)
from benchmarks.scale.procs import (
    AgentGroup,
    Sampler,
    grown,
    hosts_of,
    servers_cpu,
    spawn,
    spawn_agents,
)
from benchmarks.scale.traffic import Traffic, octets
from tests.functional.fleet_harness import Fleet
from tests.harness import ServiceProcess

__all__ = ["OWNERSHIP_CALLS", "REPORT_INTERVAL", "Run"]

#: The RPC methods that change ownership: none of them in a quiet minute.
OWNERSHIP_CALLS = ("claim_nodes", "claim_share", "release_nodes", "transfer_nodes")

#: ``[compute_agent] report_interval``'s default, which the agents run with here.
REPORT_INTERVAL = 30.0

#: A conductor is idle below this share of a core (its quiet minute is about 1 %).
#: A step's costs count until the conductors are idle again: what a step
#: causes, such as the node index reading the rows it changed, may come
#: after the ring converged, and more of it after a short step than a long.
IDLE_CPU = 0.1
#: Seconds a step's costs wait at most for the conductors to be idle.
SETTLE_MOST = 15.0
#: Seconds of each look at the conductors' CPU while waiting for them to be idle.
IDLE_STEP = 0.5


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
        self.etcd = EtcdRequests(args.etcd_url)

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

    def wait_conductors_idle(self, most: float = 60.0) -> float:
        """Until the conductors spent less than :data:`IDLE_CPU` of a core
        over each of two :data:`IDLE_STEP` in a row (at most ``most``
        seconds, none if it is not positive); the seconds waited."""
        started = time.monotonic()
        previous, still = self.sampler.conductor_cpu(), 0
        while still < 2 and time.monotonic() - started < most:
            time.sleep(IDLE_STEP)
            now = self.sampler.conductor_cpu()
            still = still + 1 if now - previous < IDLE_CPU * IDLE_STEP else 0
            previous = now
        return time.monotonic() - started

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

    def meter(self) -> dict[str, Any]:
        """The CPU and etcd counters now, for :meth:`costs_since`."""
        return {
            "conductor": self.sampler.conductor_cpu(),
            "agents": self.sampler.agent_cpu(),
            "servers": servers_cpu(),
            "etcd": self.etcd.sample(),
        }

    def costs_since(self, before: Mapping[str, Any], clients: int) -> dict[str, Any]:
        """What the processes spent since ``before`` (:meth:`meter`): the
        conductors' CPU, each agent process's CPU and their sum, the test
        servers' CPU (PostgreSQL, etcd) and the etcd requests of the fleet
        per client (``clients``: its agents and conductors)."""
        now = self.meter()
        agents = grown(now["agents"], before["agents"])
        return {
            "conductor_cpu_s": now["conductor"] - before["conductor"],
            "agent_cpu_s": sum(agents.values()),
            "agent_cpu_by_process": agents,
            "server_cpu_s": grown(now["servers"], before["servers"]),
            "etcd": requests_between(before["etcd"], now["etcd"], clients),
        }

    def clients(self, agents: int) -> int:
        """The fleet's etcd clients with ``agents`` agents: one per agent and conductor."""
        return agents + sum(1 for p in self.conductors() if p.running())

    def cold(self, names: Sequence[str], alone: Sequence[str] = ()) -> dict[str, Any]:
        """The agents ``names`` started together (``--agents-per-process`` to
        a process, but each of ``alone`` in a process of its own) until the
        ring converged; its cost: conductor, agent and server CPU (all of
        it, and the agents' after the last one served), broker bytes, etcd
        requests, rows read.

        Groups of agents load their code first and start together at a
        gate (:mod:`benchmarks.multi_agent`): the cold start counts from
        there.  Loading is each host's own cost in a real fleet, here ten
        interpreters beside the conductor (``boot_s``, ``boot_cpu_s``:
        its wall time and the agents' CPU, reported apart).
        """
        code = self.args.code
        grouped = [name for name in names if name not in alone]
        gate = self.fleet.workdir / "start-gate"
        gate.unlink(missing_ok=True)
        booted = time.monotonic()
        procs = spawn_agents(self.fleet, grouped, self.args.agents_per_process, code, gate)
        for proc in procs:
            if isinstance(proc, AgentGroup):
                proc.wait_loaded(120)
        boot_s = time.monotonic() - booted
        boot_cpu = self.sampler.agent_cpu()
        marks = self.log_marks()
        before = self.meter()
        start = self.traffic.sample()
        started = self.cold_started = time.monotonic()
        gate.touch()
        procs += [spawn(self.fleet, "compute_agent.cmd.agent", name, code) for name in alone]
        for proc in procs:
            proc.wait_serving(120)
        serving = time.monotonic() - started
        at_serving = self.sampler.agent_cpu()
        done = self.wait_converged(set(names), started)
        # Before the agents' first state reports, a cost of their own.
        settled = self.wait_conductors_idle(
            min(SETTLE_MOST, REPORT_INTERVAL - 2 - (time.monotonic() - started))
        )
        costs = self.costs_since(before, self.clients(len(names)))
        after_serving = grown(self.sampler.agent_cpu(), at_serving)
        rows = self.rows_read()
        traffic = self.traffic.cost(None, start, self.traffic.sample())
        whole = self._whole_cold_start(before, started)
        return {
            "agents": len(names),
            "processes": len(procs),
            "seconds": done["seconds"],
            "off": done["off"],
            "boot_s": boot_s,
            "boot_cpu_s": sum(boot_cpu.values()),
            "settled_s": settled,
            "serving_s": serving,
            **costs,
            "agent_cpu_after_serving_s": sum(after_serving.values()),
            "nodes_owned": _owned(done["nodes"], set(names)),
            "traffic": traffic,
            "whole": whole,
            **rows_summary(rows, names),
            **self.claims_since(marks),
        }

    def _whole_cold_start(self, before: Mapping[str, Any], started: float) -> dict[str, Any]:
        """The cold start with all it causes: until the agents' first state
        reports are done (each carries every node its agent owns, a
        ``report_interval`` after its start) and the conductors are idle.

        The cold start's own costs end when the ring converged, and when the
        conductors are idle after it, but before those reports: at 100
        agents the ring converges seconds before them, with no time left
        to be idle, and the node index's reading of the last claims falls
        outside, or partly inside, as it happens (0.1 to 1.8 s of CPU
        between runs of one code); at 10 agents inside.  Counted to the
        end, it is the same work at every count.  The conductors' CPU of
        the wait, idle, is in it too (about 0.01 s a second)."""
        self._wait_first_reports()
        self.wait_conductors_idle(SETTLE_MOST)
        return {
            "seconds": time.monotonic() - started,
            "conductor_cpu_s": self.sampler.conductor_cpu() - before["conductor"],
            "agent_cpu_s": sum(grown(self.sampler.agent_cpu(), before["agents"]).values()),
        }

    def quiet(self, seconds: float) -> dict[str, Any]:
        """The converged fleet left alone: conductor and agent CPU, broker
        bytes, etcd requests, rows read by the agents and RPC calls served
        by method, per minute, over ``seconds`` once the cold start's
        aftermath is over: 10 s (the passes that follow a convergence), at
        least ``report_interval`` + 5 s after the agents started, and until
        no state report came for two samples in a row (each agent's first
        report, a ``report_interval`` after its start, carries every node
        it owns: a cost of the cold start, per node, not of a quiet minute)."""
        time.sleep(10)
        self._wait_first_reports()
        agents = self.agents()
        before = self.meter()
        rows_before = self.rows_read()
        served_before, cpu_before = self.traffic.served_by_method()
        start = self.traffic.sample()
        time.sleep(seconds)
        costs = self.costs_since(before, self.clients(len(agents)))
        rows = since(self.rows_read(), rows_before)
        moved = octets(start, self.traffic.sample())
        per_min = 60 / seconds
        served_after, cpu_after = self.traffic.served_by_method()
        served = {
            method: (
                (count - served_before.get(method, (0, 0.0))[0]) * per_min,
                (spent - served_before.get(method, (0, 0.0))[1]) * per_min,
            )
            for method, (count, spent) in served_after.items()
        }
        cpu = {
            method: round((spent - cpu_before.get(method, 0.0)) * per_min, 3)
            for method, spent in cpu_after.items()
            if spent > cpu_before.get(method, 0.0)
        }
        etcd = costs["etcd"]
        return {
            "seconds": seconds,
            # Claims or releases meanwhile: the fleet was not quiet (an agent
            # missed its heartbeats on an overloaded machine and re-joined).
            "ownership_calls": round(
                sum(served.get(m, (0.0, 0.0))[0] for m in OWNERSHIP_CALLS) / per_min
            ),
            "conductor_cpu_s_per_min": costs["conductor_cpu_s"] * per_min,
            "agent_cpu_s_per_min": costs["agent_cpu_s"] * per_min,
            "server_cpu_s_per_min": {k: v * per_min for k, v in costs["server_cpu_s"].items()},
            "etcd_per_client_per_min": None if etcd is None else etcd["per_client"] * per_min,
            "etcd": etcd,
            "rows_read_per_min": sum(rows.values()) * per_min,
            "broker_mb_per_min": None if moved is None else moved / 1e6 * per_min,
            "calls_per_min": {m: c for m, (c, _s) in served.items() if c > 0},
            "call_seconds_per_min": {m: s for m, (c, s) in served.items() if c > 0},
            "call_cpu_s_per_min": cpu,
        }

    def _wait_first_reports(self) -> None:
        """Until the agents' first state reports are done: they come a
        ``report_interval`` after the cold start (the default: this benchmark
        runs the agents with it), then until no more come."""
        time.sleep(max(self.cold_started + REPORT_INTERVAL + 5 - time.monotonic(), 0.0))
        self._wait_reports_done()

    def _wait_reports_done(self, step: float = 3.0, most: float = 90.0) -> None:
        """Until the conductors served no ``report_node_states`` over two
        ``step`` samples in a row (at most ``most`` seconds)."""
        deadline = time.monotonic() + most
        previous, still = None, 0
        while time.monotonic() < deadline and still < 2:
            count = self.traffic.served_by_method()[0].get("report_node_states", (0, 0.0))[0]
            still = still + 1 if count == previous else 0
            previous = count
            time.sleep(step)

    def join(self, name: str) -> dict[str, Any]:
        """One more agent, a process of its own, until the ring of M+1
        converged: the moves, and the cost (the joiner's CPU to serve, its
        start-up on an idle host, apart from its CPU after)."""
        before_nodes = read_nodes(self.fleet.db)
        stayed = self.agents()
        quiet = self.traffic.quiet_rate()
        marks = self.log_marks()
        rows_before = self.rows_read()
        before = self.meter()
        start = self.traffic.sample()
        started = time.monotonic()
        # Always a process of its own: the kill -9 that follows is the real thing.
        proc = spawn(self.fleet, "compute_agent.cmd.agent", name, self.args.code)
        proc.wait_serving(120)
        serving = time.monotonic() - started
        startup_cpu = self.sampler.agent_cpu().get(name, 0.0)
        done = self.wait_converged(stayed | {name}, started)
        settled = self.wait_conductors_idle(SETTLE_MOST)
        costs = self.costs_since(before, self.clients(len(stayed) + 1))
        rows = self.rows_read()
        traffic = self.traffic.cost(quiet, start, self.traffic.sample())
        after: Nodes = done["nodes"]
        moved, between = _moves(before_nodes, after, stayed)
        others = rows_summary(since(rows, rows_before), stayed)
        joiner_cpu = costs["agent_cpu_by_process"].get(name, 0.0)
        return {
            "agents_before": len(stayed),
            "seconds": done["seconds"],
            "off": done["off"],
            "serving_s": serving,
            "settled_s": settled,
            "moved": moved,
            "ideal": len(after) / (len(stayed) + 1),
            "moved_between_stayed": between,
            "unowned_after": sum(1 for _g, o, _p in after.values() if o is None),
            **costs,
            "startup_cpu_s": startup_cpu,
            "joiner_cpu_s": joiner_cpu - startup_cpu,
            "nodes_owned": _owned(after, {name}),
            "traffic": traffic,
            "rows_read_joiner": rows.get(name, 0),
            "rows_read_others": others["rows_read_total"],
            "rows_read_others_max": others["rows_read_max"],
            **self.claims_since(marks),
        }

    def _wait_owned(self, name: str, survivors: set[str], started: float) -> dict[str, Any]:
        """After kill -9 of ``name``: until every node is owned by one of
        ``survivors`` (seconds since ``started``), and when none was left
        on ``name``."""
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
        return {"owned_s": owned_s, "victim_s": victim_s, "unowned_end": unowned_end}

    def kill(self, name: str) -> dict[str, Any]:
        victim = self.fleet.procs.get(name)
        if victim is None:  # steps() keeps the victim in a process of its own
            raise RuntimeError(f"{name} shares its process with other agents: no kill -9 of it")
        survivors = self.agents() - {name}
        owned = sum(1 for _g, o, _p in read_nodes(self.fleet.db).values() if o == name)
        quiet = self.traffic.quiet_rate()
        rows_before = self.rows_read()
        before = self.meter()
        start = self.traffic.sample()
        started = time.monotonic()
        victim.kill()
        unowned = sum(1 for _g, o, _p in read_nodes(self.fleet.db).values() if o is None)
        waited = self._wait_owned(name, survivors, started)
        ring_s = self.wait_converged(survivors, started)["seconds"]
        settled = self.wait_conductors_idle(SETTLE_MOST)
        costs = self.costs_since(before, self.clients(len(survivors)))
        rows = rows_summary(since(self.rows_read(), rows_before), survivors)
        traffic = self.traffic.cost(quiet, start, self.traffic.sample())
        return {
            "traffic": traffic,
            **costs,
            "survivors": len(survivors),
            "rows_read_survivors": rows["rows_read_total"],
            "rows_read_survivors_max": rows["rows_read_max"],
            "victim": name,
            "nodes_owned": owned,
            "unowned_before": unowned,
            **waited,
            "ring_s": ring_s,
            "settled_s": settled,
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


def _owned(nodes: Nodes, hosts: set[str]) -> int:
    """How many of ``nodes`` one of ``hosts`` owns."""
    return sum(1 for _g, owner, _p in nodes.values() if owner in hosts)


def _moves(before: Nodes, after: Nodes, stayed: set[str]) -> tuple[int, int]:
    """Nodes whose owner changed, and those that moved between two of ``stayed``."""
    moved = between = 0
    for uuid, (_g, owner, _p) in after.items():
        old = before.get(uuid, ("", None, False))[1]
        if old != owner:
            moved += 1
            if old in stayed and owner in stayed:
                between += 1
    return moved, between
