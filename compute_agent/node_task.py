# SPDX-License-Identifier: Apache-2.0
"""One node task of the agent: what every driver verb runs inside.

A verb the conductor asks for (a deploy, a teardown, a power action, a
rebuild) is one :class:`NodeTask` on one node, acquired at the epoch the
conductor sent and for one :class:`Purpose`::

    with tasks.acquire(node.uuid, epoch, Purpose("power", target)) as task:
        return driver.set_power(task.ctx, node, target)

The task does, once, what each verb needs around its driver call:

* the fence: the epoch must be the one held and the membership CONNECTED
  (:meth:`OwnershipManager.check`), else :class:`NotOwner` and nothing is done;
* the intake: an agent that stops refuses (:class:`Conflict` on ``host``);
* the busy mark: one task per node at a time; another purpose finds the
  node busy (:class:`Conflict` on ``node_uuid``), the same one repeated is
  answered ``"in-progress"`` when the verb is idempotent (:class:`AlreadyRunning`);
* the progress callback a driver calls before every step
  (:meth:`NodeTask.progress`): the fence again, a SUSPENDED membership
  ridden out, the task stopped when a later task took its purpose over,
  and a deploy's steps kept for the conductor's heartbeats;
* the stop: an action abandoned because the agent stops, or whose node was
  lost, ends in the background with nothing reported (the next owner, or
  the next process, resumes it from what the back end shows);
* the result: a background task's outcome is reported once, after the busy
  mark is released.

The busy mark is released when the ``with`` block ends, on every path,
unless the task was handed to a background thread (:meth:`NodeTask.spawn_after`),
whose own task (:meth:`NodeTasks.resume`) releases it when it ends.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Container
from types import TracebackType
from typing import Any, NamedTuple, Protocol

from compute_agent.drivers.base import ActionContext
from conductor.common.exception import ActionAbandoned, Conflict, NotOwner

__all__ = [
    "PROGRESS_EVERY",
    "AlreadyRunning",
    "Fence",
    "NodeTask",
    "NodeTasks",
    "Purpose",
    "ResultSink",
    "TaskCancelled",
]

LOG = logging.getLogger(__name__)

#: Seconds a deploy runs before the agent reports the back end's progress
#: on it, and between two such reports, unless the caller of
#: NodeTasks.take_progress says otherwise (the agent passes its
#: ``report_interval``, whose default this is).
PROGRESS_EVERY = 30.0

#: Seconds between two looks at which tasks a stop may leave (``wait_idle``).
_RECHECK_LEFT_S = 0.1

#: The purpose whose steps are heartbeats for the conductor's build_timeout.
_DEPLOY = "deploy"


class Purpose(NamedTuple):
    """What a task does on its node: ``("deploy", instance)``, ``("power", target)``..."""

    action: str
    subject: str


class Fence(Protocol):
    """Whether this agent may act on a node at an epoch
    (:class:`compute_agent.ownership.OwnershipManager`)."""

    def check(self, node_uuid: str, epoch: int) -> None: ...

    def wait_can_act(self, node_uuid: str, epoch: int, timeout: float) -> None: ...


class ResultSink(Protocol):
    """Where build and teardown outcomes go (:class:`compute_agent.reporting.ResultReporter`).

    One way only: the reporter keeps a result until the conductor takes it,
    so no outcome depends on the sweeper.
    """

    def report(self, result: dict[str, Any]) -> None: ...

    def report_destroy(self, result: dict[str, Any]) -> None: ...


class AlreadyRunning(Exception):
    """The node already runs a task for this purpose: *answer* is the verb's reply.

    Never reaches the conductor: the verb returns the answer instead.

    :ivar answer: ``"in-progress"``, or ``"accepted"`` when the running task
        was just told to hand over to this purpose (see ``takes_over``)
    :ivar took_over: whether it was just told so
    """

    def __init__(self, answer: str, *, took_over: bool = False) -> None:
        super().__init__(answer)
        self.answer = answer
        self.took_over = took_over


class TaskCancelled(Exception):
    """A later task took this one's purpose over: stop at the next step (internal)."""

    def __init__(self, node_uuid: str, purpose: Purpose) -> None:
        super().__init__(f"{purpose.action} on node {node_uuid} cancelled")


@dataclasses.dataclass
class _Progress:
    """The back end's progress on one deploy (times from time.monotonic())."""

    epoch: int
    started: float  # its first step
    moved: float = float("-inf")  # its latest step
    reported: float = float("-inf")  # the step the last heartbeat was for
    told_at: float = float("-inf")  # when that heartbeat was sent


class NodeTasks:
    """The agent's node tasks: which node is busy with what; thread-safe.

    :param suspend_wait: seconds a task's progress waits out a SUSPENDED
        membership before giving the node up
    """

    def __init__(
        self, host: str, ownership: Fence, results: ResultSink, *, suspend_wait: float = 10.0
    ) -> None:
        self._host = host
        self._ownership = ownership
        self._results = results
        self._suspend_wait = suspend_wait
        self._lock = threading.Lock()
        self._in_flight: dict[str, Purpose] = {}
        # Nodes whose running task a later one took the purpose of: it stops
        # at its next step and leaves the node to that one.
        self._cancelled: set[str] = set()
        # node -> the back end's progress on its deploy: see take_progress.
        self._progress: dict[str, _Progress] = {}
        self._threads: set[threading.Thread] = set()
        self._accepting = True

    def busy_nodes(self) -> set[str]:
        with self._lock:
            return set(self._in_flight)

    def in_flight(self) -> int:
        with self._lock:
            return len(self._in_flight)

    def take_progress(
        self, now: float | None = None, every: float = PROGRESS_EVERY
    ) -> dict[str, int]:
        """Deploys the back end moved on that are due a heartbeat: node -> epoch.

        A deploy is reported once it has run *every* seconds, then at most
        every *every* seconds while the back end moves it on (a new
        provision step): the conductor's ``build_timeout`` then counts from
        the back end's progress, and deploys shorter than *every* cost
        nothing.
        """
        now = time.monotonic() if now is None else now
        due: dict[str, int] = {}
        with self._lock:
            for node_uuid, seen in self._progress.items():
                if (
                    seen.moved > seen.reported
                    and now - seen.started >= every
                    and now - seen.told_at >= every
                ):
                    due[node_uuid] = seen.epoch
                    seen.reported, seen.told_at = seen.moved, now
        return due

    def stop_accepting(self) -> None:
        """The agent stops: every task acquired from now on is refused."""
        with self._lock:
            self._accepting = False

    def wait_idle(self, timeout: float, *, left: Callable[[], Container[int]] = frozenset) -> bool:
        """Wait up to *timeout* s in all for background tasks; False if some still run.

        *left*: the threads (idents) not waited for, asked again while
        waiting (a task may enter or leave a request to a hung back end).
        """
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = list(self._threads)
        while True:
            skipped = left()
            running = [t for t in threads if t.is_alive() and t.ident not in skipped]
            remaining = deadline - time.monotonic()
            if not running or remaining <= 0:
                return not running
            running[0].join(min(remaining, _RECHECK_LEFT_S))

    # -- tasks -------------------------------------------------------------------

    def acquire(
        self,
        node_uuid: str,
        epoch: int,
        purpose: Purpose,
        *,
        instance_uuid: str | None = None,
        idempotent: bool = False,
        takes_over: Purpose | None = None,
    ) -> NodeTask:
        """Fence, then mark *node_uuid* busy with *purpose*: the task to run it in.

        :param instance_uuid: the instance the task is for (its driver context's)
        :param idempotent: *purpose* running already is answered, not refused
        :param takes_over: a running task of this purpose is told to stop at
            its next step and leave the node to *purpose* (a delete of the
            instance it deploys)
        :raises NotOwner: the epoch is not the one held, or the membership is
            not CONNECTED: nothing is done
        :raises Conflict: the agent is stopping, or the node is busy (retry)
        :raises AlreadyRunning: with the verb's answer (see *idempotent*, *takes_over*)
        """
        self._ownership.check(node_uuid, epoch)
        with self._lock:
            if not self._accepting:
                # The nodes are about to move: the conductor retries with
                # whoever owns them next.
                raise Conflict(field="host", value=self._host, reason="agent is stopping")
            running = self._in_flight.get(node_uuid)
            if running is not None:
                self._refuse_or_answer(node_uuid, running, purpose, idempotent, takes_over)
            self._in_flight[node_uuid] = purpose
        return NodeTask(self, node_uuid, epoch, purpose, instance_uuid, background=False)

    def _refuse_or_answer(
        self,
        node_uuid: str,
        running: tuple[str, str],
        purpose: Purpose,
        idempotent: bool,
        takes_over: Purpose | None,
    ) -> None:
        """Under the lock, *node_uuid* busy with *running*: raise the answer or refusal."""
        if idempotent and running == purpose:
            raise AlreadyRunning("in-progress")
        if takes_over is not None and running == takes_over:
            if node_uuid in self._cancelled:
                raise AlreadyRunning("in-progress")
            self._cancelled.add(node_uuid)
            raise AlreadyRunning("accepted", took_over=True)
        # One action at a time per node: the conductor retries the others.
        raise Conflict(
            field="node_uuid",
            value=node_uuid,
            reason=f"node is busy with {running[0]} of {running[1]}; retry",
        )

    def resume(
        self, node_uuid: str, epoch: int, purpose: Purpose, *, instance_uuid: str | None = None
    ) -> NodeTask:
        """The background half of a task: the node marked busy with *purpose*
        (taking over the mark the accepting task, or a superseded one, left).

        No fence here: the accepting task was fenced, and the driver calls
        the task's :meth:`NodeTask.progress` (or the verb :meth:`NodeTask.check`)
        before it acts.  A background task swallows the end of an abandoned
        action (:class:`ActionAbandoned`, :class:`NotOwner`): nothing is reported.
        """
        with self._lock:
            self._in_flight[node_uuid] = purpose
            self._cancelled.discard(node_uuid)
        return NodeTask(self, node_uuid, epoch, purpose, instance_uuid, background=True)

    def start(self, target: Callable[..., object], node_uuid: str, *args: Any) -> None:
        """Run ``target(*args)`` in a thread that :meth:`wait_idle` waits for."""
        thread = threading.Thread(
            target=target,
            args=args,
            daemon=True,
            name=f"{getattr(target, '__name__', 'task').strip('_')}-{node_uuid[:8]}",
        )
        with self._lock:
            self._threads = {t for t in self._threads if t.is_alive()}
            self._threads.add(thread)
        thread.start()

    def _finish(self, node_uuid: str) -> None:
        """The node is free again."""
        with self._lock:
            self._in_flight.pop(node_uuid, None)
            self._cancelled.discard(node_uuid)
            self._progress.pop(node_uuid, None)

    def _finish_unless_cancelled(self, node_uuid: str) -> bool:
        """Free the node unless a later task took its purpose over: then True,
        and the node stays busy for that one.

        One step under the lock, so a task taking over at this very moment
        is either seen here or finds the node free (and starts its own).
        """
        with self._lock:
            self._progress.pop(node_uuid, None)
            if node_uuid in self._cancelled:
                return True
            self._in_flight.pop(node_uuid, None)
            return False

    def _is_cancelled(self, node_uuid: str) -> bool:
        with self._lock:
            return node_uuid in self._cancelled

    def _moved_on(self, node_uuid: str, epoch: int) -> None:
        """The back end moved the deploy on *node_uuid* to a new step."""
        now = time.monotonic()
        with self._lock:
            seen = self._progress.setdefault(node_uuid, _Progress(epoch, started=now))
            seen.moved = now


class NodeTask:
    """One verb on one node, from its fence to its result (see the module doc).

    :ivar steps: the steps the driver reported through :meth:`progress`, each once
    :ivar superseded: a later task took the purpose over (see
        :meth:`NodeTasks.acquire`'s ``takes_over``): the node is still marked
        busy, for that one to run on
    """

    def __init__(
        self,
        tasks: NodeTasks,
        node_uuid: str,
        epoch: int,
        purpose: Purpose,
        instance_uuid: str | None,
        *,
        background: bool,
    ) -> None:
        self._tasks = tasks
        self.node_uuid = node_uuid
        self.epoch = epoch
        self.purpose = purpose
        self.ctx = ActionContext(node_uuid, tasks._host, epoch, instance_uuid)
        self._background = background
        self._spawn: tuple[Callable[..., object], tuple[Any, ...]] | None = None
        self._result: tuple[Callable[[dict[str, Any]], None], dict[str, Any]] | None = None
        self.steps: list[str] = []
        self.superseded = False

    def __enter__(self) -> NodeTask:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if exc is None and self._spawn is not None:
            target, args = self._spawn
            try:
                self._tasks.start(target, self.node_uuid, *args)
            except BaseException:
                self._tasks._finish(self.node_uuid)
                raise
            return False
        if self._background and (exc is None or isinstance(exc, TaskCancelled)):
            self.superseded = self._tasks._finish_unless_cancelled(self.node_uuid)
        else:
            # (A foreground task ends with its verb: a take-over told to it
            # meanwhile is dropped with it; the conductor re-drives that one.)
            self._tasks._finish(self.node_uuid)
        if exc is None and not self.superseded and self._result is not None:
            send, result = self._result
            send(result)  # after the release: the conductor may send the next action at once
        if isinstance(exc, TaskCancelled):
            return True
        if self._background and isinstance(exc, NotOwner | ActionAbandoned):
            LOG.log(
                logging.WARNING if isinstance(exc, NotOwner) else logging.INFO,
                "Instance %s on node %s abandoned: %s",
                self.ctx.instance_uuid,
                self.node_uuid,
                exc,
            )
            return True  # the new owner, or our next process, carries on
        return False

    def check(self) -> None:
        """The fence again, now: :class:`NotOwner` unless the node is still ours."""
        self._tasks._ownership.check(self.node_uuid, self.epoch)

    def progress(self, step: str) -> None:
        """The driver's progress callback: called before every step (and every read
        of a long transition).

        Stops the task as soon as the node is not ours (:class:`NotOwner`; a
        SUSPENDED membership is waited out, up to its TTL) or a later task
        took its purpose over (:class:`TaskCancelled`).
        """
        self._tasks._ownership.wait_can_act(self.node_uuid, self.epoch, self._tasks._suspend_wait)
        if self._tasks._is_cancelled(self.node_uuid):
            raise TaskCancelled(self.node_uuid, self.purpose)
        if self.steps and self.steps[-1] == step:
            return
        self.steps.append(step)
        if self.purpose.action == _DEPLOY:
            self._tasks._moved_on(self.node_uuid, self.epoch)
        LOG.debug(
            "Instance %s on node %s: %s: %s",
            self.ctx.instance_uuid,
            self.node_uuid,
            self.purpose.action,
            step,
        )

    def spawn_after(self, target: Callable[..., object], *args: Any) -> None:
        """Run ``target(*args)`` in the background once the ``with`` block ends
        without an exception, the node kept busy: *target* resumes the task
        (:meth:`NodeTasks.resume`), which releases it."""
        self._spawn = (target, args)

    def report_build(self, *, success: bool, fault: str | None, clean: bool) -> None:
        """The build's outcome, reported once the task ends (see :meth:`_report`)."""
        self._report(
            self._tasks._results.report,
            {"success": success, "fault": fault, "node_clean": clean},
        )

    def report_destroy(self, *, success: bool, fault: str | None) -> None:
        """The teardown's outcome, reported once the task ends (see :meth:`_report`)."""
        self._report(self._tasks._results.report_destroy, {"success": success, "fault": fault})

    def _report(self, send: Callable[[dict[str, Any]], None], outcome: dict[str, Any]) -> None:
        """Keep the outcome: sent once, when the task ends without an exception,
        after the node is released, and not if a later task took the purpose
        over (its outcome is the one awaited)."""
        if self._result is not None:
            raise RuntimeError(f"{self.purpose.action} on node {self.node_uuid}: reported twice")
        result = {
            "instance_uuid": self.ctx.instance_uuid,
            "node_uuid": self.node_uuid,
            "epoch": self.epoch,
            **outcome,
        }
        self._result = (send, result)
