# SPDX-License-Identifier: Apache-2.0
"""Exceptions of both ringfleet services, all rooted at :class:`RingfleetError`.

Each carries the values it is about as attributes, so callers never parse
messages.  They travel over RPC as themselves: this module is the one entry
of oslo.messaging's ``allowed_remote_exmods`` (see
:data:`conductor.common.rpc.ALLOWED_EXMODS`), so the conductor's and the
agent's exceptions live here together, and a process rebuilds a peer's
exception without importing the peer's service code.
"""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "ActionAbandoned",
    "ActionLogError",
    "ConfigurationError",
    "Conflict",
    "DatabaseUnavailable",
    "DriverError",
    "DuplicateFlavor",
    "DuplicateInstance",
    "DuplicateKeyPair",
    "DuplicateNode",
    "FieldError",
    "FlavorNotFound",
    "Forbidden",
    "IdentityTaken",
    "InstanceActionNotFound",
    "InstanceLabelNotFound",
    "InstanceNotFound",
    "InstanceStateConflict",
    "InvalidInput",
    "InvalidTransition",
    "KeyPairNotFound",
    "NoValidNode",
    "NodeInUse",
    "NodeNotBuildable",
    "NodeNotFound",
    "NotFound",
    "NotOwner",
    "QuotaExceeded",
    "RingfleetError",
    "ServiceUnavailable",
    "first_line",
    "render_value",
]


class RingfleetError(Exception):
    """Root of every error raised by ringfleet's services.

    Subclasses hand their constructor's keyword arguments to
    ``super().__init__(message, **kwargs)``: :attr:`kwargs` is then the recipe
    oslo.messaging uses to rebuild the very same exception on the caller's
    side (``klass(**kwargs)``), so they must be primitives.
    """

    def __init__(self, message: str = "", **kwargs: Any) -> None:
        # No positional args: oslo.messaging rebuilds with klass(*args, **kwargs).
        super().__init__()
        self._message = message
        self._rpc_kwargs = kwargs

    @property
    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments that rebuild this exception."""
        return dict(self._rpc_kwargs)

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle (multiprocessing, futures) the way RPC rebuilds: from kwargs.
        return (_rebuild, (type(self), self.kwargs))

    def __str__(self) -> str:
        return self._message


def _rebuild(cls: type[RingfleetError], kwargs: dict[str, Any]) -> RingfleetError:
    return cls(**kwargs)


class ConfigurationError(RingfleetError):
    """An option is missing or unusable.

    :ivar group: the option group (``"DEFAULT"`` for the default group)
    :ivar option: the option name
    :ivar reason: what is wrong with it
    """

    def __init__(self, group: str, option: str, reason: str) -> None:
        self.group = group
        self.option = option
        self.reason = reason
        super().__init__(f"[{group}] {option}: {reason}", group=group, option=option, reason=reason)


# Bounded rendering of offending values: a bad entry may be a 10 MB string or
# a deeply nested structure, and its rendering ends up in logs and RPC replies.
_REPR = reprlib.Repr()
_REPR.maxlevel = 2
_REPR.maxstring = 60
_REPR.maxother = 60
_REPR.maxlist = _REPR.maxtuple = _REPR.maxset = _REPR.maxfrozenset = 4
_REPR.maxdict = 4
_VALUE_MAX = 80


def first_line(exc: BaseException, default: str | None = None) -> str:
    """The first line of ``exc``'s message, for a log line or a fault.

    A remote error's message ends with the remote traceback; only its first
    line says what happened.  An exception without a message gives
    ``default`` (its class name when None) -- never an IndexError inside the
    caller's ``except`` block.
    """
    lines = str(exc).splitlines()
    if lines:
        return lines[0]
    return type(exc).__name__ if default is None else default


def render_value(value: object) -> str:
    """A short, safe rendering of *value* for an error message (<= 80 chars)."""
    try:
        text = _REPR.repr(value)
    except Exception:  # a hostile __repr__ must not hide the real error
        text = f"<unrepresentable {type(value).__name__}>"
    if len(text) > _VALUE_MAX:
        text = text[: _VALUE_MAX - 3] + "..."
    return text


@dataclasses.dataclass(frozen=True, slots=True)
class FieldError:
    """One reason a payload was refused.

    :ivar field: path of the offending field, e.g. ``"resource_class"``,
        ``"nodes[17].traits[2]"``, ``"extra_specs.capabilities:boot_mode"``;
        ``""`` is the payload itself
    :ivar reason: what is wrong with it
    :ivar value: short rendering of the bad value (see :func:`render_value`),
        or ``None`` when there is no value to show (a missing field)
    """

    field: str
    reason: str
    value: str | None = None

    @classmethod
    def about(cls, field: str, reason: str, value: object) -> FieldError:
        """A field error showing *value*, rendered short and safe."""
        return cls(field, reason, render_value(value))

    def __str__(self) -> str:
        where = f"{self.field}: " if self.field else ""
        got = f" (got {self.value})" if self.value is not None else ""
        return f"{where}{self.reason}{got}"

    def to_dict(self) -> dict[str, str | None]:
        return {"field": self.field, "reason": self.reason, "value": self.value}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FieldError:
        value = data.get("value")
        return cls(str(data["field"]), str(data["reason"]), None if value is None else str(value))


class InvalidInput(RingfleetError, ValueError):
    """A payload was refused; nothing was changed (design invariant 8).

    Carries every problem found, not only the first, so a client fixes its
    input in one round trip.

    :ivar errors: the :class:`FieldError` list, in the order found

    Constructible from primitives -- ``InvalidInput(errors=[{"field": ...,
    "reason": ..., "value": ...}])`` -- and :attr:`kwargs` holds exactly that,
    which is what oslo.messaging sends to rebuild a remote exception.
    """

    #: The reason given for a list's ``marker`` that names nothing of the
    #: list (Nova's 400 "marker not found").
    MARKER_NOT_IN_LIST = "not found in this list"

    #: how many errors ``str()`` lists before summarizing the rest
    MAX_LISTED = 100

    def __init__(self, errors: Iterable[FieldError | Mapping[str, Any]]) -> None:
        self.errors: list[FieldError] = [
            e if isinstance(e, FieldError) else FieldError.from_dict(e) for e in errors
        ]
        super().__init__("invalid input")

    #: Why a conductor refuses an agent it does not see in the group.
    NOT_LIVE_MEMBER = "is not a live member of the group"

    @classmethod
    def not_live_member(cls, host: str) -> InvalidInput:
        """``host`` is not in the conductor's view of the group: the stale half of a
        partition, or (harmless) an agent that joined since the conductor last read it."""
        return cls([FieldError.about("host", cls.NOT_LIVE_MEMBER, host)])

    @property
    def is_not_live_member(self) -> bool:
        """Whether this is :meth:`not_live_member` (also as received over RPC)."""
        return [(e.field, e.reason) for e in self.errors] == [("host", self.NOT_LIVE_MEMBER)]

    @property
    def fields(self) -> list[str]:
        """The paths of the offending fields, in the order found."""
        return [e.field for e in self.errors]

    @property
    def kwargs(self) -> dict[str, Any]:
        """Primitives that rebuild this exception: ``InvalidInput(**exc.kwargs)``."""
        return {"errors": [e.to_dict() for e in self.errors]}

    def to_dict(self) -> dict[str, Any]:
        return self.kwargs

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InvalidInput:
        return cls(data["errors"])

    def __str__(self) -> str:
        listed = "; ".join(str(e) for e in self.errors[: self.MAX_LISTED])
        more = len(self.errors) - self.MAX_LISTED
        if more > 0:
            listed += f"; ... and {more} more"
        return f"invalid input: {listed}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.errors!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.errors,))


class NotFound(RingfleetError, LookupError):
    """Something asked for by id or name does not exist.

    :ivar kind: what was looked for ("node", "flavor", "instance")
    :ivar ident: the id or name given
    """

    kind = "object"

    def __init__(self, ident: str) -> None:
        self.ident = ident
        super().__init__(f"{self.kind} {ident!r} not found", ident=ident)


class NodeNotFound(NotFound):
    kind = "node"


class FlavorNotFound(NotFound):
    kind = "flavor"


class InstanceNotFound(NotFound):
    kind = "instance"


class KeyPairNotFound(NotFound):
    """No key pair of this name for the caller (another user's is not seen)."""

    kind = "key pair"


class InstanceLabelNotFound(NotFound):
    """An instance has no such metadata key or tag (``kind`` says which)."""

    def __init__(self, ident: str, kind: str = "metadata key") -> None:
        self.kind = kind
        super().__init__(ident)
        self._rpc_kwargs["kind"] = kind


class InstanceActionNotFound(NotFound):
    """No action of that request id on the instance (``ident``: the request id)."""

    kind = "instance action"


class Conflict(RingfleetError):
    """The request clashes with what is stored; nothing was changed.

    :ivar field: the clashing field (e.g. "name", "uuid")
    :ivar value: the clashing value, when known
    :ivar index: position in a batch, when the request was a batch
    :ivar reason: human readable explanation
    """

    kind = "object"

    def __init__(
        self,
        *,
        field: str,
        value: str | None,
        index: int | None = None,
        reason: str | None = None,
    ) -> None:
        self.field = field
        self.value = value
        self.index = index
        self.reason = reason or f"a {self.kind} with this {field} exists already"
        where = f"[{index}]" if index is not None else ""
        super().__init__(
            f"{self.kind}{where} {field}={value!r}: {self.reason}",
            field=field,
            value=value,
            index=index,
            reason=self.reason,
        )


class Forbidden(RingfleetError):
    """The caller may not do this (an operator's call, another project's
    quota); nothing was changed.

    :ivar reason: what is not allowed
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"forbidden: {reason}", reason=reason)


class QuotaExceeded(Forbidden):
    """A build would take a project over one of its quotas; nothing was stored.

    The message is Nova's (``Quota exceeded for instances: Requested 3, but
    already used 9 of 10 instances``).

    :ivar resource: ``instances`` or ``resource_class:<class>``
    :ivar requested: what the build asked for
    :ivar used: what the project uses already
    :ivar limit: the project's limit
    """

    def __init__(self, *, resource: str, requested: int, used: int, limit: int) -> None:
        self.resource = resource
        self.requested = requested
        self.used = used
        self.limit = limit
        message = (
            f"Quota exceeded for {resource}: Requested {requested}, "
            f"but already used {used} of {limit} {resource}"
        )
        RingfleetError.__init__(
            self, message, resource=resource, requested=requested, used=used, limit=limit
        )
        self.reason = message


class InvalidTransition(RingfleetError):
    """An instance was asked to move where its state machine does not go.

    A programming error, never a user's: the caller knew the instance's
    state and asked for an event the table
    (:data:`conductor.common.instance_states.TRANSITIONS`) does not allow
    from it.  Nothing was written.
    """

    def __init__(self, *, event: str, state: str | None, allowed: list[str]) -> None:
        self.event = event
        self.state = state
        self.allowed = allowed
        super().__init__(
            f"instance event {event!r} is not allowed from state {state!r} "
            f"(only from {', '.join(allowed) or 'no stored instance'})",
            event=event,
            state=state,
            allowed=allowed,
        )


class DuplicateNode(Conflict):
    kind = "node"


class DuplicateFlavor(Conflict):
    kind = "flavor"


class DuplicateInstance(Conflict):
    """A client-chosen instance uuid stored already, by another request.

    One answer whoever holds it (the caller's own other request, a deleted
    instance, another project's): a caller learns nothing of other projects.
    """

    kind = "instance"
    #: The reason of every such refusal.
    UNUSABLE = "instance id not available: choose another (a retry must repeat its request)"


class DuplicateKeyPair(Conflict):
    """The caller has a key pair of this name already (Nova's 409)."""

    kind = "key pair"


class InstanceStateConflict(Conflict):
    """A verb the instance's state does not allow now (``field`` is ``vm_state``,
    ``reason`` e.g. "instance is in state stopped, cannot reboot"); nothing changed.

    :class:`InvalidTransition`'s answer to a user: the user asked, knowing
    nothing of the table, so it is a 409, not a programming error.
    """

    kind = "instance"


class NotUpgraded(Conflict):
    """A call the services it goes to cannot take yet: ``[upgrade_levels]``
    pins their RPC API below the version the call needs (a rolling upgrade
    under way).  Nothing was sent; it works once the pin is lifted."""

    kind = "service"


class NodeInUse(Conflict):
    """A node cannot be deleted now; ``reason`` names why (it hosts an
    instance, it is not in maintenance, Ironic would bring it back)."""

    kind = "node"


class NodeNotBuildable(Conflict):
    """An agent refuses a build on a node for a reason retrying cannot fix.

    The back end shows the node hosting another instance, or in a state no
    deploy starts from.  Unlike a busy node or a stopping agent (a plain
    :class:`Conflict`, retried), the conductor frees the allocation and
    reschedules the build at once.
    """

    kind = "node"


class NoValidNode(RingfleetError):
    """No node passed the scheduler's filters for a build.

    Says why, as counts: the filters are applied in order to every candidate
    node, and each node is counted against the first filter that removed it.

    :ivar flavor: the flavor's name
    :ivar candidates: how many nodes the scheduler knew of
    :ivar removed: ``(filter name, nodes it removed)`` in filter order,
        zeros included; the counts add up to ``candidates`` (nodes that
        passed every filter but were lost to other conductors count as
        removed by nothing, and the sum is then smaller)
    :ivar awaiting_owner: nodes removed only because their owner is not a
        live member right now: each passes every other filter.  Non-zero
        means the build may fit in a moment (the owner re-joins, or a peer
        takes its nodes over), not that it never will.

    ``NoValidNode(**exc.kwargs)`` rebuilds it from primitives (RPC).
    """

    def __init__(
        self,
        flavor: str,
        candidates: int,
        removed: Iterable[tuple[str, int] | list[Any]],
        awaiting_owner: int = 0,
    ) -> None:
        self.flavor = flavor
        self.candidates = candidates
        self.removed: list[tuple[str, int]] = [(str(name), int(n)) for name, n in removed]
        self.awaiting_owner = int(awaiting_owner)
        counts = ", ".join(f"{name} removed {n}" for name, n in self.removed if n)
        waiting = (
            f" ({self.awaiting_owner} of them would fit with a live owner)"
            if self.awaiting_owner
            else ""
        )
        super().__init__(
            f"no valid node for flavor {flavor!r}: {candidates} nodes"
            + (f"; {counts}" if counts else "")
            + waiting,
            flavor=flavor,
            candidates=candidates,
            removed=[[name, n] for name, n in self.removed],
            awaiting_owner=self.awaiting_owner,
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.flavor, self.candidates, self.removed, self.awaiting_owner))


class IdentityTaken(RingfleetError):
    """Another process joined the group with this service's identity; this one stops.

    Two agents configured with one ``[DEFAULT] host``: the newer one wins and
    the older must not keep consuming the host's RPC queue (it answered about
    half the calls to that host, drain included).  It exits non-zero so that
    systemd shows it failed.

    :ivar host: the identity both processes use
    :ivar incarnation: the other process's incarnation
    """

    def __init__(self, host: str, incarnation: str) -> None:
        self.host = host
        self.incarnation = incarnation
        super().__init__(
            f"another process joined the group as {host} (incarnation {incarnation}): "
            "this one stopped serving; two services must not share a [DEFAULT] host",
            host=host,
            incarnation=incarnation,
        )


class ServiceUnavailable(RingfleetError):
    """The conductor cannot serve this request right now; retry later.

    :ivar reason: why (e.g. its membership connection is lost)
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"service unavailable: {reason}", reason=reason)


class DatabaseUnavailable(ServiceUnavailable):
    """The database cannot be reached right now; retry later.

    Raised instead of the driver's error, which names the server's address:
    callers learn what to do, the conductor's log says what happened.

    :ivar retry_safe: (this process only, not sent over RPC) the transaction
        failed on a dead connection before its commit: it changed nothing and
        may run once more on a fresh connection.
    :ivar cause: (this process only, not sent over RPC) the first line of
        the driver's error, for a local command's own message.
    """

    def __init__(self, reason: str = "the database is unreachable") -> None:
        super().__init__(reason)
        self.retry_safe = False
        self.cause = reason


class NotOwner(RingfleetError):
    """An agent acted on a node it does not own, or with a stale epoch.

    :ivar node_uuid: the node
    :ivar owner: the owner the database knows (``None``: nobody)
    :ivar epoch: the current epoch
    """

    def __init__(self, node_uuid: str, owner: str | None, epoch: int) -> None:
        self.node_uuid = node_uuid
        self.owner = owner
        self.epoch = epoch
        super().__init__(
            f"node {node_uuid} is owned by {owner!r} at epoch {epoch}",
            node_uuid=node_uuid,
            owner=owner,
            epoch=epoch,
        )


# -- raised by the compute agent -----------------------------------------------


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


class ActionAbandoned(RingfleetError):
    """An agent stopped following a node action because it is stopping.

    Not a failure: the action goes on (or has ended) in the back end, and
    the agent's next incarnation, or the node's next owner, resumes it from
    what the back end shows.  Nothing is reported for it.
    """

    def __init__(self, node_uuid: str, action: str) -> None:
        self.node_uuid = node_uuid
        self.action = action
        super().__init__(
            f"{action} on node {node_uuid} abandoned: the agent is stopping",
            node_uuid=node_uuid,
            action=action,
        )


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
