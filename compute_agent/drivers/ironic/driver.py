# SPDX-License-Identifier: Apache-2.0
"""The ``ironic`` compute driver: real bare metal through OpenStack Ironic.

Two fences guard every node.  Ringfleet's own (the owner's epoch, checked
by the agent before each action and, through ``progress``, before each
change this driver asks of Ironic) decides *which agent* may act; Ironic's
``instance_uuid`` claim decides *which instance* a node is for: Ironic sets
it atomically and answers 409 to any second claimant, so even two agents
that both believed they owned a node could not deploy two instances on it.

Nothing is remembered between calls.  Each action starts by reading the
node from Ironic and carries on from whatever state it finds, which is how
an agent *adopts* work its previous owner (or its own previous process)
left half done.  What each of Ironic's states means for a deploy and for a
teardown is declared once, in :mod:`.states`: a transition is over when
Ironic's *provision state* is at rest, whatever ``target_provision_state``
says (Ironic keeps ``active`` there on a ``deploy failed`` node).

States are followed by polling with a short, doubling interval
(``[ironic] poll_interval`` .. ``poll_max_interval``): Ironic moves a fake
node in ~100 ms, and openstacksdk's own waits poll every 2 s.  Ironic's own
progress is the heartbeat: the ``deploy_timeout``/``teardown_timeout``
counts from the last time Ironic changed the node, so a long deploy that
moves is never cut short, and one that stopped moving ends.  While Ironic
is unreachable, or answers 409 "locked" because one of its own tasks holds
the node, an action waits and re-reads (the client logs one WARNING when
Ironic goes and one INFO when it answers again).  When the agent stops,
every wait ends at once (:meth:`IronicDriver.stop_waiting`): the transition
runs on in Ironic and is resumed from there.
"""

from __future__ import annotations

import contextlib
import logging
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
from compute_agent.drivers.ironic.watch import IronicLink, Watch, failure
from conductor.common.conf import ironic as ironic_conf
from conductor.common.exception import (
    DriverError,
    NodeNotBuildable,
    ServiceUnavailable,
)
from conductor.common.ironic import states
from conductor.common.ironic.client import (
    BaremetalClient,
    IronicClaimConflict,
    IronicNode,
    IronicNodeGone,
)
from conductor.common.ironic.states import (
    DeployStep,
    TeardownStep,
    power_state_of,
    provision_state_of,
)
from conductor.common.objects import Node, PowerState

__all__ = ["IronicDriver"]

LOG = logging.getLogger(__name__)

#: How many times a teardown is asked for before the destroy fails.
_TEARDOWN_ATTEMPTS: Final = 3
#: Seconds an accept's read of its node may take: the conductor waits for the
#: accept (``[conductor] accept_timeout``, 10 s), and an accept without the
#: read is safe (the deploy reads the node before it touches it).
_INSPECT_WITHIN: Final = 3.0
#: How many times a claim is tried while another claimant's race is settling.
_CLAIM_ATTEMPTS: Final = 5

_IRONIC_POWER_TARGETS: Final = {
    "power on": "power on",
    "power off": "power off",
    "reboot": "rebooting",
    "soft power off": "soft power off",
    "soft reboot": "soft rebooting",
}
#: The hard target a soft one falls back to when Ironic's power interface
#: refuses it (not every BMC can ask the OS to shut down).
_HARD_FALLBACK: Final = {"soft power off": "power off", "soft reboot": "reboot"}


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
        ironic_conf.OPTIONS.register(conf)
        options = conf[ironic_conf.group.name]
        self._deploy_timeout: float = float(options.deploy_timeout)
        self._teardown_timeout: float = float(options.teardown_timeout)
        self._ironic = client if client is not None else BaremetalClient.from_conf(conf)
        self._link = IronicLink(
            self._ironic,
            poll_interval=options.poll_interval,
            poll_max_interval=max(options.poll_max_interval, options.poll_interval),
        )
        self._probe_idle: float = options.timeout or ironic_conf.REQUEST_TIMEOUT
        LOG.info(
            "Agent %s drives nodes through Ironic at %s (API %s)",
            host,
            self._ironic.endpoint,
            ironic_conf.API_VERSION,
        )

    def stop_waiting(self) -> None:
        self._link.stopping.set()

    def threads_left_waiting(self) -> frozenset[int]:
        return self._link.threads_left_waiting()

    def backend_problem(self) -> str | None:
        # An agent with no action in flight sends nothing: probe Ironic once
        # a request timeout has passed idle, so that a hung Ironic is seen
        # (and said) within about that time by every agent, busy or not.
        if self._ironic.idle_for() >= self._probe_idle:
            with contextlib.suppress(ServiceUnavailable, DriverError):
                self._ironic.probe()  # a failure: the outage holds the reason
        outage = self._ironic.outage
        return outage.reason if outage.down else None

    # -- reads -----------------------------------------------------------------

    def inspect(self, ctx: ActionContext, node: Node) -> BackendNode:
        self._check_context(ctx, node)
        outage = self._ironic.outage
        if outage.down:  # an accept must answer at once: the deploy waits for Ironic
            raise ServiceUnavailable(outage.reason or "Ironic unavailable")
        try:
            with self._link.requesting_now():  # (an accept's RPC thread: a stop leaves it)
                found = self._ironic.get_node(node.uuid, action="inspect", quick=_INSPECT_WITHIN)
        except IronicNodeGone as exc:
            # Deleted from Ironic before the inventory sync retired it:
            # no build can ever succeed here.
            raise NodeNotBuildable(field="node_uuid", value=node.uuid, reason=exc.reason) from exc
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

    def deploy(
        self,
        ctx: ActionContext,
        node: Node,
        progress: ProgressCallback,
        spec: DeploySpec = NO_DEPLOY_SPEC,
    ) -> None:
        """The image goes into ``instance_info`` with the claim (one atomic
        PATCH), the config drive with the request for ``active`` (Ironic builds
        the drive from its JSON and keeps it, shown as ``******``).  Without
        an image Ironic's own default applies (a fake deploy needs none; a
        ``direct`` one refuses, with Ironic's reason as the fault)."""
        self._check_context(ctx, node)
        instance = ctx.instance_uuid
        if instance is None:
            raise ValueError("deploy needs ActionContext.instance_uuid")
        watch = Watch(self._link, ctx, "deploy", self._deploy_timeout, progress)
        try:
            found = watch.read()
        except IronicNodeGone as exc:
            raise NodeNotBuildable(field="node_uuid", value=node.uuid, reason=exc.reason) from exc
        self._refuse_unbuildable(found, instance)
        if found.instance_uuid is None:
            progress("claim")
            found = self._claim(watch, found, _instance_info(spec, node))
        while True:
            step = states.deploy_step(found.provision_state, maintenance=found.maintenance)
            if step is DeployStep.DONE:
                LOG.info(
                    "Instance %s is active on Ironic node %s (agent %s, epoch %d)",
                    instance,
                    node.uuid,
                    self.host,
                    ctx.epoch,
                )
                return
            if step is DeployStep.FOLLOW:
                # A deploy or a cleaning running (perhaps started by the
                # previous owner): follow it to its end.
                found = watch.until_at_rest()
            elif step is DeployStep.START:
                progress("deploy")
                found = watch.request(found, "active", configdrive=spec.config_drive)
            elif step is DeployStep.FAILED:
                # Failed here or under the previous owner (or Ironic's own
                # restart failed it): the agent tears the node down and the
                # build is rescheduled, with Ironic's reason.
                raise DriverError(node.uuid, "deploy", failure(watch.with_reason(found)))
            else:
                # Nothing was deployed: give the claim back, or the node
                # would stay a trap for every later build.
                progress("release")
                watch.call(self._ironic.release, node.uuid)
                raise NodeNotBuildable(
                    field="node_uuid", value=node.uuid, reason=_not_buildable(found)
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
            found.maintenance or found.provision_state in states.NEVER_DEPLOYABLE
        ):
            raise NodeNotBuildable(
                field="node_uuid", value=found.uuid, reason=_not_buildable(found)
            )

    def _claim(self, watch: Watch, found: IronicNode, image_info: dict[str, Any]) -> IronicNode:
        """Set Ironic's claim for the watched instance, with *image_info* in its
        ``instance_info``; the node as it is afterwards."""
        ctx = watch.ctx
        assert ctx.instance_uuid is not None
        info = {"ringfleet_host": ctx.host, "ringfleet_epoch": ctx.epoch, **image_info}
        for attempt in range(1, _CLAIM_ATTEMPTS + 1):
            try:
                watch.call(self._ironic.claim, found.uuid, ctx.instance_uuid, info)
            except IronicClaimConflict as exc:
                found = watch.read()
                if found.instance_uuid == ctx.instance_uuid:
                    break  # our own earlier claim whose answer was lost
                # Claimed by another instance meanwhile: refused for good.
                self._refuse_unbuildable(found, ctx.instance_uuid)
                if attempt == _CLAIM_ATTEMPTS:
                    raise DriverError(found.uuid, "deploy", f"claim refused: {exc}") from exc
                watch.pause()
            else:
                break
        LOG.info(
            "Agent %s claimed Ironic node %s for instance %s (epoch %d)",
            ctx.host,
            found.uuid,
            ctx.instance_uuid,
            ctx.epoch,
        )
        return watch.read()

    # -- destroy ---------------------------------------------------------------

    def destroy(self, ctx: ActionContext, node: Node) -> None:
        self._check_context(ctx, node)
        watch = Watch(self._link, ctx, "destroy", self._teardown_timeout, None)
        try:
            found = watch.read()
        except IronicNodeGone:
            LOG.warning(
                "Ironic has no node %s any more: nothing to tear down for instance %s",
                node.uuid,
                ctx.instance_uuid,
            )
            return
        if ctx.instance_uuid is not None and found.instance_uuid not in (None, ctx.instance_uuid):
            # Never tear down what another instance runs: its own teardown will.
            raise DriverError(
                node.uuid,
                "destroy",
                f"Ironic shows the node claimed by instance {found.instance_uuid}, "
                f"not {ctx.instance_uuid}; not touched",
            )
        requested = 0
        while (step := states.teardown_step(found.provision_state)) not in (
            TeardownStep.DONE,
            TeardownStep.CLEAN_FAILED,
        ):
            if step is TeardownStep.FOLLOW:
                found = watch.until_at_rest()
                continue
            if requested == _TEARDOWN_ATTEMPTS:
                raise DriverError(node.uuid, "destroy", failure(watch.with_reason(found), "still"))
            requested += 1
            found = watch.request(found, "deleted")
        if step is TeardownStep.CLEAN_FAILED:
            found = watch.with_reason(found)
            # The instance is gone (Ironic tore it down and cleared the
            # claim before cleaning): the delete succeeds, and retrying it
            # could not fix the node.  The node stays unschedulable: a build
            # routed to it is refused as not buildable, and the inventory
            # sync marks it so, until an operator fixes it in Ironic.
            LOG.warning(
                "Ironic node %s: cleaning failed after the teardown of instance %s: %s; "
                "the node stays out of scheduling until it is fixed in Ironic",
                node.uuid,
                ctx.instance_uuid,
                found.last_error or "no error",
            )
        if found.instance_uuid is not None:
            # Claimed but never deployed (or Ironic left the claim): release it.
            watch.call(self._ironic.release, node.uuid)
        LOG.info(
            "Ironic node %s torn down for instance %s (%s; agent %s, epoch %d)",
            node.uuid,
            ctx.instance_uuid,
            found.provision_state,
            self.host,
            ctx.epoch,
        )

    # -- rebuild ---------------------------------------------------------------

    def rebuild(
        self,
        ctx: ActionContext,
        node: Node,
        progress: ProgressCallback,
        spec: DeploySpec = NO_DEPLOY_SPEC,
    ) -> None:
        """Ironic's ``rebuild`` of an active node, which ends ``active`` (or
        ``deploy failed``, with Ironic's reason).

        Ironic redeploys what its ``instance_info`` says: *spec*'s image is
        PATCHed there first (the fields of another image the node had
        removed), so a rebuild with a new image deploys it; *spec*'s config
        drive goes with the rebuild request (Ironic rebuilds the drive from
        it).  Without them, the image and drive the deploy left.
        """
        self._check_context(ctx, node)
        watch = Watch(self._link, ctx, "rebuild", self._deploy_timeout, progress)
        try:
            found = watch.read()
        except IronicNodeGone as exc:
            raise NodeNotBuildable(field="node_uuid", value=node.uuid, reason=exc.reason) from exc
        if found.instance_uuid != ctx.instance_uuid:
            raise NodeNotBuildable(
                field="node_uuid",
                value=node.uuid,
                reason=f"Ironic shows the node claimed by {found.instance_uuid}, "
                f"not {ctx.instance_uuid}",
            )
        if found.provision_state != states.ACTIVE:
            # Only an active node can be rebuilt: a deploy or teardown under
            # way is Ironic's own (a 409 locked would be waited out forever).
            raise DriverError(node.uuid, "rebuild", f"Ironic shows it {found.provision_state}")
        if spec.image is not None:
            found = self._set_image(watch, found, _instance_info(spec, node))
        if not found.instance_info.get("image_source"):
            # Nothing to redeploy; and Ironic 39.0.0 answers such a rebuild
            # with a 500 ("cannot access local variable 'auto_lessee'"), which
            # would be waited out as an outage until the deadline.
            raise DriverError(
                node.uuid, "rebuild", "Ironic shows no image_source in its instance_info"
            )
        progress("rebuild")
        done = watch.request(found, "rebuild", configdrive=spec.config_drive)
        if done.provision_state != states.ACTIVE:
            raise DriverError(node.uuid, "rebuild", failure(watch.with_reason(done), "ended"))
        LOG.info(
            "Instance %s rebuilt on Ironic node %s (agent %s, epoch %d)",
            ctx.instance_uuid,
            node.uuid,
            self.host,
            ctx.epoch,
        )

    def _set_image(self, watch: Watch, found: IronicNode, info: dict[str, Any]) -> IronicNode:
        """Make the node's ``instance_info`` describe *info*'s image (one PATCH,
        none when it does already); the node as it is afterwards."""
        current = found.instance_info
        # Said, not left for Ironic to derive: what it derived of the old
        # image (a partition one's) would otherwise stay.
        partition = "kernel" in info and "ramdisk" in info
        info = {**info, "image_type": "partition" if partition else "whole-disk"}
        # A field of the old image the new one lacks (a kernel, an md5
        # checksum) would be deployed with it: removed.
        stale = [key for _f, key in _IMAGE_INFO if key in current and key not in info]
        changed = {key: value for key, value in info.items() if current.get(key) != value}
        if not changed and not stale:
            return found
        watch.call(self._ironic.set_instance_info, found.uuid, changed, stale)
        LOG.info(
            "Ironic node %s: instance %s's image set to %s for its rebuild (agent %s, epoch %d)",
            found.uuid,
            watch.ctx.instance_uuid,
            # No query string: a signed URL's signature is a credential.
            str(info.get("image_source", "")).split("?", 1)[0],
            self.host,
            watch.ctx.epoch,
        )
        return watch.read()

    # -- power -----------------------------------------------------------------

    def set_power(self, ctx: ActionContext, node: Node, target: PowerTarget) -> PowerState:
        self._check_context(ctx, node)
        target = validate_power_target(target)
        watch = Watch(self._link, ctx, "set_power", self._deploy_timeout, None)
        try:
            # A 409 "locked" (Ironic busy with its own task) is retried by
            # the watch; any other refusal is raised at once.
            watch.call(self._ironic.set_power_state, node.uuid, _IRONIC_POWER_TARGETS[target])
        except DriverError as exc:
            hard = _HARD_FALLBACK.get(target)
            if hard is None or "(400)" not in exc.reason:
                raise
            # The node's power interface cannot ask the OS to shut down:
            # Ironic refuses the soft target (400); the hard one does the job.
            LOG.warning(
                "Node %s (instance %s): Ironic refused %s (%s); falling back to %s",
                node.uuid,
                ctx.instance_uuid,
                target,
                exc.reason,
                hard,
            )
            watch.call(self._ironic.set_power_state, node.uuid, _IRONIC_POWER_TARGETS[hard])
        found = watch.until(lambda n: n.target_power_state is None)
        power = power_state_of(found.power_state)
        expected = PowerState.OFF if target.endswith("power off") else PowerState.ON
        if power is not expected:
            raise DriverError(
                node.uuid,
                "set_power",
                f"Ironic shows {found.power_state} after {target}: {found.last_error or ''}",
            )
        return power


#: Image fields of a build and Ironic's ``instance_info`` keys for them.
_IMAGE_INFO: Final = (
    ("source", "image_source"),
    ("os_hash_algo", "image_os_hash_algo"),
    ("os_hash_value", "image_os_hash_value"),
    ("checksum", "image_checksum"),
    ("disk_format", "image_disk_format"),
    ("kernel", "kernel"),
    ("ramdisk", "ramdisk"),
)


def _instance_info(spec: DeploySpec, node: Node) -> dict[str, Any]:
    """The ``instance_info`` of the build's image (none without one), as Nova's
    Ironic driver sets it: the image fields, and ``root_gb`` from the node's
    ``local_gb`` (a partition image's root partition; Ironic ignores it for
    a whole-disk image)."""
    if spec.image is None:
        return {}
    info: dict[str, Any] = {
        key: spec.image[field] for field, key in _IMAGE_INFO if field in spec.image
    }
    local_gb = node.properties.get("local_gb")
    if isinstance(local_gb, (int, str)) and str(local_gb).isdigit() and int(local_gb) > 0:
        info["root_gb"] = int(local_gb)
    return info


def _not_buildable(found: IronicNode) -> str:
    if found.maintenance:
        return f"node is in maintenance in Ironic: {found.maintenance_reason or 'no reason'}"
    return f"Ironic shows the node {found.provision_state}, not deployable"
