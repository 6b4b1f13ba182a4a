# SPDX-License-Identifier: Apache-2.0
"""Which of an agent's node states to send the conductor at each report.

An agent reads the power state of every node it owns each
``report_interval``.  Sending all of them every time made the periodic
report the conductor's largest cost at scale: at 20,000 nodes on 4 agents
(report_interval 2 s) ``report_node_states`` took a third of a busy
conductor's CPU -- validating and re-reading 10,000 unchanged states a
second -- and builds slowed down with it.

So a report carries only what the conductor has not taken yet: a node
whose state differs from the last one the conductor accepted for it at the
same epoch (a node newly acquired, at a new epoch, is always sent).  Every
``full_report_interval`` one report carries every node again: what the
agent remembers having reported is a cache, and the record may have been
changed by something else since (an operator, the Ironic sync, a conductor
that reset a node), so the full report re-asserts what the hardware says.

What the conductor recorded is known too: the agent's inventory reads
carry each node's recorded power state (in the replies of conductors of
this release, without a version of their own).  A node held at an epoch
no report was taken at yet, whose power reads as recorded, counts as
taken: at a cold start of 100,000 nodes on 100 agents every agent's first
report sent its whole share again (~126 calls, ~20 MB through the broker,
~2 s of conductor CPU) and the conductor wrote nothing.  So the first
report is not full when the record is known: it carries the nodes whose
state differs from it, and those it does not say (an older conductor's
reads: every node, as before).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from conductor.common import broker_outage
from conductor.common.exception import first_line
from conductor.rpcapi import ConductorAPI

__all__ = ["StateReports", "StateSender"]

LOG = logging.getLogger(__name__)

#: States per ``report_node_states`` call.
_CHUNK = 1000


class StateReports:
    """What the conductor last accepted, per node; not thread-safe (one reporter thread).

    :param full_interval: seconds between two full reports.
    :param recorded: the power states the conductor recorded for the nodes
        given, as the agent last read them (:meth:`compute_agent.inventory_reads.
        InventoryReader.recorded_power`); ``None``: unknown, the first report
        is full.
    """

    def __init__(
        self,
        full_interval: float,
        recorded: Callable[[list[str]], Mapping[str, str]] | None = None,
    ) -> None:
        self._full_interval = full_interval
        self._recorded = recorded
        self._accepted: dict[str, tuple[int, str | None, str | None]] = {}
        self._last_full: float | None = None

    def due(self, states: Iterable[Mapping[str, Any]], now: float) -> list[dict[str, Any]]:
        """The states among ``states`` (every owned node's, read now) to send.

        Nodes no longer in ``states`` (released, lost) are forgotten.
        """
        current = [dict(s) for s in states]
        held = {s["node_uuid"] for s in current}
        for node_uuid in [n for n in self._accepted if n not in held]:
            del self._accepted[node_uuid]
        last = self._last_full
        if last is None and self._recorded is not None:
            self._last_full = now  # the record as read stands for a full report
        elif last is None or now - last >= self._full_interval:
            self._last_full = now
            return current
        self._as_recorded(current)
        return [s for s in current if self._accepted.get(s["node_uuid"]) != _key(s)]

    def _as_recorded(self, current: list[dict[str, Any]]) -> None:
        """Take the states of ``current`` that read as the conductor recorded
        them for accepted, where none was accepted at their epoch yet (a node
        just claimed, adopted, or refused as stale).

        Not where one was: the record as read lags the reports it took (it
        is read back at the next inventory refresh), and a node whose power
        went back meanwhile would read as recorded and not be sent.
        """
        if self._recorded is None:
            return
        unknown = [
            s
            for s in current
            if (self._accepted.get(s["node_uuid"]) or (None,))[0] != s["epoch"]
            and s.get("provision_state") is None  # the record read has none
        ]
        if not unknown:
            return
        recorded = self._recorded([s["node_uuid"] for s in unknown])
        for state in unknown:
            power = state.get("power_state")
            if power is not None and recorded.get(state["node_uuid"]) == power:
                self._accepted[state["node_uuid"]] = _key(state)

    def sent(self, states: Iterable[Mapping[str, Any]], stale: Iterable[str]) -> None:
        """The conductor took ``states`` but for the nodes in ``stale``."""
        refused = set(stale)
        for state in states:
            if state["node_uuid"] in refused:
                self._accepted.pop(state["node_uuid"], None)
            else:
                self._accepted[state["node_uuid"]] = _key(state)


class StateSender:
    """Sends an agent's due states to a conductor, in chunks; a conductor
    that does not take them is said once per outage (then DEBUG), and once
    when it takes them again."""

    def __init__(
        self,
        conductor: ConductorAPI,
        host: str,
        interval: float,
        forget: Callable[[list[str]], None] = lambda nodes: None,
        wrote: Callable[[str, dict[str, str]], None] = lambda changed_at, powers: None,
    ) -> None:
        self._conductor = conductor
        self._host = host
        self._interval = interval
        #: Called with the nodes the conductor says were deleted (``gone``).
        self._forget = forget
        #: Called with the change time the reports wrote (a conductor of API
        #: 1.27 says it) and the power states taken: the agent's change
        #: reads leave those rows out (it knows what it reported).
        self._wrote = wrote
        self._failing_since: float | None = None

    def send(self, reports: StateReports, due: list[dict[str, Any]]) -> None:
        """Report *due* states; what is not taken is due next time."""
        for start in range(0, len(due), _CHUNK):
            chunk = due[start : start + _CHUNK]
            try:
                out = self._conductor.report_node_states(self._host, chunk)
            except Exception as exc:  # what was not taken is due next time
                # The first line only (a remote error's text carries the
                # conductor's traceback), and once per outage: the
                # conductor's database may be down for minutes.
                LOG.log(
                    broker_outage.warning_level() if self._failing_since is None else logging.DEBUG,
                    "Agent %s: state report failed: %s; retrying every %.0f s",
                    self._host,
                    first_line(exc),
                    self._interval,
                )
                if self._failing_since is None:
                    self._failing_since = time.monotonic()
                return
            reports.sent(chunk, out.get("stale", ()))
            if changed_at := out.get("changed_at"):
                stale = set(out.get("stale") or ())
                self._wrote(
                    changed_at,
                    {
                        report["node_uuid"]: report["power_state"]
                        for report in chunk
                        if report.get("power_state") and report["node_uuid"] not in stale
                    },
                )
            if gone := list(out.get("gone") or ()):
                # Deleted while we held them: else reported (stale) for ever.
                LOG.info(
                    "Agent %s forgets %d nodes deleted while it owned them: %s",
                    self._host,
                    len(gone),
                    ", ".join(gone[:20]),
                )
                self._forget(gone)
            if self._failing_since is not None:
                LOG.info(
                    "Agent %s: state reports taken again after %.1f s",
                    self._host,
                    time.monotonic() - self._failing_since,
                )
                self._failing_since = None


def _key(state: Mapping[str, Any]) -> tuple[int, str | None, str | None]:
    return (state["epoch"], state.get("power_state"), state.get("provision_state"))
