# SPDX-License-Identifier: Apache-2.0
"""Bulk node creation, run on SQLite (unit) and PostgreSQL and MariaDB (functional).

PostgreSQL writes through ``COPY`` (its own text format and escapes),
the others through a multi-row INSERT (:mod:`conductor.db.bulk`): each
function takes a migrated :class:`Database` and asserts that what is stored
is what was given, and that a clash stores nothing and names the first
clashing spec, whichever way the rows went.
"""

from __future__ import annotations

import pytest

from conductor.common.exception import DuplicateNode, InvalidInput
from conductor.db import bulk, nodes
from conductor.db.engine import Database
from conductor.validation import validate_node_specs

#: Text that COPY's format escapes (backslash, tab, newline, carriage return)
#: or that looks like its NULL marker.
AWKWARD = "a\\b\tc\nd\re \\N \"q\" 'q' \u00e9\u4e2d"


def awkward_values_are_stored_as_given(db: Database) -> None:
    specs = validate_node_specs(
        [
            {
                "name": "awkward-1",
                "resource_class": "baremetal",
                "traits": ["CUSTOM_B", "CUSTOM_A"],
                "properties": {
                    "note": AWKWARD,
                    "empty": "",
                    "cpus": 64,
                    "flag": True,
                    "one": 1,
                    "ratio": 1.5,
                    "capabilities": "boot_mode:uefi",
                },
                "group": "rack-1",
                "maintenance": True,
                "maintenance_reason": AWKWARD,
                "provision_state": "manageable",
                "power_state": "power on",
            },
            # An empty reason is not NULL; the same property values as True.
            {
                "name": "awkward-2",
                "resource_class": "baremetal",
                "properties": {"flag": 1, "one": True},
                "maintenance": True,
                "maintenance_reason": "",
            },
            {"name": "plain-1", "resource_class": "baremetal"},
        ]
    )
    created = nodes.create_nodes(db, specs)
    stored = [nodes.get_node(db, spec.uuid) for spec in specs]
    assert stored == created
    assert stored[0].properties["note"] == AWKWARD
    assert stored[0].maintenance_reason == AWKWARD
    assert stored[0].properties["flag"] is True and stored[0].properties["one"] == 1
    assert stored[1].properties == {"flag": 1, "one": True}
    assert stored[1].properties["one"] is True
    assert stored[1].maintenance_reason == ""
    assert stored[2].maintenance_reason is None and stored[2].power_state is not None
    assert nodes.list_node_dicts(db) == sorted(
        (n.to_dict() for n in stored), key=lambda n: n["uuid"]
    )


def a_clash_stores_nothing_and_names_the_first(db: Database) -> None:
    nodes.create_nodes(db, validate_node_specs([{"name": "taken", "resource_class": "b"}]))
    [stored] = nodes.list_nodes(db)
    fresh = [{"name": f"fresh-{i}", "resource_class": "b"} for i in range(5)]
    clash = validate_node_specs([*fresh, {"name": "taken", "resource_class": "b"}])
    with pytest.raises(DuplicateNode) as err:
        nodes.create_nodes(db, clash)
    assert (err.value.field, err.value.value, err.value.index) == ("name", "taken", 5)
    by_uuid = validate_node_specs(
        [*fresh, {"name": "other", "uuid": stored.uuid, "resource_class": "b"}]
    )
    with pytest.raises(DuplicateNode) as err:
        nodes.create_nodes(db, by_uuid)
    assert (err.value.field, err.value.value, err.value.index) == ("uuid", stored.uuid, 5)
    assert nodes.count_nodes(db) == 1
    # Every clash, for a dry run.
    errors = nodes.existing_clashes(db, by_uuid)
    assert [e.field for e in errors] == ["nodes[5].uuid"]
    # Every clash, for an import checked and written in one call.
    both = validate_node_specs(
        [
            {"name": "taken", "resource_class": "b"},
            *fresh,
            {"name": "other", "uuid": stored.uuid, "resource_class": "b"},
        ]
    )
    with pytest.raises(InvalidInput) as every:
        nodes.insert_nodes(db, both, every_clash=True)
    assert [str(e) for e in every.value.errors] == [
        "nodes[0].name: exists already (got 'taken')",
        f"nodes[6].uuid: exists already (got '{stored.uuid}')",
    ]
    assert nodes.count_nodes(db) == 1


def many_statements_are_one_transaction(db: Database) -> None:
    """More rows than one COPY or INSERT statement takes: a clash in the last
    statement leaves nothing of the first."""
    size = 2 * max(bulk.COPY_CHUNK, bulk.INSERT_CHUNK) // 1000
    saved = bulk.COPY_CHUNK, bulk.INSERT_CHUNK
    bulk.COPY_CHUNK = bulk.INSERT_CHUNK = 2
    try:
        nodes.create_nodes(db, validate_node_specs([{"name": "last", "resource_class": "b"}]))
        specs = validate_node_specs(
            [{"name": f"n-{i}", "resource_class": "b"} for i in range(size)]
            + [{"name": "last", "resource_class": "b"}]
        )
        with pytest.raises(DuplicateNode) as err:
            nodes.create_nodes(db, specs)
        assert err.value.index == size
        assert nodes.count_nodes(db) == 1
        nodes.create_nodes(db, specs[:-1])
        assert nodes.count_nodes(db) == size + 1
    finally:
        bulk.COPY_CHUNK, bulk.INSERT_CHUNK = saved


CASES = [
    awkward_values_are_stored_as_given,
    a_clash_stores_nothing_and_names_the_first,
    many_statements_are_one_transaction,
]
