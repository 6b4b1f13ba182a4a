# SPDX-License-Identifier: Apache-2.0
"""The capability expressions of flavors, and how a node's capability matches one.

The language of Nova's ComputeCapabilitiesFilter
(``nova/scheduler/filters/extra_specs_ops.py``): flavor validation
(:mod:`conductor.validation.flavor`) parses it, and the scheduler evaluates
it (:class:`conductor.scheduler.filters.CapabilitiesFilter`).
:meth:`CapabilityExpression.matches` has exactly Nova's semantics, while
:func:`parse_capability_expression` refuses expressions Nova would accept
but that cannot mean what their author wanted (a missing or non-numeric
operand, extra words Nova silently ignores, ``s==uefi`` without the space).
It lives with validation, which imports nothing of the scheduler or the
database, so that both of those can import it and the validated types
without an import cycle.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Callable, Mapping
from typing import Final

from conductor.common.exception import FieldError, InvalidInput

__all__ = [
    "CAPABILITY_OPERATORS",
    "CapabilityExpression",
    "expression_or_reason",
    "parse_capability_expression",
    "stored_capabilities",
]

_NUMERIC_OPERATORS: Final = frozenset({"=", "==", "!=", ">=", "<="})
_STRING_OPERATORS: Final = frozenset({"s==", "s!=", "s>=", "s<=", "s>", "s<"})
_OR: Final = "<or>"
_IN: Final = "<in>"
_ALL_IN: Final = "<all-in>"
#: every operator a capability expression may start with
CAPABILITY_OPERATORS: Final = _NUMERIC_OPERATORS | _STRING_OPERATORS | {_IN, _ALL_IN, _OR}
# Longest first, to name the operator a glued word ("s==uefi") starts with.
_OPERATORS_BY_LENGTH: Final = sorted(CAPABILITY_OPERATORS, key=len, reverse=True)
# How each operator tests a node's value against the operands (Nova's
# semantics: "=" means "at least"; <or> compares whole words; <in> and
# <all-in> look for substrings; string operators compare lexically).
_TEXT_TESTS: Final[Mapping[str, Callable[[str, tuple[str, ...]], bool]]] = {
    _OR: lambda actual, operands: actual in operands,
    _ALL_IN: lambda actual, operands: all(word in actual for word in operands),
    _IN: lambda actual, operands: operands[0] in actual,
    "s==": lambda actual, operands: actual == operands[0],
    "s!=": lambda actual, operands: actual != operands[0],
    "s>=": lambda actual, operands: actual >= operands[0],
    "s<=": lambda actual, operands: actual <= operands[0],
    "s>": lambda actual, operands: actual > operands[0],
    "s<": lambda actual, operands: actual < operands[0],
}
_NUMBER_TESTS: Final[Mapping[str, Callable[[float, float], bool]]] = {
    "=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
    ">=": operator.ge,
    "<=": operator.le,
}


@dataclasses.dataclass(frozen=True, slots=True)
class CapabilityExpression:
    """A parsed flavor capability requirement (a ``capabilities:<key>`` value).

    :ivar op: the operator (one of :data:`CAPABILITY_OPERATORS`), or ``None``
        for a plain string that must equal the node's value exactly
    :ivar operands: the words after the operator: one for the comparison
        operators and ``<in>``, one or more for ``<all-in>``, the alternatives
        for ``<or>``, and the whole text for a plain string
    """

    op: str | None
    operands: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.op is not None and self.op not in CAPABILITY_OPERATORS:
            raise ValueError(f"unknown capability operator {self.op!r}")

    def matches(self, actual: str | None) -> bool:
        """Whether a node's capability value *actual* satisfies this requirement.

        Exactly the semantics of Nova's ``extra_specs_ops.match``, except that
        a non-numeric value for a numeric operator is ``False`` instead of an
        exception.  A node without the capability (``None``) never matches.
        """
        if actual is None or not self.operands:
            return False
        if self.op is None:
            return actual == self.operands[0]
        text_test = _TEXT_TESTS.get(self.op)
        if text_test is not None:
            return text_test(actual, self.operands)
        try:
            have, want = float(actual), float(self.operands[0])
        except ValueError:
            return False
        return _NUMBER_TESTS[self.op](have, want)

    def __str__(self) -> str:
        """The canonical text form, which parses back to an equal expression."""
        if self.op is None:
            return self.operands[0] if self.operands else ""
        if self.op == _OR:
            return f"{_OR} " + f" {_OR} ".join(self.operands)
        return " ".join((self.op, *self.operands))


def _plain_or_reason(text: str, first_word: str) -> CapabilityExpression | str:
    glued = next((op for op in _OPERATORS_BY_LENGTH if first_word.startswith(op)), None)
    if glued is not None:
        return f"operator {glued!r} must be followed by whitespace"
    if first_word in (">", "<"):
        return f"{first_word!r} is not an operator (use '{first_word}=' or 's{first_word}')"
    # As written, blanks included: node values keep theirs, and Nova compares both exactly.
    return CapabilityExpression(None, (text,))


def _alternatives_or_reason(operands: tuple[str, ...]) -> CapabilityExpression | str:
    alternatives, separators = operands[0::2], operands[1::2]
    if any(s != _OR for s in separators) or len(operands) % 2 == 0 or _OR in alternatives:
        return "must be '<or> a <or> b ...' with one word per alternative, none empty"
    if len(alternatives) < 2:
        return "'<or>' needs at least two alternatives"
    return CapabilityExpression(_OR, alternatives)


def _operands_problem(op: str, operands: tuple[str, ...]) -> str | None:
    if not operands:
        return f"operator {op!r} needs an operand"
    if op == _ALL_IN:
        return None
    if len(operands) > 1:
        return f"operator {op!r} takes exactly one word (Nova would ignore the rest)"
    if op in _NUMERIC_OPERATORS and not _is_finite_number(operands[0]):
        return f"operator {op!r} needs a finite number"
    return None


def _is_finite_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def expression_or_reason(text: str) -> CapabilityExpression | str:
    """The expression *text* means, or why it is refused (a sentence)."""
    words = text.split()
    if not words:
        return "must not be empty"
    op, operands = words[0], tuple(words[1:])
    if op not in CAPABILITY_OPERATORS:
        return _plain_or_reason(text, op)
    if op == _OR:
        return _alternatives_or_reason(operands)
    problem = _operands_problem(op, operands)
    return CapabilityExpression(op, operands) if problem is None else problem


def parse_capability_expression(text: object, *, field: str = "expression") -> CapabilityExpression:
    """Parse a flavor capability requirement (ComputeCapabilitiesFilter syntax).

    Either a plain string, matched exactly, or an operator, whitespace and
    its operands: ``= N`` (at least N), ``== N``, ``!= N``, ``>= N``,
    ``<= N`` (numeric), ``s== w``, ``s!= w``, ``s>= w``, ``s<= w``, ``s> w``,
    ``s< w`` (string), ``<in> w`` (substring), ``<all-in> w1 w2 ...`` (every
    word a substring), ``<or> a <or> b ...`` (one of at least two words).

    :raises InvalidInput: naming *field*: empty text, a missing, extra or
        (for numeric operators) non-numeric or non-finite operand, an operator
        glued to its operand, ``>``/``<``, or a plain value with surrounding
        whitespace (which no node capability value could equal)
    """
    if not isinstance(text, str):
        raise InvalidInput([FieldError.about(field, "must be a string", text)])
    result = expression_or_reason(text)
    if isinstance(result, str):
        raise InvalidInput([FieldError.about(field, result, text)])
    return result


def stored_capabilities(raw: object) -> dict[str, str]:
    """A stored node's ``properties["capabilities"]`` ("k1:v1,k2:v2"), parsed.

    As Nova's ironic driver reads it (and as it was validated when stored):
    each ``key:value`` item, the key stripped, the value as written.
    """
    capabilities: dict[str, str] = {}
    if isinstance(raw, str):
        for item in raw.split(","):
            key, sep, value = item.partition(":")
            key = key.strip()
            if sep and key and value:
                capabilities[key] = value
    return capabilities
