"""Build results on their way to the conductor, several per call.

When many deployments end at once, one RPC call per result cost the
conductor (and the broker) more than applying the results.  One reporter
thread sends whatever queued up while its previous call was in flight: under
a light load that is a batch of one, sent at once (nothing waits for a
batch to fill), under a heavy one up to ``max_batch`` results per call.

A result that is not delivered is only logged, as before batching: the
conductor's sweeper routes that build again, and the agent, which
de-duplicates by instance id, reports it again.  A conductor older than API
1.2 has no batched call: the reporter then sends one call per result for the
rest of its life.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

import oslo_messaging as messaging

from conductor import rpc
from conductor.exception import first_line

__all__ = ["BuildReporter"]

LOG = logging.getLogger(__name__)


class BuildReporter:
    """Sends build results (``report_build_result`` keyword arguments) in batches.

    :param host: this agent
    :param conductor: a :class:`conductor.rpcapi.ConductorAPI` (or alike)
    :param max_batch: results per call at most
    """

    def __init__(self, host: str, conductor: Any, *, max_batch: int = 100) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, not {max_batch}")
        self._host = host
        self._conductor = conductor
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
        self._batched = True  # False once a conductor did not know the batched call
        self._abandoned = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"results-{host}", daemon=True)
        self.calls = 0  # RPC calls made (for status and tests)

    def start(self) -> None:
        self._thread.start()

    def report(self, result: dict[str, Any]) -> None:
        """Queue one result; returns at once."""
        self._queue.put(dict(result))

    def stop(self, timeout: float) -> bool:
        """Send what is queued, then stop; False if that took longer than ``timeout``."""
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
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < self._max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
                batch.append(item)
            if self._abandoned.is_set():
                return
            try:
                self.send(batch)
            except Exception:  # the reporter thread must survive anything
                LOG.exception("Agent %s: sending %d build results failed", self._host, len(batch))

    def send(self, batch: list[dict[str, Any]]) -> None:
        """Deliver ``batch`` now (in this thread); failures are logged."""
        if self._batched:
            try:
                self.calls += 1
                reply = self._conductor.report_build_results(self._host, batch)
            except messaging.RemoteError as exc:
                if exc.exc_type not in rpc.NOT_SERVED:
                    self._not_delivered(batch, exc)
                    return
                LOG.warning(
                    "Agent %s: the conductor has no report_build_results (%s); "
                    "reporting one result per call from now on",
                    self._host,
                    exc.exc_type,
                )
                self._batched = False
            except Exception as exc:
                self._not_delivered(batch, exc)
                return
            else:
                self._log_outcomes(batch, reply)
                return
        for result in batch:
            try:
                self.calls += 1
                self._conductor.report_build_result(self._host, **result)
            except Exception as exc:
                self._not_delivered([result], exc)

    def _log_outcomes(self, batch: list[dict[str, Any]], reply: Any) -> None:
        outcomes = reply.get("results") if isinstance(reply, dict) else None
        if not isinstance(outcomes, list) or len(outcomes) != len(batch):
            LOG.warning("Agent %s: unexpected reply to %d build results", self._host, len(batch))
            return
        for result, outcome in zip(batch, outcomes, strict=True):
            if isinstance(outcome, dict) and outcome.get("error"):
                LOG.warning(
                    "Instance %s: build result on node %s not applied: %s",
                    result.get("instance_uuid"),
                    result.get("node_uuid"),
                    outcome["error"],
                )

    def _not_delivered(self, batch: list[dict[str, Any]], exc: Exception) -> None:
        # A remote exception's text carries its traceback: first line only.
        reason = first_line(exc)
        for result in batch:
            LOG.warning(
                "Instance %s: build result not delivered: %s", result.get("instance_uuid"), reason
            )
