# SPDX-License-Identifier: Apache-2.0
"""Build and teardown results on their way to the conductor, retried until taken.

When many deployments end at once, one RPC call per result cost the
conductor (and the broker) more than applying the results.  One reporter
thread sends whatever queued up while its previous call was in flight: under
a light load that is a batch of one, sent at once (nothing waits for a
batch to fill), under a heavy one up to ``max_batch`` build results per call.
Teardown results go one per call (``report_destroy_result``).

A result is the only news of work already done on a node: it is kept and
sent again, with a backoff, until the conductor applies it or refuses it.
A conductor that did not answer (timeout, broker down) or answered
``ServiceUnavailable`` (its database is down, say) has neither applied nor
refused it.  Waiting for the sweeper instead would leave the instance
``spawning`` or ``deleting`` for ``build_timeout``.  The operator gets one
WARNING when results stop getting through and one INFO when they do again.

A conductor older than API 1.2 has no batched call: the reporter then sends
one call per result for the rest of its life.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Sequence
from typing import Any

import oslo_messaging as messaging

from compute_agent.conductor_client import ResultCalls
from conductor.common import rpc
from conductor.common.exception import RingfleetError, ServiceUnavailable, first_line

__all__ = ["ResultReporter"]

LOG = logging.getLogger(__name__)

# Remote exceptions that mean "not now", not "never".
_RETRYABLE_REMOTE = frozenset({"ServiceUnavailable", "DatabaseUnavailable"})


@dataclasses.dataclass(eq=False)  # each result is itself, however alike
class _Result:
    kind: str  # "build" or "destroy"
    fields: dict[str, Any]
    tries: int = 0
    due: float = 0.0  # monotonic time of the next try


def retryable(exc: BaseException) -> bool:
    """Whether a failed report may still be applied if sent again."""
    if isinstance(exc, ServiceUnavailable):
        return True
    if isinstance(exc, messaging.RemoteError):
        return exc.exc_type in _RETRYABLE_REMOTE
    # Any other answer of the conductor refused it; no answer at all
    # (timeout, transport) left it unapplied.
    return not isinstance(exc, RingfleetError)


class ResultReporter:
    """Sends build results (``report_build_result`` keyword arguments) in batches
    and teardown results (``report_destroy_result`` keyword arguments) one by one.

    :param host: this agent
    :param conductor: a :class:`conductor.rpcapi.ConductorAPI` (or alike)
    :param max_batch: build results per call at most
    :param first_retry: seconds before the first retry of an undelivered
        result; doubled at each try up to ``max_retry``
    """

    def __init__(
        self,
        host: str,
        conductor: ResultCalls,
        *,
        max_batch: int = 100,
        first_retry: float = 0.5,
        max_retry: float = 10.0,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, not {max_batch}")
        self._host = host
        self._conductor = conductor
        self._max_batch = max_batch
        self._first_retry = first_retry
        self._max_retry = max_retry
        self._queue: queue.SimpleQueue[_Result | None] = queue.SimpleQueue()
        self._retries: list[_Result] = []  # only the reporter thread touches it
        self._failing_since: float | None = None
        self._batched = True  # False once a conductor did not know the batched call
        self._abandoned = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"results-{host}", daemon=True)
        self.calls = 0  # RPC calls made (for status and tests)

    def start(self) -> None:
        self._thread.start()

    def report(self, result: dict[str, Any]) -> None:
        """Queue one build result; returns at once."""
        self._queue.put(_Result("build", dict(result)))

    def report_destroy(self, result: dict[str, Any]) -> None:
        """Queue one teardown result; returns at once."""
        self._queue.put(_Result("destroy", dict(result)))

    def pending(self) -> int:
        """Results waiting for a retry."""
        return len(self._retries)

    def stop(self, timeout: float) -> bool:
        """Send what is queued (retries included, once more), then stop.

        False if that took longer than ``timeout``.
        """
        if not self._thread.is_alive():
            return True
        self._queue.put(None)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def abandon(self, timeout: float) -> None:
        """Stop without sending what is queued (an agent that crashes on purpose)."""
        self._abandoned.set()
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        self._queue.put(None)
        # A call already under way ends with its timeout at worst.
        self._thread.join(timeout)

    def _run(self) -> None:
        stopping = False
        while not stopping:
            fresh, stopping = self._next_results()
            if self._abandoned.is_set():
                return
            now = time.monotonic()
            due = [r for r in self._retries if stopping or r.due <= now]
            self._retries = [r for r in self._retries if r not in due]
            try:
                self.send(due + fresh)
            except Exception:  # the reporter thread must survive anything
                LOG.exception("Agent %s: sending results failed", self._host)
        if self._retries:
            LOG.warning(
                "Agent %s stopping with %d results undelivered; the conductor re-drives "
                "their builds and teardowns when this host is back",
                self._host,
                len(self._retries),
            )

    def _next_results(self) -> tuple[list[_Result], bool]:
        """Wait for new results or the next due retry; (new results, stopping)."""
        wait = None
        if self._retries:
            wait = max(0.0, min(r.due for r in self._retries) - time.monotonic())
        try:
            first = self._queue.get(timeout=wait)
        except queue.Empty:
            return [], False
        if first is None:
            return [], True
        fresh = [first]
        while len(fresh) < self._max_batch:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                return fresh, True
            fresh.append(item)
        return fresh, False

    def send(self, results: Sequence[_Result | dict[str, Any]]) -> None:
        """Deliver ``results`` now (in this thread); what may succeed later is kept."""
        items = [r if isinstance(r, _Result) else _Result("build", r) for r in results]
        builds = [r for r in items if r.kind == "build"]
        for start in range(0, len(builds), self._max_batch):
            self._send_builds(builds[start : start + self._max_batch])
        for result in items:
            if result.kind == "destroy":
                self._send_destroy(result)

    def _send_builds(self, batch: list[_Result]) -> None:
        if not batch:
            return
        # report_build_results is API 1.2: not while pinned below it.
        if self._batched and self._conductor.can_send_version("1.2"):
            try:
                self.calls += 1
                reply = self._conductor.report_build_results(self._host, [r.fields for r in batch])
            except messaging.RemoteError as exc:
                if exc.exc_type not in rpc.NOT_SERVED:
                    self._failed(batch, exc)
                    return
                LOG.warning(
                    "Agent %s: the conductor has no report_build_results (%s); "
                    "reporting one result per call from now on",
                    self._host,
                    exc.exc_type,
                )
                self._batched = False
            except Exception as exc:
                self._failed(batch, exc)
                return
            else:
                self._delivered()
                self._apply_outcomes(batch, reply)
                return
        for result in batch:
            try:
                self.calls += 1
                self._conductor.report_build_result(self._host, **result.fields)
            except Exception as exc:
                self._failed([result], exc)
            else:
                self._delivered()

    def _send_destroy(self, result: _Result) -> None:
        try:
            self.calls += 1
            reply = self._conductor.report_destroy_result(self._host, **result.fields)
        except Exception as exc:
            self._failed([result], exc)
            return
        self._delivered()
        if isinstance(reply, dict) and reply.get("accepted") is False:
            LOG.info(
                "Instance %s: teardown result for node %s not applied (stale)",
                result.fields.get("instance_uuid"),
                result.fields.get("node_uuid"),
            )

    def _apply_outcomes(self, batch: list[_Result], reply: Any) -> None:
        outcomes = reply.get("results") if isinstance(reply, dict) else None
        if not isinstance(outcomes, list) or len(outcomes) != len(batch):
            LOG.warning("Agent %s: unexpected reply to %d build results", self._host, len(batch))
            return
        for result, outcome in zip(batch, outcomes, strict=True):
            if not isinstance(outcome, dict) or not outcome.get("error"):
                continue
            if outcome.get("retry"):
                self._keep(result)  # the conductor could not apply it now
                continue
            LOG.warning(
                "Instance %s: build result on node %s not applied: %s",
                result.fields.get("instance_uuid"),
                result.fields.get("node_uuid"),
                outcome["error"],
            )

    def _failed(self, results: list[_Result], exc: Exception) -> None:
        # A remote exception's text carries its traceback: first line only.
        reason = first_line(exc)
        if not retryable(exc):
            for result in results:
                LOG.warning(
                    "Instance %s: %s result refused by the conductor: %s",
                    result.fields.get("instance_uuid"),
                    result.kind,
                    reason,
                )
            return
        if self._failing_since is None:
            self._failing_since = time.monotonic()
            LOG.warning(
                "Agent %s: results not delivered (%s); kept and sent again until the "
                "conductor takes them",
                self._host,
                reason,
            )
        else:
            LOG.debug("Agent %s: %d results not delivered: %s", self._host, len(results), reason)
        for result in results:
            self._keep(result)

    def _keep(self, result: _Result) -> None:
        result.tries += 1
        delay = min(self._max_retry, self._first_retry * 2 ** (result.tries - 1))
        result.due = time.monotonic() + delay
        self._retries.append(result)

    def _delivered(self) -> None:
        if self._failing_since is not None:
            LOG.info(
                "Agent %s: results delivered again after %.1f s",
                self._host,
                time.monotonic() - self._failing_since,
            )
            self._failing_since = None
