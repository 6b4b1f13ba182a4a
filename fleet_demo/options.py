# SPDX-License-Identifier: Apache-2.0
"""The demo's options: what ``ringfleet demo`` takes and :mod:`.scenario` runs,
the settings of the embedded fleet (:mod:`.fleet`) among them.

Apart from the scenario so that the command's parser (its defaults, shown by
``--help``) is built without importing the fleet, that is both services.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DemoOptions", "FleetSettings"]


@dataclass(frozen=True)
class FleetSettings:
    """The knobs of the embedded fleet (validated by the caller).

    :ivar ttl: membership TTL in seconds (tooz ``file://`` ``timeout``,
        ``redis://`` ``membership_timeout``).
    :ivar rehome_grace: ``[conductor] rehome_grace``.
    :ivar step_duration: seconds per simulated provision step.
    :ivar failure_rate: probability that a simulated deploy fails.
    :ivar seed: seed of the simulated failures.
    :ivar backend: the membership backend, ``file`` or ``redis`` (fakeredis).
    """

    ttl: float = 2.0
    rehome_grace: float = 3.0
    step_duration: float = 0.02
    failure_rate: float = 0.0
    seed: int = 0
    backend: str = "file"


@dataclass(frozen=True)
class DemoOptions(FleetSettings):
    """The demo's sizes, and the settings of the fleet it runs (validated by the command)."""

    agents: int = 3
    nodes: int = 300
    instances: int = 100
