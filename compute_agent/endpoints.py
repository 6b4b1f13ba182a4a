"""RPC endpoint of the compute agent (topic ``ringfleet-compute``, server = host)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import oslo_messaging as messaging

from compute_agent.actions import NodeActions
from compute_agent.drivers.base import validate_power_target
from conductor.endpoints import payload
from conductor.exception import FieldError, InvalidInput
from conductor.objects import Node
from conductor.validation import validate_uuid

__all__ = ["ComputeEndpoint"]

LOG = logging.getLogger(__name__)


def _node(value: object) -> Node:
    if not isinstance(value, dict):
        raise InvalidInput([FieldError.about("node", "must be a node object", value)])
    try:
        uuid = validate_uuid(value.get("uuid"), "node.uuid")
        return Node.from_dict({**value, "uuid": uuid})
    except (KeyError, ValueError, TypeError) as exc:
        if isinstance(exc, InvalidInput):
            raise
        raise InvalidInput([FieldError.about("node", f"malformed: {exc}", value)]) from None


class ComputeEndpoint:
    """Methods of the compute agent RPC API (since 1.0)."""

    target = messaging.Target(version="1.0")

    def __init__(
        self,
        host: str,
        actions: NodeActions,
        status: Callable[[], dict[str, Any]],
        drain: Callable[[], None],
    ) -> None:
        self._host = host
        self._actions = actions
        self._status = status
        self._drain = drain

    def build_instance(
        self, ctxt: dict[str, Any], *, instance_uuid: Any, node: Any, epoch: Any
    ) -> str:
        """Accept a build (quickly) and deploy in the background; idempotent."""
        instance = validate_uuid(instance_uuid, "instance_uuid")
        target = _node(node)
        held = payload.check_epoch(epoch, "epoch")
        return self._actions.build(instance, target, held)

    def destroy_instance(
        self, ctxt: dict[str, Any], *, instance_uuid: Any, node: Any, epoch: Any
    ) -> str:
        """Tear the node down and clean it, in the background."""
        instance = validate_uuid(instance_uuid, "instance_uuid")
        target = _node(node)
        held = payload.check_epoch(epoch, "epoch")
        return self._actions.destroy(instance, target, held)

    def set_power_state(self, ctxt: dict[str, Any], *, node: Any, epoch: Any, target: Any) -> str:
        found = _node(node)
        held = payload.check_epoch(epoch, "epoch")
        state = self._actions.set_power(found, held, validate_power_target(target))
        return state.value

    def ping(self, ctxt: dict[str, Any]) -> dict[str, Any]:
        """Liveness and a summary: host, membership state, owned, pinned, in flight."""
        return self._status()

    def drain(self, ctxt: dict[str, Any]) -> str:
        """Hand every node, pins included, to its ring successor, then stop.

        Returns at once; the agent leaves the group when the hand-over is done.
        """
        LOG.info("Agent %s asked to drain", self._host)
        threading.Thread(target=self._drain, name=f"drain-{self._host}", daemon=True).start()
        return "draining"
