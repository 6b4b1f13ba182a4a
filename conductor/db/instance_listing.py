# SPDX-License-Identifier: Apache-2.0
"""Instance lists as a tenant asks for them: Nova's filters and sort order, a page at a time.

Beside the ``vm_state`` and ``host`` filters of old, a list takes Nova's
``name`` (a regular expression, matched by the database as Nova's is:
PostgreSQL's ``~``, MySQL's and MariaDB's ``REGEXP``), ``status`` (the
state pairs that show it, :func:`conductor.common.nova_status.state_pairs`),
``changes-since`` (``updated_at`` at or after it; deleted instances
included, which the store keeps, as Nova lists its recently deleted ones)
and a sort key and direction, and Nova's tag filters (``tags``: every
one; ``tags_any``: one at least; ``not_tags``: not every one;
``not_tags_any``: none; one ``EXISTS`` on ``instance_tags`` per tag, or per
list for the *any* forms).  Pages are keyset pages: the marker is the
uuid of the previous page's last instance, and the next page starts after
its (sort key, uuid) in the list's order, so that no instance is skipped
or listed twice whatever the key.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, exists, false, not_, or_, select
from sqlalchemy.exc import DBAPIError

from conductor.common.exception import FieldError, InstanceNotFound, InvalidInput
from conductor.common.list_filters import ListOrder
from conductor.common.nova_status import state_pairs
from conductor.common.objects import Instance, VmState
from conductor.db.engine import Database, retry_on_dead_connection
from conductor.db.instances import to_instance
from conductor.db.models import InstanceModel, InstanceTagModel

__all__ = ["list_page"]

LOG = logging.getLogger(__name__)


@retry_on_dead_connection
def list_page(
    db: Database,
    order: ListOrder,
    *,
    vm_state: VmState | None = None,
    host: str | None = None,
    limit: int = 1000,
    marker: str | None = None,
    project_id: str | None = None,
) -> list[Instance]:
    """One page of instances in *order*'s order; only ``project_id``'s when given.

    Without ``vm_state``, deleted instances are left out unless the list
    asks for changes since an instant or for the DELETED status.

    :raises InstanceNotFound: a marker not in the caller's list (with a sort key)
    :raises InvalidInput: a ``name`` the database takes for no regular expression
    """
    query = select(InstanceModel)
    if project_id is not None:
        query = query.where(InstanceModel.project_id == project_id)
    query = _filtered(query, order, vm_state, host)
    column = getattr(InstanceModel, order.column)
    if order.descending:
        query = query.order_by(column.desc(), InstanceModel.uuid.desc())
    else:
        query = query.order_by(column.asc(), InstanceModel.uuid.asc())
    with db.transaction() as session:
        if marker is not None:
            query = query.where(_after(session, order, marker, project_id))
        try:
            return [to_instance(r) for r in session.scalars(query.limit(limit))]
        except DBAPIError as exc:
            if exc.connection_invalidated or order.name is None:
                raise
            # The pattern is the database's to parse (each has its own
            # syntax): one it refuses is the caller's, named.
            LOG.info("Instance list by name %r refused by the database: %s", order.name, exc.orig)
            raise InvalidInput(
                [
                    FieldError.about(
                        "name", "not a regular expression the database takes", order.name
                    )
                ]
            ) from None


def _filtered(
    query: Select[Any], order: ListOrder, vm_state: VmState | None, host: str | None
) -> Select[Any]:
    if vm_state is not None:
        query = query.where(InstanceModel.vm_state == vm_state.value)
    elif order.changes_since is None and order.status != "DELETED":
        query = query.where(InstanceModel.vm_state != VmState.DELETED.value)
    if host is not None:
        query = query.where(InstanceModel.host == host)
    if order.name is not None:
        query = query.where(InstanceModel.name.regexp_match(order.name))
    if order.status is not None:
        query = query.where(_showing(order.status))
    if order.changes_since is not None:
        query = query.where(InstanceModel.updated_at >= order.changes_since)
    return _tagged(query, order)


def _has(tags: tuple[str, ...]) -> ColumnElement[bool]:
    """The condition that an instance has one of *tags* at least."""
    return exists().where(
        InstanceTagModel.instance_uuid == InstanceModel.uuid, InstanceTagModel.tag.in_(tags)
    )


def _tagged(query: Select[Any], order: ListOrder) -> Select[Any]:
    """Nova's tag filters (its ``instance_get_all_by_filters`` semantics)."""
    if order.tags:
        query = query.where(*(_has((tag,)) for tag in order.tags))
    if order.tags_any:
        query = query.where(_has(order.tags_any))
    if order.not_tags:
        query = query.where(not_(and_(*(_has((tag,)) for tag in order.not_tags))))
    if order.not_tags_any:
        query = query.where(not_(_has(order.not_tags_any)))
    return query


def _showing(status: str) -> ColumnElement[bool]:
    """The condition that an instance shows *status* (an empty OR: none does)."""
    conditions = []
    for vm_state, tasks, among in state_pairs(status):
        where = InstanceModel.vm_state == vm_state.value
        if tasks is None:
            conditions.append(where)
        elif among:
            conditions.append(and_(where, InstanceModel.task_state.in_([t.value for t in tasks])))
        else:
            idle = or_(
                InstanceModel.task_state.is_(None),
                InstanceModel.task_state.not_in([t.value for t in tasks]),
            )
            conditions.append(and_(where, idle))
    return or_(false(), *conditions)


def _after(session: Any, order: ListOrder, marker: str, project_id: str | None) -> Any:
    """The condition of the rows after *marker* in *order*'s order.

    By uuid (the order of old), the marker need not exist.  By another
    key, its value is read, within the caller's project (another
    project's instance is no marker: ``InstanceNotFound``, as for an
    unknown one).
    """
    descending = order.descending
    if order.column == "uuid":
        return InstanceModel.uuid < marker if descending else InstanceModel.uuid > marker
    column = getattr(InstanceModel, order.column)
    found = select(column).where(InstanceModel.uuid == marker)
    if project_id is not None:
        found = found.where(InstanceModel.project_id == project_id)
    row = session.execute(found).first()
    if row is None:
        # Nova answers 400; a 404 says the same (no such instance here) and is
        # what an unknown uuid gets everywhere else in this API.
        raise InstanceNotFound(marker)
    value = row[0]
    if descending:
        return or_(column < value, and_(column == value, InstanceModel.uuid < marker))
    return or_(column > value, and_(column == value, InstanceModel.uuid > marker))
