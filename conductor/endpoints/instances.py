# SPDX-License-Identifier: Apache-2.0
"""RPC endpoint: instances (build, list, show, delete; reboot, stop, start, rebuild).

A build request is stored as instance rows before anything else happens,
then handed to the build queue; the reply carries the instance ids at once
and progress is visible through ``show_instance``/``list_instances``.

Every call is scoped to its caller (:class:`~conductor.common.tenancy.Caller`,
from the RPC context; invariant 12): an instance belongs to the project of
the build's caller, counts against its quotas, and is seen and deleted by
that project and admins only; to anyone else it does not exist
(``InstanceNotFound``, as Nova answers 404).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import oslo_messaging as messaging

from conductor.common.checks import validate_uuid
from conductor.common.exception import (
    FieldError,
    Forbidden,
    InstanceNotFound,
    InstanceStateConflict,
    InvalidInput,
    InvalidTransition,
    QuotaExceeded,
)
from conductor.common.instance_states import Event, can, transition
from conductor.common.list_filters import check_instant, check_list_filters
from conductor.common.objects import Flavor, Instance, VmState
from conductor.common.tenancy import Caller
from conductor.db import instance_actions, instance_listing, instances, quotas
from conductor.db.engine import Database
from conductor.endpoints.instance_labels import labelled
from conductor.endpoints.keypairs import key_change, with_key
from conductor.notifications import Notifier
from conductor.rpcapi import API_VERSION
from conductor.validation import (
    RebuildRequest,
    arguments,
    check_vm_state,
    validate_build_request,
    validate_rebuild,
)

__all__ = ["BuildQueue", "InstancesEndpoint"]

LOG = logging.getLogger(__name__)


class BuildQueue(Protocol):
    """Where stored requests go to be scheduled and routed."""

    def submit(self, instance_uuids: list[str]) -> None: ...

    def submit_stored(self, stored: Sequence[Instance], flavor: Flavor) -> None:
        """Queue instances just stored, with their flavor (no re-read)."""
        ...

    def delete(self, instance_uuid: str) -> None: ...

    def act(self, instance_uuid: str) -> None:
        """Route the instance's action in flight (a verb just stored) to its node's owner."""
        ...


class InstancesEndpoint:
    """Instance methods of the conductor RPC API (since 1.0)."""

    target = messaging.Target(version=API_VERSION)

    def __init__(
        self,
        db: Database,
        queue: BuildQueue,
        quota: Callable[[], quotas.Defaults] = quotas.Defaults,
        notifier: Notifier | None = None,
    ) -> None:
        """``quota``: the ``[quota]`` defaults, read at each build (a
        reloaded configuration applies to the next one)."""
        self._db = db
        self._notifier = notifier or Notifier.disabled()
        self._queue = queue
        self._quota = quota

    def build_instances(self, ctxt: dict[str, Any], request: Any) -> list[dict[str, Any]]:
        """Store ``count`` instances of a flavor for the caller's project and
        start building them.

        Idempotent when the request carries ``instance_uuids``: a retry
        returns the instances stored the first time.  Refused whole
        (``QuotaExceeded``, nothing stored) when it would take the project
        over a quota.
        """
        caller = Caller.from_ctxt(ctxt)
        # A key_name's public key and the metadata into the config drive (1.21).
        build = with_key(self._db, caller, validate_build_request(request))
        # FlavorNotFound and QuotaExceeded before anything is stored; one transaction.
        try:
            flavor, stored, created = instances.store_build_request(
                self._db,
                build,
                project_id=caller.project_id,
                user_id=caller.user_id,
                quota=self._quota(),
                requester=instance_actions.Requester.of(ctxt),
            )
        except QuotaExceeded as exc:
            # The caller is told; the operator sees who runs into quotas.
            LOG.info(
                "Build request %s refused for project %s: %s",
                ctxt.get("request_id"),
                caller.project_id,
                exc,
            )
            raise
        if created:
            LOG.info(
                "Build request %s: %d x %s stored for project %s",
                ctxt.get("request_id"),
                len(stored),
                build.flavor,
                caller.project_id,
            )
            self._notifier.instances_created(stored)
            self._queue.submit_stored(stored, flavor)
        return labelled(self._db, [i.to_dict() for i in stored])

    def list_instances(
        self,
        ctxt: dict[str, Any],
        vm_state: Any = None,
        host: Any = None,
        limit: Any = 1000,
        marker: Any = None,
        *,
        all_projects: Any = False,
        project_id: Any = None,
        name: Any = None,
        status: Any = None,
        changes_since: Any = None,
        sort_key: Any = None,
        sort_dir: Any = None,
        tags: Any = None,
        tags_any: Any = None,
        not_tags: Any = None,
        not_tags_any: Any = None,
    ) -> list[dict[str, Any]]:
        """The caller's project's instances; an admin's ``all_projects``
        (since 1.12) lists every project's, or ``project_id``'s only.

        An admin without a project (the operator) lists every project's.
        Since 1.22, Nova's ``name``, ``status``, ``changes_since``,
        ``sort_key`` and ``sort_dir`` (:func:`~conductor.common.list_filters.check_list_filters`);
        since 1.23 its tag filters ``tags``, ``tags_any``, ``not_tags`` and
        ``not_tags_any`` (each a comma-separated string of tags).
        """
        caller = Caller.from_ctxt(ctxt)
        everyone = arguments.check_bool(all_projects, "all_projects")
        project = None if project_id is None else arguments.check_project(project_id)
        order = check_list_filters(
            name,
            status,
            changes_since,
            sort_key,
            sort_dir,
            tags=tags,
            tags_any=tags_any,
            not_tags=not_tags,
            not_tags_any=not_tags_any,
        )
        if (everyone or project is not None) and not caller.is_admin:
            raise Forbidden("all_projects and project_id are for admins only")
        if project is None and not everyone:
            if caller.project_id is None and not caller.is_admin:
                return []  # a caller of no project owns nothing
            project = caller.project_id
        return labelled(
            self._db,
            [
                _listed(i)
                for i in instance_listing.list_page(
                    self._db,
                    order,
                    vm_state=None if vm_state is None else check_vm_state(vm_state),
                    host=None if host is None else arguments.check_host(host),
                    limit=arguments.check_limit(limit),
                    marker=None if marker is None else validate_uuid(marker, "marker"),
                    project_id=project,
                )
            ],
        )

    def show_instance(self, ctxt: dict[str, Any], instance: Any) -> dict[str, Any]:
        """The instance, its image and config drive (user data included) too,
        if the caller may see it."""
        found = self._visible(ctxt, validate_uuid(instance, "instance"))
        return labelled(self._db, [found.to_dict()])[0]

    def _visible(self, ctxt: dict[str, Any], uuid: str) -> Instance:
        """The instance if the caller may see it.

        :raises InstanceNotFound: it does not exist, or is another project's
            (whose existence is not the caller's business, as in Nova).
        """
        found = instances.get_instance(self._db, uuid)
        if not Caller.from_ctxt(ctxt).owns(found.project_id):
            raise InstanceNotFound(uuid)
        return found

    def delete_instance(self, ctxt: dict[str, Any], instance: Any) -> dict[str, Any]:
        """Start deleting an instance: the node is torn down, then freed."""
        uuid = validate_uuid(instance, "instance")
        current = self._visible(ctxt, uuid)
        # Deleting a deleted instance answers with it and changes nothing.
        if can(Event.DELETE, current.vm_state):
            again = current.vm_state is VmState.DELETING  # a re-route: no new action
            requester = None if again else instance_actions.Requester.of(ctxt)
            deleting = instances.set_state(self._db, uuid, Event.DELETE, requester=requester)
            LOG.info("Instance %s delete requested", uuid)
            if deleting and not again:
                self._notifier.instance(Event.DELETE, uuid)
            self._queue.delete(uuid)
        return labelled(self._db, [instances.get_instance(self._db, uuid).to_dict()])[0]

    # -- action history (1.22) ------------------------------------------------------

    def list_instance_actions(
        self,
        ctxt: dict[str, Any],
        instance: Any,
        *,
        limit: Any = None,
        marker: Any = None,
        changes_since: Any = None,
        changes_before: Any = None,
    ) -> list[dict[str, Any]]:
        """The instance's actions (Nova's os-instance-actions), the newest
        first; since 1.23 a page at a time (``limit``, ``marker``: a request
        id) and by ``changes_since``/``changes_before`` (ISO 8601, on each
        action's ``updated_at``), as Nova's 2.58 and 2.66.

        :raises InstanceActionNotFound: a marker that is no action of the instance
        """
        uuid = validate_uuid(instance, "instance")
        errors: list[FieldError] = []
        paged = instance_actions.ActionPage(
            limit=None if limit is None else arguments.check_limit(limit),
            marker=None if marker is None else arguments.check_request_id(marker, "marker"),
            changes_since=check_instant(changes_since, "changes-since", errors),
            changes_before=check_instant(changes_before, "changes-before", errors),
        )
        if errors:
            raise InvalidInput(errors)
        self._visible(ctxt, uuid)
        return instance_actions.list_actions(self._db, uuid, paged)

    def show_instance_action(
        self, ctxt: dict[str, Any], instance: Any, request_id: Any
    ) -> dict[str, Any]:
        """One action of the instance by its request id, with its events.

        :raises InstanceActionNotFound: no action of that request id there
        """
        uuid = validate_uuid(instance, "instance")
        self._visible(ctxt, uuid)
        return instance_actions.get_action(self._db, uuid, arguments.check_request_id(request_id))

    # -- power and lifecycle verbs (1.13) ------------------------------------------

    def reboot_instance(
        self, ctxt: dict[str, Any], instance: Any, hard: Any = False
    ) -> dict[str, Any]:
        """Reboot an active instance: soft (the OS restarts; a back end
        without it power-cycles) or ``hard`` (a power cycle).  Answers at once
        with the instance ``rebooting``/``rebooting_hard``; ``active`` again
        when the node's owner is done."""
        event = Event.REBOOT_HARD if arguments.check_bool(hard, "hard") else Event.REBOOT
        return self._verb(ctxt, instance, event, "reboot")

    def stop_instance(self, ctxt: dict[str, Any], instance: Any) -> dict[str, Any]:
        """Power an active instance off (a clean shutdown first): ``stopped``."""
        return self._verb(ctxt, instance, Event.STOP, "stop")

    def start_instance(self, ctxt: dict[str, Any], instance: Any) -> dict[str, Any]:
        """Power a stopped instance on: ``active``."""
        return self._verb(ctxt, instance, Event.START, "start")

    def rebuild_instance(
        self,
        ctxt: dict[str, Any],
        instance: Any,
        *,
        image: Any = None,
        user_data: Any = None,
        meta_data: Any = None,
        network_data: Any = None,
        key_name: Any = None,
    ) -> dict[str, Any]:
        """Re-image an active or stopped instance on its node: ``rebuilding``,
        then ``active``.

        Since 1.23 with ``key_name`` (Nova's 2.54): a key pair of the
        caller's replaces the instance's in meta_data ``public_keys`` and as
        its ``key_name``; ``""``: the instance keeps none.

        Since 1.14 with a new ``image`` and/or config drive parts
        (``user_data``, ``meta_data``, ``network_data``), checked as a
        build's: each given replaces the stored value, in the same
        transaction as the state change, and what is not given is kept (the
        image and config drive it was deployed with, by default).  A bad
        field refuses the call whole, nothing changed.  Issued again while
        the rebuild is in flight, it routes it again with the stored image
        and config drive; a different one is a 409 until it is over.

        :raises InvalidInput: a bad field, named (user data never shown)
        :raises InstanceStateConflict: the state does not allow it, or a
            rebuild with another image or config drive is in flight
        """
        uuid = validate_uuid(instance, "instance")
        request = validate_rebuild(image, user_data, meta_data, network_data, key_name)
        if request.key is not None and request.key.name is not None:
            request = dataclasses.replace(
                request, key=key_change(self._db, Caller.from_ctxt(ctxt), request.key.name)
            )
        return self._verb(ctxt, uuid, Event.REBUILD, "rebuild", rebuild=request)

    def _verb(
        self,
        ctxt: dict[str, Any],
        instance: Any,
        event: Event,
        verb: str,
        *,
        rebuild: RebuildRequest | None = None,
    ) -> dict[str, Any]:
        """Store *event* (the action in flight) and route it to the node's owner.

        Issuing a verb while the same action is in flight routes it again
        (the way out of an action stuck on an agent that died); any other
        state is a 409 naming it.  ``rebuild``: what a rebuild replaces,
        stored with the state change.

        :raises InstanceStateConflict: the instance's state does not allow *verb*
        """
        uuid = validate_uuid(instance, "instance")
        current = self._visible(ctxt, uuid)
        state = current.vm_state.value
        if current.task_state is not None:
            state += f" ({current.task_state.value})"
        try:
            after = transition(event, current.vm_state, current.task_state)
        except InvalidTransition:
            raise InstanceStateConflict(
                field="vm_state",
                value=current.vm_state.value,
                reason=f"instance is in state {state}, cannot {verb}",
            ) from None
        if current.node_uuid is None:  # never deployed: nothing to power
            raise InstanceStateConflict(
                field="node_uuid",
                value=None,
                reason=f"instance is in state {state} without a node, cannot {verb}",
            )
        # The same action issued again routes it anew: no new action recorded.
        new = current.task_state is not after.task_state
        requester = instance_actions.Requester.of(ctxt) if new else None
        if rebuild is not None and rebuild.changes:
            stored = instances.request_rebuild(self._db, uuid, rebuild, requester)
        else:
            stored = instances.set_state(self._db, uuid, event, requester=requester)
        if not stored:
            # It moved between the read and the write (a delete, another verb).
            now = instances.get_instance(self._db, uuid)
            raise InstanceStateConflict(
                field="vm_state",
                value=now.vm_state.value,
                reason=f"instance changed to state {now.vm_state.value} meanwhile, cannot {verb}",
            )
        if new:
            self._notifier.instance(event, uuid)
        LOG.info(
            "Instance %s: %s requested on node %s%s%s",
            uuid,
            verb if event is not Event.REBOOT_HARD else "hard reboot",
            current.node_uuid,
            _replaced(rebuild),
            " (again: routed anew)" if current.task_state is not None else "",
        )
        self._queue.act(uuid)
        return labelled(self._db, [instances.get_instance(self._db, uuid).to_dict()])[0]


def _replaced(rebuild: RebuildRequest | None) -> str:
    """What a rebuild replaces, for the log: the image source and the names
    of the config drive parts (never their content: user data)."""
    if rebuild is None or not rebuild.changes:
        return ""
    parts = []
    if rebuild.image is not None:
        # No query string: a signed URL's signature is a credential.
        source = str(rebuild.image.get("source", "")).split("?", 1)[0]
        parts.append(f"image {source}")
    parts.extend(sorted(rebuild.config_drive))
    return f" with a new {', '.join(parts)}"


def _listed(instance: Instance) -> dict[str, Any]:
    """An instance as a list shows it: without its user data (up to 64 KiB
    each, a thousand per page); show_instance has it."""
    item = instance.to_dict()
    drive = item.get("config_drive")
    if drive and "user_data" in drive:
        item["config_drive"] = {k: v for k, v in drive.items() if k != "user_data"}
    return item
