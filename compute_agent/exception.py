"""Exceptions of the compute agent, rooted at conductor's :class:`RingfleetError`.

Same contract as :mod:`conductor.exception`: each exception carries the values
it is about as attributes and hands its constructor's keyword arguments to
``RingfleetError.__init__`` so oslo.messaging can rebuild it on the caller's
side (``compute_agent.exception`` is in the RPC layer's allowed modules).
``__reduce__`` lets them cross process boundaries (multiprocessing, futures)
as well, since the keyword-only base class leaves ``args`` empty.
"""

from __future__ import annotations

from typing import Any

from conductor.exception import RingfleetError

__all__ = ["ActionLogError", "DriverError"]


class DriverError(RingfleetError):
    """A driver could not carry out an action on a node.

    An expected outcome, not a bug: a failed deploy is rescheduled, a failed
    power action is reported.

    :ivar node_uuid: the node
    :ivar action: what was attempted ("deploy", "destroy", "set_power", ...)
    :ivar reason: what went wrong, for operators
    """

    def __init__(self, node_uuid: str, action: str, reason: str) -> None:
        self.node_uuid = node_uuid
        self.action = action
        self.reason = reason
        super().__init__(
            f"{action} failed on node {node_uuid}: {reason}",
            node_uuid=node_uuid,
            action=action,
            reason=reason,
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.node_uuid, self.action, self.reason))


class ActionLogError(RingfleetError, ValueError):
    """The action log holds a line that is not a whole, valid action record.

    Writers append one whole line per ``os.write``, so a torn or malformed
    line means the log cannot be trusted as evidence, and reading it fails
    instead of skipping the line.

    :ivar path: the log file
    :ivar line: the 1-based line number
    :ivar reason: what is wrong with the line
    """

    def __init__(self, path: str, line: int, reason: str) -> None:
        self.path = path
        self.line = line
        self.reason = reason
        super().__init__(f"{path}:{line}: {reason}", path=path, line=line, reason=reason)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.line, self.reason))
