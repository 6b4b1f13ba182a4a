# SPDX-License-Identifier: Apache-2.0
"""The embedded fleet: one conductor and N compute agents as threads of one process.

Everything a production fleet has, with the embedded backends instead of
servers: the conductors' database is SQLite in a temporary directory, RPC
goes over oslo.messaging's ``kombu+memory:////`` (one in-process broker that
every transport of the process shares), membership is a tooz ``file://``
group in the same directory (or tooz's ``redis://`` driver on fakeredis in
this process, :mod:`.fake_redis`, with ``backend="redis"``), and the agents
use the ``simulated`` driver, all of them appending to one action log there.

Each service gets its own ``cfg.ConfigOpts`` (no config file is read), so
several agents with different ``host`` names run side by side; the services
keep no mutable state at module level.  :meth:`EmbeddedFleet.close` stops
every service, waits for their threads and removes the directory.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
import threading
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from oslo_config import cfg

from compute_agent.service import AgentService
from conductor.common import conf as common_conf
from conductor.common import rpc
from conductor.db import migration
from conductor.db.engine import Database
from conductor.rpcapi import ConductorAPI
from conductor.service import ConductorService
from fleet_demo.fake_redis import in_process_redis
from fleet_demo.options import FleetSettings

__all__ = ["EmbeddedFleet", "FleetError", "FleetSettings"]

LOG = logging.getLogger(__name__)

#: The in-process broker: every transport of this process shares its queues.
TRANSPORT_URL = "kombu+memory:////"
#: Seconds a service may take to start serving.
START_TIMEOUT = 30.0
#: Seconds a service thread may take to return once stopped.
STOP_TIMEOUT = 30.0


class FleetError(Exception):
    """The embedded fleet could not start or stop a service."""


class _Service(Protocol):
    def run(self) -> None: ...

    def wait_started(self, timeout: float) -> bool: ...


class _Runner:
    """A service's :meth:`run` in its own thread, with its failure kept."""

    def __init__(self, service: _Service, name: str) -> None:
        self.service = service
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        try:
            self.service.run()
        except BaseException as exc:  # reported by start() or close()
            self.failure = exc
            LOG.exception("Service thread %s failed", self.thread.name)

    def start(self) -> None:
        self.thread.start()
        started = self.service.wait_started(START_TIMEOUT)
        if self.failure is not None:
            raise FleetError(f"{self.thread.name} failed to start: {self.failure}")
        if not started:
            raise FleetError(f"{self.thread.name} did not start within {START_TIMEOUT:g} s")


class EmbeddedFleet:
    """A conductor and compute agents in this process; use as a context manager."""

    def __init__(self, settings: FleetSettings) -> None:
        self.settings = settings
        self._backend = contextlib.ExitStack()
        if settings.backend == "redis":
            # Raises MissingExtra (the demo-redis extra) before anything starts.
            self._backend.enter_context(in_process_redis())
        self.workdir = Path(tempfile.mkdtemp(prefix="ringfleet-demo-"))
        self.action_log = self.workdir / "actions.jsonl"
        #: the simulated machines, shared by the agents: what reached each one
        self.node_store = self.workdir / "nodes.sqlite"
        self._conductor: _Runner | None = None
        self._agents: dict[str, _Runner] = {}
        self._crashed: set[str] = set()
        self._client_transport: Any = None
        self._client: ConductorAPI | None = None

    def __enter__(self) -> EmbeddedFleet:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- configuration -------------------------------------------------------------

    @property
    def coordination_url(self) -> str:
        if self.settings.backend == "redis":
            # The host is never reached: every tooz Redis client of this
            # process talks to the in-process fakeredis server.
            return f"redis://in-process:6379?membership_timeout={self.settings.ttl:g}"
        return f"file://{self.workdir / 'coordination'}?timeout={self.settings.ttl:g}"

    def _conf(self, host: str) -> cfg.ConfigOpts:
        """A private configuration for one service (nothing read from files)."""
        settings = self.settings
        conf = cfg.ConfigOpts()
        rpc.register_opts(conf)
        common_conf.register_opts(conf, common_conf.CONDUCTOR, common_conf.COMPUTE_AGENT)
        overrides: dict[str | None, dict[str, Any]] = {
            None: {"host": host, "transport_url": TRANSPORT_URL},
            "database": {"connection": f"sqlite:///{self.workdir / 'ringfleet.db'}"},
            "coordination": {"backend_url": self.coordination_url, "watch_interval": 0.2},
            "conductor": {
                "rehome_grace": settings.rehome_grace,
                "accept_timeout": 5.0,
                "workers": 4,
            },
            # A node a build failed on must be seen free again soon.
            "scheduler": {"index_refresh_interval": 0.2},
            "compute_agent": {
                "reconcile_interval": 0.5,
                # The demo's checks wait seconds, not a quiet agent's backoff.
                "quiet_reconcile_interval": 0.5,
                "report_interval": 5.0,
                "conductor_timeout": 10.0,
                "graceful_timeout": 5.0,
            },
            "simulated_driver": {
                "action_log": str(self.action_log),
                # One simulated machine room for the agents: a node torn
                # down by one is clean when another acquires it.
                "node_store": str(self.node_store),
                "step_duration": settings.step_duration,
                "clean_duration": 0.0,
                "failure_rate": settings.failure_rate,
                "seed": settings.seed,
            },
        }
        for group, values in overrides.items():
            for name, value in values.items():
                conf.set_override(name, value, group=group)
        return conf

    # -- services ------------------------------------------------------------------

    def start_conductor(self, host: str = "conductor-1") -> None:
        """Create the schema and start the conductor; return once it serves."""
        conf = self._conf(host)
        db = Database(conf.database.connection)
        try:
            migration.upgrade(db)
        finally:
            db.dispose()
        runner = _Runner(ConductorService(conf), f"conductor-{host}")
        self._conductor = runner
        runner.start()
        LOG.info("Embedded conductor %s serving", host)

    def start_agent(self, host: str) -> AgentService:
        """Start one compute agent named ``host``; return once it serves."""
        if host in self._agents:
            raise FleetError(f"agent {host} was already started")
        service = AgentService(self._conf(host))
        runner = _Runner(service, f"agent-{host}")
        self._agents[host] = runner
        runner.start()
        LOG.info("Embedded agent %s serving", host)
        return service

    def crash_agent(self, host: str) -> None:
        """Crash agent ``host``: no leave, no RPC, its lease left to expire."""
        runner = self._agents[host]
        assert isinstance(runner.service, AgentService)
        runner.service.crash()
        runner.thread.join(STOP_TIMEOUT)
        self._crashed.add(host)

    def agents(self) -> dict[str, AgentService]:
        """Every agent started, crashed ones included, in start order."""
        found: dict[str, AgentService] = {}
        for host, runner in self._agents.items():
            assert isinstance(runner.service, AgentService)
            found[host] = runner.service
        return found

    def live_agents(self) -> dict[str, AgentService]:
        return {h: a for h, a in self.agents().items() if h not in self._crashed}

    def crashed(self) -> frozenset[str]:
        return frozenset(self._crashed)

    def client(self, timeout: float = 30.0) -> ConductorAPI:
        """The conductor RPC client (one transport for the fleet's lifetime)."""
        if self._client is None:
            conf = cfg.ConfigOpts()
            rpc.register_opts(conf)
            conf.set_override("transport_url", TRANSPORT_URL)
            self._client_transport = rpc.get_transport(conf)
            self._client = ConductorAPI(self._client_transport, timeout=timeout)
        return self._client

    # -- stop ----------------------------------------------------------------------

    def close(self) -> None:
        """Stop agents, then the conductor; wait for their threads; remove the files.

        Raises :class:`FleetError` if a service thread did not return (the
        directory is removed anyway).
        """
        stuck: list[str] = []
        try:
            # Each graceful stop waits a poll of its RPC server: stop the
            # agents side by side, not one after the other.
            stoppers = [
                threading.Thread(target=runner.service.terminate, name=f"stop-{host}")
                for host, runner in self._agents.items()
                if host not in self._crashed and isinstance(runner.service, AgentService)
            ]
            for stopper in stoppers:
                stopper.start()
            for stopper in stoppers:
                stopper.join(STOP_TIMEOUT)
            for runner in self._agents.values():
                runner.thread.join(STOP_TIMEOUT)
                if runner.thread.is_alive():
                    stuck.append(runner.thread.name)
            if self._conductor is not None:
                assert isinstance(self._conductor.service, ConductorService)
                self._conductor.service.terminate()
                self._conductor.thread.join(STOP_TIMEOUT)
                if self._conductor.thread.is_alive():
                    stuck.append(self._conductor.thread.name)
            if self._client_transport is not None:
                self._client_transport.cleanup()
                self._client_transport = self._client = None
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self._backend.close()
        if stuck:
            raise FleetError(f"service threads did not stop: {', '.join(stuck)}")
