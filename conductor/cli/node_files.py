# SPDX-License-Identifier: Apache-2.0
"""Reading node import files (YAML, JSON, CSV), remembering each row's line.

An operator fixing a 10,000-row file needs the line of every bad row, so
each reader returns ``(line, spec)`` pairs: for YAML and JSON the line
where the item starts, for CSV the file line where the row starts (a quoted
cell may span lines).  The specs are the conductor's node payloads, which
:func:`conductor.validation.validate_node_specs` then checks.

CSV columns: ``name``, ``uuid``, ``resource_class``, ``traits`` (separated
by spaces, commas or semicolons), ``group``, ``maintenance`` (true/false,
yes/no, 1/0), ``maintenance_reason``, ``provision_state``, ``power_state``,
``capabilities`` (``k1:v1,k2:v2``) and ``properties.<name>`` for any other
property (values stay text).  An empty cell is an absent field.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from typing import Any

import yaml

from conductor.common.exception import FieldError, InvalidInput

__all__ = ["FORMATS", "LineSpec", "detect_format", "read_nodes"]

FORMATS = ("yaml", "json", "csv")

#: (line number, node payload)
LineSpec = tuple[int, Any]

_EXTENSIONS = {".yaml": "yaml", ".yml": "yaml", ".json": "json", ".csv": "csv"}
_TRAIT_SEPARATORS = re.compile(r"[\s,;]+")
_TRUE = frozenset({"true", "yes", "1", "on"})
_FALSE = frozenset({"false", "no", "0", "off"})
_PROPERTY_PREFIX = "properties."
_CSV_FIELDS = frozenset(
    {
        "name",
        "uuid",
        "resource_class",
        "traits",
        "group",
        "maintenance",
        "maintenance_reason",
        "provision_state",
        "power_state",
        "capabilities",
    }
)


def detect_format(path: str, given: str | None) -> str:
    """The format to read ``path`` with: ``given``, else from its extension."""
    if given is not None:
        return given
    for extension, name in _EXTENSIONS.items():
        if path.lower().endswith(extension):
            return name
    if not path:
        raise InvalidInput([FieldError("", "standard input needs --input-format")])
    raise InvalidInput(
        [FieldError("", "unknown extension; use .yaml, .yml, .json or .csv, or --input-format")]
    )


def read_nodes(text: str, fmt: str) -> tuple[list[LineSpec], list[FieldError]]:
    """Parse a whole file: ``(line, spec)`` per node, and the rows that are
    not even node specs (a CSV row with the wrong number of cells), as
    errors on ``line N``.

    :raises InvalidInput: when the file itself cannot be parsed (field
        ``line N``), or is not a list of nodes
    """
    if fmt == "csv":
        errors: list[FieldError] = []
        return list(_read_csv(text, errors)), errors
    if fmt == "json":
        return _read_json(text), []
    if fmt == "yaml":
        return _read_yaml(text), []
    raise ValueError(f"unknown format {fmt!r}")


# -- CSV --------------------------------------------------------------------------


def _read_csv(text: str, errors: list[FieldError]) -> Iterator[LineSpec]:
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        return
    columns = [column.strip() for column in header]
    unknown = [c for c in columns if c not in _CSV_FIELDS and not c.startswith(_PROPERTY_PREFIX)]
    if unknown:
        raise InvalidInput(
            [
                FieldError.about(
                    "line 1",
                    f"unknown column; use {sorted(_CSV_FIELDS)} or properties.<name>",
                    unknown[0],
                )
            ]
        )
    start = reader.line_num + 1
    try:
        for row in reader:
            line, start = start, reader.line_num + 1
            if not any(cell.strip() for cell in row):
                continue  # blank line
            if len(row) != len(columns):
                # Cells cannot be matched to columns: a row error of its own.
                reason = f"has {len(row)} cells, the header has {len(columns)}"
                errors.append(FieldError(f"line {line}", reason))
                continue
            yield line, _csv_spec(columns, row)
    except csv.Error as exc:
        raise InvalidInput([FieldError(f"line {reader.line_num}", f"bad CSV: {exc}")]) from None


def _csv_spec(columns: list[str], row: list[str]) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    properties: dict[str, Any] = {}
    for column, raw in zip(columns, row, strict=True):
        cell = raw.strip()
        if not cell:
            continue
        if column.startswith(_PROPERTY_PREFIX):
            properties[column[len(_PROPERTY_PREFIX) :]] = cell
        elif column == "capabilities":
            properties["capabilities"] = cell
        elif column == "traits":
            spec["traits"] = [t for t in _TRAIT_SEPARATORS.split(cell) if t]
        elif column == "maintenance":
            lowered = cell.lower()
            # Anything else is passed on as is: validation names it.
            spec["maintenance"] = True if lowered in _TRUE else False if lowered in _FALSE else cell
        else:
            spec[column] = cell
    if properties:
        spec["properties"] = properties
    return spec


# -- JSON -------------------------------------------------------------------------

_WHITESPACE = re.compile(r"[ \t\n\r]*")


class _JsonScanner:
    """Walks the top level of a JSON document, decoding one item at a time."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.decoder = json.JSONDecoder()
        self._line = 1
        self._line_pos = 0

    def line(self, pos: int) -> int:
        # Items come in order: count newlines incrementally, not from 0.
        self._line += self.text.count("\n", self._line_pos, pos)
        self._line_pos = pos
        return self._line

    def skip(self) -> str:
        match = _WHITESPACE.match(self.text, self.pos)
        assert match is not None
        self.pos = match.end()
        return self.text[self.pos : self.pos + 1]

    def expect(self, char: str) -> None:
        if self.skip() != char:
            self.fail(f"expected {char!r}")
        self.pos += 1

    def value(self) -> Any:
        self.skip()
        try:
            value, self.pos = self.decoder.raw_decode(self.text, self.pos)
        except json.JSONDecodeError as exc:
            raise InvalidInput([FieldError(f"line {exc.lineno}", f"bad JSON: {exc.msg}")]) from None
        return value

    def fail(self, reason: str) -> None:
        raise InvalidInput([FieldError(f"line {self.line(self.pos)}", f"bad JSON: {reason}")])

    def items(self) -> list[LineSpec]:
        """The ``(line, item)`` of the list that starts here."""
        self.expect("[")
        found: list[LineSpec] = []
        if self.skip() == "]":
            self.pos += 1
            return found
        while True:
            self.skip()
            line = self.line(self.pos)
            found.append((line, self.value()))
            following = self.skip()
            self.pos += 1
            if following == "]":
                return found
            if following != ",":
                self.pos -= 1
                self.fail("expected ',' or ']'")


def _read_json(text: str) -> list[LineSpec]:
    """A list of nodes, or an object whose ``nodes`` is that list."""
    scanner = _JsonScanner(text)
    first = scanner.skip()
    if first == "[":
        found = scanner.items()
    elif first == "{":
        scanner.pos += 1
        found = []
        while scanner.skip() != "}":
            key = scanner.value()
            scanner.expect(":")
            if key == "nodes":
                found = scanner.items()
            else:
                scanner.value()
            if scanner.skip() == ",":
                scanner.pos += 1
        scanner.pos += 1
    else:
        scanner.fail("expected a list of nodes, or an object with 'nodes'")
        return []
    if scanner.skip():
        scanner.fail("unexpected text after the nodes")
    return found


# -- YAML -------------------------------------------------------------------------

_LOADER: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _read_yaml(text: str) -> list[LineSpec]:
    """A sequence of nodes, or a mapping whose ``nodes`` is that sequence."""
    loader = _LOADER(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return []
        if isinstance(root, yaml.MappingNode):
            for key, value in root.value:
                if isinstance(key, yaml.ScalarNode) and key.value == "nodes":
                    root = value
                    break
        if not isinstance(root, yaml.SequenceNode):
            raise InvalidInput(
                [
                    FieldError(
                        f"line {root.start_mark.line + 1}",
                        "expected a list of nodes, or a mapping with 'nodes'",
                    )
                ]
            )
        return [
            (item.start_mark.line + 1, loader.construct_object(item, deep=True))
            for item in root.value
        ]
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}" if mark is not None else ""
        raise InvalidInput([FieldError(where, f"bad YAML: {exc.problem or exc}")]) from None
    except yaml.YAMLError as exc:
        raise InvalidInput([FieldError("", f"bad YAML: {exc}")]) from None
    finally:
        loader.dispose()
