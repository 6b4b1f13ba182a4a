# SPDX-License-Identifier: Apache-2.0
"""The Sphinx project in docs/: a man page for every command, and the
systemd units' ``Documentation=`` pages are the ones it builds.

tools/run-tests.sh builds the HTML and the man pages with ``-W``; these tests
check what a build cannot: that nothing installed lacks its page.
"""

from __future__ import annotations

import os
import re
import runpy
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
UNITS = REPO / "etc" / "systemd"

_MAN_REF = re.compile(r"^man:([\w.@-]+)\((\d)\)$")


def _man_pages() -> dict[str, int]:
    """conf.py's man_pages: page name -> section."""
    conf = runpy.run_path(str(DOCS / "conf.py"))
    pages: dict[str, int] = {}
    for source, name, _description, _authors, section in conf["man_pages"]:
        assert (DOCS / f"{source}.rst").is_file(), f"{name}: no docs/{source}.rst"
        pages[name] = section
    return pages


def _unit_man_refs() -> dict[str, list[str]]:
    """Unit file -> the man:NAME(SECTION) references of its Documentation=."""
    refs: dict[str, list[str]] = {}
    for unit in sorted(UNITS.glob("*.service")):
        for line in unit.read_text().splitlines():
            if line.startswith("Documentation="):
                refs.setdefault(unit.name, []).extend(line.partition("=")[2].split())
    return refs


def test_every_console_script_has_a_man_page() -> None:
    with (REPO / "pyproject.toml").open("rb") as f:
        scripts = set(tomllib.load(f)["project"]["scripts"])
    assert scripts, "pyproject.toml declares no console script"
    missing = sorted(scripts - set(_man_pages()))
    assert not missing, f"console scripts without a man page in docs/conf.py: {missing}"


def test_every_unit_documents_itself_with_a_man_page_that_is_built() -> None:
    pages = _man_pages()
    refs = _unit_man_refs()
    assert set(refs) == {u.name for u in UNITS.glob("*.service")}, "a unit has no Documentation="
    for unit, urls in refs.items():
        for url in urls:
            m = _MAN_REF.match(url)
            assert m, f"{unit}: Documentation={url} is not a man: page"
            name, section = m.group(1), int(m.group(2))
            assert pages.get(name) == section, f"{unit}: no {name}({section}) in docs/conf.py"


def test_systemd_finds_the_built_man_pages(tmp_path: Path) -> None:
    """``systemd-analyze verify --man=yes`` runs man(1) on every
    Documentation= page: it passes with the built pages on MANPATH."""
    tool, man = shutil.which("systemd-analyze"), shutil.which("man")
    if tool is None or man is None:
        pytest.skip("systemd-analyze or man is not installed")
    out = tmp_path / "man"
    built = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "man", str(DOCS), str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    units = tmp_path / "units"
    units.mkdir()
    for unit in UNITS.glob("*.service"):
        # verify insists that ExecStart's binary exists: point it at one that does.
        text = re.sub(r"/usr/bin/(ringfleet-[a-z-]+|gunicorn)", "/bin/true", unit.read_text())
        (units / unit.name).write_text(text)

    def verify(manpath: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [tool, "verify", "--man=yes", *sorted(str(p) for p in units.glob("*.service"))],
            env={**os.environ, "MANPATH": str(manpath)},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    found = verify(out)
    assert found.returncode == 0, found.stderr
    # The check can fail: an empty MANPATH has none of the pages.
    empty = tmp_path / "empty"
    empty.mkdir()
    not_found = verify(empty)
    assert not_found.returncode != 0 and "ringfleet-conductor(8)" in not_found.stderr
