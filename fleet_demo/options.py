# SPDX-License-Identifier: Apache-2.0
"""The demo's options: what ``ringfleet demo`` takes and :mod:`.scenario` runs.

Apart from the scenario so that the command's parser (its defaults, shown by
``--help``) is built without importing the fleet, that is both services.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DemoOptions"]


@dataclass(frozen=True)
class DemoOptions:
    """The demo's sizes and timings (validated by the command)."""

    agents: int = 3
    nodes: int = 300
    instances: int = 100
    ttl: float = 2.0
    rehome_grace: float = 3.0
    step_duration: float = 0.02
    failure_rate: float = 0.0
    seed: int = 0
    #: membership backend: "file" (tooz file://) or "redis" (tooz redis:// on fakeredis)
    backend: str = "file"
