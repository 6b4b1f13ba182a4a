# SPDX-License-Identifier: Apache-2.0
"""Downstream-style Nova filters and weighers, written as an operator writes them.

Subclasses of Nova's own base classes, using only what a Nova filter may use
(``host_state`` and ``spec_obj``); the tests configure them by import path
(``tests.nova_filters.RackHintFilter``) as an operator would configure
``mycompany.filters.RackFilter``.  Importing this module needs Nova (the
``ringfleet[nova-filters]`` extra, installed by the test environment).
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar

from nova.scheduler import filters, weights


class RackHintFilter(filters.BaseHostFilter):
    """With a ``rack`` scheduler hint, only hosts whose ``rack`` stat equals it."""

    def host_passes(self, host_state: Any, spec_obj: Any) -> bool:
        wanted = spec_obj.get_scheduler_hint("rack")
        if wanted is None:
            return True
        return bool(host_state.stats.get("rack") == wanted)


class CountingFilter(filters.BaseHostFilter):
    """Passes everything; records the host states it was called with."""

    calls: ClassVar[list[Any]] = []
    lock = threading.Lock()

    def host_passes(self, host_state: Any, spec_obj: Any) -> bool:
        with self.lock:
            CountingFilter.calls.append(host_state)
        return True


class PerNodeCountingFilter(CountingFilter):
    """A counting filter that declares it reads per-node state."""

    ringfleet_per_node = True
    calls: ClassVar[list[Any]] = []

    def host_passes(self, host_state: Any, spec_obj: Any) -> bool:
        with self.lock:
            PerNodeCountingFilter.calls.append(host_state)
        # Per-node state: only nodes whose uuid ends in an even hex digit.
        return int(host_state.nodename[-1], 16) % 2 == 0


class BrokenStatFilter(filters.BaseHostFilter):
    """Raises on hosts whose ``broken`` stat is ``yes`` (as buggy filters do)."""

    def host_passes(self, host_state: Any, spec_obj: Any) -> bool:
        if host_state.stats.get("broken") == "yes":
            raise ValueError("cannot parse this host's stats")
        return True


class ScoreWeigher(weights.BaseHostWeigher):
    """Prefers hosts with a higher numeric ``score`` stat (missing: 0)."""

    def _weigh_object(self, host_state: Any, weight_properties: Any) -> float:
        return float(host_state.stats.get("score", 0))


class NotAFilter:
    """Neither a ringfleet nor a Nova filter."""


class RackSpecFilter(filters.BaseHostFilter):
    """A site's own extra-spec namespace: ``mycompany:racks`` lists the racks a flavor may use.

    Hosts whose ``rack`` stat is not listed fail; flavors without the spec
    pass every host.
    """

    def host_passes(self, host_state: Any, spec_obj: Any) -> bool:
        wanted = spec_obj.flavor.extra_specs.get("mycompany:racks")
        if wanted is None:
            return True
        return host_state.stats.get("rack") in {rack.strip() for rack in wanted.split(",")}


class ProjectStatFilter(filters.BaseHostFilter):
    """Hosts whose ``project`` stat, if any, is the request's project."""

    def host_passes(self, host_state: Any, spec_obj: Any) -> bool:
        owner = host_state.stats.get("project")
        return owner is None or owner == spec_obj.project_id


class RecordingWeigher(weights.BaseHostWeigher):
    """Weighs every host 0; records the host states it was given."""

    seen: ClassVar[list[Any]] = []

    def _weigh_object(self, host_state: Any, weight_properties: Any) -> float:
        RecordingWeigher.seen.append(host_state)
        return 0.0
