# SPDX-License-Identifier: Apache-2.0
"""A membership's arguments checked by the ring's own rules, the error naming the field."""

from __future__ import annotations

from hashring.exceptions import HashRingError, InvalidMemberError, MembershipError
from hashring.ring import Ring, _validate_member_id, _validate_weight

__all__ = ["checked_arguments"]


def checked_arguments(member_id: str, weight: float, ring_version: int) -> float:
    """The weight, once the member id, the weight and the ring version are valid.

    :raises MembershipError: naming the field that is not
    """
    try:
        _validate_member_id(member_id)
    except InvalidMemberError as exc:
        raise MembershipError(str(member_id), "member_id", exc.reason) from None
    try:
        checked = _validate_weight(member_id, weight)
    except InvalidMemberError as exc:
        raise MembershipError(member_id, "weight", exc.reason) from None
    try:
        Ring([], version=ring_version)  # the ring's own rules for versions
    except HashRingError as exc:
        raise MembershipError(member_id, "ring_version", str(exc)) from None
    return checked
