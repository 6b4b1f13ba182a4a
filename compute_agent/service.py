# SPDX-License-Identifier: Apache-2.0
"""The compute agent service: membership, ownership, RPC endpoint, driver.

Shaped like a cotyledon service: :meth:`run` blocks until :meth:`terminate`;
:meth:`reload` re-reads mutable options.  The graceful stop (SIGTERM) keeps
pins, because a restart is expected: stop taking work, let in-flight
deployments finish (up to ``graceful_timeout``), leave the group.  The
unpinned nodes then move to the other agents at once; the pinned ones wait
``rehome_grace`` for this host to come back.  :meth:`drain` instead hands
every node, pins included, to its ring successor before leaving.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from oslo_config import cfg

from compute_agent.actions import NodeActions
from compute_agent.drivers.base import ActionContext, load_driver
from compute_agent.endpoints import ComputeEndpoint
from compute_agent.metrics import AgentMetrics
from compute_agent.ownership import OwnershipManager
from compute_agent.placement_report import PlacementReporter
from compute_agent.reconcile_loop import QuietPasses, Reconciler
from compute_agent.reporting import ResultReporter
from compute_agent.rpcapi import API_VERSION as COMPUTE_API_VERSION
from compute_agent.serving import ServingCheck
from compute_agent.state_reports import StateReports, StateSender
from conductor.common import broker_outage, rpc, systemd
from conductor.common.conf import default as default_conf
from conductor.common.conf import placement as placement_conf
from conductor.common.conf.metrics import AGENT_PORT
from conductor.common.coordination import membership_from_conf
from conductor.common.exception import IdentityTaken, RingfleetError, first_line
from conductor.common.metrics import MetricsServer
from conductor.common.placement.client import PlacementClient
from conductor.common.stop_steps import StopSteps
from conductor.rpcapi import ConductorAPI
from hashring.membership import Membership, MembershipView, State

__all__ = ["AgentService"]

LOG = logging.getLogger(__name__)

#: Seconds a stop may take beyond graceful_timeout (the wait for deployments):
#: deliver the results, ask for the restart hold, leave the group.
STOP_MARGIN = 20.0

#: Of STOP_MARGIN, the seconds kept for leaving the group and closing the
#: connection to the broker (rpc.CLOSE_TIMEOUT at most).
_LEAVE_S = 8.0

#: Seconds each other step of a stop may take at most (the RPC server's
#: stop, the reconciler's threads, the restart hold; twice that for the
#: results): a frozen broker costs each of them this much, not the whole
#: budget, so an idle agent stops in about 25 s at most.
_STEP_S = 5.0


class AgentService(Reconciler):
    """One compute agent process."""

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self.conf = conf
        self.host: str = conf.host
        self._stopped = threading.Event()
        self._started = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self._server: Any = None
        self._transport: Any = None
        self._conductor: ConductorAPI | None = None
        self.membership: Any = None  # a Membership once run() joined
        self.ownership: OwnershipManager | None = None
        self.actions: NodeActions | None = None
        self._reporter: ResultReporter | None = None
        self.placement: PlacementReporter | None = None
        # Since when (monotonic) state reports fail: one WARNING per outage.
        self._terminating = threading.Lock()
        # Why run() must fail once stopped (another process took our host).
        self._fatal: RingfleetError | None = None
        self._init_reconciler()
        self.metrics = AgentMetrics(self.host)
        self.metrics_server = MetricsServer(self.metrics.registry)
        # Set once the RPC server has started (it waits for the broker).
        self._serving = threading.Event()
        #: What a stop is doing now (the runner names it past the deadline).
        self._stop_steps: StopSteps | None = None
        self._serving_check: ServingCheck | None = None
        self._starting = systemd.StartupWait()

    # -- lifecycle -----------------------------------------------------------------

    def run(self) -> None:
        """Start the agent, step by step, then serve until :meth:`terminate`."""
        conf = self.conf
        self.metrics_server.start(conf, AGENT_PORT, self.host)
        # systemd waits as long as this start waits for the broker and etcd.
        self._starting.start()
        self._transport = rpc.get_transport(conf)
        conductor = ConductorAPI(
            self._transport,
            timeout=conf.compute_agent.conductor_timeout,
            observe=self.metrics.rpc_made,
            version_cap=conf.upgrade_levels.conductor,
        )
        driver = load_driver(conf.compute_agent.driver, conf, self.host)
        self.membership = self._new_membership()
        self.ownership = self._new_ownership(conductor)
        self._reporter = ResultReporter(self.host, conductor)
        self._reporter.start()
        self.placement = self._new_placement(conductor)
        self.actions = NodeActions(
            self.host,
            driver,
            self.ownership,
            self._reporter,
            suspend_wait=self.membership.ttl,
        )
        self._driver, self._conductor = driver, conductor
        self._serve()
        self._join()
        self._start_loops()
        self._started.set()
        LOG.info(
            "Agent %s serving topic %s (groups: %s, driver %s)",
            self.host,
            rpc.COMPUTE_TOPIC,
            ", ".join(conf.compute_agent.groups) or "all",
            conf.compute_agent.driver,
        )
        self._starting.done()
        systemd.notify("READY=1", f"STATUS=agent {self.host}")
        self._stopped.wait()
        if self._fatal is not None:
            raise self._fatal

    def _new_membership(self) -> Membership:
        """The agent's membership of the group, not joined yet."""
        return membership_from_conf(
            self.conf,
            # rpc_api: the API version this agent serves, for the upgrade
            # check (ringfleet-status) to compare with [upgrade_levels];
            # host_ip: what Nova filters see as the host state's host_ip.
            capabilities={
                "groups": list(self.conf.compute_agent.groups),
                "rpc_api": COMPUTE_API_VERSION,
                "host_ip": default_conf.my_ip(self.conf),
                "serving": True,  # a call reaches it (compute_agent/serving.py)
            },
            on_change=self._on_view,
            on_state_change=self._on_state,
        )

    def _new_ownership(self, conductor: ConductorAPI) -> OwnershipManager:
        """The agent's held nodes, claimed through *conductor* once the agent joined."""
        return OwnershipManager(
            self.host,
            conductor,
            self.membership,
            groups=self.conf.compute_agent.groups,
            claim_batch=self.conf.compute_agent.claim_batch,
            busy_nodes=lambda: self.actions.busy_nodes() if self.actions else set(),
            metrics=self.metrics,
            # Peers cut off with us re-join within a heartbeat (TTL/4) of us,
            # and we see them at the next read of the group.
            rejoin_settle=self.membership.ttl / 2 + self.conf.coordination.watch_interval,
            # One watch interval: peers started with us appear in the view.
            join_settle=self.conf.coordination.watch_interval,
            # Peers started with us join within a heartbeat (TTL/4) or so of
            # us; the first read waits for the view to stay unchanged that
            # long, and a TTL at most.
            first_read_settle=self.membership.ttl / 4 + self.conf.coordination.watch_interval,
            first_read_wait_max=self.membership.ttl,
        )

    def _new_placement(self, conductor: ConductorAPI) -> PlacementReporter | None:
        """The Placement reporter, when [placement] is enabled.

        Built before joining: a [placement] misconfiguration stops the start
        with the option named, not the first pass.
        """
        if not placement_conf.enabled(self.conf):
            return None
        return PlacementReporter(
            self.host,
            self.conf,
            PlacementClient.from_conf(self.conf),
            conductor,
            interval=lambda: float(self.conf.compute_agent.reconcile_interval),
            can_act=lambda: self.membership is not None and self.membership.can_act(),
            held=lambda: self.ownership.held() if self.ownership is not None else (),
            holds=lambda node: (
                self.ownership is not None and self.ownership.epoch(node) is not None
            ),
            metrics=self.metrics,
        )

    def _serve(self) -> None:
        """Serve the compute RPC API (waits for the broker).

        Serving first, then joining: an agent in the ring takes a share of
        the nodes at once, and one that cannot serve RPC (the broker is
        unreachable) would hold them unusable.
        """
        assert self.actions is not None
        endpoint = ComputeEndpoint(
            self.host,
            self.actions,
            self.status,
            lambda: self.terminate(drain=True),
            inventory_changed=self.inventory_changed,
            group_changed=self.membership.read_soon,
        )
        self._server = rpc.get_server(
            self._transport,
            rpc.COMPUTE_TOPIC,
            self.host,
            [endpoint],
            observe=self.metrics.rpc_served,
            observe_cpu=self.metrics.rpc_served_cpu,
        )
        broker_outage.on_reconnect(self.broker_reconnected)
        self._server.start()
        broker_outage.reachable()  # start() waited for it
        self._serving.set()

    def _join(self) -> None:
        """Join the group and wait (a while) to be CONNECTED; it keeps trying after."""
        self.membership.start()
        if not self.membership.wait_connected(timeout=max(30.0, self.membership.ttl * 2)):
            # When the backend refuses, the membership said so already (one
            # WARNING naming it): this is no second one.
            LOG.log(
                logging.INFO if self.membership.backend_failing else logging.WARNING,
                "Agent %s: not connected to the group yet; it keeps trying",
                self.host,
            )
        self.metrics.membership_state(self.membership.state)

    def _start_loops(self) -> None:
        """The reconciler, the power reporter (if the driver polls) and Placement's."""
        loops = [("reconciler", self._reconcile_loop)]
        if self._driver.polls_power:
            loops.append(("reporter", self._report_loop))
        for name, target in loops:
            thread = threading.Thread(target=target, name=f"{name}-{self.host}", daemon=True)
            self._threads.append(thread)
            thread.start()
        if self.placement is not None:
            self.placement.start()
        assert self._transport is not None
        self._serving_check = ServingCheck.through(
            self._transport, self.host, self.membership, self._driver.backend_problem
        )
        self._serving_check.start()

    def wait_started(self, timeout: float) -> bool:
        return self._started.wait(timeout)

    def stop_timeout(self) -> float:
        return float(self.conf.compute_agent.graceful_timeout) + STOP_MARGIN

    def _stop_server(self, steps: StopSteps) -> None:
        # Not before it started: oslo.messaging's stop would wait for the start.
        server = self._server
        if server is not None and self._serving.is_set():
            left = self._driver.threads_left_waiting
            steps.run(
                "stopping the RPC server", lambda: rpc.stop_server(server, left=left), _STEP_S
            )

    def terminate(self, *, drain: bool = False) -> None:
        """Graceful stop (see module doc); ``drain`` hands every node over first.

        Each step has its own deadline within :meth:`stop_timeout`, and the
        last seconds are kept for leaving the group: a broker that does not
        answer costs the steps that need it (each cut short with one
        WARNING, skipped at once when the broker is known down), never the
        leave.
        """
        if not self._terminating.acquire(blocking=False):
            return
        steps = self._stop_steps = StopSteps(
            f"Agent {self.host}", self.stop_timeout(), reserve=_LEAVE_S
        )
        self._starting.done()
        systemd.notify("STOPPING=1")
        LOG.info("Agent %s stopping%s", self.host, " after a drain" if drain else "")
        if self._serving_check is not None:  # no peer steps aside counting on it
            self._serving_check.stop(announce="stopping")
        if self.actions is not None:
            self.actions.stop_accepting()
        if not drain:
            # (A drain is requested over RPC: its own call must not wait for
            # the server to stop; the server stops after the hand-over.)
            self._stop_server(steps)
        self._finish_work(steps)
        if drain and self.ownership is not None and self.membership.view is not None:
            ownership, view = self.ownership, self.membership.view
            steps.run("handing the nodes over (drain)", lambda: ownership.drain(view), steps.left())
        if drain:
            self._stop_server(steps)
        self._stopped.set()
        self._wake.set()
        if self.placement is not None:
            placement = self.placement
            steps.run("stopping the Placement reporter", lambda: placement.stop(5.0), 6.0)
        steps.run("stopping the reconciler", self._join_threads, _STEP_S)
        if not drain:
            self._ask_restart_hold(steps)
        self._close(leave=True, steps=steps)
        LOG.info("Agent %s stopped", self.host)

    def _finish_work(self, steps: StopSteps) -> None:
        """Let the deployments in flight end, then deliver their results."""
        actions, reporter = self.actions, self._reporter
        if actions is not None:
            waited = steps.run(
                "waiting for the deployments in flight",
                lambda: actions.wait_idle(self.conf.compute_agent.graceful_timeout),
                float(self.conf.compute_agent.graceful_timeout) + 1.0,
            )
            running, left = actions.in_flight(), actions.left_waiting()
            if left:
                LOG.info(
                    "Agent %s leaves %d actions waiting for an answer of its back end "
                    "(resumed from the back end's record by its next process or owner)",
                    self.host,
                    left,
                )
            if not waited or running > left:
                LOG.warning("Agent %s leaves with %d actions still running", self.host, running)
        if reporter is None:
            return
        if broker_outage.known_down():
            LOG.warning(
                "Agent %s leaves with build results not delivered: the broker is down "
                "(a conductor's sweeper finds those builds)",
                self.host,
            )
            return
        # Two steps' time at most: a frozen broker (not known down) holds all of it.
        timeout = min(float(self.conf.compute_agent.conductor_timeout), 2 * _STEP_S)
        delivered = steps.run(
            "delivering build results to a conductor",
            lambda: reporter.stop(min(timeout, steps.left())),
            timeout + 1.0,
        )
        if not delivered:
            LOG.warning("Agent %s leaves with build results not yet delivered", self.host)

    def _join_threads(self) -> None:
        for thread in self._threads:
            thread.join(_STEP_S)

    def _ask_restart_hold(self, steps: StopSteps) -> None:
        """The restart hold, unless the broker is known down (it would only
        wait for its timeout): then the nodes move to the peers now."""
        if broker_outage.known_down():
            LOG.warning(
                "Agent %s: no restart hold (the broker is down); its nodes move to its peers now",
                self.host,
            )
            return
        steps.run("asking a conductor for the restart hold", self._hold_for_restart, _STEP_S)

    def _close(self, *, leave: bool, steps: StopSteps) -> None:
        """The last steps of any stop: membership (leaving the group or not),
        transport, metrics endpoint; within the time reserved for them."""
        membership, transport = self.membership, self._transport
        if membership is not None:
            steps.run(
                "leaving the coordination group",
                lambda: membership.stop(leave=leave),
                _LEAVE_S - rpc.CLOSE_TIMEOUT,
                reserved=True,
            )
        if transport is not None:
            steps.run(
                "closing the connection to the broker",
                lambda: rpc.close_transport(transport),
                rpc.CLOSE_TIMEOUT,
                reserved=True,
            )
        self.metrics_server.stop()

    def threads_left(self) -> int:
        """Threads a finished stop left inside a request to the back end, and
        the steps it cut short: the process exits without waiting for them."""
        steps = self._stop_steps
        cut = 0 if steps is None else len(steps.cut)
        return cut + (0 if self.actions is None else self.actions.left_waiting())

    @property
    def stop_step(self) -> str:
        """What the stop is doing now (the runner names it if its deadline passes)."""
        steps = self._stop_steps
        return "not stopping" if steps is None else steps.current

    def _stop_superseded(self, incarnation: str) -> None:
        """Another process joined as our host: stop consuming RPC now, then fail.

        Not :meth:`terminate`: the group entry and the nodes are the other
        process's now, so this one neither leaves the group (that would
        delete the survivor's entry) nor asks for a restart hold.
        """
        if not self._terminating.acquire(blocking=False):
            return
        LOG.error(
            "Agent %s: another process joined the group with this host (incarnation %s); "
            "this one stops serving and exits. Two agents must not share a [DEFAULT] host",
            self.host,
            incarnation,
        )
        self._fatal = IdentityTaken(self.host, incarnation)
        # Off the membership's thread, which called us: stopping the
        # membership joins that thread.
        threading.Thread(
            target=self._shut_down_superseded, name=f"superseded-{self.host}", daemon=True
        ).start()

    def _shut_down_superseded(self) -> None:
        steps = self._stop_steps = StopSteps(
            f"Agent {self.host}", self.stop_timeout(), reserve=_LEAVE_S
        )
        if self._serving_check is not None:
            self._serving_check.stop()
        if self.actions is not None:
            self.actions.stop_accepting()
        if self.placement is not None:
            self.placement.stop()
        self._stop_server(steps)
        self._wake.set()
        self._close(leave=False, steps=steps)  # the entry is the survivor's now
        self._stopped.set()

    def _hold_for_restart(self) -> None:
        """Before leaving: ask that none of our nodes move while we restart.

        systemd restarts an agent with SIGTERM; back within the conductors'
        ``restart_grace`` it finds every node still its own (no handover
        twice, no epoch bump).  Best effort: without the hold (the
        conductors are unreachable, or older), the nodes move as before.
        """
        if self._conductor is None or self.membership is None or not self.membership.can_act():
            return
        if not self._conductor.can_send_version("1.5"):
            LOG.info(
                "Agent %s: conductors pinned below 1.5 ([upgrade_levels] conductor): "
                "no restart hold, its nodes move to its peers now",
                self.host,
            )
            return
        try:
            out = self._conductor.hold_for_restart(self.host)
        except Exception as exc:  # never block a stop on it
            LOG.warning(
                "Agent %s: no restart hold (%s); its nodes move to its peers now",
                self.host,
                first_line(exc),
            )
            return
        if out.get("seconds"):
            LOG.info(
                "Agent %s: its nodes stay its own for %.0f s, until %s",
                self.host,
                out["seconds"],
                out.get("until"),
            )

    def crash(self) -> None:
        """Stop the way ``kill -9`` would, for agents run as threads (the demo).

        No goodbye: the RPC server stops serving at once, the heartbeats stop
        but the group entry stays until its lease expires (peers see a crash,
        not a leave), no in-flight work is waited for and nothing is handed
        over.  A deployment still running in the background refuses its next
        step, since the membership is no longer CONNECTED (as a dead process
        would not act).  :meth:`run` returns.
        """
        if not self._terminating.acquire(blocking=False):
            return
        LOG.warning("Agent %s crashing on purpose (no leave, no hand-over)", self.host)
        if self._serving_check is not None:
            self._serving_check.stop()
        if self.actions is not None:
            self.actions.stop_accepting()
        if self.placement is not None:
            self.placement.stop()
        if self.membership is not None:
            self.membership.stop(leave=False)
        if self._server is not None:
            self._server.stop()
            self._server.wait()
        # A dead process delivers no more results (the sweeper re-routes
        # the builds; their new owner reports them).
        if self._reporter is not None:
            self._reporter.abandon(self.conf.compute_agent.conductor_timeout)
        self._stopped.set()
        self._wake.set()
        for thread in self._threads:
            thread.join(10)
        if self._transport is not None:
            rpc.close_transport(self._transport)
        # A dead process serves no metrics either.
        self.metrics_server.stop()

    def reload(self) -> None:
        systemd.notify("RELOADING=1")
        self.conf.mutate_config_files()
        LOG.info("Agent %s reloaded its configuration", self.host)
        self._quiet_passes = QuietPasses()  # the next pass at once, at the new pace
        if self.placement is not None:
            # The operator's way to have drift mended now (ringfleet
            # placement check showed some), without a restart.
            self.placement.resync_soon()
        systemd.notify("READY=1")
        self._wake.set()

    def status(self) -> dict[str, Any]:
        assert self.ownership is not None and self.actions is not None
        return {
            "host": self.host,
            "membership": self.membership.state.value,
            "groups": list(self.conf.compute_agent.groups),
            "owned": len(self.ownership.held()),
            "pinned": len(self.ownership.pinned()),
            "in_flight": self.actions.in_flight(),
        }

    # -- membership ------------------------------------------------------------------

    def _on_view(self, view: MembershipView) -> None:
        self.metrics.view_changed(view)
        self.metrics.ring_members(view, self.conf.compute_agent.groups)
        self._wake.set()

    def _on_state(self, old: State, new: State) -> None:
        self.metrics.membership_state(new)
        superseded = self.membership.superseded_by
        if superseded is not None:
            self._stop_superseded(superseded)
            return
        if new is not State.CONNECTED and self._terminating.locked():
            # Our own leave on a stop: expected, not a fault to look into.
            LOG.info("Agent %s left the group (membership %s)", self.host, new.value)
        elif new is not State.CONNECTED:
            # Stepped aside, or its back end fails: said once already, at WARNING.
            # From LOST to SUSPENDED is on the way back (a beat the outage delayed).
            said = (
                self.membership.aside is not None
                or self.membership.backend_failing
                or old is State.LOST
            )
            level = logging.INFO if said else logging.WARNING
            LOG.log(level, "Agent %s membership %s: node actions suspended", self.host, new.value)
        # Back from LOST: the ownership manager sees the new join generation
        # and re-reads its claims before any action (see OwnershipManager).
        self._wake.set()

    # -- background loops --------------------------------------------------------------

    def _report_progress(self) -> None:
        """Tell the conductors which long deploys the back end moved on (a heartbeat).

        Best effort: a heartbeat lost here only lets the sweeper count from
        an earlier one.  Conductors pinned below 1.10 get none.  A deploy is
        due once it has run ``report_interval`` and then once per
        ``report_interval`` while it moves, so the conductors hear of the
        back end's progress within two intervals, whatever ``build_timeout``
        they use: a fixed 30 s let a deploy that moved every few seconds
        be failed by a ``build_timeout`` below ~30 s.
        """
        assert self.actions is not None and self._conductor is not None
        if not self._conductor.can_send_version("1.10"):
            return
        due = self.actions.take_progress(every=float(self.conf.compute_agent.report_interval))
        if not due:
            return
        try:
            self._conductor.report_progress(self.host, due)
        except Exception as exc:  # the next progress is reported next time
            LOG.debug("Agent %s: progress of %d deploys not reported: %s", self.host, len(due), exc)

    def _report_loop(self) -> None:
        assert self.ownership is not None and self._conductor is not None
        reports = StateReports(
            self.conf.compute_agent.full_report_interval, recorded=self.ownership.recorded_power
        )
        sender = StateSender(
            self._conductor,
            self.host,
            self.conf.compute_agent.report_interval,
            forget=self.ownership.forget_deleted,
            wrote=self.ownership.wrote_states,
        )
        while not self._stopped.wait(self.conf.compute_agent.report_interval):
            # A stop began: no new read of the back end (a hung one would
            # hold the stop's join of this thread for the whole request).
            if self._terminating.locked() or not self.membership.can_act():
                continue
            self._report_progress()
            held = sorted(self.ownership.held().items())
            try:
                powers = self._driver.get_power_states(
                    [ActionContext(node_uuid, self.host, epoch) for node_uuid, epoch in held]
                )
            except Exception as exc:  # reported next time
                LOG.warning("Agent %s: power states unknown: %s", self.host, exc)
                continue
            states = [
                {
                    "node_uuid": node_uuid,
                    "epoch": epoch,
                    "power_state": powers[node_uuid].value,
                    "provision_state": None,
                }
                for node_uuid, epoch in held
                if node_uuid in powers
            ]
            sender.send(reports, reports.due(states, time.monotonic()))
