# SPDX-License-Identifier: Apache-2.0
"""COPY's text format as conductor.db.bulk writes it (the server side is in
tests/functional/test_node_import_sql.py)."""

from __future__ import annotations

import datetime

from sqlalchemy import JSON, Boolean, Column, DateTime, Integer, MetaData, String, Table

from conductor.db import bulk

_TABLE = Table(
    "things",
    MetaData(),
    Column("id", Integer, primary_key=True),
    Column("name", String(20)),
    Column("count", Integer),
    Column("flag", Boolean),
    Column("at", DateTime),
    Column("doc", JSON),
)
_AT = datetime.datetime(2026, 1, 2, 3, 4, 5, 6)


def test_values_are_escaped_and_null_is_marked() -> None:
    rows = [
        {"name": "a\\b\tc\nd\re", "count": 1, "flag": True, "at": _AT, "doc": {"k": "x\ty\\"}},
        {"name": None, "count": None, "flag": None, "at": None, "doc": None},
        {"name": "\\N", "count": 0, "flag": False, "at": _AT, "doc": []},
    ]
    columns, text = bulk.copy_text(_TABLE, rows)
    assert columns == ["name", "count", "flag", "at", "doc"]
    assert text.split("\n") == [
        "a\\\\b\\tc\\nd\\re\t1\tt\t2026-01-02 03:04:05.000006\t" + '{"k": "x\\\\ty\\\\\\\\"}',
        "\\N\t\\N\t\\N\t\\N\tnull",  # SQLAlchemy's JSON type stores None as JSON null
        "\\\\N\t0\tf\t2026-01-02 03:04:05.000006\t[]",
        "",
    ]


def test_a_column_of_one_value_is_encoded_once_but_json_values_apart() -> None:
    rows = [
        {"name": "same", "flag": True, "doc": {"n": 1}},
        {"name": "same", "flag": True, "doc": {"n": True}},  # == the first, not the same JSON
    ]
    _, text = bulk.copy_text(_TABLE, rows)
    assert text == 'same\tt\t{"n": 1}\nsame\tt\t{"n": true}\n'


def test_a_json_column_of_empty_values_is_encoded_once_and_others_apart() -> None:
    empty = [{"doc": []}, {"doc": []}]
    assert bulk.copy_text(_TABLE, empty)[1] == "[]\n[]\n"
    # An empty list and an empty mapping are not equal: each is its own.
    mixed = [{"doc": []}, {"doc": {}}, {"doc": [False]}, {"doc": [0]}]
    assert bulk.copy_text(_TABLE, mixed)[1] == "[]\n{}\n[false]\n[0]\n"
