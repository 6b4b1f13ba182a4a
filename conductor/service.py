# SPDX-License-Identifier: Apache-2.0
"""The conductor service: RPC server, fleet view, scheduler and build workers.

Shaped like a cotyledon service: :meth:`run` starts everything and blocks
until :meth:`terminate`; :meth:`reload` re-reads the mutable options.  The
graceful stop is ordered: stop taking RPC requests, let the workers finish
what they hold (anything still queued is stored and resumed by the next
conductor), stop watching the group, close the database.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from oslo_config import cfg

from compute_agent.rpcapi import ComputeAPI
from conductor.common import broker_outage, rpc, systemd
from conductor.common.conf.metrics import CONDUCTOR_PORT
from conductor.common.coordination import membership_from_conf
from conductor.common.exception import ConfigurationError, DatabaseUnavailable, ServiceUnavailable
from conductor.common.metrics import MetricsServer
from conductor.common.stop_steps import StopSteps
from conductor.db import migration, quotas
from conductor.db.engine import Database, database_from_conf
from conductor.endpoints.agents import AgentsEndpoint
from conductor.endpoints.fleet import FleetEndpoint, problem_counts
from conductor.endpoints.instance_labels import InstanceLabelsEndpoint
from conductor.endpoints.instances import InstancesEndpoint
from conductor.endpoints.inventory import InventoryEndpoint
from conductor.endpoints.keypairs import KeyPairsEndpoint
from conductor.endpoints.quotas import QuotasEndpoint
from conductor.fleet_view import FleetView
from conductor.group_hints import GroupHints
from conductor.inventory_hints import InventoryHints
from conductor.ironic_sync import IronicInventorySync
from conductor.lifecycle import BuildLifecycle
from conductor.metrics import ConductorMetrics
from conductor.notifications import Notifier
from conductor.peers import ConductorPeers
from conductor.power_sync import InstancePowerSync, report_after
from conductor.scheduler.scheduler import Scheduler
from hashring.membership import Membership

__all__ = ["ConductorService"]

LOG = logging.getLogger(__name__)

#: Seconds each step of a stop may take at most (within ``graceful_timeout``):
#: 28 s in all; when the broker is frozen the steps that wait on it are cut
#: short and the others still run.
_STEP_S = {
    "rpc server": 8.0,
    "build workers": 8.0,
    "notifier": 3.0,
    "membership": 3.0,
    "transport": 3.0,
    "database": 3.0,
}


class ConductorService:
    """One conductor process (several run active-active on one database)."""

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self.conf = conf
        self._stopped = threading.Event()
        self._started = threading.Event()
        self.db: Database | None = None
        self.fleet: FleetView | None = None
        self._server: Any = None
        self._transport: Any = None
        self._builds: BuildLifecycle | None = None
        self._membership: Membership | None = None
        self._peers: ConductorPeers | None = None
        self._ironic_sync: IronicInventorySync | None = None
        self._hints: InventoryHints | None = None
        self._group_hints: GroupHints | None = None
        self._power_sync: InstancePowerSync | None = None
        self._notifier = Notifier.disabled()
        self.metrics = ConductorMetrics(conf.host)
        self.metrics_server = MetricsServer(self.metrics.registry)
        # Set once the RPC server has started (it waits for the broker).
        self._serving = threading.Event()
        #: What a stop is doing now (the runner names it past the deadline).
        self._stop_steps: StopSteps | None = None
        self._starting = systemd.StartupWait()

    def run(self) -> None:
        """Start serving; return after :meth:`terminate`."""
        conf = self.conf
        self.metrics_server.start(conf, CONDUCTOR_PORT, conf.host)
        # systemd waits as long as this start waits for its dependencies.
        self._starting.start()
        self.db = db = database_from_conf(conf)
        # Started before its database: the database's one WARNING names it;
        # the conductor serves nothing (and systemd sees no READY) until then.
        if not db.wait_reachable(self._stopped):
            return
        _require_schema_head(db)
        # The records this conductor puts in flight name it as their carrier.
        db.carrier = conf.host
        fleet, membership = self._fleet_view(db)
        scheduler = Scheduler.from_conf(db, conf, observe_read=self.metrics.node_index_read)
        self._transport = rpc.get_transport(conf)
        # Here, not at import: after the runner's fork and with the config read.
        self._notifier = Notifier.from_conf(conf, db)
        compute = ComputeAPI(
            self._transport,
            observe=self.metrics.rpc_made,
            version_cap=conf.upgrade_levels.compute,
        )
        self._hints = InventoryHints(compute)
        self._group_hints = GroupHints(compute)
        fleet.add_listener(self._group_hints.on_view)
        self._builds = builds = self._build_lifecycle(db, scheduler, fleet, membership, compute)
        self._peers = self._conductor_peers(db, builds)
        # The sync hands the orphan claims it finds in Ironic to their
        # nodes' owners through the router (its on-demand passes too).
        self._power_sync = InstancePowerSync(db, self._notifier)
        self._ironic_sync = IronicInventorySync.from_conf(
            db,
            conf,
            clean_orphan=builds.clean_orphan,
            power_sync=self._power_sync,
            notifier=self._notifier,
        )
        if self._ironic_sync is not None:
            self._ironic_sync.on_change = self._hints.changed
        self.metrics.watch_fleet(
            lambda: problem_counts(
                db,
                fleet,
                float(conf.conductor.stuck_after),
                power_mismatch_after=self._power_mismatch_after(),
                conductors=self._peers.live() if self._peers else None,
            ),
            lambda: db.reachable,
        )
        self._server = rpc.get_server(
            self._transport,
            rpc.CONDUCTOR_TOPIC,
            conf.host,
            self._endpoints(db, fleet, builds, compute),
            observe=self.metrics.rpc_served,
            observe_cpu=self.metrics.rpc_served_cpu,
        )
        self._join_group(membership)
        self._start_serving(scheduler, builds)
        self._stopped.wait()

    def _fleet_view(self, db: Database) -> tuple[FleetView, Membership]:
        """The fleet view, following a membership of the group (not started yet)."""
        conf = self.conf
        self.fleet = fleet = FleetView(db)
        self._membership = membership = membership_from_conf(
            conf,
            join=False,
            member_id=f"conductor.{conf.host}",
            on_change=fleet.on_change,
            on_state_change=lambda _old, new: self.metrics.membership_state(new),
        )
        fleet.attach(membership)
        fleet.add_listener(self.metrics.ring_members)
        return fleet, membership

    def _conductor_peers(self, db: Database, builds: BuildLifecycle) -> ConductorPeers:
        """This conductor's membership of the conductors' group (not started yet)."""
        conf = self.conf
        peers: ConductorPeers | None = None
        membership = membership_from_conf(
            conf,
            group=conf.coordination.conductor_group or f"{conf.coordination.group}-conductors",
            on_change=lambda view: peers.on_change(view) if peers else None,
            # The same etcd as the agents' group it watches: one outage, said once.
            outage=self._membership.outage if self._membership else None,
        )
        peers = ConductorPeers(db, membership, redrive=builds.redrive, repower=builds.repower)
        return peers

    def _build_lifecycle(
        self,
        db: Database,
        scheduler: Scheduler,
        fleet: FleetView,
        membership: Membership,
        compute: ComputeAPI,
    ) -> BuildLifecycle:
        """The builds' workers, as ``[conductor]`` configures them (not started yet)."""
        conf = self.conf
        return BuildLifecycle(
            db,
            scheduler,
            fleet,
            workers=conf.conductor.workers,
            compute=compute,
            accept_timeout=conf.conductor.accept_timeout,
            accept_senders=conf.conductor.accept_senders,
            action_timeout=conf.conductor.action_timeout,
            max_attempts=lambda: int(conf.conductor.max_attempts),
            # A node without a live owner gets one within the TTL (a peer
            # takes it over), or once a restart hold ends; builds that fit
            # only such nodes wait that long before NoValidNode.
            owner_wait=lambda: (
                membership.ttl
                + max(float(conf.conductor.rehome_grace), float(conf.conductor.restart_grace))
            ),
            metrics=self.metrics,
            notifier=self._notifier,
        )

    def _quota_defaults(self) -> quotas.Defaults:
        """The ``[quota]`` defaults as they are now (the options are mutable)."""
        quota = self.conf.quota
        return quotas.Defaults(
            instances=int(quota.instances),
            nodes=int(quota.nodes),
            resource_class_nodes={
                str(k): int(v) for k, v in (quota.resource_class_nodes or {}).items()
            },
            key_pairs=int(quota.key_pairs),
        )

    def _endpoints(
        self, db: Database, fleet: FleetView, builds: BuildLifecycle, compute: ComputeAPI
    ) -> list[object]:
        """What the conductor's RPC server serves."""
        conf, notifier = self.conf, self._notifier
        return [
            InventoryEndpoint(
                db, fleet, self._ironic_sync, power=builds, notifier=notifier, hints=self._hints
            ),
            InstancesEndpoint(db, builds, quota=self._quota_defaults, notifier=notifier),
            QuotasEndpoint(db, self._quota_defaults, notifier=notifier),
            KeyPairsEndpoint(db, self._quota_defaults),
            InstanceLabelsEndpoint(db),
            FleetEndpoint(
                db,
                fleet,
                conf.host,
                compute,
                stuck_after=lambda: float(conf.conductor.stuck_after),
                power_mismatch_after=self._power_mismatch_after,
                conductors=lambda: self._peers.live() if self._peers else None,
            ),
            AgentsEndpoint(
                db,
                fleet,
                lambda: float(conf.conductor.rehome_grace),
                builds=builds,
                restart_grace=lambda: float(conf.conductor.restart_grace),
                notifier=notifier,
                hints=self._hints,
            ),
        ]

    def _join_group(self, membership: Membership) -> None:
        """Start the membership and wait up to its TTL for the coordination
        backend: the conductor serves anyway (claims wait for it)."""
        membership.start()
        if not membership.wait_connected(timeout=membership.ttl):
            # When the backend refuses, the membership said so already (one
            # WARNING naming it): this is no second one.
            LOG.log(
                logging.INFO if membership.backend_failing else logging.WARNING,
                "Conductor %s: coordination backend not reachable yet; serving anyway "
                "(claims wait for it)",
                self.conf.host,
            )
        self.metrics.membership_state(membership.state)

    def _start_serving(self, scheduler: Scheduler, builds: BuildLifecycle) -> None:
        """Start the threads and the RPC server, then tell systemd the conductor is ready."""
        conf = self.conf
        # The node index is built and kept fresh here, not by the builds.
        threading.Thread(
            target=scheduler.keep_fresh, args=(self._stopped,), name="node-index", daemon=True
        ).start()
        # Only what this conductor carries: its peers' work is theirs.
        builds.start(resume=False)
        if self._peers is not None:
            self._peers.start()
        self._server.start()
        broker_outage.reachable()  # start() waited for it
        self._serving.set()
        sweeper = threading.Thread(target=self._sweep_loop, name="build-sweeper", daemon=True)
        sweeper.start()
        if self._ironic_sync is not None and conf.ironic.sync_interval:
            threading.Thread(target=self._ironic_sync_loop, name="ironic-sync", daemon=True).start()
        if conf.conductor.power_sync_interval:
            threading.Thread(target=self._power_sync_loop, name="power-sync", daemon=True).start()
        self._started.set()
        LOG.info("Conductor %s serving topic %s", conf.host, rpc.CONDUCTOR_TOPIC)
        self._starting.done()
        systemd.notify("READY=1", f"STATUS=serving as {conf.host}")

    def _ironic_sync_loop(self) -> None:
        assert self._ironic_sync is not None
        while True:
            try:
                self._ironic_sync.run()
            except ServiceUnavailable as exc:  # Ironic or the database: logged once there
                LOG.debug("Ironic sync skipped: %s", exc)
            except Exception:  # the next pass tries again
                LOG.exception("Ironic sync failed")
            if self._stopped.wait(float(self.conf.ironic.sync_interval)):
                return

    def _power_sync_loop(self) -> None:
        assert self._power_sync is not None
        # The option is mutable: read at each pass (0 pauses the passes).
        while not self._stopped.wait(float(self.conf.conductor.power_sync_interval) or 60.0):
            interval = float(self.conf.conductor.power_sync_interval)
            if not interval:
                continue
            try:
                self._power_sync.run(interval)
            except DatabaseUnavailable:  # logged once by the database; next pass
                LOG.debug("Power sync skipped: database unreachable")
            except Exception:  # the next pass tries again
                LOG.exception("Power sync failed")

    def _power_mismatch_after(self) -> float:
        """Seconds a power mismatch lasts before fleet check reports it (options
        read at each check: they are mutable)."""
        conf = self.conf
        return report_after(
            float(conf.conductor.power_sync_interval),
            float(conf.ironic.sync_interval) if self._ironic_sync is not None else 0.0,
            float(conf.conductor.stuck_after),
        )

    def _sweep_loop(self) -> None:
        while True:
            timeout = float(self.conf.conductor.build_timeout)
            if self._stopped.wait(min(30.0, timeout / 4)):
                return
            try:
                assert self._builds is not None
                self._builds.sweep(timeout)
            except DatabaseUnavailable:  # logged once by the database; next sweep
                LOG.debug("Build sweep skipped: database unreachable")
            except Exception:  # the next sweep tries again
                LOG.exception("Build sweep failed")

    def wait_started(self, timeout: float) -> bool:
        return self._started.wait(timeout)

    def stop_timeout(self) -> float:
        return float(self.conf.conductor.graceful_timeout)

    def terminate(self) -> None:
        """Graceful stop, in order, each step within its own deadline (safe to
        call from another thread, once): a broker or database that does not
        answer costs the step that waits on it, not the whole stop."""
        self._starting.done()
        systemd.notify("STOPPING=1")
        LOG.info("Conductor %s stopping", self.conf.host)
        steps = StopSteps(f"Conductor {self.conf.host}", self.stop_timeout())
        self._stop_steps = steps
        server = self._server
        if server is not None and self._serving.is_set():
            # Not before it started: oslo.messaging's stop would wait for a
            # start that waits for the broker.
            steps.run(
                "stopping the RPC server (the requests in flight)",
                lambda: rpc.stop_server(server),
                _STEP_S["rpc server"],
            )
        builds = self._builds
        if builds is not None:
            # Then the accepts already handed to the senders are sent.
            limit = _STEP_S["build workers"]
            steps.run("stopping the build workers", lambda: builds.stop(limit / 2), limit)
        peers = self._peers
        if peers is not None:
            steps.run(
                "handing the work it carries to its peers, leaving the conductors' group",
                peers.stop,
                _STEP_S["membership"],
            )
        if self._hints is not None:
            self._hints.stop()
        if self._group_hints is not None:
            self._group_hints.stop()
        steps.run("sending the notifications queued", self._notifier.close, _STEP_S["notifier"])
        membership = self._membership
        if membership is not None:
            steps.run(
                "leaving the coordination group",
                lambda: membership.stop(leave=False),
                _STEP_S["membership"],
            )
        transport = self._transport
        if transport is not None:
            steps.run(
                "closing the connection to the broker",
                lambda: rpc.close_transport(transport),
                _STEP_S["transport"],
            )
        db = self.db
        if db is not None:
            steps.run("closing the database connections", db.dispose, _STEP_S["database"])
        self.metrics_server.stop()
        self._stopped.set()
        LOG.info("Conductor %s stopped", self.conf.host)

    def threads_left(self) -> int:
        """The stop steps cut short: their threads (an RPC call that does not
        end, a connection that does not close) are not joined at the exit."""
        steps = self._stop_steps
        return 0 if steps is None else len(steps.cut)

    @property
    def stop_step(self) -> str:
        """What the stop is doing now (the runner names it if its deadline passes)."""
        steps = self._stop_steps
        return "not stopping" if steps is None else steps.current

    def reload(self) -> None:
        """SIGHUP: re-read the config files; mutable options apply at once."""
        systemd.notify("RELOADING=1")
        self.conf.mutate_config_files()
        LOG.info("Conductor %s reloaded its configuration", self.conf.host)
        systemd.notify("READY=1")


def _require_schema_head(db: Database) -> None:
    """:raises ConfigurationError: the database's schema is not the one this conductor needs"""
    current, head = migration.current_version(db), migration.head_version()
    if current != head:
        raise ConfigurationError(
            "database",
            "connection",
            f"schema is at {current or 'nothing'}, this conductor needs {head}: "
            "run ringfleet-dbsync upgrade",
        )
