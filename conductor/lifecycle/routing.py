# SPDX-License-Identifier: Apache-2.0
"""Routing builds and teardowns to the agent that owns the node.

The conductor reads the node's ``(owner, epoch)`` and calls that agent with
it; the agent refuses (``NotOwner``) when the claim moved meanwhile, and the
conductor re-reads and routes again.  An accept that times out is retried
while the owner is a live member (the agent de-duplicates by instance id);
when the owner is gone, the build waits for the takeover and goes to the
new owner.  A refusal retrying cannot fix (:class:`NodeNotBuildable`: the
back end shows the node hosting another instance) is not retried: the
attempt fails at once and the build is rescheduled, with the agent's reason
as its fault.

Accepts are batched per agent the way agents batch their results
(:mod:`compute_agent.reporting`): a build for an agent no call is in flight
to goes out at once, alone (``build_instance``, nothing waits for a batch to
fill); builds for that agent that become ready while the call is in flight
are queued, and sent together when it returns (``build_instances``, compute
API 1.1).  The calls are made by a pool of *sender* threads (``[conductor]
accept_senders``), one at a time per agent, so a build worker hands the
accept over and goes back to scheduling at once: with many agents, a worker
that waited for each accept itself spent most of its time waiting (at 10
agents, 44% of the workers' time went to single ``build_instance`` round
trips, and builds/s stayed at 60-80 whatever the fleet's size).  Without a
pool (``senders=0``) the worker makes the call itself, and then sends what
queued up for that agent meanwhile.  While ``[upgrade_levels]
compute`` pins the agents' API below 1.1 (a rolling upgrade from a release
without ``build_instances``), every build gets a call of its own; nothing
is probed.

Every call goes through :class:`~conductor.lifecycle.owner_calls.OwnerCalls`
(the one way to a node's owner, and its one reading of what an answer
means); this module decides what each outcome means for a build, a
teardown and an orphan's clean-up.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import oslo_messaging as messaging

from compute_agent.rpcapi import DEPLOY_SPEC_VERSION, ComputeAPI
from conductor.common import rpc
from conductor.common.exception import DatabaseUnavailable, first_line
from conductor.common.objects import Instance, Node, Ownership
from conductor.db import nodes
from conductor.db.engine import Database
from conductor.db.ownership import Fence
from conductor.fleet_view import FleetView
from conductor.lifecycle.owner_calls import (
    REROUTES,
    Outcome,
    OwnerCalls,
    Reply,
    WaitReasons,
    outcome_of_error,
)
from conductor.lifecycle.queue import Action

__all__ = ["ACCEPT_LANE", "AgentRouter", "Refusals", "Retries", "carries_spec", "deploy_spec"]

LOG = logging.getLogger(__name__)


#: The compute API version that has ``build_instances``.
_BATCHED_VERSION = "1.1"


class Retries(Protocol):
    """Where a build or teardown that cannot be routed yet goes (the build queue)."""

    def retry_later(self, instance_uuid: str, action: Action, delay: float = 2.0) -> None: ...


class Refusals(Protocol):
    """Where an owner's definitive refusal goes (the build results): the attempt fails."""

    def refused(
        self, instance_uuid: str, node_uuid: str, fault: str, fence: Fence, *, clean: bool = False
    ) -> None: ...


def carries_spec(instance: Instance) -> bool:
    """Whether routing *instance* needs compute API 1.2 (an image or a config drive)."""
    return instance.image is not None or instance.config_drive is not None


def deploy_spec(instance: Instance) -> dict[str, Any]:
    """The build's image and config drive, as stored with the instance (API 1.2).

    The image without its ``properties``: they are the scheduler's (Nova's
    filters), a deploy takes none, and an agent checks that an image holds
    only strings.
    """
    if not carries_spec(instance):
        return {}
    image = instance.image
    return {
        "image": None if image is None else {k: v for k, v in image.items() if k != "properties"},
        "config_drive": None if instance.config_drive is None else dict(instance.config_drive),
    }


@dataclass(frozen=True)
class _Accept:
    """A build waiting for its owner's accept."""

    instance: Instance
    node: Node
    claim: Ownership


class AgentRouter:
    """Implements :class:`conductor.lifecycle.workers.Router` over the agents' RPC API."""

    def __init__(
        self,
        db: Database,
        fleet: FleetView,
        compute: ComputeAPI,
        retries: Retries,
        refusals: Refusals,
        *,
        accept_timeout: float = 10.0,
        max_batch: int = 50,
        senders: int = 0,
        owners: OwnerCalls | None = None,
    ) -> None:
        """``owners``: the calls to the nodes' owners, shared with the other
        verbs (its ``accept`` lane sends the accepts); by default this
        router's own, with *senders* threads sending."""
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, not {max_batch}")
        self._own_calls = owners is None
        # Its lane's threads start on the first accept (never before a fork).
        self._owners = owners or OwnerCalls(db, fleet, {ACCEPT_LANE: senders})
        self._db = db
        self._compute = compute
        self._accept_timeout = accept_timeout
        self._retries = retries
        # An owner's refusal for good: the attempt fails (if the refusal
        # still holds), the build moves on.
        self._refusals = refusals
        self._max_batch = max_batch
        self._lock = threading.Lock()
        # owner -> builds that became ready while a call to it was in flight;
        # an owner is a key exactly while one worker is sending to it.
        self._waiting: dict[str, list[_Accept]] = {}
        # Agents that refused build_instances although not pinned below it:
        # said once each (the fix is the pin, not a retry).
        self._told_to_pin: set[str] = set()
        self.calls = 0  # accept calls made (for tests)

    @property
    def _waits(self) -> WaitReasons:
        return self._owners.waits

    def route(self, instance: Instance, node: Node, claim: Ownership) -> None:
        """Hand the build to the node's owner; never holds a worker for long.

        ``NotOwner`` is answered by re-reading the claim and routing again at
        once (a few times); a timeout or an unreachable owner puts the build
        back on the queue for later, so one slow agent cannot stall the
        conductor's workers.  While another worker's call to the same owner
        is in flight, the build is left to that worker, which sends it with
        the others that queued up when its call returns, and goes on while
        more queue up (under a steady load one worker per agent sends, the
        others schedule).
        """
        owner = claim.owner
        if owner is None or not self._owners.is_live(owner):
            self._route_one(instance, node, claim)  # waits for the takeover
            return
        with self._lock:
            waiting = self._waiting.get(owner)
            if waiting is not None:
                waiting.append(_Accept(instance, node, claim))
                return
            self._waiting[owner] = []
        batch = [_Accept(instance, node, claim)]
        # Without the lane's threads (none, or the conductor is stopping):
        # this worker sends.
        if not self._owners.in_background(ACCEPT_LANE, self._send_in_background, owner, batch):
            self._send(owner, batch)

    def close(self, timeout: float = 30.0) -> None:
        """Send the accepts already handed over, for up to *timeout* seconds
        (the conductor is stopping; what is not sent stays stored)."""
        if self._own_calls:
            self._owners.close({ACCEPT_LANE: timeout})

    def _send_in_background(self, owner: str, batch: list[_Accept]) -> None:
        try:
            self._send(owner, batch)
        except Exception:  # _send put every build back on the queue
            LOG.exception("Sending accepts to agent %s failed", owner)

    def _send(self, owner: str, batch: list[_Accept]) -> None:
        """Send *batch* to *owner*, then whatever queued up for it meanwhile."""
        try:
            while batch:
                batch = [a for a in batch if not self._pinned_below_spec(a)]
                if len(batch) > 1 and self._compute.can_send_version(_BATCHED_VERSION):
                    self._route_batch(owner, batch)
                else:
                    for accept in batch:
                        self._route_one(accept.instance, accept.node, accept.claim)
                with self._lock:
                    waiting = self._waiting[owner]
                    batch = waiting[: self._max_batch]
                    del waiting[: self._max_batch]
                    if not batch:
                        del self._waiting[owner]
        except BaseException:
            # Never strand a queued build: whatever is left goes back on the queue.
            with self._lock:
                left = batch + self._waiting.pop(owner, [])
            for accept in left:
                self._later(accept.instance, accept.node, "sending failed")
            raise

    def _route_batch(self, owner: str, batch: list[_Accept]) -> None:
        """One ``build_instances`` call; each build's refusal handled on its own."""
        try:
            self.calls += 1
            reply = self._compute.build_instances(
                owner,
                [
                    {
                        "instance_uuid": a.instance.uuid,
                        "node": a.node.to_dict(),
                        "epoch": a.claim.epoch,
                        **deploy_spec(a.instance),
                    }
                    for a in batch
                ],
                timeout=self._accept_timeout,
            )
        except messaging.RemoteError as exc:
            if exc.exc_type not in rpc.NOT_SERVED:
                self._batch_waits(owner, batch, first_line(exc))
                return
            self._unbatched(owner, batch, exc.exc_type)
            return
        except messaging.MessagingTimeout:
            # What queued up meanwhile would wait as long: back on the queue too.
            with self._lock:
                left = self._waiting.get(owner, [])
                batch = batch + left
                left.clear()
            self._batch_waits(owner, batch, "no answer in time")
            return
        except Exception as exc:  # any other failure: never drop a build
            self._batch_waits(owner, batch, first_line(exc))
            return
        results = reply.get("results") if isinstance(reply, dict) else None
        if not isinstance(results, list) or len(results) != len(batch):
            self._batch_waits(owner, batch, "unexpected reply")
            return
        self._owners.outages.answered(owner)
        for accept, result in zip(batch, results, strict=True):
            try:
                self._batch_item_done(owner, accept, result)
            except DatabaseUnavailable:  # logged once by the database
                self._later(accept.instance, accept.node, "the database is unavailable")
            except Exception:  # one build's trouble must not lose the rest
                LOG.exception(
                    "Instance %s: handling the accept from %s failed; retrying later",
                    accept.instance.uuid,
                    owner,
                )
                self._later(accept.instance, accept.node, "handling the accept failed")

    def _unbatched(self, owner: str, batch: list[_Accept], exc_type: str | None) -> None:
        """An agent of an older release, and no pin: these builds go one by
        one now; the operator is told once how to stop the refusals."""
        if owner not in self._told_to_pin:
            self._told_to_pin.add(owner)
            carried = any(carries_spec(a.instance) for a in batch)
            LOG.warning(
                "Agent %s does not serve build_instances at compute API %s (%s): set "
                "[upgrade_levels] compute = %s on the conductors until every agent is "
                "upgraded",
                owner,
                DEPLOY_SPEC_VERSION if carried else _BATCHED_VERSION,
                exc_type,
                _BATCHED_VERSION if carried else "1.0",
            )
        for accept in batch:
            self._route_one(accept.instance, accept.node, accept.claim)

    def _batch_item_done(self, owner: str, accept: _Accept, result: Any) -> None:
        instance, node, epoch = accept.instance, accept.node, accept.claim.epoch
        error = result.get("error") if isinstance(result, dict) else "malformed reply"
        fence = Fence(owner, epoch)
        if error is None:
            self._settle(instance, Reply(Outcome.ACCEPTED, node, fence, result.get("answer")))
            return
        reason = str(result.get("reason") if isinstance(result, dict) else result)
        outcome = outcome_of_error(error)
        if outcome is not None:
            why = reason if outcome is Outcome.REFUSED else f"{error}: {reason}"
            self._settle(instance, Reply(outcome, node, fence, reason=why, error=error))
            return
        LOG.info(
            "Instance %s: %s refused node %s at epoch %d (%s); re-reading",
            instance.uuid,
            owner,
            node.uuid,
            epoch,
            reason,
        )
        node = nodes.get_node(self._db, node.uuid)
        if node.instance_uuid != instance.uuid:
            LOG.warning("Instance %s no longer holds node %s", instance.uuid, node.uuid)
            return
        claim = Ownership(node.uuid, node.owner, node.owner_epoch, pinned=True)
        self._route_one(instance, node, claim, attempts=REROUTES - 1)

    def _batch_waits(self, owner: str, batch: list[_Accept], why: str) -> None:
        """The owner did not take a batch: said once for all the work waiting on it."""
        self._owners.outages.failed(
            owner,
            why,
            "the work waits; new builds go to other agents meanwhile",
        )
        LOG.debug(
            "Accept of %d builds from %s failed (%s); retrying later: %s",
            len(batch),
            owner,
            why,
            " ".join(a.instance.uuid for a in batch),
        )
        for accept in batch:
            self._retries.retry_later(accept.instance.uuid, "route")

    def _pinned_below_spec(self, accept: _Accept) -> bool:
        """Refuse a build with an image or config drive while ``[upgrade_levels]
        compute`` pins the agents below 1.2; whether it was refused."""
        if not carries_spec(accept.instance) or self._compute.can_send_version(DEPLOY_SPEC_VERSION):
            return False
        self._spec_refused(
            accept.instance,
            accept.node,
            Fence(accept.claim.owner or "", accept.claim.epoch),
            f"[upgrade_levels] compute pins the agents' API below {DEPLOY_SPEC_VERSION}, "
            "which a build with an image or a config drive needs; unpin it once every "
            "agent is upgraded",
        )
        return True

    def _spec_refused(self, instance: Instance, node: Node, fence: Fence, reason: str) -> None:
        """The build cannot be sent with its image and config drive: fail the
        attempt (the node untouched, so clean) rather than deploy without them."""
        LOG.warning(
            "Instance %s: not routed to %s for node %s: %s; rescheduling",
            instance.uuid,
            fence.owner,
            node.uuid,
            reason,
        )
        self._refusals.refused(
            instance.uuid,
            node.uuid,
            f"not sent to agent {fence.owner}: {reason}",
            fence,
            clean=True,
        )

    def _route_one(
        self, instance: Instance, node: Node, claim: Ownership, attempts: int = REROUTES
    ) -> None:
        """One ``build_instance`` call, re-read and repeated on ``NotOwner``."""
        if self._pinned_below_spec(_Accept(instance, node, claim)):
            return

        def build(fence: Fence, node: Node) -> Any:
            self.calls += 1
            return self._compute.build_instance(
                fence.owner,
                instance_uuid=instance.uuid,
                node=node.to_dict(),
                epoch=fence.epoch,
                timeout=self._accept_timeout,
                **deploy_spec(instance),
            )

        reply = self._owners.call(
            f"Instance {instance.uuid}",
            node,
            build,
            fence=Fence(claim.owner or "", claim.epoch),
            holds=lambda read: read.instance_uuid == instance.uuid,
            attempts=attempts,
        )
        self._settle(instance, reply)

    def _settle(self, instance: Instance, reply: Reply[Any]) -> None:
        """What an owner's answer to a build's accept means for the build."""
        node, fence = reply.node, reply.fence
        if reply.outcome is Outcome.ACCEPTED:
            self._waits.forget(instance.uuid)
            self._log_accepted(instance, node, fence.owner, fence.epoch, reply.answer)
        elif reply.outcome is Outcome.MOOT:
            LOG.warning("Instance %s no longer holds node %s", instance.uuid, node.uuid)
        elif reply.outcome is Outcome.REFUSED and reply.untouched and carries_spec(instance):
            # An agent older than 1.2 (and no pin): it would deploy without
            # the image; another node's owner may be newer.
            self._spec_refused(
                instance,
                node,
                fence,
                f"the agent does not serve compute API {DEPLOY_SPEC_VERSION} "
                f"({reply.error}), which a build with an image or a config drive needs",
            )
        elif reply.outcome is Outcome.REFUSED:
            # The owner refused for good: fail this attempt now, never retry it.
            LOG.warning(
                "Instance %s: %s refused node %s for good (%s); rescheduling",
                instance.uuid,
                fence.owner,
                node.uuid,
                reply.reason,
            )
            self._refusals.refused(
                instance.uuid,
                node.uuid,
                f"refused by agent {fence.owner}: {reply.reason}",
                fence,
                clean=reply.untouched,
            )
        else:
            self._later(instance, node, reply.reason, fence.owner, reply)

    def _later(
        self,
        instance: Instance,
        node: Node,
        why: str,
        owner: str | None = None,
        reply: Reply[Any] | None = None,
    ) -> None:
        """Back on the queue: routed again in a while, to whoever owns the node then.

        Said once per build and cause (then DEBUG): a WARNING when the owner
        refused it, INFO when the owner is not live (a takeover comes); at
        DEBUG when the owner cannot take any work (said once for all).
        """
        level = logging.INFO if reply is None or reply.error is None else logging.WARNING
        LOG.log(
            logging.DEBUG
            if reply is not None and reply.outage
            else self._waits.level(instance.uuid, why, level),
            "Instance %s waits for node %s to have a reachable owner (%s: %s); retrying later",
            instance.uuid,
            node.uuid,
            owner or node.owner,
            why,
        )
        self._retries.retry_later(instance.uuid, "route")

    @staticmethod
    def _log_accepted(instance: Instance, node: Node, owner: str, epoch: int, answer: Any) -> None:
        # The build workers logged the allocation (node, owner, epoch) at
        # INFO already: the usual answer adds nothing an operator needs, and
        # an INFO line per build is a few percent of a busy conductor's CPU.
        LOG.log(
            logging.DEBUG if answer == "accepted" else logging.INFO,
            "Instance %s routed to %s for node %s (epoch %d): %s",
            instance.uuid,
            owner,
            node.uuid,
            epoch,
            answer,
        )

    def destroy(self, instance: Instance) -> bool:
        if instance.node_uuid is None:
            return True
        node = nodes.get_node(self._db, instance.node_uuid)
        reply = self._owners.call(f"Instance {instance.uuid}", node, self._destroyer(instance.uuid))
        if reply.outcome is Outcome.ACCEPTED:
            self._waits.forget(instance.uuid + "/teardown")
            return True
        # Re-homing first when the owner is gone: a node is never left dirty.
        LOG.log(
            logging.DEBUG
            if reply.outage
            else self._waits.level(instance.uuid + "/teardown", reply.reason, logging.INFO),
            "Instance %s: teardown of node %s by %s not accepted yet: %s; retrying",
            instance.uuid,
            node.uuid,
            reply.fence.owner or None,
            reply.reason,
        )
        return False

    def _destroyer(self, instance_uuid: str) -> Callable[[Fence, Node], Any]:
        """The owner's fenced ``destroy_instance`` of *instance_uuid*."""

        def destroy(fence: Fence, node: Node) -> Any:
            return self._compute.destroy_instance(
                fence.owner,
                instance_uuid=instance_uuid,
                node=node.to_dict(),
                epoch=fence.epoch,
                timeout=self._accept_timeout,
            )

        return destroy

    def clean_orphan(self, node: Node, instance_uuid: str, *, what: str | None = None) -> bool:
        """Ask *node*'s owner to tear down what the back end still holds of
        *instance_uuid* on it; whether the owner took it.

        *what* says why in the log (default: Ironic still holds the claim).
        The sweeper asks the same for an attempt it failed (timed out), and
        so does a success reported after that: the deploy may have gone on.

        For the Ironic sync's orphan claims (:mod:`conductor.ironic_sync`):
        ringfleet no longer places the instance on the node, which hosts
        nothing and is ``error``, but Ironic still shows it claimed by the
        instance.  The same call as a delete's (``destroy_instance`` at the
        node's epoch): the agent tears the node down only while Ironic shows
        it claimed by that instance (or by none), never by another, and
        reports the teardown (:meth:`conductor.lifecycle.results.BuildResults.report_destroyed`).
        Only a live owner is asked; nothing is retried here: the next sync
        pass asks again while the claim is there.
        """
        key = f"{node.uuid}/orphan"
        again = "the next sync pass asks again"
        if what is None:
            what = (
                f"Ironic still holds instance {instance_uuid}, which ringfleet no longer "
                "places there"
            )
        else:
            again = "a success its deploy reports later asks again"
        reply = self._owners.call(f"Node {node.uuid}", node, self._destroyer(instance_uuid))
        owner = reply.fence.owner or None
        if reply.outcome is Outcome.ACCEPTED:
            self._waits.forget(key)
            LOG.info("Node %s: %s; its owner %s tears it down", node.uuid, what, owner)
            return True
        if reply.error is None:  # no live owner to ask
            LOG.log(
                self._waits.level(key, reply.reason, logging.INFO),
                "Node %s: %s; %s: the teardown waits for the next owner",
                node.uuid,
                what,
                reply.reason,
            )
            return False
        LOG.log(
            logging.DEBUG
            if reply.outage
            else self._waits.level(key, reply.reason, logging.WARNING),
            "Node %s: %s; its owner %s did not take the teardown: %s; %s",
            node.uuid,
            what,
            owner,
            reply.reason,
            again,
        )
        return False


#: The :class:`OwnerCalls` lane whose threads send the accepts (``[conductor] accept_senders``).
ACCEPT_LANE = "accept-sender"
