# SPDX-License-Identifier: Apache-2.0
"""The action history of instances (Nova's ``instance_actions``).

Each user action (create, delete, reboot, stop, start, rebuild) is a row
written in the transaction of the state change that puts its work in
flight (:func:`started`: the build request stored, the delete or verb's
state set), and finished in the transaction of the state change that ends
it (:func:`finished`: the deploy done or failed for good, the teardown
done or failed, the action's answer).  A row is thus never ahead of the
instance's state, nor behind it, whichever conductor wrote either.

A verb issued again while the same action is in flight routes it anew
(:mod:`conductor.common.instance_states`) and is not a new action: the
row of the first request stays the one in flight.  A delete ends whatever
was in flight (a build, an action) with an error: their answers, if any
come, change nothing.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid as uuidlib
from collections.abc import Mapping, Sequence
from typing import Any, Final

from sqlalchemy import Connection, Row, Table, and_, func, insert, or_, select, update

from conductor.common.clock import shown
from conductor.common.exception import InstanceActionNotFound
from conductor.common.instance_states import Event
from conductor.common.tenancy import Caller
from conductor.db.engine import Database, retry_on_dead_connection
from conductor.db.models import InstanceActionModel

__all__ = [
    "ACTION_OF",
    "ActionPage",
    "Requester",
    "finished",
    "get_action",
    "list_actions",
    "started",
]

_ACTIONS: Table = InstanceActionModel.__table__  # type: ignore[assignment]

#: The action each starting event begins (Nova's instance action names).
ACTION_OF: Final[Mapping[Event, str]] = {
    Event.REQUEST: "create",
    Event.DELETE: "delete",
    Event.REBOOT: "reboot",
    Event.REBOOT_HARD: "reboot",
    Event.STOP: "stop",
    Event.START: "start",
    Event.REBUILD: "rebuild",
}
_VERBS: Final = ("reboot", "stop", "start", "rebuild")
SUCCESS: Final = "Success"
ERROR: Final = "Error"

#: The actions each ending event finishes, and how.
_ENDS: Final[Mapping[Event, tuple[tuple[str, ...], str]]] = {
    Event.DEPLOYED: (("create",), SUCCESS),
    Event.FAIL: (("create",), ERROR),
    Event.TORN_DOWN: (("delete",), SUCCESS),
    Event.TEARDOWN_FAILED: (("delete",), ERROR),
    Event.POWERED_ON: (_VERBS, SUCCESS),
    Event.POWERED_OFF: (_VERBS, SUCCESS),
    Event.REBUILT: (_VERBS, SUCCESS),
    Event.ACTION_FAILED: (_VERBS, ERROR),
    # A delete ends the build or action it interrupts.
    Event.DELETE: (("create", *_VERBS), ERROR),
}


@dataclasses.dataclass(frozen=True)
class Requester:
    """Who asked, and the request's id (the API's ``x-openstack-request-id``)."""

    request_id: str | None
    project_id: str | None
    user_id: str | None

    @classmethod
    def of(cls, ctxt: Any) -> Requester:
        """The requester of an RPC call, from its context (checked by
        :meth:`Caller.from_ctxt <conductor.common.tenancy.Caller.from_ctxt>`;
        a request id that is no printable string is replaced)."""
        caller = Caller.from_ctxt(ctxt)
        request_id = ctxt.get("request_id") if isinstance(ctxt, Mapping) else None
        if not isinstance(request_id, str) or not request_id.isprintable():
            request_id = None
        return cls(request_id, caller.project_id, caller.user_id)


def started(
    connection: Connection,
    instance_uuids: Sequence[str],
    event: Event,
    requester: Requester,
    now: datetime.datetime,
) -> None:
    """Record *event*'s action on each instance, in the caller's transaction.

    A request without an id (a caller of the RPC API that set none) gets one.
    """
    if not instance_uuids:
        return
    if event in _ENDS:  # a delete first ends what it interrupts
        for uuid in instance_uuids:
            finished(connection, uuid, event, now)
    request_id = requester.request_id or f"req-{uuidlib.uuid4()}"
    connection.execute(
        insert(_ACTIONS),
        [
            {
                "instance_uuid": uuid,
                "request_id": request_id[:255],
                "action": ACTION_OF[event],
                "project_id": requester.project_id,
                "user_id": requester.user_id,
                "start_time": now,
            }
            for uuid in instance_uuids
        ],
    )


def finished(
    connection: Connection, instance_uuid: str, event: Event, now: datetime.datetime
) -> None:
    """Finish the actions in flight that *event* ends, in the caller's transaction."""
    ends = _ENDS.get(event)
    if ends is None:
        return
    actions, result = ends
    connection.execute(
        update(_ACTIONS)
        .where(
            _ACTIONS.c.instance_uuid == instance_uuid,
            _ACTIONS.c.action.in_(actions),
            _ACTIONS.c.finish_time.is_(None),
        )
        .values(
            finish_time=now,
            result=result,
            message=ERROR if result == ERROR else None,
        )
    )


def _instant(value: datetime.datetime | None) -> str | None:
    """An instant as shown: ISO 8601 in UTC, with its zone."""
    return None if value is None else shown(value)


def _shown(row: Row[Any]) -> dict[str, Any]:
    return {
        "action": row.action,
        "instance_uuid": row.instance_uuid,
        "request_id": row.request_id,
        "project_id": row.project_id,
        "user_id": row.user_id,
        "start_time": _instant(row.start_time),
        "finish_time": _instant(row.finish_time),
        # Nova's updated_at (since its 2.58): the last change of the action.
        "updated_at": _instant(row.finish_time or row.start_time),
        "message": row.message,
    }


def _events(row: Row[Any]) -> list[dict[str, Any]]:
    """Nova's events of an action: here one, the agent's (or the conductor's) work."""
    return [
        {
            "event": f"ringfleet_{row.action}_instance",
            "start_time": _instant(row.start_time),
            "finish_time": _instant(row.finish_time),
            "result": row.result,
        }
    ]


@dataclasses.dataclass(frozen=True)
class ActionPage:
    """Which of an instance's actions to list (Nova's 2.58 and 2.66).

    ``marker``: the request id of the previous page's last action (the
    page starts after it); ``changes_since``/``changes_before``: the
    actions whose ``updated_at`` (its finish, else its start) is at or
    after / at or before the instant (naive UTC, as stored).
    """

    limit: int | None = None
    marker: str | None = None
    changes_since: datetime.datetime | None = None
    changes_before: datetime.datetime | None = None


@retry_on_dead_connection
def list_actions(
    db: Database, instance_uuid: str, paged: ActionPage | None = None
) -> list[dict[str, Any]]:
    """The instance's actions, the newest first (as Nova lists them), a page
    at a time (keyset: after the marker's start time and id).

    :raises InstanceActionNotFound: a marker that is no action of the instance
    """
    paged = paged or ActionPage()
    query = select(_ACTIONS).where(_ACTIONS.c.instance_uuid == instance_uuid)
    updated = func.coalesce(_ACTIONS.c.finish_time, _ACTIONS.c.start_time)
    if paged.changes_since is not None:
        query = query.where(updated >= paged.changes_since)
    if paged.changes_before is not None:
        query = query.where(updated <= paged.changes_before)
    with db.read() as connection:
        if paged.marker is not None:
            last = connection.execute(
                select(_ACTIONS.c.start_time, _ACTIONS.c.id)
                .where(
                    _ACTIONS.c.instance_uuid == instance_uuid,
                    _ACTIONS.c.request_id == paged.marker,
                )
                .order_by(_ACTIONS.c.id.desc())
                .limit(1)
            ).first()
            if last is None:
                raise InstanceActionNotFound(paged.marker)
            query = query.where(
                or_(
                    _ACTIONS.c.start_time < last.start_time,
                    and_(_ACTIONS.c.start_time == last.start_time, _ACTIONS.c.id < last.id),
                )
            )
        query = query.order_by(_ACTIONS.c.start_time.desc(), _ACTIONS.c.id.desc())
        if paged.limit is not None:
            query = query.limit(paged.limit)
        return [_shown(row) for row in connection.execute(query)]


@retry_on_dead_connection
def get_action(db: Database, instance_uuid: str, request_id: str) -> dict[str, Any]:
    """The instance's action of *request_id* (the latest, should a request
    id repeat), with its ``events``.

    :raises InstanceActionNotFound:
    """
    with db.read() as connection:
        row = connection.execute(
            select(_ACTIONS)
            .where(
                _ACTIONS.c.instance_uuid == instance_uuid,
                _ACTIONS.c.request_id == request_id,
            )
            .order_by(_ACTIONS.c.id.desc())
            .limit(1)
        ).first()
    if row is None:
        raise InstanceActionNotFound(request_id)
    return _shown(row) | {"events": _events(row)}
