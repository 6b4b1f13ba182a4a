# SPDX-License-Identifier: Apache-2.0
"""Semantics of the scheduler's filters, weighers and requests (pure, no database)."""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import entry_points

import pytest

from conductor.common.exception import InvalidInput
from conductor.common.objects import Flavor, Node, PowerState, ProvisionState
from conductor.common.resource_class import placement_name
from conductor.scheduler.filters import (
    ALWAYS_APPLIED,
    AvailabilityFilter,
    BaseFilter,
    CapabilitiesFilter,
    GroupFilter,
    LiveOwnerFilter,
    ResourceClassFilter,
    RetryFilter,
    TraitsFilter,
)
from conductor.scheduler.request import (
    RequestSpec,
    parse_flavor_capabilities,
    parse_unscoped_capabilities,
)
from conductor.scheduler.weighers import (
    BaseWeigher,
    SpreadWeigher,
    WeighingContext,
    normalize,
    total_weights,
)

NODE_UUID = "0b8f3f0e-4f7a-4c57-9d1c-5f0e3b1c2a11"


def node(**fields: object) -> Node:
    values: dict[str, object] = {
        "uuid": NODE_UUID,
        "name": "n1",
        "resource_class": "gold",
        "owner": "agent-1",
    }
    values.update(fields)
    return Node(**values)  # type: ignore[arg-type]


def request(
    flavor: Flavor | None = None,
    *,
    live: frozenset[str] = frozenset({"agent-1"}),
    group: str | None = None,
    exclude: frozenset[str] = frozenset(),
) -> RequestSpec:
    return RequestSpec.build(
        flavor or Flavor(name="f", resource_class="gold"),
        "9d6c1f3e-1111-4c57-9d1c-5f0e3b1c2a11",
        live_members=live,
        group=group,
        exclude_nodes=exclude,
    )


def caps_flavor(extra_specs: Mapping[str, str]) -> Flavor:
    return Flavor(name="f", resource_class="gold", extra_specs=dict(extra_specs))


# -- the always-applied filters ---------------------------------------------------------


def test_always_applied_order_and_names() -> None:
    assert [cls.name for cls in ALWAYS_APPLIED] == [
        "ResourceClassFilter",
        "GroupFilter",
        "AvailabilityFilter",
        "TraitsFilter",
        "LiveOwnerFilter",
        "RetryFilter",
    ]
    # The configurable ones are declared once, as entry points.
    declared = entry_points(group="ringfleet.scheduler.filters")
    assert {ep.name: ep.load() for ep in declared} == {
        "CapabilitiesFilter": CapabilitiesFilter,
        "TraitsFilter": TraitsFilter,
    }


@pytest.mark.parametrize(
    ("node_class", "flavor_class", "passes"),
    [
        ("gold", "gold", True),
        ("silver", "gold", False),
        # Normalized as Nova names them in Placement: CUSTOM_BAREMETAL_GOLD.
        ("Gold", "gold", True),
        ("baremetal.gold", "baremetal-gold", True),
        ("BAREMETAL_GOLD", "baremetal-gold", True),
        ("baremetal--gold", "Baremetal.Gold", True),
        ("baremetal-gold", "baremetalgold", False),
        # Nova prefixes every node's class: CUSTOM_GOLD is CUSTOM_CUSTOM_GOLD.
        ("CUSTOM_GOLD", "gold", False),
        ("CUSTOM_GOLD", "custom-gold", True),
    ],
)
def test_resource_class_filter(node_class: str, flavor_class: str, passes: bool) -> None:
    flavor = Flavor(name="f", resource_class=flavor_class)
    assert ResourceClassFilter().filter(node(resource_class=node_class), request(flavor)) is passes


@pytest.mark.parametrize(
    ("extra_specs", "wanted"),
    [
        # Nova's ironic flavor: one unit of the custom class, standard ones zeroed.
        (
            {
                "resources:CUSTOM_BAREMETAL_GOLD": "1",
                "resources:VCPU": "0",
                "resources:MEMORY_MB": "0",
                "resources:DISK_GB": "0",
            },
            "CUSTOM_BAREMETAL_GOLD",
        ),
        # The spec wins over the flavor's own class (stored before it was checked).
        ({"resources:CUSTOM_BAREMETAL_GOLD": "1"}, "CUSTOM_BAREMETAL_GOLD"),
        ({"resources:CUSTOM_OTHER": "0"}, "CUSTOM_BAREMETAL_SILVER"),
        ({}, "CUSTOM_BAREMETAL_SILVER"),
        # What no bare-metal node offers: Placement gives no candidate.
        ({"resources:CUSTOM_BAREMETAL_SILVER": "0"}, ""),
        ({"resources:CUSTOM_BAREMETAL_GOLD": "2"}, ""),
        ({"resources:CUSTOM_BAREMETAL_GOLD": "1", "resources:VCPU": "2"}, ""),
        ({"resources:CUSTOM_A": "1", "resources:CUSTOM_B": "1"}, ""),
        ({"resources:VCPU": "1"}, ""),
        ({"resources:CUSTOM_BAREMETAL_GOLD": "one"}, ""),
    ],
)
def test_requested_resource_class(extra_specs: dict[str, str], wanted: str) -> None:
    flavor = Flavor(name="f", resource_class="baremetal-silver", extra_specs=extra_specs)
    spec = request(flavor)
    assert spec.resource_class == wanted
    for node_class, passes in (("baremetal.gold", True), ("baremetal-silver", True)):
        expected = passes and placement_name(node_class) == wanted
        assert ResourceClassFilter().filter(node(resource_class=node_class), spec) is expected


@pytest.mark.parametrize(
    ("node_group", "hint", "passes"),
    [
        ("", None, True),
        ("rack-1", None, True),
        ("", "", True),
        ("rack-1", "", False),
        ("", "rack-1", False),
        ("rack-1", "rack-1", True),
        ("rack-2", "rack-1", False),
    ],
)
def test_group_filter(node_group: str, hint: str | None, passes: bool) -> None:
    assert GroupFilter().filter(node(group=node_group), request(group=hint)) is passes


@pytest.mark.parametrize(
    ("fields", "passes"),
    [
        ({}, True),
        ({"maintenance": True, "maintenance_reason": "disk"}, False),
        ({"instance_uuid": "3c1e0c3a-0000-4c57-9d1c-5f0e3b1c2a11"}, False),
        # Nova's ironic driver reserves a node of unknown power state (NOSTATE).
        ({"power_state": None}, False),
        ({"power_state": PowerState.ON}, True),
        *[
            ({"provision_state": state}, False)
            for state in ProvisionState
            if state is not ProvisionState.AVAILABLE
        ],
    ],
)
def test_availability_filter(fields: dict[str, object], passes: bool) -> None:
    assert AvailabilityFilter().filter(node(**fields), request()) is passes


@pytest.mark.parametrize(
    ("owner", "live", "passes"),
    [
        ("agent-1", {"agent-1", "agent-2"}, True),
        ("agent-3", {"agent-1", "agent-2"}, False),
        (None, {"agent-1"}, False),
        ("agent-1", set(), False),
    ],
)
def test_live_owner_filter(owner: str | None, live: set[str], passes: bool) -> None:
    assert LiveOwnerFilter().filter(node(owner=owner), request(live=frozenset(live))) is passes


@pytest.mark.parametrize(("excluded", "passes"), [(set(), True), ({NODE_UUID}, False)])
def test_retry_filter(excluded: set[str], passes: bool) -> None:
    assert RetryFilter().filter(node(), request(exclude=frozenset(excluded))) is passes


# -- traits ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node_traits", "required", "forbidden", "passes"),
    [
        (set(), set(), set(), True),
        ({"HW_A"}, set(), set(), True),
        ({"HW_A", "HW_B"}, {"HW_A"}, set(), True),
        ({"HW_A", "HW_B"}, {"HW_A", "HW_B"}, set(), True),
        ({"HW_A"}, {"HW_A", "HW_B"}, set(), False),
        (set(), {"HW_A"}, set(), False),
        ({"HW_A"}, set(), {"HW_B"}, True),
        ({"HW_A", "HW_B"}, set(), {"HW_B"}, False),
        ({"HW_A", "HW_B"}, {"HW_A"}, {"HW_B"}, False),
        ({"HW_A"}, {"HW_A"}, {"HW_B", "HW_C"}, True),
    ],
)
def test_traits_filter(
    node_traits: set[str], required: set[str], forbidden: set[str], passes: bool
) -> None:
    flavor = Flavor(
        name="f",
        resource_class="gold",
        required_traits=frozenset(required),
        forbidden_traits=frozenset(forbidden),
    )
    assert TraitsFilter().filter(node(traits=frozenset(node_traits)), request(flavor)) is passes


# -- capabilities (Nova's ComputeCapabilitiesFilter semantics) --------------------------

CAPABILITY_CASES: list[tuple[str, str | None, bool]] = [
    # plain string: exact
    ("uefi", "uefi", True),
    ("uefi", "bios", False),
    ("uefi", "UEFI", False),
    ("uefi", None, False),
    # string operators
    ("s== uefi", "uefi", True),
    ("s== uefi", "bios", False),
    ("s!= uefi", "bios", True),
    ("s!= uefi", "uefi", False),
    ("s>= b", "b", True),
    ("s>= b", "c", True),
    ("s>= b", "a", False),
    ("s<= b", "a", True),
    ("s<= b", "c", False),
    ("s> b", "c", True),
    ("s> b", "b", False),
    ("s< b", "a", True),
    ("s< b", "b", False),
    ("s== 10", "9", False),
    ("s> 10", "9", True),  # lexical, not numeric
    # numeric: "=" means at least
    ("= 4", "4", True),
    ("= 4", "8", True),
    ("= 4", "2", False),
    ("== 4", "4.0", True),
    ("== 4", "8", False),
    ("!= 4", "5", True),
    ("!= 4", "4", False),
    (">= 4", "4", True),
    (">= 4", "3.5", False),
    ("<= 4", "4", True),
    ("<= 4", "5", False),
    (">= 10", "9", False),  # numeric, not lexical
    ("= 4", "many", False),  # a non-number never matches a numeric operator
    ("= 4", None, False),
    # <in>: substring
    ("<in> avx", "avx2 sse4", True),
    ("<in> avx", "sse4", False),
    # <all-in>: every word a substring
    ("<all-in> avx sse4", "avx2 sse4_2", True),
    ("<all-in> avx sse4", "avx2", False),
    # <or>: one of the words, whole
    ("<or> uefi <or> bios", "bios", True),
    ("<or> uefi <or> bios", "uefi", True),
    ("<or> uefi <or> bios", "ue", False),
    ("<or> uefi <or> bios", None, False),
]


@pytest.mark.parametrize(("expression", "actual", "passes"), CAPABILITY_CASES)
def test_capabilities_filter(expression: str, actual: str | None, passes: bool) -> None:
    capabilities = {} if actual is None else {"cap": actual}
    flavor = caps_flavor({"capabilities:cap": expression})
    assert CapabilitiesFilter().filter(node(capabilities=capabilities), request(flavor)) is passes


def test_capabilities_filter_needs_every_key() -> None:
    flavor = caps_flavor({"capabilities:boot_mode": "uefi", "capabilities:cpu_vt": "true"})
    both = node(capabilities={"boot_mode": "uefi", "cpu_vt": "true"})
    one = node(capabilities={"boot_mode": "uefi"})
    wrong = node(capabilities={"boot_mode": "uefi", "cpu_vt": "false"})
    assert CapabilitiesFilter().filter(both, request(flavor))
    assert not CapabilitiesFilter().filter(one, request(flavor))
    assert not CapabilitiesFilter().filter(wrong, request(flavor))


def test_flavor_without_capabilities_passes_any_node() -> None:
    assert CapabilitiesFilter().filter(node(), request())
    assert CapabilitiesFilter().filter(node(capabilities={"a": "b"}), request())


def test_request_parses_only_capability_specs() -> None:
    flavor = caps_flavor({"capabilities:boot_mode": "s== uefi", "hw:cpu_policy": "dedicated"})
    parsed = parse_flavor_capabilities(flavor)
    assert list(parsed) == ["boot_mode"]
    assert parsed["boot_mode"].op == "s=="
    with pytest.raises(TypeError):
        parsed["x"] = parsed["boot_mode"]  # type: ignore[index]


def test_request_refuses_a_malformed_stored_expression() -> None:
    with pytest.raises(InvalidInput) as excinfo:
        parse_flavor_capabilities(caps_flavor({"capabilities:boot_mode": "s==uefi"}))
    assert excinfo.value.fields == ["extra_specs.capabilities:boot_mode"]


def test_an_unscoped_spec_binds_only_nodes_with_that_capability() -> None:
    """Nova's rule: ``boot_mode`` (no colon) is ignored on a host without it."""
    flavor = caps_flavor({"boot_mode": "uefi", "cpus": ">= 8", "hw:cpu_policy": "dedicated"})
    passes = CapabilitiesFilter().filter
    assert passes(node(capabilities={"boot_mode": "uefi", "cpus": "16"}), request(flavor))
    assert passes(node(capabilities={}), request(flavor))
    assert not passes(node(capabilities={"boot_mode": "bios"}), request(flavor))
    assert not passes(node(capabilities={"boot_mode": "uefi", "cpus": "4"}), request(flavor))


def test_an_unscoped_stored_value_that_does_not_parse_binds_no_node() -> None:
    # Written before unscoped values were validated: left out, not an error.
    flavor = caps_flavor({"boot_mode": "s==uefi", "cpus": ">= 8"})
    assert list(parse_unscoped_capabilities(flavor)) == ["cpus"]
    assert CapabilitiesFilter().filter(node(capabilities={"boot_mode": "x"}), request(flavor))


def test_flavor_key_tells_flavors_apart() -> None:
    a = request(caps_flavor({"capabilities:x": "1"}))
    b = request(caps_flavor({"capabilities:x": "2"}))
    assert a.flavor_key != b.flavor_key
    assert a.flavor_key == request(caps_flavor({"capabilities:x": "1"})).flavor_key
    hash(a.flavor_key)


# -- names and base classes -------------------------------------------------------------


def test_subclass_names_default_to_the_class_name() -> None:
    class MyFilter(BaseFilter):
        def filter(self, node: Node, request: RequestSpec) -> bool:
            return True

    class Named(BaseFilter):
        name = "custom-name"

    assert MyFilter.name == "MyFilter"
    assert Named.name == "custom-name"
    with pytest.raises(NotImplementedError):
        Named().filter(node(), request())


# -- weighers --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ([], []),
        ([5.0], [0.0]),
        ([2.0, 2.0], [0.0, 0.0]),
        ([0.0, 5.0, 10.0], [0.0, 0.5, 1.0]),
        ([-3.0, -1.0], [0.0, 1.0]),
    ],
)
def test_normalize(raw: list[float], expected: list[float]) -> None:
    assert normalize(raw) == pytest.approx(expected)


def test_spread_weigher_prefers_the_least_loaded_agent() -> None:
    context = WeighingContext({"agent-1": 5, "agent-2": 1})
    weigher = SpreadWeigher()
    assert weigher.per_owner
    weights = [
        weigher.weigh(node(owner=owner), request(), context)
        for owner in ("agent-1", "agent-2", "agent-3")
    ]
    assert weights == [-5.0, -1.0, 0.0]
    assert weigher.weigh(node(owner=None), request(), context) == 0.0


def test_total_weights_sum_normalized_weights_times_multipliers() -> None:
    class ByName(BaseWeigher):
        def weigh(self, node: Node, request: RequestSpec, context: WeighingContext) -> float:
            return float(node.name[-1])

    spread = SpreadWeigher()
    by_name = ByName()
    by_name.multiplier = -2.0
    nodes = [node(name="n1", owner="agent-1"), node(name="n3", owner="agent-2")]
    context = WeighingContext({"agent-1": 4})
    totals = total_weights([spread, by_name], nodes, request(), context)
    # spread: agent-1 -> 0, agent-2 -> 1; by name: n1 -> 0, n3 -> 1, times -2
    assert totals == pytest.approx([0.0, 1.0 - 2.0])


def test_total_weights_leave_out_per_request_weighers_uncalled() -> None:
    calls: list[str] = []

    class SameForAll(BaseWeigher):
        per_owner = per_request = True

        def weigh(self, node: Node, request: RequestSpec, context: WeighingContext) -> float:
            calls.append(node.uuid)
            return 42.0

    nodes = [node(name="n1", owner="agent-1"), node(name="n3", owner="agent-2")]
    context = WeighingContext({"agent-1": 4})
    with_it = total_weights([SpreadWeigher(), SameForAll()], nodes, request(), context)
    assert with_it == total_weights([SpreadWeigher()], nodes, request(), context)
    assert with_it == pytest.approx([0.0, 1.0])
    # Called, its equal weights would have normalized to 0 anyway.
    assert normalize([SameForAll().weigh(n, request(), context) for n in nodes]) == [0.0, 0.0]
    assert len(calls) == 2
