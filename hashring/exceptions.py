# SPDX-License-Identifier: Apache-2.0
"""Exceptions raised by the hash ring and the membership adapter.

Every exception derives from :class:`HashRingError`, so a caller can catch
the whole family at once, and each carries the offending values as
attributes, not only in its message.
"""

from __future__ import annotations

__all__ = [
    "EmptyRingError",
    "HashRingError",
    "InvalidMemberError",
    "InvalidRingVersionError",
    "MembershipError",
]


class HashRingError(Exception):
    """Root of every error raised by the :mod:`hashring` package."""


class InvalidMemberError(HashRingError, ValueError):
    """A ring member id or weight is not acceptable.

    :ivar member: the offending member id (as given, possibly not a string)
    :ivar field: which part was wrong: ``"id"`` or ``"weight"``
    :ivar reason: human readable explanation
    """

    def __init__(self, member: object, field: str, reason: str) -> None:
        self.member = member
        self.field = field
        self.reason = reason
        super().__init__(f"ring member {member!r}: invalid {field}: {reason}")


class InvalidRingVersionError(HashRingError, ValueError):
    """The ring version is not a positive integer.

    :ivar version: the offending value
    """

    def __init__(self, version: object) -> None:
        self.version = version
        super().__init__(f"ring version must be a positive integer, got {version!r}")


class EmptyRingError(HashRingError, LookupError):
    """An owner was asked of a ring that has no members.

    :ivar node_id: the node whose owner was asked, when there is one
    """

    def __init__(self, node_id: str | None = None) -> None:
        self.node_id = node_id
        what = f"node {node_id!r}" if node_id is not None else "nodes"
        super().__init__(f"cannot map {what}: the ring has no members")


class MembershipError(HashRingError):
    """The membership adapter was given a bad parameter or used wrongly.

    :ivar member_id: the local member id
    :ivar field: the offending parameter (``"backend_url"``, ``"member_id"``,
        ``"weight"``, ``"ring_version"``, ``"group"``, ``"watch_interval"``),
        or ``None`` for a misuse such as starting twice
    :ivar reason: human readable explanation
    """

    def __init__(self, member_id: str, field: str | None, reason: str) -> None:
        self.member_id = member_id
        self.field = field
        self.reason = reason
        where = f" {field}" if field else ""
        super().__init__(f"membership of {member_id!r}:{where} {reason}")
