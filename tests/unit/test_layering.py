# SPDX-License-Identifier: Apache-2.0
"""The import rule between ringfleet's packages, checked on every module's AST.

The layers, bottom up::

    hashring                imports nothing of ours
    conductor.common        hashring only: what both services share
    conductor, compute_agent
                            conductor.common and hashring; of the other
                            service only its RPC client (conductor.rpcapi
                            with conductor.rpcapi_agents and
                            conductor.rpcapi_labels, compute_agent.rpcapi)
    conductor.api           conductor.common, hashring, conductor.rpcapi and
                            itself: the HTTP API is a client of the
                            conductors, like the CLI (never their database)
    fleet_demo              anything: ``ringfleet demo`` runs both services in
                            one process; nothing else imports it

Across the layers, the database boundary: only ``conductor.db`` imports
SQLAlchemy or the table models (``conductor.db.models``); every other module
calls its query functions, which return data objects, so every SQL statement
(and the ownership fence in it) is in one package.

An RPC client is imported by the other service, so it imports nothing but
the shared layer itself: otherwise importing it would pull the rest of its
service into the other one.  Imports inside functions and ``TYPE_CHECKING``
blocks count too: the rule is about which code depends on which.

Within a package, the parts one level down (``conductor.db``,
``conductor.scheduler``, ``conductor.validation``, ``conductor.lifecycle``, ...)
import each other without a cycle: a part can be read, tested and changed
standing on the parts below it only.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("hashring", "conductor", "compute_agent", "fleet_demo")

#: Runs a conductor and agents in one process (the README's first command):
#: a package of its own, above both services.
DEMO = "fleet_demo"

#: The HTTP API service: a client of the conductors (see the module docstring).
API = "conductor.api"

#: The modules one service may import of the other (conductor.rpcapi_agents
#: and conductor.rpcapi_labels: bases of the conductor's client, in modules
#: of their own).
RPC_CLIENTS = (
    "conductor.rpcapi",
    "conductor.rpcapi_agents",
    "conductor.rpcapi_labels",
    "compute_agent.rpcapi",
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def our_modules() -> dict[str, Path]:
    """Every module of our packages, by dotted name."""
    return {
        module_name(path): path
        for package in PACKAGES
        for path in sorted((REPO / package).rglob("*.py"))
    }


MODULES = our_modules()


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def imported(module: str, source: str, is_package: bool = False) -> Iterator[tuple[int, str]]:
    """(line, module) of every import of ours in ``source``, of module ``module``.

    ``from a import b`` counts as an import of ``a.b`` when that is a module,
    else of ``a``; relative imports are resolved against ``module``.
    """
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".")
                if not is_package:
                    package.pop()
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, base] if base else package)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield node.lineno, full if full in MODULES else base


#: The database layer: the only importer of SQLAlchemy and of its models.
DB = "conductor.db"

#: What only the database layer imports.
DB_ONLY = ("sqlalchemy", "conductor.db.models")


def forbidden(importer: str, target: str) -> str | None:
    """Why ``importer`` may not import ``target`` (both dotted names), or None."""
    if any(_within(target, only) for only in DB_ONLY) and not _within(importer, DB):
        return "only conductor.db imports SQLAlchemy and the models"
    if not any(_within(target, package) for package in PACKAGES):
        return None  # the standard library or a third-party library
    if _within(importer, DEMO):
        return None
    if _within(importer, "hashring"):
        return None if _within(target, "hashring") else "hashring imports nothing of ours"
    shared = _within(target, "hashring") or _within(target, "conductor.common")
    if _within(importer, "conductor.common") or importer in RPC_CLIENTS:
        one_client = target in RPC_CLIENTS and _within(target, importer.partition(".")[0])
        if shared or (importer in RPC_CLIENTS and one_client):
            return None
        what = "conductor.common" if _within(importer, "conductor.common") else "an RPC client"
        return f"{what} imports only conductor.common and hashring"
    if _within(target, DEMO):
        return "only the demo imports both services, nothing imports the demo"
    if _within(importer, API) and not (
        shared or target == "conductor.rpcapi" or _within(target, API)
    ):
        return "conductor.api imports only conductor.common, conductor.rpcapi and itself"
    if shared or target in RPC_CLIENTS:
        return None
    own = "conductor" if _within(importer, "conductor") else "compute_agent"
    if _within(target, own):
        return None
    return f"{own} imports of the other service only its RPC client"


def violations(module: str, source: str, is_package: bool = False) -> list[str]:
    return [
        f"{module}:{line} imports {target}: {reason}"
        for line, target in imported(module, source, is_package)
        if (reason := forbidden(module, target)) is not None
    ]


def part(module: str) -> str | None:
    """The part of its package ``module`` belongs to (``conductor.db.nodes`` ->
    ``conductor.db``); None for a package itself."""
    names = module.split(".")
    return ".".join(names[:2]) if len(names) > 1 else None


def part_imports(sources: Mapping[str, tuple[str, bool]]) -> dict[tuple[str, str], list[str]]:
    """``(importer part, imported part) -> ["module:line imports target", ...]``
    for ``sources`` (module -> (source, is_package)), between different parts
    of one package."""
    found: dict[tuple[str, str], list[str]] = {}
    for module, (source, is_package) in sorted(sources.items()):
        here = part(module)
        for line, target in imported(module, source, is_package):
            there = part(target)
            if here and there and here != there and here.split(".")[0] == there.split(".")[0]:
                found.setdefault((here, there), []).append(f"{module}:{line} imports {target}")
    return found


def part_cycles(edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """The groups of parts that import each other in a cycle (strongly
    connected components of more than one part), each sorted."""
    graph: dict[str, set[str]] = {}
    for importer, target in edges:
        graph.setdefault(importer, set()).add(target)
        graph.setdefault(target, set())
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm; the graph has ~40 parts
        order[node] = low[node] = len(order)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in order:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], order[target])
        if low[node] == order[node]:
            group = [stack.pop()]
            while group[-1] != node:
                group.append(stack.pop())
            if len(group) > 1:
                cycles.append(sorted(group))

    for node in sorted(graph):
        if node not in order:
            visit(node)
    return sorted(cycles)


def test_no_import_cycle_between_the_parts_of_a_package() -> None:
    sources = {
        name: (path.read_text(), path.name == "__init__.py") for name, path in MODULES.items()
    }
    imports = part_imports(sources)
    cycles = part_cycles(imports)
    assert cycles == [], [
        f"{importer} -> {target}: {', '.join(where)}"
        for cycle in cycles
        for (importer, target), where in sorted(imports.items())
        if importer in cycle and target in cycle
    ]


def test_an_import_cycle_is_found() -> None:
    """The checker itself: validation -> scheduler -> db -> validation, the
    loop there was, is one cycle; the same parts without the back edge none."""
    loop = {
        "conductor.validation.flavor": ("from conductor.scheduler import capabilities", False),
        "conductor.scheduler.scheduler": ("from conductor.db import nodes", False),
        "conductor.db.nodes": ("from conductor.validation import NodeSpec", False),
        "conductor.builds": ("from conductor.db import nodes", False),
    }
    assert part_cycles(part_imports(loop)) == [
        ["conductor.db", "conductor.scheduler", "conductor.validation"]
    ]
    no_loop = {
        **loop,
        "conductor.validation.flavor": ("from conductor.common import checks", False),
    }
    assert part_cycles(part_imports(no_loop)) == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_respects_the_layers(module: str) -> None:
    path = MODULES[module]
    assert violations(module, path.read_text(), path.name == "__init__.py") == []


def test_the_layers_are_all_there() -> None:
    """The walk sees every package (a moved package would pass vacuously)."""
    for name in (
        "conductor.common",
        "conductor.common.rpc",
        "conductor.rpcapi",
        "compute_agent",
        "conductor.api.app",
        "fleet_demo.fleet",
    ):
        assert name in MODULES, name


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("compute_agent.service", "from conductor.db import engine"),
        ("compute_agent.service", "import conductor.service"),
        ("compute_agent.service", "from conductor import conf"),
        ("compute_agent.drivers.simulated.driver", "from conductor.scheduler import index"),
        ("conductor.lifecycle.routing", "from compute_agent.service import AgentService"),
        ("conductor.lifecycle.routing", "from fleet_demo import fleet"),
        ("compute_agent.service", "from fleet_demo import fleet"),
        ("conductor.common.rpc", "from conductor.exception import RingfleetError"),
        ("conductor.common.rpc", "from conductor import validation"),
        ("conductor.common.rpc", "from compute_agent.rpcapi import ComputeAPI"),
        ("conductor.common.conf", "from ... import validation"),
        ("conductor.rpcapi", "from conductor.db import engine"),
        ("compute_agent.rpcapi", "from compute_agent import service"),
        ("hashring.ring", "from conductor.common import rpc"),
        ("conductor.api.v1", "from conductor.db import engine"),
        ("conductor.api.app", "from conductor import validation"),
        ("conductor.api.wsgi", "from compute_agent.rpcapi import ComputeAPI"),
        ("conductor.endpoints.agents", "from sqlalchemy import select"),
        ("conductor.scheduler.source", "from sqlalchemy.orm import Session"),
        ("conductor.endpoints.fleet", "from conductor.db.models import utcnow"),
        ("conductor.scheduler.source", "from conductor.db import models"),
        ("conductor.service", "import sqlalchemy"),
        ("conductor.common.objects", "import sqlalchemy.engine"),
        ("compute_agent.service", "from sqlalchemy import create_engine"),
        ("hashring.ring", "import sqlalchemy"),
        ("fleet_demo.fleet", "from conductor.db.models import NodeModel"),
    ],
)
def test_a_forbidden_import_is_found(module: str, source: str) -> None:
    """The checker itself: each of these breaks the rule."""
    assert violations(module, source, module == "conductor.common.conf")


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("compute_agent.service", "from conductor.common import rpc, systemd"),
        ("compute_agent.service", "from conductor.rpcapi import ConductorAPI"),
        ("conductor.lifecycle.routing", "from compute_agent.rpcapi import ComputeAPI"),
        ("conductor.common.rpc", "from conductor.common.exception import RingfleetError"),
        ("conductor.common.conf.ring", "from hashring.ring import MAX_WEIGHT"),
        ("conductor.common.conf", "from . import coordination"),
        ("compute_agent.service", "from conductor.common.conf import placement"),
        ("conductor.api.wsgi", "from conductor.common import conf"),
        ("fleet_demo.fleet", "from conductor.service import ConductorService"),
        ("conductor.api.v1", "from conductor.rpcapi import ConductorAPI"),
        ("conductor.api.wsgi", "from conductor.common.prepare import prepare_service"),
        ("conductor.api.wsgi", "from conductor.api import v1"),
        ("conductor.db.nodes", "from sqlalchemy import select"),
        ("conductor.db.ownership", "from conductor.db.models import NodeModel"),
        ("conductor.db.migrations.env", "from sqlalchemy import pool"),
        ("conductor.endpoints.agents", "from conductor.db import node_pages, node_states"),
        ("conductor.scheduler.scheduler", "from conductor.common.clock import utcnow"),
    ],
)
def test_an_allowed_import_passes(module: str, source: str) -> None:
    assert violations(module, source, module == "conductor.common.conf") == []
