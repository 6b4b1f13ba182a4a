"""RPC endpoint: nodes and flavors (create, import, list, show, maintenance, move)."""

from __future__ import annotations

import logging
from typing import Any

import oslo_messaging as messaging

from conductor.common import checks
from conductor.common.checks import validate_name
from conductor.common.exception import ConfigurationError, Conflict, FieldError, InvalidInput
from conductor.common.tenancy import Caller
from conductor.db import flavors, ownership
from conductor.db import nodes as node_db
from conductor.db.engine import Database
from conductor.fleet_view import FleetView
from conductor.ironic_sync import IronicInventorySync
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

__all__ = ["InventoryEndpoint"]

LOG = logging.getLogger(__name__)


def _for_caller(ctxt: dict[str, Any], nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Nodes as the caller may see them: a node's instance is any project's,
    so only admins see which (invariant 12); others see that it is taken."""
    if Caller.from_ctxt(ctxt).is_admin:
        return nodes
    return [{**n, "instance_uuid": None} if n.get("instance_uuid") else n for n in nodes]


class InventoryEndpoint:
    """Node and flavor methods of the conductor RPC API (since 1.0; ``set_node``
    1.1; ``import_nodes(dry_run=)`` 1.3; ``sync_ironic_nodes`` 1.7)."""

    target = messaging.Target(version=API_VERSION)

    def __init__(
        self, db: Database, fleet: FleetView, ironic_sync: IronicInventorySync | None = None
    ) -> None:
        self._db = db
        self._fleet = fleet
        self._ironic_sync = ironic_sync

    # -- nodes ---------------------------------------------------------------

    def create_node(self, ctxt: dict[str, Any], node: Any) -> dict[str, Any]:
        spec = validate_node_spec(node, path="node")
        [created] = node_db.create_nodes(self._db, [spec])
        LOG.info("Node %s (%s) created", created.uuid, created.name)
        return created.to_dict()

    def import_nodes(
        self, ctxt: dict[str, Any], nodes: Any, dry_run: Any = False
    ) -> dict[str, Any]:
        """Create many nodes, all or none (every bad entry is reported).

        ``dry_run`` (1.3) checks the entries and reports *every* one whose
        name or uuid is stored already, writing nothing: a client importing
        a large file in several calls checks all of it first.
        """
        specs = validate_node_specs(nodes)
        if arguments.check_bool(dry_run, "dry_run"):
            clashes = node_db.existing_clashes(self._db, specs)
            if clashes:
                raise InvalidInput(clashes)
            return {"created": 0, "checked": len(specs), "uuids": []}
        created = node_db.create_nodes(self._db, specs)
        LOG.info("Imported %d nodes", len(created))
        return {"created": len(created), "uuids": [n.uuid for n in created]}

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
        if found.owner is None or found.uuid in result.refused:
            # Free, or changed meanwhile: a plain claim decides.
            ownership.claim_nodes(
                self._db, target, [found.uuid], live_members=live, rehome_grace=0.0
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
        return moved.to_dict()

    # -- flavors ---------------------------------------------------------------

    def create_flavor(self, ctxt: dict[str, Any], flavor: Any) -> dict[str, Any]:
        created = flavors.create_flavor(self._db, validate_flavor_spec(flavor))
        LOG.info("Flavor %s created", created.name)
        return created.to_dict()

    def list_flavors(self, ctxt: dict[str, Any]) -> list[dict[str, Any]]:
        return [f.to_dict() for f in flavors.list_flavors(self._db)]

    def show_flavor(self, ctxt: dict[str, Any], flavor: Any) -> dict[str, Any]:
        return flavors.get_flavor(self._db, validate_name(flavor, "flavor")).to_dict()

    def delete_flavor(self, ctxt: dict[str, Any], flavor: Any) -> None:
        name = validate_name(flavor, "flavor")
        flavors.delete_flavor(self._db, name)
        LOG.info("Flavor %s deleted", name)
