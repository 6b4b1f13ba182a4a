"""RPC endpoint: instances (build, list, show, delete).

A build request is stored as instance rows before anything else happens,
then handed to the build queue; the reply carries the instance ids at once
and progress is visible through ``show_instance``/``list_instances``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Protocol

import oslo_messaging as messaging

from conductor.common.checks import validate_uuid
from conductor.common.instance_states import Event, can
from conductor.common.objects import Flavor, Instance
from conductor.db import instances
from conductor.db.engine import Database
from conductor.rpcapi import API_VERSION
from conductor.validation import arguments, check_vm_state, validate_build_request

__all__ = ["BuildQueue", "InstancesEndpoint"]

LOG = logging.getLogger(__name__)


class BuildQueue(Protocol):
    """Where stored requests go to be scheduled and routed."""

    def submit(self, instance_uuids: list[str]) -> None: ...

    def submit_stored(self, stored: Sequence[Instance], flavor: Flavor) -> None:
        """Queue instances just stored, with their flavor (no re-read)."""
        ...

    def delete(self, instance_uuid: str) -> None: ...


class InstancesEndpoint:
    """Instance methods of the conductor RPC API (since 1.0)."""

    target = messaging.Target(version=API_VERSION)

    def __init__(self, db: Database, queue: BuildQueue) -> None:
        self._db = db
        self._queue = queue

    def build_instances(self, ctxt: dict[str, Any], request: Any) -> list[dict[str, Any]]:
        """Store ``count`` instances of a flavor and start building them.

        Idempotent when the request carries ``instance_uuids``: a retry
        returns the instances stored the first time.
        """
        build = validate_build_request(request)
        # FlavorNotFound before anything is stored; one transaction.
        flavor, stored, created = instances.store_build_request(self._db, build)
        if created:
            LOG.info(
                "Build request %s: %d x %s stored",
                ctxt.get("request_id"),
                len(stored),
                build.flavor,
            )
            self._queue.submit_stored(stored, flavor)
        return [i.to_dict() for i in stored]

    def list_instances(
        self,
        ctxt: dict[str, Any],
        vm_state: Any = None,
        host: Any = None,
        limit: Any = 1000,
        marker: Any = None,
    ) -> list[dict[str, Any]]:
        return [
            _listed(i)
            for i in instances.list_instances(
                self._db,
                vm_state=None if vm_state is None else check_vm_state(vm_state),
                host=None if host is None else arguments.check_host(host),
                limit=arguments.check_limit(limit),
                marker=None if marker is None else validate_uuid(marker, "marker"),
            )
        ]

    def show_instance(self, ctxt: dict[str, Any], instance: Any) -> dict[str, Any]:
        """The instance, its image and config drive (user data included) too."""
        return instances.get_instance(self._db, validate_uuid(instance, "instance")).to_dict()

    def delete_instance(self, ctxt: dict[str, Any], instance: Any) -> dict[str, Any]:
        """Start deleting an instance: the node is torn down, then freed."""
        uuid = validate_uuid(instance, "instance")
        current = instances.get_instance(self._db, uuid)
        # Deleting a deleted instance answers with it and changes nothing.
        if can(Event.DELETE, current.vm_state):
            instances.set_state(self._db, uuid, Event.DELETE)
            LOG.info("Instance %s delete requested", uuid)
            self._queue.delete(uuid)
        return instances.get_instance(self._db, uuid).to_dict()


def _listed(instance: Instance) -> dict[str, Any]:
    """An instance as a list shows it: without its user data (up to 64 KiB
    each, a thousand per page); show_instance has it."""
    item = instance.to_dict()
    drive = item.get("config_drive")
    if drive and "user_data" in drive:
        item["config_drive"] = {k: v for k, v in drive.items() if k != "user_data"}
    return item
