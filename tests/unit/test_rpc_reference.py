# SPDX-License-Identifier: Apache-2.0
"""The RPC reference stays true to the code.

``docs/rpc-reference.rst`` is generated from the RPC clients and endpoints
(``tools/gen_rpc_doc.py``) and must be current; the hand-written sections of
``docs/rpc-api.rst`` must document every method the code serves, with the
parameters it takes.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from tools import gen_rpc_doc

ROOT = Path(__file__).resolve().parents[2]
RPC_API = ROOT / "docs" / "rpc-api.rst"

#: Which part of rpc-api.rst documents each API by hand.
_PARTS = {"ConductorAPI": "Part 1:", "ComputeAPI": "Part 2:"}


def test_the_generated_reference_is_current() -> None:
    committed = (ROOT / "docs" / "rpc-reference.rst").read_text()
    assert committed == gen_rpc_doc.render(), (
        "docs/rpc-reference.rst is out of date; regenerate it with: "
        "python -m tools.gen_rpc_doc > docs/rpc-reference.rst"
    )


def test_rpc_api_includes_the_generated_reference() -> None:
    assert ".. include:: rpc-reference.rst" in RPC_API.read_text()


def _part(text: str, api: gen_rpc_doc.API) -> str:
    """The text of the part (``Part N: ...`` headings) that documents ``api``."""
    starts = [m.start() for m in re.finditer(r"^Part \d+:", text, re.MULTILINE)]
    start = next(m.start() for m in re.finditer(rf"^{_PARTS[api.client_class]}", text, re.M))
    return text[start : min([i for i in starts if i > start] or [len(text)])]


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        depth += char in "[({"
        depth -= char in "])}"
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [*parts, current] if current.strip() else parts


def _documented_params(section: str, name: str) -> set[str]:
    """The parameter names of every ``name(...)`` signature of a section's literal block."""
    found: set[str] = set()
    for match in re.finditer(rf"^    {name}\(", section, re.MULTILINE):
        depth, end = 1, match.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(section[end], 0)
            end += 1
        inside = " ".join(section[match.end() : end - 1].split())
        found |= {re.split(r"[:=]", p)[0].strip() for p in _split_top_level(inside)}
    return found


@pytest.mark.parametrize("api", gen_rpc_doc.APIS, ids=lambda api: api.client_class)
def test_every_method_has_a_hand_written_section_with_its_parameters(
    api: gen_rpc_doc.API,
) -> None:
    part = _part(RPC_API.read_text(), api)
    problems = []
    for method in gen_rpc_doc.methods(api):
        title = re.search(rf"^{method.name}\n-{{{len(method.name)}}}\n", part, re.MULTILINE)
        if title is None:
            problems.append(f"{method.name}: no section in {_PARTS[api.client_class]}")
            continue
        following = re.search(r"^\S.*\n[-=]{3,}\n", part[title.end() :], re.MULTILINE)
        section = part[title.end() : title.end() + (following.start() if following else None)]
        params = {p.split(":")[0] for p in method.params}
        documented = _documented_params(section, method.name)
        if documented != params:
            problems.append(
                f"{method.name}: documented {sorted(documented)}, code {sorted(params)}"
            )
    assert not problems, "docs/rpc-api.rst disagrees with the code:\n" + "\n".join(problems)


@pytest.mark.parametrize("api", gen_rpc_doc.APIS, ids=lambda api: api.client_class)
def test_the_service_serves_endpoints_at_the_clients_version(api: gen_rpc_doc.API) -> None:
    """What the reference reads as endpoints: the service's, all at one version."""
    version = importlib.import_module(api.client_module).API_VERSION
    endpoints = gen_rpc_doc.endpoint_classes(api)
    assert endpoints
    assert {cls.target.version for cls in endpoints} == {version}


def test_a_client_call_without_an_endpoint_is_found() -> None:
    api = gen_rpc_doc.APIS[1]
    # A module that imports no endpoint: every call of the client lacks one.
    broken = gen_rpc_doc.API(api.title, api.client_module, api.client_class, "json", False)
    with pytest.raises(LookupError, match="no endpoint"):
        gen_rpc_doc.methods(broken)
