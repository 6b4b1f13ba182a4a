# SPDX-License-Identifier: Apache-2.0
"""Generate ``docs/rpc-reference.rst``: the RPC method reference, from the code.

For each of the two RPC APIs (conductor, compute agent) it reads the
reference client (``conductor/rpcapi.py``, ``compute_agent/rpcapi.py``: the
version, the version history of the module docstring, the methods in order
with their annotations and docstrings) and the endpoint classes its service
serves (``conductor/service.py``, ``compute_agent/service.py``: parameter
names and defaults, return annotations, docstrings), and
writes one entry per RPC method: its signature with the wire types, the
versions that added or changed it, the version the reference client sends,
the endpoint that serves it and the docstrings' prose.  ``docs/rpc-api.rst``
includes the file; ``tests/unit/test_rpc_reference.py`` fails when the
committed file differs from what this prints.

Regenerate (from the repository root)::

    python -m tools.gen_rpc_doc > docs/rpc-reference.rst

Only signatures and docstrings are read, never the validation code: what a
method checks is documented in ``docs/rpc-api.rst`` and in the docstrings.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
import sys
import textwrap
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

# First: it keeps eventlet out of the process (conductor.common.native_threads).
import conductor  # noqa: F401

# isort: split
from oslo_messaging import Target

__all__ = ["API", "APIS", "RpcMethod", "endpoint_classes", "methods", "render"]

#: Sphinx roles in docstrings, shown as literals (plain docutils has none).
_ROLE = re.compile(r":(?:class|func|meth|mod|attr|exc|data|obj):`~?([^`]+)`")
#: A version history item of an rpcapi module docstring: ``* 1.N - text``.
_HISTORY_ITEM = re.compile(r"^\* (\d+\.\d+) - ", re.MULTILINE)
#: A group comment of a client class: ``# -- nodes ----``.
_GROUP = re.compile(r"^\s*# -- (\w[\w ]*?) -+\s*$")


@dataclasses.dataclass(frozen=True)
class API:
    """One RPC API: its title, client module and class, and the service serving it.

    The endpoints are the classes with an oslo.messaging ``target`` that the
    service module imports to serve them, wherever they are defined.
    """

    title: str
    client_module: str
    client_class: str
    service_module: str
    target_server_arg: bool  # the client's first argument names the server


APIS = (
    API(
        "Conductor RPC API",
        "conductor.rpcapi",
        "ConductorAPI",
        "conductor.service",
        target_server_arg=False,
    ),
    API(
        "Compute agent RPC API",
        "compute_agent.rpcapi",
        "ComputeAPI",
        "compute_agent.service",
        target_server_arg=True,
    ),
)


@dataclasses.dataclass
class RpcMethod:
    """What the reference says of one RPC method."""

    name: str
    group: str
    endpoint: str  # "module.Class"
    params: list[str]  # "name: type = default"
    returns: str
    clients: list[str] = dataclasses.field(default_factory=list)  # client method names
    sent_at: set[str] = dataclasses.field(default_factory=set)  # versions the client sends
    prose: list[str] = dataclasses.field(default_factory=list)


def _clean(doc: str | None) -> str:
    return _ROLE.sub(r"``\1``", inspect.cleandoc(doc)) if doc else ""


def history(module: ModuleType) -> list[tuple[str, str]]:
    """The ``(version, text)`` items of the module docstring's version history."""
    doc = inspect.getdoc(module) or ""
    _, _, tail = doc.partition("API version history:")
    starts = list(_HISTORY_ITEM.finditer(tail))
    items = []
    for i, match in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(tail)
        text = " ".join(tail[match.end() : end].split())
        items.append((match.group(1), text))
    return items


def _calls(func: Callable[..., Any]) -> Iterator[tuple[str, str]]:
    """``(rpc method, version)`` of every ``self._call(...)`` (or ``self._cast``,
    a fanout) in a client method."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in {"_call", "_cast"}
        ):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant)]
        name = next((n for n in names if isinstance(n, str)), None)
        if name is None:
            continue
        versions = ["1.0"]
        for keyword in node.keywords:
            if keyword.arg == "version":
                # "1.25" if <a newer argument> else "1.19": both are sent.
                value = keyword.value
                branches = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
                versions = [_version_of(func, branch) for branch in branches]
        for version in versions:
            yield name, version


def _version_of(func: Callable[..., Any], value: ast.expr) -> str:
    """The version a ``version=`` argument names: a string, or a module's
    named version (``DEPLOY_SPEC_VERSION = "1.2"``); else 1.0."""
    if isinstance(value, ast.Constant):
        return str(value.value)
    if isinstance(value, ast.Name):
        return str(func.__globals__.get(value.id, "1.0"))
    return "1.0"


def _groups(cls: type) -> dict[str, str]:
    """Each client method's group, from the ``# -- group --`` comments above it
    (in the class and its bases)."""
    found: dict[str, str] = {}
    for klass in cls.__mro__[:-1]:
        group = ""
        for line in inspect.getsourcelines(klass)[0]:
            match = _GROUP.match(line)
            if match:
                group = match.group(1).strip().capitalize()
                continue
            method = re.match(r"\s+def (\w+)\(", line)
            if method:
                found.setdefault(method.group(1), group)
    return found


def _type_of(param: inspect.Parameter, client: inspect.Parameter | None) -> str:
    if client is not None and client.annotation is not inspect.Parameter.empty:
        return str(client.annotation)
    if param.default not in (inspect.Parameter.empty, None):
        return type(param.default).__name__
    return "Any"


def endpoint_classes(api: API) -> list[type]:
    """The endpoint classes the service module of ``api`` imports, by name."""
    service = importlib.import_module(api.service_module)
    return sorted(
        (
            obj
            for obj in vars(service).values()
            if isinstance(obj, type) and isinstance(getattr(obj, "target", None), Target)
        ),
        key=lambda cls: cls.__qualname__,
    )


def _endpoint_methods(api: API) -> dict[str, tuple[str, Callable[..., Any]]]:
    found: dict[str, tuple[str, Callable[..., Any]]] = {}
    for cls in endpoint_classes(api):
        for name, func in inspect.getmembers(cls, inspect.isfunction):
            params = list(inspect.signature(func).parameters)
            if name.startswith("_") or params[:2] != ["self", "ctxt"]:
                continue
            assert name not in found, f"{name} served by two endpoints of {api.title}"
            found[name] = (f"{cls.__module__}.{cls.__qualname__}", func)
    return found


def methods(api: API) -> list[RpcMethod]:
    """Every RPC method of ``api``, in the order of its client's methods.

    Raises ``LookupError`` naming a client call no endpoint serves, or an
    endpoint method no client calls.
    """
    client_cls = getattr(importlib.import_module(api.client_module), api.client_class)
    served = _endpoint_methods(api)
    groups = _groups(client_cls)
    result: dict[str, RpcMethod] = {}
    # The client's own methods, then its bases' (a base module holds some).
    functions: dict[str, Any] = {}
    for klass in client_cls.__mro__[:-1]:
        for name, func in klass.__dict__.items():
            functions.setdefault(name, func)
    for client_name, func in functions.items():
        if client_name.startswith("_") or not inspect.isfunction(func):
            continue
        client_params = inspect.signature(func).parameters
        for rpc_name, version in _calls(func):
            if rpc_name not in served:
                raise LookupError(f"{api.client_class}.{client_name} calls {rpc_name}: no endpoint")
            if rpc_name not in result:
                endpoint, handler = served[rpc_name]
                signature = inspect.signature(handler)
                params = []
                for pname, param in list(signature.parameters.items())[2:]:
                    text = f"{pname}: {_type_of(param, client_params.get(pname))}"
                    if param.default is not inspect.Parameter.empty:
                        text += f" = {param.default!r}"
                    params.append(text)
                result[rpc_name] = RpcMethod(
                    rpc_name,
                    groups.get(client_name, ""),
                    endpoint,
                    params,
                    str(signature.return_annotation),
                    prose=[_clean(handler.__doc__)],
                )
            entry = result[rpc_name]
            entry.sent_at.add(version)
            if client_name not in entry.clients:
                entry.clients.append(client_name)
                doc = _clean(func.__doc__)
                entry.prose.append(
                    doc if client_name == rpc_name or not doc else f"``{client_name}``: {doc}"
                )
    unused = sorted(set(served) - set(result))
    if unused:
        raise LookupError(f"{api.title}: no method of {api.client_class} calls {unused}")
    return list(result.values())


def _versions(name: str, items: list[tuple[str, str]]) -> str:
    word = re.compile(rf"\b{re.escape(name)}\b")
    found = [version for version, text in items if word.search(text)]
    if not found:
        return "not in the version history"
    text = f"since {found[0]}"
    if len(found) > 1:
        text += "; changed in " + ", ".join(found[1:])
    return text


def _sort_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _indent(text: str, prefix: str = "    ") -> list[str]:
    return [prefix + line if line else "" for line in text.splitlines()]


def _api_lines(api: API) -> list[str]:
    module = importlib.import_module(api.client_module)
    items = history(module)
    title = f"{api.title}: methods"
    lines = [title, "=" * len(title), ""]
    intro = (
        f"Version ``{module.API_VERSION}`` (``{api.client_module}.API_VERSION``), "
        f"client ``{api.client_module}.{api.client_class}``."
    )
    if api.target_server_arg:
        intro += (
            f"  The client's first argument, ``host``, names the agent called "
            f"(``{api.client_class}`` prepares the call with ``server=host``); it is "
            "not an argument of the method."
        )
    lines += [*textwrap.wrap(intro, 76), ""]
    heading = f"{api.title}: version history"
    lines += [heading, "-" * len(heading), ""]
    for version, text in items:
        lines += textwrap.wrap(
            f"* {version} - {_clean(text)}", 76, subsequent_indent="  ", break_on_hyphens=False
        )
    lines.append("")
    group = None
    for method in methods(api):
        if method.group != group:
            group = method.group
            heading = f"{api.title}: {group.lower()}" if group else f"{api.title}: every method"
            lines += [heading, "-" * len(heading), ""]
        signature = f"{method.name}({', '.join(method.params)}) -> {method.returns}"
        lines += [f"``{signature}``"]
        sent = ", ".join(sorted(method.sent_at, key=_sort_key))
        clients = ", ".join(f"``{api.client_class}.{c}``" for c in method.clients)
        summary = (
            f"*{_versions(method.name, items).capitalize()}.*  Served by "
            f"``{method.endpoint}``; called by {clients} at {sent}."
        )
        lines += textwrap.wrap(summary, 76, initial_indent="    ", subsequent_indent="    ")
        for prose in method.prose:
            if prose:
                lines += ["", *_indent(prose)]
        lines.append("")
    return lines


def render() -> str:
    """The whole of ``docs/rpc-reference.rst``."""
    lines = [
        ".. Generated by tools/gen_rpc_doc.py from the RPC clients and endpoints:",
        "   do not edit.  Regenerate with",
        "   python -m tools.gen_rpc_doc > docs/rpc-reference.rst",
        "",
    ]
    for api in APIS:
        lines += _api_lines(api)
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
