# SPDX-License-Identifier: Apache-2.0
"""Every option has one home: ``conductor/common/conf/``, one module per group.

Checked on the source of every product module: an option (an oslo.config
``*Opt``) or an option group (``OptGroup``) defined anywhere else is a second
home; a group defined in two modules of the home, or a module defining two
groups, breaks "one module per group"; a group module whose ``OPTIONS`` no
namespace of ``opts.py`` holds would be registered by nobody and missing
from the sample.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from conductor.common.conf import opts

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("hashring", "conductor", "compute_agent", "fleet_demo")
HOME = REPO / "conductor" / "common" / "conf"

#: oslo.config's option classes that are not options of the configuration
#: file: a command's sub-commands (``ringfleet-dbsync upgrade``,
#: ``ringfleet-status upgrade check``), parsed from its command line only.
COMMAND_LINE_ONLY = ("SubCommandOpt",)


def _is_definition(name: str) -> bool:
    return (name.endswith("Opt") or name == "OptGroup") and name not in COMMAND_LINE_ONLY


def definitions(source: str) -> Iterator[tuple[int, str, str | None]]:
    """(line, class, first argument if a literal) of every option or option
    group that ``source`` constructs, however oslo.config was imported."""
    tree = ast.parse(source)
    modules = set()  # names bound to oslo_config.cfg
    classes = {}  # names bound to one of its classes -> the class
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "oslo_config":
            modules |= {alias.asname or alias.name for alias in node.names if alias.name == "cfg"}
        elif isinstance(node, ast.ImportFrom) and node.module == "oslo_config.cfg":
            classes |= {alias.asname or alias.name: alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "oslo_config.cfg":
                    modules.add(alias.asname or "oslo_config.cfg")
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and ast.unparse(func.value) in modules:
            name = func.attr
        elif isinstance(func, ast.Name) and func.id in classes:
            name = classes[func.id]
        else:
            continue
        if _is_definition(name):
            first = node.args[0] if node.args else None
            literal = first.value if isinstance(first, ast.Constant) else None
            yield node.lineno, name, literal if isinstance(literal, str) else None


def product_modules() -> Iterator[Path]:
    for package in PACKAGES:
        yield from sorted((REPO / package).rglob("*.py"))


def test_no_option_is_defined_outside_the_home() -> None:
    elsewhere = [
        f"{path.relative_to(REPO)}:{line}: {name}({literal or ''!r})"
        for path in product_modules()
        if HOME not in path.parents
        for line, name, literal in definitions(path.read_text())
    ]
    assert elsewhere == [], "options belong in conductor/common/conf/, one module per group"


def _groups_by_module() -> dict[str, list[str]]:
    """Each module of the home -> the option groups it defines (by literal name)."""
    found = {}
    for path in sorted(HOME.glob("*.py")):
        source = path.read_text()
        groups = [literal for _, name, literal in definitions(source) if name == "OptGroup"]
        # [DEFAULT] has no OptGroup: its module's OPTIONS has no group.
        if "GroupOptions(None," in source:
            groups.append("DEFAULT")
        found[path.stem] = [group for group in groups if group is not None]
    return found


def test_each_group_has_one_module_and_each_module_one_group() -> None:
    by_module = _groups_by_module()
    assert {module: groups for module, groups in by_module.items() if len(groups) > 1} == {}
    modules_of: dict[str, list[str]] = {}
    for module, groups in by_module.items():
        for group in groups:
            modules_of.setdefault(group, []).append(module)
    assert {group: found for group, found in modules_of.items() if len(found) > 1} == {}
    # The walk saw the home (a moved package would pass vacuously).
    assert {"DEFAULT", "coordination", "conductor", "compute_agent", "api"} <= set(modules_of)


def test_every_group_module_is_in_exactly_one_namespace() -> None:
    listed = [options for namespace in opts.NAMESPACES for options in namespace.groups]
    names = [options.name for options in listed]
    assert len(names) == len(set(names)), names
    for module, groups in _groups_by_module().items():
        if not groups:
            continue  # the machinery: groups.py, opts.py, keystoneauth.py, __init__
        options = importlib.import_module(f"conductor.common.conf.{module}").OPTIONS
        assert options in listed, f"{module}.OPTIONS is in no namespace of opts.py"
        assert options.name == groups[0], module


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("from oslo_config import cfg\nX = cfg.StrOpt('x')\n", [(2, "StrOpt", "x")]),
        ("from oslo_config import cfg as c\nG = c.OptGroup('g')\n", [(2, "OptGroup", "g")]),
        ("from oslo_config.cfg import IntOpt as I\nX = [I('n')]\n", [(2, "IntOpt", "n")]),
        ("import oslo_config.cfg\nX = oslo_config.cfg.Opt(name)\n", [(2, "Opt", None)]),
        ("from oslo_config import cfg\nX = cfg.SubCommandOpt('command')\n", []),
        ("from oslo_config import cfg\nconf = cfg.ConfigOpts()\n", []),
        ("from argparse import ArgumentParser\nX = ArgumentParser()\n", []),
    ],
)
def test_the_checker_finds_each_way_of_defining_an_option(
    source: str, found: list[tuple[int, str, str | None]]
) -> None:
    assert list(definitions(source)) == found
