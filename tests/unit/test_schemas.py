# SPDX-License-Identifier: Apache-2.0
"""Tests of conductor.common.schemas: the published schemas and validation agree.

The OpenAPI document publishes each resource's JSON Schema; the conductor's
validation enforces the same declarations field by field, plus rules a
schema cannot say.  So every payload validation accepts must be valid under
the published schema (checked on the validation tests' fuzzed payloads),
and validation must know exactly the schema's fields and require exactly
its required ones.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from conductor import validation
from conductor.api import openapi, openapi_rules
from conductor.api.v1 import ROUTES
from conductor.common import checks, schemas
from conductor.common.exception import InvalidInput
from conductor.validation.capabilities import expression_or_reason
from tests.unit.test_validation import (
    FUZZ,
    cap_keys,
    cap_values,
    expressions,
    groups,
    names,
    resource_classes,
    traits,
    uuids,
)

IMAGE: dict[str, Any] = {
    "source": "https://images.test/ubuntu.qcow2",
    "os_hash_algo": "sha256",
    "os_hash_value": "ab" * 32,
    "checksum": "CD" * 16,
    "disk_format": "qcow2",
    "kernel": "http://images.test/vmlinuz",
    "ramdisk": "http://images.test/initrd",
}

#: A valid payload of each resource, with every field given.
FULL: dict[str, dict[str, Any]] = {
    "NodeSpec": {
        "name": "node-1",
        "uuid": "0f2c3d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f",
        "resource_class": "baremetal",
        "traits": ["CUSTOM_GPU"],
        "properties": {"cpus": 8, "capabilities": "boot_mode:uefi"},
        "group": "rack-1",
        "maintenance": True,
        "maintenance_reason": "fans",
        "provision_state": "manageable",
        "power_state": "power on",
    },
    "NodeUpdate": {
        "properties": {"cpus": 16},
        "remove_properties": ["ram"],
        "add_traits": ["CUSTOM_A"],
        "remove_traits": ["CUSTOM_B"],
        "resource_class": "gpu",
    },
    "FlavorSpec": {
        "name": "gold",
        "resource_class": "baremetal",
        "required_traits": ["CUSTOM_GPU"],
        "forbidden_traits": ["CUSTOM_SLOW"],
        "extra_specs": {"capabilities:boot_mode": "s== uefi", "trait:CUSTOM_X": "required"},
        "default_image": IMAGE,
    },
    "BuildRequest": {
        "flavor": "gold",
        "count": 2,
        "name": "web",
        "group": "rack-1",
        "instance_uuids": [
            "0f2c3d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f",
            "1f2c3d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f",
        ],
        "scheduler_hints": {"query": '[">=", "$cpus", 4]'},
        "image": IMAGE,
        "user_data": "#cloud-config\npackages: [nginx]\n",
        "meta_data": {"public_keys": {"ops": "ssh-ed25519 AAAA ops@test"}, "meta": {"a": "b"}},
        "network_data": {"links": [], "networks": [], "services": []},
        "key_name": "ops",
        "metadata": {"role": "web"},
        "tags": ["prod"],
    },
}

#: field -> the fields of FULL refused without it (rules across fields).
DEPENDENT = {"maintenance": {"maintenance_reason"}, "count": {"instance_uuids"}}

VALIDATE: dict[str, Callable[[object], object]] = {
    "NodeSpec": validation.validate_node_spec,
    "NodeUpdate": validation.validate_node_update,
    "FlavorSpec": validation.validate_flavor_spec,
    "BuildRequest": validation.validate_build_request,
}

VALIDATORS = {
    name: Draft202012Validator(resource.json_schema())
    for name, resource in schemas.RESOURCES.items()
}
#: The components of the OpenAPI document, as published.
COMPONENTS = openapi.document(ROUTES)["components"]
#: The schemas as the document publishes them: with the server's rules written in.
PUBLISHED = {
    name: Draft202012Validator({"$ref": f"#/components/schemas/{name}", "components": COMPONENTS})
    for name in schemas.RESOURCES
}


def _fields(payload: dict[str, Any], name: str) -> list[str]:
    """The fields validation names in refusing ``payload`` (none: accepted)."""
    try:
        VALIDATE[name](payload)
    except InvalidInput as exc:
        return [f.removeprefix("changes.") for f in exc.fields]
    return []


def test_every_resource_is_covered() -> None:
    assert set(FULL) == set(VALIDATE) == set(schemas.RESOURCES)


@pytest.mark.parametrize("name", sorted(schemas.RESOURCES))
def test_the_schema_is_valid_json_schema(name: str) -> None:
    Draft202012Validator.check_schema(schemas.RESOURCES[name].json_schema())


@pytest.mark.parametrize("name", sorted(schemas.RESOURCES))
def test_openapi_publishes_the_schema(name: str) -> None:
    published = openapi_rules.tightened(name, schemas.RESOURCES[name].json_schema())
    shown = copy.deepcopy(COMPONENTS["schemas"][name])
    for field in shown["properties"].values():
        # The microversion a field appeared in: an annotation, no rule.
        field.pop("x-min-version", None)
    assert shown == published
    assert PUBLISHED[name].is_valid(FULL[name])


@pytest.mark.parametrize("name", sorted(schemas.RESOURCES))
def test_validation_knows_exactly_the_schema_fields(name: str) -> None:
    full = FULL[name]
    assert set(full) == schemas.RESOURCES[name].fields
    assert _fields(full, name) == []
    assert VALIDATORS[name].is_valid(full)
    assert _fields({**full, "colour": "red"}, name) == ["colour"]
    assert not VALIDATORS[name].is_valid({**full, "colour": "red"})


@pytest.mark.parametrize("name", sorted(schemas.RESOURCES))
def test_validation_requires_exactly_the_required_fields(name: str) -> None:
    resource = schemas.RESOURCES[name]
    for field in sorted(resource.fields):
        for absent in (
            {k: v for k, v in FULL[name].items() if k != field},
            {**FULL[name], field: None},
        ):
            refused = _fields(absent, name)
            if field in resource.required:
                assert refused == [field], (field, absent)
                assert not VALIDATORS[name].is_valid(absent)
            else:
                # Only the fields that depend on it, by a rule across
                # fields that a schema does not say, may be refused.
                assert set(refused) <= DEPENDENT.get(field, set()), (field, refused)
                assert VALIDATORS[name].is_valid(absent)


def _accepted_is_schema_valid(name: str, payload: dict[str, Any]) -> None:
    try:
        VALIDATE[name](payload)
    except InvalidInput:
        return
    try:
        # The text rule the conductor holds every call to (its RPC server), and
        # the API every request, before this validation.
        checks.check_text_everywhere({"payload": payload})
    except InvalidInput:
        return
    errors = [e.message for e in VALIDATORS[name].iter_errors(payload)]
    assert errors == [], payload
    # The published schema, the server's rules written in, takes it too.
    errors = [e.message for e in PUBLISHED[name].iter_errors(payload)]
    assert errors == [], payload


# Mostly valid payloads (the validation tests' fuzzers mostly build invalid
# ones): near the limits, with the edge cases the schemas must allow.
scalars = st.one_of(
    st.text(max_size=8),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
)
trait_lists = st.lists(traits, max_size=5, unique=True)
capability_texts = st.lists(
    st.tuples(cap_keys, cap_values).map(":".join), max_size=3, unique_by=lambda t: t.split(":")[0]
).map(",".join)
valid_nodes = st.fixed_dictionaries(
    {"name": names, "resource_class": resource_classes},
    optional={
        "uuid": st.none() | uuids,
        "traits": st.none() | trait_lists,
        "properties": st.none()
        | st.dictionaries(st.text(min_size=1, max_size=5), scalars, max_size=4)
        | capability_texts.map(lambda text: {"capabilities": text}),
        "group": st.none() | groups,
        "maintenance": st.none() | st.booleans(),
        "provision_state": st.none() | st.sampled_from(["enroll", "manageable", "available"]),
        "power_state": st.none() | st.sampled_from(["power on", "power off"]),
    },
)
valid_images = st.fixed_dictionaries(
    {
        "source": st.sampled_from(["http://i.test/a.raw", "HTTPS://i.test:8080/b?c=d"]),
        "checksum": st.text("0123456789abcdefABCDEF", min_size=32, max_size=32),
    },
    optional={
        "disk_format": st.none() | st.sampled_from(list(schemas.DISK_FORMATS)),
        "os_hash_algo": st.just("md5"),
        "os_hash_value": st.just("0" * 32),
    },
)
json_documents = st.recursive(
    st.none() | scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)
valid_flavors = st.fixed_dictionaries(
    {"name": names, "resource_class": resource_classes},
    optional={
        "required_traits": st.none() | trait_lists,
        "forbidden_traits": st.none() | st.just(["CUSTOM_FORBIDDEN_ONLY"]),
        "extra_specs": st.none()
        | st.dictionaries(cap_keys.map("capabilities:".__add__), expressions, max_size=3)
        | st.dictionaries(traits.map("trait:".__add__), st.just("required"), max_size=2),
        "default_image": st.none() | valid_images,
    },
)
valid_builds = st.fixed_dictionaries(
    {"flavor": names},
    optional={
        "count": st.none() | st.just(1),
        "name": st.none() | names,
        "group": st.none() | groups,
        "instance_uuids": st.none() | uuids.map(lambda u: [u]),
        "scheduler_hints": st.none()
        | st.dictionaries(st.text(min_size=1, max_size=5), st.none() | scalars, max_size=3),
        "image": st.none() | valid_images,
        "user_data": st.none() | st.text(max_size=20),
        "meta_data": st.none()
        | st.dictionaries(st.sampled_from(["hostname", "x", "public_keys"]), json_documents),
        "network_data": st.none() | st.dictionaries(st.text(max_size=5), json_documents),
    },
)


@FUZZ
@given(spec=valid_nodes)
def test_every_node_spec_validation_accepts_is_schema_valid(spec: dict[str, Any]) -> None:
    _accepted_is_schema_valid("NodeSpec", spec)


@FUZZ
@given(spec=valid_flavors)
def test_every_flavor_spec_validation_accepts_is_schema_valid(spec: dict[str, Any]) -> None:
    _accepted_is_schema_valid("FlavorSpec", spec)


@FUZZ
@given(spec=valid_builds)
def test_every_build_request_validation_accepts_is_schema_valid(spec: dict[str, Any]) -> None:
    _accepted_is_schema_valid("BuildRequest", spec)


@pytest.mark.parametrize(
    ("text", "taken"),
    [
        ("<0", True),  # a plain value, as in Nova: no operator starts it
        ("!", True),
        ("s=x", True),
        ("<foo", True),
        (">x", True),
        ("sfoo", True),
        ("<", False),  # not an operator: the conductor says to use <= or s<
        ("< 5", False),
        ("<in>x", False),  # an operator glued to its operand
        ("==5", False),
        ("s<x", False),
    ],
)
def test_a_capability_value_is_schema_valid_exactly_when_the_conductor_takes_it(
    text: str, taken: bool
) -> None:
    assert isinstance(expression_or_reason(text), str) is not taken
    assert (re.match(schemas.CAPABILITY_EXPRESSION_PATTERN, text) is not None) is taken
