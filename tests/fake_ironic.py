# SPDX-License-Identifier: Apache-2.0
"""Ironic in memory, with :class:`~conductor.common.ironic.client.BaremetalClient`'s methods.

It behaves the way a real Ironic 39 does where ringfleet depends on it, and
``tests/functional/test_ironic_contract.py`` runs the same cases on it and
on a real standalone Ironic to keep it so:

* a deploy goes ``deploying`` (target ``active``) to ``active``; a failed one
  ends ``deploy failed`` and *keeps* ``target_provision_state = active``;
* a teardown goes ``deleting`` → ``cleaning`` → ``available`` and drops the
  claim; from ``error`` and ``deploy failed`` as from ``active``;
* while one of its tasks runs (``deploying``, ``deleting``, ``cleaning``) a
  write to the node is refused with 409 "locked"
  (:class:`~conductor.common.ironic.client.IronicNodeLocked`);
* a second claim is refused with 409 (:class:`IronicClaimConflict`), an
  unknown node is :class:`IronicNodeGone` (404);
* :meth:`FakeIronic.restart` fails what a restart interrupts, as Ironic's
  conductor does when it starts: ``deploying`` → ``deploy failed`` (target
  kept), ``deleting`` → ``error`` (no target), ``cleaning`` → ``clean failed``;
* a deploy's JSON config drive is kept in ``instance_info.configdrive`` and
  shown as ``"******"``; a deploy with an ``image_source`` gets
  ``image_type`` (``whole-disk``, or ``partition`` with kernel and
  ramdisk); a node whose ``deploy_interface`` is ``direct`` refuses a
  deploy without ``image_source`` (400), as real hardware's does.

Nodes move one step per read (:attr:`FakeIronic.steps` reads per state), so
a driver's polling follows them; ``provision_updated_at`` changes with
every change of provision state, as Ironic's does.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import uuid as uuidlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from conductor.common.exception import DriverError, ServiceUnavailable
from conductor.common.ironic import states
from conductor.common.ironic.client import (
    IronicClaimConflict,
    IronicNode,
    IronicNodeGone,
    IronicNodeLocked,
)
from conductor.common.service_outage import ServiceOutage

__all__ = ["FakeIronic", "FakeNode"]

#: States in which Ironic holds the node's lock for a task of its own.
LOCKED_STATES = frozenset({"deploying", "deleting", "cleaning"})
#: The targets of PUT /v1/nodes/{uuid}/states/power.
_POWER_TARGETS = frozenset(
    {"power on", "power off", "rebooting", "soft power off", "soft rebooting"}
)
#: What Ironic's conductor does at start with a node whose task it lost.
_FAILED_ON_RESTART: dict[str, dict[str, Any]] = {
    "deploying": {
        "provision_state": "deploy failed",
        "target_provision_state": "active",
        "last_error": "The deploying state can't be resumed by conductor ringfleet-test. "
        "Moving to fail state.",
    },
    "deleting": {
        "provision_state": "error",
        "target_provision_state": None,
        "last_error": "The deleting state can't be resumed by conductor ringfleet-test. "
        "Moving to fail state.",
    },
    "cleaning": {
        "provision_state": "clean failed",
        "target_provision_state": "available",
        "last_error": "The cleaning state can't be resumed by conductor ringfleet-test. "
        "Moving to fail state.",
    },
}
_clock = itertools.count(1)
#: What Ironic shows of a secret field of instance_info (the config drive).
HIDDEN = "******"


def _stamp() -> str:
    return f"2026-11-26T00:00:00.{next(_clock):06d}+00:00"


@dataclasses.dataclass
class FakeNode:
    uuid: str
    provision_state: str | None = "available"
    target_provision_state: str | None = None
    power_state: str | None = "power off"
    target_power_state: str | None = None
    maintenance: bool = False
    maintenance_reason: str | None = None
    instance_uuid: str | None = None
    instance_info: dict[str, Any] = dataclasses.field(default_factory=dict)
    last_error: str | None = None
    name: str | None = None
    resource_class: str | None = "baremetal"
    traits: tuple[str, ...] = ()
    properties: dict[str, Any] = dataclasses.field(default_factory=dict)
    conductor_group: str = ""
    shard: str | None = None
    #: ``fake`` deploys anything; ``direct`` needs an image_source
    deploy_interface: str = "fake"
    provision_updated_at: str = dataclasses.field(default_factory=_stamp)
    #: changes applied one per read (Ironic's conductor moving the node on)
    script: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def change(self, **fields: Any) -> None:
        for key, value in fields.items():
            setattr(self, key, value)
        if "provision_state" in fields:
            self.provision_updated_at = _stamp()

    def view(self) -> IronicNode:
        return IronicNode(
            uuid=self.uuid,
            name=self.name,
            resource_class=self.resource_class,
            traits=self.traits,
            properties=dict(self.properties),
            conductor_group=self.conductor_group,
            shard=self.shard,
            maintenance=self.maintenance,
            maintenance_reason=self.maintenance_reason,
            power_state=self.power_state,
            target_power_state=self.target_power_state,
            provision_state=self.provision_state,
            target_provision_state=self.target_provision_state,
            instance_uuid=self.instance_uuid,
            instance_info={
                k: HIDDEN if k == "configdrive" else v for k, v in self.instance_info.items()
            },
            last_error=self.last_error,
            provision_updated_at=self.provision_updated_at,
        )


class FakeIronic:
    """Ironic in memory (module docstring).  Every write is recorded in :attr:`writes`."""

    endpoint = "http://ironic.test:6385"

    def __init__(self, steps: int = 2) -> None:
        self.nodes: dict[str, FakeNode] = {}
        self.steps = steps
        #: the next deploy fails with this ``last_error`` (``deploy failed``)
        self.deploy_error: str | None = None
        #: the next teardown fails with this ``last_error`` (``error``)
        self.teardown_error: str | None = None
        #: a failure shows its state one read before its ``last_error``, as
        #: Ironic's periodic timeouts save them (a deploy's callback wait)
        self.reason_after_state = False
        self.writes: list[tuple[Any, ...]] = []
        #: node -> the config drive of its last deploy (what Ironic built the drive from)
        self.configdrives: dict[str, dict[str, Any]] = {}
        self.reads = 0
        #: the next this many reads fail as an unreachable Ironic would
        self.unreachable_reads = 0
        #: the next this many writes are refused with 409 "locked"
        self.locked_writes = 0
        #: the next this many provision writes are done, but their answer is
        #: lost (the client's request timed out: Ironic was slow, not down)
        self.lost_answers = 0
        #: whether the nodes' power interface has the soft targets (a BMC
        #: without them answers 400, as Ironic does)
        self.soft_power = True
        #: called before a claim is applied (another claimant's race)
        self.before_claim: Callable[[FakeNode], None] | None = None
        #: called after a claim is applied
        self.after_claim: Callable[[FakeNode], None] | None = None
        #: cleared: Ironic is frozen (SIGSTOP): a read gets no answer, and
        #: fails as the client's does once ``request_timeout`` passed
        self.answering = threading.Event()
        self.answering.set()
        self.request_timeout = 10.0
        #: reads waiting for a frozen Ironic now
        self.hanging = 0
        self.lock = threading.Lock()
        #: the client's outage: whether the driver believes Ironic is down
        self.outage = ServiceOutage("Ironic", self.endpoint)

    def add(self, **fields: Any) -> FakeNode:
        fields.setdefault("uuid", str(uuidlib.uuid4()))
        node = FakeNode(**fields)
        self.nodes[node.uuid] = node
        return node

    def restart(self) -> None:
        """Ironic killed and started again: what its lost tasks were doing fails."""
        with self.lock:
            for node in self.nodes.values():
                failed = _FAILED_ON_RESTART.get(node.provision_state or "")
                if failed is not None:
                    node.script = []
                    node.change(**failed)

    # -- reads -----------------------------------------------------------------------

    def idle_for(self) -> float:
        return 0.0  # always busy: the driver never probes

    def get_node(self, node_uuid: str, *, action: str, quick: float | None = None) -> IronicNode:
        self._answer_or_time_out(quick)
        with self.lock:
            self.reads += 1
            if self.unreachable_reads:
                self.unreachable_reads -= 1
                raise ServiceUnavailable(f"Ironic at {self.endpoint} unreachable")
            node = self._node(node_uuid, action)
            if node.script:
                node.change(**node.script.pop(0))
            return node.view()

    def list_nodes(
        self, *, shard: str | None = None, page_size: int = 1000
    ) -> Iterator[IronicNode]:
        with self.lock:
            found = [n.view() for n in self.nodes.values() if shard is None or n.shard == shard]
        yield from found

    # -- writes ----------------------------------------------------------------------

    def claim(self, node_uuid: str, instance_uuid: str, info: Mapping[str, Any]) -> None:
        node = self._writable(node_uuid, "claim")
        if self.before_claim is not None:
            self.before_claim(node)
        self.writes.append(("claim", node_uuid, instance_uuid, dict(info)))
        if node.instance_uuid not in (None, instance_uuid):
            raise IronicClaimConflict(f"node already associated with {node.instance_uuid}")
        node.change(instance_uuid=instance_uuid, instance_info=dict(info))
        if self.after_claim is not None:
            self.after_claim(node)

    def release(self, node_uuid: str) -> None:
        node = self._writable(node_uuid, "release claim")
        self.writes.append(("release", node_uuid))
        node.change(instance_uuid=None, instance_info={})

    def set_instance_info(
        self, node_uuid: str, values: Mapping[str, Any], remove: Iterable[str] = ()
    ) -> None:
        node = self._writable(node_uuid, "set instance_info")
        removed = list(remove)
        self.writes.append(("instance_info", node_uuid, dict(values), removed))
        info = {k: v for k, v in node.instance_info.items() if k not in removed}
        missing = [k for k in removed if k not in node.instance_info]
        if missing:
            # JSON patch: removing what is not there is a 400.
            raise DriverError(node_uuid, "set instance_info", f"Ironic refused (400): {missing}")
        node.change(instance_info={**info, **values})

    def set_provision_state(
        self,
        node_uuid: str,
        target: str,
        *,
        action: str,
        configdrive: Mapping[str, Any] | None = None,
    ) -> None:
        self._provision(node_uuid, target, action=action, configdrive=configdrive)
        if self.lost_answers:
            self.lost_answers -= 1
            raise ServiceUnavailable(f"Ironic did not answer {action} within 10 s")

    def _provision(
        self,
        node_uuid: str,
        target: str,
        *,
        action: str,
        configdrive: Mapping[str, Any] | None,
    ) -> None:
        node = self._writable(node_uuid, action)
        if target == "deleted" and node.provision_state not in states.UNDEPLOYABLE:
            # Ironic: 'The requested action "deleted" can not be performed on
            # node ... while it is in state "available".'
            self.writes.append(("refused", node_uuid, target))
            raise DriverError(
                node_uuid,
                action,
                f"Ironic refused (400): deleted can not be performed in {node.provision_state}",
            )
        if target == "rebuild" and node.provision_state != "active":
            # Ironic: 'The requested action "rebuild" can not be performed on
            # node ... while it is in state ...'
            self.writes.append(("refused", node_uuid, target))
            raise DriverError(
                node_uuid,
                action,
                f"Ironic refused (400): rebuild can not be performed in {node.provision_state}",
            )
        self.writes.append(("provision", node_uuid, target))
        waits: list[dict[str, Any]] = [{}] * (self.steps - 1)
        if target == "active":
            info = dict(node.instance_info)
            if node.deploy_interface == "direct" and "image_source" not in info:
                # Ironic validates the deploy interface before it moves the node.
                raise DriverError(
                    node_uuid,
                    action,
                    "Ironic refused (400): Failed to validate deploy or power info for "
                    f"node {node_uuid}. Error: Some parameters were missing in node's "
                    "instance_info. Missing are: ['instance_info.image_source']",
                )
            if "image_source" in info:
                partition = "kernel" in info and "ramdisk" in info
                info["image_type"] = "partition" if partition else "whole-disk"
            if configdrive is not None:
                self.configdrives[node_uuid] = dict(configdrive)
                info["configdrive"] = dict(configdrive)
            node.change(
                provision_state="deploying", target_provision_state="active", instance_info=info
            )
            end: dict[str, Any] = {"provision_state": "active", "target_provision_state": None}
            if self.deploy_error is not None:
                # Ironic keeps the target on a failed deploy.
                end = {"provision_state": "deploy failed", "last_error": self.deploy_error}
            node.script = [*waits, *self._ending(end)]
        elif target == "deleted":
            node.change(provision_state="deleting", target_provision_state="available")
            if self.teardown_error is not None:
                failed = {
                    "provision_state": "error",
                    "target_provision_state": None,
                    "last_error": self.teardown_error,
                }
                node.script = [*waits, *self._ending(failed)]
                return
            node.script = [
                *waits,
                {"provision_state": "cleaning", "instance_uuid": None, "instance_info": {}},
                *waits,
                {
                    "provision_state": "available",
                    "target_provision_state": None,
                    "last_error": None,
                },
            ]
        elif target == "rebuild":
            info = dict(node.instance_info)
            if "image_source" in info:
                partition = "kernel" in info and "ramdisk" in info
                info["image_type"] = "partition" if partition else "whole-disk"
            if configdrive is not None:
                # Ironic rebuilds the drive from the one given with the rebuild.
                self.configdrives[node_uuid] = dict(configdrive)
                info["configdrive"] = dict(configdrive)
            node.change(
                provision_state="deploying", target_provision_state="active", instance_info=info
            )
            end = {"provision_state": "active", "target_provision_state": None}
            if self.deploy_error is not None:
                end = {"provision_state": "deploy failed", "last_error": self.deploy_error}
            node.script = [*waits, *self._ending(end)]
        else:
            raise AssertionError(f"unexpected target {target}")

    def _ending(self, end: dict[str, Any]) -> list[dict[str, Any]]:
        """The reads that end a transition in a failed state (*end*, with its
        reason): one, or two with :attr:`reason_after_state`."""
        if self.reason_after_state and end["provision_state"] != "active":
            return [{**end, "last_error": None}, {"last_error": end["last_error"]}]
        return [end]

    def set_power_state(self, node_uuid: str, target: str) -> None:
        node = self._writable(node_uuid, "set_power")
        if target not in _POWER_TARGETS or (target.startswith("soft") and not self.soft_power):
            # Ironic's answer to a target the node's power interface lacks.
            self.writes.append(("refused", node_uuid, target))
            raise DriverError(
                node_uuid,
                "set_power",
                f"Ironic refused (400): The requested power state {target} is not supported",
            )
        self.writes.append(("power", node_uuid, target))
        final = "power off" if target.endswith("power off") else "power on"
        # As Ironic: target_power_state is the end state while it moves
        # ("power on" for a reboot), power_state the state before.
        node.change(target_power_state=final)
        if target in ("rebooting", "soft rebooting"):
            node.change(power_state="power off")
        node.script = [
            *[{}] * (self.steps - 1),
            {"power_state": final, "target_power_state": None},
        ]

    # -- Ironic's refusals -----------------------------------------------------------

    def _answer_or_time_out(self, quick: float | None) -> None:
        """A frozen Ironic holds the request for the client's whole timeout."""
        if self.answering.is_set():
            return
        with self.lock:
            self.hanging += 1
        try:
            if not self.answering.wait(quick or self.request_timeout):
                raise ServiceUnavailable(f"Ironic at {self.endpoint} did not answer in time")
        finally:
            with self.lock:
                self.hanging -= 1

    def _writable(self, node_uuid: str, action: str) -> FakeNode:
        node = self._node(node_uuid, action)
        if self.locked_writes or node.provision_state in LOCKED_STATES:
            if not self.locked_writes and node.script:
                # Ironic's own task goes on while a client retries its write.
                node.change(**node.script.pop(0))
            self.locked_writes = max(0, self.locked_writes - 1)
            self.writes.append(("locked", node_uuid, action))
            raise IronicNodeLocked(
                f"Node {node_uuid} is locked by host ringfleet-test, please retry after "
                "the current operation is completed."
            )
        return node

    def _node(self, node_uuid: str, action: str) -> FakeNode:
        try:
            return self.nodes[node_uuid]
        except KeyError:
            raise IronicNodeGone(node_uuid, action, "Ironic has no such node") from None
