# SPDX-License-Identifier: Apache-2.0
"""Placement's half against Nova's own code: names as ``normalize_name`` makes them,
and the resources and traits Nova's ``ResourceRequest`` asks Placement for.

A node of resource class *C* and traits *T* is an allocation candidate in
Nova when the request's merged resources are exactly one unit of
``normalize_name(C)`` (Nova's ironic driver gives a node that inventory and
no other) and *T* has every required trait and no forbidden one; ringfleet's
ResourceClassFilter and TraitsFilter must say the same.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conductor.common.objects import Flavor, Node
from conductor.common.resource_class import placement_name
from conductor.scheduler.filters import ResourceClassFilter, TraitsFilter
from conductor.scheduler.request import RequestSpec
from tests.unit.test_nova_differential import nova_request

os_resource_classes = pytest.importorskip("os_resource_classes")
nova_scheduler_utils = pytest.importorskip("nova.scheduler.utils")

NODE_CLASSES = ("baremetal-gold", "baremetal.gold", "BAREMETAL_GOLD", "Baremetal Gold", "silver")
NODE_TRAITS = (frozenset(), frozenset({"CUSTOM_X"}), frozenset({"CUSTOM_X", "CUSTOM_Y"}))


@settings(max_examples=300, deadline=None)
@given(st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,79}\Z"))
def test_names_are_normalized_as_nova_does(resource_class: str) -> None:
    assert placement_name(resource_class) == os_resource_classes.normalize_name(resource_class)


_SPECS = st.fixed_dictionaries(
    {},
    optional={
        "resources:CUSTOM_BAREMETAL_GOLD": st.sampled_from(["0", "1", "2"]),
        "resources:CUSTOM_SILVER": st.sampled_from(["0", "1"]),
        "resources:VCPU": st.sampled_from(["0", "2"]),
        "resources:MEMORY_MB": st.just("0"),
        "trait:CUSTOM_X": st.sampled_from(["required", "forbidden"]),
        "trait:CUSTOM_Y": st.sampled_from(["required", "forbidden"]),
    },
)


def ringfleet_flavor(own: str, extra_specs: dict[str, str]) -> Flavor:
    """The flavor ringfleet stores for these specs (``trait:`` ones merged into its sets)."""
    traits = {k.partition(":")[2]: v for k, v in extra_specs.items() if k.startswith("trait:")}
    return Flavor(
        name="bm",
        resource_class=own,
        required_traits=frozenset(t for t, how in traits.items() if how == "required"),
        forbidden_traits=frozenset(t for t, how in traits.items() if how == "forbidden"),
        extra_specs={k: v for k, v in extra_specs.items() if not k.startswith("trait:")},
    )


def _nova_offers(resource_request: Any, node_class: str, traits: frozenset[str]) -> bool:
    merged = resource_request.merged_resources()
    required = set(resource_request.all_required_traits)
    forbidden = set(resource_request.get_request_group(None).forbidden_traits)
    return (
        merged == {os_resource_classes.normalize_name(node_class): 1}
        and required <= traits
        and not (forbidden & traits)
    )


@settings(max_examples=200, deadline=None)
@given(_SPECS, st.sampled_from(["baremetal-gold", "silver"]))
def test_resources_and_traits_as_novas_resource_request(
    extra_specs: dict[str, str], own: str
) -> None:
    resource_request = nova_scheduler_utils.ResourceRequest.from_request_spec(
        nova_request(extra_specs, {})
    )
    if not resource_request.merged_resources():
        # Nothing asked (every class zeroed): Nova's ironic flavors never do
        # that; ringfleet refuses such a flavor and a stored one matches nothing
        # when its own class is zeroed.
        return
    flavor = ringfleet_flavor(own, extra_specs)
    request = RequestSpec.build(flavor, "inst", live_members=frozenset({"a"}))
    for node_class in NODE_CLASSES:
        for traits in NODE_TRAITS:
            node = Node(uuid="u", name="n", resource_class=node_class, traits=traits)
            ours = ResourceClassFilter().filter(node, request) and TraitsFilter().filter(
                node, request
            )
            assert ours is _nova_offers(resource_request, node_class, traits), (
                extra_specs,
                own,
                node_class,
                sorted(traits),
            )
