# SPDX-License-Identifier: Apache-2.0
"""RPC endpoint: nodes and flavors (create, import, list, show, maintenance, move,
power, delete)."""

from __future__ import annotations

import logging
from typing import Any, Protocol

import oslo_messaging as messaging

from conductor.common import checks
from conductor.common.checks import validate_name
from conductor.common.exception import (
    ConfigurationError,
    Conflict,
    FieldError,
    InvalidInput,
    NodeInUse,
)
from conductor.common.objects import Node
from conductor.common.tenancy import Caller
from conductor.db import flavors, ownership
from conductor.db import nodes as node_db
from conductor.db.engine import Database
from conductor.fleet_view import FleetView
from conductor.inventory_hints import InventoryHints
from conductor.ironic_sync import (
    EXCLUDE_TRAIT,
    REMOVED_REASON,
    SHARD_PROPERTY,
    IronicInventorySync,
)
from conductor.notification_payloads import (
    FlavorPayload,
    NodeOwner,
    NodePayload,
    NodePowerPayload,
)
from conductor.notifications import Notifier, OwnerChange
from conductor.rpcapi import API_VERSION
from conductor.validation import (
    arguments,
    validate_flavor_spec,
    validate_maintenance,
    validate_node_filters,
    validate_node_spec,
    validate_node_specs,
    validate_node_update,
)

__all__ = ["InventoryEndpoint", "NodePower"]

LOG = logging.getLogger(__name__)


def _for_caller(ctxt: dict[str, Any], nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Nodes as the caller may see them: a node's instance is any project's,
    so only admins see which (invariant 12); others see that it is taken."""
    if Caller.from_ctxt(ctxt).is_admin:
        return nodes
    return [{**n, "instance_uuid": None} if n.get("instance_uuid") else n for n in nodes]


#: Nodes read at a time to notify an import's.
_NODES_READ = 500

#: The node power targets (Ironic's names; :data:`conductor.lifecycle.actions.POWER_TARGETS`).
POWER_TARGETS = ("power on", "power off", "rebooting", "soft power off", "soft rebooting")


class NodePower(Protocol):
    """Routes a node power verb to the node's owner (:mod:`conductor.lifecycle.actions`)."""

    def set_node_power(self, node: Node, target: str) -> None: ...


class InventoryEndpoint:
    """Node and flavor methods of the conductor RPC API (since 1.0; ``set_node``
    1.1; ``import_nodes(dry_run=)`` 1.3, ``(every_clash=)`` 1.18; ``sync_ironic_nodes`` 1.7;
    ``set_node_power_state`` and ``delete_node`` 1.13)."""

    target = messaging.Target(version=API_VERSION)

    def __init__(
        self,
        db: Database,
        fleet: FleetView,
        ironic_sync: IronicInventorySync | None = None,
        *,
        power: NodePower | None = None,
        notifier: Notifier | None = None,
        hints: InventoryHints | None = None,
    ) -> None:
        self._db = db
        self._notifier = notifier or Notifier.disabled()
        # The agents read an operator's change of nodes now, not at their
        # next quiet pass (conductor.inventory_hints).
        self._changed = hints.changed if hints is not None else lambda _groups=None: None
        self._fleet = fleet
        self._ironic_sync = ironic_sync
        self._power = power

    # -- nodes ---------------------------------------------------------------

    def create_node(self, ctxt: dict[str, Any], node: Any) -> dict[str, Any]:
        spec = validate_node_spec(node, path="node")
        [created] = node_db.create_nodes(self._db, [spec])
        LOG.info("Node %s (%s) created", created.uuid, created.name)
        self._changed([created.group])
        self._notify_node("node.create.end", created)
        return created.to_dict()

    def import_nodes(
        self, ctxt: dict[str, Any], nodes: Any, dry_run: Any = False, every_clash: Any = False
    ) -> dict[str, Any]:
        """Create many nodes, all or none (every bad entry is reported).

        ``dry_run`` (1.3) checks the entries and reports *every* one whose
        name or uuid is stored already, writing nothing: a client importing
        a large file in several calls checks all of it first.
        ``every_clash`` (1.18) imports, and reports a clash with the stored
        nodes as ``dry_run`` does (every such entry, ``InvalidInput``)
        rather than ``DuplicateNode`` for the first: a file that fits one
        call is checked and written in it, sent once.
        """
        specs, dry_run, every_clash = checks.collect(
            lambda: validate_node_specs(nodes),
            lambda: arguments.check_bool(dry_run, "dry_run"),
            lambda: arguments.check_bool(every_clash, "every_clash"),
        )
        if dry_run:
            clashes = node_db.existing_clashes(self._db, specs)
            if clashes:
                raise InvalidInput(clashes)
            return {"created": 0, "checked": len(specs), "uuids": []}
        node_db.insert_nodes(self._db, specs, every_clash=every_clash)
        LOG.info("Imported %d nodes", len(specs))
        self._changed({spec.group for spec in specs})
        if self._notifier.enabled:
            # One read of what was written (stored times, defaults), a page at a time.
            for start in range(0, len(specs), _NODES_READ):
                uuids = [spec.uuid for spec in specs[start : start + _NODES_READ]]
                for created in node_db.get_nodes(self._db, uuids):
                    self._notify_node("node.create.end", created)
        return {"created": len(specs), "uuids": [spec.uuid for spec in specs]}

    def sync_ironic_nodes(self, ctxt: dict[str, Any]) -> dict[str, Any]:
        """One pass of the Ironic inventory import (1.7); its summary."""
        if self._ironic_sync is None:
            raise ConfigurationError(
                "ironic",
                "auth_type",
                "this conductor is not configured to reach Ironic: set [ironic] auth_type "
                "(and endpoint_override or auth_url)",
            )
        return self._ironic_sync.run().to_dict()

    def list_nodes(
        self,
        ctxt: dict[str, Any],
        filters: Any = None,
        limit: Any = 1000,
        marker: Any = None,
    ) -> list[dict[str, Any]]:
        checked = validate_node_filters(filters)
        limit = arguments.check_limit(limit)
        if marker is not None:
            marker = checks.validate_uuid(marker, "marker")
        found = node_db.list_node_dicts(self._db, limit=limit, marker=marker, **checked)
        return _for_caller(ctxt, found)

    def show_node(self, ctxt: dict[str, Any], node: Any) -> dict[str, Any]:
        found = node_db.get_node(self._db, arguments.check_ident(node, "node")).to_dict()
        return _for_caller(ctxt, [found])[0]

    def set_node_maintenance(
        self, ctxt: dict[str, Any], node: Any, maintenance: Any, reason: Any = None
    ) -> dict[str, Any]:
        ident = arguments.check_ident(node, "node")
        flag, reason = validate_maintenance(maintenance, reason)
        updated = node_db.set_maintenance(self._db, ident, flag, reason)
        LOG.info("Node %s maintenance %s (%s)", updated.uuid, flag, reason)
        self._changed([updated.group])
        self._notify_node("node.maintenance_set.end", updated)
        return updated.to_dict()

    def set_node(self, ctxt: dict[str, Any], node: Any, changes: Any) -> dict[str, Any]:
        """Change a node's properties, traits or resource class (since 1.1)."""
        ident, update = checks.collect(
            lambda: arguments.check_ident(node, "node"),
            lambda: validate_node_update(changes),
        )
        updated = node_db.update_node(self._db, ident, update)
        LOG.info(
            "Node %s updated: %s", updated.uuid, sorted(k for k, v in update.to_dict().items() if v)
        )
        self._changed([updated.group])
        self._notify_node("node.update.end", updated)
        return updated.to_dict()

    def node_owner(self, ctxt: dict[str, Any], node: Any) -> dict[str, Any]:
        """Who owns a node, at which epoch, and who the ring says should."""
        found = node_db.get_node(self._db, arguments.check_ident(node, "node"))
        ring = self._fleet.ring(found.group)
        return {
            "node_uuid": found.uuid,
            "owner": found.owner,
            "epoch": found.owner_epoch,
            "pinned": found.instance_uuid is not None,
            "ring_owner": ring.owner(found.uuid) if len(ring) else None,
        }

    def move_node(self, ctxt: dict[str, Any], node: Any, host: Any) -> dict[str, Any]:
        """Move a node whose owner is gone to the live agent ``host``.

        This is the operator's explicit move: a pinned node moves at once,
        without waiting for ``rehome_grace``, with its instance's host.  A
        live owner is never robbed: moving a node away from a live agent is
        its own drain or hand-over, done by the agent.
        """
        ident = arguments.check_ident(node, "node")
        target = arguments.check_host(host)
        found = node_db.get_node(self._db, ident)
        live = self._fleet.live_members()
        if target not in live:
            raise InvalidInput([FieldError.about("host", "is not a live agent", target)])
        if found.owner in live and found.owner != target:
            raise Conflict(
                field="owner",
                value=found.owner,
                reason="the owner is alive; drain it or let it hand the node over",
            )
        if found.owner == target:
            return found.to_dict()
        result = ownership.transfer_nodes(
            self._db,
            found.owner or "",
            [ownership.Transfer(found.uuid, found.owner_epoch, target)],
        )
        # The epoch and instance of this move, for its notification (the
        # node may have moved on by the time it is read again).
        epoch, hosted = result.done.get(found.uuid), result.hosted.get(found.uuid)
        if found.owner is None or found.uuid in result.refused:
            # Free, or changed meanwhile: a plain claim decides.
            claim = ownership.claim_nodes(
                self._db, target, [found.uuid], live_members=live, rehome_grace=0.0
            )
            if found.uuid in claim.taken:
                hosted = claim.taken[found.uuid]
                epoch = next(o.epoch for o in claim.granted if o.node_uuid == found.uuid)
        if epoch is not None:
            self._notifier.ownership(
                OwnerChange.MOVE,
                None,
                [
                    NodeOwner(
                        found.uuid,
                        target,
                        epoch,
                        # A claim's previous owner is not known (free, or changed meanwhile).
                        previous_owner=found.owner if found.uuid in result.done else None,
                        instance_uuid=hosted,
                    )
                ],
            )
        moved = node_db.get_node(self._db, found.uuid)
        if moved.owner != target:
            raise Conflict(
                field="owner", value=moved.owner, reason="the node changed hands meanwhile; retry"
            )
        LOG.info(
            "Node %s moved from %s to %s (epoch %d)",
            moved.uuid,
            found.owner,
            moved.owner,
            moved.owner_epoch,
        )
        self._changed([moved.group])
        return moved.to_dict()

    def set_node_power_state(self, ctxt: dict[str, Any], node: Any, target: Any) -> dict[str, Any]:
        """Power a node on or off, or reboot it (an operator's call, 1.13).

        Answers at once (the API's 202) with the node as it is; its owner,
        called at its epoch as for a build, does it in the background and
        ``power_state`` follows.  Nothing records the request: one lost to
        the owner's death is issued again.  An instance on the node keeps
        its state (``instance stop``/``start`` are the tenant's verbs).
        """
        ident = arguments.check_ident(node, "node")
        if not isinstance(target, str) or target not in POWER_TARGETS:
            raise InvalidInput(
                [FieldError.about("target", f"must be one of {', '.join(POWER_TARGETS)}", target)]
            )
        found = node_db.get_node(self._db, ident)
        if self._power is None:
            raise ConfigurationError(
                "DEFAULT", "transport_url", "this conductor has no RPC client for the agents"
            )
        LOG.info("Node %s: %s requested (owner %s)", found.uuid, target, found.owner)
        self._power.set_node_power(found, target)
        if self._notifier.enabled:
            self._notifier.send("node.power_set.start", NodePowerPayload.requested(found, target))
        return found.to_dict()

    def delete_node(self, ctxt: dict[str, Any], node: Any) -> None:
        """Forget a node (an operator's call, 1.13): never deleted in Ironic.

        :raises NodeInUse: it hosts an instance, is not in maintenance, or
            is Ironic's and the next sync pass would import it again; the
            reason says which, and nothing changed
        """
        found = node_db.get_node(self._db, arguments.check_ident(node, "node"))
        self._check_deletable(found)
        if not node_db.delete_node(self._db, found.uuid):
            # Changed between the read and the delete: say what it is now.
            self._check_deletable(node_db.get_node(self._db, found.uuid))
            raise NodeInUse(
                field="instance_uuid",
                value=None,
                reason="an instance is being placed on the node; delete the instance first",
            )
        LOG.info("Node %s (%s) deleted (owner was %s)", found.uuid, found.name, found.owner)
        self._changed([found.group])
        self._notify_node("node.delete.end", found)

    def _notify_node(self, event_type: str, node: Node) -> None:
        if self._notifier.enabled:
            self._notifier.send(event_type, NodePayload.of(node))

    @staticmethod
    def _check_deletable(found: Node) -> None:
        if found.instance_uuid is not None:
            raise NodeInUse(
                field="instance_uuid",
                value=found.instance_uuid,
                reason=f"node hosts instance {found.instance_uuid}; delete the instance first",
            )
        if not found.maintenance:
            raise NodeInUse(
                field="maintenance",
                value="false",
                reason="node is not in maintenance; put it in maintenance first "
                "(nothing is scheduled on it then)",
            )
        imported = SHARD_PROPERTY in found.properties
        if (
            imported
            and found.maintenance_reason != REMOVED_REASON
            and (EXCLUDE_TRAIT not in found.traits)
        ):
            raise NodeInUse(
                field="traits",
                value=None,
                reason=(
                    "node is imported from Ironic: the next sync pass would import it "
                    f"again; add the trait {EXCLUDE_TRAIT} to it in Ironic (and sync), or "
                    "remove it from Ironic, then delete it here"
                ),
            )

    # -- flavors ---------------------------------------------------------------

    def create_flavor(self, ctxt: dict[str, Any], flavor: Any) -> dict[str, Any]:
        created = flavors.create_flavor(self._db, validate_flavor_spec(flavor))
        LOG.info("Flavor %s created", created.name)
        if self._notifier.enabled:
            self._notifier.send("flavor.create", FlavorPayload.of(created))
        return created.to_dict()

    def list_flavors(self, ctxt: dict[str, Any]) -> list[dict[str, Any]]:
        return [f.to_dict() for f in flavors.list_flavors(self._db)]

    def show_flavor(self, ctxt: dict[str, Any], flavor: Any) -> dict[str, Any]:
        return flavors.get_flavor(self._db, validate_name(flavor, "flavor")).to_dict()

    def delete_flavor(self, ctxt: dict[str, Any], flavor: Any) -> None:
        name = validate_name(flavor, "flavor")
        # As it was, for the notification (read only when they are on).
        gone = flavors.get_flavor(self._db, name) if self._notifier.enabled else None
        flavors.delete_flavor(self._db, name)
        LOG.info("Flavor %s deleted", name)
        if gone is not None:
            self._notifier.send("flavor.delete", FlavorPayload.of(gone))
