"""The ``ironic`` compute driver: real bare metal through OpenStack Ironic.

Two fences guard every node.  Ringfleet's own (the owner's epoch, checked
by the agent before each action and, through ``progress``, before each
change this driver asks of Ironic) decides *which agent* may act; Ironic's
``instance_uuid`` claim decides *which instance* a node is for: Ironic sets
it atomically and answers 409 to any second claimant, so even two agents
that both believed they owned a node could not deploy two instances on it.

Nothing is remembered between calls.  Each action starts by reading the
node from Ironic and carries on from whatever state it finds, which is how
an agent *adopts* work its previous owner left half done: a deploy still
running is followed to its end, a failed one torn down, a tear-down or a
cleaning followed until the node is available again.

States are followed by polling with a short, doubling interval
(``[ironic] poll_interval`` .. ``poll_max_interval``): Ironic moves a fake
node in ~100 ms, and openstacksdk's own waits poll every 2 s.  While Ironic
is unreachable a followed action keeps polling (one WARNING, then one INFO
when it answers) until its timeout: the deploy itself runs in Ironic and
may well succeed meanwhile.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from typing import Final

from oslo_config import cfg

from compute_agent.drivers.base import (
    ActionContext,
    BackendNode,
    ComputeDriver,
    PowerTarget,
    ProgressCallback,
    validate_power_target,
)
from conductor.common.conf import ironic as ironic_conf
from conductor.common.exception import DriverError, NodeNotBuildable, ServiceUnavailable
from conductor.common.ironic import (
    BaremetalClient,
    IronicClaimConflict,
    IronicNode,
    power_state_of,
    provision_state_of,
)
from conductor.common.objects import Node, PowerState

__all__ = ["IronicDriver"]

LOG = logging.getLogger(__name__)

#: Ironic states a deploy is running in: follow them.
_DEPLOYING: Final = frozenset({"deploying", "wait call-back", "deploy hold"})
#: States a tear-down or cleaning is running in: follow them.
_TEARING_DOWN: Final = frozenset({"deleting", "cleaning", "clean wait", "clean hold"})
#: States Ironic tears down from ("deleted" is accepted there).
_UNDEPLOYABLE: Final = frozenset({"active", "deploy failed", "error", "wait call-back"})
#: States no deploy may start from and waiting will not change.
_NEVER_DEPLOYABLE: Final = frozenset(
    {
        "enroll",
        "verifying",
        "manageable",
        "inspecting",
        "inspect wait",
        "inspect failed",
        "adopting",
        "adopt failed",
        "clean failed",
    }
)
#: How many times a tear-down is asked for before the destroy fails.
_TEARDOWN_ATTEMPTS: Final = 2
#: How many times a claim refused because the node was locked is retried.
_CLAIM_ATTEMPTS: Final = 5

_IRONIC_POWER_TARGETS: Final = {
    "power on": "power on",
    "power off": "power off",
    "reboot": "rebooting",
}


class IronicDriver(ComputeDriver):
    """Acts on nodes through the Ironic API (configured by ``[ironic]``)."""

    name = "ironic"
    # Power states reach the conductors through the inventory sync: one
    # ?fields= listing per conductor per interval.  A GET per owned node by
    # every agent each report_interval cost more Ironic API time in total
    # (benchmarks/ironic_sync_bench.py: 8.9 s against 5.3 s for ten Nova
    # computes' detailed listings at 1,000 nodes) and grows with the fleet.
    polls_power = False

    def __init__(
        self, conf: cfg.ConfigOpts, host: str, *, client: BaremetalClient | None = None
    ) -> None:
        super().__init__(conf, host)
        ironic_conf.register_opts(conf)
        options = conf[ironic_conf.group.name]
        self._poll_interval: float = options.poll_interval
        self._poll_max_interval: float = max(options.poll_max_interval, options.poll_interval)
        self._deploy_timeout: float = float(options.deploy_timeout)
        self._teardown_timeout: float = float(options.teardown_timeout)
        self._ironic = client if client is not None else BaremetalClient.from_conf(conf)
        LOG.info(
            "Agent %s drives nodes through Ironic at %s (API %s)",
            host,
            self._ironic.endpoint,
            ironic_conf.API_VERSION,
        )

    # -- reads -----------------------------------------------------------------

    def inspect(self, ctx: ActionContext, node: Node) -> BackendNode:
        self._check_context(ctx, node)
        found = self._ironic.get_node(node.uuid, action="inspect")
        return BackendNode(
            provision_state=provision_state_of(found.provision_state),
            power_state=power_state_of(found.power_state),
            instance_uuid=found.instance_uuid,
            last_error=found.last_error,
        )

    def get_power_state(self, ctx: ActionContext, node: Node) -> PowerState:
        found = self._ironic.get_node(node.uuid, action="get_power_state")
        power = power_state_of(found.power_state)
        if power is None:
            raise DriverError(node.uuid, "get_power_state", "Ironic does not know its power state")
        return power

    # -- deploy ----------------------------------------------------------------

    def deploy(self, ctx: ActionContext, node: Node, progress: ProgressCallback) -> None:
        self._check_context(ctx, node)
        instance = ctx.instance_uuid
        if instance is None:
            raise ValueError("deploy needs ActionContext.instance_uuid")
        found = self._ironic.get_node(node.uuid, action="deploy")
        self._refuse_unbuildable(found, instance)
        if found.instance_uuid is None:
            progress("claim")
            found = self._claim(ctx, found)
        deadline = time.monotonic() + self._deploy_timeout
        while True:
            state = found.provision_state
            if state == "active":
                LOG.info(
                    "Instance %s is active on Ironic node %s (agent %s, epoch %d)",
                    instance,
                    node.uuid,
                    self.host,
                    ctx.epoch,
                )
                return
            if _busy(found):
                # A deploy or a cleaning running (perhaps started by the
                # previous owner): follow it to its end.
                found = self._follow(ctx, progress, deadline, "deploy", _busy)
                continue
            if state == "deploy failed":
                # Failed here or under the previous owner: the build fails
                # and the agent tears the node down (deploying it again
                # would hide the fault from the user).
                raise DriverError(node.uuid, "deploy", found.last_error or "deploy failed")
            if state == "available" and not found.maintenance:
                progress("deploy")
                self._ironic.set_provision_state(node.uuid, "active", action="deploy")
                found = self._follow(ctx, progress, deadline, "deploy", _busy_or(state))
                continue
            if found.maintenance or state in _NEVER_DEPLOYABLE:
                # Nothing was deployed: give the claim back, or the node
                # would stay a trap for every later build.
                progress("release")
                self._ironic.release(node.uuid)
                raise NodeNotBuildable(
                    field="node_uuid", value=node.uuid, reason=_not_buildable(found)
                )
            raise DriverError(
                node.uuid, "deploy", f"Ironic shows it {state}: {found.last_error or 'no error'}"
            )

    def _refuse_unbuildable(self, found: IronicNode, instance: str) -> None:
        """Refuse, touching nothing, a node that hosts another instance or cannot deploy."""
        if found.instance_uuid not in (None, instance):
            raise NodeNotBuildable(
                field="node_uuid",
                value=found.uuid,
                reason=f"Ironic shows the node claimed by instance {found.instance_uuid}",
            )
        if found.instance_uuid is None and (
            found.maintenance or found.provision_state in _NEVER_DEPLOYABLE
        ):
            raise NodeNotBuildable(
                field="node_uuid", value=found.uuid, reason=_not_buildable(found)
            )

    def _claim(self, ctx: ActionContext, found: IronicNode) -> IronicNode:
        """Set Ironic's claim for ``ctx.instance_uuid``; the node as it is afterwards."""
        assert ctx.instance_uuid is not None
        info = {"ringfleet_host": ctx.host, "ringfleet_epoch": ctx.epoch}
        delay = self._poll_interval
        for attempt in range(1, _CLAIM_ATTEMPTS + 1):
            try:
                self._ironic.claim(found.uuid, ctx.instance_uuid, info)
            except IronicClaimConflict as exc:
                found = self._ironic.get_node(found.uuid, action="deploy")
                if found.instance_uuid == ctx.instance_uuid:
                    break  # our own earlier claim whose answer was lost
                # Claimed by another instance meanwhile: refused for good.
                self._refuse_unbuildable(found, ctx.instance_uuid)
                if attempt == _CLAIM_ATTEMPTS:
                    raise DriverError(found.uuid, "deploy", f"claim refused: {exc}") from exc
                time.sleep(delay)  # locked by an Ironic task: retry shortly
                delay = min(delay * 2, self._poll_max_interval)
            else:
                break
        LOG.info(
            "Agent %s claimed Ironic node %s for instance %s (epoch %d)",
            ctx.host,
            found.uuid,
            ctx.instance_uuid,
            ctx.epoch,
        )
        return self._ironic.get_node(found.uuid, action="deploy")

    # -- destroy ---------------------------------------------------------------

    def destroy(self, ctx: ActionContext, node: Node) -> None:
        self._check_context(ctx, node)
        found = self._ironic.get_node(node.uuid, action="destroy")
        if ctx.instance_uuid is not None and found.instance_uuid not in (None, ctx.instance_uuid):
            # Never tear down what another instance runs: its own teardown will.
            raise DriverError(
                node.uuid,
                "destroy",
                f"Ironic shows the node claimed by instance {found.instance_uuid}, "
                f"not {ctx.instance_uuid}; not touched",
            )
        deadline = time.monotonic() + self._teardown_timeout
        requested = 0
        while True:
            state = found.provision_state
            if _busy(found) and state not in _UNDEPLOYABLE:
                # A deploy running (Ironic cannot delete mid-deploy), a
                # tear-down or a cleaning: let it end first.
                found = self._follow(ctx, None, deadline, "destroy", _busy)
                continue
            if state in _UNDEPLOYABLE:
                if requested == _TEARDOWN_ATTEMPTS:
                    raise DriverError(
                        node.uuid, "destroy", f"still {state}: {found.last_error or 'no error'}"
                    )
                requested += 1
                self._ironic.set_provision_state(node.uuid, "deleted", action="destroy")
                found = self._follow(ctx, None, deadline, "destroy", _busy_or(state))
                continue
            if state == "clean failed":
                # The instance is gone (Ironic tore it down and cleared the
                # claim before cleaning): the delete succeeds, and retrying
                # it could not fix the node.  The node stays unschedulable:
                # a build routed to it is refused as not buildable, and the
                # inventory sync marks it so, until an operator fixes it in
                # Ironic.
                LOG.warning(
                    "Ironic node %s: cleaning failed after the teardown of instance %s: %s; "
                    "the node stays out of scheduling until it is fixed in Ironic",
                    node.uuid,
                    ctx.instance_uuid,
                    found.last_error or "no error",
                )
            break
        if found.instance_uuid is not None:
            # Claimed but never deployed (or Ironic left the claim): release it.
            self._ironic.release(node.uuid)
        LOG.info(
            "Ironic node %s torn down for instance %s (%s; agent %s, epoch %d)",
            node.uuid,
            ctx.instance_uuid,
            found.provision_state,
            self.host,
            ctx.epoch,
        )

    # -- power -----------------------------------------------------------------

    def set_power(self, ctx: ActionContext, node: Node, target: PowerTarget) -> PowerState:
        self._check_context(ctx, node)
        target = validate_power_target(target)
        self._ironic.set_power_state(node.uuid, _IRONIC_POWER_TARGETS[target])
        deadline = time.monotonic() + self._deploy_timeout
        found = self._follow(
            ctx, None, deadline, "set_power", lambda n: n.target_power_state is not None
        )
        power = power_state_of(found.power_state)
        expected = PowerState.OFF if target == "power off" else PowerState.ON
        if power is not expected:
            raise DriverError(
                node.uuid,
                "set_power",
                f"Ironic shows {found.power_state} after {target}: {found.last_error or ''}",
            )
        return power

    # -- following a transition ---------------------------------------------------

    def _follow(
        self,
        ctx: ActionContext,
        progress: ProgressCallback | None,
        deadline: float,
        action: str,
        busy: Callable[[IronicNode], bool],
    ) -> IronicNode:
        """Read the node until ``busy(node)`` is false; that last read.

        ``progress`` (if given) is called with each new provision state, and
        before every read: it raises as soon as the agent may no longer act
        on the node, so a deploy it lost stops here, touching nothing.
        """
        delay = self._poll_interval
        last_state: str | None = None
        unreachable = False
        while True:
            if progress is not None:
                progress(last_state or "waiting")
            try:
                found = self._ironic.get_node(ctx.node_uuid, action=action)
            except ServiceUnavailable:
                unreachable = True  # logged once by the client; keep following
                found = None
            if found is not None:
                if unreachable:
                    unreachable = False
                    delay = self._poll_interval
                if not busy(found):
                    return found
                if found.provision_state != last_state:
                    last_state = found.provision_state
                    LOG.debug(
                        "Ironic node %s (instance %s): %s -> %s",
                        ctx.node_uuid,
                        ctx.instance_uuid,
                        last_state,
                        found.target_provision_state,
                    )
                    delay = self._poll_interval
            if time.monotonic() >= deadline:
                raise DriverError(
                    ctx.node_uuid,
                    action,
                    f"still {last_state or 'unreachable'} when the timeout expired",
                )
            time.sleep(delay)
            delay = min(delay * 2, self._poll_max_interval)


def _busy(node: IronicNode) -> bool:
    """A transition runs: a transitional state, or Ironic has a target."""
    return bool(
        node.target_provision_state
        or node.provision_state in _DEPLOYING
        or node.provision_state in _TEARING_DOWN
    )


def _busy_or(states: str | Collection[str]) -> Callable[[IronicNode], bool]:
    """Busy, or still in *states* (Ironic has not yet picked up the request)."""
    pending = {states} if isinstance(states, str) else set(states)
    return lambda node: _busy(node) or node.provision_state in pending


def _not_buildable(found: IronicNode) -> str:
    if found.maintenance:
        return f"node is in maintenance in Ironic: {found.maintenance_reason or 'no reason'}"
    return f"Ironic shows the node {found.provision_state}, not deployable"
