"""Importing Ironic's inventory: nodes enrolled in Ironic appear in ringfleet.

One pass (:meth:`IronicInventorySync.run`) lists Ironic's nodes -- only the
fields ringfleet reads, a page of 1,000 at a time, per configured shard --
and brings ringfleet's records in line:

* a node ringfleet does not have is created (uuid, name, resource class,
  traits, properties with ``capabilities``, node group from its shard or
  conductor group, provision and power state, maintenance);
* a known node's description (resource class, traits, properties) follows
  Ironic's, and so do the states scheduling depends on: Ironic's
  maintenance (stored with the reason prefixed ``ironic:``, so that the sync
  clears only the maintenance it set, never an operator's), an idle node's
  provision state (cleaning, manageable, enroll... are not schedulable; an
  ``error`` ringfleet set after a failed build clears once Ironic shows the
  node available again) and its power state;
* a node that vanished from Ironic is *retired* -- put in maintenance with
  the reason ``ironic: node removed from Ironic`` -- never deleted, so an
  instance it hosts keeps its record;
* what Ironic shows of every listed node, whatever ringfleet does with it,
  is recorded for ``fleet check``
  (:func:`conductor.db.nodes.record_back_end_observations`): its raw
  provision state, its claim (``instance_uuid``) and from when that
  observation holds (``backend_seen_at``: the instant the pass began
  listing, so never later than what it saw).  Only rows that need it are
  written, so a quiet pass writes nothing: a node whose state or claim
  changed in Ironic, and one that ringfleet changed after it was last
  observed and before this pass began listing (the node, the instance it
  hosts or the instance claiming it in Ironic: their ``updated_at``),
  whose unchanged observation is then dated to this pass.  fleet check
  compares a node only when ``backend_seen_at`` is no older than those
  ``updated_at`` (a change made since waits for the next pass).  A node
  created by the pass carries its observation from the start (dated with
  the row); a node gone from Ironic has its observation cleared.

Imported nodes carry the properties ``ironic_shard`` and
``ironic_conductor_group``: they mark them as Ironic's (nodes created by
hand are never retired by the sync) and show where they came from.

Every conductor may run the periodic pass (``[ironic] sync_interval``):
each change is a compare-and-swap on what the pass read, so two passes at
once change each node once.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import threading
import time
from typing import Any, Final

from oslo_config import cfg

from conductor.common.conf import ironic as ironic_conf
from conductor.common.exception import InvalidInput, RingfleetError
from conductor.common.ironic import BaremetalClient, IronicNode, power_state_of, provision_state_of
from conductor.common.objects import Node, ProvisionState
from conductor.db import nodes as db_nodes
from conductor.db.engine import Database
from conductor.db.models import utcnow
from conductor.validation import NodeSpec, NodeUpdate, validate_node_spec

__all__ = [
    "IRONIC_ACTIVE",
    "IRONIC_FAILED",
    "MAINTENANCE_PREFIX",
    "IronicInventorySync",
    "SyncSummary",
]

LOG = logging.getLogger(__name__)

#: Prefix of the maintenance reasons the sync sets (and alone clears).
MAINTENANCE_PREFIX: Final = "ironic: "
#: The reason of a node removed from Ironic.
REMOVED_REASON: Final = MAINTENANCE_PREFIX + "node removed from Ironic"
#: Properties marking an imported node (and where it came from).
SHARD_PROPERTY: Final = "ironic_shard"
CONDUCTOR_GROUP_PROPERTY: Final = "ironic_conductor_group"

#: Provision states of an idle node, which the sync may change between.
_IDLE: Final = frozenset(
    {
        ProvisionState.AVAILABLE,
        ProvisionState.ENROLL,
        ProvisionState.MANAGEABLE,
        ProvisionState.CLEANING,
        ProvisionState.ERROR,
    }
)
#: Ironic's provision state of a node deployed with an instance.
IRONIC_ACTIVE: Final = "active"
#: Ironic's provision states of a node out of service until someone fixes it.
IRONIC_FAILED: Final = frozenset({"clean failed", "deploy failed", "error"})
#: Longest provision state stored (``nodes.backend_state``).
_STATE_LENGTH: Final = 32
#: How many nodes are created per transaction.
_CREATE_BATCH: Final = 500
#: How many invalid Ironic nodes are named in the log per pass.
_MAX_NAMED: Final = 10


@dataclasses.dataclass
class SyncSummary:
    """What one pass did."""

    listed: int = 0
    created: int = 0
    updated: int = 0
    retired: int = 0
    #: rows whose back-end observation was written (created ones not counted)
    observed: int = 0
    invalid: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "listed": self.listed,
            "created": self.created,
            "updated": self.updated,
            "retired": self.retired,
            "observed": self.observed,
            "invalid": len(self.invalid),
            "invalid_nodes": self.invalid[:_MAX_NAMED],
            "seconds": round(self.seconds, 3),
        }


class IronicInventorySync:
    """Brings ringfleet's node records in line with Ironic's (module docstring)."""

    def __init__(
        self, db: Database, conf: cfg.ConfigOpts, *, client: BaremetalClient | None = None
    ) -> None:
        ironic_conf.register_opts(conf)
        options = conf[ironic_conf.group.name]
        self._db = db
        self._shards: list[str] = list(options.shards)
        self._group_from: str = options.node_group_from
        self._client = client if client is not None else BaremetalClient.from_conf(conf)
        # One pass at a time per conductor (the periodic one and a CLI's).
        self._running = threading.Lock()

    @classmethod
    def from_conf(cls, db: Database, conf: cfg.ConfigOpts) -> IronicInventorySync | None:
        """The sync ``[ironic]`` configures, or ``None`` when it names no Ironic."""
        ironic_conf.register_opts(conf)
        if not conf[ironic_conf.group.name].auth_type:
            return None
        return cls(db, conf)

    def run(self) -> SyncSummary:
        """One pass.

        :raises ServiceUnavailable: Ironic or the database cannot be reached
            (nothing half-applied matters: the next pass re-reads everything)
        """
        with self._running:
            return self._run()

    def _run(self) -> SyncSummary:
        started = time.monotonic()
        # Taken before listing: what the pass reads of Ironic is no older.
        seen_at = utcnow()
        summary = SyncSummary()
        listed: dict[str, IronicNode] = {}
        shards: list[str | None] = list(self._shards) or [None]
        for shard in shards:
            for found in self._client.list_nodes(shard=shard):
                listed[found.uuid] = found
        summary.listed = len(listed)
        known = {
            node.uuid: node
            for node in db_nodes.iter_nodes(self._db)
            if node.uuid in listed or self._in_scope(node)
        }
        sightings = {uuid: _sighting(found) for uuid, found in listed.items()}
        to_record = _to_record(sightings, known, db_nodes.back_end_observations(self._db), seen_at)
        new_specs: list[NodeSpec] = []
        observed: list[db_nodes.BackEndState] = []
        for found in listed.values():
            try:
                spec = self._spec(found)
            except InvalidInput as exc:
                summary.invalid.append(f"{found.uuid}: {exc}")
                continue
            node = known.get(found.uuid)
            if node is None:
                new_specs.append(spec)
                continue
            if self._update_description(node, spec):
                summary.updated += 1
            state = self._observed(node, found, spec)
            if state is not None:
                observed.append(state)
        for start in range(0, len(new_specs), _CREATE_BATCH):
            summary.created += self._create(new_specs[start : start + _CREATE_BATCH], sightings)
        for node in known.values():
            if node.uuid not in listed and not _retired(node):
                observed.append(
                    db_nodes.BackEndState(
                        node.uuid,
                        maintenance=(
                            (node.maintenance, node.maintenance_reason),
                            (True, REMOVED_REASON),
                        ),
                    )
                )
                summary.retired += 1
                LOG.warning(
                    "Node %s (%s) is no longer in Ironic: retired (maintenance); "
                    "instance %s keeps its record",
                    node.uuid,
                    node.name,
                    node.instance_uuid,
                )
        if observed:
            summary.updated += db_nodes.mirror_back_end_states(self._db, observed)
        summary.observed = db_nodes.record_back_end_observations(self._db, to_record, seen_at)
        summary.seconds = time.monotonic() - started
        if summary.invalid:
            LOG.warning(
                "Ironic sync skipped %d nodes ringfleet cannot store: %s",
                len(summary.invalid),
                "; ".join(summary.invalid[:_MAX_NAMED]),
            )
        LOG.info(
            "Ironic sync: %d nodes listed, %d created, %d changes, %d retired, "
            "%d observations recorded in %.2f s",
            summary.listed,
            summary.created,
            summary.updated,
            summary.retired,
            summary.observed,
            summary.seconds,
        )
        return summary

    # -- one node ------------------------------------------------------------------

    def _in_scope(self, node: Node) -> bool:
        """Whether *node* was imported from the part of Ironic this sync lists."""
        if SHARD_PROPERTY not in node.properties:
            return False  # created by hand: never retired by the sync
        return not self._shards or node.properties[SHARD_PROPERTY] in self._shards

    def _spec(self, found: IronicNode) -> NodeSpec:
        """The ringfleet node for *found*, validated as any node is.

        :raises InvalidInput: Ironic holds something ringfleet cannot store
        """
        properties: dict[str, Any] = {
            key: value
            for key, value in found.properties.items()
            if isinstance(value, (str, int, float, bool))  # nested ones are not ours to read
        }
        properties[SHARD_PROPERTY] = found.shard or ""
        properties[CONDUCTOR_GROUP_PROPERTY] = found.conductor_group
        group = {"shard": found.shard or "", "conductor_group": found.conductor_group}.get(
            self._group_from, ""
        )
        state = provision_state_of(found.provision_state)
        power = power_state_of(found.power_state)
        spec: dict[str, Any] = {
            "uuid": found.uuid,
            # Ironic names are optional; a ringfleet name must not be a uuid.
            "name": found.name or f"ironic-{found.uuid}",
            "resource_class": found.resource_class or "baremetal",
            "traits": list(found.traits),
            "properties": properties,
            "group": group,
            "maintenance": found.maintenance,
            "maintenance_reason": _reason(found) if found.maintenance else None,
        }
        if power is not None:
            spec["power_state"] = power.value
        # Set after validation: a client may create nodes only enroll,
        # manageable or available, but the sync stores what Ironic shows.
        return dataclasses.replace(
            validate_node_spec(spec),
            provision_state=state if state in _IDLE else ProvisionState.ERROR,
        )

    def _create(
        self, specs: list[NodeSpec], sightings: dict[str, db_nodes.BackEndObservation]
    ) -> int:
        try:
            return len(db_nodes.create_nodes(self._db, specs, observed=sightings))
        except RingfleetError as exc:
            # A name taken by another node, or a concurrent pass: one by one,
            # so one clash does not keep the others out.
            LOG.debug("Ironic sync: batch of %d refused (%s); creating one by one", len(specs), exc)
        created = 0
        for spec in specs:
            try:
                db_nodes.create_nodes(self._db, [spec], observed=sightings)
                created += 1
            except RingfleetError as exc:
                LOG.warning("Ironic sync: node %s (%s) not imported: %s", spec.uuid, spec.name, exc)
        return created

    def _update_description(self, node: Node, spec: NodeSpec) -> bool:
        remove = frozenset(set(node.properties) - set(spec.properties))
        changed_properties = {
            key: value
            for key, value in spec.properties.items()
            if node.properties.get(key) != value
        }
        update = NodeUpdate(
            properties=changed_properties,
            remove_properties=remove,
            add_traits=spec.traits - node.traits,
            remove_traits=node.traits - spec.traits,
            resource_class=(
                spec.resource_class if spec.resource_class != node.resource_class else None
            ),
        )
        if update == NodeUpdate():
            return False
        db_nodes.update_node(self._db, node.uuid, update)
        return True

    def _observed(
        self, node: Node, found: IronicNode, spec: NodeSpec
    ) -> db_nodes.BackEndState | None:
        provision = None
        wanted = provision_state_of(found.provision_state)
        if (
            node.instance_uuid is None
            and found.instance_uuid is None
            and node.provision_state in _IDLE
            and wanted in _IDLE
            and wanted is not node.provision_state
        ):
            provision = (node.provision_state, wanted)
        power = power_state_of(found.power_state)
        maintenance: tuple[tuple[bool, str | None], tuple[bool, str | None]] | None = None
        if found.maintenance and not node.maintenance:
            maintenance = ((False, node.maintenance_reason), (True, _reason(found)))
        elif (
            not found.maintenance
            and node.maintenance
            and (node.maintenance_reason or "").startswith(MAINTENANCE_PREFIX)
        ):
            # Ours to clear (Ironic's maintenance ended, or the node came back).
            maintenance = ((True, node.maintenance_reason), (False, None))
        if provision is None and power == node.power_state and maintenance is None:
            return None
        return db_nodes.BackEndState(
            node.uuid,
            provision_state=provision,
            set_power=power != node.power_state,
            power_state=power,
            maintenance=maintenance,
        )


def _sighting(found: IronicNode) -> db_nodes.BackEndObservation:
    """What the pass records of *found*: Ironic's provision state and claim."""
    # None is how Ironic before API 1.2 said "available" (provision_state_of).
    state = (found.provision_state or "available")[:_STATE_LENGTH]
    return db_nodes.BackEndObservation(found.uuid, state, found.instance_uuid)


def _to_record(
    sightings: dict[str, db_nodes.BackEndObservation],
    known: dict[str, Node],
    stored: dict[str, db_nodes.StoredObservation],
    seen_at: datetime.datetime,
) -> list[db_nodes.BackEndObservation]:
    """The observations the pass must write (module docstring): of the known
    nodes listed, those :func:`_stale`; of those not listed, an empty one
    where one is stored (gone from Ironic: nothing left to compare).  Nodes
    the pass creates carry theirs from the start."""
    to_record = [
        sighting
        for uuid, sighting in sightings.items()
        if uuid in known and _stale(stored.get(uuid), sighting, seen_at)
    ]
    for uuid in known.keys() - sightings.keys():
        kept = stored.get(uuid)
        if kept is not None and (kept.state, kept.instance_uuid) != (None, None):
            to_record.append(db_nodes.BackEndObservation(uuid, None, None))
    return to_record


def _stale(
    stored: db_nodes.StoredObservation | None,
    sighting: db_nodes.BackEndObservation,
    seen_at: datetime.datetime,
) -> bool:
    """Whether the pass must write *sighting*: Ironic shows something else
    than stored, or ringfleet changed the node (or its instances) after the
    stored observation and before this pass began listing (a change after
    that is for the next pass to date)."""
    if stored is None or stored.seen_at is None:
        return True
    if (stored.state, stored.instance_uuid) != (sighting.state, sighting.instance_uuid):
        return True
    return stored.seen_at < stored.changed_at <= seen_at


def _reason(found: IronicNode) -> str:
    return MAINTENANCE_PREFIX + (found.maintenance_reason or "maintenance set in Ironic")


def _retired(node: Node) -> bool:
    return node.maintenance and node.maintenance_reason == REMOVED_REASON
