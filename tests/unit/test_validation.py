# SPDX-License-Identifier: Apache-2.0
"""Tests of conductor.validation: payload rules, normalization, bulk import,
capability expressions (Nova's ComputeCapabilitiesFilter semantics) and
fuzzing (invariant 8: bad input is refused whole, with a field path)."""

from __future__ import annotations

import json
import pickle
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conductor import validation as v
from conductor.common import checks
from conductor.common.exception import (
    ConfigurationError,
    DuplicateNode,
    FieldError,
    InvalidInput,
    NodeNotFound,
    RingfleetError,
    first_line,
)
from conductor.common.objects import PowerState, ProvisionState
from conductor.validation import capabilities

DELETE = object()  # a table value meaning "leave this field out"
UUID_A = "0b6f5f4e-3c1d-4e2a-9f8b-7a6c5d4e3f21"


def make(base: dict[str, Any], key: str, value: object) -> dict[str, Any]:
    spec = dict(base)
    if value is DELETE:
        spec.pop(key, None)
    else:
        spec[key] = value
    return spec


def refused(func: Callable[..., object], *args: object, **kwargs: Any) -> InvalidInput:
    with pytest.raises(InvalidInput) as info:
        func(*args, **kwargs)
    assert info.value.errors, "InvalidInput without errors"
    return info.value


NODE = {"name": "node-1", "resource_class": "baremetal"}
FLAVOR = {"name": "gold", "resource_class": "baremetal"}
BUILD = {"flavor": "gold"}


# -- InvalidInput and FieldError ----------------------------------------------


def test_invalid_input_is_a_ringfleet_value_error() -> None:
    exc = InvalidInput([FieldError("name", "is required")])
    assert isinstance(exc, RingfleetError)
    assert isinstance(exc, ValueError)
    assert exc.fields == ["name"]


def test_message_lists_every_error() -> None:
    exc = refused(v.validate_node_spec, {"name": "ok", "resource_class": "bad class"}, path="x")
    assert str(exc) == (
        "invalid input: x.resource_class: must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$"
        " (got 'bad class')"
    )
    exc = refused(v.validate_node_spec, {"name": "bad name", "resource_class": "bad class"})
    text = str(exc)
    assert "name: must match" in text
    assert "(got 'bad name')" in text
    assert "resource_class: must match" in text
    assert "(got 'bad class')" in text


def test_message_of_the_payload_itself_has_no_empty_prefix() -> None:
    assert str(refused(v.validate_flavor_spec, 42)) == "invalid input: must be a mapping (got 42)"


def test_message_summarizes_beyond_max_listed() -> None:
    exc = InvalidInput([FieldError(f"f{i}", "bad") for i in range(InvalidInput.MAX_LISTED + 5)])
    text = str(exc)
    assert "f99: bad" in text
    assert "f100" not in text
    assert text.endswith("; ... and 5 more")
    assert len(exc.errors) == InvalidInput.MAX_LISTED + 5


def test_value_rendering_is_short_and_safe() -> None:
    class Hostile:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    hostile = FieldError.about("f", "bad", Hostile()).value
    assert hostile is not None
    assert "Hostile" in hostile
    long = FieldError.about("f", "bad", "x" * 10_000).value
    assert long is not None
    assert len(long) <= 80
    nested = FieldError.about("f", "bad", [[[[[1]]]]] * 1000).value
    assert nested is not None
    assert len(nested) <= 80
    huge_int = FieldError.about("f", "bad", 10**5000).value  # str() of it raises ValueError
    assert huge_int is not None
    assert len(huge_int) <= 80


def test_invalid_input_round_trips_through_primitives() -> None:
    exc = refused(v.validate_node_spec, {"name": "bad name", "traits": "X"})
    data = json.loads(json.dumps(exc.to_dict()))
    again = InvalidInput.from_dict(data)
    assert again.errors == exc.errors
    assert str(again) == str(exc)
    # What oslo.messaging does to rebuild a remote exception: klass(*args, **kwargs).
    rebuilt = InvalidInput(*exc.args, **json.loads(json.dumps(exc.kwargs)))
    assert rebuilt.errors == exc.errors


def test_invalid_input_pickles() -> None:
    exc = refused(v.validate_node_spec, {"name": 3})
    again = pickle.loads(pickle.dumps(exc))
    assert isinstance(again, InvalidInput)
    assert again.errors == exc.errors
    assert str(again) == str(exc)


def test_field_error_round_trip() -> None:
    error = FieldError.about("nodes[3].name", "duplicate", "n1")
    assert error.value == "'n1'"
    assert FieldError.from_dict(error.to_dict()) == error
    assert FieldError.from_dict({"field": "x", "reason": "is required"}) == FieldError(
        "x", "is required"
    )


# -- nodes: each bad input names exactly its field -----------------------------

BAD_NODE_FIELDS: list[tuple[str, object, list[str]]] = [
    ("name", DELETE, ["name"]),
    ("name", None, ["name"]),
    ("name", "", ["name"]),
    ("name", "bad name", ["name"]),
    ("name", "-leading-dash", ["name"]),
    ("name", "node-1\n", ["name"]),
    ("name", "n" * 256, ["name"]),
    ("name", 5, ["name"]),
    ("name", ["node-1"], ["name"]),
    ("uuid", "not-a-uuid", ["uuid"]),
    ("uuid", "{" + UUID_A + "}", ["uuid"]),
    ("uuid", "urn:uuid:" + UUID_A, ["uuid"]),
    ("uuid", UUID_A + "0", ["uuid"]),
    ("uuid", 12345, ["uuid"]),
    ("resource_class", DELETE, ["resource_class"]),
    ("resource_class", "bad class", ["resource_class"]),
    ("resource_class", "_leading", ["resource_class"]),
    ("resource_class", "r" * 81, ["resource_class"]),
    ("resource_class", 7, ["resource_class"]),
    ("traits", "CUSTOM_GPU", ["traits"]),
    ("traits", {"CUSTOM_GPU": True}, ["traits"]),
    ("traits", ["CUSTOM_GPU", "lower_case"], ["traits[1]"]),
    ("traits", ["CUSTOM_GPU", "CUSTOM_GPU"], ["traits[1]"]),
    ("traits", ["1CUSTOM"], ["traits[0]"]),
    ("traits", ["C" * 256], ["traits[0]"]),
    ("traits", [None, 3], ["traits[0]", "traits[1]"]),
    ("traits", [f"CUSTOM_{i}" for i in range(65)], ["traits"]),
    ("properties", ["memory_mb", 1], ["properties"]),
    ("properties", "memory_mb=1", ["properties"]),
    ("properties", {"nested": {"a": 1}}, ["properties.nested"]),
    ("properties", {"list": [1, 2]}, ["properties.list"]),
    ("properties", {"null": None}, ["properties.null"]),
    ("properties", {"nan": float("nan")}, ["properties.nan"]),
    ("properties", {"inf": float("inf")}, ["properties.inf"]),
    ("properties", {"": 1}, ["properties.''"]),
    ("properties", {1: "one"}, ["properties.1"]),
    ("properties", {"capabilities": 5}, ["properties.capabilities"]),
    ("properties", {"capabilities": {"boot_mode": "uefi"}}, ["properties.capabilities"]),
    ("properties", {"capabilities": "boot_mode"}, ["properties.capabilities"]),
    ("group", "has space", ["group"]),
    ("group", "g" * 81, ["group"]),
    ("group", 3, ["group"]),
    ("maintenance", "true", ["maintenance"]),
    ("maintenance", 1, ["maintenance"]),
    ("maintenance_reason", "broken fan", ["maintenance_reason"]),
    ("provision_state", "active", ["provision_state"]),
    ("provision_state", "AVAILABLE", ["provision_state"]),
    ("provision_state", 1, ["provision_state"]),
    ("power_state", "on", ["power_state"]),
    ("power_state", True, ["power_state"]),
    ("flavor", "gold", ["flavor"]),
    ("Name", "node-1", ["Name"]),
    ("capabilities", {"boot_mode": "uefi"}, ["capabilities"]),
]


@pytest.mark.parametrize(("key", "value", "expected"), BAD_NODE_FIELDS)
def test_bad_node_field(key: str, value: object, expected: list[str]) -> None:
    assert refused(v.validate_node_spec, make(NODE, key, value)).fields == expected


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"maintenance": False, "maintenance_reason": "why"}, ["maintenance_reason"]),
        ({"maintenance": True, "maintenance_reason": 5}, ["maintenance_reason"]),
        ({"maintenance": True, "maintenance_reason": "r" * 256}, ["maintenance_reason"]),
        # A bad maintenance flag is one error, not two.
        ({"maintenance": "yes", "maintenance_reason": "why"}, ["maintenance"]),
    ],
)
def test_maintenance_reason_rules(overrides: dict[str, Any], expected: list[str]) -> None:
    assert refused(v.validate_node_spec, {**NODE, **overrides}).fields == expected


@pytest.mark.parametrize(
    "text",
    [
        "boot_mode",  # no colon
        ":uefi",  # empty key
        "boot_mode:",  # empty value
        "boot mode:uefi",  # bad key
        "boot/mode:uefi",
        "boot_mode:uefi:x",  # colon in value
        "boot_mode:uefi,",  # stray comma
        "a:1,,b:2",
        "boot_mode:uefi,boot_mode:bios",  # duplicate key
        "boot_mode:uefi, boot_mode :bios",  # duplicate after stripping
    ],
)
def test_bad_capabilities_text(text: str) -> None:
    exc = refused(v.validate_capabilities, text)
    assert exc.fields == ["properties.capabilities"]
    exc = refused(v.validate_node_spec, {**NODE, "properties": {"capabilities": text}}, path="n")
    assert exc.fields == ["n.properties.capabilities"]


def test_every_bad_capability_item_is_reported() -> None:
    exc = refused(v.validate_capabilities, "a,b:,c:d,:e")
    assert exc.fields == ["properties.capabilities"] * 3
    assert [e.value for e in exc.errors] == ["'a'", "'b:'", "':e'"]


def test_validate_capabilities_refuses_non_text() -> None:
    assert refused(v.validate_capabilities, 5).fields == ["properties.capabilities"]


def test_node_collects_all_errors() -> None:
    exc = refused(v.validate_node_spec, {"name": "bad name", "resource_class": "bad class"})
    assert exc.fields == ["name", "resource_class"]
    exc = refused(
        v.validate_node_spec,
        {
            "name": "",
            "traits": ["ok", "CUSTOM_A", "CUSTOM_A"],
            "properties": {"a": {}, "capabilities": "x"},
            "power_state": "off",
            "color": "red",
        },
    )
    assert sorted(exc.fields) == sorted(
        [
            "color",
            "name",
            "resource_class",
            "traits[0]",
            "traits[2]",
            "properties.a",
            "properties.capabilities",
            "power_state",
        ]
    )


@pytest.mark.parametrize("spec", [None, 3, "node-1", ["name", "node-1"], ("a", "b")])
def test_node_spec_must_be_a_mapping(spec: object) -> None:
    assert refused(v.validate_node_spec, spec).fields == [""]
    assert refused(v.validate_node_spec, spec, path="nodes[4]").fields == ["nodes[4]"]


def test_node_path_prefixes_every_field() -> None:
    exc = refused(
        v.validate_node_spec,
        {"name": "n", "resource_class": "bad class", "traits": ["x"], "extra": 1},
        path="nodes[3]",
    )
    assert sorted(exc.fields) == ["nodes[3].extra", "nodes[3].resource_class", "nodes[3].traits[0]"]
    assert "nodes[3].resource_class: must match ^" in str(exc)


# -- nodes: normalization and defaults ----------------------------------------


def test_node_defaults() -> None:
    node = v.validate_node_spec(NODE)
    assert node.name == "node-1"
    assert node.resource_class == "baremetal"
    assert uuid.UUID(node.uuid).version == 4
    assert node.uuid == str(uuid.UUID(node.uuid))
    assert node.traits == frozenset()
    assert node.properties == {}
    assert node.capabilities == {}
    assert node.group == ""
    assert node.maintenance is False
    assert node.maintenance_reason is None
    assert node.provision_state is ProvisionState.AVAILABLE
    assert node.power_state is PowerState.OFF
    assert v.validate_node_spec(NODE).uuid != node.uuid


def test_null_means_absent() -> None:
    spec = dict.fromkeys(
        (
            "uuid",
            "traits",
            "properties",
            "group",
            "maintenance",
            "maintenance_reason",
            "provision_state",
            "power_state",
        )
    )
    node = v.validate_node_spec({**NODE, **spec})
    assert node.group == ""
    assert node.traits == frozenset()
    assert node.provision_state is ProvisionState.AVAILABLE


@pytest.mark.parametrize(
    ("given", "normalized"),
    [
        (UUID_A, UUID_A),
        (UUID_A.upper(), UUID_A),
        (UUID_A.replace("-", ""), UUID_A),
        (UUID_A.replace("-", "").upper(), UUID_A),
    ],
)
def test_uuid_normalized(given: str, normalized: str) -> None:
    assert v.validate_node_spec({**NODE, "uuid": given}).uuid == normalized
    assert checks.validate_uuid(given, "id") == normalized


def test_node_full_spec_normalized() -> None:
    node = v.validate_node_spec(
        {
            "name": "rack1:node.2_a-b",
            "uuid": UUID_A.upper(),
            "resource_class": "CUSTOM.gold-1",
            "traits": ["HW_CPU_X86_AVX2", "CUSTOM_GPU"],
            "properties": {
                "memory_mb": 4096,
                "cpu_arch": "x86_64",
                "ratio": 1.5,
                "ssd": True,
                "capabilities": "  boot_mode : uefi ,cpu_vt:true,  disk_label:gpt ",
            },
            "group": "rack-1.a_b",
            "maintenance": True,
            "maintenance_reason": "fan",
            "provision_state": "manageable",
            "power_state": "power on",
        }
    )
    assert node.uuid == UUID_A
    assert node.traits == frozenset({"HW_CPU_X86_AVX2", "CUSTOM_GPU"})
    # As Nova's ironic driver reads them: keys stripped, values as written.
    assert node.capabilities == {"boot_mode": " uefi ", "cpu_vt": "true", "disk_label": "gpt "}
    assert node.properties == {
        "memory_mb": 4096,
        "cpu_arch": "x86_64",
        "ratio": 1.5,
        "ssd": True,
        "capabilities": "  boot_mode : uefi ,cpu_vt:true,  disk_label:gpt ",
    }
    assert node.group == "rack-1.a_b"
    assert (node.maintenance, node.maintenance_reason) == (True, "fan")
    assert node.provision_state is ProvisionState.MANAGEABLE
    assert node.power_state is PowerState.ON


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("", {}),
        ("   ", {}),
        ("boot_mode:uefi", {"boot_mode": "uefi"}),
        # Nova's ironic driver: keys stripped, values as written.
        (" a : 1 , b.c-d_e : x y ", {"a": " 1 ", "b.c-d_e": " x y "}),
        ("boot_mode:  ", {"boot_mode": "  "}),
        ("k1:v1,k2:v2", {"k1": "v1", "k2": "v2"}),
    ],
)
def test_validate_capabilities(text: str, parsed: dict[str, str]) -> None:
    assert v.validate_capabilities(text) == parsed


def test_provision_state_choices() -> None:
    for state in ("enroll", "manageable", "available", ProvisionState.ENROLL):
        node = v.validate_node_spec({**NODE, "provision_state": state})
        assert node.provision_state == state
        assert type(node.provision_state) is ProvisionState


# -- bulk import ---------------------------------------------------------------


def many_nodes(count: int) -> list[dict[str, Any]]:
    return [
        {
            "name": f"node-{i}",
            "resource_class": f"rc-{i % 20}",
            "traits": ["CUSTOM_A", f"CUSTOM_T{i % 7}"],
            "properties": {"memory_mb": 1024, "capabilities": f"boot_mode:uefi,rack:r{i % 9}"},
        }
        for i in range(count)
    ]


def test_bulk_10k_with_one_bad_entry_is_refused_naming_it() -> None:
    specs = many_nodes(10_000)
    specs[7321] = {**specs[7321], "resource_class": "not valid"}
    exc = refused(v.validate_node_specs, specs)
    assert exc.fields == ["nodes[7321].resource_class"]


def test_bulk_10k_valid() -> None:
    nodes = v.validate_node_specs(many_nodes(10_000))
    assert len(nodes) == 10_000
    assert nodes[42].name == "node-42"
    assert len({n.uuid for n in nodes}) == 10_000


def test_bulk_collects_errors_of_every_entry() -> None:
    specs: list[object] = list(many_nodes(10))
    specs[2] = {"name": "n2"}
    specs[5] = "not a mapping"
    specs[8] = {**many_nodes(9)[8], "traits": ["bad"], "color": 1}
    exc = refused(v.validate_node_specs, specs)
    assert exc.fields == [
        "nodes[2].resource_class",
        "nodes[5]",
        "nodes[8].color",
        "nodes[8].traits[0]",
    ]


def test_bulk_duplicate_names_and_uuids() -> None:
    specs = many_nodes(5)
    specs[3]["name"] = "node-1"
    specs[0]["uuid"] = UUID_A
    specs[4]["uuid"] = UUID_A.upper()  # the same id once normalized
    exc = refused(v.validate_node_specs, specs)
    assert exc.fields == ["nodes[3].name", "nodes[4].uuid"]
    assert exc.errors[0].reason == "duplicate of nodes[1].name"
    assert exc.errors[1].reason == "duplicate of nodes[0].uuid"


def test_bulk_duplicate_of_an_otherwise_bad_entry_is_reported() -> None:
    specs = many_nodes(3)
    specs[0]["resource_class"] = "bad class"
    specs[2]["name"] = "node-0"
    assert refused(v.validate_node_specs, specs).fields == [
        "nodes[0].resource_class",
        "nodes[2].name",
    ]


@pytest.mark.parametrize("specs", [None, "nodes", {"nodes": []}, 3])
def test_bulk_needs_a_list(specs: object) -> None:
    assert refused(v.validate_node_specs, specs).fields == ["nodes"]


def test_bulk_size_limit() -> None:
    spec = {"name": "n", "resource_class": "rc"}
    assert refused(v.validate_node_specs, [spec] * (v.MAX_BATCH + 1)).fields == ["nodes"]


def test_bulk_empty() -> None:
    assert v.validate_node_specs([]) == []


# -- flavors -------------------------------------------------------------------

BAD_FLAVOR_FIELDS: list[tuple[str, object, list[str]]] = [
    ("name", DELETE, ["name"]),
    ("name", "bad name", ["name"]),
    ("resource_class", DELETE, ["resource_class"]),
    ("resource_class", "bad class", ["resource_class"]),
    ("required_traits", "CUSTOM_A", ["required_traits"]),
    ("required_traits", ["CUSTOM_A", "bad"], ["required_traits[1]"]),
    ("forbidden_traits", ["CUSTOM_A", "CUSTOM_A"], ["forbidden_traits[1]"]),
    ("forbidden_traits", [f"CUSTOM_{i}" for i in range(65)], ["forbidden_traits"]),
    ("extra_specs", ["capabilities:boot_mode", "uefi"], ["extra_specs"]),
    ("extra_specs", {"capabilities:boot_mode": 5}, ["extra_specs.capabilities:boot_mode"]),
    ("extra_specs", {"capabilities:boot_mode": ""}, ["extra_specs.capabilities:boot_mode"]),
    ("extra_specs", {"capabilities:x": "s== " + "a" * 300}, ["extra_specs.capabilities:x"]),
    ("extra_specs", {"capabilities:": "uefi"}, ["extra_specs.capabilities:"]),
    ("extra_specs", {"capabilities:boot mode": "uefi"}, ["extra_specs.capabilities:boot mode"]),
    ("extra_specs", {"capabilities:cpu_info:f": "x"}, ["extra_specs.capabilities:cpu_info:f"]),
    ("extra_specs", {"trait:lower": "required"}, ["extra_specs.trait:lower"]),
    ("extra_specs", {"trait:CUSTOM_A": "yes"}, ["extra_specs.trait:CUSTOM_A"]),
    ("extra_specs", {"trait:CUSTOM_A": "Required"}, ["extra_specs.trait:CUSTOM_A"]),
    ("extra_specs", {"mycompany:racks/a": "r1"}, ["extra_specs.mycompany:racks/a"]),
    ("extra_specs", {"": "x"}, ["extra_specs.''"]),
    ("extra_specs", {"k" * 256: "x"}, [f"extra_specs.'{'k' * 27}...{'k' * 28}'"]),
    ("extra_specs", {"boot_mode": "u" * 256}, ["extra_specs.boot_mode"]),
    ("extra_specs", {"mycompany:racks": 3}, ["extra_specs.mycompany:racks"]),
    # Unscoped: a capability expression (Nova's and ringfleet's filters read it as one).
    ("extra_specs", {"boot_mode": "s==uefi"}, ["extra_specs.boot_mode"]),
    ("extra_specs", {"gen": "<in> a zzz"}, ["extra_specs.gen"]),
    ("extra_specs", {"boot_mode": ""}, ["extra_specs.boot_mode"]),
    ("extra_specs", {3: "x"}, ["extra_specs.3"]),
    ("disk_gb", 100, ["disk_gb"]),
]


@pytest.mark.parametrize(("key", "value", "expected"), BAD_FLAVOR_FIELDS)
def test_bad_flavor_field(key: str, value: object, expected: list[str]) -> None:
    assert refused(v.validate_flavor_spec, make(FLAVOR, key, value)).fields == expected


@pytest.mark.parametrize("spec", [None, [], "gold", 1.5])
def test_flavor_spec_must_be_a_mapping(spec: object) -> None:
    assert refused(v.validate_flavor_spec, spec).fields == [""]


def test_trait_in_both_lists() -> None:
    exc = refused(
        v.validate_flavor_spec,
        {**FLAVOR, "required_traits": ["CUSTOM_A", "CUSTOM_B"], "forbidden_traits": ["CUSTOM_A"]},
    )
    assert exc.fields == ["forbidden_traits"]


@pytest.mark.parametrize(
    ("lists", "extra_specs", "field"),
    [
        ({"forbidden_traits": ["CUSTOM_A"]}, {"trait:CUSTOM_A": "required"}, "trait:CUSTOM_A"),
        ({"required_traits": ["CUSTOM_A"]}, {"trait:CUSTOM_A": "forbidden"}, "trait:CUSTOM_A"),
    ],
)
def test_trait_extra_spec_contradicting_a_list(
    lists: dict[str, Any], extra_specs: dict[str, str], field: str
) -> None:
    exc = refused(v.validate_flavor_spec, {**FLAVOR, **lists, "extra_specs": extra_specs})
    assert exc.fields == [f"extra_specs.{field}"]


def test_flavor_collects_all_errors() -> None:
    exc = refused(
        v.validate_flavor_spec,
        {
            "name": "gold",
            "required_traits": ["CUSTOM_A"],
            "extra_specs": {
                "capabilities:boot_mode": "s==uefi",
                "capabilities:cpus": "= many",
                "trait:CUSTOM_A": "forbidden",
            },
        },
    )
    assert sorted(exc.fields) == [
        "extra_specs.capabilities:boot_mode",
        "extra_specs.capabilities:cpus",
        "extra_specs.trait:CUSTOM_A",
        "resource_class",
    ]


def test_flavor_normalized() -> None:
    flavor = v.validate_flavor_spec(
        {
            "name": "gold",
            "resource_class": "baremetal",
            "required_traits": ["CUSTOM_A"],
            "forbidden_traits": ["CUSTOM_B"],
            "extra_specs": {
                "capabilities:boot_mode": "uefi",
                "capabilities:memory_mb": ">= 4096",
                "capabilities:cpu_arch": "<or> x86_64 <or> aarch64",
                "trait:CUSTOM_C": "required",
                "trait:CUSTOM_D": "forbidden",
                "trait:CUSTOM_A": "required",  # agrees with the list
            },
        }
    )
    assert flavor.required_traits == frozenset({"CUSTOM_A", "CUSTOM_C"})
    assert flavor.forbidden_traits == frozenset({"CUSTOM_B", "CUSTOM_D"})
    assert flavor.extra_specs == {
        "capabilities:boot_mode": "uefi",
        "capabilities:memory_mb": ">= 4096",
        "capabilities:cpu_arch": "<or> x86_64 <or> aarch64",
    }
    assert flavor.capabilities == {
        "boot_mode": capabilities.CapabilityExpression(None, ("uefi",)),
        "memory_mb": capabilities.CapabilityExpression(">=", ("4096",)),
        "cpu_arch": capabilities.CapabilityExpression("<or>", ("x86_64", "aarch64")),
    }


def test_flavor_defaults() -> None:
    flavor = v.validate_flavor_spec(FLAVOR)
    assert flavor.required_traits == flavor.forbidden_traits == frozenset()
    assert flavor.extra_specs == {}
    assert flavor.capabilities == {}


# -- capability expressions: parsing -------------------------------------------


@pytest.mark.parametrize(
    ("text", "op", "operands"),
    [
        ("uefi", None, ("uefi",)),
        ("a b", None, ("a b",)),
        ("sata", None, ("sata",)),  # starts with "s" but is no operator
        ("!important", None, ("!important",)),
        ("= 4", "=", ("4",)),
        ("=  2.5 ", "=", ("2.5",)),
        ("== 1e3", "==", ("1e3",)),
        ("!= -1", "!=", ("-1",)),
        (">= 4096", ">=", ("4096",)),
        ("<= 0.5", "<=", ("0.5",)),
        ("s== uefi", "s==", ("uefi",)),
        ("s!= bios", "s!=", ("bios",)),
        ("s>= 2.0", "s>=", ("2.0",)),
        ("s<= b", "s<=", ("b",)),
        ("s> a", "s>", ("a",)),
        ("s< z", "s<", ("z",)),
        ("<in> avx", "<in>", ("avx",)),
        ("<all-in> aes mmx", "<all-in>", ("aes", "mmx")),
        ("<all-in> aes", "<all-in>", ("aes",)),
        ("<or> a <or> b", "<or>", ("a", "b")),
        ("<or> a <or> b <or> c", "<or>", ("a", "b", "c")),
        ("\t<or>\ta\n<or> b", "<or>", ("a", "b")),
    ],
)
def test_parse_capability_expression(text: str, op: str | None, operands: tuple[str, ...]) -> None:
    expression = capabilities.parse_capability_expression(text)
    assert expression == capabilities.CapabilityExpression(op, operands)
    assert capabilities.parse_capability_expression(str(expression)) == expression


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "=",  # operator without operand
        "s==",
        "<in>",
        "<all-in>",
        "<or>",
        "= abc",  # numeric operators need numbers
        ">= 4GB",
        "== nan",
        "<= inf",
        "= 1e999",
        "s== a b",  # Nova would silently compare with "a" only
        "= 1 2",
        "<in> a b",
        "s==uefi",  # glued: Nova would compare the literal text
        ">=4",
        "=4",
        "<in>avx",
        "<or>a <or> b",
        "> 4",  # not operators at all
        "< 4",
        "<or> a",  # fewer than two alternatives
        "<or> a <or>",  # empty alternative
        "<or> a <or> <or> b",
        "<or> a b",  # missing separator
        "<or> a b c",
    ],
)
def test_bad_capability_expression(text: str) -> None:
    assert refused(capabilities.parse_capability_expression, text).fields == ["expression"]
    exc = refused(v.validate_flavor_spec, {**FLAVOR, "extra_specs": {"capabilities:k": text}})
    assert exc.fields == ["extra_specs.capabilities:k"]


def test_parse_capability_expression_field_and_type() -> None:
    assert refused(capabilities.parse_capability_expression, 5, field="x").fields == ["x"]


def test_capability_expression_refuses_unknown_operator() -> None:
    with pytest.raises(ValueError, match="unknown capability operator"):
        capabilities.CapabilityExpression(">", ("1",))


# -- capability expressions: Nova's matching semantics --------------------------

AES = "['aes', 'mmx', 'aux']"

MATCHES: list[tuple[str, str | None, bool]] = [
    # plain strings: exact match of the whole text
    ("1", "1", True),
    ("1", "", False),
    ("1", "3", False),
    ("2", "222", False),
    ("uefi", "UEFI", False),
    ("a b", "a b", True),
    ("a b", "a", False),
    # "=": numeric "at least"
    ("= 123", "123", True),
    ("= 123", "124", True),
    ("= 234", "34", False),
    ("= 2.5", "2.50", True),
    ("= 2.5", "3", True),
    ("= 2.5", "2.4999", False),
    ("= 1e3", "1000", True),
    ("= 1000", "1e3", True),
    ("= 10", " 12 ", True),  # float() ignores surrounding whitespace
    ("= 10", "abc", False),  # non-numeric value: no match, no exception
    ("= 10", "", False),
    ("= -5", "-4.5", True),
    # "==", "!=", ">=", "<=": numeric
    ("== 1", "1.0", True),
    ("== 1", "1.1", False),
    ("== 10", "1e1", True),
    ("== 1", "one", False),
    ("!= 1", "1.0", False),
    ("!= 1", "2", True),
    ("!= 1", "x", False),
    (">= 3", "3", True),
    (">= 3", "2", False),
    (">= 3", "10", True),  # numeric, not lexical
    ("<= 10", "2", True),
    ("<= 2", "3", False),
    ("<= 2", "2.0", True),
    # string comparisons: lexical
    ("s== 123", "123", True),
    ("s== 123", "1234", False),
    ("s== 1", "1.0", False),
    ("s!= 123", "1234", True),
    ("s!= 123", "123", False),
    ("s>= 234", "1000", False),  # "1000" < "234" lexically
    ("s>= 234", "234", True),
    ("s>= abc", "abd", True),
    ("s<= 1000", "1234", False),
    ("s<= b", "a", True),
    ("s<= b", "b", True),
    ("s< 12", "2", False),
    ("s< 12", "100", True),
    ("s< b", "b", False),
    ("s> 2", "12", False),
    ("s> 2", "3", True),
    ("s> a", "a", False),
    # <in>: substring
    ("<in> 11", "12311321", True),
    ("<in> 11", "12310321", False),
    ("<in> 12311321", "12311321", True),
    ("<in> vt", "cpu_vt", True),
    ("<in> avx2", "avx", False),
    # <all-in>: every word a substring
    ("<all-in> aes mmx", AES, True),
    ("<all-in> mmx", AES, True),
    ("<all-in> txt", AES, False),
    ("<all-in> txt 3dnow", AES, False),
    ("<all-in> txt aes", AES, False),
    # <or>: equal to one whole word
    ("<or> 11 <or> 12", "12", True),
    ("<or> 11 <or> 12", "11", True),
    ("<or> 11 <or> 12", "13", False),
    ("<or> 11 <or> 12", "1", False),
    ("<or> 1 <or> 2", "1.0", False),
    ("<or> uefi <or> bios", "uefi bios", False),
]


@pytest.mark.parametrize(("text", "actual", "expected"), MATCHES)
def test_capability_matching(text: str, actual: str | None, expected: bool) -> None:
    assert capabilities.parse_capability_expression(text).matches(actual) is expected


@pytest.mark.parametrize("text", sorted({text for text, _, _ in MATCHES}))
def test_missing_capability_never_matches(text: str) -> None:
    assert capabilities.parse_capability_expression(text).matches(None) is False


def test_every_operator_is_covered_by_the_matching_table() -> None:
    covered = {capabilities.parse_capability_expression(text).op for text, _, _ in MATCHES}
    assert covered == {None, *capabilities.CAPABILITY_OPERATORS}


@pytest.mark.parametrize(
    ("expression", "actual", "expected"),
    [
        # Built directly (not parsed): still never raises.
        (capabilities.CapabilityExpression("=", ("abc",)), "5", False),
        (capabilities.CapabilityExpression("s==", ()), "x", False),
        (capabilities.CapabilityExpression(None, ()), "", False),
        (
            capabilities.CapabilityExpression("<in>", ("a", "zzz")),
            "abc",
            True,
        ),  # Nova: first word only
    ],
)
def test_matching_of_constructed_expressions(
    expression: capabilities.CapabilityExpression, actual: str, expected: bool
) -> None:
    assert expression.matches(actual) is expected


# -- build requests ------------------------------------------------------------

BAD_BUILD_FIELDS: list[tuple[str, object, list[str]]] = [
    ("flavor", DELETE, ["flavor"]),
    ("flavor", "bad name", ["flavor"]),
    ("flavor", 3, ["flavor"]),
    ("count", 0, ["count"]),
    ("count", -1, ["count"]),
    ("count", 1001, ["count"]),
    ("count", True, ["count"]),
    ("count", "2", ["count"]),
    ("count", 2.5, ["count"]),
    ("name", "", ["name"]),
    ("name", " web", ["name"]),
    ("name", "web\n", ["name"]),
    ("name", "a\x00b", ["name"]),
    ("name", "w" * 256, ["name"]),
    ("name", 5, ["name"]),
    ("group", "a b", ["group"]),
    ("group", 1, ["group"]),
    ("instance_uuids", UUID_A, ["instance_uuids"]),
    ("instance_uuids", [UUID_A, UUID_A], ["instance_uuids"]),  # count is 1
    ("instance_uuids", ["nope"], ["instance_uuids[0]"]),
    ("image", "cirros", ["image"]),
    ("scheduler_hints", ["rack", "r1"], ["scheduler_hints"]),
    ("scheduler_hints", "rack=r1", ["scheduler_hints"]),
    ("scheduler_hints", {"query": ["=", "$x", 1]}, ["scheduler_hints.query"]),
    (
        "scheduler_hints",
        {"a": {"b": 1}, "ok": 1, "c": float("nan")},
        ["scheduler_hints.a", "scheduler_hints.c"],
    ),
    ("scheduler_hints", {"": 1}, ["scheduler_hints.''"]),
    ("scheduler_hints", {3: "x"}, ["scheduler_hints.3"]),
    ("scheduler_hints", {"q": "x" * 4097}, ["scheduler_hints.q"]),
    ("scheduler_hints", {f"h{i}": i for i in range(65)}, ["scheduler_hints"]),
]


@pytest.mark.parametrize(("key", "value", "expected"), BAD_BUILD_FIELDS)
def test_bad_build_field(key: str, value: object, expected: list[str]) -> None:
    assert refused(v.validate_build_request, make(BUILD, key, value)).fields == expected


def test_build_scheduler_hints_are_json_primitives() -> None:
    hints = {"query": '["=", "$x", 1]', "n": 3, "f": 2.5, "on": True, "none": None, "q": "x" * 4096}
    request = v.validate_build_request({"flavor": "gold", "scheduler_hints": hints})
    assert request.scheduler_hints == hints
    assert v.validate_build_request({"flavor": "gold"}).scheduler_hints == {}
    exc = refused(v.validate_build_request, {"flavor": "gold", "scheduler_hints": {"q": [1]}})
    assert "must be a string, number, boolean or null" in str(exc)


@pytest.mark.parametrize("spec", [None, [], "gold"])
def test_build_request_must_be_a_mapping(spec: object) -> None:
    assert refused(v.validate_build_request, spec).fields == [""]


def test_build_instance_uuids_rules() -> None:
    other = str(uuid.UUID(int=1))
    request = v.validate_build_request(
        {"flavor": "gold", "count": 2, "instance_uuids": [UUID_A.upper(), other]}
    )
    assert request.instance_uuids == (UUID_A, other)
    exc = refused(
        v.validate_build_request,
        {"flavor": "gold", "count": 3, "instance_uuids": [UUID_A, "x", UUID_A.upper()]},
    )
    assert exc.fields == ["instance_uuids[1]", "instance_uuids[2]"]
    exc = refused(v.validate_build_request, {"flavor": "gold", "count": 3, "instance_uuids": []})
    assert exc.fields == ["instance_uuids"]
    # A bad count is reported once, not again as a length mismatch.
    exc = refused(
        v.validate_build_request, {"flavor": "gold", "count": 0, "instance_uuids": [UUID_A]}
    )
    assert exc.fields == ["count"]


@pytest.mark.parametrize(
    ("name_length", "count", "ok"),
    [
        (255, 1, True),
        (253, 2, True),  # "-2" makes 255
        (254, 2, False),
        (252, 10, True),  # "-10" makes 255
        (253, 10, False),
        (250, 1000, True),  # "-1000" makes 255
        (251, 1000, False),
    ],
)
def test_build_name_leaves_room_for_the_suffix(name_length: int, count: int, ok: bool) -> None:
    spec = {"flavor": "gold", "name": "w" * name_length, "count": count}
    if ok:
        assert v.validate_build_request(spec).name == "w" * name_length
    else:
        assert refused(v.validate_build_request, spec).fields == ["name"]


def test_build_defaults_and_normalization() -> None:
    assert v.validate_build_request(BUILD) == v.BuildRequest(flavor="gold")
    request = v.validate_build_request(
        {"flavor": "gold", "count": 3, "name": "web server", "group": "", "instance_uuids": None}
    )
    assert request == v.BuildRequest(flavor="gold", count=3, name="web server", group="")


def test_build_collects_all_errors() -> None:
    exc = refused(v.validate_build_request, {"count": 0, "name": "", "group": "a b", "x": 1})
    assert sorted(exc.fields) == ["count", "flavor", "group", "name", "x"]


# -- small helpers ---------------------------------------------------------------


@pytest.mark.parametrize("value", [None, "", "x", 5, UUID_A + "\n", " " + UUID_A, [UUID_A]])
def test_validate_uuid_refuses(value: object) -> None:
    assert refused(checks.validate_uuid, value, "node_id").fields == ["node_id"]


@pytest.mark.parametrize("value", [None, "", "a b", "-a", "n" * 256, 7, b"node"])
def test_validate_name_refuses(value: object) -> None:
    assert refused(checks.validate_name, value, "flavor").fields == ["flavor"]


def test_validate_name_accepts() -> None:
    assert checks.validate_name("rack-1:node_2.a", "name") == "rack-1:node_2.a"
    assert checks.validate_name("n" * 255, "name") == "n" * 255


# -- fuzzing: anything in, a valid object or InvalidInput out --------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5)
    ),
    max_leaves=20,
)

names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,20}", fullmatch=True)
resource_classes = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)
traits = st.from_regex(r"[A-Z][A-Z0-9_]{0,15}", fullmatch=True)
groups = st.from_regex(r"[A-Za-z0-9._-]{0,10}", fullmatch=True)
cap_keys = st.from_regex(r"[A-Za-z0-9_.-]{1,10}", fullmatch=True)
cap_values = (
    st.text(alphabet=st.characters(exclude_characters=",:"), min_size=1, max_size=10)
    .map(str.strip)
    .filter(bool)
)
uuids = st.uuids().map(str) | st.uuids().map(lambda u: u.hex.upper())
expressions = st.sampled_from(
    [text for text, _, _ in MATCHES] + ["s==uefi", "= x", "<or> a", "", " a"]
) | st.text(max_size=12)


def plausible(values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Valid values most of the time, anything some of the time."""
    return st.one_of(values, values, json_values)


fuzzed_nodes = st.fixed_dictionaries(
    {},
    optional={
        "name": plausible(names),
        "uuid": plausible(uuids),
        "resource_class": plausible(resource_classes),
        "traits": plausible(st.lists(traits, max_size=5)),
        "properties": plausible(
            st.dictionaries(
                st.text(max_size=5) | st.just("capabilities"),
                plausible(st.text(max_size=20)),
                max_size=4,
            )
        ),
        "group": plausible(groups),
        "maintenance": plausible(st.booleans()),
        "maintenance_reason": plausible(st.text(max_size=10)),
        "provision_state": plausible(st.sampled_from(["enroll", "available", "active"])),
        "power_state": plausible(st.sampled_from(["power on", "power off", "on"])),
        "junk": json_values,
    },
)
fuzzed_flavors = st.fixed_dictionaries(
    {},
    optional={
        "name": plausible(names),
        "resource_class": plausible(resource_classes),
        "required_traits": plausible(st.lists(traits, max_size=3)),
        "forbidden_traits": plausible(st.lists(traits, max_size=3)),
        "extra_specs": plausible(
            st.dictionaries(
                st.one_of(
                    cap_keys.map(lambda k: "capabilities:" + k),
                    traits.map(lambda t: "trait:" + t),
                    st.text(max_size=10),
                ),
                plausible(expressions | st.sampled_from(["required", "forbidden"])),
                max_size=4,
            )
        ),
        "junk": json_values,
    },
)
fuzzed_builds = st.fixed_dictionaries(
    {},
    optional={
        "flavor": plausible(names),
        "count": plausible(st.integers(0, 5)),
        "name": plausible(st.text(max_size=10)),
        "group": plausible(groups),
        "instance_uuids": plausible(st.lists(uuids, max_size=4)),
        "junk": json_values,
    },
)

VALIDATORS: dict[str, tuple[Callable[[object], object], type]] = {
    "node": (v.validate_node_spec, v.NodeSpec),
    "flavor": (v.validate_flavor_spec, v.FlavorSpec),
    "build": (v.validate_build_request, v.BuildRequest),
}


def only_invalid_input(func: Callable[[object], object], value: object, kind: type) -> None:
    try:
        result = func(value)
    except InvalidInput as exc:
        assert exc.errors
        assert all(isinstance(f, str) for f in exc.fields)
        str(exc)  # renders
    else:
        assert isinstance(result, kind)


FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ROUND_TRIP = settings(max_examples=100, deadline=None)


@FUZZ
@given(value=json_values)
def test_fuzz_arbitrary_values(value: object) -> None:
    for func, kind in VALIDATORS.values():
        only_invalid_input(func, value, kind)
    only_invalid_input(v.validate_node_specs, value, list)
    only_invalid_input(v.validate_node_specs, [value, value], list)
    only_invalid_input(lambda x: checks.validate_uuid(x, "id"), value, str)
    only_invalid_input(lambda x: checks.validate_name(x, "name"), value, str)
    only_invalid_input(v.validate_capabilities, value, dict)
    only_invalid_input(
        capabilities.parse_capability_expression, value, capabilities.CapabilityExpression
    )


@FUZZ
@given(spec=fuzzed_nodes)
def test_fuzz_node_specs(spec: dict[str, Any]) -> None:
    only_invalid_input(v.validate_node_spec, spec, v.NodeSpec)
    only_invalid_input(v.validate_node_specs, [spec, spec, {**spec, "name": "other"}], list)


@FUZZ
@given(spec=fuzzed_flavors)
def test_fuzz_flavor_specs(spec: dict[str, Any]) -> None:
    only_invalid_input(v.validate_flavor_spec, spec, v.FlavorSpec)


@FUZZ
@given(spec=fuzzed_builds)
def test_fuzz_build_requests(spec: dict[str, Any]) -> None:
    only_invalid_input(v.validate_build_request, spec, v.BuildRequest)


@FUZZ
@given(text=st.text(max_size=30) | expressions, actual=st.none() | st.text(max_size=10))
def test_fuzz_capability_expressions(text: str, actual: str | None) -> None:
    try:
        expression = capabilities.parse_capability_expression(text)
    except InvalidInput as exc:
        assert exc.fields == ["expression"]
        return
    assert isinstance(expression.matches(actual), bool)
    assert capabilities.parse_capability_expression(str(expression)) == expression


@FUZZ
@given(text=st.text(max_size=40))
def test_fuzz_capabilities_text(text: str) -> None:
    try:
        parsed = v.validate_capabilities(text)
    except InvalidInput as exc:
        assert set(exc.fields) == {"properties.capabilities"}
        return
    text_again = ",".join(f"{k}:{val}" for k, val in parsed.items())
    assert v.validate_capabilities(text_again) == parsed


# -- round trips: to_dict() validates to an equal object -------------------------


@st.composite
def valid_nodes(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": draw(names), "resource_class": draw(resource_classes)}
    if draw(st.booleans()):
        spec["uuid"] = draw(uuids)
    spec["traits"] = draw(st.lists(traits, unique=True, max_size=8))
    properties = draw(
        st.dictionaries(
            st.text(min_size=1, max_size=10).filter(lambda k: k != "capabilities"),
            st.one_of(
                st.text(max_size=10),
                st.integers(),
                st.floats(allow_nan=False, allow_infinity=False),
                st.booleans(),
            ),
            max_size=5,
        )
    )
    capabilities = draw(st.dictionaries(cap_keys, cap_values, max_size=4))
    if capabilities:
        properties["capabilities"] = " , ".join(f" {k} :{val}" for k, val in capabilities.items())
    spec["properties"] = properties
    spec["group"] = draw(groups)
    spec["maintenance"] = draw(st.booleans())
    if spec["maintenance"]:
        spec["maintenance_reason"] = draw(st.none() | st.text(max_size=20))
    spec["provision_state"] = draw(st.sampled_from(["enroll", "manageable", "available"]))
    spec["power_state"] = draw(st.sampled_from(["power on", "power off"]))
    return spec


@ROUND_TRIP
@given(spec=valid_nodes())
def test_node_round_trip(spec: dict[str, Any]) -> None:
    node = v.validate_node_spec(spec)
    again = v.validate_node_spec(json.loads(json.dumps(node.to_dict())))
    assert again == node
    assert v.validate_node_specs([node.to_dict()]) == [node]
    # The import's payload leaves the defaults out: the same node all the same.
    payload = node.to_payload()
    assert v.validate_node_spec(json.loads(json.dumps(payload))) == node
    assert {k: val for k, val in node.to_dict().items() if k in payload} == payload


def test_node_payload_leaves_the_defaults_out() -> None:
    node = v.validate_node_spec({"name": "n1", "resource_class": "baremetal"})
    assert node.to_payload() == {"name": "n1", "uuid": node.uuid, "resource_class": "baremetal"}


@st.composite
def valid_flavors(draw: st.DrawFn) -> dict[str, Any]:
    all_traits = draw(st.lists(traits, unique=True, max_size=10))
    cut = draw(st.integers(0, len(all_traits)))
    required, forbidden = all_traits[:cut], all_traits[cut:]
    extra_specs = {
        "capabilities:" + key: text
        for key, text in draw(
            st.dictionaries(
                cap_keys, st.sampled_from([t for t, _, _ in MATCHES if t != "a b"]), max_size=4
            )
        ).items()
    }
    for trait in draw(st.lists(st.sampled_from(all_traits), unique=True)) if all_traits else []:
        extra_specs["trait:" + trait] = "required" if trait in required else "forbidden"
    return {
        "name": draw(names),
        "resource_class": draw(resource_classes),
        "required_traits": required,
        "forbidden_traits": forbidden,
        "extra_specs": extra_specs,
    }


@ROUND_TRIP
@given(spec=valid_flavors())
def test_flavor_round_trip(spec: dict[str, Any]) -> None:
    flavor = v.validate_flavor_spec(spec)
    assert v.validate_flavor_spec(json.loads(json.dumps(flavor.to_dict()))) == flavor


@ROUND_TRIP
@given(
    flavor=names,
    count=st.integers(1, 5),
    name=st.none() | st.from_regex(r"[a-z][a-z -]{0,8}[a-z]", fullmatch=True),
    group=st.none() | groups,
    with_uuids=st.booleans(),
    data=st.data(),
)
def test_build_request_round_trip(
    flavor: str,
    count: int,
    name: str | None,
    group: str | None,
    with_uuids: bool,
    data: st.DataObject,
) -> None:
    spec: dict[str, Any] = {"flavor": flavor, "count": count, "name": name, "group": group}
    if with_uuids:
        spec["instance_uuids"] = data.draw(st.lists(uuids, min_size=count, max_size=count))
        if len({u.replace("-", "").lower() for u in spec["instance_uuids"]}) < count:
            return
    if data.draw(st.booleans()):
        spec["scheduler_hints"] = data.draw(
            st.dictionaries(
                st.text(min_size=1, max_size=10),
                st.none()
                | st.booleans()
                | st.integers()
                | st.floats(allow_nan=False, allow_infinity=False)
                | st.text(max_size=20),
                max_size=4,
            )
        )
    request = v.validate_build_request(spec)
    assert v.validate_build_request(json.loads(json.dumps(request.to_dict()))) == request


@pytest.mark.parametrize(
    "exc",
    [
        InvalidInput([FieldError("name", "is required")]),
        NodeNotFound("n1"),
        DuplicateNode(field="name", value="n1", index=3),
        ConfigurationError("database", "connection", "must be set"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_exceptions_rebuild_from_their_kwargs(exc: RingfleetError) -> None:
    """What oslo.messaging does with a remote exception: klass(*args, **kwargs)."""
    assert exc.args == ()
    rebuilt = type(exc)(*exc.args, **exc.kwargs)
    assert str(rebuilt) == str(exc)
    assert rebuilt.kwargs == exc.kwargs


def test_first_line_of_an_exception_never_fails() -> None:
    assert first_line(RuntimeError("boom\nTraceback (most recent call last): ...")) == "boom"
    # No message: the class name, or the caller's default -- never an
    # IndexError inside the caller's except block.
    assert first_line(ConnectionError()) == "ConnectionError"
    assert first_line(AssertionError(), default="") == ""


@pytest.mark.parametrize(
    "extra_specs",
    [
        {"mycompany:racks": "<in> r1"},
        {"boot_mode": "uefi", "cpus": ">= 8"},
        {"hw:cpu_policy": "dedicated", "resources:VCPU": "0"},
        {"a b.c-d_e:f": ""},
    ],
)
def test_flavor_keeps_extra_specs_of_any_namespace(extra_specs: dict[str, str]) -> None:
    flavor = v.validate_flavor_spec({**FLAVOR, "extra_specs": extra_specs})
    assert flavor.extra_specs == extra_specs
    assert flavor.capabilities == {}
    assert v.validate_flavor_spec(flavor.to_dict()) == flavor


def test_other_namespaces_do_not_excuse_a_bad_capability() -> None:
    exc = refused(
        v.validate_flavor_spec,
        {**FLAVOR, "extra_specs": {"mycompany:racks": "r1", "capabilities:boot_mode": "s== "}},
    )
    assert exc.fields == ["extra_specs.capabilities:boot_mode"]
