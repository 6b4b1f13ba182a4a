# SPDX-License-Identifier: Apache-2.0
"""A flavor's ``resources:`` extra specs, checked at create as Placement would read them."""

from __future__ import annotations

import pytest

from conductor.common.exception import InvalidInput
from conductor.validation.flavor import validate_flavor_spec

IRONIC_ZEROES = {"resources:VCPU": "0", "resources:MEMORY_MB": "0", "resources:DISK_GB": "0"}


def fields(resource_class: str, extra_specs: dict[str, str]) -> list[str]:
    spec = {"name": "f", "resource_class": resource_class, "extra_specs": extra_specs}
    with pytest.raises(InvalidInput) as err:
        validate_flavor_spec(spec)
    return [error.field for error in err.value.errors]


@pytest.mark.parametrize(
    ("resource_class", "extra_specs"),
    [
        ("baremetal-gold", {"resources:CUSTOM_BAREMETAL_GOLD": "1", **IRONIC_ZEROES}),
        ("baremetal.gold", {"resources:CUSTOM_BAREMETAL_GOLD": "1"}),
        ("BAREMETAL_GOLD", {"resources:CUSTOM_BAREMETAL_GOLD": "1"}),
        ("CUSTOM_GOLD", {"resources:CUSTOM_CUSTOM_GOLD": "1"}),
        ("baremetal-gold", {"resources:CUSTOM_OTHER": "0", **IRONIC_ZEROES}),
        ("baremetal-gold", IRONIC_ZEROES),
    ],
)
def test_nova_ironic_flavors_are_accepted_as_written(
    resource_class: str, extra_specs: dict[str, str]
) -> None:
    flavor = validate_flavor_spec(
        {"name": "f", "resource_class": resource_class, "extra_specs": extra_specs}
    )
    assert flavor.extra_specs == extra_specs
    assert flavor.resource_class == resource_class


def test_a_contradiction_names_both_fields() -> None:
    spec = {
        "name": "f",
        "resource_class": "baremetal-silver",
        "extra_specs": {"resources:CUSTOM_BAREMETAL_GOLD": "1"},
    }
    with pytest.raises(InvalidInput) as err:
        validate_flavor_spec(spec)
    first, second = err.value.errors
    assert first.field == "resource_class"
    assert "CUSTOM_BAREMETAL_SILVER" in first.reason
    assert "resources:CUSTOM_BAREMETAL_GOLD=1" in first.reason
    assert second.field == "extra_specs.resources:CUSTOM_BAREMETAL_GOLD"
    assert "'baremetal-silver'" in second.reason


@pytest.mark.parametrize(
    ("resource_class", "extra_specs", "expected"),
    [
        # Nova prefixes every class: CUSTOM_GOLD is CUSTOM_CUSTOM_GOLD in Placement.
        (
            "CUSTOM_GOLD",
            {"resources:CUSTOM_GOLD": "1"},
            ["resource_class", "extra_specs.resources:CUSTOM_GOLD"],
        ),
        # Its own class zeroed: no node would be offered.
        (
            "gold",
            {"resources:CUSTOM_GOLD": "0"},
            ["resource_class", "extra_specs.resources:CUSTOM_GOLD"],
        ),
        ("gold", {"resources:CUSTOM_GOLD": "2"}, ["extra_specs.resources:CUSTOM_GOLD"]),
        ("gold", {"resources:VCPU": "4"}, ["extra_specs.resources:VCPU"]),
        ("gold", {"resources:VCPU": "-1"}, ["extra_specs.resources:VCPU"]),
        ("gold", {"resources:VCPU": "zero"}, ["extra_specs.resources:VCPU"]),
        ("gold", {"resources:custom_gold": "1"}, ["extra_specs.resources:custom_gold"]),
        ("gold", {"resources1:CUSTOM_GOLD": "1"}, ["extra_specs.resources1:CUSTOM_GOLD"]),
        ("gold", {"trait_a:CUSTOM_X": "required"}, ["extra_specs.trait_a:CUSTOM_X"]),
    ],
)
def test_what_no_node_offers_is_refused(
    resource_class: str, extra_specs: dict[str, str], expected: list[str]
) -> None:
    assert fields(resource_class, extra_specs) == expected
