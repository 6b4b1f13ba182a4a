# SPDX-License-Identifier: Apache-2.0
"""Import every module of an installed ringfleet; only an extra's may fail.

Run by ``tools/check-install.sh`` with the interpreter of a virtualenv that
holds ringfleet installed from its wheel *without extras*, from a directory
outside the repository (so that the installed modules are imported, not the
work tree's)::

    VENV/bin/python REPO/tools/check_imports.py REPO/pyproject.toml

A module may fail to import only if ``[tool.ringfleet.extra-modules]`` of
that pyproject.toml declares it, and its error must then name the extra to
install (``pip install 'ringfleet[keystone]'``).  A declared module that
imports after all is reported too: the declaration is stale.  Prints one
line per problem and exits 1 if there is any.
"""

from __future__ import annotations

import importlib
import sys
import tomllib
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

PACKAGES = ("hashring", "conductor", "compute_agent", "fleet_demo")

#: Scripts that Alembic runs, not modules anything imports: its environment
#: script reads Alembic's context, which exists only during a migration.
NOT_IMPORTABLE = ("conductor.db.migrations.env",)


def installed_modules() -> Iterator[str]:
    """The product modules of the installed ringfleet distribution."""
    for file in metadata.distribution("ringfleet").files or ():
        parts = file.parts
        if parts[0] in PACKAGES and file.suffix == ".py":
            name = ".".join((*parts[:-1], file.stem))
            yield name.removesuffix(".__init__")


def check(extra_modules: dict[str, str]) -> list[str]:
    """One line per module that failed as it must not (or imported as a
    declared one must not)."""
    problems = []
    count = 0
    for name in sorted(set(installed_modules())):
        if name in NOT_IMPORTABLE:
            continue
        count += 1
        extra = extra_modules.get(name)
        try:
            importlib.import_module(name)
        except Exception as exc:  # every failure is reported
            error = f"{type(exc).__name__}: {exc}"
            if extra is None:
                problems.append(f"{name}: {error}")
            elif not isinstance(exc, ImportError) or f"ringfleet[{extra}]" not in str(exc):
                problems.append(f"{name}: its error does not name the {extra!r} extra: {error}")
            continue
        if extra is not None:
            problems.append(f"{name}: imports without the {extra!r} extra it is declared to need")
    if count == 0:
        problems.append("no ringfleet module found: is ringfleet installed in this interpreter?")
    print(f"{count} ringfleet modules imported, {len(problems)} problems", file=sys.stderr)
    return problems


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} PYPROJECT", file=sys.stderr)
        return 2
    with Path(argv[1]).open("rb") as f:
        extra_modules = tomllib.load(f)["tool"]["ringfleet"]["extra-modules"]
    problems = check(extra_modules)
    for line in problems:
        print(f"check_imports: {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
