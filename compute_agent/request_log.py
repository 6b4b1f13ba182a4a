# SPDX-License-Identifier: Apache-2.0
"""The agent's record of synchronous verbs by request id: each is done at most once.

A conductor calls ``set_power_state`` and ``rebuild_instance`` and waits for
the answer.  When that conductor dies mid-call, a peer re-sends the same
action (compute API 1.5: with the same ``request_id``, one per action the
conductor stored) to the same agent.  Without a record the agent would do the
verb twice (reboot twice, re-image twice).  With one:

* the id running on this agent now: the repeat waits for the first call's
  outcome and gets the same answer, or the same error; the verb runs once;
* the id finished: the repeat gets the stored answer (or error) at once,
  and nothing is done;
* the id sent with another verb, node, target or instance: ``InvalidInput``
  naming ``request_id`` (a caller's bug, never a repeat).

What is kept is the outcome of a verb the agent *tried*: its answer, a
driver's failure, a refusal that retrying cannot change.  A refusal that
says "not now" is not kept (:func:`kept`): ``NotOwner`` (the fence),
``Conflict`` (the node busy, the agent stopping), ``ActionAbandoned``; the
conductor retries those, with the same request id, and that retry must run.

Why in memory: the request id protects against a *conductor* repeating a
call to the *same live agent* within its ``action_timeout`` (minutes).  An
agent that restarts has lost its record, but a repeat then meets a fresh
process that reads the node from the back end, as every verb does; and a
node taken over by another agent is fenced by its epoch (the caller checks
the fence before :meth:`RequestLog.run`, so a repeat at an epoch this agent
no longer holds gets ``NotOwner``, not an old answer).  So the record is
bounded (:data:`CAPACITY` finished requests, each for :data:`KEEP_FOR`
seconds) and never written anywhere.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar, cast

from conductor.common.exception import (
    ActionAbandoned,
    Conflict,
    FieldError,
    InvalidInput,
    NodeNotBuildable,
    NotOwner,
)

__all__ = ["CAPACITY", "KEEP_FOR", "MAX_REQUEST_ID", "WAIT_FOR", "Request", "RequestLog", "kept"]

LOG = logging.getLogger(__name__)

_T = TypeVar("_T")

#: Finished requests kept, oldest dropped first: a conductor repeats a call
#: within minutes, and an agent does far fewer than this many verbs in that time.
CAPACITY = 10_000
#: Seconds a finished request is kept: much longer than a conductor's
#: ``[conductor] action_timeout`` (300 s), after which no repeat comes.
KEEP_FOR = 3600.0
#: Seconds a repeat waits for the first call still running: longer than the
#: conductor's ``action_timeout``, whose caller has given up by then; the
#: bound only frees the RPC thread of a verb that hangs.
WAIT_FOR = 600.0
#: The longest request id accepted (a uuid is 36 characters).
MAX_REQUEST_ID = 64


class Request(NamedTuple):
    """What a request id was sent for: the verb, its node and what it does there
    (the power target, the rebuilt instance)."""

    verb: str
    node_uuid: str
    subject: str

    def __str__(self) -> str:
        return f"{self.verb} {self.subject!r} on node {self.node_uuid}"


def check_request_id(value: object, field: str = "request_id") -> str | None:
    """A request id (a string of 1..:data:`MAX_REQUEST_ID` characters), or None.

    :raises InvalidInput: naming *field*
    """
    if value is None or (isinstance(value, str) and 1 <= len(value) <= MAX_REQUEST_ID):
        return value
    raise InvalidInput(
        [FieldError.about(field, f"must be a string of 1 to {MAX_REQUEST_ID} characters", value)]
    )


def kept(error: BaseException) -> bool:
    """Whether a request that raised *error* is answered with it when repeated.

    Not the refusals that say "retry" (nothing was done, or the action was
    left to another owner or process): the retry, same id, must run.
    ``NodeNotBuildable`` is a ``Conflict`` that retrying cannot change: kept.
    """
    if isinstance(error, NodeNotBuildable):
        return True
    return isinstance(error, Exception) and not isinstance(
        error, NotOwner | Conflict | ActionAbandoned
    )


@dataclasses.dataclass
class _Entry:
    """One request: running until *done* is set, then its answer or error."""

    request: Request
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    answer: Any = None
    error: BaseException | None = None
    finished: float = 0.0  # time of the clock when done


class RequestLog:
    """Requests by id, each run once; thread-safe (see the module doc).

    :param capacity: finished requests kept (the oldest dropped first)
    :param keep_for: seconds a finished request is kept
    :param wait_for: seconds a repeat waits for a request still running
        before it is refused ``Conflict`` (retry)
    :param clock: the time (``time.monotonic``; tests give their own)
    """

    def __init__(
        self,
        *,
        capacity: int = CAPACITY,
        keep_for: float = KEEP_FOR,
        wait_for: float = WAIT_FOR,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._capacity = capacity
        self._keep_for = keep_for
        self._wait_for = wait_for
        self._clock = clock
        self._lock = threading.Lock()
        self._running: dict[str, _Entry] = {}
        # Finished requests, oldest first (the order they finished in).
        self._finished: collections.OrderedDict[str, _Entry] = collections.OrderedDict()

    def __len__(self) -> int:
        """Requests known: running and finished."""
        with self._lock:
            self._expire()
            return len(self._running) + len(self._finished)

    def __contains__(self, request_id: object) -> bool:
        with self._lock:
            self._expire()
            return request_id in self._running or request_id in self._finished

    def run(self, request_id: str, request: Request, verb: Callable[[], _T]) -> _T:
        """``verb()``'s answer, run at most once for *request_id* (see the module doc).

        :raises InvalidInput: *request_id* was sent for another request
        :raises Conflict: the first call is still running after ``wait_for`` s
        :raises: whatever ``verb()`` raised, again for a repeat when :func:`kept`
        """
        with self._lock:
            self._expire()
            entry = self._running.get(request_id) or self._finished.get(request_id)
            if entry is not None and entry.request != request:
                raise InvalidInput(
                    [
                        FieldError.about(
                            "request_id", f"was sent for {entry.request}, not {request}", request_id
                        )
                    ]
                )
            first = entry is None
            if entry is None:
                entry = self._running[request_id] = _Entry(request)
        if not first:
            return cast(_T, self._repeat(request_id, entry))
        try:
            answer = verb()
        except BaseException as exc:
            self._finish(request_id, entry, None, exc)
            raise
        self._finish(request_id, entry, answer, None)
        return answer

    def _repeat(self, request_id: str, entry: _Entry) -> Any:
        """The first call's outcome, once it has one (raised again if an error)."""
        if not entry.done.is_set():
            LOG.info("Request %s (%s) repeated while it runs: waiting", request_id, entry.request)
            if not entry.done.wait(self._wait_for):
                raise Conflict(
                    field="request_id",
                    value=request_id,
                    reason=f"{entry.request} still runs on this agent; retry",
                )
        else:
            LOG.info("Request %s (%s) repeated: answered as before", request_id, entry.request)
        if entry.error is not None:
            raise _fresh(entry.error)
        return entry.answer

    def _finish(
        self, request_id: str, entry: _Entry, answer: Any, error: BaseException | None
    ) -> None:
        """Record the outcome and wake the repeats waiting for it.

        An error that is not :func:`kept` is handed to the repeats already
        waiting (they asked while it ran) and forgotten: a later call runs anew.
        """
        with self._lock:
            entry.answer, entry.error, entry.finished = answer, error, self._clock()
            del self._running[request_id]
            if error is None or kept(error):
                self._finished[request_id] = entry
                self._expire()
        entry.done.set()

    def _expire(self) -> None:
        """Under the lock: drop the finished requests past the bounds, oldest first."""
        oldest = self._clock() - self._keep_for
        while self._finished:
            request_id, entry = next(iter(self._finished.items()))
            if len(self._finished) <= self._capacity and entry.finished > oldest:
                return
            del self._finished[request_id]


def _fresh(error: BaseException) -> BaseException:
    """A copy of *error* to raise again: each caller gets its own traceback.

    (Ringfleet's errors copy from their keyword arguments, as RPC rebuilds
    them; one that cannot be copied is raised itself.)
    """
    try:
        return copy.copy(error)
    except Exception:
        return error
