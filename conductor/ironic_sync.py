# SPDX-License-Identifier: Apache-2.0
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
  the row); a node gone from Ironic has its observation cleared;
* a node that hosts nothing in ringfleet, idle, but that Ironic shows
  claimed (``instance_uuid``) is stored as ``error``: nothing can be built
  on it (the agent would refuse the build) until the claim is gone, and the
  ``error`` clears as any other once Ironic shows the node available and
  unclaimed.  The pass reads such a node from Ironic again after that
  change, so that its observation is no older than the change;
* an idle ``active`` instance whose node Ironic shows deployed and
  settled ``power off`` is ``stopped`` (:mod:`conductor.power_sync`: the
  back end's power is the truth); a node's ``power_state`` is mirrored
  only when its record did not change since the listing began (an
  action's answer recorded meanwhile is newer);
* then each *orphan claim* the pass can repair
  (:func:`conductor.db.nodes.repairable_orphans`: an ``error`` node hosting
  nothing that Ironic shows claimed by a ringfleet instance ringfleet does
  not place there -- a failed build whose teardown could not run, an
  attempt the sweeper timed out) is handed to the node's owner
  (``clean_orphan``: the agent tears that instance down on that node, as
  for a delete; it never touches a node claimed by another), at most
  :data:`MAX_ORPHANS` per pass.  A claim of an instance ringfleet does not
  know (Nova's, an operator's) is never touched.  The next pass sees the
  node available and unclaimed and makes it schedulable again (invariant
  11).

Imported nodes carry the properties ``ironic_shard`` and
``ironic_conductor_group``: they mark them as Ironic's (nodes created by
hand are never retired by the sync) and show where they came from.

An Ironic node with the trait ``CUSTOM_RINGFLEET_EXCLUDE`` is never
imported (:data:`EXCLUDE_TRAIT`).  ``ringfleet node delete`` only forgets a
node, never deletes it in Ironic, and refuses an imported node the next
pass would import again: one still in Ironic without that trait.  Tag it in
Ironic first (a known node's traits follow Ironic's at the next pass), or
remove it from Ironic (the pass retires it), then delete it.

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
from collections.abc import Callable, Collection, Iterable
from typing import Any, Final

from oslo_config import cfg

from conductor.common.clock import utcnow
from conductor.common.conf import ironic as ironic_conf
from conductor.common.exception import InvalidInput, RingfleetError, ServiceUnavailable
from conductor.common.ironic import states as ironic_states
from conductor.common.ironic.client import BaremetalClient, IronicNode
from conductor.common.ironic.states import power_state_of, provision_state_of
from conductor.common.objects import Node, ProvisionState
from conductor.common.provision_states import IDLE
from conductor.db import nodes as db_nodes
from conductor.db.engine import Database
from conductor.notification_payloads import NodePayload
from conductor.notifications import Notifier
from conductor.power_sync import InstancePowerSync
from conductor.validation import NodeSpec, NodeUpdate, validate_node_spec

__all__ = [
    "EXCLUDE_TRAIT",
    "MAINTENANCE_PREFIX",
    "MAX_ORPHANS",
    "CleanOrphan",
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
#: The trait that keeps an Ironic node out of ringfleet: the sync never
#: imports a node carrying it, so an operator who deleted it in ringfleet
#: (``ringfleet node delete``, refused for an imported node without it) does
#: not see it come back at the next pass.
EXCLUDE_TRAIT: Final = "CUSTOM_RINGFLEET_EXCLUDE"

#: Longest provision state stored (``nodes.backend_state``).
_STATE_LENGTH: Final = 32
#: How many nodes are created per transaction.
_CREATE_BATCH: Final = 500
#: How many invalid Ironic nodes are named in the log per pass.
_MAX_NAMED: Final = 10
#: How many orphan claims a pass hands to their owners at most (the rest:
#: the next passes).
MAX_ORPHANS: Final = 100

#: Asks a node's owner to tear down what the back end still holds of an
#: instance on it (:meth:`conductor.lifecycle.routing.AgentRouter.clean_orphan`);
#: whether the owner took it.
CleanOrphan = Callable[[Node, str], bool]


@dataclasses.dataclass
class SyncSummary:
    """What one pass did."""

    listed: int = 0
    created: int = 0
    updated: int = 0
    retired: int = 0
    #: rows whose back-end observation was written (created ones not counted)
    observed: int = 0
    #: orphan claims handed to their node's owner, who took the teardown
    orphans: int = 0
    #: idle active instances stopped: Ironic showed their node powered off
    stopped: int = 0
    #: Ironic nodes not imported: they carry :data:`EXCLUDE_TRAIT`
    excluded: int = 0
    invalid: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "listed": self.listed,
            "created": self.created,
            "updated": self.updated,
            "retired": self.retired,
            "observed": self.observed,
            "orphans": self.orphans,
            "stopped": self.stopped,
            "excluded": self.excluded,
            "invalid": len(self.invalid),
            "invalid_nodes": self.invalid[:_MAX_NAMED],
            "seconds": round(self.seconds, 3),
        }


class IronicInventorySync:
    """Brings ringfleet's node records in line with Ironic's (module docstring)."""

    def __init__(
        self,
        db: Database,
        conf: cfg.ConfigOpts,
        *,
        client: BaremetalClient | None = None,
        clean_orphan: CleanOrphan | None = None,
        power_sync: InstancePowerSync | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        """``clean_orphan``: hands an orphan claim to the node's owner
        (module docstring); ``None``: orphan claims are only recorded.
        ``power_sync``: instances follow the power listed (module
        docstring); ``None``: only the nodes' records do."""
        ironic_conf.OPTIONS.register(conf)
        options = conf[ironic_conf.group.name]
        self._db = db
        self._shards: list[str] = list(options.shards)
        self._group_from: str = options.node_group_from
        self._client = client if client is not None else BaremetalClient.from_conf(conf)
        self._clean_orphan = clean_orphan
        self._power_sync = power_sync
        # node.create.end of the nodes a pass imports, node.update.end of those
        # it changes (changes Ironic's own tell).
        self._notifier = notifier or Notifier.disabled()
        # Where the next pass starts handing orphans (round robin, when a
        # pass finds more than it hands).
        self._orphans_after: str | None = None
        # One pass at a time per conductor (the periodic one and a CLI's).
        self._running = threading.Lock()
        #: Called after a pass that created, updated or retired nodes (the
        #: conductor tells the agents: :mod:`conductor.inventory_hints`).
        self.on_change: Callable[[], None] = lambda: None

    @classmethod
    def from_conf(
        cls,
        db: Database,
        conf: cfg.ConfigOpts,
        *,
        clean_orphan: CleanOrphan | None = None,
        power_sync: InstancePowerSync | None = None,
        notifier: Notifier | None = None,
    ) -> IronicInventorySync | None:
        """The sync ``[ironic]`` configures, or ``None`` when it names no Ironic."""
        ironic_conf.OPTIONS.register(conf)
        if not conf[ironic_conf.group.name].auth_type:
            return None
        return cls(db, conf, clean_orphan=clean_orphan, power_sync=power_sync, notifier=notifier)

    def run(self) -> SyncSummary:
        """One pass.

        :raises ServiceUnavailable: Ironic or the database cannot be reached
            (nothing half-applied matters: the next pass re-reads everything)
        """
        with self._running:
            summary = self._run()
        if summary.created or summary.updated or summary.retired:
            self.on_change()  # the agents read what the pass changed, now
        return summary

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
        # Nodes this pass puts in error for Ironic's claim: read again below.
        claimed: list[str] = []
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
            state = self._observed(node, found, seen_at)
            if state is not None:
                observed.append(state)
            claimed += [node.uuid] if _held_in_ironic(node, found, seen_at) else []
        # The operator keeps these out of ringfleet (EXCLUDE_TRAIT).
        kept = [spec for spec in new_specs if EXCLUDE_TRAIT not in spec.traits]
        summary.excluded, new_specs = len(new_specs) - len(kept), kept
        for start in range(0, len(new_specs), _CREATE_BATCH):
            summary.created += self._create(new_specs[start : start + _CREATE_BATCH], sightings)
        retirements = _retirements(known.values(), listed)
        observed += retirements
        summary.retired += len(retirements)
        if observed:
            mirrored: set[str] = set()
            summary.updated += db_nodes.mirror_back_end_states(
                self._db, observed, observed_at=seen_at, changed_uuids=mirrored
            )
            self._updated(sorted(mirrored))
        summary.stopped = self._follow_power(listed, seen_at)
        summary.observed = self._record(to_record, claimed, seen_at)
        summary.orphans = self._hand_orphans()
        summary.seconds = time.monotonic() - started
        _log_pass(summary)
        return summary

    def _follow_power(self, listed: dict[str, IronicNode], seen_at: datetime.datetime) -> int:
        """Instances on the listed nodes follow the power Ironic showed
        (:meth:`conductor.power_sync.InstancePowerSync.follow_listing`); how
        many were stopped.  Only nodes deployed (``active``) in Ironic whose
        power is settled (no ``target_power_state``: Ironic is not changing it)."""
        if self._power_sync is None:
            return 0
        observed = {
            uuid: power
            for uuid, found in listed.items()
            if found.target_power_state is None
            and found.provision_state == ironic_states.ACTIVE
            and (power := power_state_of(found.power_state)) is not None
        }
        return self._power_sync.follow_listing(observed, seen_at).stopped

    def _record(
        self,
        to_record: list[db_nodes.BackEndObservation],
        claimed: list[str],
        seen_at: datetime.datetime,
    ) -> int:
        """Write the pass's observations (:func:`_to_record`); rows written.

        The nodes the pass put in ``error`` for Ironic's claim (``claimed``,
        at most :data:`MAX_ORPHANS`) are read from Ironic again instead
        (:meth:`_observe_again`).
        """
        again = frozenset(claimed[:MAX_ORPHANS])
        written = db_nodes.record_back_end_observations(
            self._db, [o for o in to_record if o.uuid not in again], seen_at
        )
        if again:
            written += self._observe_again(
                again, {o.uuid: o for o in to_record if o.uuid in again}, seen_at
            )
        return written

    def _observe_again(
        self,
        uuids: frozenset[str],
        listed: dict[str, db_nodes.BackEndObservation],
        seen_at: datetime.datetime,
    ) -> int:
        """Read *uuids* from Ironic again and record what it shows now; rows written.

        These are nodes the pass has just put in ``error`` for Ironic's
        claim: that change is newer than the listing, so the listing's
        observation could not be compared with it (fleet check, orphan
        claims) before the next pass.  Dated when the reads begin, after
        the change.  A node Ironic cannot show now keeps what the listing
        saw (``listed``), dated as the listing.
        """
        again_at = utcnow()
        fresh: list[db_nodes.BackEndObservation] = []
        fallback: list[db_nodes.BackEndObservation] = []
        unreachable = False
        for uuid in sorted(uuids):
            try:
                if unreachable:
                    raise ServiceUnavailable(reason="Ironic unreachable")
                fresh.append(_sighting(self._client.get_node(uuid, action="observe claim")))
            except RingfleetError as exc:
                unreachable = unreachable or isinstance(exc, ServiceUnavailable)
                LOG.debug("Ironic sync: node %s not read again: %s", uuid, exc)
                if uuid in listed:
                    fallback.append(listed[uuid])
        return db_nodes.record_back_end_observations(
            self._db, fresh, again_at
        ) + db_nodes.record_back_end_observations(self._db, fallback, seen_at)

    def _hand_orphans(self) -> int:
        """Hand each repairable orphan claim to its node's owner; how many took one.

        An owner that did not take one (gone, busy, slow) is not asked
        again in this pass: a slow agent costs one accept timeout per pass,
        not one per node.  The next pass asks again.  At most
        :data:`MAX_ORPHANS`, each pass starting after the node the last one
        ended with: orphans that stay (a teardown that takes long) never
        keep the others waiting.
        """
        clean_orphan = self._clean_orphan
        if clean_orphan is None:
            return 0
        found = db_nodes.repairable_orphans(self._db, limit=MAX_ORPHANS, after=self._orphans_after)
        if len(found) < MAX_ORPHANS and self._orphans_after is not None:
            taken = {orphan.node.uuid for orphan in found}
            found += [
                orphan
                for orphan in db_nodes.repairable_orphans(self._db, limit=MAX_ORPHANS - len(found))
                if orphan.node.uuid not in taken
            ]
        self._orphans_after = found[-1].node.uuid if found else None
        handed = 0
        refused: set[str] = set()
        for orphan in found:
            owner = orphan.node.owner
            if owner is None or owner in refused:
                continue
            try:
                took = clean_orphan(orphan.node, orphan.instance_uuid)
            except Exception:  # never fail the pass: the next one asks again
                LOG.exception(
                    "Ironic sync: handing the orphan claim of instance %s on node %s to %s failed",
                    orphan.instance_uuid,
                    orphan.node.uuid,
                    owner,
                )
                took = False
            if took:
                handed += 1
            else:
                refused.add(owner)
        return handed

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
            provision_state=state if state in IDLE else ProvisionState.ERROR,
        )

    def _create(
        self, specs: list[NodeSpec], sightings: dict[str, db_nodes.BackEndObservation]
    ) -> int:
        try:
            return self._created(db_nodes.create_nodes(self._db, specs, observed=sightings))
        except RingfleetError as exc:
            # A name taken by another node, or a concurrent pass: one by one,
            # so one clash does not keep the others out.
            LOG.debug("Ironic sync: batch of %d refused (%s); creating one by one", len(specs), exc)
        created = 0
        for spec in specs:
            try:
                created += self._created(
                    db_nodes.create_nodes(self._db, [spec], observed=sightings)
                )
            except RingfleetError as exc:
                LOG.warning("Ironic sync: node %s (%s) not imported: %s", spec.uuid, spec.name, exc)
        return created

    def _created(self, nodes: list[Node]) -> int:
        """How many *nodes* (committed); each one's ``node.create.end``."""
        if self._notifier.enabled:
            for node in nodes:
                self._notifier.send("node.create.end", NodePayload.of(node))
        return len(nodes)

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
        updated = db_nodes.update_node(self._db, node.uuid, update)
        if self._notifier.enabled:
            self._notifier.send("node.update.end", NodePayload.of(updated))
        return True

    def _updated(self, uuids: list[str]) -> None:
        """``node.update.end`` of the nodes the pass's state mirror changed
        (power, provision state, maintenance), as they are now."""
        if self._notifier.enabled and uuids:
            for node in db_nodes.get_nodes(self._db, uuids):
                self._notifier.send("node.update.end", NodePayload.of(node))

    def _observed(
        self, node: Node, found: IronicNode, seen_at: datetime.datetime
    ) -> db_nodes.BackEndState | None:
        provision = None
        wanted = provision_state_of(found.provision_state)
        if (
            node.instance_uuid is None
            and found.instance_uuid is None
            and node.provision_state in IDLE
            and wanted in IDLE
            and wanted is not node.provision_state
        ):
            provision = (node.provision_state, wanted)
        elif _held_in_ironic(node, found, seen_at):
            # Claimed in Ironic: a build would be refused.  The rule above
            # (unclaimed only) takes it back once the claim is gone.
            provision = (node.provision_state, ProvisionState.ERROR)
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


def _held_in_ironic(node: Node, found: IronicNode, seen_at: datetime.datetime) -> bool:
    """Whether the pass puts *node* in ``error`` for Ironic's claim: it hosts
    nothing in ringfleet and is idle (not ``error`` already), Ironic shows it
    claimed, and ringfleet's record did not change since the listing began
    (a node freed meanwhile, e.g. at the end of a delete, may have been
    listed with the claim its teardown then released: the next pass
    decides)."""
    return (
        node.instance_uuid is None
        and found.instance_uuid is not None
        and node.provision_state in IDLE
        and node.provision_state is not ProvisionState.ERROR
        and node.updated_at is not None
        and node.updated_at <= seen_at
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


def _retirements(known: Iterable[Node], listed: Collection[str]) -> list[db_nodes.BackEndState]:
    """The maintenance of the ``known`` nodes no longer ``listed`` in Ironic
    and not retired yet: each retired (and logged), its instance kept."""
    retirements = []
    for node in known:
        if node.uuid not in listed and not _retired(node):
            retirements.append(
                db_nodes.BackEndState(
                    node.uuid,
                    maintenance=(
                        (node.maintenance, node.maintenance_reason),
                        (True, REMOVED_REASON),
                    ),
                )
            )
            LOG.warning(
                "Node %s (%s) is no longer in Ironic: retired (maintenance); "
                "instance %s keeps its record",
                node.uuid,
                node.name,
                node.instance_uuid,
            )
    return retirements


def _log_pass(summary: SyncSummary) -> None:
    """Log what a pass did (and the nodes it skipped)."""
    if summary.invalid:
        LOG.warning(
            "Ironic sync skipped %d nodes ringfleet cannot store: %s",
            len(summary.invalid),
            "; ".join(summary.invalid[:_MAX_NAMED]),
        )
    LOG.info(
        "Ironic sync: %d nodes listed, %d created, %d changes, %d retired, "
        "%d observations recorded, %d orphan claims handed to their owners in %.2f s",
        summary.listed,
        summary.created,
        summary.updated,
        summary.retired,
        summary.observed,
        summary.orphans,
        summary.seconds,
    )
