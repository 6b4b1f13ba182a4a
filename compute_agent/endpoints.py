# SPDX-License-Identifier: Apache-2.0
"""RPC endpoint of the compute agent (topic ``ringfleet-compute``, server = host)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

import oslo_messaging as messaging

from compute_agent.actions import NodeActions
from compute_agent.drivers.base import DeploySpec, validate_power_target
from compute_agent.request_log import check_request_id
from compute_agent.rpcapi import API_VERSION
from conductor.common import checks
from conductor.common.checks import validate_uuid
from conductor.common.exception import FieldError, InvalidInput, RingfleetError, first_line
from conductor.common.objects import Node

__all__ = ["ComputeEndpoint"]

LOG = logging.getLogger(__name__)

#: Builds in one ``build_instances`` call: a conductor sends what queued up
#: for one agent during its previous call, tens at most.
MAX_BUILDS = 1000

_BUILD_KEYS = frozenset({"instance_uuid", "node", "epoch", "image", "config_drive"})


def _node(value: object, field: str = "node") -> Node:
    if not isinstance(value, dict):
        raise InvalidInput([FieldError.about(field, "must be a node object", value)])
    try:
        uuid = validate_uuid(value.get("uuid"), f"{field}.uuid")
        return Node.from_dict({**value, "uuid": uuid})
    except (KeyError, ValueError, TypeError) as exc:
        if isinstance(exc, InvalidInput):
            raise
        raise InvalidInput([FieldError.about(field, f"malformed: {exc}", value)]) from None


def _deploy_spec(image: object, config_drive: object, prefix: str = "") -> DeploySpec:
    """The image and config drive of a build (API 1.2), as the conductor validated
    and stored them: only their shape is checked here.  A bad config drive is
    named, never shown: its user data may hold secrets."""
    errors: list[FieldError] = []
    if image is not None and not (
        isinstance(image, dict) and all(isinstance(v, str) for v in image.values())
    ):
        errors.append(FieldError.about(f"{prefix}image", "must be an image object", image))
    if config_drive is not None and not isinstance(config_drive, dict):
        errors.append(FieldError(f"{prefix}config_drive", "must be a config drive object"))
    if errors:
        raise InvalidInput(errors)
    return DeploySpec(image=image, config_drive=config_drive)  # type: ignore[arg-type]


def _check_builds(value: object) -> list[tuple[str, Node, int, DeploySpec]]:
    """``[{instance_uuid, node, epoch}]``, validated whole: every bad field named."""
    return checks.check_list(
        value, "builds", _check_build, minimum=1, maximum=MAX_BUILDS, what="builds"
    )


def _check_build(item: object, path: str) -> tuple[str, Node, int, DeploySpec]:
    return checks.check_record(item, path, _BUILD_KEYS, _check_build_fields)


def _check_build_fields(item: Mapping[Any, Any], prefix: str) -> tuple[str, Node, int, DeploySpec]:
    instance, node, epoch, spec = checks.collect(
        lambda: validate_uuid(item.get("instance_uuid"), f"{prefix}instance_uuid"),
        lambda: _node(item.get("node"), f"{prefix}node"),
        lambda: checks.check_epoch(item.get("epoch"), f"{prefix}epoch"),
        lambda: _deploy_spec(item.get("image"), item.get("config_drive"), prefix),
    )
    return instance, node, epoch, spec


class ComputeEndpoint:
    """Methods of the compute agent RPC API (see compute_agent/rpcapi.py)."""

    target = messaging.Target(version=API_VERSION)

    def __init__(
        self,
        host: str,
        actions: NodeActions,
        status: Callable[[], dict[str, Any]],
        drain: Callable[[], None],
        *,
        inventory_changed: Callable[[list[str] | None], None] = lambda _groups: None,
        group_changed: Callable[[], None] = lambda: None,
    ) -> None:
        self._host = host
        self._actions = actions
        self._status = status
        self._drain = drain
        self._inventory_changed = inventory_changed
        self._group_changed = group_changed

    def build_instance(
        self,
        ctxt: dict[str, Any],
        *,
        instance_uuid: Any,
        node: Any,
        epoch: Any,
        image: Any = None,
        config_drive: Any = None,
    ) -> str:
        """Accept a build (quickly) and deploy in the background; idempotent.

        ``image`` and ``config_drive`` since 1.2."""
        instance = validate_uuid(instance_uuid, "instance_uuid")
        target = _node(node)
        held = checks.check_epoch(epoch, "epoch")
        spec = _deploy_spec(image, config_drive)
        return self._actions.build(instance, target, held, spec)

    def build_instances(self, ctxt: dict[str, Any], *, builds: Any) -> dict[str, Any]:
        """Several builds in one call (since 1.1), each accepted or refused on its own.

        The call is validated whole first (a malformed item refuses it and
        nothing starts).  Then each build goes through exactly what
        ``build_instance`` does: a stale epoch (``NotOwner``) or a busy node
        for one item does not affect the others.  The reply has one entry per
        build, in order: ``{"answer": "accepted" | "in-progress" | "done"}``
        or ``{"error": <exception class>, "reason": <its first line>}``.
        """
        checked = _check_builds(builds)
        results: list[dict[str, Any]] = []
        for instance, node, epoch, spec in checked:
            try:
                results.append({"answer": self._actions.build(instance, node, epoch, spec)})
            except Exception as exc:  # one refused build must not refuse the others
                if not isinstance(exc, RingfleetError):
                    LOG.exception(
                        "Agent %s: accepting instance %s on node %s failed",
                        self._host,
                        instance,
                        node.uuid,
                    )
                reason = first_line(exc, default="")
                results.append({"error": type(exc).__name__, "reason": reason})
        return {"results": results}

    def destroy_instance(
        self, ctxt: dict[str, Any], *, instance_uuid: Any, node: Any, epoch: Any
    ) -> str:
        """Tear the node down and clean it, in the background."""
        instance = validate_uuid(instance_uuid, "instance_uuid")
        target = _node(node)
        held = checks.check_epoch(epoch, "epoch")
        return self._actions.destroy(instance, target, held)

    def rebuild_instance(
        self,
        ctxt: dict[str, Any],
        *,
        instance_uuid: Any,
        node: Any,
        epoch: Any,
        image: Any = None,
        config_drive: Any = None,
        request_id: Any = None,
    ) -> str:
        """Re-image the node in place for the instance it hosts, and wait (1.3);
        with the ``image`` and ``config_drive`` to deploy since 1.4; at most
        once per ``request_id`` since 1.5 (:mod:`compute_agent.request_log`)."""
        instance = validate_uuid(instance_uuid, "instance_uuid")
        target = _node(node)
        held = checks.check_epoch(epoch, "epoch")
        spec = _deploy_spec(image, config_drive)
        once = check_request_id(request_id)
        return self._actions.rebuild(instance, target, held, spec, request_id=once)

    def set_power_state(
        self, ctxt: dict[str, Any], *, node: Any, epoch: Any, target: Any, request_id: Any = None
    ) -> str:
        """Power the node and wait: its power state; at most once per
        ``request_id`` since 1.5 (:mod:`compute_agent.request_log`)."""
        found = _node(node)
        held = checks.check_epoch(epoch, "epoch")
        power = validate_power_target(target)
        once = check_request_id(request_id)
        state = self._actions.set_power(found, held, power, request_id=once)
        return state.value

    def ping(self, ctxt: dict[str, Any]) -> dict[str, Any]:
        """Liveness and a summary: host, membership state, owned, pinned, in flight."""
        return self._status()

    def inventory_changed(self, ctxt: dict[str, Any], *, groups: Any = None) -> None:
        """Since 1.6 (a fanout cast): an operator changed nodes of ``groups``
        (``None``: of any group); read our share's changes now."""
        if groups is not None and (
            not isinstance(groups, list) or not all(isinstance(g, str) for g in groups)
        ):
            # A cast has no caller to refuse: one read too many costs little.
            LOG.warning(
                "Agent %s: inventory_changed with groups that are not a list of "
                "names (%r): reading every change",
                self._host,
                groups,
            )
            groups = None
        self._inventory_changed(groups)

    def group_changed(self, ctxt: dict[str, Any]) -> None:
        """Since 1.7 (a fanout cast): a conductor saw members leave the
        group; read it now, not at the next watch interval."""
        self._group_changed()

    def drain(self, ctxt: dict[str, Any]) -> str:
        """Hand every node, pins included, to its ring successor, then stop.

        Returns at once; the agent leaves the group when the hand-over is done.
        """
        LOG.info("Agent %s asked to drain", self._host)
        threading.Thread(target=self._drain, name=f"drain-{self._host}", daemon=True).start()
        return "draining"
