# SPDX-License-Identifier: Apache-2.0
"""The size rule of the product code, checked on every module's AST.

Every module of ``hashring``, ``conductor`` and ``compute_agent`` has at most
:data:`MAX_MODULE_LINES` lines, and every function and method (nested ones
too) at most :data:`MAX_FUNCTION_LINES`, counted from its ``def`` line to its
last line, docstring and comments included (decorators not).  A module or a
function past its limit is split: a module along its seams into modules of
its package (re-exported where others import it), a function into named
steps.

:data:`EXCEPTIONS` lists what is over a limit today, each with its size when
it was listed as the most it may have, and why it is not split yet.  The list
is a ratchet: it can only shrink.  An excepted entry that grows past its
listed size fails, as does one that is back within the limit or gone (remove
it from the list then, so that it cannot silently grow again); a new entry
is a reviewed change of this file.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("hashring", "conductor", "compute_agent", "fleet_demo")

MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 80

#: What is over a limit, by ``path`` (a module) or ``path::qualified.name``
#: (a function): (its size when listed, the most it may have; why it is not
#: split yet).  Only ever shrinks (see the module docstring).
EXCEPTIONS: Mapping[str, tuple[int, str]] = {}


def sizes(label: str, source: str) -> dict[str, int]:
    """The lines of the module ``source`` (named ``label``) and of each of its
    functions, by ``label`` and ``label::qualified.name``."""
    found = {label: len(source.splitlines())}
    tree = ast.parse(source, label)

    def visit(node: ast.AST, prefix: str) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                yield from visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                assert child.end_lineno is not None
                yield f"{prefix}{child.name}", child.end_lineno - child.lineno + 1
                yield from visit(child, f"{prefix}{child.name}.")
            else:
                yield from visit(child, prefix)

    for name, lines in visit(tree, ""):
        found[f"{label}::{name}"] = max(lines, found.get(f"{label}::{name}", 0))
    return found


def limit(key: str) -> int:
    return MAX_FUNCTION_LINES if "::" in key else MAX_MODULE_LINES


def problems(measured: Mapping[str, int], exceptions: Mapping[str, tuple[int, str]]) -> list[str]:
    """What breaks the rule in ``measured`` (sizes by key, as :func:`sizes`
    gives them, of the whole product code) with ``exceptions``."""
    found = []
    for key, lines in sorted(measured.items()):
        allowed = exceptions[key][0] if key in exceptions else limit(key)
        if key not in exceptions and lines > allowed:
            found.append(
                f"{key}: {lines} lines, over the limit of {allowed}: split it "
                "(or, reviewed, add it to EXCEPTIONS with its size and why)"
            )
        elif key in exceptions and lines > allowed:
            found.append(f"{key}: {lines} lines, grew past its excepted {allowed}: split it")
        elif key in exceptions and lines <= limit(key):
            found.append(
                f"{key}: {lines} lines, within the limit of {limit(key)}: remove it from EXCEPTIONS"
            )
    found.extend(
        f"{key}: excepted, but there is no such module or function: remove it from EXCEPTIONS"
        for key in sorted(exceptions.keys() - measured.keys())
    )
    return found


def product_modules() -> dict[str, Path]:
    """Every module of the product packages, by its path from the repository."""
    return {
        path.relative_to(REPO).as_posix(): path
        for package in PACKAGES
        for path in sorted((REPO / package).rglob("*.py"))
    }


def measure_product() -> dict[str, int]:
    """The sizes of the whole product code (a fresh dict of a cached walk)."""
    return dict(_measure_product())


@functools.cache
def _measure_product() -> Mapping[str, int]:
    measured: dict[str, int] = {}
    for label, path in product_modules().items():
        measured.update(sizes(label, path.read_text(encoding="utf-8")))
    return measured


def test_product_code_within_the_size_limits() -> None:
    found = problems(measure_product(), EXCEPTIONS)
    assert not found, "\n".join(found)


def test_the_walk_sees_the_product_code() -> None:
    """A moved package would pass vacuously."""
    measured = measure_product()
    for key in (
        "hashring/ring.py",
        "conductor/scheduler/nova.py",
        "compute_agent/ownership.py::OwnershipManager._reconcile",
        "fleet_demo/__init__.py",
    ):
        assert key in measured, key
    assert len(product_modules()) > 100


def test_each_exception_says_why_in_one_line() -> None:
    for key, (lines, why) in EXCEPTIONS.items():
        assert lines > limit(key), key
        assert why.strip() and "\n" not in why, key


# -- the checker itself -------------------------------------------------------------


def _function(name: str, lines: int, indent: str = "") -> str:
    """Source of a function of exactly ``lines`` lines."""
    body = [f"{indent}    x = {i}" for i in range(lines - 2)]
    return "\n".join([f"{indent}def {name}() -> None:", f'{indent}    """Doc."""', *body]) + "\n"


def _class(name: str, *methods: str) -> str:
    return f"class {name}:\n" + "".join(methods)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (_function("f", 80), {"m.py::f": 80}),
        (_function("f", 81), {"m.py::f": 81}),
        (_class("C", _function("run", 81, "    ")), {"m.py::C.run": 81}),
        (
            _function("outer", 3) + _class("D", _function("m", 4, "    ")),
            {"m.py::outer": 3, "m.py::D.m": 4},
        ),
        (
            "def outer() -> None:\n" + _function("inner", 81, "    "),
            {"m.py::outer": 82, "m.py::outer.inner": 81},
        ),
        ("async " + _function("f", 90), {"m.py::f": 90}),
        ("@decorated\n" + _function("f", 80), {"m.py::f": 80}),
    ],
)
def test_functions_are_measured_def_to_last_line(source: str, expected: dict[str, int]) -> None:
    measured = sizes("m.py", source)
    assert measured.pop("m.py") == len(source.splitlines())
    assert measured == expected


@pytest.mark.parametrize(
    ("measured", "exceptions", "complaint"),
    [
        ({"m.py": 701}, {}, "m.py: 701 lines, over the limit of 700"),
        ({"m.py": 10, "m.py::f": 81}, {}, "m.py::f: 81 lines, over the limit of 80"),
        ({"m.py": 10, "m.py::f": 91}, {"m.py::f": (90, "why")}, "grew past its excepted 90"),
        ({"m.py": 702}, {"m.py": (701, "why")}, "m.py: 702 lines, grew past its excepted 701"),
        ({"m.py": 10, "m.py::f": 80}, {"m.py::f": (90, "why")}, "within the limit of 80"),
        ({"m.py": 700}, {"m.py": (710, "why")}, "within the limit of 700"),
        ({"m.py": 10}, {"m.py::f": (90, "why")}, "m.py::f: excepted, but there is no such"),
        ({"m.py": 10}, {"gone.py": (710, "why")}, "gone.py: excepted, but there is no such"),
    ],
)
def test_a_breach_is_found(
    measured: dict[str, int], exceptions: dict[str, tuple[int, str]], complaint: str
) -> None:
    (found,) = problems(measured, exceptions)
    assert complaint in found


@pytest.mark.parametrize(
    ("measured", "exceptions"),
    [
        ({"m.py": 700, "m.py::f": 80}, {}),
        ({"m.py": 10, "m.py::f": 90}, {"m.py::f": (90, "why")}),
        ({"m.py": 10, "m.py::f": 85}, {"m.py::f": (90, "why")}),  # shrinking is fine
        ({"m.py": 705}, {"m.py": (710, "why")}),
    ],
)
def test_what_keeps_the_rule_passes(
    measured: dict[str, int], exceptions: dict[str, tuple[int, str]]
) -> None:
    assert problems(measured, exceptions) == []


def test_a_long_function_in_a_product_module_is_found() -> None:
    """The whole check, on the product code with one function grown past the limit."""
    measured = measure_product()
    label = "compute_agent/__init__.py"
    path = product_modules()[label]
    grown = path.read_text(encoding="utf-8") + "\n\n" + _function("_too_long", 81)
    measured.update(sizes(label, grown))
    assert problems(measured, EXCEPTIONS) == [
        f"{label}::_too_long: 81 lines, over the limit of 80: split it "
        "(or, reviewed, add it to EXCEPTIONS with its size and why)"
    ]
