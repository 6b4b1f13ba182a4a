# SPDX-License-Identifier: Apache-2.0
"""Every option group of ringfleet, by the namespace of the sample config that lists it.

A namespace is also what one kind of process registers beside the shared
groups (:func:`conductor.common.conf.register_opts`): ``ringfleet.common``
is read by every service, ``ringfleet.conductor`` by the conductors and the
operator CLI, ``ringfleet.compute_agent`` by the agents, ``ringfleet.api``
by ``ringfleet-api``.  The namespaces stay apart because the generated
sample names each group's namespace (its ``# From`` lines).

The ``oslo.config.opts`` entry points of ``pyproject.toml`` name each
namespace's :meth:`Namespace.list_opts` (``...opts:COMMON.list_opts``).
"""

from __future__ import annotations

from dataclasses import dataclass

from oslo_config import cfg

from conductor.common.conf import (
    api,
    compute_agent,
    conductor,
    coordination,
    database,
    default,
    ironic,
    metrics,
    placement,
    quota,
    ring,
    scheduler,
    simulated_driver,
    upgrade_levels,
)
from conductor.common.conf.groups import GroupOptions, ListedOpts

__all__ = ["API", "COMMON", "COMPUTE_AGENT", "CONDUCTOR", "NAMESPACES", "Namespace"]


@dataclass(frozen=True)
class Namespace:
    """The option groups one namespace of the sample lists."""

    name: str
    groups: tuple[GroupOptions, ...]

    def list_opts(self) -> ListedOpts:
        """For oslo-config-generator: each group with its options."""
        return [options.listing() for options in self.groups]

    def register(self, conf: cfg.ConfigOpts) -> None:
        """Register every group of the namespace on ``conf`` (idempotent)."""
        for options in self.groups:
            options.register(conf)


COMMON = Namespace(
    "ringfleet.common",
    (default.OPTIONS, coordination.OPTIONS, metrics.OPTIONS, ring.OPTIONS, upgrade_levels.OPTIONS),
)
CONDUCTOR = Namespace(
    "ringfleet.conductor",
    # [ironic]: the conductors' inventory sync reads it (and so do the agents
    # of the ironic driver, which register it only then); listed once, here.
    (conductor.OPTIONS, database.OPTIONS, scheduler.OPTIONS, quota.OPTIONS, ironic.OPTIONS),
)
COMPUTE_AGENT = Namespace(
    "ringfleet.compute_agent",
    # [placement]: the agents' reporter reads it, and 'ringfleet placement check'.
    (compute_agent.OPTIONS, simulated_driver.OPTIONS, placement.OPTIONS),
)
API = Namespace("ringfleet.api", (api.OPTIONS,))

NAMESPACES = (COMMON, CONDUCTOR, COMPUTE_AGENT, API)
