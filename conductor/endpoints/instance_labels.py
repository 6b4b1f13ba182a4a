# SPDX-License-Identifier: Apache-2.0
"""RPC endpoint: instances' metadata and tags (Nova's server metadata and tags), since API 1.21.

An instance's labels are seen and changed by whoever sees the instance
(its project, admins; to anyone else it does not exist, as in Nova).  They
change only while the instance is ``active`` or ``stopped`` with no action
in flight (Nova's rule: its paused and suspended have no equivalent here);
in any other state the change is a 409 naming the state.  A build sets them
with the instance (:mod:`conductor.endpoints.instances`).
"""

from __future__ import annotations

import logging
from typing import Any

import oslo_messaging as messaging

from conductor.common.checks import validate_uuid
from conductor.common.exception import (
    FieldError,
    InstanceLabelNotFound,
    InstanceNotFound,
    InstanceStateConflict,
    InvalidInput,
)
from conductor.common.objects import Instance, VmState
from conductor.common.schemas import MAX_TAGS
from conductor.common.tenancy import Caller
from conductor.db import instance_labels, instances
from conductor.db.engine import Database
from conductor.rpcapi import API_VERSION
from conductor.validation.fields import Errors
from conductor.validation.tenant_data import (
    MAX_METADATA_ITEMS,
    check_metadata,
    check_tag,
    check_tags,
)

__all__ = ["InstanceLabelsEndpoint", "labelled"]

LOG = logging.getLogger(__name__)

#: The states in which an instance's labels change (Nova's, less paused and suspended).
_CHANGEABLE = (VmState.ACTIVE, VmState.STOPPED)


def labelled(db: Database, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Instances (their dicts) with their ``metadata`` and ``tags``, read in two queries."""
    metadata, tags = instance_labels.labels_of(db, [i["uuid"] for i in items])
    return [{**i, "metadata": metadata[i["uuid"]], "tags": tags[i["uuid"]]} for i in items]


def _checked(check: Any, value: Any, field: str) -> Any:
    errors = Errors()
    result = check(value, field, errors)
    errors.raise_if_any()
    return result


class InstanceLabelsEndpoint:
    """Instance metadata and tag methods of the conductor RPC API (since 1.21)."""

    target = messaging.Target(version=API_VERSION)

    def __init__(self, db: Database) -> None:
        self._db = db

    def _visible(self, ctxt: dict[str, Any], instance: Any) -> Instance:
        """:raises InstanceNotFound: unknown, or another project's"""
        uuid = validate_uuid(instance, "instance")
        found = instances.get_instance(self._db, uuid)
        if not Caller.from_ctxt(ctxt).owns(found.project_id):
            raise InstanceNotFound(uuid)
        return found

    def _changeable(self, ctxt: dict[str, Any], instance: Any, verb: str) -> str:
        """The uuid of an instance the caller may label now.

        :raises InstanceStateConflict: not active or stopped, or an action in flight
        """
        found = self._visible(ctxt, instance)
        if found.vm_state not in _CHANGEABLE or found.task_state is not None:
            state = found.vm_state.value
            if found.task_state is not None:
                state += f" ({found.task_state.value})"
            raise InstanceStateConflict(
                field="vm_state",
                value=found.vm_state.value,
                reason=f"instance is in state {state}, cannot {verb}",
            )
        return found.uuid

    # -- metadata ---------------------------------------------------------------

    def get_instance_metadata(self, ctxt: dict[str, Any], instance: Any) -> dict[str, str]:
        return instance_labels.get_metadata(self._db, self._visible(ctxt, instance).uuid)

    def set_instance_metadata(
        self, ctxt: dict[str, Any], instance: Any, metadata: Any, replace: Any = False
    ) -> dict[str, str]:
        """Set keys (``replace``: the whole metadata); the metadata as it is then.

        :raises QuotaExceeded: more than :data:`MAX_METADATA_ITEMS` keys (Nova's 403)
        """
        items = _checked(check_metadata, metadata, "metadata")
        uuid = self._changeable(ctxt, instance, "update metadata")
        stored = instance_labels.set_metadata(
            self._db, uuid, items, replace=bool(replace), limit=MAX_METADATA_ITEMS
        )
        LOG.info(
            "Instance %s metadata %s: %s", uuid, "replaced" if replace else "set", sorted(items)
        )
        return stored

    def delete_instance_metadata(self, ctxt: dict[str, Any], instance: Any, key: Any) -> None:
        """:raises InstanceLabelNotFound: the instance has no such key"""
        if not isinstance(key, str):
            raise InvalidInput([FieldError.about("key", "must be a string", key)])
        uuid = self._changeable(ctxt, instance, "delete metadata")
        if not instance_labels.delete_metadata(self._db, uuid, key):
            raise InstanceLabelNotFound(key, "metadata key")
        LOG.info("Instance %s metadata %r deleted", uuid, key)

    # -- tags -------------------------------------------------------------------

    def get_instance_tags(self, ctxt: dict[str, Any], instance: Any) -> list[str]:
        return instance_labels.get_tags(self._db, self._visible(ctxt, instance).uuid)

    def add_instance_tag(self, ctxt: dict[str, Any], instance: Any, tag: Any) -> bool:
        """Tag an instance; whether the tag is new (Nova's 201, else 204).

        :raises InvalidInput: a bad tag, or the instance has :data:`MAX_TAGS` (Nova's 400)
        """
        checked = _checked(check_tag, tag, "tag")
        uuid = self._changeable(ctxt, instance, "update tag")
        added = instance_labels.add_tag(self._db, uuid, checked, limit=MAX_TAGS)
        if added is None:
            reason = f"the instance has {MAX_TAGS} tags already (Nova's per-server limit)"
            raise InvalidInput([FieldError.about("tag", reason, tag)])
        return added

    def set_instance_tags(self, ctxt: dict[str, Any], instance: Any, tags: Any) -> list[str]:
        """Replace every tag (``[]``: drop them all); the tags, sorted."""
        checked = _checked(check_tags, tags, "tags")
        uuid = self._changeable(ctxt, instance, "update tags")
        return instance_labels.replace_tags(self._db, uuid, checked)

    def delete_instance_tag(self, ctxt: dict[str, Any], instance: Any, tag: Any) -> None:
        """:raises InstanceLabelNotFound: the instance has no such tag"""
        checked = _checked(check_tag, tag, "tag")
        uuid = self._changeable(ctxt, instance, "delete tag")
        if not instance_labels.delete_tag(self._db, uuid, checked):
            raise InstanceLabelNotFound(checked, "tag")
