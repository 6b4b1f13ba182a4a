# SPDX-License-Identifier: Apache-2.0
"""Placement's half against a real Placement as the oracle.

A corpus of nodes becomes resource providers as Nova's ironic driver writes
them (one unit of the class ``os_resource_classes.normalize_name`` makes of
the node's, ``reserved`` while the node is in maintenance, not
``available``, of unknown power state or hosting an instance; the node's
traits), all in one aggregate of this test.  For each flavor Nova's own
``ResourceRequest`` makes the query of ``GET /allocation_candidates``;
ringfleet's always-applied filters (resource class, availability, traits)
must pass exactly the providers Placement returns.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from keystoneauth1 import adapter, session, token_endpoint

from conductor.common.objects import Node, PowerState, ProvisionState
from conductor.scheduler.filters import AvailabilityFilter, ResourceClassFilter, TraitsFilter
from conductor.scheduler.request import RequestSpec

os_resource_classes = pytest.importorskip("os_resource_classes")
nova_scheduler_utils = pytest.importorskip("nova.scheduler.utils")
from tests.unit.test_nova_differential import nova_request  # noqa: E402  (needs Nova)
from tests.unit.test_placement_half_differential import (  # noqa: E402
    ringfleet_flavor,
)

NODE_CLASSES = ("baremetal-gold", "baremetal.gold", "BAREMETAL_GOLD", "silver", "CUSTOM_SILVER")
NODE_TRAITS = (frozenset(), frozenset({"CUSTOM_X"}), frozenset({"CUSTOM_X", "CUSTOM_Y"}))
NODE_STATES: tuple[dict[str, Any], ...] = (
    {},
    {"maintenance": True},
    {"provision_state": ProvisionState.MANAGEABLE},
    {"power_state": None},
    {"instance_uuid": "3c1e0c3a-0000-4c57-9d1c-5f0e3b1c2a11"},
)
ZEROES = {"resources:VCPU": "0", "resources:MEMORY_MB": "0", "resources:DISK_GB": "0"}
#: (the flavor's own resource class, its extra specs), Nova's ironic flavors and others
FLAVORS: tuple[tuple[str, dict[str, str]], ...] = (
    ("baremetal-gold", {"resources:CUSTOM_BAREMETAL_GOLD": "1", **ZEROES}),
    ("baremetal.gold", {"resources:CUSTOM_BAREMETAL_GOLD": "1", "trait:CUSTOM_X": "required"}),
    ("baremetal-gold", {"trait:CUSTOM_X": "required", "trait:CUSTOM_Y": "forbidden"}),
    ("silver", {"resources:CUSTOM_SILVER": "1", "trait:CUSTOM_Y": "required", **ZEROES}),
    ("CUSTOM_SILVER", {"resources:CUSTOM_CUSTOM_SILVER": "1"}),
    ("silver", {"resources:CUSTOM_BAREMETAL_GOLD": "1"}),  # stored before checks: the spec wins
    ("silver", {"resources:CUSTOM_SILVER": "1", "resources:VCPU": "2"}),
    ("silver", {"resources:CUSTOM_SILVER": "2"}),
)


@pytest.fixture
def placement(placement_url: str) -> Iterator[adapter.Adapter]:
    sess = session.Session(auth=token_endpoint.Token(placement_url, "admin"), timeout=10)
    yield adapter.Adapter(
        sess, service_type="placement", default_microversion="1.39", raise_exc=False
    )
    sess.session.close()


def _ok(response: Any) -> Any:
    assert response.status_code in (200, 201, 204), response.text
    return response.json() if response.content else None


def _offered(node: Node) -> bool:
    """Nova's ironic driver: not reserved (_node_resources_unavailable, _used)."""
    return (
        not node.maintenance
        and node.power_state is not None
        and node.provision_state is ProvisionState.AVAILABLE
        and node.instance_uuid is None
    )


def _provider(placement: adapter.Adapter, node: Node, aggregate: str) -> None:
    rc = os_resource_classes.normalize_name(node.resource_class)
    _ok(placement.put(f"/resource_classes/{rc}"))
    for trait in node.traits:
        _ok(placement.put(f"/traits/{trait}"))
    _ok(placement.post("/resource_providers", json={"uuid": node.uuid, "name": node.uuid}))
    base = f"/resource_providers/{node.uuid}"
    inventory = {
        "total": 1,
        "reserved": 0 if _offered(node) else 1,
        "min_unit": 1,
        "max_unit": 1,
        "step_size": 1,
        "allocation_ratio": 1.0,
    }
    generation = 0
    for path, body in (
        ("inventories", {"inventories": {rc: inventory}}),
        ("traits", {"traits": sorted(node.traits)}),
        ("aggregates", {"aggregates": [aggregate]}),
    ):
        payload = {"resource_provider_generation": generation, **body}
        generation = _ok(placement.put(f"{base}/{path}", json=payload))[
            "resource_provider_generation"
        ]


def _corpus() -> list[Node]:
    return [
        Node(
            uuid=str(uuid.uuid4()),
            name=f"n{i}",
            resource_class=rc,
            traits=traits,
            **{"power_state": PowerState.OFF, **state},
        )
        for i, (rc, traits, state) in enumerate(
            itertools.product(NODE_CLASSES, NODE_TRAITS, NODE_STATES)
        )
    ]


def test_ringfleet_passes_exactly_the_allocation_candidates(placement: adapter.Adapter) -> None:
    aggregate = str(uuid.uuid4())
    nodes = _corpus()
    for node in nodes:
        _provider(placement, node, aggregate)
    always = (ResourceClassFilter(), AvailabilityFilter(), TraitsFilter())
    pairs = candidates = 0
    for own, extra_specs in FLAVORS:
        # In Nova, a ringfleet flavor without resources:CUSTOM_* is an ironic
        # flavor asking one unit of its class, as Nova names it.
        nova_specs = dict(extra_specs)
        if not any(key.startswith("resources:CUSTOM_") for key in extra_specs):
            nova_specs[f"resources:{os_resource_classes.normalize_name(own)}"] = "1"
        query = nova_scheduler_utils.ResourceRequest.from_request_spec(
            nova_request(nova_specs, {})
        ).to_querystring()
        found = _ok(placement.get(f"/allocation_candidates?{query}&member_of={aggregate}"))
        theirs = {rp for request in found["allocation_requests"] for rp in request["allocations"]}
        request = RequestSpec.build(
            ringfleet_flavor(own, extra_specs), "inst", live_members=frozenset({"a"})
        )
        ours = {node.uuid for node in nodes if all(f.filter(node, request) for f in always)}
        assert ours == theirs, (own, extra_specs)
        pairs += len(nodes)
        candidates += len(ours)
    assert pairs == len(FLAVORS) * len(nodes) == 600
    # Of the 15 nodes offered (one per class spelling and trait set), by flavor:
    # 9 gold, 6 gold with X, 3 gold with X without Y, 1 silver with Y, 3 of
    # CUSTOM_SILVER, 9 gold again, none asking VCPU or two units.
    assert candidates == 9 + 6 + 3 + 1 + 3 + 9
