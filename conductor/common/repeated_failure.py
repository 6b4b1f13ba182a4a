# SPDX-License-Identifier: Apache-2.0
"""A loop's failures as an operator needs them: one line per new reason, one when it works again.

A loop that retries every second or so (an agent's reconcile, its
Placement passes) fails alike on every try while a dependency is down: the
log gets one line when the reason changes, the repeats at debug level, and
one INFO when a try works again.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["RepeatedFailure"]


class RepeatedFailure:
    """The failures of one loop, logged to ``logger`` (not thread-safe: one loop)."""

    def __init__(
        self, logger: logging.Logger, failed: str, again: str, recovered: str, *args: Any
    ) -> None:
        """``failed`` (a new reason) and ``again`` (the same, at debug
        level): %-formats taking ``args`` and then the reason;
        ``recovered``: one taking ``args``."""
        self._log, self._args = logger, args
        self._failed, self._again, self._recovered = failed, again, recovered
        self.reason: str | None = None  # why the last try failed; None: it worked

    def failed(self, reason: str, level: int = logging.WARNING, exc_info: Any = None) -> None:
        """A try failed for ``reason``: said at ``level`` if the reason is new."""
        if reason == self.reason:
            self._log.debug(self._again, *self._args, reason)
            return
        self.reason = reason
        self._log.log(level, self._failed, *self._args, reason, exc_info=exc_info)

    def worked(self) -> None:
        """A try worked: one INFO if the previous one had failed."""
        if self.reason is not None:
            self.reason = None
            self._log.info(self._recovered, *self._args)
