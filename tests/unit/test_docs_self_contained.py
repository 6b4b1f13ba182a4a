# SPDX-License-Identifier: Apache-2.0
"""The project stands alone: what it cites is in the repository.

Design notes and measured facts once lived in files outside the repository
(they do not ship), and comments and docs cited them, or even a path on a
build machine.  Everything a reader needs is in ``docs/`` now; these tests
keep it so:

* no tracked file cites one of those outside files or an absolute path of a
  build machine (the names are assembled below, so this file does not match
  itself);
* every ``docs/<name>.rst`` mentioned anywhere exists;
* every "invariant N" cited anywhere is one of the numbered invariants of
  ``docs/architecture.rst`` (section "The invariants", items ``N. **Name.**``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Files outside the repository that nothing may cite, and build-machine paths.
_OUTSIDE = re.compile(
    "|".join(
        (
            re.escape("DESIGN" + ".md"),
            re.escape("DEPENDENCY" + "-FACTS"),
            re.escape("IRONIC" + "-FACTS"),
            # an absolute path into the build machine's top-level "work" directory,
            # not the middle of a longer path or of a URL
            r"(?<![\w.:/-])/" + "work/",
            re.escape("../" + "shared"),
        )
    )
)

#: Tracked files that are test data rather than project text (none yet).
_FIXTURE_DIRS = ("tests/fixtures/", "tests/unit/fixtures/", "tests/functional/fixtures/")

_DOC_MENTION = re.compile(r"\bdocs/([\w.-]+\.rst)\b")
_INVARIANT_CITE = re.compile(r"\binvariants?\s+(\d+)(?:\s+and\s+(\d+))?", re.IGNORECASE)
_NUMBERED_INVARIANT = re.compile(r"^(\d+)\.\s+\*\*", re.MULTILINE)


def _tracked_text_files() -> list[tuple[str, str]]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    out = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z"],
        check=True,
        capture_output=True,
    ).stdout.decode()
    files: list[tuple[str, str]] = []
    for name in out.split("\0"):
        if not name or name.startswith(_FIXTURE_DIRS):
            continue
        path = ROOT / name
        if not path.is_file():
            continue  # deleted in the work tree, not yet committed
        data = path.read_bytes()
        if b"\0" in data:
            continue  # binary
        files.append((name, data.decode("utf-8", errors="replace")))
    return files


def test_no_citation_of_files_outside_the_repository() -> None:
    problems = [
        f"{name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
        for name, text in _tracked_text_files()
        for m in _OUTSIDE.finditer(text)
    ]
    assert not problems, "cites what does not ship:\n" + "\n".join(problems)


def test_every_mentioned_doc_exists() -> None:
    missing = sorted(
        f"{name}: docs/{doc}"
        for name, text in _tracked_text_files()
        for doc in _DOC_MENTION.findall(text)
        if not (ROOT / "docs" / doc).is_file()
    )
    assert not missing, "mentions docs that do not exist:\n" + "\n".join(missing)


def _numbered_invariants() -> set[int]:
    """The numbers of the invariants: the list items ``N. **Name.**``."""
    text = (ROOT / "docs" / "architecture.rst").read_text()
    return {int(n) for n in _NUMBERED_INVARIANT.findall(text)}


def test_every_cited_invariant_is_numbered_in_the_docs() -> None:
    numbered = _numbered_invariants()
    assert numbered, "docs/architecture.rst numbers no invariant"
    assert numbered == set(range(1, len(numbered) + 1)), numbered
    bad = sorted(
        f"{name}: invariant {n}"
        for name, text in _tracked_text_files()
        for m in _INVARIANT_CITE.finditer(text)
        for n in m.groups()
        if n is not None and int(n) not in numbered
    )
    assert not bad, "cites invariants docs/architecture.rst does not number:\n" + "\n".join(bad)
