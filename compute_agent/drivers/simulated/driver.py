# SPDX-License-Identifier: Apache-2.0
"""A bare-metal simulator: the default driver of the embedded mode and the tests.

It behaves like hardware where it matters to the agent: deploys go through
provision steps that take time, some deploys fail, power state changes, and
a node is busy while an action runs on it.  Each node's state lives in a
:class:`~compute_agent.drivers.simulated.node_store.NodeStore` -- with ``[simulated_driver]
node_store`` set, one SQLite file shared by every agent process of a fleet,
as real hardware is one machine seen by all -- seeded from the
:class:`~conductor.common.objects.Node` the agent passes on first sight.  Which
agent did what, under which epoch, when, goes to the shared action log
(:mod:`compute_agent.drivers.simulated.action_log`), which is how the functional tests
check the single-owner invariant across agent processes.

Failures are reproducible: whether a deploy fails, and at which step, is a
pure function of ``(seed, node, instance)`` (through SHA-256, since Python's
``hash()`` of a string differs per process), so a test can force every
deploy to fail (``failure_rate = 1``), none, or a fixed subset.

A step longer than :data:`FOLLOW_EVERY` is followed as the Ironic driver
follows a long transition: ``progress`` is called again with the same step
every :data:`FOLLOW_EVERY` seconds, so the agent can stop the deploy
mid-step (a delete, a lost node); the same step again is no new progress.
Deploys on ``stall_nodes`` stall at ``stall_step`` for ``stall_duration``:
a back end that stops making progress, for the conductors' sweeper.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import random
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from oslo_config import cfg

from compute_agent.drivers.base import (
    NO_DEPLOY_SPEC,
    ActionContext,
    BackendNode,
    ComputeDriver,
    DeploySpec,
    PowerTarget,
    ProgressCallback,
    validate_power_target,
)
from compute_agent.drivers.simulated.action_log import ActionLog
from compute_agent.drivers.simulated.node_store import SimulatedNode, open_store
from conductor.common.conf import simulated_driver as simulated_conf
from conductor.common.exception import ConfigurationError, DriverError, NodeNotBuildable
from conductor.common.objects import Node, PowerState, ProvisionState

__all__ = ["CLEAN_STEP", "DEPLOY_STEPS", "SimulatedDriver", "SimulatedNode"]

LOG = logging.getLogger(__name__)

#: the provision steps of a deploy, in order (the names ``progress`` receives)
DEPLOY_STEPS: Final = ("power on", "deploying image", "writing config drive", "rebooting")
#: the step of a destroy that takes ``clean_duration``
CLEAN_STEP: Final = "cleaning"
#: seconds between two calls of ``progress`` during one long deploy step
FOLLOW_EVERY: Final = 0.5

_GROUP = simulated_conf.group.name
_POWER_ACTIONS: Final[Mapping[str, str]] = {
    "power on": "power_on",
    "power off": "power_off",
    "reboot": "reboot",
    "soft power off": "soft_power_off",
    "soft reboot": "soft_reboot",
}


class SimulatedDriver(ComputeDriver):
    """In-memory bare-metal nodes with timed steps, injected failures and an action log.

    Options are read once, at construction, from ``[simulated_driver]``
    (registered here if the caller has not).  Thread-safe; a second action on
    a node while one runs is refused with :class:`DriverError`, as a real
    conductor refuses a locked node.
    """

    name = "simulated"

    def __init__(self, conf: cfg.ConfigOpts, host: str) -> None:
        super().__init__(conf, host)
        simulated_conf.OPTIONS.register(conf)
        options = conf[_GROUP]
        self.step_durations: dict[str, float] = _step_durations(
            options.step_duration, options.step_durations
        )
        self.clean_duration: float = options.clean_duration
        self.power_duration: float = options.power_duration
        self.failure_rate: float = options.failure_rate
        self.seed: int = options.seed
        self.stall_nodes: frozenset[str] = frozenset(options.stall_nodes)
        #: node name or uuid -> the actions that fail on it (empty: all).
        self.failing_nodes: dict[str, set[str]] = {}
        for entry in options.failing_nodes:
            node_ident, _sep, action = entry.partition(":")
            actions = self.failing_nodes.setdefault(node_ident.strip(), set())
            if action.strip():
                actions.add(action.strip())
        self.stall_step: str = options.stall_step
        self.stall_duration: float = options.stall_duration
        self.action_log: ActionLog | None = (
            ActionLog(options.action_log) if options.action_log else None
        )
        self._store = open_store(options.node_store)
        self._lock = threading.Lock()
        self._busy: dict[str, str] = {}
        LOG.debug(
            "Simulated driver of %s: steps %s, cleaning %.3fs, failure rate %.3f, "
            "seed %d, stalling %s, action log %s, node store %s",
            host,
            self.step_durations,
            self.clean_duration,
            self.failure_rate,
            self.seed,
            sorted(self.stall_nodes) or "no node",
            options.action_log,
            options.node_store or "(this driver's memory)",
        )

    # -- the driver interface -------------------------------------------------------------

    def deploy(
        self,
        ctx: ActionContext,
        node: Node,
        progress: ProgressCallback,
        spec: DeploySpec = NO_DEPLOY_SPEC,
    ) -> None:
        """The node keeps *spec*'s image and config drive (:meth:`node_state`)
        until it is destroyed: what reached the machine, for tests and the demo."""
        self._check_context(ctx, node)
        with self._exclusive(ctx, "deploy"):
            current = self._current(node)
            if current.provision_state is ProvisionState.ACTIVE:
                if ctx.instance_uuid is not None and current.instance_uuid == ctx.instance_uuid:
                    LOG.info(
                        "Node %s already hosts instance %s; nothing to deploy",
                        node.uuid,
                        ctx.instance_uuid,
                    )
                    return
                raise DriverError(
                    node.uuid,
                    "deploy",
                    f"node is active with instance {current.instance_uuid}; destroy it first",
                )
            failing_step = self.planned_failure(node.uuid, ctx.instance_uuid)
            self._record(ctx, "deploy_start")
            self._update(
                node.uuid,
                provision_state=ProvisionState.DEPLOYING,
                instance_uuid=ctx.instance_uuid,
                last_error=None,
                image=None if spec.image is None else dict(spec.image),
                config_drive=None if spec.config_drive is None else dict(spec.config_drive),
            )
            for step in DEPLOY_STEPS:
                with self._aborting(ctx, f"before {step!r}"):
                    progress(step)
                self._record(ctx, "deploy_step", step=step)
                if step in ("power on", "rebooting"):
                    self._update(node.uuid, power_state=PowerState.ON)
                with self._aborting(ctx, f"during {step!r}"):
                    _follow(step, self._step_duration(node, step), progress)
                if step == failing_step:
                    reason = f"simulated failure during {step!r}"
                    self._update(node.uuid, provision_state=ProvisionState.ERROR, last_error=reason)
                    self._record(ctx, "deploy_failed", step=step, reason=reason)
                    LOG.warning(
                        "Deploy of instance %s on node %s failed: %s",
                        ctx.instance_uuid,
                        node.uuid,
                        reason,
                    )
                    raise DriverError(node.uuid, "deploy", reason)
            self._update(node.uuid, provision_state=ProvisionState.ACTIVE)
            self._record(ctx, "deploy_done")
            LOG.info(
                "Deployed instance %s on node %s at epoch %d",
                ctx.instance_uuid,
                node.uuid,
                ctx.epoch,
            )

    def rebuild(
        self,
        ctx: ActionContext,
        node: Node,
        progress: ProgressCallback,
        spec: DeploySpec = NO_DEPLOY_SPEC,
    ) -> None:
        self._check_context(ctx, node)
        with self._exclusive(ctx, "rebuild"):
            current = self._current(node)
            if current.instance_uuid != ctx.instance_uuid:
                raise NodeNotBuildable(
                    field="node_uuid",
                    value=node.uuid,
                    reason=f"node hosts instance {current.instance_uuid}, not {ctx.instance_uuid}",
                )
            self._fail_if_failing(node, "rebuild")
            self._record(ctx, "rebuild_start")
            # The node keeps what it was rebuilt with (node_state shows it);
            # without a spec, what the deploy left.
            written: dict[str, Any] = {}
            if spec.image is not None:
                written["image"] = dict(spec.image)
            if spec.config_drive is not None:
                written["config_drive"] = dict(spec.config_drive)
            self._update(
                node.uuid, provision_state=ProvisionState.DEPLOYING, last_error=None, **written
            )
            for step in DEPLOY_STEPS:
                progress(step)  # raises when the node is no longer ours: stop here
                self._record(ctx, "deploy_step", step=step)
                _sleep(self.step_durations[step])
            self._update(
                node.uuid, provision_state=ProvisionState.ACTIVE, power_state=PowerState.ON
            )
            self._record(ctx, "rebuild_done")
            LOG.info(
                "Rebuilt instance %s on node %s at epoch %d",
                ctx.instance_uuid,
                node.uuid,
                ctx.epoch,
            )

    def destroy(self, ctx: ActionContext, node: Node) -> None:
        self._check_context(ctx, node)
        with self._exclusive(ctx, "destroy"):
            self._current(node)
            self._fail_if_failing(node, "destroy")
            self._record(ctx, "destroy")
            self._update(
                node.uuid, power_state=PowerState.OFF, provision_state=ProvisionState.DELETING
            )
            self._update(node.uuid, provision_state=ProvisionState.CLEANING)
            _sleep(self.clean_duration)
            self._update(
                node.uuid,
                provision_state=ProvisionState.AVAILABLE,
                instance_uuid=None,
                last_error=None,
                image=None,
                config_drive=None,
            )
            self._record(ctx, "destroy_done")
            LOG.info(
                "Destroyed instance %s and cleaned node %s at epoch %d",
                ctx.instance_uuid,
                node.uuid,
                ctx.epoch,
            )

    def set_power(self, ctx: ActionContext, node: Node, target: PowerTarget) -> PowerState:
        target = validate_power_target(target)
        self._check_context(ctx, node)
        with self._exclusive(ctx, "set_power"):
            self._current(node)
            self._fail_if_failing(node, "set_power", _POWER_ACTIONS[target])
            self._record(ctx, _POWER_ACTIONS[target])
            # The simulated hardware supports the soft variants (the OS
            # shuts down first): each is recorded as asked, and ends as the
            # hard one does.
            if target in ("reboot", "soft reboot"):
                self._update(node.uuid, power_state=PowerState.OFF)
                _sleep(self.power_duration)
                state = PowerState.ON
            else:
                _sleep(self.power_duration)
                state = PowerState.OFF if target.endswith("power off") else PowerState.ON
            self._update(node.uuid, power_state=state)
            LOG.info("Node %s: %s done at epoch %d", node.uuid, target, ctx.epoch)
            return state

    def get_power_state(self, ctx: ActionContext, node: Node) -> PowerState:
        self._check_context(ctx, node)
        return self._current(node).power_state

    def get_power_states(self, contexts: Sequence[ActionContext]) -> dict[str, PowerState]:
        # Two statements for all the nodes, not one per node: see NodeStore.get_many.
        for ctx in contexts:
            self._check_host(ctx)
        found = self._store.get_many(ctx.node_uuid for ctx in contexts)
        unseen = [ctx for ctx in contexts if ctx.node_uuid not in found]
        if unseen:
            # As get_power_state does: a node the hardware has not seen yet
            # starts as the conductor records a new node.
            found.update(self._store.seed_many([_initial(self._stub(ctx)) for ctx in unseen]))
        return {ctx.node_uuid: found[ctx.node_uuid].power_state for ctx in contexts}

    def inspect(self, ctx: ActionContext, node: Node) -> BackendNode:
        self._check_context(ctx, node)
        # Read, never seeded: a node the hardware never saw is as recorded.
        state = self._store.get(node.uuid) or _initial(node)
        return BackendNode(
            provision_state=state.provision_state,
            power_state=state.power_state,
            instance_uuid=state.instance_uuid,
            last_error=state.last_error,
        )

    def close(self) -> None:
        self._store.close()

    # -- simulator specifics ----------------------------------------------------------------

    def node_state(self, node_uuid: str) -> SimulatedNode | None:
        """What the simulator holds for *node_uuid* (``None``: never seen)."""
        return self._store.get(node_uuid)

    @property
    def deploy_duration(self) -> float:
        """Seconds a successful deploy takes, all steps together."""
        return sum(self.step_durations.values())

    def planned_failure(self, node_uuid: str, instance_uuid: str | None) -> str | None:
        """The step at which deploying *instance_uuid* on *node_uuid* fails, or ``None``.

        Deterministic: the same in every process for the same options.
        """
        if self.failure_rate <= 0.0:
            return None
        key = f"{self.seed}\0{node_uuid}\0{instance_uuid or ''}".encode()
        rng = random.Random(int.from_bytes(hashlib.sha256(key).digest()[:8], "big"))
        if rng.random() >= self.failure_rate:
            return None
        return rng.choice(DEPLOY_STEPS)

    # -- internals ------------------------------------------------------------------------------

    def _fail_if_failing(self, node: Node, action: str, which: str | None = None) -> None:
        """:raises DriverError: *node*'s *which* (default: *action*) is in ``failing_nodes``."""
        for ident in (node.uuid, node.name):
            actions = self.failing_nodes.get(ident)
            if actions is not None and (not actions or (which or action) in actions):
                raise DriverError(node.uuid, action, "simulated failure (failing_nodes)")

    @contextlib.contextmanager
    def _aborting(self, ctx: ActionContext, where: str) -> Iterator[None]:
        """What ``progress`` raises *where* stops the deploy: not an action
        on the node, so nothing is logged; the node is left ``error`` for
        its next owner to clean."""
        try:
            yield
        except BaseException as exc:
            reason = f"aborted {where}: {type(exc).__name__}: {exc}"
            self._update(ctx.node_uuid, provision_state=ProvisionState.ERROR, last_error=reason)
            LOG.warning(
                "Deploy of instance %s on node %s %s", ctx.instance_uuid, ctx.node_uuid, reason
            )
            raise

    def _step_duration(self, node: Node, step: str) -> float:
        if step == self.stall_step and ({node.uuid, node.name} & self.stall_nodes):
            LOG.info(
                "Node %s stalls at %r for %.1f s (stall_nodes)",
                node.uuid,
                step,
                self.stall_duration,
            )
            return self.stall_duration
        return self.step_durations[step]

    @contextlib.contextmanager
    def _exclusive(self, ctx: ActionContext, action: str) -> Iterator[None]:
        with self._lock:
            running = self._busy.get(ctx.node_uuid)
            if running is not None:
                raise DriverError(ctx.node_uuid, action, f"node is busy: {running} in progress")
            self._busy[ctx.node_uuid] = action
        try:
            yield
        finally:
            with self._lock:
                del self._busy[ctx.node_uuid]

    def _current(self, node: Node) -> SimulatedNode:
        return self._store.get(node.uuid) or self._store.seed(_initial(node))

    def _update(self, node_uuid: str, **changes: Any) -> None:
        self._store.update(node_uuid, **changes)

    def _record(
        self,
        ctx: ActionContext,
        action: str,
        *,
        step: str | None = None,
        reason: str | None = None,
    ) -> None:
        if self.action_log is None:
            return
        try:
            self.action_log.append(
                node=ctx.node_uuid,
                agent=ctx.host,
                epoch=ctx.epoch,
                action=action,
                instance=ctx.instance_uuid,
                step=step,
                reason=reason,
            )
        except (OSError, ValueError) as exc:
            # The log is the evidence of fencing: acting without it is not allowed.
            raise DriverError(ctx.node_uuid, action, f"cannot write the action log: {exc}") from exc


def _initial(node: Node) -> SimulatedNode:
    """A node the hardware has not seen yet: as the conductor records it."""
    return SimulatedNode(
        uuid=node.uuid,
        power_state=node.power_state or PowerState.OFF,
        provision_state=node.provision_state,
        instance_uuid=node.instance_uuid,
    )


def _sleep(seconds: float) -> None:
    if seconds > 0:
        time.sleep(seconds)


def _follow(step: str, seconds: float, progress: ProgressCallback) -> None:
    """Take *seconds* over *step*, calling ``progress(step)`` again every
    :data:`FOLLOW_EVERY` seconds (whatever it raises stops the step)."""
    ends = time.monotonic() + seconds
    while (left := ends - time.monotonic()) > FOLLOW_EVERY:
        time.sleep(FOLLOW_EVERY)
        progress(step)
    _sleep(left)


def _step_durations(default: float, overrides: Mapping[str, str]) -> dict[str, float]:
    durations = dict.fromkeys(DEPLOY_STEPS, default)
    for step, text in overrides.items():
        if step not in durations:
            raise ConfigurationError(
                _GROUP,
                "step_durations",
                f"unknown step {step!r} (steps: {', '.join(DEPLOY_STEPS)})",
            )
        try:
            seconds = float(text)
        except ValueError:
            seconds = math.nan
        if not (math.isfinite(seconds) and 0.0 <= seconds <= simulated_conf.MAX_DURATION):
            raise ConfigurationError(
                _GROUP,
                "step_durations",
                f"{step}: {text!r} is not a number of seconds between 0 and "
                f"{simulated_conf.MAX_DURATION:g}",
            )
        durations[step] = seconds
    return durations
