# SPDX-License-Identifier: Apache-2.0
"""The field-level rules every client payload shares: one value, one error list.

The patterns and limits are those of the resources' schemas
(:mod:`conductor.common.schemas`).  The resource modules
(:mod:`~conductor.validation.node`,
:mod:`~conductor.validation.flavor`, :mod:`~conductor.validation.build`)
walk a payload with these checks.  Each takes the value, its field path and
the payload's :class:`Errors`, records what is wrong and returns the
normalized value or ``None``: errors are collected, not raised, so one
refusal names every bad field (and a 100,000-node import raises no
exception per entry).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

from conductor.common.checks import UUID_REASON, name_problem, normalized_uuid, text_problem
from conductor.common.exception import FieldError, InvalidInput, render_value
from conductor.common.schemas import (
    CAPABILITY_KEY_PATTERN,
    GROUP_PATTERN,
    MAX_TRAITS,
    RESOURCE_CLASS_PATTERN,
    TRAIT_PATTERN,
)

__all__ = [
    "CAPABILITY_KEY_PATTERN",
    "CAPABILITY_KEY_RE",
    "GROUP_PATTERN",
    "MAX_TRAITS",
    "RESOURCE_CLASS_PATTERN",
    "TRAIT_PATTERN",
    "TRAIT_RE",
    "Errors",
    "check_bool",
    "check_choice",
    "check_display_name",
    "check_group",
    "check_name",
    "check_resource_class",
    "check_traits",
    "check_uuid",
    "join",
    "key_text",
    "optional_field",
    "required_field",
    "unknown_fields",
    "whole_number",
]

# The patterns of conductor.common.schemas, matched with fullmatch(): "$"
# alone would accept a trailing newline.
_RESOURCE_CLASS_RE: Final = re.compile(RESOURCE_CLASS_PATTERN)
TRAIT_RE: Final = re.compile(TRAIT_PATTERN)
_GROUP_RE: Final = re.compile(GROUP_PATTERN)
CAPABILITY_KEY_RE: Final = re.compile(CAPABILITY_KEY_PATTERN)
# C0 controls and DEL: they break log lines and table output.
_CONTROL_RE: Final = re.compile(r"[\x00-\x1f\x7f]")

_NO_VALUE: Final = object()

_T = TypeVar("_T")
_E = TypeVar("_E", bound=enum.Enum)


class Errors:
    """The field errors found so far in one payload."""

    __slots__ = ("items",)

    def __init__(self) -> None:
        self.items: list[FieldError] = []

    def add(self, field: str, reason: str, value: object = _NO_VALUE) -> None:
        if value is _NO_VALUE:
            self.items.append(FieldError(field, reason))
        else:
            self.items.append(FieldError.about(field, reason, value))

    def __len__(self) -> int:
        return len(self.items)

    def raise_if_any(self) -> None:
        if self.items:
            raise InvalidInput(self.items)


Check = Callable[[object, str, Errors], _T | None]


def whole_number(value: object) -> int | None:
    """``value`` as an integer, or None: JSON's ``3`` or ``3.0`` (JSON Schema's
    integers include a number whose fraction is zero), never a boolean."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def key_text(key: object) -> str:
    """A key as it appears in a field path: as is, unless empty, long or not a string."""
    if isinstance(key, str) and 0 < len(key) <= 80:
        return key
    return render_value(key)


def join(path: str, key: object) -> str:
    text = key_text(key)
    return f"{path}.{text}" if path else text


def unknown_fields(
    spec: Mapping[Any, Any], allowed: frozenset[str], prefix: str, errors: Errors
) -> None:
    for key in spec:
        if key not in allowed:
            errors.add(prefix + key_text(key), "unknown field")


def required_field(
    spec: Mapping[Any, Any], key: str, prefix: str, errors: Errors, check: Check[_T]
) -> _T | None:
    value = spec.get(key)
    field = prefix + key
    if value is None:
        errors.add(field, "is required")
        return None
    return check(value, field, errors)


def optional_field(
    spec: Mapping[Any, Any], key: str, prefix: str, errors: Errors, check: Check[_T]
) -> _T | None:
    value = spec.get(key)
    if value is None:
        return None
    return check(value, prefix + key, errors)


def check_choice(
    value: object, field: str, errors: Errors, choices: tuple[_E, ...], default: _E
) -> _E | None:
    if value is None:
        return default
    if isinstance(value, str):
        for choice in choices:
            if value == choice.value:
                return choice
    errors.add(field, f"must be one of {', '.join(repr(c.value) for c in choices)}", value)
    return None


def check_name(value: object, field: str, errors: Errors) -> str | None:
    problem = name_problem(value)
    if problem is not None:
        errors.add(field, problem, value)
        return None
    assert isinstance(value, str)
    return value


def check_uuid(value: object, field: str, errors: Errors) -> str | None:
    normalized = normalized_uuid(value)
    if normalized is None:
        errors.add(field, UUID_REASON, value)
    return normalized


def _check_pattern(
    value: object, field: str, errors: Errors, regex: re.Pattern[str], pattern: str
) -> str | None:
    if not isinstance(value, str):
        errors.add(field, "must be a string", value)
    elif not regex.fullmatch(value):
        errors.add(field, f"must match {pattern}", value)
    else:
        return value
    return None


def check_resource_class(value: object, field: str, errors: Errors) -> str | None:
    return _check_pattern(value, field, errors, _RESOURCE_CLASS_RE, RESOURCE_CLASS_PATTERN)


def check_group(value: object, field: str, errors: Errors) -> str | None:
    return _check_pattern(value, field, errors, _GROUP_RE, GROUP_PATTERN)


def _check_trait(value: object, field: str, errors: Errors) -> str | None:
    return _check_pattern(value, field, errors, TRAIT_RE, TRAIT_PATTERN)


def check_traits(value: object, field: str, errors: Errors) -> frozenset[str] | None:
    if value is None:
        return frozenset()
    if not isinstance(value, (list, tuple)):
        errors.add(field, "must be a list of trait names", value)
        return None
    if len(value) > MAX_TRAITS:
        errors.add(field, f"must have at most {MAX_TRAITS} traits", len(value))
        return None
    seen: set[str] = set()
    ok = True
    for i, trait in enumerate(value):
        item = f"{field}[{i}]"
        if _check_trait(trait, item, errors) is None:
            ok = False
        elif trait in seen:
            errors.add(item, "duplicate trait", trait)
            ok = False
        else:
            seen.add(trait)
    return frozenset(seen) if ok else None


def check_bool(value: object, field: str, errors: Errors) -> bool | None:
    if isinstance(value, bool):
        return value
    errors.add(field, "must be true or false", value)
    return None


def check_display_name(
    value: object, field: str, errors: Errors, max_length: int, note: str = ""
) -> str | None:
    if not isinstance(value, str):
        errors.add(field, "must be a string", value)
    elif not 1 <= len(value) <= max_length:
        errors.add(field, f"must be 1 to {max_length} characters long{note}", value)
    elif value != value.strip():
        errors.add(field, "must not start or end with whitespace", value)
    elif _CONTROL_RE.search(value):
        errors.add(field, "must not contain control characters", value)
    elif (problem := text_problem(value)) is not None:
        errors.add(field, problem, value)
    else:
        return value
    return None
