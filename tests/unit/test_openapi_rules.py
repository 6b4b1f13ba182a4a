# SPDX-License-Identifier: Apache-2.0
"""Tests of conductor.api.openapi_rules: the server's rules in the OpenAPI document.

The functional test (``tests/functional/test_api_schema.py``) holds the
server to the document with schemathesis; these check the document's own
consistency without a server: links name real operations and variables,
every path variable has its schema, the enums are the server's, and the
patterns say what the server's checks take.
"""

from __future__ import annotations

import datetime
import re

import pytest

from conductor.api import openapi, openapi_rules, v1
from conductor.common import checks, clock
from conductor.common.exception import InvalidInput
from conductor.db.instance_actions import ACTION_OF
from conductor.validation import arguments

DOCUMENT = openapi.document(v1.ROUTES)
OPERATIONS = {
    op["operationId"]: (path, op) for path, ops in DOCUMENT["paths"].items() for op in ops.values()
}


def test_every_link_names_an_operation_and_its_path_variables() -> None:
    links = 0
    for _path, op in OPERATIONS.values():
        for response in op["responses"].values():
            for link in response.get("links", {}).values():
                links += 1
                target_path, _target = OPERATIONS[link["operationId"]]
                variables = set(re.findall(r"{(\w+)}", target_path))
                assert set(link["parameters"]) == variables, link
    assert links >= 20


def test_every_path_variable_has_its_schema() -> None:
    for path in DOCUMENT["paths"]:
        for variable in re.findall(r"{(\w+)}", path):
            assert variable in openapi_rules.PATH_SCHEMAS, path


def test_the_action_names_are_the_servers() -> None:
    schema = openapi.SCHEMAS["InstanceActionRecord"]["properties"]["action"]
    assert set(schema["enum"]) == set(ACTION_OF.values())


def test_a_route_of_a_later_microversion_documents_its_404() -> None:
    for route in v1.ROUTES:
        _path, op = OPERATIONS[route.operation_id]
        assert "400" in op["responses"] and "406" in op["responses"]
        if route.min_version > v1.ROUTES[0].min_version:
            assert "404" in op["responses"], route.operation_id


def test_a_dry_run_import_documents_its_200_with_its_body() -> None:
    _path, op = OPERATIONS["importNodes"]
    assert op["responses"]["200"]["content"] == op["responses"]["201"]["content"]


@pytest.mark.parametrize(
    ("value", "taken"),
    [
        ("abc", True),
        ("tab\tok", True),
        ("bell\x07", False),
        ("del\x7f", False),
        ("", True),
    ],
)
def test_the_text_pattern_is_the_text_rule(value: str, taken: bool) -> None:
    assert bool(re.fullmatch(openapi_rules.TEXT_PATTERN, value)) is taken
    assert (checks.text_problem(value) is None) is taken


@pytest.mark.parametrize(
    ("value", "taken"),
    [("0123abcd", True), ("a b", False), ("x\x85", False), ("Þa", True), ("a" * 256, False)],
)
def test_the_project_pattern_is_the_servers(value: str, taken: bool) -> None:
    schema = openapi_rules.PATH_SCHEMAS["project_id"]
    assert bool(re.fullmatch(schema["pattern"], value)) is taken
    try:
        arguments.check_project(value)
    except InvalidInput:
        assert not taken
    else:
        assert taken


@pytest.mark.parametrize("name", [".", "..", " a", "a "])
def test_a_key_pair_path_takes_no_name_a_url_would_change(name: str) -> None:
    assert not re.fullmatch(openapi_rules.PATH_SCHEMAS["keypair"]["pattern"], name)


def test_the_text_rule_reaches_nested_strings_and_keys() -> None:
    tightened = openapi_rules.with_text_rule(
        {"type": "object", "additionalProperties": {"type": "string"}}
    )
    assert tightened["propertyNames"]["pattern"] == openapi_rules.TEXT_PATTERN
    assert tightened["additionalProperties"]["pattern"] == openapi_rules.TEXT_PATTERN
    # An open object holds JSON of text to any depth.
    assert openapi_rules.with_text_rule({"type": "object"})["additionalProperties"] == {
        "$ref": "#/components/schemas/Json"
    }


def test_a_stored_time_is_shown_with_its_zone() -> None:
    naive = datetime.datetime(2026, 11, 29, 23, 50, 14, 123456)
    assert clock.shown(naive) == "2026-11-29T23:50:14.123456+00:00"
    assert datetime.datetime.fromisoformat(clock.shown(naive)).tzinfo == datetime.UTC
    other = datetime.datetime(
        2026, 11, 30, 0, 50, tzinfo=datetime.timezone(datetime.timedelta(hours=1))
    )
    assert clock.shown(other) == "2026-11-29T23:50:00+00:00"
