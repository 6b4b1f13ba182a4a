# SPDX-License-Identifier: Apache-2.0
"""The scale benchmark's processes: conductors and agents started from this
checkout or another (``--code``), K agents to a process
(:mod:`benchmarks.multi_agent`), and what they cost: RSS and CPU time per
process (psutil), and the CPU time of the test servers' PostgreSQL and etcd.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil

from benchmarks.multi_agent import LOADED
from tests.functional.fleet_harness import Fleet
from tests.harness import ServiceProcess
from tests.harness.process import REPO, SERVING

__all__ = [
    "MULTI_AGENT",
    "AgentGroup",
    "Sampler",
    "grown",
    "hosts_of",
    "servers_cpu",
    "spawn",
    "spawn_agents",
]

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
MULTI_AGENT = Path(__file__).resolve().parents[1] / "multi_agent.py"


class AgentGroup(_CodeProcess):
    """Several agents in one process (:mod:`benchmarks.multi_agent`): one log,
    each agent's lines named by its host; with ``gate``, started once that
    file exists (its ``--start-gate``)."""

    def __init__(
        self,
        name: str,
        hosts: Sequence[str],
        config: Path,
        log_file: Path,
        code: Path | None,
        gate: Path | None = None,
    ) -> None:
        super().__init__("compute_agent.multi_agent", name, config, log_file, code)
        self.hosts = list(hosts)
        self.gate = gate

    def start(self) -> ServiceProcess:
        root = self.code or REPO
        argv = [sys.executable, str(MULTI_AGENT), "--config-file", str(self.config)]
        for host in self.hosts:
            argv += ["--host", host]
        if self.gate is not None:
            argv += ["--start-gate", str(self.gate)]
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

    def wait_loaded(self, timeout: float = 120) -> None:
        """Until the group waits at its start gate, its code loaded."""
        self.wait_log(LOADED, timeout)


def hosts_of(proc: ServiceProcess) -> list[str]:
    """The agents a process runs: a group's hosts, or the process's own name."""
    return list(proc.hosts) if isinstance(proc, AgentGroup) else [proc.name]


def spawn_agents(
    fleet: Fleet,
    names: Sequence[str],
    per_process: int,
    code: Path | None,
    gate: Path | None = None,
) -> list[ServiceProcess]:
    """The agents ``names``, ``per_process`` to a process (1: each its own
    ``compute_agent.cmd.agent``, as before, never gated); not waited for.
    ``gate``: every group starts its agents once that file exists."""
    if per_process <= 1:
        return [spawn(fleet, "compute_agent.cmd.agent", name, code) for name in names]
    procs: list[ServiceProcess] = []
    for start in range(0, len(names), per_process):
        hosts = names[start : start + per_process]
        if len(hosts) == 1 and gate is None:
            procs.append(spawn(fleet, "compute_agent.cmd.agent", hosts[0], code))
            continue
        name = f"{hosts[0]}..{hosts[-1]}"
        config = fleet.workdir / f"{name}.conf"
        log_file = fleet.workdir / f"{name}.log"
        # The [DEFAULT] host is each agent's own (set by the launcher); the
        # file's is only what oslo.config checks at parse time.
        config.write_text(f"[DEFAULT]\nhost = {hosts[0]}\nlog_file = {log_file}\n{fleet.common}")
        proc = AgentGroup(name, hosts, config, log_file, code, gate)
        proc.start()
        fleet.procs[name] = proc
        procs.append(proc)
    return procs


class Sampler:
    """The RSS per role (largest now and largest seen) and the CPU time of
    each conductor and each agent process, from /proc (psutil).

    Agents are kept apart by how they run: ``agent`` is the largest
    process of one agent; for K agents in one process (:class:`AgentGroup`)
    ``agent_share`` is the largest such process's RSS / K and
    ``agent_group`` its RSS.  A process's CPU time is its threads' user +
    system time; a process that is gone (killed) keeps the time last seen.
    """

    ROLES = ("conductor", "agent", "agent_share", "agent_group")

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.max_rss = dict.fromkeys(self.ROLES, 0)
        self.rss_now = dict.fromkeys(self.ROLES, 0)  # at the last sample
        self._cpu: dict[str, float] = {}  # conductor name -> CPU seconds last seen
        self._agent_cpu: dict[str, float] = {}  # agent process name -> CPU seconds last seen

    def sample(self) -> None:
        now = dict.fromkeys(self.ROLES, 0)
        for name, proc in list(self.fleet.procs.items()):
            if proc.proc is None or proc.proc.poll() is not None:
                continue
            conductor = proc.module.startswith("conductor")
            with contextlib.suppress(psutil.Error):
                process = psutil.Process(proc.proc.pid)
                rss = process.memory_info().rss
                times = process.cpu_times()
                if conductor:
                    now["conductor"] = max(now["conductor"], rss)
                    self._cpu[name] = times.user + times.system
                    continue
                self._agent_cpu[name] = times.user + times.system
                if isinstance(proc, AgentGroup):
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

    def agent_cpu(self) -> dict[str, float]:
        """Agent process name -> its CPU seconds so far (a killed one: as last seen)."""
        self.sample()
        return dict(self._agent_cpu)


#: (server, the variable of tools/with-test-servers.sh that holds its PID)
SERVER_PIDS = (("postgres", "RINGFLEET_TEST_PG_PID"), ("etcd", "RINGFLEET_TEST_ETCD_PID"))


def _server_pid(server: str, variable: str) -> int | None:
    """The server's current PID: asked of ``RINGFLEET_TEST_CTL`` (a test run
    before may have restarted it), else ``variable`` as the servers started."""
    ctl = os.environ.get("RINGFLEET_TEST_CTL")
    if ctl:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            done = subprocess.run(
                [ctl, "pid", server], capture_output=True, text=True, timeout=30, check=True
            )
            if done.stdout.strip().isdigit():
                return int(done.stdout.strip())
    pid = os.environ.get(variable, "")
    return int(pid) if pid.isdigit() else None


def servers_cpu() -> dict[str, float]:
    """CPU seconds so far of the test servers' PostgreSQL and etcd (their
    PIDs from ``tools/with-test-servers.sh``; a server whose PID is not
    known: left out).  PostgreSQL is a process per connection: the
    postmaster's own time, its children's that ended (``children_user``,
    ``children_system``) and the live ones'."""
    found: dict[str, float] = {}
    for server, variable in SERVER_PIDS:
        pid = _server_pid(server, variable)
        if pid is None:
            continue
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(pid)
            times = process.cpu_times()
            total = times.user + times.system + times.children_user + times.children_system
            for child in process.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    child_times = child.cpu_times()
                    total += child_times.user + child_times.system
            found[server] = total
    return found


def grown(now: Mapping[str, float], before: Mapping[str, float]) -> dict[str, float]:
    """Per key, the growth of a CPU counter since ``before`` (a new key: all of it)."""
    return {key: value - before.get(key, 0.0) for key, value in now.items()}
