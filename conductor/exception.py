"""Exceptions of ringfleet's services, all rooted at :class:`RingfleetError`.

Each carries the values it is about as attributes, so callers (and RPC
serialization, later) never parse messages.
"""

from __future__ import annotations

__all__ = ["ConfigurationError", "RingfleetError"]


class RingfleetError(Exception):
    """Root of every error raised by ringfleet's services."""


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
        super().__init__(f"[{group}] {option}: {reason}")
