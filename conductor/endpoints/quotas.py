# SPDX-License-Identifier: Apache-2.0
"""RPC endpoint: quotas (show, set, delete, list), since API 1.12.

A project's limits are ``[quota]``'s defaults unless it has its own (set by
an admin); what it uses is counted from its instances
(:mod:`conductor.db.quotas`, which also holds the race-safe check a build
makes).  Admins show, set and drop any project's limits; anyone else may
only show their own project's.

``key_pairs`` (since API 1.23) is counted per user, as Nova's: its
``in_use`` is the caller's own key pairs (none for a caller of no user),
what the limit is checked against when the caller creates one there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import oslo_messaging as messaging

from conductor.common.exception import Forbidden
from conductor.common.tenancy import Caller
from conductor.db import keypairs
from conductor.db import quotas as quota_db
from conductor.db.engine import Database
from conductor.notification_payloads import QuotaPayload
from conductor.notifications import Notifier
from conductor.rpcapi import API_VERSION
from conductor.validation import arguments

__all__ = ["QuotasEndpoint"]

LOG = logging.getLogger(__name__)


class QuotasEndpoint:
    """Quota methods of the conductor RPC API (since 1.12)."""

    target = messaging.Target(version=API_VERSION)

    def __init__(
        self,
        db: Database,
        defaults: Callable[[], quota_db.Defaults] = quota_db.Defaults,
        notifier: Notifier | None = None,
    ) -> None:
        self._db = db
        self._defaults = defaults
        self._notifier = notifier or Notifier.disabled()

    def show_quota(self, ctxt: dict[str, Any], project_id: Any) -> dict[str, Any]:
        """A project's limit, usage and whether the limit is the default, per
        resource: ``instances``, ``key_pairs`` (the caller's usage: they
        count per user) and every resource class of a flavor, of a default
        or of the project's own limits."""
        project = arguments.check_project(project_id)
        caller = Caller.from_ctxt(ctxt)
        if not caller.is_admin and caller.project_id != project:
            raise Forbidden("only admins may show another project's quota")
        return self._show(project, caller)

    def set_quota(self, ctxt: dict[str, Any], project_id: Any, quotas: Any) -> dict[str, Any]:
        """Set some of a project's own limits (``{resource: limit}``, -1
        unlimited; the others are kept).  A limit below the usage refuses the
        project's next builds and touches none of its instances."""
        project = arguments.check_project(project_id)
        limits = arguments.check_quota_limits(quotas)
        self._admin(ctxt, "set")
        own = quota_db.set_limits(self._db, project, limits)
        LOG.info("Quota of project %s set: %s", project, limits)
        self._notifier.send(
            "quota.set.end", QuotaPayload(project_id=project, limits=own, changed=dict(limits))
        )
        return self._show(project, Caller.from_ctxt(ctxt))

    def delete_quota(self, ctxt: dict[str, Any], project_id: Any) -> dict[str, Any]:
        """Drop a project's own limits: the defaults apply again."""
        project = arguments.check_project(project_id)
        self._admin(ctxt, "delete")
        # What is dropped, for the notification (read only when they are on).
        before = quota_db.get_limits(self._db, project)[0] if self._notifier.enabled else {}
        dropped = quota_db.delete_limits(self._db, project)
        if self._notifier.enabled:
            self._notifier.send(
                "quota.delete.end", QuotaPayload(project_id=project, limits={}, changed=before)
            )
        LOG.info("Quota of project %s: %d limits of its own dropped", project, dropped)
        return self._show(project, Caller.from_ctxt(ctxt))

    def list_quotas(self, ctxt: dict[str, Any]) -> list[dict[str, Any]]:
        """Every project with limits of its own, and them (admins only)."""
        self._admin(ctxt, "list")
        return [
            {"project_id": project, "limits": limits}
            for project, limits in quota_db.list_limits(self._db).items()
        ]

    @staticmethod
    def _admin(ctxt: dict[str, Any], verb: str) -> None:
        if not Caller.from_ctxt(ctxt).is_admin:
            raise Forbidden(f"only admins may {verb} quotas")

    def _show(self, project: str, caller: Caller) -> dict[str, Any]:
        defaults = self._defaults()
        own, used = quota_db.get_limits(self._db, project)
        # Key pairs count per user: the caller's own (an operator has none).
        used[quota_db.KEY_PAIRS] = (
            0 if caller.user_id is None else keypairs.used_by(self._db, caller.user_id)
        )
        classes = {
            *quota_db.resource_classes(self._db),
            *defaults.resource_class_nodes,
        }
        resources = {
            quota_db.INSTANCES,
            quota_db.KEY_PAIRS,
            *(quota_db.RESOURCE_CLASS_PREFIX + c for c in classes),
            *own,
            *used,
        }
        return {
            "project_id": project,
            "quotas": {
                resource: {
                    "limit": own.get(resource, defaults.limit(resource)),
                    "in_use": used.get(resource, 0),
                    "default": resource not in own,
                }
                for resource in sorted(resources)
            },
        }
