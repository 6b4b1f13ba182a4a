# SPDX-License-Identifier: Apache-2.0
"""What the product code imports is what pyproject.toml declares.

A plain ``pip install ringfleet`` gets ``[project] dependencies`` and what
they pull in, nothing else; the project's virtualenv has every extra, so a
missing declaration never shows there.  These checks read every product
module's AST (imports inside functions too) and hold three rules:

* every library imported is declared *directly*, in ``dependencies`` or in
  an extra: a library that only happens to come with another one (requests
  with openstacksdk) may be dropped by it in any release;
* a library of an extra only is imported where its feature is used (inside
  a function, or in a module declared in ``[tool.ringfleet.extra-modules]``
  for that extra), so that a plain install imports every other module;
* every declared dependency is used: imported somewhere, or named in
  :data:`USED_WITHOUT_IMPORT` with what uses it.

``tools/check-install.sh`` proves the same on a real plain install, in CI.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("hashring", "conductor", "compute_agent", "fleet_demo")

#: Declared dependencies no ``import`` statement names, and what uses each.
USED_WITHOUT_IMPORT = {
    "etcd3gw": "tooz's etcd3+http:// driver ([coordination] backend_url)",
    "psycopg2-binary": "SQLAlchemy's postgresql+psycopg2 dialect ([database] connection)",
    "pastedeploy": "ringfleet-api loads api-paste.ini (paste.deploy, imported by name)",
    "paste": "api-paste.ini's urlmap (/healthcheck beside the API)",
    "oslo-middleware": "api-paste.ini's filters (healthcheck, CORS, request ids)",
    "pymysql": "SQLAlchemy's mysql+pymysql dialect (the mysql extra)",
    "gunicorn": "the WSGI server of the systemd unit (the api-server extra)",
    "sphinx": "building docs/ (the docs extra)",
    "reno": "the release notes (the docs extra)",
    "build": "building the sdist (the docs extra)",
    "redis": "tooz's redis:// driver (the redis extra)",
    "nova": "imported by name from [scheduler] enabled_filters (the nova-filters extra)",
}

#: Extras that are not runtime features: test and development tools.
DEVELOPMENT_EXTRAS = ("test", "docs")


def _name(requirement: str) -> str:
    """The canonical distribution name of a requirement string."""
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group()).lower()


def _pyproject() -> dict[str, object]:
    with (REPO / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)


def declared() -> tuple[set[str], dict[str, set[str]]]:
    """``dependencies`` and each runtime extra's own requirements (not
    other extras of ringfleet it includes)."""
    project = _pyproject()["project"]
    assert isinstance(project, dict)
    extras = {
        extra: {_name(r) for r in requirements if _name(r) != "ringfleet"}
        for extra, requirements in project["optional-dependencies"].items()
        if extra not in DEVELOPMENT_EXTRAS
    }
    return {_name(r) for r in project["dependencies"]}, extras


def extra_modules() -> dict[str, str]:
    """Modules declared as importable only with their extra."""
    tool = _pyproject()["tool"]
    assert isinstance(tool, dict)
    return dict(tool["ringfleet"]["extra-modules"])


def _module(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports() -> Iterator[tuple[str, str, bool]]:
    """(module, top-level name imported, whether at module level) of every
    absolute import in the product code."""
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            yield from _imports_of(_module(path), tree)


def _imports_of(module: str, tree: ast.Module) -> Iterator[tuple[str, str, bool]]:
    lazy: set[int] = set()
    for node in ast.walk(tree):
        function = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        if function or (isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)):
            lazy.update(id(n) for n in ast.walk(node))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            yield module, name.split(".")[0], id(node) not in lazy


def _distributions() -> dict[str, set[str]]:
    """Top-level import name -> the canonical names of the distributions
    that install it (in this environment, which has every extra)."""
    return {
        top: {_name(dist) for dist in dists}
        for top, dists in metadata.packages_distributions().items()
    }


def third_party_imports() -> Iterator[tuple[str, str, set[str], bool]]:
    """(module, top-level name, its distributions, module level) of every
    import that is not the standard library's or ours."""
    distributions = _distributions()
    for module, top, module_level in imports():
        if top in sys.stdlib_module_names or top in PACKAGES or top == "__future__":
            continue
        yield module, top, distributions.get(top, set()), module_level


def test_every_imported_library_is_declared_directly() -> None:
    dependencies, extras = declared()
    everything = dependencies.union(*extras.values())
    undeclared = sorted(
        f"{module}: import {top} (from {', '.join(sorted(dists)) or 'nothing installed'})"
        for module, top, dists, _ in third_party_imports()
        if not dists & everything
    )
    assert undeclared == [], "not declared in pyproject.toml:\n" + "\n".join(undeclared)


def test_a_library_of_an_extra_is_imported_only_where_its_feature_is_used() -> None:
    dependencies, extras = declared()
    declared_modules = extra_modules()
    misplaced = []
    for module, top, dists, module_level in third_party_imports():
        if not module_level or dists & dependencies:
            continue
        needed = sorted(extra for extra, names in extras.items() if dists & names)
        if needed and declared_modules.get(module) not in needed:
            misplaced.append(f"{module}: import {top} needs {' or '.join(needed)}")
    assert misplaced == [], (
        "imported at module level without its extra (import it inside the function "
        "that uses it, or declare the module in [tool.ringfleet.extra-modules]):\n"
        + "\n".join(sorted(misplaced))
    )


def test_every_declared_dependency_is_used() -> None:
    dependencies, extras = declared()
    imported = set().union(*(dists for _, _, dists, _ in third_party_imports()))
    unused = sorted(
        name
        for name in dependencies.union(*extras.values())
        if name not in imported and name not in USED_WITHOUT_IMPORT
    )
    assert unused == [], f"declared but never imported nor listed in USED_WITHOUT_IMPORT: {unused}"


@pytest.mark.parametrize("module", sorted(extra_modules()))
def test_a_declared_extra_module_exists_and_names_a_runtime_extra(module: str) -> None:
    _, extras = declared()
    path = REPO.joinpath(*module.split("."))
    assert path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()
    assert extra_modules()[module] in extras


def test_the_rules_see_a_missing_declaration() -> None:
    # The checks above are only as good as the import scan: a module-level
    # and a lazy import of real libraries are both found, with their
    # distributions.
    tree = ast.parse("import yaml\ndef f():\n    from keystonemiddleware import auth_token\n")
    found = {(top, level) for _, top, level in _imports_of("m", tree)}
    assert found == {("yaml", True), ("keystonemiddleware", False)}
    distributions = _distributions()
    assert "pyyaml" in distributions["yaml"]
    assert "keystonemiddleware" in distributions["keystonemiddleware"]
