# SPDX-License-Identifier: Apache-2.0
"""Versioned notifications: what happened to instances, nodes, flavors, quotas, on the bus.

As Nova and Ironic do for billing, audit and monitoring: an oslo.messaging
``Notifier``, configured by the standard ``[oslo_messaging_notifications]``
group (``driver``, ``topics``, ``transport_url``, ``retry``) and off unless
a driver other than ``noop`` is set.  Each notification is an event type
(``instance.create.end``, ``node.owner.update``...), a priority (``INFO``;
``ERROR`` for the ``.error`` events) and a payload in a versioned envelope
(``ringfleet_object.name``, ``.namespace``, ``.version``, ``.data``), from
publisher ``ringfleet-conductor:<host>``.  The event types are listed in
:mod:`conductor.notification_events`, the payloads declared in
:mod:`conductor.notification_payloads`; ``docs/notifications.rst`` publishes
both, with each event's JSON schema.

Each is sent once the change it reports is committed, never before, by the
code that committed it (``scheduler.select_destinations.start``, the
request handed to the scheduler, is the one exception): an instance's through
:meth:`Notifier.instance`, named by its state machine event
(:mod:`conductor.common.instance_states`; the table below maps events to
event types), ownership's through :meth:`Notifier.ownership`, the others
through :meth:`Notifier.send`.  Nothing an operation does waits for the
broker or fails with it: notifications are queued and sent by one thread of
their own (started with the first, after any fork), in the order they were
queued.  While the broker cannot take them the queue fills, then new ones
are dropped; failures and drops are logged once per outage, the recovery
once.  The payload of an instance notification is the instance as read
right after the change (one read of it with its flavor, and of its node
unless its state says its power, by primary key, only when notifications
are on).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import oslo_messaging as messaging
from oslo_config import cfg
from oslo_context import context as request_context

from conductor.common import rpc, verbs
from conductor.common.exception import NotFound
from conductor.common.instance_states import Event
from conductor.common.objects import (
    ClaimOutcome,
    Flavor,
    Instance,
    PowerState,
    ReleaseOutcome,
    TaskState,
    VmState,
)
from conductor.db import flavors, instances
from conductor.db import nodes as node_db
from conductor.db.engine import Database
from conductor.notification_events import EVENTS, Priority
from conductor.notification_payloads import (
    NAMESPACE,
    InstancePayload,
    NodeOwner,
    NodeOwnershipPayload,
    Payload,
)

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

#: How many notifications wait for the broker before new ones are dropped.
QUEUE_SIZE: Final = 10_000
#: Nodes per ``node.owner.update`` (a claim of thousands is several).
NODES_PER_NOTIFICATION: Final = 500
#: The event type of every ownership change.
NODE_OWNER_UPDATE: Final = "node.owner.update"


#: The states whose idle instance's power is known without its node.
_IDLE: Final = (VmState.ACTIVE, VmState.STOPPED)


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
    return event_type, EVENTS[event_type].priority


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
            event_type, _priority = instance_event_type(event, task)
            assert self._db is not None, "a notifier without a database reads no instance"
            if isinstance(instance, str):
                instance, flavor = instances.get_build(self._db, instance)
            else:
                flavor = _flavor_or_none(self._db, instance.flavor)
            if if_state is not None and instance.vm_state is not if_state:
                return
            payload = InstancePayload.of(instance, flavor, self._node_power(instance))
        except Exception as exc:  # a notification never fails the operation
            self._lose(f"instance {ident} {event.value}", exc)
            return
        self._put(event_type, payload)

    def _node_power(self, instance: Instance) -> PowerState | None:
        """The power of *instance*'s node (``None``: no node, or gone meanwhile);
        not read for an idle active or stopped instance, whose state says it."""
        idle = instance.task_state is None and instance.vm_state in (
            VmState.ACTIVE,
            VmState.STOPPED,
        )
        if instance.node_uuid is None or self._db is None or idle:
            return None
        try:
            return node_db.get_node(self._db, instance.node_uuid).power_state
        except NotFound:
            return None

    def instances_created(self, created: Iterable[Instance]) -> None:
        """Build requests stored (``instance.create.start`` each; one read of their flavor)."""
        if self._send is None:
            return
        found: dict[str, Flavor | None] = {}
        event_type = INSTANCE_EVENT_TYPES[Event.REQUEST]
        for instance in created:
            try:
                if instance.flavor not in found:
                    assert self._db is not None, "a notifier without a database reads no flavor"
                    found[instance.flavor] = _flavor_or_none(self._db, instance.flavor)
                payload = InstancePayload.of(instance, found[instance.flavor], None)
            except Exception as exc:  # a notification never fails the operation
                self._lose(f"instance {instance.uuid} {Event.REQUEST.value}", exc)
                continue
            self._put(event_type, payload)

    def send(self, event_type: str, payload: Payload) -> None:
        """*event_type* happened (committed), told by *payload* (built by the caller,
        only when :attr:`enabled`: it may cost a read)."""
        if self._send is None:
            return
        self._put(event_type, payload)

    def ownership(self, reason: OwnerChange, agent: str | None, nodes: Sequence[NodeOwner]) -> None:
        """Nodes changed owner (committed): ``node.owner.update``, a few hundred nodes each."""
        if self._send is None or not nodes:
            return
        for start in range(0, len(nodes), NODES_PER_NOTIFICATION):
            chunk = tuple(nodes[start : start + NODES_PER_NOTIFICATION])
            payload = NodeOwnershipPayload(reason=reason.value, agent=agent, nodes=chunk)
            self._put(NODE_OWNER_UPDATE, payload)

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

    def _put(self, event_type: str, payload: Payload) -> None:
        spec = EVENTS.get(event_type)
        if spec is None or not isinstance(payload, spec.payload):
            # A programming error: sending it would break the published schemas.
            self._lose(event_type, f"not a published event type of {type(payload).__name__}")
            return
        try:
            envelope = payload.envelope()
        except Exception as exc:  # a notification never fails the operation
            self._lose(event_type, exc)
            return
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
            self._queue.put_nowait((spec.priority, event_type, envelope, _context()))
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


def _flavor_or_none(db: Database, name: str) -> Flavor | None:
    try:
        return flavors.get_flavor(db, name)
    except NotFound:
        return None


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
