# SPDX-License-Identifier: Apache-2.0
"""The driver interface of the compute agent, and loading drivers by entry point.

The agent decides *whether* to act on a node (it owns it, at the epoch it
holds); a driver only knows *how*.  Every driver call carries an
:class:`ActionContext` with that epoch so a driver can record or check it:
this is what lets a test prove, from the drivers' own records, that no two
agents ever acted on one node with overlapping ownership (design invariant 1).

Back ends (the simulator, and later Ironic or Redfish) register a
:class:`ComputeDriver` subclass in the ``ringfleet.compute.drivers``
entry-point namespace and are chosen by name, so adding one never touches the
agent.  ringfleet's own drivers are registered there too (``pyproject.toml``)
and found only there (:mod:`conductor.common.plugins`).
"""

from __future__ import annotations

import abc
import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal, get_args

from oslo_config import cfg
from stevedore.extension import ExtensionManager

from conductor.common import plugins
from conductor.common.exception import DriverError, FieldError, InvalidInput
from conductor.common.objects import Node, PowerState, ProvisionState

__all__ = [
    "DRIVER_NAMESPACE",
    "NO_DEPLOY_SPEC",
    "POWER_TARGETS",
    "ActionContext",
    "BackendNode",
    "ComputeDriver",
    "DeploySpec",
    "PowerTarget",
    "ProgressCallback",
    "load_driver",
    "validate_power_target",
]

LOG = logging.getLogger(__name__)

#: entry-point namespace of compute drivers
DRIVER_NAMESPACE: Final = "ringfleet.compute.drivers"

#: what :meth:`ComputeDriver.set_power` can be asked to do
#: (``soft power off`` and ``soft reboot`` ask the OS to shut down first:
#: compute API 1.3; a back end without them falls back to the hard one)
PowerTarget = Literal["power on", "power off", "reboot", "soft power off", "soft reboot"]
POWER_TARGETS: Final[tuple[str, ...]] = get_args(PowerTarget)

#: called by :meth:`ComputeDriver.deploy` with each provision step's name
ProgressCallback = Callable[[str], None]

_GROUP = "compute_agent"
_OPTION = "driver"


@dataclasses.dataclass(frozen=True, slots=True)
class ActionContext:
    """Who acts on which node, under which claim.

    :ivar node_uuid: the node acted on
    :ivar host: the acting agent (its ``[DEFAULT] host``)
    :ivar epoch: the epoch of the agent's claim on the node; the fencing
        token every action carries
    :ivar instance_uuid: the instance the action is for, if any
    """

    node_uuid: str
    host: str
    epoch: int
    instance_uuid: str | None = None

    def __post_init__(self) -> None:
        if not self.node_uuid:
            raise ValueError("ActionContext.node_uuid must not be empty")
        if not self.host:
            raise ValueError("ActionContext.host must not be empty")
        if isinstance(self.epoch, bool) or not isinstance(self.epoch, int) or self.epoch < 0:
            raise ValueError(f"ActionContext.epoch must be an int >= 0, got {self.epoch!r}")

    @classmethod
    def for_node(cls, node: Node, host: str, instance_uuid: str | None = None) -> ActionContext:
        """The context of *host* acting on *node* under the claim stored with it.

        :param instance_uuid: defaults to the instance the node hosts
        """
        return cls(
            node_uuid=node.uuid,
            host=host,
            epoch=node.owner_epoch,
            instance_uuid=instance_uuid if instance_uuid is not None else node.instance_uuid,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class DeploySpec:
    """What a deploy puts on the node, as the conductor stored it with the instance.

    :ivar image: ``source`` (an http(s) URL), ``os_hash_algo`` and
        ``os_hash_value`` or ``checksum``, ``disk_format``, ``kernel`` and
        ``ramdisk``; ``None``: the back end's default (a fake deploy needs none)
    :ivar config_drive: ``user_data``, ``meta_data`` and ``network_data``
        (the ones given), or ``None``: no config drive.  Left out of
        ``repr()``: user data may hold secrets, and must never reach a log.
    """

    image: Mapping[str, str] | None = None
    config_drive: Mapping[str, Any] | None = dataclasses.field(default=None, repr=False)


#: A deploy of no image and no config drive (the back end's defaults).
NO_DEPLOY_SPEC: Final = DeploySpec()


@dataclasses.dataclass(frozen=True, slots=True)
class BackendNode:
    """What the back end (the hardware, Ironic) shows of a node right now.

    The agent reads it whenever it is about to act on a node it may know
    nothing of -- after a takeover, a re-home, a restart -- instead of
    trusting anything it remembered: memory is a cache of the record.

    :ivar provision_state: where the node is in its life cycle
    :ivar power_state: its power, ``None`` when unknown
    :ivar instance_uuid: the instance the back end has it deployed for (or
        being deployed for), ``None`` when it hosts nothing
    :ivar last_error: the back end's last error about the node, if any
    """

    provision_state: ProvisionState
    power_state: PowerState | None
    instance_uuid: str | None
    last_error: str | None = None


def validate_power_target(target: object) -> PowerTarget:
    """*target* if it is a power target, else :class:`InvalidInput` naming ``target``."""
    if isinstance(target, str) and target in POWER_TARGETS:
        return target  # type: ignore[return-value]  # narrowed by the membership test
    raise InvalidInput(
        [FieldError.about("target", f"must be one of {', '.join(POWER_TARGETS)}", target)]
    )


class ComputeDriver(abc.ABC):
    """How an agent acts on bare-metal nodes.

    One instance per agent, created with the agent's configuration and host.
    Methods may be called from several threads at once for different nodes;
    the agent never runs two actions on one node at the same time, and a
    driver may refuse one (:class:`~conductor.common.exception.DriverError`)
    if it does.  Every method receives the :class:`ActionContext` of the
    action: the agent has checked its claim before calling.

    Failures the hardware reports are raised as
    :class:`~conductor.common.exception.DriverError`; anything else is a bug.
    """

    #: the name the driver is registered under
    name: str = ""
    #: Whether the agent reads every owned node's power state each
    #: ``[compute_agent] report_interval`` and reports it.  A back end with
    #: an inventory of its own that the conductors import (Ironic) says no:
    #: one listing per conductor is cheaper than a read per node per agent.
    polls_power: bool = True

    def __init__(self, conf: cfg.ConfigOpts, host: str) -> None:
        self.conf = conf
        self.host = host

    def backend_problem(self) -> str | None:
        """Why this agent cannot reach its back end now, or None if it can.

        Asked every few seconds by the agent, which announces a change to its
        peers and the conductors (``fleet check``: ``BACKEND-UNREACHABLE``).
        A driver whose back end has been idle a while probes it here: the
        call may block, up to the driver's request timeout.  This default has
        no back end to reach.
        """
        return None

    @abc.abstractmethod
    def deploy(
        self,
        ctx: ActionContext,
        node: Node,
        progress: ProgressCallback,
        spec: DeploySpec = NO_DEPLOY_SPEC,
    ) -> None:
        """Provision *node* for ``ctx.instance_uuid`` with *spec*'s image and
        config drive; return when it is active.

        Calls ``progress(step)`` as each provision step starts.  An exception
        raised by *progress* aborts the deploy before that step and is
        re-raised unchanged: this is how the agent stops a deploy whose claim
        it has lost (the node is then left in an error state, to be cleaned
        by its next owner).

        :raises DriverError: the deploy failed; the node needs a destroy
        """

    @abc.abstractmethod
    def destroy(self, ctx: ActionContext, node: Node) -> None:
        """Tear down whatever *node* runs and clean it.

        The node ends powered off, clean and available.  Destroying a node
        that is already clean succeeds.

        :raises DriverError: tear-down or cleaning failed
        """

    @abc.abstractmethod
    def set_power(self, ctx: ActionContext, node: Node, target: PowerTarget) -> PowerState:
        """Power *node* on or off, or reboot it; return the resulting power state.

        :raises InvalidInput: *target* is not a :data:`PowerTarget`
        :raises DriverError: the power action failed
        """

    def rebuild(
        self,
        ctx: ActionContext,
        node: Node,
        progress: ProgressCallback,
        spec: DeploySpec = NO_DEPLOY_SPEC,
    ) -> None:
        """Re-image *node*, which hosts ``ctx.instance_uuid``, in place: the same
        instance redeployed with *spec*'s image and config drive (the
        conductor's record, which a rebuild may have replaced; without them,
        what the deploy left); return when it is active again.  ``progress``
        as for :meth:`deploy`.

        Not abstract: a driver without it refuses (compute API 1.3).

        :raises NodeNotBuildable: the node does not host that instance
        :raises DriverError: the rebuild failed (the instance stays on the node)
        """
        raise DriverError(node.uuid, "rebuild", f"the {self.name} driver cannot rebuild")

    @abc.abstractmethod
    def get_power_state(self, ctx: ActionContext, node: Node) -> PowerState:
        """The current power state of *node*, as the hardware reports it.

        :raises DriverError: the power state cannot be read
        """

    def get_power_states(self, contexts: Sequence[ActionContext]) -> dict[str, PowerState]:
        """The power state of each node of *contexts*, by node uuid.

        The agent's periodic report reads every node it owns at once (see
        :attr:`polls_power`).  A node whose state cannot be read is left out
        (it is reported next time).  This default reads node by node; a back
        end that can read many nodes in one request should override it.
        """
        states: dict[str, PowerState] = {}
        for ctx in contexts:
            try:
                states[ctx.node_uuid] = self.get_power_state(ctx, self._stub(ctx))
            except Exception as exc:  # reported next time
                LOG.debug(
                    "Agent %s: power state of node %s unknown: %s", self.host, ctx.node_uuid, exc
                )
        return states

    @abc.abstractmethod
    def inspect(self, ctx: ActionContext, node: Node) -> BackendNode:
        """What the back end shows of *node* now (read, never changed).

        :raises DriverError: the back end cannot be read
        """

    def close(self) -> None:  # noqa: B027  # optional hook, deliberately not abstract
        """Release the driver's resources (sessions, files); the agent is stopping."""

    def stop_waiting(self) -> None:  # noqa: B027  # optional hook, deliberately not abstract
        """The agent is stopping: every wait for the back end ends now.

        A driver that follows transitions the back end runs on its own (an
        Ironic deploy) raises :class:`~conductor.common.exception.ActionAbandoned`
        from each such wait instead of holding the stop up: the transition
        goes on there, and the next owner resumes it from what the back end
        shows.  Actions the driver carries out itself may finish.
        """

    def threads_left_waiting(self) -> frozenset[int]:
        """Once :meth:`stop_waiting` was called: the threads (idents) inside a
        request to a back end, an action's or an accept's (an RPC call's).

        The stop does not wait for them: a hung back end answers no sooner
        than its request timeout, and what such a request asked for is
        resumed from the back end's record as after a crash.  None by default.
        """
        return frozenset()

    def _check_context(self, ctx: ActionContext, node: Node) -> None:
        """Refuse a context that does not match *node* or this agent: a bug in the caller."""
        if ctx.node_uuid != node.uuid:
            raise ValueError(f"context is for node {ctx.node_uuid}, not {node.uuid}")
        self._check_host(ctx)

    def _check_host(self, ctx: ActionContext) -> None:
        """Refuse a context of another agent: a bug in the caller."""
        if ctx.host != self.host:
            raise ValueError(f"context is for agent {ctx.host!r}, this driver is {self.host!r}")

    @staticmethod
    def _stub(ctx: ActionContext) -> Node:
        """The node of *ctx* when only its identity is known (the periodic power read)."""
        return Node(uuid=ctx.node_uuid, name=ctx.node_uuid, resource_class="-")


def load_driver(
    name: str,
    conf: cfg.ConfigOpts,
    host: str,
    *,
    manager: ExtensionManager[Any] | None = None,
) -> ComputeDriver:
    """The driver *name*, instantiated with ``(conf, host)``.

    :param manager: the extensions to look *name* up in; by default a
        stevedore manager over the ``ringfleet.compute.drivers`` entry points
        (tests pass ``DriverManager.make_test_instance(...)``)
    :raises ConfigurationError: about ``[compute_agent] driver``: unknown
        name, a name registered twice, a plugin that fails to import, is not a
        :class:`ComputeDriver` subclass or fails to start
    """
    (plugin,) = plugins.find(
        DRIVER_NAMESPACE, [name], group=_GROUP, option=_OPTION, kind="driver", manager=manager
    ).values()
    driver = plugins.instantiate(
        plugin,
        name,
        ComputeDriver,  # type: ignore[type-abstract]  # only checked against, never called
        conf,
        host,
        group=_GROUP,
        option=_OPTION,
        kind="driver",
    )
    LOG.info("Agent %s uses compute driver %s (%s)", host, name, type(driver).__qualname__)
    return driver
