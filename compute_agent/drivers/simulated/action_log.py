# SPDX-License-Identifier: Apache-2.0
"""The append-only action log, and the fencing check that reads it.

Invariant 1 (single owner, ``docs/architecture.rst`` "The invariants") is
only believable if something outside the agents' own bookkeeping records
what they actually did.  Every action a simulated node undergoes is appended
to one shared file as a JSON line
``{"node", "agent", "epoch", "action", "instance", "t", "ns", "pid", ...}``,
by whichever agent process performed it.  The functional tests then kill,
pause and restart agents, read the file back and run :func:`check_fencing`.

Writing needs no lock between processes: the file is opened with
``O_APPEND`` and each line goes out in a single ``os.write`` of fewer than
``PIPE_BUF`` bytes, which the kernel appends whole.  The file is opened per
line, so a log deleted or moved away between tests is simply recreated, and
there is no descriptor whose lifetime could race with a late writer thread.

Times are wall-clock nanoseconds (``time.time_ns()``): a monotonic clock
would order one process's actions only, not those of several processes.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import os
import select
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any, Final

from conductor.common.exception import ActionLogError

__all__ = [
    "ACTIONS",
    "Action",
    "ActionLog",
    "check_fencing",
    "read_log",
]

LOG = logging.getLogger(__name__)

#: the action names drivers write
ACTIONS: Final = frozenset(
    {
        "deploy_start",
        "deploy_step",
        "deploy_done",
        "deploy_failed",
        "destroy",
        "destroy_done",
        "power_on",
        "power_off",
        "reboot",
        "soft_power_off",
        "soft_reboot",
        "rebuild_start",
        "rebuild_done",
    }
)

#: longest line appended atomically (POSIX guarantees at least 512 bytes)
MAX_LINE: Final = getattr(select, "PIPE_BUF", 512)


@dataclasses.dataclass(frozen=True, slots=True)
class Action:
    """One line of the action log.

    :ivar node: the node acted on
    :ivar agent: the acting agent's host
    :ivar epoch: the epoch of the claim the agent acted under
    :ivar action: one of :data:`ACTIONS` (other names are kept, not refused,
        so a newer driver's log still reads)
    :ivar instance: the instance the action was for, or ``None``
    :ivar ns: wall-clock time of the action, ``time.time_ns()``
    :ivar pid: the writing process
    :ivar step: the provision step, for ``deploy_step`` and ``deploy_failed``
    :ivar reason: why, for ``deploy_failed``
    :ivar line: 1-based line number in the file it was read from (0: not read)
    """

    node: str
    agent: str
    epoch: int
    action: str
    instance: str | None
    ns: int
    pid: int = 0
    step: str | None = None
    reason: str | None = None
    line: int = 0

    @property
    def t(self) -> float:
        """Wall-clock time in seconds, as ``time.time()`` gives it."""
        return self.ns / 1e9

    def when(self) -> str:
        """The time as ISO 8601 UTC with microseconds, for messages."""
        seconds, nanoseconds = divmod(self.ns, 1_000_000_000)
        moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC) + datetime.timedelta(
            microseconds=nanoseconds // 1000
        )
        return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")

    def to_dict(self) -> dict[str, Any]:
        """The JSON object written for this action (``line`` is not written)."""
        record: dict[str, Any] = {
            "node": self.node,
            "agent": self.agent,
            "epoch": self.epoch,
            "action": self.action,
            "instance": self.instance,
            "t": self.t,
            "ns": self.ns,
            "pid": self.pid,
        }
        if self.step is not None:
            record["step"] = self.step
        if self.reason is not None:
            record["reason"] = self.reason
        return record

    @classmethod
    def from_dict(cls, record: Mapping[str, Any], *, line: int = 0) -> Action:
        """Parse one record; :class:`ValueError` naming the first bad field."""
        return cls(
            node=_field(record, "node", str),
            agent=_field(record, "agent", str),
            epoch=_field(record, "epoch", int),
            action=_field(record, "action", str),
            instance=_field(record, "instance", str, optional=True),
            ns=_field(record, "ns", int),
            pid=_field(record, "pid", int, default=0),
            step=_field(record, "step", str, optional=True),
            reason=_field(record, "reason", str, optional=True),
            line=line,
        )


def _field(
    record: Mapping[str, Any],
    name: str,
    kind: type[Any],
    *,
    optional: bool = False,
    default: Any = None,
) -> Any:
    if name not in record:
        if optional or default is not None:
            return default
        raise ValueError(f"missing field {name!r}")
    value = record[name]
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ValueError(f"field {name!r} must be {kind.__name__}, got {value!r:.60}")
    if kind is str and not value and not optional:
        raise ValueError(f"field {name!r} must not be empty")
    return value


class ActionLog:
    """Appends action records to a file shared by any number of processes.

    Thread- and process-safe without locks (see the module docstring).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)

    def append(
        self,
        *,
        node: str,
        agent: str,
        epoch: int,
        action: str,
        instance: str | None = None,
        step: str | None = None,
        reason: str | None = None,
    ) -> Action:
        """Append one action, stamped with the current time and process id.

        :raises ValueError: the line would be too long to append atomically
        :raises OSError: the file cannot be written (or was written partly)
        """
        record = Action(
            node=node,
            agent=agent,
            epoch=epoch,
            action=action,
            instance=instance,
            ns=time.time_ns(),
            pid=os.getpid(),
            step=step,
            reason=reason,
        )
        data = (json.dumps(record.to_dict(), separators=(",", ":")) + "\n").encode()
        if len(data) > MAX_LINE:
            raise ValueError(
                f"action log line of {len(data)} bytes exceeds {MAX_LINE} "
                f"(node {node}, action {action}); it could not be appended atomically"
            )
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            written = os.write(fd, data)
        finally:
            os.close(fd)
        if written != len(data):
            raise OSError(
                f"short write to action log {self.path}: {written} of {len(data)} bytes "
                f"(node {node}, action {action})"
            )
        LOG.debug("Action log: node %s %s by %s at epoch %d", node, action, agent, epoch)
        return record


def read_log(path: str | os.PathLike[str]) -> list[Action]:
    """Every action in the log at *path*, in file order.

    Strict: the log is evidence, so a line that is not a whole valid record
    (torn, truncated, not JSON, a field missing or of the wrong type) is an
    error rather than skipped.

    :raises ActionLogError: naming the file, the line and what is wrong
    :raises FileNotFoundError: no log was written at all
    """
    name = os.fspath(path)
    with open(name, "rb") as stream:
        data = stream.read()
    if data and not data.endswith(b"\n"):
        raise ActionLogError(name, data.count(b"\n") + 1, "last line is incomplete (torn write)")
    actions: list[Action] = []
    for number, raw in enumerate(data.splitlines(), start=1):
        try:
            record = json.loads(raw)
        except ValueError as exc:  # UnicodeDecodeError is a ValueError too
            raise ActionLogError(name, number, f"not a JSON line: {exc}") from exc
        if not isinstance(record, dict):
            raise ActionLogError(name, number, f"not a JSON object: {raw[:60]!r}")
        try:
            actions.append(Action.from_dict(record, line=number))
        except ValueError as exc:
            raise ActionLogError(name, number, str(exc)) from exc
    return actions


def check_fencing(actions: Iterable[Action]) -> list[str]:
    """Violations of "no two agents ever acted on one node with overlapping ownership".

    Per node, in time order (``ns``, then file order), two rules:

    * epochs never go backwards: an action at an epoch smaller than one
      already seen on the node is a stale owner acting after a takeover;
    * one epoch belongs to exactly one agent: two agents acting under the
      same epoch both believed they held the same claim.

    A clean handover (agent A at epoch 1, then agent B at epoch 2, then A
    again at epoch 3) passes.  Stale actions are reported once per (stale
    agent, stale epoch, superseding epoch), with their count and time span,
    so one stale deploy does not drown the report.

    :returns: human-readable violations naming node, agents, epochs and
        times, ordered by node and time; empty when the log is clean
    """
    by_node: dict[str, list[Action]] = defaultdict(list)
    for action in actions:
        by_node[action.node].append(action)
    violations: list[tuple[str, int, str]] = []
    for node, history in by_node.items():
        history.sort(key=lambda a: (a.ns, a.line))
        violations.extend((node, ns, text) for ns, text in _stale_actions(node, history))
        violations.extend((node, ns, text) for ns, text in _shared_epochs(node, history))
    violations.sort(key=lambda v: (v[0], v[1]))
    return [text for _node, _ns, text in violations]


def _stale_actions(node: str, history: list[Action]) -> list[tuple[int, str]]:
    newest: Action | None = None
    # (stale agent, stale epoch, superseding epoch) -> the stale actions
    stale: dict[tuple[str, int, int], tuple[Action, list[Action]]] = {}
    for action in history:
        if newest is None or action.epoch > newest.epoch:
            newest = action
        elif action.epoch < newest.epoch:
            key = (action.agent, action.epoch, newest.epoch)
            stale.setdefault(key, (newest, []))[1].append(action)
    found: list[tuple[int, str]] = []
    for (agent, epoch, newer_epoch), (superseding, acts) in stale.items():
        first, last = acts[0], acts[-1]
        names = ", ".join(dict.fromkeys(a.action for a in acts))
        span = first.when() if len(acts) == 1 else f"{first.when()} .. {last.when()}"
        found.append(
            (
                first.ns,
                f"node {node}: stale epoch: agent {agent} acted at epoch {epoch} "
                f"({len(acts)} action(s): {names}; {span}) after agent "
                f"{superseding.agent} took over at epoch {newer_epoch} "
                f"(first {superseding.action} at {superseding.when()})",
            )
        )
    return found


def _shared_epochs(node: str, history: list[Action]) -> list[tuple[int, str]]:
    # epoch -> agent -> its first action under that epoch
    first: dict[int, dict[str, Action]] = defaultdict(dict)
    for action in history:
        first[action.epoch].setdefault(action.agent, action)
    found: list[tuple[int, str]] = []
    for epoch, agents in first.items():
        if len(agents) < 2:
            continue
        ordered = sorted(agents.values(), key=lambda a: (a.ns, a.line))
        listed = ", ".join(f"{a.agent} (first {a.action} at {a.when()})" for a in ordered)
        found.append(
            (
                ordered[1].ns,
                f"node {node}: epoch {epoch} used by {len(agents)} agents: {listed}",
            )
        )
    return found
