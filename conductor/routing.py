"""Routing builds and teardowns to the agent that owns the node.

The conductor reads the node's ``(owner, epoch)`` and calls that agent with
it; the agent refuses (``NotOwner``) when the claim moved meanwhile, and the
conductor re-reads and routes again.  An accept that times out is retried
while the owner is a live member (the agent de-duplicates by instance id);
when the owner is gone, the build waits for the takeover and goes to the
new owner.
"""

from __future__ import annotations

import logging
from typing import Any

import oslo_messaging as messaging

from compute_agent.rpcapi import ComputeAPI
from conductor.db import nodes
from conductor.db.engine import Database
from conductor.exception import Conflict, NotOwner, ServiceUnavailable
from conductor.fleet_view import FleetView
from conductor.objects import Instance, Node, Ownership

__all__ = ["AgentRouter"]

LOG = logging.getLogger(__name__)


class AgentRouter:
    """Implements :class:`conductor.builds.Router` over the agents' RPC API."""

    def __init__(
        self,
        db: Database,
        fleet: FleetView,
        compute: ComputeAPI,
        *,
        accept_timeout: float = 10.0,
        retry_later: Any = None,
    ) -> None:
        self._db = db
        self._fleet = fleet
        self._compute = compute
        self._accept_timeout = accept_timeout
        # Called with (instance_uuid, action) to try again later.
        self._retry_later = retry_later

    def route(self, instance: Instance, node: Node, claim: Ownership) -> None:
        """Hand the build to the node's owner; never holds a worker for long.

        ``NotOwner`` is answered by re-reading the claim and routing again at
        once (a few times); a timeout or an unreachable owner puts the build
        back on the queue for later, so one slow agent cannot stall the
        conductor's workers.
        """
        for _attempt in range(3):
            owner, epoch = claim.owner, claim.epoch
            if owner is None or not self._is_live(owner):
                break  # wait for the takeover
            try:
                answer = self._compute.build_instance(
                    owner,
                    instance_uuid=instance.uuid,
                    node=node.to_dict(),
                    epoch=epoch,
                    timeout=self._accept_timeout,
                )
                LOG.info(
                    "Instance %s routed to %s for node %s (epoch %d): %s",
                    instance.uuid,
                    owner,
                    node.uuid,
                    epoch,
                    answer,
                )
                return
            except NotOwner as exc:
                # A remote exception's text carries its traceback: first line only.
                LOG.info(
                    "Instance %s: %s refused node %s at epoch %d (%s); re-reading",
                    instance.uuid,
                    owner,
                    node.uuid,
                    epoch,
                    str(exc).splitlines()[0],
                )
            except messaging.MessagingTimeout:
                LOG.warning(
                    "Instance %s: accept from %s for node %s timed out; retrying later",
                    instance.uuid,
                    owner,
                    node.uuid,
                )
                break
            except Conflict as exc:
                LOG.warning(
                    "Instance %s: %s refused node %s: %s",
                    instance.uuid,
                    owner,
                    node.uuid,
                    str(exc).splitlines()[0],
                )
                break
            except Exception as exc:  # any other failure: never drop the build
                LOG.warning(
                    "Instance %s: routing to %s for node %s failed: %s",
                    instance.uuid,
                    owner,
                    node.uuid,
                    str(exc).splitlines()[0],
                )
                break
            node = nodes.get_node(self._db, node.uuid)
            claim = Ownership(node.uuid, node.owner, node.owner_epoch, pinned=True)
            if node.instance_uuid != instance.uuid:
                LOG.warning("Instance %s no longer holds node %s", instance.uuid, node.uuid)
                return
        LOG.info(
            "Instance %s waits for node %s to have a reachable owner", instance.uuid, node.uuid
        )
        if self._retry_later is not None:
            self._retry_later(instance.uuid, "route")

    def destroy(self, instance: Instance) -> bool:
        if instance.node_uuid is None:
            return True
        node = nodes.get_node(self._db, instance.node_uuid)
        if node.owner is None or not self._is_live(node.owner):
            return False  # re-homing first: a node is never left dirty
        try:
            self._compute.destroy_instance(
                node.owner,
                instance_uuid=instance.uuid,
                node=node.to_dict(),
                epoch=node.owner_epoch,
                timeout=self._accept_timeout,
            )
        except Exception as exc:  # the delete is retried, whatever failed
            LOG.info(
                "Instance %s: teardown of node %s by %s not accepted yet: %s",
                instance.uuid,
                node.uuid,
                node.owner,
                str(exc).splitlines()[0],
            )
            return False
        return True

    def _is_live(self, host: str) -> bool:
        try:
            return host in self._fleet.live_members()
        except ServiceUnavailable:
            return True  # cannot tell: assume alive, never act as if it died
