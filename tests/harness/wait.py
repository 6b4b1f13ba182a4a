# SPDX-License-Identifier: Apache-2.0
"""Waiting for a condition, with a deadline that says what was awaited."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["wait_for"]


def wait_for(
    predicate: Callable[[], Any], timeout: float, what: str = "condition", step: float = 0.2
) -> Any:
    """Call ``predicate`` every ``step`` s until it returns something true; return that.

    :raises AssertionError: naming ``what``, when ``timeout`` s passed first.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.1f} s: {what}")
        time.sleep(step)
