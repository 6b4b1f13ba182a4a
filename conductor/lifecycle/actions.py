# SPDX-License-Identifier: Apache-2.0
"""Power and lifecycle actions routed to the agent that owns the node.

An instance verb (reboot, stop, start, rebuild) is stored first: its task state
(``rebooting``, ``powering-off``...) is the action in flight, and the only
record of it.  Then the action is routed as builds are: the conductor reads
the node's ``(owner, epoch)`` and calls that agent's fenced
``set_power_state`` with it; ``NotOwner`` re-reads and calls again; an
owner that is not live, busy, stopping or unreachable (a 503 from its back
end, a call that timed out) puts the action back on the build queue for
later, and a takeover routes it at once to the new owner
(:meth:`conductor.lifecycle.workers.BuildWorkers.rehomed`, ``resume_work``),
which finishes it from the record.  The answer ends the action: a
compare-and-swap on the very task state it was for, so a late answer never
ends a later verb; a refusal retrying cannot fix (the back end failed the
action, bad input) ends it as ``ACTION_FAILED``, the instance staying where
it was with the reason as its fault.

A rebuild is the agent's ``rebuild_instance`` (compute API 1.3): the same
node re-imaged for the instance it hosts, with the image and config drive
of the instance's record (compute API 1.4), read at each routing: a
rebuild that replaced them stored them with its task state, so an owner
that takes the node over mid-rebuild redeploys the new image.  It is
routed, fenced and recovered the same way, and ends ``active``.  While
``[upgrade_levels] compute`` pins the agents below 1.4, a rebuild of an
instance with an image or config drive fails (its fault says so) rather
than redeploy what the back end has, which may be an image replaced since.

The call waits for the action's end (``[conductor] action_timeout``), so
it runs on its own lane of threads (:data:`ACTION_LANE`), never on a build
worker's; like every call to a node's owner it is one
:meth:`~conductor.lifecycle.owner_calls.OwnerCalls.call`, which reads the
answer the same way for every verb.  A call
to an agent that dies mid-action hangs until that timeout: the takeover's
re-route does not wait for it (one call per action *and owner epoch* runs
at a time), and the hung call, when it ends, finds the action done.

Each action carries the request id stored with it (compute API 1.5): a
peer conductor that carries it on after this one died sends the same id,
and the agent does the verb once (it waits for the call in flight, or
answers what it did).

An operator's node power verb is stored too (:mod:`conductor.db.carriage`,
one per node, the last one asked), routed the same way in the background
(the API answers 202), and forgotten at its end; the node's
``power_state`` follows the owner's answer.  While the node has no live
owner it is tried again every few seconds; a conductor that dies leaves
it to a peer.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Final

from compute_agent.rpcapi import REBUILD_SPEC_VERSION, SOFT_POWER_VERSION, ComputeAPI
from conductor.common import verbs
from conductor.common.exception import NodeNotFound, NotFound, ServiceUnavailable
from conductor.common.instance_states import ACTION_TASKS, Event
from conductor.common.objects import Instance, Node, PowerState, TaskState
from conductor.db import carriage, instances, node_states, nodes
from conductor.db.engine import Database
from conductor.db.ownership import Fence
from conductor.fleet_view import FleetView
from conductor.lifecycle.owner_calls import Outcome, OwnerCalls, Reply
from conductor.lifecycle.routing import Retries, carries_spec, deploy_spec
from conductor.notification_payloads import NodePowerPayload
from conductor.notifications import Notifier

__all__ = ["ACTION_LANE", "POWER_TARGETS", "ActionRouter"]

LOG = logging.getLogger(__name__)

#: The power state the node ends in, by the answer that ends the verb.
_POWER_AFTER: Final[Mapping[Event, PowerState]] = {
    Event.POWERED_ON: PowerState.ON,
    Event.POWERED_OFF: PowerState.OFF,
    Event.REBUILT: PowerState.ON,
}
#: The compute API method of a rebuild (the others are power targets).
_REBUILD: Final = "rebuild_instance"

#: A soft target's hard equivalent, for agents older than compute API 1.3.
_HARD: Final[Mapping[str, str]] = {"soft reboot": "reboot", "soft power off": "power off"}

#: The node power targets of the API (Ironic's names) and what the agent is asked.
POWER_TARGETS: Final[Mapping[str, str]] = {
    "power on": "power on",
    "power off": "power off",
    "rebooting": "reboot",
    "soft power off": "soft power off",
    "soft rebooting": "soft reboot",
}

#: Seconds before a node power request that waits (no live owner) is tried again.
_POWER_RETRY_S = 2.0

#: The :class:`OwnerCalls` lane whose threads carry the actions (they wait for their end).
ACTION_LANE: Final = "action-sender"


class ActionRouter:
    """Routes instance actions and node power verbs to the nodes' owners."""

    def __init__(
        self,
        db: Database,
        fleet: FleetView,
        compute: ComputeAPI,
        retries: Retries,
        *,
        timeout: float = 300.0,
        senders: int = 8,
        notifier: Notifier | None = None,
        owners: OwnerCalls | None = None,
    ) -> None:
        """``owners``: the calls to the nodes' owners, shared with the other
        verbs (its :data:`ACTION_LANE` carries the actions); by default this
        router's own, with *senders* threads."""
        self._db = db
        self._notifier = notifier or Notifier.disabled()
        self._compute = compute
        self._retries = retries
        self._timeout = timeout
        self._own_calls = owners is None
        self._owners = owners or OwnerCalls(db, fleet, {ACTION_LANE: senders})
        self._waits = self._owners.waits

    def close(self) -> None:
        """Stop taking actions; calls in flight are not waited for (their
        records stay, and the next start or takeover routes them again)."""
        if self._own_calls:
            self._owners.close()

    # -- instances ------------------------------------------------------------------

    def act(self, instance_uuid: str) -> None:
        """Route the instance's action in flight (if any) to its node's owner."""
        if not self._owners.in_background(ACTION_LANE, self._act_logged, instance_uuid):
            # The conductor stops: the record stays, its next start routes it.
            LOG.debug("Instance %s: action not routed, the conductor is stopping", instance_uuid)

    def _act_logged(self, instance_uuid: str) -> None:
        try:
            self._act(instance_uuid)
        except ServiceUnavailable as exc:  # the database (logged once by it)
            LOG.debug("Instance %s: action waits: %s", instance_uuid, exc)
            self._retries.retry_later(instance_uuid, "act")
        except Exception:  # never drop an action: it is retried
            LOG.exception("Instance %s: routing its action failed; retrying later", instance_uuid)
            self._retries.retry_later(instance_uuid, "act")

    def _act(self, instance_uuid: str) -> None:
        try:
            instance = instances.get_instance(self._db, instance_uuid)
        except NotFound:
            return
        task = instance.task_state
        if task not in ACTION_TASKS or instance.node_uuid is None:
            return  # done, or overtaken by a delete
        assert task is not None
        # What the owner is asked: the verb table's agent call.
        verb = verbs.BY_TASK[task]
        call = verb.agent
        fault = self._pinned_below(verb, instance)
        if fault is not None:
            # A refusal retrying cannot fix until the pin is lifted.
            self._failed(instance_uuid, task, fault)
            return
        target = call.target or call.method
        request_id = carriage.action_request_id(self._db, instance_uuid)
        if not self._compute.can_send_version(call.version):
            LOG.info(
                "Instance %s: agents are pinned below compute API %s: %s instead of %s",
                instance_uuid,
                call.version,
                _HARD[target],
                target,
            )
            target = _HARD[target]
        self._route(instance, task, instance.node_uuid, target, request_id)

    def _pinned_below(self, verb: verbs.Verb, instance: Instance) -> str | None:
        """Why ``[upgrade_levels] compute`` forbids *verb*'s call for *instance*, if it does.

        A soft power target has a hard equivalent the older agents serve; a
        rebuild has none, and one of an instance with an image or config
        drive needs 1.4: an older agent would redeploy the back end's image,
        which the rebuild may have replaced.
        """
        call = verb.agent
        if call.target in _HARD:
            return None
        if not self._compute.can_send_version(call.version):
            return (
                f"{verb.name} needs compute API {call.version}; the agents "
                "are pinned below it ([upgrade_levels] compute)"
            )
        if (
            call.method == _REBUILD
            and carries_spec(instance)
            and not self._compute.can_send_version(REBUILD_SPEC_VERSION)
        ):
            return (
                "rebuild of an instance with an image or config drive needs compute API "
                f"{REBUILD_SPEC_VERSION}; the agents are pinned below it "
                "([upgrade_levels] compute)"
            )
        return None

    def _route(
        self,
        instance: Instance,
        task: TaskState,
        node_uuid: str,
        target: str,
        request_id: str | None,
    ) -> None:
        """Call the node's owner (one call per action and owner epoch at a
        time); the answer ends the action."""
        uuid = instance.uuid
        reply = self._owners.call(
            f"Instance {uuid}",
            nodes.get_node(self._db, node_uuid),
            functools.partial(self._call, target=target, instance=instance, request_id=request_id),
            once_per=uuid,
        )
        if reply.outcome is Outcome.ACCEPTED:
            assert reply.answer is not None
            self._waits.forget(uuid)
            self._done(uuid, task, reply.node, reply.fence, reply.answer)
        elif reply.outcome is Outcome.REFUSED:
            self._failed(uuid, task, f"{task.value} failed: {reply.reason}")
        elif reply.outcome is Outcome.WAIT:
            self._waiting(uuid, task, reply)
            self._retries.retry_later(uuid, "act")
        # MOOT: the call in flight ends the action

    def _waiting(self, instance_uuid: str, task: TaskState, reply: Reply[PowerState]) -> None:
        """Say once per cause why the action waits (then DEBUG)."""
        if reply.error is None:
            LOG.log(
                self._waits.level(instance_uuid, reply.reason),
                "Instance %s: %s on node %s waits for a live owner (%s)",
                instance_uuid,
                task.value,
                reply.node.uuid,
                reply.reason,
            )
            return
        LOG.log(
            logging.DEBUG if reply.outage else self._waits.level(instance_uuid, reply.reason),
            "Instance %s: %s on node %s by %s not done yet: %s; retrying",
            instance_uuid,
            task.value,
            reply.node.uuid,
            reply.fence.owner,
            reply.reason,
        )

    def _done(
        self,
        instance_uuid: str,
        task: TaskState,
        node: Node,
        fence: Fence,
        power: PowerState,
    ) -> None:
        owner, epoch = fence.owner, fence.epoch
        event = verbs.BY_TASK[task].done
        expected = _POWER_AFTER[event]
        self._record_power(node.uuid, fence, power)
        if power is not expected:
            self._failed(instance_uuid, task, f"{task.value}: the node ended {power.value}")
            return
        if instances.set_state(self._db, instance_uuid, event, task_state=task):
            LOG.info(
                "Instance %s: %s done on node %s by %s (epoch %d): %s",
                instance_uuid,
                task.value,
                node.uuid,
                owner,
                epoch,
                power.value,
            )
            self._notifier.instance(event, instance_uuid, task=task)
        else:
            LOG.info(
                "Instance %s: %s on node %s done, but the instance moved on meanwhile",
                instance_uuid,
                task.value,
                node.uuid,
            )

    def _failed(self, instance_uuid: str, task: TaskState, fault: str) -> None:
        if instances.set_state(
            self._db, instance_uuid, Event.ACTION_FAILED, fault=fault, task_state=task
        ):
            LOG.warning("Instance %s: %s", instance_uuid, fault)
            self._notifier.instance(Event.ACTION_FAILED, instance_uuid, task=task)

    # -- nodes --------------------------------------------------------------------------

    def set_node_power(self, node: Node, target: str) -> None:
        """Store and power *node* (an API target, :data:`POWER_TARGETS`) in the background."""
        self._node_power_later(carriage.store_power_request(self._db, node.uuid, target), 0.0)

    def repower(self, requests: Sequence[carriage.PowerRequest]) -> None:
        """Route again node power requests carried on from a conductor that is gone."""
        for request in requests:
            self._node_power_later(request, 0.0)

    def _node_power_later(self, request: carriage.PowerRequest, delay: float) -> None:
        """Route *request* on the action lane after *delay* seconds."""

        def send() -> None:
            # The conductor stops: the record stays, a peer carries it on.
            self._owners.in_background(ACTION_LANE, self._node_power_logged, request)

        if not delay:
            send()
            return
        timer = threading.Timer(delay, send)
        timer.daemon = True
        timer.start()

    def _node_power_logged(self, request: carriage.PowerRequest) -> None:
        try:
            self._node_power(request)
        except Exception:
            LOG.exception("Node %s: %s failed; retrying", request.node_uuid, request.target)
            self._node_power_later(request, _POWER_RETRY_S)

    def _node_power(self, request: carriage.PowerRequest) -> None:
        node_uuid = request.node_uuid
        if request not in carriage.power_requests_of(self._db, [node_uuid]):
            return  # ended, replaced by a later one, or carried on by a peer
        target = POWER_TARGETS[request.target]
        if target in _HARD and not self._compute.can_send_version(SOFT_POWER_VERSION):
            target = _HARD[target]
        reply = self._owners.call(
            f"Node {node_uuid}",
            nodes.get_node(self._db, node_uuid),
            functools.partial(self._call, target=target, request_id=request.request_id),
        )
        fence = reply.fence
        if reply.outcome is Outcome.WAIT:
            LOG.log(
                self._waits.level(node_uuid, reply.reason),
                "Node %s: %s waits: %s",
                node_uuid,
                target,
                reply.reason,
            )
            self._node_power_later(request, _POWER_RETRY_S)
            return
        if reply.outcome is Outcome.MOOT:
            return  # a call for it is in flight: its answer ends it
        self._waits.forget(node_uuid)
        carriage.end_power_request(self._db, request)
        if reply.outcome is Outcome.ACCEPTED:
            assert reply.answer is not None
            self._record_power(node_uuid, fence, reply.answer)
            LOG.info(
                "Node %s: %s done by %s (epoch %d): %s",
                node_uuid,
                target,
                fence.owner,
                fence.epoch,
                reply.answer.value,
            )
            self._power_set(node_uuid, request.target)
        else:
            why = reply.reason
            LOG.warning("Node %s: %s by %s failed: %s", node_uuid, target, fence.owner, why)
            self._power_set(node_uuid, request.target, fault=why or "failed")

    def _power_set(self, node_uuid: str, target: str, fault: str | None = None) -> None:
        """``node.power_set.end`` (or ``.error`` with *fault*) of an operator's
        power request, with the node as recorded now (as Ironic's)."""
        if not self._notifier.enabled:
            return
        event_type = "node.power_set.error" if fault else "node.power_set.end"
        try:
            node = nodes.get_node(self._db, node_uuid)
        except NodeNotFound:
            return  # deleted meanwhile: nothing to describe
        self._notifier.send(event_type, NodePowerPayload.requested(node, target, fault))

    # -- shared -------------------------------------------------------------------------

    def _call(
        self,
        fence: Fence,
        node: Node,
        *,
        target: str,
        request_id: str | None,
        instance: Instance | None = None,
    ) -> PowerState:
        """One fenced call; the power state the node ended in (a rebuild ends on)."""
        if target == _REBUILD and instance is not None:
            # The record's image and config drive: what this rebuild stored.
            answer = self._compute.rebuild_instance(
                fence.owner,
                instance_uuid=instance.uuid,
                node=node.to_dict(),
                epoch=fence.epoch,
                timeout=self._timeout,
                request_id=request_id,
                **deploy_spec(instance),
            )
            answer = PowerState.ON.value if answer == "active" else answer
        else:
            answer = self._compute.set_power_state(
                fence.owner,
                node=node.to_dict(),
                epoch=fence.epoch,
                target=target,
                timeout=self._timeout,
                request_id=request_id,
            )
        try:
            return PowerState(answer)
        except ValueError:
            raise _UnexpectedAnswer(f"unexpected answer {answer!r}") from None

    def _record_power(self, node_uuid: str, fence: Fence, power: PowerState) -> None:
        # Fenced as the agents' own reports: only while the owner still holds that epoch.
        report: node_states.StateReport = {
            "node_uuid": node_uuid,
            "epoch": fence.epoch,
            "power_state": power.value,
            "provision_state": None,
        }
        node_states.record_node_states(self._db, fence.owner, [report])


class _UnexpectedAnswer(Exception):
    """The owner answered with no power state: retrying later can help."""
