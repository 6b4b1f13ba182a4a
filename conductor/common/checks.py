# SPDX-License-Identifier: Apache-2.0
"""Checks of the RPC argument values both services take: uuids, names, epochs,
and lists of records validated whole.

The conductor's payload validation (:mod:`conductor.validation`) and the
agent's endpoints refuse a bad
value the same way, with an :class:`~conductor.common.exception.InvalidInput`
naming the field (design invariant 8, *bad input is refused whole*), so
these checks are shared rather than written twice.  Pure functions, no I/O.
"""

from __future__ import annotations

import re
import uuid as uuidlib
from collections.abc import Callable, Collection, Mapping
from typing import Any, Final, TypeVar

from conductor.common.exception import FieldError, InvalidInput

__all__ = [
    "MAX_EPOCH",
    "MAX_NAME_LENGTH",
    "MAX_NESTING",
    "NAME_PATTERN",
    "UUID_PATTERN",
    "UUID_REASON",
    "check_epoch",
    "check_list",
    "check_record",
    "check_text_everywhere",
    "collect",
    "looks_like_uuid",
    "name_problem",
    "normalized_uuid",
    "text_problem",
    "validate_name",
    "validate_uuid",
]

MAX_NAME_LENGTH: Final = 255
#: Matched with fullmatch(): "$" alone would accept a trailing newline.
NAME_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._:-]*$"
#: The largest epoch: the database stores it in a signed 32-bit column.
MAX_EPOCH: Final = 2**31 - 2

_NAME_RE: Final = re.compile(NAME_PATTERN)
#: A UUID: hyphenated or 32 hex digits, any case (matched with fullmatch()).
UUID_PATTERN: Final = (
    r"^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    r"|[0-9a-fA-F]{32})$"
)
_UUID_RE: Final = re.compile(UUID_PATTERN)
#: A UUID as normalized_uuid() writes it (most given ones are).
_NORMAL_UUID_RE: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
UUID_REASON: Final = "must be a UUID like 8-4-4-4-12 hex digits"

_T = TypeVar("_T")


def looks_like_uuid(value: str) -> bool:
    """A uuid in any form ``uuid.UUID`` accepts with 32 or 36 characters."""
    if len(value) not in (32, 36):
        return False
    try:
        uuidlib.UUID(value)
    except ValueError:
        return False
    return True


def normalized_uuid(value: object) -> str | None:
    """``value`` as a lower-case hyphenated UUID; None if it is no UUID
    (hyphenated or 32 hex digits, any case)."""
    if not isinstance(value, str):
        return None
    if _NORMAL_UUID_RE.fullmatch(value):
        return value  # what str(UUID(value)) would give, without parsing it (a 100k import)
    if _UUID_RE.fullmatch(value):
        return str(uuidlib.UUID(value))
    return None


def name_problem(value: object) -> str | None:
    """Why ``value`` is no node or flavor name (a field error's reason), or None."""
    if not isinstance(value, str):
        return "must be a string"
    if not 1 <= len(value) <= MAX_NAME_LENGTH:
        return f"must be 1 to {MAX_NAME_LENGTH} characters long"
    if not _NAME_RE.fullmatch(value):
        return f"must match {NAME_PATTERN}"
    if looks_like_uuid(value):
        # Nodes are looked up by name or uuid: a uuid-shaped name would make
        # one node answer to another's uuid.
        return "must not be a UUID (names and uuids share lookups)"
    return None


def validate_uuid(value: object, field: str) -> str:
    """A UUID (hyphenated or 32 hex digits, any case) as lower-case hyphenated.

    :raises InvalidInput: naming *field*
    """
    normalized = normalized_uuid(value)
    if normalized is None:
        raise InvalidInput([FieldError.about(field, UUID_REASON, value)])
    return normalized


def validate_name(value: object, field: str) -> str:
    """A node or flavor name: 1 to 255 of ``[A-Za-z0-9._:-]``, alphanumeric first.

    :raises InvalidInput: naming *field*
    """
    problem = name_problem(value)
    if problem is not None:
        raise InvalidInput([FieldError.about(field, problem, value)])
    assert isinstance(value, str)
    return value


def check_epoch(value: object, field: str) -> int:
    """An ownership epoch: an integer 0..:data:`MAX_EPOCH`.

    :raises InvalidInput: naming *field*
    """
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_EPOCH:
        raise InvalidInput([FieldError.about(field, f"must be an integer 0..{MAX_EPOCH}", value)])
    return value


def collect(*checks: Callable[[], Any]) -> list[Any]:
    """Run several field checks, raising one InvalidInput naming every bad field."""
    results: list[Any] = []
    errors: list[FieldError] = []
    for check in checks:
        try:
            results.append(check())
        except InvalidInput as exc:
            errors.extend(exc.errors)
            results.append(None)
    if errors:
        raise InvalidInput(errors)
    return results


def check_list(
    value: object,
    field: str,
    check_item: Callable[[object, str], _T],
    *,
    maximum: int,
    what: str,
    minimum: int = 0,
) -> list[_T]:
    """A list of *minimum*..*maximum* items, each checked by
    ``check_item(item, "field[i]")``; one refusal names every bad item's fields.

    :raises InvalidInput: naming *field* when the list itself is wrong, else
        every error of every item
    """
    if not isinstance(value, list) or not minimum <= len(value) <= maximum:
        bounds = f"{minimum}..{maximum}" if minimum else f"at most {maximum}"
        raise InvalidInput([FieldError.about(field, f"must be a list of {bounds} {what}", value)])
    errors: list[FieldError] = []
    checked: list[_T] = []
    for index, item in enumerate(value):
        try:
            checked.append(check_item(item, f"{field}[{index}]"))
        except InvalidInput as exc:
            errors += exc.errors
    if errors:
        raise InvalidInput(errors)
    return checked


def check_record(
    item: object,
    path: str,
    known: Collection[str],
    check_fields: Callable[[Mapping[Any, Any], str], _T],
) -> _T:
    """A mapping of the *known* keys only, its fields checked by
    ``check_fields(item, "path.")``.

    :raises InvalidInput: naming every bad field and every unknown one
    """
    if not isinstance(item, Mapping):
        raise InvalidInput([FieldError.about(path, "must be a mapping", item)])
    unknown = [
        FieldError(f"{path}.{key}", "unknown field")
        for key in sorted(map(str, item))
        if key not in known
    ]
    try:
        checked = check_fields(item, f"{path}.")
    except InvalidInput as exc:
        raise InvalidInput([*exc.errors, *unknown]) from None
    if unknown:
        raise InvalidInput(unknown)
    return checked


#: Control characters no string of the API may hold: C0 except tab, line
#: feed and carriage return (a fault text has lines), and DEL.  NUL reached
#: PostgreSQL and came back as a server error, or was stored in properties
#: and extra specs (issue 16).
_CONTROL_RE: Final = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
#: Lone surrogates (U+D800 to U+DFFF): what JSON's ``"\ud800"`` escape
#: decodes to, and no Unicode text.  PostgreSQL refused them in a text column
#: with a server error; a JSON column stored them and handed them back as
#: invalid Unicode (issue 28).
_SURROGATE_RE: Final = re.compile("[\ud800-\udfff]")
#: Either of the above.
_BAD_TEXT_RE: Final = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")
CONTROL_REASON: Final = "must not contain control characters"
SURROGATE_REASON: Final = "must not contain lone surrogates (\\ud800-\\udfff: not Unicode text)"
#: Deepest nesting of lists and mappings any argument may have (the deepest
#: legitimate one, a node spec's properties in an import, has 3).
MAX_NESTING: Final = 16
#: How many offending strings one refusal names.
_MAX_NAMED: Final = 20


def text_problem(text: str) -> str | None:
    """Why ``text`` may not be a string of the API (the reason to refuse it
    with), or None: no control character but tab, line feed and carriage
    return, no lone surrogate.

    The one text rule: the RPC server applies it to every argument of every
    call (:func:`check_text_everywhere`) and the HTTP API to every query
    value, path variable and body before it calls a conductor.
    """
    if _BAD_TEXT_RE.search(text) is None:  # one scan for the usual, clean case
        return None
    if _CONTROL_RE.search(text):
        return CONTROL_REASON
    return SURROGATE_REASON


def check_text_everywhere(arguments: dict[str, Any]) -> None:
    """The rule for every string of every RPC call, in one place.

    No key or value anywhere in ``arguments`` (mappings and lists walked to
    :data:`MAX_NESTING`) may break :func:`text_problem`.  Applied by the RPC
    server to each call before the method runs (:mod:`conductor.common.rpc`),
    so no method can forget it and nothing is changed by a refused call; the
    HTTP API applies it to what it is sent, with the fields of the request.

    :raises InvalidInput: naming each offending field by its path
        (``node.properties.rack``, ``node_uuids[3]``), at most 20
    """
    errors: list[FieldError] = []
    stack: list[tuple[str, Any, int]] = []
    # Strings are checked where they are found, and a path is made only for
    # a container to walk or a string to refuse: every call's arguments go
    # through here (an agent's ring of 100 members, a claim of 500 uuids),
    # and a path per string was most of the check's cost.
    _check_item(errors, stack, "", arguments, -1)
    while stack and len(errors) < _MAX_NAMED:
        path, value, depth = stack.pop()
        if depth >= MAX_NESTING:
            errors.append(FieldError(path, f"is nested deeper than {MAX_NESTING} levels"))
            continue
        _check_item(errors, stack, path, value, depth)
    if errors:
        errors.sort(key=lambda error: error.field)
        raise InvalidInput(errors)


def _check_item(
    errors: list[FieldError],
    stack: list[tuple[str, Any, int]],
    path: str,
    value: dict[Any, Any] | list[Any] | tuple[Any, ...],
    depth: int,
) -> None:
    """Check the strings of one container (its keys too) at ``path``; queue
    the containers in it (``depth``: the container's own; -1: the arguments)."""
    if isinstance(value, dict):
        for key in value:
            problem = text_problem(key) if isinstance(key, str) else None
            if problem is not None:
                errors.append(FieldError.about(path, "keys " + problem, key))
        items: Any = value.items()
        mapping = True
    else:
        items, mapping = enumerate(value), False
    for key, item in items:
        if len(errors) >= _MAX_NAMED:
            return
        if isinstance(item, str):
            problem = text_problem(item)
            if problem is not None:
                errors.append(FieldError.about(_path(path, key, mapping), problem, item))
        elif isinstance(item, (dict, list, tuple)):
            stack.append((_path(path, key, mapping), item, depth + 1))


def _path(path: str, key: Any, mapping: bool) -> str:
    """``node.properties`` for a mapping's key, ``node_uuids[3]`` for an index."""
    if not mapping:
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)
