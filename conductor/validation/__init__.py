# SPDX-License-Identifier: Apache-2.0
"""Every input rule of the conductor, one module per resource.

Why this package exists: invariant 8 (``docs/architecture.rst``, "The
invariants"), *bad input is refused whole*.  A malformed node spec, flavor,
build request or agent report must get a clear error naming the field, and
must change nothing.  So validation happens here, before any database
transaction or RPC cast, as pure functions (no I/O) that

* accept anything (payloads arrive as untyped JSON-like primitives over
  oslo.messaging, so every parameter is typed ``object`` and checked),
* return frozen, typed, normalized values (lower-case UUIDs, trait
  frozensets, parsed capabilities) that the rest of the conductor can trust,
* and otherwise raise one :class:`~conductor.common.exception.InvalidInput` listing
  *every* problem found -- for a bulk import of 10,000 nodes, every problem of
  every entry -- so a client fixes its input in one round trip, and an import
  with one bad entry imports nothing.

Field paths in errors look like ``resource_class``, ``nodes[17].traits[2]``
or ``extra_specs.capabilities:boot_mode``; the empty path is the payload
itself.  For every optional field an explicit ``None`` (JSON ``null``) means
the same as leaving the field out.

The modules:

* :mod:`~conductor.validation.node` -- nodes, bulk imports, node changes
* :mod:`~conductor.validation.flavor` -- flavors and their extra specs
* :mod:`~conductor.validation.capabilities` -- the language of flavors'
  capability expressions, which the scheduler evaluates
* :mod:`~conductor.validation.build` -- build requests
* :mod:`~conductor.validation.deploy` -- what a build deploys: its image
  and config drive (also a flavor's default image)
* :mod:`~conductor.validation.arguments` -- the small arguments of lookups
  and agent calls (hosts, idents, limits, times, epoch maps)
* :mod:`~conductor.validation.agent_reports` -- what agents report (build
  and teardown results, node states, hand-overs)
* :mod:`~conductor.validation.fields` -- the field rules they share

The package imports only :mod:`conductor.common`: the database layer and
the scheduler import its types, so it may import neither (no import cycle).
Single-value checks the compute agent needs too (uuid, name, epoch, lists of
records) are in :mod:`conductor.common.checks`, the layer both services
import.
"""

from __future__ import annotations

from conductor.validation.build import (
    MAX_COUNT,
    BuildRequest,
    HintValue,
    check_vm_state,
    validate_build_request,
)
from conductor.validation.deploy import RebuildRequest, validate_rebuild
from conductor.validation.fields import MAX_TRAITS
from conductor.validation.flavor import FlavorSpec, validate_flavor_spec
from conductor.validation.node import (
    MAX_BATCH,
    NodeSpec,
    NodeUpdate,
    PropertyValue,
    validate_capabilities,
    validate_maintenance,
    validate_node_filters,
    validate_node_spec,
    validate_node_specs,
    validate_node_update,
)

__all__ = [
    "MAX_BATCH",
    "MAX_COUNT",
    "MAX_TRAITS",
    "BuildRequest",
    "FlavorSpec",
    "HintValue",
    "NodeSpec",
    "NodeUpdate",
    "PropertyValue",
    "RebuildRequest",
    "check_vm_state",
    "validate_build_request",
    "validate_capabilities",
    "validate_flavor_spec",
    "validate_maintenance",
    "validate_node_filters",
    "validate_node_spec",
    "validate_node_specs",
    "validate_node_update",
    "validate_rebuild",
]
