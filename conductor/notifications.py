# SPDX-License-Identifier: Apache-2.0
"""Versioned notifications: what happened to instances and to node ownership, on the bus.

As Nova and Ironic do for billing, audit and monitoring: an oslo.messaging
``Notifier``, configured by the standard ``[oslo_messaging_notifications]``
group (``driver``, ``topics``, ``transport_url``, ``retry``) and off unless
a driver other than ``noop`` is set.  Each notification is an event type
(``instance.create.end``, ``node.owner.update``...), a priority (``INFO``;
``ERROR`` for the ``.error`` events) and a payload in a versioned envelope
(``ringfleet_object.name``, ``.namespace``, ``.version``, ``.data``), from
publisher ``ringfleet-conductor:<host>``.  ``docs/operations.rst``
("Notifications") lists every event type and payload field.

Each is sent once the change it reports is committed, never before, by the
code that committed it: an instance's through :meth:`Notifier.instance`,
named by its state machine event (:mod:`conductor.common.instance_states`;
the table below maps events to event types), ownership's through
:meth:`Notifier.ownership`.  Nothing an operation does waits for the broker
or fails with it: notifications are queued and sent by one thread of
their own (started with the first, after any fork), in the order they were
queued.  While the broker cannot take them the queue fills, then new ones
are dropped; failures and drops are logged once per outage, the recovery
once.  The payload of an instance notification is the instance as read
right after the change (one read by primary key, only when notifications
are on).

Payload versions follow Nova's rule: a new field is a minor version, a
removed or changed one a major version.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import enum
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Final

import oslo_messaging as messaging
from oslo_config import cfg
from oslo_context import context as request_context

from conductor.common import rpc, verbs
from conductor.common.instance_states import Event
from conductor.common.objects import ClaimOutcome, Instance, ReleaseOutcome, TaskState, VmState
from conductor.db import instances
from conductor.db.engine import Database

__all__ = [
    "ACTION_NAMES",
    "INSTANCE_EVENT_TYPES",
    "NAMESPACE",
    "NODE_OWNER_UPDATE",
    "NOT_NOTIFIED",
    "InstancePayload",
    "NodeOwner",
    "NodeOwnershipPayload",
    "Notifier",
    "OwnerChange",
    "Priority",
    "instance_event_type",
]

LOG = logging.getLogger(__name__)

#: ``ringfleet_object.namespace`` of every payload.
NAMESPACE: Final = "ringfleet"
#: How many notifications wait for the broker before new ones are dropped.
QUEUE_SIZE: Final = 10_000
#: Nodes per ``node.owner.update`` (a claim of thousands is several).
NODES_PER_NOTIFICATION: Final = 500
#: The event type of every ownership change.
NODE_OWNER_UPDATE: Final = "node.owner.update"


class Priority(enum.StrEnum):
    """A notification's priority (oslo.messaging's, as Nova uses them)."""

    INFO = "info"
    ERROR = "error"


#: The action of each power and lifecycle verb, by its task state, in event
#: types (the verb table's: Nova's names, a stop is ``power_off``).
ACTION_NAMES: Final[Mapping[TaskState, str]] = {
    verb.task_state: verb.notification for verb in verbs.ACTIONS
}

#: The event type of each state machine event that is notified; a verb's
#: start is named by the verb table, the end of an action (``*``) by the
#: action's task state (:data:`ACTION_NAMES`).
INSTANCE_EVENT_TYPES: Final[Mapping[Event, str]] = {
    Event.REQUEST: "instance.create.start",
    Event.DEPLOYED: "instance.create.end",
    Event.FAIL: "instance.create.error",
    Event.TORN_DOWN: "instance.delete.end",
    Event.TEARDOWN_FAILED: "instance.delete.error",
    **{verb.event: f"instance.{verb.notification}.start" for verb in verbs.VERBS},
    Event.POWERED_ON: "instance.*.end",
    Event.POWERED_OFF: "instance.*.end",
    Event.REBUILT: "instance.*.end",
    Event.ACTION_FAILED: "instance.*.error",
    # As Nova's power-state sync, whose stop of an instance found off ends
    # with the stop's own end: consumers see it stopped either way.
    Event.FOUND_OFF: "instance.power_off.end",
}

#: The steps inside a build that are not notified: the build's start, end
#: and error are (a reschedule is a failed attempt; the instance's
#: ``attempts`` and ``fault`` in ``instance.create.end`` or ``.error`` tell them).
NOT_NOTIFIED: Final = frozenset({Event.ALLOCATE, Event.GIVE_BACK, Event.RESCHEDULE})


def instance_event_type(event: Event, task: TaskState | None = None) -> tuple[str, Priority]:
    """The event type and priority of *event*; *task*: the action an end or
    failure is of.

    :raises KeyError: *event* is not notified (:data:`NOT_NOTIFIED`), or an
        action's end without its task
    """
    event_type = INSTANCE_EVENT_TYPES[event]
    if "*" in event_type:
        if task is None:
            raise KeyError(f"{event.value} needs the task state of the action it ends")
        event_type = event_type.replace("*", ACTION_NAMES[task])
    priority = Priority.ERROR if event_type.endswith(".error") else Priority.INFO
    return event_type, priority


# -- payloads ------------------------------------------------------------------------


def _primitive(value: Any) -> Any:
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _primitive(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_primitive(v) for v in value]
    return value


@dataclasses.dataclass(frozen=True)
class _Payload:
    """A versioned payload: its fields, in a ``ringfleet_object`` envelope."""

    NAME: ClassVar[str]
    VERSION: ClassVar[str]

    def envelope(self) -> dict[str, Any]:
        return {
            "ringfleet_object.name": self.NAME,
            "ringfleet_object.namespace": NAMESPACE,
            "ringfleet_object.version": self.VERSION,
            "ringfleet_object.data": _primitive(dataclasses.asdict(self)),
        }


@dataclasses.dataclass(frozen=True)
class InstancePayload(_Payload):
    """An instance as it is after the change (every ``instance.*`` event)."""

    NAME: ClassVar[str] = "InstancePayload"
    VERSION: ClassVar[str] = "1.0"

    uuid: str
    name: str
    project_id: str | None
    user_id: str | None
    flavor: str
    vm_state: str
    task_state: str | None
    node_uuid: str | None
    host: str | None
    image_source: str | None
    fault: str | None
    attempts: int
    created_at: datetime.datetime | None
    updated_at: datetime.datetime | None

    @classmethod
    def of(cls, instance: Instance) -> InstancePayload:
        source = (instance.image or {}).get("source")
        return cls(
            uuid=instance.uuid,
            name=instance.name,
            project_id=instance.project_id,
            user_id=instance.user_id,
            flavor=instance.flavor,
            vm_state=instance.vm_state.value,
            task_state=None if instance.task_state is None else instance.task_state.value,
            node_uuid=instance.node_uuid,
            host=instance.host,
            # No query string: a signed URL's signature is a credential.
            image_source=None if source is None else str(source).split("?", 1)[0],
            fault=instance.fault,
            attempts=instance.attempts,
            created_at=instance.created_at,
            updated_at=instance.updated_at,
        )


class OwnerChange(enum.StrEnum):
    """Why nodes changed owner (``reason`` of ``node.owner.update``)."""

    #: An agent took nodes that were free or whose owner had left.
    CLAIM = "claim"
    #: An agent took pinned nodes (hosting instances) of an owner gone
    #: longer than ``rehome_grace``: the instances' host moved with them.
    REHOME = "rehome"
    #: An agent gave nodes up (they have no owner now).
    RELEASE = "release"
    #: An agent handed nodes to other agents (a drain, a hand-over).
    TRANSFER = "transfer"
    #: An operator moved a node whose owner is gone (``node move``).
    MOVE = "move"


@dataclasses.dataclass(frozen=True)
class NodeOwner:
    """One node's ownership after a change."""

    uuid: str
    owner: str | None
    owner_epoch: int
    #: Who owned it before; ``None`` for a claim or a re-home (free, or an
    #: owner that left: the node's previous notification names it).
    previous_owner: str | None = None
    #: The instance it hosts (pinned), if any.
    instance_uuid: str | None = None


@dataclasses.dataclass(frozen=True)
class NodeOwnershipPayload(_Payload):
    """Nodes whose ``(owner, owner_epoch)`` one committed change set (``node.owner.update``)."""

    NAME: ClassVar[str] = "NodeOwnershipPayload"
    VERSION: ClassVar[str] = "1.0"

    reason: str
    #: The agent whose call made the change (``None`` for an operator's move).
    agent: str | None
    nodes: tuple[NodeOwner, ...]


# -- the notifier --------------------------------------------------------------------

#: Sends one notification: (priority, event type, payload envelope, the
#: request's context: its ids only, or ``None``).
Send = Callable[[Priority, str, dict[str, Any], "request_context.RequestContext | None"], None]

#: The logger oslo.messaging's notifier reports a failed send to (and swallows it).
_OSLO_NOTIFIER_LOGGER: Final = "oslo_messaging.notify.notifier"


class Notifier:
    """Queues notifications and sends them from one thread; never raises to its callers.

    :meth:`disabled` (the default everywhere) does nothing, reads nothing.
    """

    def __init__(
        self,
        send: Send | None,
        db: Database | None = None,
        *,
        queue_size: int = QUEUE_SIZE,
        close: Callable[[], object] | None = None,
    ) -> None:
        """``send``: ``None`` for a notifier that is off; ``db``: where an
        instance named by its id is read; ``close``: what :meth:`close`
        releases last (the transport)."""
        self._send = send
        self._db = db
        self._close = close
        self._queue: queue.Queue[
            tuple[Priority, str, dict[str, Any], request_context.RequestContext | None] | None
        ] = queue.Queue(maxsize=queue_size)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        # Lost since the last notification sent (failed or dropped); the
        # first loss of an outage is logged, the recovery too.
        self._lost = 0
        self._send_failed = False

    @classmethod
    def disabled(cls) -> Notifier:
        return cls(None)

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts, db: Database | None) -> Notifier:
        """The notifier of ``[oslo_messaging_notifications]``; :meth:`disabled`
        unless a driver other than ``noop`` is set."""
        rpc.register_opts(conf)
        drivers = [d for d in conf.oslo_messaging_notifications.driver if d != "noop"]
        if not drivers:
            return cls.disabled()
        transport = messaging.get_notification_transport(conf)
        notifier = messaging.Notifier(transport, publisher_id=f"ringfleet-conductor:{conf.host}")
        LOG.info(
            "Notifications on: drivers %s, topics %s",
            ",".join(drivers),
            ",".join(conf.oslo_messaging_notifications.topics),
        )

        def send(
            priority: Priority,
            event_type: str,
            payload: dict[str, Any],
            ctxt: request_context.RequestContext | None,
        ) -> None:
            # oslo.messaging sends a context object's redacted copy, and no dict.
            getattr(notifier, priority.value)(ctxt if ctxt is not None else {}, event_type, payload)

        return cls(send, db, close=lambda: rpc.close_transport(transport))

    @property
    def enabled(self) -> bool:
        return self._send is not None

    # -- what the conductor reports ----------------------------------------------------

    def instance(
        self,
        event: Event,
        instance: Instance | str,
        *,
        task: TaskState | None = None,
        if_state: VmState | None = None,
    ) -> None:
        """*event* happened to *instance* (committed); *instance* by its id is read now.

        ``task``: for the end or failure of an action, the action's task
        state.  ``if_state``: only if the instance read is in that state
        (a final one: a write that may have left the instance alone).
        """
        if self._send is None:
            return
        ident = instance if isinstance(instance, str) else instance.uuid
        try:
            event_type, priority = instance_event_type(event, task)
            if isinstance(instance, str):
                assert self._db is not None, "a notifier without a database needs instances"
                instance = instances.get_instance(self._db, instance)
            if if_state is not None and instance.vm_state is not if_state:
                return
            payload = InstancePayload.of(instance).envelope()
        except Exception as exc:  # a notification never fails the operation
            self._lose(f"instance {ident} {event.value}", exc)
            return
        self._put(priority, event_type, payload)

    def instances_created(self, created: Iterable[Instance]) -> None:
        """Build requests stored (``instance.create.start`` each, no read)."""
        if self._send is None:
            return
        for instance in created:
            self.instance(Event.REQUEST, instance)

    def ownership(self, reason: OwnerChange, agent: str | None, nodes: Sequence[NodeOwner]) -> None:
        """Nodes changed owner (committed): ``node.owner.update``, a few hundred nodes each."""
        if self._send is None or not nodes:
            return
        for start in range(0, len(nodes), NODES_PER_NOTIFICATION):
            chunk = tuple(nodes[start : start + NODES_PER_NOTIFICATION])
            payload = NodeOwnershipPayload(reason=reason.value, agent=agent, nodes=chunk)
            self._put(Priority.INFO, NODE_OWNER_UPDATE, payload.envelope())

    def claimed(self, agent: str, outcome: ClaimOutcome) -> None:
        """*agent*'s claim took ``outcome.taken``: ``claim`` for free nodes,
        ``rehome`` for pinned ones."""
        if self._send is None or not outcome.taken:
            return
        epochs = {o.node_uuid: o.epoch for o in outcome.granted}
        for reason, pinned in ((OwnerChange.CLAIM, False), (OwnerChange.REHOME, True)):
            nodes = [
                NodeOwner(uuid, agent, epochs[uuid], instance_uuid=instance)
                for uuid, instance in sorted(outcome.taken.items())
                if (instance is not None) is pinned and uuid in epochs
            ]
            self.ownership(reason, agent, nodes)

    def released(self, agent: str, outcome: ReleaseOutcome) -> None:
        """*agent* gave up ``outcome.done``."""
        if self._send is None:
            return
        nodes = [
            NodeOwner(uuid, None, epoch, previous_owner=agent)
            for uuid, epoch in sorted(outcome.done.items())
        ]
        self.ownership(OwnerChange.RELEASE, agent, nodes)

    def transferred(
        self,
        previous_owner: str | None,
        new_owners: Mapping[str, str],
        outcome: ReleaseOutcome,
        *,
        reason: OwnerChange = OwnerChange.TRANSFER,
    ) -> None:
        """``outcome.done`` moved from *previous_owner* to ``new_owners[node]``:
        the agent's hand-over, or (``reason`` ``move``) an operator's move."""
        if self._send is None:
            return
        nodes = [
            NodeOwner(
                uuid,
                new_owners[uuid],
                epoch,
                previous_owner=previous_owner,
                instance_uuid=outcome.hosted.get(uuid),
            )
            for uuid, epoch in sorted(outcome.done.items())
        ]
        agent = previous_owner if reason is OwnerChange.TRANSFER else None
        self.ownership(reason, agent, nodes)

    # -- sending -----------------------------------------------------------------------

    def _put(self, priority: Priority, event_type: str, payload: dict[str, Any]) -> None:
        with self._lock:
            if self._closed:
                return
            if self._thread is None:  # first use: after any fork
                self._thread = threading.Thread(
                    target=self._run, name=f"notifier-{id(self):x}", daemon=True
                )
                _swallowed_failures().watch(self._thread.name, self)
                self._thread.start()
        try:
            self._queue.put_nowait((priority, event_type, payload, _context()))
        except queue.Full:
            self._lose(event_type, f"{self._queue.maxsize} notifications wait for the broker")

    def _run(self) -> None:
        assert self._send is not None
        while (item := self._queue.get()) is not None:
            priority, event_type, payload, ctxt = item
            self._send_failed = False
            try:
                self._send(priority, event_type, payload, ctxt)
            except Exception as exc:
                self._lose(event_type, exc)
                continue
            if self._send_failed:  # oslo.messaging said so in its log, and went on
                self._lose(event_type, "the driver could not send it")
            else:
                self._sent()

    def swallowed_failure(self) -> None:
        """oslo.messaging failed to send the notification in flight (and only logged it)."""
        self._send_failed = True

    def _lose(self, what: str, why: object) -> None:
        with self._lock:
            self._lost += 1
            first = self._lost == 1
        if first:
            LOG.warning(
                "Notification lost (%s): %s; the operation went on, further losses are "
                "logged at DEBUG until one is sent",
                what,
                why,
            )
        else:
            LOG.debug("Notification lost (%s): %s", what, why)

    def _sent(self) -> None:
        with self._lock:
            lost, self._lost = self._lost, 0
        if lost:
            LOG.info("Notifications sent again; %d were lost", lost)

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued (up to *timeout* s: the broker may be gone), then stop."""
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is not None:
            deadline = time.monotonic() + timeout
            # Full: the thread is stuck on the broker (a daemon, left behind).
            with contextlib.suppress(queue.Full):
                self._queue.put(None, timeout=timeout)
            thread.join(max(0.0, deadline - time.monotonic()))
            _swallowed_failures().forget(thread.name)
        if self._close is not None:
            self._close()


def _context() -> request_context.RequestContext | None:
    """The request ids of the call that made the change (audit: which request
    did it), and nothing else of its context."""
    current = request_context.get_current()
    if current is None:
        return None
    return request_context.RequestContext(
        request_id=current.request_id,
        global_request_id=current.global_request_id,
        overwrite=False,
    )


class _SwallowedFailures(logging.Filter):
    """oslo.messaging's notifier logs a failed send (with a traceback and the
    payload) instead of raising: on a notifier thread of ours that record is
    the failure, told to its :class:`Notifier` (which logs once per outage)."""

    def __init__(self) -> None:
        super().__init__()
        self._notifiers: dict[str, Notifier] = {}

    def watch(self, thread_name: str, notifier: Notifier) -> None:
        self._notifiers[thread_name] = notifier

    def forget(self, thread_name: str) -> None:
        self._notifiers.pop(thread_name, None)

    def filter(self, record: logging.LogRecord) -> bool:
        notifier = self._notifiers.get(record.threadName or "")
        if notifier is None or record.levelno < logging.ERROR:
            return True
        notifier.swallowed_failure()
        return False


_filter_lock = threading.Lock()


def _swallowed_failures() -> _SwallowedFailures:
    """The one filter on oslo.messaging's notifier logger (installed on first use)."""
    logger = logging.getLogger(_OSLO_NOTIFIER_LOGGER)
    with _filter_lock:
        for installed in logger.filters:
            if isinstance(installed, _SwallowedFailures):
                return installed
        added = _SwallowedFailures()
        logger.addFilter(added)
        return added
